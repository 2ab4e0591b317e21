//! A control VM's channel to armhv as the VM holds it: the lines (answers, events) waiting
//! for the guest to read them. The device that delivers them is
//! `emulate::control_channel`.

use crate::sync::Lock;
use addr::Ipa;
use alloc::collections::VecDeque;
use alloc::sync::Arc;

/// Most bytes of answers and events waiting for the guest to read them.
pub const ANSWERS_CAP: usize = 16 << 10;

/// Lines waiting for the guest.
#[derive(Default)]
pub struct Answers {
    bytes: VecDeque<u8>,
    /// Lines dropped because the guest did not read the earlier ones.
    pub dropped: u64,
}

impl Answers {
    /// Queues `line` (one JSON object and its `\n`) whole, or drops it whole.
    pub fn push(&mut self, line: &str) {
        if self.bytes.len() + line.len() > ANSWERS_CAP {
            self.dropped += 1;
            return;
        }
        self.bytes.extend(line.as_bytes());
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The waiting bytes, in order, as two slices.
    pub fn as_slices(&self) -> (&[u8], &[u8]) {
        self.bytes.as_slices()
    }

    /// The first `n` bytes were delivered.
    pub fn drain(&mut self, n: usize) {
        self.bytes.drain(..n);
    }

    /// Forgets what waits (the guest's driver was reset).
    pub fn clear(&mut self) {
        self.bytes.clear();
    }
}

/// A control VM's channel as the VM holds it: its slot, and the lines waiting for it.
pub struct ControlPort {
    pub slot: Ipa,
    pub answers: Arc<Lock<Answers>>,
}
