//! The virtual CPU interface's control registers, whichever GIC the machine has: the ICH_*_EL2
//! system registers of a GICv3 (`arch::aarch64::vgic_hw`) or the memory-mapped GICH frame of
//! a GICv2 ([`super::v2`]).
//!
//! The monitor speaks the GICv3 list-register format (`vgic::lr`); a GICv2's GICH_LR values
//! are translated on the way in and out (`vgic::lr::v2`, in `v2`). The other registers (VMCR, the
//! active priorities) are a vCPU's state that armhv only saves and restores: each version's own
//! layout, never looked into.

use super::{is_v2, v2};
use crate::arch::aarch64::vgic_hw;

// The monitor writes ICH_HCR_EL2's En and UIE bits; GICH_HCR has them at the same places.
const _: () = assert!(v2::GICH_HCR_EN == vgic_hw::HCR_EN as u32);
const _: () = assert!(v2::GICH_HCR_UIE == vgic_hw::HCR_UIE as u32);

/// List registers this CPU implements.
pub fn lr_count() -> usize {
    if is_v2() { v2::lr_count() } else { vgic_hw::lr_count() }
}

#[inline(always)]
pub fn read_lr(n: usize) -> u64 {
    if is_v2() { v2::read_lr(n) } else { vgic_hw::read_lr(n) }
}

#[inline(always)]
pub fn write_lr(n: usize, value: u64) {
    if is_v2() { v2::write_lr(n, value) } else { vgic_hw::write_lr(n, value) }
}

#[inline(always)]
pub fn write_hcr(value: u64) {
    if is_v2() { v2::write_hcr(value as u32) } else { vgic_hw::write_hcr(value) }
}

#[inline(always)]
pub fn read_vmcr() -> u64 {
    if is_v2() { u64::from(v2::read_vmcr()) } else { vgic_hw::read_vmcr() }
}

#[inline(always)]
pub fn write_vmcr(value: u64) {
    if is_v2() { v2::write_vmcr(value as u32) } else { vgic_hw::write_vmcr(value) }
}

/// The active priorities (ICH_AP1R0_EL2; GICH_APR).
#[inline(always)]
pub fn read_apr() -> u64 {
    if is_v2() { u64::from(v2::read_apr()) } else { vgic_hw::read_ap1r0() }
}

#[inline(always)]
pub fn write_apr(value: u64) {
    if is_v2() { v2::write_apr(value as u32) } else { vgic_hw::write_ap1r0(value) }
}
