//! The portable virtual-machine monitor: VMs, vCPUs, exit handling, hypercalls, PSCI, MMIO
//! dispatch and the per-CPU scheduler. It reaches the hardware only through `crate::arch`.

pub mod bench;
pub mod console_mux;
pub mod exits;
pub mod fpsimd;
pub mod hypercall;
pub mod irq;
pub mod irqdist;
pub mod loader;
pub mod memory;
pub mod mmio;
pub mod passthrough;
pub mod psci;
pub mod ptimer;
pub mod sched;
pub mod stats;
pub mod sysreg;
pub mod uart;
pub mod usage;
pub mod vcpu;
pub mod vgic;
pub mod virtio;
pub mod vm;
pub mod vtimer;

use alloc::string::String;

/// What the run loop does after an exit has been handled.
#[derive(Debug)]
pub enum Action {
    /// Re-enter the same vCPU at once (the fast path).
    Resume,
    /// Give the physical CPU to another vCPU; this one stays runnable.
    Yield,
    /// This vCPU cannot run until something wakes it (CPU_OFF; WFI once interrupts exist).
    Block,
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
}

impl core::fmt::Display for StopReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::PoweredOff => f.write_str("powered off by the guest"),
            Self::Fault(why) => write!(f, "stopped on a fault: {why}"),
            Self::Shutdown => f.write_str("stopped from the console"),
        }
    }
}
