//! The generic timer as armhv uses it: its own EL2 physical timer (CNTHP) for scheduling and
//! software timers, and the live state of the loaded guest's virtual timer (CNTV).

use super::cpu;
use aarch64_cpu::registers::{CNTFRQ_EL0, CNTPCT_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0, Readable};
use core::sync::atomic::{AtomicU64, Ordering};
// CNTx_CTL bits are the same for every generic timer.
use gtimer::{CTL_ENABLE, CTL_IMASK, CTL_ISTATUS};

/// The physical counter (CNTPCT_EL0): armhv's clock, and a VM's virtual counter plus its
/// CNTVOFF.
#[inline]
pub fn now() -> u64 {
    CNTPCT_EL0.get()
}

pub fn frequency() -> u64 {
    CNTFRQ_EL0.get().max(1)
}

/// Per CPU: the deadline CNTHP is armed for, `DISARMED` if none. Lets the run loop ask for the
/// same deadline on every guest entry at the cost of a compare.
static ARMED: [AtomicU64; cpu::MAX_CPUS] = [const { AtomicU64::new(DISARMED) }; cpu::MAX_CPUS];
const DISARMED: u64 = u64::MAX;

/// Fires PPI 26 on this CPU when the physical counter reaches `deadline`; `None` disarms.
pub fn hyp_timer_set(deadline: Option<u64>) {
    let want = deadline.unwrap_or(DISARMED);
    let armed = &ARMED[cpu::current()];
    if armed.load(Ordering::Relaxed) == want {
        return;
    }
    armed.store(want, Ordering::Relaxed);
    match deadline {
        Some(d) => arm(d),
        None => disarm(),
    }
}

fn arm(deadline: u64) {
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

fn disarm() {
    // SAFETY: as above; disabling deasserts PPI 26.
    unsafe { core::arch::asm!("msr cnthp_ctl_el2, xzr", "isb", options(nostack)) };
}

/// The loaded guest's virtual timer, as its output line would be driven (ENABLE and ISTATUS,
/// not masked by the guest itself).
pub fn vtimer_asserted() -> bool {
    let ctl = CNTV_CTL_EL0.get();
    ctl & (CTL_ENABLE | CTL_IMASK | CTL_ISTATUS) == CTL_ENABLE | CTL_ISTATUS
}

/// The loaded guest's virtual timer compare value (CNTV_CVAL_EL0, in its virtual counter).
pub fn vtimer_compare() -> u64 {
    CNTV_CVAL_EL0.get()
}
