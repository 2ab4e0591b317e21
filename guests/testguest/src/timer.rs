//! The EL1 virtual timer (CNTV_CTL_EL0, CNTV_TVAL_EL0, CNTV_CVAL_EL0) on CPU 0:
//! periodic ticks (`timer=`), one-shot alarms (`wfi=`) and watchdogs for
//! waits, all driven from the IRQ handler.

use core::arch::asm;

use crate::boot;
use crate::console::Global;
use crate::time;

const CTL_ENABLE: u64 = 1;

const OFF: u64 = 0;
/// Re-armed `PERIOD` after each deadline until `TARGET` interrupts.
const PERIODIC: u64 = 1;
/// One interrupt, then off.
const ONESHOT: u64 = 2;

/// The virtual timer's INTID: the third entry of the device tree's timer
/// node; PPI 11 = INTID 27 on QEMU virt and in armhv.
static INTID: Global<u32> = Global::new(27);
static MODE: Global<u64> = Global::new(OFF);
static PERIOD: Global<u64> = Global::new(0);
static TARGET: Global<u64> = Global::new(0);
/// Interrupts taken since the timer was last started.
static TICKS: Global<u64> = Global::new(0);
/// Counter value when the last of them was handled.
static LAST: Global<u64> = Global::new(0);

pub fn set_intid(intid: u32) {
    INTID.set(intid);
}

pub fn intid() -> u32 {
    INTID.get()
}

fn write_ctl(value: u64) {
    // SAFETY: CNTV_CTL_EL0 only controls this CPU's virtual timer output.
    unsafe { asm!("msr cntv_ctl_el0, {v}", "isb", v = in(reg) value, options(nomem, nostack)) };
}

fn write_tval(value: u64) {
    // SAFETY: sets the virtual timer's deadline (CVAL = now + TVAL).
    unsafe { asm!("msr cntv_tval_el0, {v}", "isb", v = in(reg) value, options(nomem, nostack)) };
}

fn write_cval(value: u64) {
    // SAFETY: sets the virtual timer's deadline.
    unsafe { asm!("msr cntv_cval_el0, {v}", "isb", v = in(reg) value, options(nomem, nostack)) };
}

fn read_cval() -> u64 {
    let value: u64;
    // SAFETY: reading the deadline has no side effects.
    unsafe { asm!("mrs {v}, cntv_cval_el0", v = out(reg) value, options(nomem, nostack)) };
    value
}

fn start(mode: u64, target: u64, period: u64) {
    TICKS.set(0);
    TARGET.set(target);
    PERIOD.set(period);
    MODE.set(mode);
}

/// Starts `count` interrupts `period` counter ticks apart (armed with
/// CNTV_TVAL_EL0). Returns the counter value the first period starts from.
pub fn start_periodic(period: u64, count: u64) -> u64 {
    start(PERIODIC, count, period);
    write_tval(period);
    write_ctl(CTL_ENABLE);
    read_cval() - period
}

/// One interrupt `ticks` from now. Returns the counter value it counts from.
pub fn start_oneshot(ticks: u64) -> u64 {
    start(ONESHOT, 1, 0);
    write_tval(ticks);
    write_ctl(CTL_ENABLE);
    read_cval() - ticks
}

/// One interrupt when the counter reaches `deadline` (a watchdog for `gic::wait_for`).
pub fn arm_at(deadline: u64) {
    start(ONESHOT, 1, 0);
    write_cval(deadline);
    write_ctl(CTL_ENABLE);
}

pub fn stop() {
    write_ctl(0);
    MODE.set(OFF);
}

pub fn ticks() -> u64 {
    TICKS.get()
}

/// Counter value when the last interrupt was handled.
pub fn last() -> u64 {
    LAST.get()
}

/// The timer's interrupt (from `gic::handle_irq`). The output is a level:
/// it must be moved to a later deadline or disabled before the EOI.
pub fn on_interrupt() {
    if boot::cpu_slot() != 0 || MODE.get() == OFF {
        write_ctl(0); // not ours to run: silence it
        return;
    }
    let ticks = TICKS.get() + 1;
    TICKS.set(ticks);
    LAST.set(time::counter());
    if MODE.get() == PERIODIC && ticks < TARGET.get() {
        // From the previous deadline, not from now: handling latency does not
        // accumulate, so the average rate is exactly the programmed one.
        write_cval(read_cval() + PERIOD.get());
    } else {
        stop();
    }
}
