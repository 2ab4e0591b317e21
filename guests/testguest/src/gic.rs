//! testguest's use of the GIC, v3 or v2 (`baremetal::gic`): the SGIs it sends, the
//! distributor and CPU 0's interface set up by the first step that needs them,
//! and the IRQ handler, which counts every interrupt per CPU and INTID and
//! dispatches it.
//!
//! IRQs stay masked (PSTATE.I) everywhere except inside `wait_for`, so an
//! interrupt never lands in the middle of a step, only where one is awaited.

use baremetal::boot::{self, MAX_CPUS};
use baremetal::console::Global;
use baremetal::gic::{self, INTID_SPECIAL};
pub use baremetal::gic::{disable_spi, enable_spi, send_sgi, take_pending, wait_for};

use crate::{cpus, psci, time, timer};

/// Wakes a helper CPU so it looks at its orders again (the handler only counts it).
pub const SGI_KICK: u32 = 0;
/// CPU 0 -> helper in `ipi`; the helper answers with SGI_PONG.
pub const SGI_PING: u32 = 1;
pub const SGI_PONG: u32 = 2;
/// Sent by CPU 0 to itself in `eoi`.
pub const SGI_SELF: u32 = 3;

/// The distributor and CPU 0's interface are set up once, by the first step that needs them.
static PRIMARY_READY: Global<bool> = Global::new(false);

/// Interrupts taken, per CPU (stack slot) and INTID (SGIs and PPIs).
static COUNTS: [[Global<u64>; 32]; MAX_CPUS] = [const { [const { Global::new(0) }; 32] }; MAX_CPUS];

/// Makes the GIC ready on CPU 0: distributor and CPU 0's interface, once.
/// False if the machine has no GIC.
pub fn init_primary() -> bool {
    if !gic::present() {
        return false;
    }
    if !PRIMARY_READY.get() {
        gic::init_distributor();
        init_cpu();
        PRIMARY_READY.set(true);
    }
    true
}

/// Sets up the calling CPU's SGIs, PPIs and CPU interface: every SGI and
/// the timer and PMU PPIs (level-sensitive). Each CPU calls it for itself.
pub fn init_cpu() {
    let pmu = crate::pmu::intid().unwrap_or(0);
    gic::init_cpu(&[
        timer::intid(timer::Timer::Virtual),
        timer::intid(timer::Timer::Physical),
        pmu,
    ]);
}

/// Interrupts with this INTID taken so far by the CPU in stack slot `cpu`.
pub fn count(cpu: usize, intid: u32) -> u64 {
    COUNTS[cpu][intid as usize].get()
}

/// The IRQ handler, called by the vector in `baremetal::boot` with the
/// interrupted context saved: acknowledge, count, dispatch, complete (EOImode 0).
pub fn handle_irq() {
    let iar = gic::acknowledge();
    let intid = gic::intid_of(iar);
    if intid >= INTID_SPECIAL {
        return;
    }
    if let Some(counter) = COUNTS[boot::cpu_slot()].get(intid as usize) {
        counter.set(counter.get() + 1);
    }
    match intid {
        SGI_PING => cpus::answer_ping(),
        _ if let Some(timer) = timer::timer_of(intid) => timer::on_interrupt(timer),
        _ if Some(intid) == crate::rtc::intid() && crate::rtc::eoi_first() => {
            gic::complete(iar);
            crate::rtc::on_interrupt();
            // What a driver does next (a register read, a log line) reaches the
            // hypervisor; a firmware call stands for it. Not PSCI_VERSION: armhv's vector
            // answers that one without leaving it (the hypercall fast path), as it would a
            // trap that the run loop never sees.
            psci::call(psci::PSCI_FEATURES, u64::from(psci::PSCI_VERSION), 0, 0);
            return;
        }
        _ if Some(intid) == crate::rtc::intid() => crate::rtc::on_interrupt(),
        _ if Some(intid) == crate::stream::intid() => crate::stream::on_interrupt(),
        _ if Some(intid) == crate::pmu::intid() => crate::pmu::on_interrupt(),
        _ => {}
    }
    gic::complete(iar);
}

/// `wait_for` with the virtual timer as a watchdog `ms` from now (CPU 0 only,
/// the timer must be idle).
pub fn wait_ms(ms: u64, done: impl Fn() -> bool) -> bool {
    let deadline = time::counter() + time::ms_to_ticks(ms);
    timer::arm_at(deadline);
    let ok = wait_for(Some(deadline), done);
    timer::stop();
    ok
}
