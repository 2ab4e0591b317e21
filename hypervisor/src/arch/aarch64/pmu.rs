//! The PMU's cycle counter, for benchmark VMs (`pmu = true`) and for armhv's own world-switch
//! breakdown (feature `ws-breakdown`). Under QEMU with `-icount shift=0` it counts one per
//! instruction at every exception level, which makes path lengths exact.

/// PMCR_EL0.N: event counters this CPU implements (MDCR_EL2.HPMN hands all of them to a VM).
pub fn event_counters() -> u64 {
    let pmcr: u64;
    // SAFETY: reading PMCR_EL0 at EL2 has no side effects.
    unsafe { core::arch::asm!("mrs {}, pmcr_el0", out(reg) pmcr, options(nomem, nostack)) };
    (pmcr >> 11) & 0x1f
}

/// The cycle counter now. The `isb` keeps the read from moving across the code being timed.
#[inline(always)]
pub fn cycles() -> u64 {
    let v: u64;
    // SAFETY: reading PMCCNTR_EL0 at EL2 has no side effects.
    unsafe { core::arch::asm!("isb", "mrs {}, pmccntr_el0", out(reg) v, options(nomem, nostack)) };
    v
}

/// Starts the 64-bit cycle counter, counting at EL2 too (PMCCFILTR_EL0.NSH).
pub fn enable_cycle_counter() {
    const PMCR_E: u64 = 1 << 0;
    const PMCR_LC: u64 = 1 << 6;
    const PMCNTEN_C: u64 = 1 << 31;
    const PMCCFILTR_NSH: u64 = 1 << 27;
    // SAFETY: programming this CPU's PMU affects only what its counters count.
    unsafe {
        core::arch::asm!(
            "mrs {t}, pmcr_el0",
            "orr {t}, {t}, {e}",
            "msr pmcr_el0, {t}",
            "msr pmcntenset_el0, {c}",
            "msr pmccfiltr_el0, {f}",
            "isb",
            t = out(reg) _,
            e = in(reg) PMCR_E | PMCR_LC,
            c = in(reg) PMCNTEN_C,
            f = in(reg) PMCCFILTR_NSH,
            options(nostack),
        );
    }
}
