//! Delays on the virtual counter (CNTVCT_EL0 at CNTFRQ_EL0 Hz).

/// CNTVCT_EL0, with `isb` on both sides so the read is neither hoisted above
/// earlier instructions nor overtaken by later ones.
pub fn counter() -> u64 {
    let value: u64;
    // SAFETY: reading the virtual count has no side effects; EL1 may always read it.
    unsafe {
        core::arch::asm!("isb", "mrs {v}, cntvct_el0", "isb", v = out(reg) value, options(nomem, nostack))
    };
    value
}

/// CNTFRQ_EL0: the counter frequency in Hz, as firmware (or the hypervisor) set it.
pub fn frequency() -> u64 {
    let value: u64;
    // SAFETY: reading CNTFRQ_EL0 has no side effects.
    unsafe { core::arch::asm!("mrs {v}, cntfrq_el0", v = out(reg) value, options(nomem, nostack)) };
    assert!(value != 0, "CNTFRQ_EL0 is 0");
    value
}

/// Counter ticks in `ms` milliseconds.
pub fn ms_to_ticks(ms: u64) -> u64 {
    ms.saturating_mul(frequency()) / 1000
}

/// Whole milliseconds in `ticks` counter ticks.
pub fn ticks_to_ms(ticks: u64) -> u64 {
    ticks.saturating_mul(1000) / frequency()
}

/// True once the counter has reached `deadline` (wrap-safe).
/// Counter ticks to microseconds (rounded down).
pub fn ticks_to_us(ticks: u64) -> u64 {
    (u128::from(ticks) * 1_000_000 / u128::from(frequency())) as u64
}

pub fn passed(deadline: u64) -> bool {
    counter().wrapping_sub(deadline) as i64 >= 0
}

/// Busy-waits `ms` milliseconds (keeps the vCPU running, on purpose).
pub fn spin_ms(ms: u64) {
    let start = counter();
    let ticks = ms_to_ticks(ms);
    while counter().wrapping_sub(start) < ticks {
        core::hint::spin_loop();
    }
}

/// Turns on the EL1 event stream: an event about every 2^16 counter ticks
/// (1 ms at 62.5 MHz), so `wfe` loops wake up to check their timeouts.
pub fn enable_event_stream() {
    const EVNTEN: u64 = 1 << 2;
    const EVNTI_SHIFT: u64 = 4; // CNTKCTL_EL1.EVNTI: counter bit that triggers events
    const EVNTI_MASK: u64 = 0xf << EVNTI_SHIFT;
    let mut cntkctl: u64;
    // SAFETY: CNTKCTL_EL1 only controls EL0 counter access and the event stream.
    unsafe {
        core::arch::asm!("mrs {v}, cntkctl_el1", v = out(reg) cntkctl, options(nomem, nostack));
        cntkctl = (cntkctl & !EVNTI_MASK) | EVNTEN | (15 << EVNTI_SHIFT);
        core::arch::asm!("msr cntkctl_el1, {v}", "isb", v = in(reg) cntkctl, options(nomem, nostack));
    }
}
