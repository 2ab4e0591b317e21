//! `rng=N`: a periodic device interrupt stream, for armhv's interrupt distributor. CPU 0 asks
//! the first virtio-rng device for 8 bytes every 5 ms, N times, and spins in between (a busy
//! CPU); every other CPU waits in `wfi` as a helper. Each completion interrupt is routed to
//! CPU 0 (`GICD_IROUTER`) and counted on the CPU that takes it, so a hypervisor that moves the
//! stream shows in the counts.

use baremetal::boot::{self, MAX_CPUS};
use baremetal::console::Global;
use baremetal::virtio_mmio::{Regs, reg};
use baremetal::virtio_rng::{self, Device, Rng};

use crate::cpus::Helpers;
use crate::{Machine, gic, println, steps, time};

const PERIOD_MS: u64 = 5;
/// How long the last completions may take to arrive.
const DRAIN_MS: u64 = 1000;

static BASE: Global<u64> = Global::new(0);
static INTID: Global<u32> = Global::new(0);
/// Completion interrupts taken, per CPU (stack slot).
static TAKEN: [Global<u64>; MAX_CPUS] = [const { Global::new(0) }; MAX_CPUS];

/// The virtio-rng device of the device tree, if any.
pub fn configure(rng: Rng) {
    BASE.set(rng.base);
    INTID.set(rng.intid.unwrap_or(0));
}

/// The INTID the stream raises, while one runs.
pub fn intid() -> Option<u32> {
    let intid = INTID.get();
    (BASE.get() != 0 && intid != 0).then_some(intid)
}

/// The completion interrupt (from `gic::handle_irq`): clear it at the device so the
/// level-sensitive line drops before the EOI, and count it.
pub fn on_interrupt() {
    virtio_rng::acknowledge_interrupt(BASE.get());
    let taken = &TAKEN[boot::cpu_slot()];
    taken.set(taken.get() + 1);
}

pub fn step(m: &Machine, n: u64) {
    let Some(intid) = intid() else {
        println!("testguest: rng needs a virtio-rng device with an interrupt");
        return;
    };
    if !steps::need_gic("rng") {
        return;
    }
    let mut dev = match Device::init(BASE.get()) {
        Ok(dev) => dev,
        Err(e) => {
            println!("testguest: rng: virtio-rng at {:#x}: {e}", BASE.get());
            return;
        }
    };
    let helpers = Helpers::start(m, "rng", m.ncpus.saturating_sub(1));
    TAKEN.iter().for_each(|t| t.set(0));
    // Level-sensitive: the line stays up until the handler's InterruptACK.
    gic::enable_spi(intid, true);
    let period = time::ms_to_ticks(PERIOD_MS);
    let mut next = time::counter();
    for _ in 0..n {
        dev.offer_buffer();
        Regs(BASE.get()).write(reg::QUEUE_NOTIFY, 0);
        next += period;
        while !time::passed(next) {
            gic::take_pending();
        }
    }
    // Completions that come while the line is still up share one interrupt.
    let quiet = || dev.all_used() && Regs(BASE.get()).read(reg::INTERRUPT_STATUS) == 0;
    let drained = gic::wait_ms(DRAIN_MS, quiet);
    gic::disable_spi(intid);
    dev.reset();
    helpers.stop();
    let missing = if drained { "" } else { " (the last completion never arrived)" };
    baremetal::console::print(format_args!("testguest: rng {n} requests, interrupts taken:"));
    for (cpu, t) in TAKEN.iter().enumerate().take(m.ncpus) {
        baremetal::console::print(format_args!(" cpu{cpu} {}", t.get()));
    }
    println!("{missing}");
}
