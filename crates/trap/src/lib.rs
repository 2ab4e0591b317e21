//! EL2 trap syndrome decoding.
//!
//! When a guest traps to EL2 the hardware leaves three registers behind:
//! `ESR_EL2` (exception class and instruction-specific syndrome), `FAR_EL2`
//! (the faulting virtual address) and `HPFAR_EL2` (the faulting IPA, page
//! granular). The hypervisor's vector code reads them and calls [`decode`],
//! which turns them into a typed [`Exit`]; everything after that point works on
//! the typed value and never looks at raw syndrome bits again. The crate is
//! hardware-independent so every decoding rule is unit-tested on the host.
//!
//! Besides decoding, the crate holds the pieces of trap handling that are pure
//! arithmetic on architectural values: the SMCCC function-ID layout
//! ([`smccc`]), the system-register encoding space ([`sysreg`]), what a guest
//! reads from the ID registers ([`id_regs`]) and the syndrome/vector/PSTATE
//! computation for injecting a synchronous exception into a guest's EL1
//! ([`inject`]), and the Spectre-v2/BHB policy: what each CPU model needs on a
//! guest's exit and what guests are told ([`speculation`]).
//!
//! Field names follow the Arm ARM (DDI 0487), section D24 "ESR_EL2" and the
//! per-EC ISS encodings.
#![no_std]

#[cfg(test)]
extern crate std;

use core::fmt;

pub mod esr;
pub mod exit;
pub mod id_regs;
pub mod inject;
pub mod smccc;
pub mod speculation;
pub mod sysreg;

pub use esr::{Esr, ec_name, fsc_name};
pub use exit::{DataAbort, Exit, FaultKind, InstrAbort, MmioAccess, decode};
pub use inject::{AbortKind, Injection, inject_abort, inject_undef};
pub use smccc::{FunctionId, Owner};
pub use sysreg::{SysReg, SysRegAccess};

/// Size of a single memory access.
///
/// Defined here rather than in `vdev` because the data-abort syndrome
/// (`ISS.SAS`) is where the width first appears; `vdev` depends on this crate
/// and re-exports the type, so the device model and the decoder share one
/// definition without a dependency cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum AccessWidth {
    /// 8 bits (`LDRB`/`STRB`).
    Byte = 1,
    /// 16 bits (`LDRH`/`STRH`).
    Half = 2,
    /// 32 bits.
    Word = 4,
    /// 64 bits.
    Double = 8,
}

impl AccessWidth {
    /// Decodes the Data Abort `ISS.SAS` field (Syndrome Access Size, 2 bits).
    pub const fn from_sas(sas: u8) -> Self {
        match sas & 3 {
            0 => Self::Byte,
            1 => Self::Half,
            2 => Self::Word,
            _ => Self::Double,
        }
    }

    /// The width for an access of `bytes` bytes, if it is 1, 2, 4 or 8.
    pub const fn from_bytes(bytes: u64) -> Option<Self> {
        match bytes {
            1 => Some(Self::Byte),
            2 => Some(Self::Half),
            4 => Some(Self::Word),
            8 => Some(Self::Double),
            _ => None,
        }
    }

    pub const fn bytes(self) -> u64 {
        self as u64
    }

    pub const fn bits(self) -> u32 {
        (self as u32) * 8
    }

    /// All-ones mask of the access width (a shift, no branch: this runs on every MMIO access).
    pub const fn mask(self) -> u64 {
        u64::MAX >> (64 - self.bits())
    }

    /// Keeps only the low `self.bits()` bits of `value`.
    pub const fn truncate(self, value: u64) -> u64 {
        value & self.mask()
    }
}

impl fmt::Display for AccessWidth {
    /// The Arm ARM's names for the access sizes ("SAS=word").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Byte => "byte",
            Self::Half => "halfword",
            Self::Word => "word",
            Self::Double => "doubleword",
        })
    }
}

/// Formats a general-purpose register number as the 64-bit register name;
/// 31 in a load/store or MRS/MSR register field is the zero register.
pub(crate) struct XReg(pub u8);

impl fmt::Display for XReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 31 { f.write_str("xzr") } else { write!(f, "x{}", self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn access_width() {
        assert_eq!(AccessWidth::from_sas(0), AccessWidth::Byte);
        assert_eq!(AccessWidth::from_sas(1), AccessWidth::Half);
        assert_eq!(AccessWidth::from_sas(2), AccessWidth::Word);
        assert_eq!(AccessWidth::from_sas(3), AccessWidth::Double);
        for (w, bytes, mask) in [
            (AccessWidth::Byte, 1, 0xff),
            (AccessWidth::Half, 2, 0xffff),
            (AccessWidth::Word, 4, 0xffff_ffff),
            (AccessWidth::Double, 8, u64::MAX),
        ] {
            assert_eq!(w.bytes(), bytes);
            assert_eq!(w.bits() as u64, bytes * 8);
            assert_eq!(w.mask(), mask);
            assert_eq!(AccessWidth::from_bytes(bytes), Some(w));
            assert_eq!(w.truncate(u64::MAX), mask);
        }
        assert_eq!(AccessWidth::from_bytes(3), None);
        assert_eq!(AccessWidth::from_bytes(16), None);
        assert_eq!(format!("{}", AccessWidth::Half), "halfword");
        assert_eq!(format!("{}/{}", XReg(3), XReg(31)), "x3/xzr");
    }
}
