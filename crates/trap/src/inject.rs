//! Injecting a synchronous exception into a guest's EL1.
//!
//! When emulation fails (an MMIO access to nothing, a device rejecting an
//! access width, an undefined system register) the hypervisor makes the
//! guest see what real hardware would have raised. Doing so means performing
//! the exception entry the CPU would have done, in software:
//!
//! 1. `ELR_EL1 <- ELR_EL2` (the guest's PC), `SPSR_EL1 <- SPSR_EL2` (its
//!    PSTATE), `ESR_EL1 <- Injection::esr_el1`, and for aborts
//!    `FAR_EL1 <- FAR_EL2` (the syndrome says the FAR is valid);
//! 2. `ELR_EL2 <- VBAR_EL1 + Injection::vector_offset`,
//!    `SPSR_EL2 <- Injection::new_spsr`;
//! 3. `ERET` into the guest's vector.
//!
//! This module computes the three values; the register moves belong to the
//! hardware layer.

use crate::esr::{Esr, ec};

/// Which abort to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortKind {
    /// A data access failed; `write` is reported in `ESR_EL1.ISS.WnR`.
    Data { write: bool },
    /// An instruction fetch failed.
    Instruction,
}

/// The register values that enter a guest's EL1 synchronous exception
/// vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injection {
    /// Syndrome for `ESR_EL1`.
    pub esr_el1: u64,
    /// Offset from `VBAR_EL1`: 0x000 current EL with SP_EL0, 0x200 current EL
    /// with SP_ELx, 0x400 lower EL using AArch64, 0x600 lower EL using
    /// AArch32 (the synchronous entry of each group is at offset 0).
    pub vector_offset: u64,
    /// PSTATE at the vector, for `SPSR_EL2`: EL1h with D, A, I and F masked.
    pub new_spsr: u64,
}

/// `SPSR_ELx` / PSTATE bits used for exception entry.
mod spsr {
    pub const M_MASK: u64 = 0xf;
    /// `M[4]`: the interrupted state was AArch32.
    pub const M_AARCH32: u64 = 1 << 4;
    pub const M_EL0T: u64 = 0b0000;
    pub const M_EL1T: u64 = 0b0100;
    pub const M_EL1H: u64 = 0b0101;
    pub const F: u64 = 1 << 6;
    pub const I: u64 = 1 << 7;
    pub const A: u64 = 1 << 8;
    pub const D: u64 = 1 << 9;
    pub const SSBS: u64 = 1 << 12;
    pub const PAN: u64 = 1 << 22;
    pub const DIT: u64 = 1 << 24;
    /// N, Z, C, V: bits `[31:28]`.
    pub const NZCV: u64 = 0xf << 28;
}

/// `SCTLR_EL1` bits that shape PSTATE on exception entry.
mod sctlr {
    /// Set Privileged Access Never: when 0, entry to EL1 sets PSTATE.PAN.
    pub const SPAN: u64 = 1 << 23;
    /// Default PSTATE.SSBS value on exception entry.
    pub const DSSBS: u64 = 1 << 44;
}

/// Vector offsets from `VBAR_EL1`.
const CURRENT_SP0: u64 = 0x000;
const CURRENT_SPX: u64 = 0x200;
const LOWER_AARCH64: u64 = 0x400;
const LOWER_AARCH32: u64 = 0x600;

/// DFSC/IFSC `0b010000`: synchronous External abort, not on a translation
/// table walk — what a bus error from a device looks like.
const FSC_SYNC_EXTERNAL: u32 = 0x10;
/// `ISS.WnR`.
const WNR: u32 = 1 << 6;

/// Where the exception is taken from, relative to EL1.
fn origin(guest_spsr: u64) -> (bool, u64) {
    if guest_spsr & spsr::M_AARCH32 != 0 {
        // AArch32 can only be EL0 under an AArch64 EL1.
        (true, LOWER_AARCH32)
    } else {
        match guest_spsr & spsr::M_MASK {
            spsr::M_EL0T => (true, LOWER_AARCH64),
            spsr::M_EL1T => (false, CURRENT_SP0),
            // EL1h, or an impossible EL2/EL3 mode in a guest's SPSR: treat as
            // the current EL on its own stack.
            _ => (false, CURRENT_SPX),
        }
    }
}

/// PSTATE on entry to EL1h, following the Arm ARM's exception entry rules
/// (as KVM's `enter_exception64` does): NZCV, DIT and PAN carry over; PAN
/// is set if `SCTLR_EL1.SPAN` is 0; SSBS takes `SCTLR_EL1.DSSBS`; D, A, I, F
/// are masked; SS, IL, BTYPE, UAO and everything else are 0.
fn entry_pstate(guest_spsr: u64, sctlr_el1: u64) -> u64 {
    let mut new = guest_spsr & (spsr::NZCV | spsr::DIT | spsr::PAN);
    if sctlr_el1 & sctlr::SPAN == 0 {
        new |= spsr::PAN;
    }
    if sctlr_el1 & sctlr::DSSBS != 0 {
        new |= spsr::SSBS;
    }
    new | spsr::D | spsr::A | spsr::I | spsr::F | spsr::M_EL1H
}

/// Computes a synchronous External abort for the guest's EL1.
///
/// `guest_spsr` is the guest's `SPSR_EL2` at the trap and `sctlr_el1` its
/// `SCTLR_EL1`. The syndrome is a Data/Instruction Abort from a lower or the
/// current EL (EC 0x24/0x25, 0x20/0x21) with `IL=1` (required for aborts
/// without a valid instruction syndrome), `FnV=0` so the caller must set
/// `FAR_EL1`, and DFSC/IFSC = synchronous External abort.
pub fn inject_abort(guest_spsr: u64, sctlr_el1: u64, kind: AbortKind) -> Injection {
    let (from_lower, vector_offset) = origin(guest_spsr);
    let (ec, iss) = match (kind, from_lower) {
        (AbortKind::Data { write }, lower) => (
            if lower { ec::DABT_LOW } else { ec::DABT_CUR },
            FSC_SYNC_EXTERNAL | if write { WNR } else { 0 },
        ),
        (AbortKind::Instruction, true) => (ec::IABT_LOW, FSC_SYNC_EXTERNAL),
        (AbortKind::Instruction, false) => (ec::IABT_CUR, FSC_SYNC_EXTERNAL),
    };
    Injection {
        esr_el1: Esr::new(ec, true, iss).0,
        vector_offset,
        new_spsr: entry_pstate(guest_spsr, sctlr_el1),
    }
}

/// Computes an Undefined Instruction exception for the guest's EL1: EC 0
/// ("unknown reason") with `IL=1`, which is what the guest sees for an
/// instruction (or system register) the machine does not implement.
pub fn inject_undef(guest_spsr: u64, sctlr_el1: u64) -> Injection {
    let (_, vector_offset) = origin(guest_spsr);
    Injection {
        esr_el1: Esr::new(ec::UNKNOWN, true, 0).0,
        vector_offset,
        new_spsr: entry_pstate(guest_spsr, sctlr_el1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EL0T: u64 = 0x0;
    const EL1T: u64 = 0x4;
    const EL1H: u64 = 0x5;
    /// DAIF masked, EL1h.
    const ENTRY: u64 = 0x3c5;
    const SPAN: u64 = 1 << 23;

    #[test]
    fn data_abort_vectors_and_syndromes() {
        // From EL0 (AArch64), read: EC 0x24, IL, DFSC 0x10 -> 0x92000010.
        let i = inject_abort(EL0T, SPAN, AbortKind::Data { write: false });
        assert_eq!(i.esr_el1, 0x9200_0010);
        assert_eq!(i.vector_offset, 0x400);
        assert_eq!(i.new_spsr, ENTRY);
        // From EL1h, write: EC 0x25, IL, WnR, DFSC 0x10 -> 0x96000050.
        let i = inject_abort(EL1H | 0x3c0, SPAN, AbortKind::Data { write: true });
        assert_eq!(i.esr_el1, 0x9600_0050);
        assert_eq!(i.vector_offset, 0x200);
        assert_eq!(i.new_spsr, ENTRY);
        // From EL1t: the SP_EL0 group.
        let i = inject_abort(EL1T, SPAN, AbortKind::Data { write: false });
        assert_eq!(i.esr_el1, 0x9600_0010);
        assert_eq!(i.vector_offset, 0x000);
        // From AArch32 EL0 (M = 0b10000 usr): lower EL AArch32 group.
        let i = inject_abort(0x10, SPAN, AbortKind::Data { write: true });
        assert_eq!(i.esr_el1, 0x9200_0050);
        assert_eq!(i.vector_offset, 0x600);
    }

    #[test]
    fn instruction_abort() {
        // EC 0x20 / 0x21, IL, IFSC 0x10.
        let i = inject_abort(EL0T, SPAN, AbortKind::Instruction);
        assert_eq!(i.esr_el1, 0x8200_0010);
        assert_eq!(i.vector_offset, 0x400);
        let i = inject_abort(EL1H, SPAN, AbortKind::Instruction);
        assert_eq!(i.esr_el1, 0x8600_0010);
        assert_eq!(i.vector_offset, 0x200);
        let i = inject_abort(EL1T, SPAN, AbortKind::Instruction);
        assert_eq!(i.esr_el1, 0x8600_0010);
        assert_eq!(i.vector_offset, 0x000);
    }

    #[test]
    fn undef() {
        let i = inject_undef(EL1H, SPAN);
        assert_eq!(i.esr_el1, 0x0200_0000);
        assert_eq!(i.vector_offset, 0x200);
        assert_eq!(i.new_spsr, ENTRY);
        assert_eq!(inject_undef(EL0T, SPAN).vector_offset, 0x400);
        assert_eq!(inject_undef(EL1T, SPAN).vector_offset, 0x000);
    }

    #[test]
    fn pstate_on_entry() {
        // NZCV and DIT survive; SS (21), IL (20), BTYPE (11:10), UAO (23) and
        // SSBS from the old state do not.
        let old =
            0xf000_0000 | (1 << 24) | (1 << 23) | (1 << 21) | (1 << 20) | (3 << 10) | (1 << 12);
        let i = inject_undef(old | EL0T, SPAN);
        assert_eq!(i.new_spsr, 0xf000_0000 | (1 << 24) | ENTRY);
        // PAN carries over when SPAN=1 ...
        let i = inject_undef((1 << 22) | EL1H, SPAN);
        assert_eq!(i.new_spsr, (1 << 22) | ENTRY);
        // ... and is forced on when SPAN=0.
        let i = inject_undef(EL1H, 0);
        assert_eq!(i.new_spsr, (1 << 22) | ENTRY);
        // SSBS follows SCTLR_EL1.DSSBS.
        let i = inject_undef(EL1H, SPAN | (1 << 44));
        assert_eq!(i.new_spsr, (1 << 12) | ENTRY);
    }
}
