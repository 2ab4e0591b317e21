//! Time since boot, from the architected physical counter.

use aarch64_cpu::registers::{CNTFRQ_EL0, CNTPCT_EL0, Readable};

pub fn uptime_micros() -> u64 {
    let freq = CNTFRQ_EL0.get().max(1);
    let ticks = CNTPCT_EL0.get();
    ((ticks as u128 * 1_000_000) / freq as u128) as u64
}
