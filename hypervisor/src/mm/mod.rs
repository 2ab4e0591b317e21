//! The hypervisor's heap (the physical frame pool that guest RAM and Stage-2 tables come from
//! is the monitor's: `vmm::frames`).
pub mod heap;
