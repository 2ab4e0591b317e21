//! The generic timer as armhv uses it: its own EL2 physical timer (CNTHP) for scheduling and
//! software timers, and the live state of the loaded guest's virtual timer (CNTV).

use aarch64_cpu::registers::{CNTFRQ_EL0, CNTPCT_EL0, CNTV_CTL_EL0, Readable};

/// CNTx_CTL bits.
const CTL_ENABLE: u64 = 1 << 0;
const CTL_IMASK: u64 = 1 << 1;
const CTL_ISTATUS: u64 = 1 << 2;

pub fn now() -> u64 {
    CNTPCT_EL0.get()
}

pub fn frequency() -> u64 {
    CNTFRQ_EL0.get().max(1)
}

pub fn micros_to_ticks(us: u64) -> u64 {
    us * frequency() / 1_000_000
}

/// Fires PPI 26 when the physical counter reaches `deadline`.
pub fn hyp_timer_arm(deadline: u64) {
    // SAFETY: CNTHP_* are armhv's own EL2 timer registers; nothing else uses them.
    unsafe {
        core::arch::asm!(
            "msr cnthp_cval_el2, {cval}",
            "msr cnthp_ctl_el2, {ctl}",
            "isb",
            cval = in(reg) deadline,
            ctl = in(reg) CTL_ENABLE,
            options(nostack)
        );
    }
}

pub fn hyp_timer_cancel() {
    // SAFETY: as above; disabling deasserts PPI 26.
    unsafe { core::arch::asm!("msr cnthp_ctl_el2, xzr", "isb", options(nostack)) };
}

/// The loaded guest's virtual timer, as its output line would be driven (ENABLE and ISTATUS,
/// not masked by the guest itself).
pub fn vtimer_asserted() -> bool {
    let ctl = CNTV_CTL_EL0.get();
    ctl & (CTL_ENABLE | CTL_IMASK | CTL_ISTATUS) == CTL_ENABLE | CTL_ISTATUS
}
