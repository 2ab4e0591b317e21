//! vmbench's IRQ handler: it stamps the time first thing, then acknowledges,
//! clears the virtio device's interrupt if it is that one, records the stamp
//! and completes. Benchmarks wait for `count()` to move, then read `stamp()`.

use baremetal::console::Global;
use baremetal::{cpu, gic};

use crate::clock;
use baremetal::virtio_rng as virtio;

/// Which counter the handler reads: the PMU cycle counter, else CNTVCT_EL0.
static PMU: Global<bool> = Global::new(false);
/// The counter when the last interrupt was taken (read before anything else).
static STAMP: Global<u64> = Global::new(0);
/// Interrupts handled so far (all CPUs; one benchmark runs at a time).
static COUNT: Global<u64> = Global::new(0);
/// The virtio device's INTID and register base (0: none).
static VIRTIO_INTID: Global<u32> = Global::new(0);
static VIRTIO_BASE: Global<u64> = Global::new(0);

/// Makes the handler stamp with the PMU cycle counter (`true`) or CNTVCT.
pub fn use_clock(pmu: bool) {
    PMU.set(pmu);
}

/// Has the handler acknowledge the virtio device at `base` when `intid` arrives.
pub fn set_virtio(base: u64, intid: u32) {
    VIRTIO_BASE.set(base);
    VIRTIO_INTID.set(intid);
}

pub fn count() -> u64 {
    COUNT.get()
}

pub fn stamp() -> u64 {
    STAMP.get()
}

pub fn handle_irq() {
    let t = clock::now(PMU.get());
    let iar = gic::acknowledge();
    let intid = gic::intid_of(iar);
    if intid >= gic::INTID_SPECIAL {
        return;
    }
    if intid == VIRTIO_INTID.get() {
        // The line is a level: clear it at the device before the EOI.
        virtio::acknowledge_interrupt(VIRTIO_BASE.get());
    }
    STAMP.set(t);
    COUNT.set(COUNT.get() + 1);
    gic::complete(iar);
    // Wake a CPU waiting in `wfe` for this.
    cpu::dsb_sev();
}
