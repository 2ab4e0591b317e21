//! The EL2-only hardware layer: boot, exception vectors, the world switch, system registers,
//! the hypervisor's own page tables and calls into the firmware. Everything that needs
//! `asm!` or a system register (EL2's, the guest's EL1 state, the GIC's CPU interfaces, the
//! counters, the ID registers) lives under this directory, each access behind a small named
//! function; the rest of armhv is portable.

pub mod cache;
pub mod cpu;
pub mod debug;
pub mod device;
pub mod el1_state;
pub mod el2_regs;
pub mod exception;
pub mod firmware;
pub mod fpsimd;
pub mod gic_cpuif;
pub mod id_regs;
pub mod mmu;
pub mod pauth;
pub mod pmu;
pub mod speculation;
pub mod syndrome;
pub mod timer;
pub mod vgic_hw;
pub mod world_switch;

core::arch::global_asm!(include_str!("boot.S"), options(raw));
#[cfg(feature = "ws-breakdown")]
core::arch::global_asm!(".set WS_BREAKDOWN, 1", include_str!("vectors.S"), options(raw));
#[cfg(not(feature = "ws-breakdown"))]
core::arch::global_asm!(".set WS_BREAKDOWN, 0", include_str!("vectors.S"), options(raw));
core::arch::global_asm!(include_str!("fpsimd.S"), options(raw));
