//! armhv's virtual-machine monitor: VMs, vCPUs, exit handling, device emulation, the
//! scheduler and the life cycle of VMs. It reaches the hardware only through [`arch`], whose
//! [`arch::Arch`] interface the EL2 binary implements, and which the host tests fake: the
//! whole monitor runs in `cargo test`.
//!
//! Layers, each using only the ones above it in this list (`docs/design.md` draws them):
//!
//! 0. **Resources**: [`arch`] (the hardware), [`sync`] (locks in the lock order), [`frames`]
//!    (the physical frame pool).
//! 1. **Data**: [`vm`], [`vcpu`], [`registry`] (each VM's current life), [`memory`], [`nic`],
//!    [`control_port`],
//!    [`stats`], [`scrub`] (a zeroing job's state), [`wakeups`], [`exit_ctx`], and the
//!    measurement hooks in [`bench`].
//! 2. **Emulation** ([`emulate`]): the vGIC glue, timers, PSCI, hypercalls, system registers,
//!    MMIO, virtio (and VM disks on the machine disk) and the network switch, the UART, passthrough, lazy FP/SIMD and SVE; and the
//!    interrupt distributor's mechanism ([`irqdist`]). Emulation never calls the scheduler:
//!    it returns what must happen, an [`Action`] for the run loop and the vCPUs to wake
//!    ([`wakeups::Wakeups`]).
//! 3. **Exit dispatch** ([`exits`]): one table keyed by the exception class.
//! 4. **Run loop and scheduler**: [`sched`] (who runs where, wake-ups), [`irq`] (physical
//!    interrupts), [`run`] (one vCPU's entries and exits, and the loading of its state).
//! 5. **Life cycle**: [`create`] (a VM from its spec), [`lifecycle`] (reset, pause, stop, the
//!    zeroing of RAM, release) and [`manage`] (the VMs' states and commands, the restart
//!    policies: crate `control`'s state machine, carried out).
//! 6. **Per-CPU loop** ([`cpu_loop`]): what each physical CPU runs, forever.
//!
//! Above the monitor, in the EL2 binary: boot, the loader that turns the boot package into
//! VMs, the console multiplexer and the reports.
#![no_std]

extern crate alloc;
// The fake hardware of host builds (`arch::fake`) keeps per-thread state.
#[cfg(not(target_os = "none"))]
extern crate std;

pub mod arch;
pub mod bench;
pub mod coherency;
pub mod control_port;
pub mod cpu_loop;
pub mod create;
pub mod emulate;
pub mod exit_ctx;
pub mod exits;
pub mod frames;
pub mod irq;
pub mod irqdist;
pub mod lifecycle;
pub mod manage;
pub mod memory;
pub mod nic;
pub mod registry;
pub mod run;
pub mod sched;
pub mod scrub;
pub mod stats;
pub mod sync;
pub mod vcpu;
pub mod vm;
pub mod wakeups;

use alloc::string::String;

/// What the run loop does after an exit has been handled.
#[derive(Debug)]
pub enum Action {
    /// Re-enter the same vCPU at once (the fast path).
    Resume,
    /// The guest gives its physical CPU away (WFE, ARMHV_YIELD): another vCPU that may run
    /// there goes first. This one stays runnable.
    Yield,
    /// armhv takes the physical CPU back (a time slice ended, the scheduler asked, a console
    /// command, a standby request): the scheduler decides what runs next. This vCPU stays
    /// runnable.
    Reschedule,
    /// This vCPU cannot run until something wakes it (WFI, CPU_OFF).
    Block,
    /// PSCI SYSTEM_RESET from this vCPU: the VM restarts (`lifecycle::begin_reset`).
    Reset,
    /// Stop the whole VM.
    Stop(StopReason),
}

#[derive(Debug, Clone)]
pub enum StopReason {
    /// The guest asked for it (PSCI SYSTEM_OFF, or its last vCPU called CPU_OFF).
    PoweredOff,
    /// The guest did something armhv cannot let it continue from.
    Fault(String),
    /// Every VM was stopped from the console (Ctrl-A q).
    Shutdown,
    /// `stop NAME`, from the console or a control VM.
    Command,
}

impl core::fmt::Display for StopReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::PoweredOff => f.write_str("powered off by the guest"),
            Self::Fault(why) => write!(f, "stopped on a fault: {why}"),
            Self::Shutdown => f.write_str("stopped from the console"),
            Self::Command => f.write_str("stopped by a command"),
        }
    }
}

/// The earlier of two optional deadlines.
pub fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
