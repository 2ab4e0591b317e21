//! virtio-rng, the entropy device (virtio 1.x §5.4).
//!
//! One queue; every buffer the driver posts is device-writable and the
//! device fills it from an [`EntropySource`], a small piece at a time
//! through a buffer of its own. The hypervisor chooses the source (`RNDR` where the CPU has it,
//! a counter-based generator otherwise): this crate never decides what
//! counts as random.

use alloc::boxed::Box;

use crate::device::{DeviceStats, VirtioDevice, device_id};
use crate::error::VirtioError;
use crate::queue::{BYTES_PER_UNIT, DescChain, Queue};
use crate::ram::GuestRam;

/// Where entropy comes from. Any `FnMut(&mut [u8]) + Send` closure is one.
pub trait EntropySource: Send {
    /// Fills `buf` entirely.
    fn fill(&mut self, buf: &mut [u8]);
}

impl<F: FnMut(&mut [u8]) + Send> EntropySource for F {
    fn fill(&mut self, buf: &mut [u8]) {
        self(buf)
    }
}

/// The entropy device.
pub struct Rng {
    source: Box<dyn EntropySource>,
    chain: DescChain,
    /// Where entropy is generated before it is copied into guest memory (kept, not zeroed on
    /// every request).
    scratch: [u8; Self::PIECE],
    stats: DeviceStats,
}

impl Rng {
    /// `QueueNumMax` of the request queue.
    pub const QUEUE_SIZE: u16 = 64;
    /// Most bytes given for one request: the spec lets the device return
    /// fewer than asked, and a bound keeps one request from holding the CPU.
    pub const MAX_REQUEST: u32 = 64 * 1024;
    /// Bytes generated at a time before they are copied into guest memory.
    const PIECE: usize = 256;
    /// Entropy bytes per unit of a round's work ([`crate::queue::ROUND_WORK`]):
    /// generating a byte costs some instructions, copying one a fraction of one.
    pub const BYTES_PER_UNIT: u64 = 64;

    pub fn new(source: impl EntropySource + 'static) -> Self {
        Self {
            source: Box::new(source),
            chain: DescChain::new(),
            scratch: [0; Self::PIECE],
            stats: DeviceStats::default(),
        }
    }
}

impl VirtioDevice for Rng {
    fn device_id(&self) -> u32 {
        device_id::ENTROPY
    }

    fn name(&self) -> &'static str {
        "virtio-rng"
    }

    fn features(&self) -> u64 {
        0
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[Self::QUEUE_SIZE]
    }

    fn read_config(&self, _offset: u64, _data: &mut [u8]) {
        // No configuration space.
    }

    fn process(
        &mut self,
        queue: usize,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        let Some(q) = queues.get_mut(queue) else {
            return Ok(());
        };
        while q.pop(ram, &mut self.chain)? {
            // Device-readable buffers are ignored: there is nothing to read.
            // A short answer is a valid one (§5.4.6): a chain gets what the round's work
            // still allows, and at least one piece.
            let affordable = u64::from(q.work_left()) * Self::BYTES_PER_UNIT;
            let n = self
                .chain
                .writable_len()
                .min(Self::MAX_REQUEST)
                .min(affordable.max(Self::PIECE as u64) as u32);
            // Generated in a small buffer of the device's own, then copied:
            // the source never sees guest memory itself.
            let mut at = 0;
            while at < n as usize {
                let piece = &mut self.scratch[..(n as usize - at).min(Self::PIECE)];
                self.source.fill(piece);
                self.chain.write_at(ram, at as u64, piece)?;
                at += piece.len();
            }
            q.charge_bytes(u64::from(n) * (BYTES_PER_UNIT / Self::BYTES_PER_UNIT));
            q.add_used(ram, self.chain.head(), n)?;
            self.stats.requests += 1;
            self.stats.bytes_to_guest += u64::from(n);
        }
        Ok(())
    }

    fn reset(&mut self) {
        // The scratch chain grows to the longest chain seen: released with the driver.
        self.chain = DescChain::new();
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
