//! The EL1 timers on CPU 0: the virtual timer (CNTV_*) by default, or the
//! physical timer (CNTP_*, which armhv emulates) while `ptimer=` runs.
//! Periodic ticks (`timer=`, `ptimer=`, `audio=` with a fixed amount of work in
//! each handler), one-shot alarms (`wfi=`) and watchdogs for waits, all driven
//! from the IRQ handler. Other CPUs arm their own virtual timer with
//! `arm_local` (the handler silences it there).

use core::arch::asm;

use baremetal::boot;
use baremetal::console::Global;
use baremetal::time;

const CTL_ENABLE: u64 = 1;

const OFF: u64 = 0;
/// Re-armed `PERIOD` after each deadline until `TARGET` interrupts.
const PERIODIC: u64 = 1;
/// One interrupt, then off.
const ONESHOT: u64 = 2;

/// Which of the two EL1 timers the functions below drive.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    Virtual,
    Physical,
}

static SELECTED: Global<Timer> = Global::new(Timer::Virtual);
/// The timers' INTIDs: the third (virtual) and second (non-secure physical)
/// entries of the device tree's timer node; PPIs 11 and 14 = INTIDs 27 and
/// 30 on QEMU virt and in armhv.
static VIRT_INTID: Global<u32> = Global::new(27);
static PHYS_INTID: Global<u32> = Global::new(30);
static MODE: Global<u64> = Global::new(OFF);
static PERIOD: Global<u64> = Global::new(0);
static TARGET: Global<u64> = Global::new(0);
/// Interrupts taken since the timer was last started.
static TICKS: Global<u64> = Global::new(0);
/// Counter value when the last of them was handled.
static LAST: Global<u64> = Global::new(0);
/// Longest and total delay from a deadline to its handler, in counter ticks.
static MAX_LATENCY: Global<u64> = Global::new(0);
static SUM_LATENCY: Global<u64> = Global::new(0);
/// Counter ticks each periodic interrupt busy-waits in the handler (`audio=`; 0: none).
static WORK: Global<u64> = Global::new(0);
/// Counter ticks spent in that work, and busy-loop iterations done in it, since the timer
/// was last started: the iterations show how much of that time the vCPU actually ran.
static WORK_TICKS: Global<u64> = Global::new(0);
static WORK_LOOPS: Global<u64> = Global::new(0);

pub fn set_intid(timer: Timer, intid: u32) {
    match timer {
        Timer::Virtual => VIRT_INTID.set(intid),
        Timer::Physical => PHYS_INTID.set(intid),
    }
}

pub fn intid(timer: Timer) -> u32 {
    match timer {
        Timer::Virtual => VIRT_INTID.get(),
        Timer::Physical => PHYS_INTID.get(),
    }
}

/// The timer whose interrupt `intid` is, if either.
pub fn timer_of(intid: u32) -> Option<Timer> {
    [Timer::Virtual, Timer::Physical].into_iter().find(|&t| self::intid(t) == intid)
}

/// Makes the following calls drive `timer` (the other one must be stopped).
pub fn select(timer: Timer) {
    SELECTED.set(timer);
}

/// Writes one of the selected timer's registers.
macro_rules! timer_write {
    ($virt:literal, $phys:literal, $value:expr) => {{
        let v: u64 = $value;
        // SAFETY: the EL1 timer registers only control this CPU's timer output.
        unsafe {
            match SELECTED.get() {
                Timer::Virtual => asm!(concat!("msr ", $virt, ", {v}"), "isb", v = in(reg) v, options(nomem, nostack)),
                Timer::Physical => asm!(concat!("msr ", $phys, ", {v}"), "isb", v = in(reg) v, options(nomem, nostack)),
            }
        }
    }};
}

fn write_ctl(value: u64) {
    timer_write!("cntv_ctl_el0", "cntp_ctl_el0", value);
}

/// Sets the deadline relative to now (CVAL = now + TVAL).
fn write_tval(value: u64) {
    timer_write!("cntv_tval_el0", "cntp_tval_el0", value);
}

fn write_cval(value: u64) {
    timer_write!("cntv_cval_el0", "cntp_cval_el0", value);
}

fn read_cval() -> u64 {
    let value: u64;
    // SAFETY: reading the deadline has no side effects.
    unsafe {
        match SELECTED.get() {
            Timer::Virtual => {
                asm!("mrs {v}, cntv_cval_el0", v = out(reg) value, options(nomem, nostack))
            }
            Timer::Physical => {
                asm!("mrs {v}, cntp_cval_el0", v = out(reg) value, options(nomem, nostack))
            }
        }
    }
    value
}

fn start(mode: u64, target: u64, period: u64) {
    TICKS.set(0);
    MAX_LATENCY.set(0);
    SUM_LATENCY.set(0);
    WORK_TICKS.set(0);
    WORK_LOOPS.set(0);
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

/// The work each periodic interrupt does from now on: a busy-wait of `ticks` counter ticks
/// in the handler, after the timer is re-armed (0: none).
pub fn set_work(ticks: u64) {
    WORK.set(ticks);
}

/// Counter ticks spent in the handlers' work and busy-loop iterations done in it since the
/// timer was last started.
pub fn work_done() -> (u64, u64) {
    (WORK_TICKS.get(), WORK_LOOPS.get())
}

/// Arms the calling CPU's virtual timer for `deadline` without touching CPU 0's state: for
/// the other CPUs, whose handler silences the timer when it fires (a wake-up from `wfi`).
pub fn arm_local(deadline: u64) {
    // SAFETY: the EL1 virtual timer registers only control this CPU's timer output.
    unsafe {
        asm!("msr cntv_cval_el0, {v}", "msr cntv_ctl_el0, {c}", "isb",
            v = in(reg) deadline, c = in(reg) CTL_ENABLE, options(nomem, nostack));
    }
}

pub fn stop() {
    write_ctl(0);
    MODE.set(OFF);
}

pub fn ticks() -> u64 {
    TICKS.get()
}

/// The counter the selected timer compares against: the virtual count
/// (physical minus CNTVOFF_EL2) or the physical count.
pub fn now() -> u64 {
    match SELECTED.get() {
        Timer::Virtual => time::counter(),
        Timer::Physical => {
            let value: u64;
            // SAFETY: reading the physical count has no side effects.
            unsafe {
                asm!("isb", "mrs {v}, cntpct_el0", "isb", v = out(reg) value, options(nomem, nostack))
            };
            value
        }
    }
}

/// The longest and the total delay from a deadline to its handler since the timer started,
/// in counter ticks.
pub fn latency() -> (u64, u64) {
    (MAX_LATENCY.get(), SUM_LATENCY.get())
}

/// The selected timer's counter (`now`) when the last interrupt was handled.
pub fn last() -> u64 {
    LAST.get()
}

/// The timer's interrupt (from `gic::handle_irq`). The output is a level:
/// it must be moved to a later deadline or disabled before the EOI.
pub fn on_interrupt(timer: Timer) {
    if timer != SELECTED.get() {
        // Not the timer in use: silence it.
        let selected = SELECTED.get();
        SELECTED.set(timer);
        write_ctl(0);
        SELECTED.set(selected);
        return;
    }
    if boot::cpu_slot() != 0 || MODE.get() == OFF {
        write_ctl(0); // not ours to run: silence it
        return;
    }
    let ticks = TICKS.get() + 1;
    TICKS.set(ticks);
    let now = now();
    LAST.set(now);
    let latency = now.saturating_sub(read_cval());
    MAX_LATENCY.set(MAX_LATENCY.get().max(latency));
    SUM_LATENCY.set(SUM_LATENCY.get() + latency);
    if MODE.get() == PERIODIC && ticks < TARGET.get() {
        // From the previous deadline, not from now: handling latency does not
        // accumulate, so the average rate is exactly the programmed one.
        write_cval(read_cval() + PERIOD.get());
        let work = WORK.get();
        if work > 0 {
            busy(work);
        }
    } else {
        stop();
    }
}

/// Busy-wait iterations between two `yield`s ([`spin_hint`]).
const YIELD_EVERY: u64 = 64;

/// A pause in a busy wait, every [`YIELD_EVERY`] iterations (`loops` counts them): `yield`,
/// which armhv does not trap (the vCPU keeps its CPU, as a decoder at work would) and on which
/// QEMU's TCG without parallel CPUs (under icount) moves on to the next emulated CPU. Without
/// it a spinning CPU takes most of the one host thread's instructions under icount, and every
/// other CPU's work slows down (bench/README.md, "The interrupt distributor": the setup
/// check); with it the spin costs its own CPU's time only. Not at every iteration: each
/// `yield` costs the host a pass through QEMU's CPU loop, and a CPU spinning alone then
/// advances the virtual clock tens of times slower than real time.
#[inline(always)]
pub fn spin_hint(loops: u64) {
    if loops.is_multiple_of(YIELD_EVERY) {
        // SAFETY: a hint; no memory or register is changed.
        unsafe { asm!("yield", options(nomem, nostack, preserves_flags)) };
    }
}

/// The handler's fixed work: spins for `ticks` of the virtual counter from now, counting
/// iterations.
fn busy(ticks: u64) {
    let start = time::counter();
    let end = start + ticks;
    let mut loops = 0u64;
    while !time::passed(end) {
        loops += 1;
        spin_hint(loops);
    }
    WORK_TICKS.set(WORK_TICKS.get() + (time::counter() - start));
    WORK_LOOPS.set(WORK_LOOPS.get() + loops);
}
