//! Time since boot, from the architected physical counter.

use crate::arch::aarch64::timer;

pub fn uptime_micros() -> u64 {
    let freq = timer::frequency();
    let ticks = timer::now();
    ((ticks as u128 * 1_000_000) / freq as u128) as u64
}
