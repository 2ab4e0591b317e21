//! A VM's network interface as its network sees it: the port it has on the network's switch
//! and its outbox, where the frames its guest sent wait until the trap that sent them has
//! released the VM's device lock (`emulate::network` then forwards them).

use crate::sync::Lock;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use virtio::{GuestBytes, PartialCsum};

/// Frames a NIC may have waiting for the switch, and their bytes: a guest sends frames of up to
/// 64 KiB, and a ring's worth of them (256) would be 16 MiB, the whole heap. Beyond either
/// bound frames are dropped, as by a switch port whose buffer is full.
const OUTBOX_FRAMES: usize = 256;
const OUTBOX_BYTES: usize = 256 << 10;

/// A NIC's frames waiting for the switch, each with the checksum its sender left to the
/// device (completed, if at all, by the receiving NIC).
#[derive(Default)]
pub struct Outbox {
    queue: VecDeque<(Vec<u8>, Option<PartialCsum>)>,
    bytes: usize,
    /// Frames dropped because the outbox was full.
    dropped: u64,
}

impl Outbox {
    /// Copies a sent frame out of the guest's buffers (the one copy on its way to the switch).
    pub fn push(&mut self, frame: GuestBytes<'_>, csum: Option<PartialCsum>) {
        if self.queue.len() >= OUTBOX_FRAMES || self.bytes + frame.len() > OUTBOX_BYTES {
            self.dropped += 1;
            return;
        }
        // Never fails: the device checked the chain's buffers lie in RAM.
        let Ok(frame) = frame.to_vec() else {
            self.dropped += 1;
            return;
        };
        self.bytes += frame.len();
        self.queue.push_back((frame, csum));
    }

    pub fn pop(&mut self) -> Option<(Vec<u8>, Option<PartialCsum>)> {
        let (frame, csum) = self.queue.pop_front()?;
        self.bytes -= frame.len();
        Some((frame, csum))
    }
}

pub struct NicPort {
    /// The network's index and this NIC's port on its switch.
    pub network: usize,
    pub port: usize,
    pub outbox: Arc<Lock<Outbox>>,
}

impl NicPort {
    /// Frames dropped because its outbox was full.
    pub fn outbox_dropped(&self) -> u64 {
        self.outbox.lock().dropped
    }

    /// Drops the frames not yet forwarded, with the outbox's memory (its VM reset or stopped).
    pub fn clear_outbox(&self) {
        let mut outbox = self.outbox.lock();
        let dropped = outbox.dropped;
        *outbox = Outbox { dropped, ..Outbox::default() };
    }
}
