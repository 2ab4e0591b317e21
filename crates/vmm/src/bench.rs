//! Measurement hooks for the benchmark suite (`guests/vmbench`, `make bench`).
//!
//! - I/O stamps, always on: when armhv last saw a VM's virtio queue notification and when it
//!   last raised one of its virtio interrupts, in the VM's own clock, so a guest can time the
//!   two halves of an I/O round trip (ARMHV_IO_STAMPS). One counter read each.
//! - The world-switch breakdown (cargo feature `ws-breakdown`, the study's Table III): each
//!   trap round trip on a CPU is an *event*, from the vector entry to the next `eret`; the
//!   code that saves or restores each class of state is timed with the cycle counter, and at
//!   power-off the mean per class is printed for two paths: an ARMHV_NOP hypercall and a
//!   switch to another vCPU by ARMHV_YIELD. Without the feature every hook is an empty inline
//!   function and the vector code has no probes: zero cost.

use crate::arch::{pmu, timer};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A VM's I/O stamps (shared by the VM and its virtio slots).
pub struct IoStamps {
    /// Times are PMCCNTR_EL0 values (the VM reads the cycle counter itself) instead of the
    /// VM's virtual counter.
    pub pmu: bool,
    cntvoff: u64,
    notify: AtomicU64,
    irq: AtomicU64,
}

impl IoStamps {
    pub fn new(pmu: bool, cntvoff: u64) -> Self {
        Self { pmu, cntvoff, notify: AtomicU64::new(0), irq: AtomicU64::new(0) }
    }

    /// Now, in the VM's clock. The virtual counter is computed from the VM's own offset: an
    /// interrupt may be raised from another VM's trap (a network frame), with that VM's
    /// CNTVOFF loaded.
    fn now(&self) -> u64 {
        if self.pmu { pmu::cycles() } else { timer::now().wrapping_sub(self.cntvoff) }
    }

    pub fn notified(&self) {
        self.notify.store(self.now(), Relaxed);
    }

    pub fn raised(&self) {
        self.irq.store(self.now(), Relaxed);
    }

    /// (last notification, last interrupt raised).
    pub fn get(&self) -> (u64, u64) {
        (self.notify.load(Relaxed), self.irq.load(Relaxed))
    }
}

/// The classes of state a world switch may move (the study's Table III rows), apart from the
/// general-purpose registers, which only the vector code moves (timed by its probes).
#[derive(Clone, Copy)]
pub enum Class {
    FpSimd = 1,
    El1,
    Vgic,
    Timer,
    El2,
    Stage2,
}

/// What the current event on this CPU turns out to be.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// ARMHV_NOP: the cheapest hypercall.
    Hypercall,
    /// ARMHV_YIELD: a switch, if another vCPU is loaded before this CPU enters a guest again.
    Yield,
}

/// Runs `f`, charging its cycles to `class` in the current event.
#[inline(always)]
pub fn timed<R>(class: Class, f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "ws-breakdown")]
    {
        let t0 = pmu::cycles();
        let r = f();
        breakdown::charge(class, pmu::cycles() - t0);
        r
    }
    #[cfg(not(feature = "ws-breakdown"))]
    {
        let _ = class;
        f()
    }
}

/// The current event is a `path` exit.
#[inline(always)]
pub fn mark(path: Path) {
    #[cfg(feature = "ws-breakdown")]
    breakdown::mark(path);
    #[cfg(not(feature = "ws-breakdown"))]
    let _ = path;
}

/// Another vCPU's state was loaded on this CPU.
#[inline(always)]
pub fn switched() {
    #[cfg(feature = "ws-breakdown")]
    breakdown::switched();
}

/// A guest just trapped: `stamps` are the vector code's probes (`arch::GuestRegs::stamps`).
#[inline(always)]
pub fn on_exit(stamps: &[u64; 4]) {
    #[cfg(feature = "ws-breakdown")]
    breakdown::on_exit(stamps);
    #[cfg(not(feature = "ws-breakdown"))]
    let _ = stamps;
}

/// Prints the breakdown (when built with it).
pub fn report() {
    #[cfg(feature = "ws-breakdown")]
    breakdown::report();
}

/// Starts this CPU's cycle counter for the breakdown (when built with it).
pub fn init_cpu() {
    #[cfg(feature = "ws-breakdown")]
    pmu::enable_cycle_counter();
}

/// Measures the breakdown's own probe cost, once (when built with it).
pub fn calibrate() {
    #[cfg(feature = "ws-breakdown")]
    breakdown::calibrate();
}

#[cfg(feature = "ws-breakdown")]
mod breakdown {
    //! The probes' own instructions are not part of the path being measured: each event
    //! counts how many class probes ran and how long its `on_exit` bookkeeping took, and the
    //! report takes both out of the total (one probe's cost is measured at boot). The vector
    //! code's few probe instructions stay in, within the GP class.
    use super::{Class, Path, timed};
    use crate::arch::cpu;
    use crate::arch::pmu;
    use crate::arch::{STAMP_ENTRY_TAIL, STAMP_EXIT_HEAD};
    use core::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

    /// Index 0 is the general-purpose registers (the vector code's probes), then `Class`.
    const CLASSES: usize = 7;
    const GP: usize = 0;
    const NAMES: [&str; CLASSES] = ["gp", "fpsimd", "el1", "vgic", "timer", "el2", "stage2"];
    const NONE: u8 = 0;
    const HYPERCALL: u8 = 1;
    const YIELD: u8 = 2;
    const SWITCH: u8 = 3;

    /// The event in progress on one CPU. Only that CPU touches it (atomics: no `unsafe`).
    struct Pending {
        start: AtomicU64,
        exit_gp: AtomicU64,
        classes: [AtomicU64; CLASSES],
        probes: AtomicU64,
        /// Instructions of this event's `on_exit` bookkeeping.
        bookkeeping: AtomicU64,
        path: AtomicU8,
    }

    static PENDING: [Pending; cpu::MAX_CPUS] = [const {
        Pending {
            start: AtomicU64::new(0),
            exit_gp: AtomicU64::new(0),
            classes: [const { AtomicU64::new(0) }; CLASSES],
            probes: AtomicU64::new(0),
            bookkeeping: AtomicU64::new(0),
            path: AtomicU8::new(NONE),
        }
    }; cpu::MAX_CPUS];

    /// Instructions one `timed` probe adds around the code it times (measured at boot).
    static PROBE_COST: AtomicU64 = AtomicU64::new(0);

    /// Per recorded path (hypercall, vm-switch): events, then sums of each class, then totals.
    static TOTALS: [[AtomicU64; CLASSES + 2]; 2] =
        [const { [const { AtomicU64::new(0) }; CLASSES + 2] }; 2];

    fn here() -> &'static Pending {
        &PENDING[cpu::current()]
    }

    /// Measures what a probe of nothing costs, on the boot CPU.
    pub fn calibrate() {
        const N: u64 = 8;
        let t0 = pmu::cycles();
        for _ in 0..N {
            timed(Class::Timer, || ());
        }
        let cost = (pmu::cycles() - t0) / N;
        PROBE_COST.store(cost, Relaxed);
        let p = here();
        p.classes[Class::Timer as usize].store(0, Relaxed);
        p.probes.store(0, Relaxed);
        log::info!(
            "world-switch breakdown: a probe costs {cost} instructions, taken out of the totals"
        );
    }

    pub fn charge(class: Class, cycles: u64) {
        let p = here();
        p.classes[class as usize].fetch_add(cycles, Relaxed);
        p.probes.fetch_add(1, Relaxed);
    }

    pub fn mark(path: Path) {
        let code = match path {
            Path::Hypercall => HYPERCALL,
            Path::Yield => YIELD,
        };
        here().path.store(code, Relaxed);
    }

    pub fn switched() {
        let p = here();
        if p.path.load(Relaxed) == YIELD {
            p.path.store(SWITCH, Relaxed);
        }
    }

    pub fn on_exit(stamps: &[u64; 4]) {
        let t0 = pmu::cycles();
        let p = here();
        // The event that ends with this vCPU's last entry (stamps 2 and 3).
        let row = match p.path.load(Relaxed) {
            HYPERCALL => Some(0),
            SWITCH => Some(1),
            _ => None,
        };
        if let Some(row) = row {
            let entry_gp = stamps[3] - stamps[2] + STAMP_ENTRY_TAIL;
            let overhead =
                p.probes.load(Relaxed) * PROBE_COST.load(Relaxed) + p.bookkeeping.load(Relaxed);
            let total = (stamps[3] + STAMP_ENTRY_TAIL - p.start.load(Relaxed)) - overhead;
            let t = &TOTALS[row];
            t[0].fetch_add(1, Relaxed);
            for (i, c) in p.classes.iter().enumerate() {
                let mut v = c.load(Relaxed);
                if i == GP {
                    v += p.exit_gp.load(Relaxed) + entry_gp;
                }
                t[1 + i].fetch_add(v, Relaxed);
            }
            t[CLASSES + 1].fetch_add(total, Relaxed);
        }
        // A new event starts at this exit.
        p.start.store(stamps[0] - STAMP_EXIT_HEAD, Relaxed);
        p.exit_gp.store(stamps[1] - stamps[0] + STAMP_EXIT_HEAD, Relaxed);
        for c in &p.classes {
            c.store(0, Relaxed);
        }
        p.probes.store(0, Relaxed);
        p.path.store(NONE, Relaxed);
        p.bookkeeping.store(pmu::cycles() - t0, Relaxed);
    }

    /// One decimal of `sum / n`.
    struct Mean(u64, u64);

    impl core::fmt::Display for Mean {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            let tenths = (self.0 * 10 + self.1 / 2) / self.1.max(1);
            write!(f, "{}.{}", tenths / 10, tenths % 10)
        }
    }

    pub fn report() {
        use core::fmt::Write;
        for (row, name) in [(0, "hypercall"), (1, "vm-switch")] {
            let t = &TOTALS[row];
            let n = t[0].load(Relaxed);
            if n == 0 {
                continue;
            }
            let mut line = alloc::format!("ws-breakdown: {name} n={n}");
            let total = t[CLASSES + 1].load(Relaxed);
            let mut classes = 0;
            for (i, class) in NAMES.iter().enumerate() {
                let v = t[1 + i].load(Relaxed);
                classes += v;
                let _ = write!(line, " {class}={}", Mean(v, n));
            }
            let _ = write!(
                line,
                " other={} total={}",
                Mean(total.saturating_sub(classes), n),
                Mean(total, n)
            );
            log::info!("{line}");
        }
    }
}
