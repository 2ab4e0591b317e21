//! `ESR_ELx`: exception class, instruction length, syndrome, and a
//! human-readable rendering for the hypervisor's fatal-exception path.

use core::fmt;

use crate::sysreg::SysRegAccess;
use crate::{AccessWidth, XReg};

/// Exception Class values (`ESR_ELx.EC`, bits `[31:26]`).
///
/// The hypervisor's exit table is keyed by these. Values not listed are
/// unallocated in the Arm ARM.
pub mod ec {
    pub const UNKNOWN: u8 = 0x00;
    pub const WFX: u8 = 0x01;
    pub const CP15_32: u8 = 0x03;
    pub const CP15_64: u8 = 0x04;
    pub const CP14_MR: u8 = 0x05;
    pub const CP14_LS: u8 = 0x06;
    pub const FP_ASIMD: u8 = 0x07;
    pub const CP10_ID: u8 = 0x08;
    pub const PAC: u8 = 0x09;
    pub const OTHER: u8 = 0x0a;
    pub const CP14_64: u8 = 0x0c;
    pub const BTI: u8 = 0x0d;
    pub const ILLEGAL_STATE: u8 = 0x0e;
    pub const SVC32: u8 = 0x11;
    pub const HVC32: u8 = 0x12;
    pub const SMC32: u8 = 0x13;
    pub const SYS128: u8 = 0x14;
    pub const SVC64: u8 = 0x15;
    pub const HVC64: u8 = 0x16;
    pub const SMC64: u8 = 0x17;
    pub const SYS64: u8 = 0x18;
    pub const SVE: u8 = 0x19;
    pub const ERET: u8 = 0x1a;
    pub const TSTART: u8 = 0x1b;
    pub const FPAC: u8 = 0x1c;
    pub const SME: u8 = 0x1d;
    pub const IMP_DEF: u8 = 0x1f;
    pub const IABT_LOW: u8 = 0x20;
    pub const IABT_CUR: u8 = 0x21;
    pub const PC_ALIGN: u8 = 0x22;
    pub const DABT_LOW: u8 = 0x24;
    pub const DABT_CUR: u8 = 0x25;
    pub const SP_ALIGN: u8 = 0x26;
    pub const MOPS: u8 = 0x27;
    pub const FP_EXC32: u8 = 0x28;
    pub const FP_EXC64: u8 = 0x2c;
    pub const GCS: u8 = 0x2d;
    pub const SERROR: u8 = 0x2f;
    pub const BREAKPT_LOW: u8 = 0x30;
    pub const BREAKPT_CUR: u8 = 0x31;
    pub const SOFTSTP_LOW: u8 = 0x32;
    pub const SOFTSTP_CUR: u8 = 0x33;
    pub const WATCHPT_LOW: u8 = 0x34;
    pub const WATCHPT_CUR: u8 = 0x35;
    pub const BKPT32: u8 = 0x38;
    pub const VECTOR32: u8 = 0x3a;
    pub const BRK64: u8 = 0x3c;
    pub const PROFILING: u8 = 0x3d;
}

/// ISS bit positions shared by several exception classes.
pub(crate) mod iss {
    /// Data Abort: Instruction Syndrome Valid.
    pub const ISV: u32 = 1 << 24;
    pub const SAS_SHIFT: u32 = 22;
    /// Data Abort: Syndrome Sign Extend.
    pub const SSE: u32 = 1 << 21;
    pub const SRT_SHIFT: u32 = 16;
    /// Data Abort: Sixty-Four bit general-purpose register transfer.
    pub const SF: u32 = 1 << 15;
    /// Data Abort: Acquire/Release semantics.
    pub const AR: u32 = 1 << 14;
    /// Abort: FAR not Valid.
    pub const FNV: u32 = 1 << 10;
    /// Abort: External Abort type (implementation defined classification).
    pub const EA: u32 = 1 << 9;
    /// Data Abort: Cache Maintenance (the fault came from a cache or
    /// address-translation instruction, not a load or store).
    pub const CM: u32 = 1 << 8;
    /// Abort: the fault was on a stage-2 walk of a stage-1 translation table.
    pub const S1PTW: u32 = 1 << 7;
    /// Data Abort: Write not Read.
    pub const WNR: u32 = 1 << 6;
    /// Data/Instruction Fault Status Code.
    pub const FSC_MASK: u32 = 0x3f;
    /// SError: Implementation Defined Syndrome.
    pub const IDS: u32 = 1 << 24;
}

/// Whether a Data/Instruction Fault Status Code is a synchronous external abort (or a parity or
/// ECC error), on the access itself or on a translation-table walk: an error the memory
/// system reported, not a translation or permission fault. FAR is valid for some of them,
/// HPFAR_EL2 for none, so such an abort says nothing about which IPA was accessed.
pub fn is_external_abort(fsc: u8) -> bool {
    matches!(fsc & 0x3f, 0x10 | 0x12..=0x18 | 0x1b..=0x1f)
}

/// `ESR_EL2` (or any `ESR_ELx`) value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Esr(pub u64);

impl Esr {
    pub const EC_SHIFT: u32 = 26;
    /// `IL`, Instruction Length: set for a 32-bit instruction (and for every
    /// exception not caused by an instruction, e.g. aborts with `ISV=0`).
    pub const IL: u64 = 1 << 25;
    pub const ISS_MASK: u64 = (1 << 25) - 1;

    /// Builds an ESR value from its three fields (used to synthesise syndromes
    /// for injection, and by tests).
    pub const fn new(ec: u8, il: bool, iss: u32) -> Self {
        Self(
            ((ec as u64 & 0x3f) << Self::EC_SHIFT)
                | if il { Self::IL } else { 0 }
                | (iss as u64 & Self::ISS_MASK),
        )
    }

    /// Exception Class, bits `[31:26]`.
    pub const fn ec(self) -> u8 {
        ((self.0 >> Self::EC_SHIFT) & 0x3f) as u8
    }

    /// Instruction Length, bit `[25]`: `true` for a 32-bit (A64/A32) instruction.
    pub const fn il(self) -> bool {
        self.0 & Self::IL != 0
    }

    /// Instruction Specific Syndrome, bits `[24:0]`.
    pub const fn iss(self) -> u32 {
        (self.0 & Self::ISS_MASK) as u32
    }

    /// `ISS2`, bits `[55:32]` (FEAT_LS64, FEAT_MTE, FEAT_GCS, ... extensions).
    pub const fn iss2(self) -> u32 {
        ((self.0 >> 32) & 0xff_ffff) as u32
    }

    /// Bytes to add to `ELR_EL2` to step over the trapping instruction: 4
    /// for A64, 2 for a 16-bit T32 instruction (`IL=0`).
    pub const fn instr_len(self) -> u64 {
        if self.il() { 4 } else { 2 }
    }
}

/// Human-readable name of an Exception Class; `"reserved"` for unallocated
/// values. Names follow the Arm ARM's ESR_ELx.EC table.
pub fn ec_name(ec: u8) -> &'static str {
    match ec {
        ec::UNKNOWN => "unknown reason",
        ec::WFX => "trapped WFI/WFE",
        ec::CP15_32 => "trapped MCR/MRC (coproc 0b1111)",
        ec::CP15_64 => "trapped MCRR/MRRC (coproc 0b1111)",
        ec::CP14_MR => "trapped MCR/MRC (coproc 0b1110)",
        ec::CP14_LS => "trapped LDC/STC",
        ec::FP_ASIMD => "trapped SVE/SIMD/FP access",
        ec::CP10_ID => "trapped VMRS (ID group)",
        ec::PAC => "trapped pointer authentication instruction",
        ec::OTHER => "trapped LD64B/ST64B or other instruction",
        ec::CP14_64 => "trapped MRRC (coproc 0b1110)",
        ec::BTI => "branch target exception",
        ec::ILLEGAL_STATE => "illegal execution state",
        ec::SVC32 => "SVC from AArch32",
        ec::HVC32 => "HVC from AArch32",
        ec::SMC32 => "SMC from AArch32",
        ec::SYS128 => "trapped MSRR/MRRS/SYSP (128-bit system register)",
        ec::SVC64 => "SVC from AArch64",
        ec::HVC64 => "HVC from AArch64",
        ec::SMC64 => "SMC from AArch64",
        ec::SYS64 => "trapped MSR/MRS/system instruction",
        ec::SVE => "trapped SVE access",
        ec::ERET => "trapped ERET/ERETAA/ERETAB",
        ec::TSTART => "trapped TSTART (TME)",
        ec::FPAC => "pointer authentication failure",
        ec::SME => "trapped SME access",
        ec::IMP_DEF => "implementation defined exception to EL3",
        ec::IABT_LOW => "instruction abort from a lower EL",
        ec::IABT_CUR => "instruction abort from the current EL",
        ec::PC_ALIGN => "PC alignment fault",
        ec::DABT_LOW => "data abort from a lower EL",
        ec::DABT_CUR => "data abort from the current EL",
        ec::SP_ALIGN => "SP alignment fault",
        ec::MOPS => "memory copy/set (MOPS) exception",
        ec::FP_EXC32 => "floating-point exception from AArch32",
        ec::FP_EXC64 => "floating-point exception from AArch64",
        ec::GCS => "guarded control stack exception",
        ec::SERROR => "SError interrupt",
        ec::BREAKPT_LOW => "breakpoint from a lower EL",
        ec::BREAKPT_CUR => "breakpoint from the current EL",
        ec::SOFTSTP_LOW => "software step from a lower EL",
        ec::SOFTSTP_CUR => "software step from the current EL",
        ec::WATCHPT_LOW => "watchpoint from a lower EL",
        ec::WATCHPT_CUR => "watchpoint from the current EL",
        ec::BKPT32 => "BKPT from AArch32",
        ec::VECTOR32 => "vector catch from AArch32",
        ec::BRK64 => "BRK from AArch64",
        ec::PROFILING => "profiling exception",
        _ => "reserved",
    }
}

/// Name of a Data/Instruction Fault Status Code (`ISS.DFSC` / `ISS.IFSC`,
/// 6 bits) with the translation level where the encoding carries one.
pub fn fsc_name(fsc: u8) -> &'static str {
    const ADDR_SIZE: [&str; 4] = [
        "address size fault level 0",
        "address size fault level 1",
        "address size fault level 2",
        "address size fault level 3",
    ];
    const TRANSLATION: [&str; 4] = [
        "translation fault level 0",
        "translation fault level 1",
        "translation fault level 2",
        "translation fault level 3",
    ];
    const ACCESS_FLAG: [&str; 4] = [
        "access flag fault level 0",
        "access flag fault level 1",
        "access flag fault level 2",
        "access flag fault level 3",
    ];
    const PERMISSION: [&str; 4] = [
        "permission fault level 0",
        "permission fault level 1",
        "permission fault level 2",
        "permission fault level 3",
    ];
    const SEA_WALK: [&str; 4] = [
        "synchronous external abort on walk level 0",
        "synchronous external abort on walk level 1",
        "synchronous external abort on walk level 2",
        "synchronous external abort on walk level 3",
    ];
    const ECC_WALK: [&str; 4] = [
        "synchronous parity/ECC error on walk level 0",
        "synchronous parity/ECC error on walk level 1",
        "synchronous parity/ECC error on walk level 2",
        "synchronous parity/ECC error on walk level 3",
    ];
    const GPF_WALK: [&str; 4] = [
        "granule protection fault on walk level 0",
        "granule protection fault on walk level 1",
        "granule protection fault on walk level 2",
        "granule protection fault on walk level 3",
    ];
    let level = (fsc & 3) as usize;
    match fsc & 0x3f {
        0x00..=0x03 => ADDR_SIZE[level],
        0x04..=0x07 => TRANSLATION[level],
        0x08..=0x0b => ACCESS_FLAG[level],
        0x0c..=0x0f => PERMISSION[level],
        0x10 => "synchronous external abort",
        0x11 => "synchronous tag check fault",
        0x12 => "synchronous external abort on walk level -2",
        0x13 => "synchronous external abort on walk level -1",
        0x14..=0x17 => SEA_WALK[level],
        0x18 => "synchronous parity/ECC error",
        0x1b => "synchronous parity/ECC error on walk level -1",
        0x1c..=0x1f => ECC_WALK[level],
        0x21 => "alignment fault",
        0x22 => "debug exception",
        0x23 => "granule protection fault on walk level -1",
        0x24..=0x27 => GPF_WALK[level],
        0x28 => "granule protection fault",
        0x29 => "address size fault level -1",
        0x2a => "translation fault level -2",
        0x2b => "translation fault level -1",
        0x2c => "address size fault level -2",
        0x30 => "TLB conflict abort",
        0x31 => "unsupported atomic hardware update fault",
        0x34 => "implementation defined fault (lockdown)",
        0x35 => "implementation defined fault (unsupported exclusive or atomic)",
        _ => "reserved fault status code",
    }
}

impl fmt::Debug for Esr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Esr({:#x}: {})", self.0, self)
    }
}

impl fmt::Display for Esr {
    /// `EC 0x24 (data abort from a lower EL) IL=1 ISS=0x1810047 [ISV WnR=1
    /// SAS=word SRT=x1 DFSC=translation fault level 3]`: the class by name,
    /// then the raw fields, then whatever the ISS says in the class's own
    /// terms. Every class prints at least name, IL and the raw ISS.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ec = self.ec();
        let iss = self.iss();
        write!(f, "EC {:#04x} ({}) IL={} ISS={:#x}", ec, ec_name(ec), self.il() as u8, iss)?;
        if self.iss2() != 0 {
            write!(f, " ISS2={:#x}", self.iss2())?;
        }
        match ec {
            ec::WFX => {
                // TI, bits [1:0]: WFI, WFE, WFIT, WFET; RV (bit 2) says the
                // timeout register field Rn [9:5] is valid.
                let mnemonic = ["WFI", "WFE", "WFIT", "WFET"][(iss & 3) as usize];
                write!(f, " [{mnemonic}")?;
                if iss & (1 << 2) != 0 {
                    write!(f, " Rt={}", XReg(((iss >> 5) & 0x1f) as u8))?;
                }
                f.write_str("]")
            }
            ec::SVC32 | ec::HVC32 | ec::SVC64 | ec::HVC64 | ec::SMC64 => {
                write!(f, " [imm={:#x}]", iss & 0xffff)
            }
            ec::BRK64 => write!(f, " [comment={:#x}]", iss & 0xffff),
            ec::SYS64 => write!(f, " [{}]", SysRegAccess::from_iss(iss)),
            ec::IABT_LOW | ec::IABT_CUR => {
                f.write_str(" [")?;
                write_abort_flags(f, iss)?;
                write!(f, "IFSC={}]", fsc_name((iss & iss::FSC_MASK) as u8))
            }
            ec::DABT_LOW | ec::DABT_CUR => {
                f.write_str(" [")?;
                if iss & iss::ISV != 0 {
                    let sas = AccessWidth::from_sas((iss >> iss::SAS_SHIFT) as u8);
                    write!(f, "ISV WnR={} SAS={sas} ", (iss & iss::WNR != 0) as u8)?;
                    if iss & iss::SSE != 0 {
                        f.write_str("SSE ")?;
                    }
                    write!(f, "SRT={} ", XReg(((iss >> iss::SRT_SHIFT) & 0x1f) as u8))?;
                    if iss & iss::SF != 0 {
                        f.write_str("SF ")?;
                    }
                    if iss & iss::AR != 0 {
                        f.write_str("AR ")?;
                    }
                } else {
                    write!(f, "WnR={} ", (iss & iss::WNR != 0) as u8)?;
                }
                if iss & iss::CM != 0 {
                    f.write_str("CM ")?;
                }
                write_abort_flags(f, iss)?;
                write!(f, "DFSC={}]", fsc_name((iss & iss::FSC_MASK) as u8))
            }
            ec::WATCHPT_LOW | ec::WATCHPT_CUR => write!(
                f,
                " [WnR={} DFSC={}]",
                (iss & iss::WNR != 0) as u8,
                fsc_name((iss & iss::FSC_MASK) as u8)
            ),
            ec::SERROR => {
                if iss & iss::IDS != 0 {
                    f.write_str(" [IDS: implementation defined syndrome]")
                } else {
                    // AET, bits [12:10]: the RAS error type.
                    let aet = match (iss >> 10) & 7 {
                        0 => "uncontainable",
                        1 => "unrecoverable",
                        2 => "restartable",
                        3 => "recoverable",
                        6 => "corrected",
                        _ => "reserved",
                    };
                    let dfsc = match iss & iss::FSC_MASK {
                        0 => "uncategorized",
                        0x11 => "asynchronous SError",
                        _ => "reserved",
                    };
                    write!(f, " [AET={aet} ")?;
                    if iss & iss::EA != 0 {
                        f.write_str("EA ")?;
                    }
                    write!(f, "DFSC={dfsc}]")
                }
            }
            _ => Ok(()),
        }
    }
}

/// The flags shared by instruction and data aborts, each followed by a space.
fn write_abort_flags(f: &mut fmt::Formatter<'_>, iss: u32) -> fmt::Result {
    if iss & iss::FNV != 0 {
        f.write_str("FnV ")?;
    }
    if iss & iss::EA != 0 {
        f.write_str("EA ")?;
    }
    if iss & iss::S1PTW != 0 {
        f.write_str("S1PTW ")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    /// External aborts and parity/ECC errors, on the access or on a walk, are told apart from
    /// the faults armhv emulates or reflects (translation, access flag, permission, alignment).
    #[test]
    fn external_aborts_are_recognized() {
        for fsc in [0x10, 0x13, 0x14, 0x17, 0x18, 0x1b, 0x1c, 0x1f] {
            assert!(is_external_abort(fsc), "{fsc:#x}: {}", fsc_name(fsc));
        }
        for fsc in [0x04, 0x07, 0x0b, 0x0f, 0x21, 0x30, 0x11] {
            assert!(!is_external_abort(fsc), "{fsc:#x}: {}", fsc_name(fsc));
        }
    }

    #[test]
    fn fields() {
        let e = Esr(0x9381_0047);
        assert_eq!(e.ec(), 0x24);
        assert!(e.il());
        assert_eq!(e.iss(), 0x181_0047);
        assert_eq!(e.iss2(), 0);
        assert_eq!(e.instr_len(), 4);
        assert_eq!(Esr(0x9181_0047).instr_len(), 2);
        assert_eq!(Esr::new(0x24, true, 0x181_0047), e);
        // Bits above 55 and the ISS2 field do not leak into the others.
        let e = Esr(0xff12_3456_9381_0047);
        assert_eq!(e.ec(), 0x24);
        assert_eq!(e.iss2(), 0x12_3456);
    }

    #[test]
    fn every_allocated_ec_has_a_name() {
        let allocated = [
            0x00, 0x01, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0c, 0x0d, 0x0e, 0x11,
            0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1f, 0x20,
            0x21, 0x22, 0x24, 0x25, 0x26, 0x27, 0x28, 0x2c, 0x2d, 0x2f, 0x30, 0x31, 0x32, 0x33,
            0x34, 0x35, 0x38, 0x3a, 0x3c, 0x3d,
        ];
        let mut names = std::vec::Vec::new();
        for ec in 0..64u8 {
            let name = ec_name(ec);
            if allocated.contains(&ec) {
                assert_ne!(name, "reserved", "EC {ec:#x}");
                assert!(!names.contains(&name), "duplicate name {name}");
                names.push(name);
            } else {
                assert_eq!(name, "reserved", "EC {ec:#x}");
            }
        }
        assert_eq!(ec_name(0x24), "data abort from a lower EL");
        assert_eq!(ec_name(0x16), "HVC from AArch64");
    }

    #[test]
    fn fault_status_names() {
        assert_eq!(fsc_name(0x07), "translation fault level 3");
        assert_eq!(fsc_name(0x04), "translation fault level 0");
        assert_eq!(fsc_name(0x0a), "access flag fault level 2");
        assert_eq!(fsc_name(0x0d), "permission fault level 1");
        assert_eq!(fsc_name(0x10), "synchronous external abort");
        assert_eq!(fsc_name(0x15), "synchronous external abort on walk level 1");
        assert_eq!(fsc_name(0x21), "alignment fault");
        assert_eq!(fsc_name(0x2b), "translation fault level -1");
        assert_eq!(fsc_name(0x29), "address size fault level -1");
        assert_eq!(fsc_name(0x30), "TLB conflict abort");
        assert_eq!(fsc_name(0x3f), "reserved fault status code");
        assert_eq!(fsc_name(0x20), "reserved fault status code");
    }

    #[test]
    fn display_data_abort() {
        // STR w1, [x0] to an unmapped IPA: ISV, SAS=word, SRT=1, WnR,
        // DFSC=translation fault level 3.
        assert_eq!(
            format!("{}", Esr(0x9381_0047)),
            "EC 0x24 (data abort from a lower EL) IL=1 ISS=0x1810047 \
             [ISV WnR=1 SAS=word SRT=x1 DFSC=translation fault level 3]"
        );
        // LDRSH x3 with acquire semantics: SAS=halfword, SSE, SF, AR, read.
        let iss = (1 << 24) | (1 << 22) | (1 << 21) | (3 << 16) | (1 << 15) | (1 << 14) | 0x06;
        assert_eq!(
            format!("{}", Esr::new(0x24, true, iss)),
            "EC 0x24 (data abort from a lower EL) IL=1 ISS=0x163c006 \
             [ISV WnR=0 SAS=halfword SSE SRT=x3 SF AR DFSC=translation fault level 2]"
        );
        // No valid syndrome (e.g. LDP), FAR not valid, on a stage-1 walk.
        let iss = (1 << 10) | (1 << 7) | (1 << 6) | 0x0f;
        assert_eq!(
            format!("{}", Esr::new(0x24, true, iss)),
            "EC 0x24 (data abort from a lower EL) IL=1 ISS=0x4cf \
             [WnR=1 FnV S1PTW DFSC=permission fault level 3]"
        );
        // Cache maintenance on device memory, external abort.
        let iss = (1 << 9) | (1 << 8) | (1 << 6) | 0x10;
        assert_eq!(
            format!("{}", Esr::new(0x25, true, iss)),
            "EC 0x25 (data abort from the current EL) IL=1 ISS=0x350 \
             [WnR=1 CM EA DFSC=synchronous external abort]"
        );
    }

    #[test]
    fn display_other_classes() {
        assert_eq!(
            format!("{}", Esr(0x5a00_0000)),
            "EC 0x16 (HVC from AArch64) IL=1 ISS=0x0 [imm=0x0]"
        );
        assert_eq!(format!("{}", Esr(0x0600_0001)), "EC 0x01 (trapped WFI/WFE) IL=1 ISS=0x1 [WFE]");
        assert_eq!(
            format!("{}", Esr::new(0x01, true, (1 << 2) | (5 << 5) | 2)),
            "EC 0x01 (trapped WFI/WFE) IL=1 ISS=0xa6 [WFIT Rt=x5]"
        );
        assert_eq!(
            format!("{}", Esr(0x6230_0069)),
            "EC 0x18 (trapped MSR/MRS/system instruction) IL=1 ISS=0x300069 \
             [MRS x3, ID_AA64PFR0_EL1]"
        );
        assert_eq!(
            format!("{}", Esr(0x8600_000f)),
            "EC 0x21 (instruction abort from the current EL) IL=1 ISS=0xf \
             [IFSC=permission fault level 3]"
        );
        assert_eq!(
            format!("{}", Esr(0xf200_1234)),
            "EC 0x3c (BRK from AArch64) IL=1 ISS=0x1234 [comment=0x1234]"
        );
        assert_eq!(
            format!("{}", Esr(0xbe00_0011)),
            "EC 0x2f (SError interrupt) IL=1 ISS=0x11 [AET=uncontainable DFSC=asynchronous SError]"
        );
        assert_eq!(
            format!("{}", Esr(0xbf00_0000)),
            "EC 0x2f (SError interrupt) IL=1 ISS=0x1000000 [IDS: implementation defined syndrome]"
        );
        assert_eq!(format!("{}", Esr(0x0200_0000)), "EC 0x00 (unknown reason) IL=1 ISS=0x0");
        assert_eq!(format!("{}", Esr(0xfc00_0000)), "EC 0x3f (reserved) IL=0 ISS=0x0");
        assert_eq!(
            format!("{}", Esr(0x0000_0001_9200_0010)),
            "EC 0x24 (data abort from a lower EL) IL=1 ISS=0x10 ISS2=0x1 \
             [WnR=0 DFSC=synchronous external abort]"
        );
        assert_eq!(
            format!("{:?}", Esr(0x5a00_0000)),
            "Esr(0x5a000000: EC 0x16 (HVC from AArch64) IL=1 ISS=0x0 [imm=0x0])"
        );
    }

    #[test]
    fn every_ec_displays() {
        // Whatever the ISS, rendering never panics and always names the class.
        for ec in 0..64u8 {
            for iss in [0u32, 0x1ff_ffff, 0x155_5555, 0x0aa_aaaa] {
                let s = format!("{}", Esr::new(ec, true, iss));
                assert!(s.starts_with(&format!("EC {ec:#04x} ({})", ec_name(ec))), "{s}");
            }
        }
    }
}
