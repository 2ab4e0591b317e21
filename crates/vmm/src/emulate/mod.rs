//! Emulation: what armhv does for a guest in place of the hardware it does not give it. Each
//! module works on the data layer and returns what must happen next (an `Action`, the vCPUs
//! to wake); none calls the scheduler.

pub mod control_channel;
pub mod debug;
pub mod fpsimd;
pub mod hypercall;
pub mod machine_disk;
pub mod mmio;
pub mod network;
pub mod passthrough;
pub mod pauth;
pub mod pmu;
pub mod psci;
pub mod ptimer;
pub mod sysreg;
pub mod uart;
pub mod vgic;
pub mod virtio;
pub mod virtio_slot;
pub mod vtimer;
