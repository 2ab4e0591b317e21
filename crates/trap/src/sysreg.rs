//! System register encodings and trapped `MRS`/`MSR`/`SYS` accesses.
//!
//! A system register (or system instruction) is named by five fields,
//! `op0, op1, CRn, CRm, op2`. [`SysReg`] packs them exactly as they sit in
//! bits `[20:5]` of the `MRS`/`MSR`/`SYS` instruction, so an encoding read from a
//! trap compares directly against the constants below, and
//! `S<op0>_<op1>_C<n>_C<m>_<op2>` (the assembler's generic syntax) is its
//! display form when no name is known.

use core::fmt;

use crate::XReg;

/// A packed system register / system instruction encoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct SysReg(pub u16);

impl SysReg {
    pub const fn new(op0: u8, op1: u8, crn: u8, crm: u8, op2: u8) -> Self {
        Self(
            ((op0 as u16 & 3) << 14)
                | ((op1 as u16 & 7) << 11)
                | ((crn as u16 & 15) << 7)
                | ((crm as u16 & 15) << 3)
                | (op2 as u16 & 7),
        )
    }
    pub const fn op0(self) -> u8 {
        (self.0 >> 14) as u8 & 3
    }
    pub const fn op1(self) -> u8 {
        (self.0 >> 11) as u8 & 7
    }
    pub const fn crn(self) -> u8 {
        (self.0 >> 7) as u8 & 15
    }
    pub const fn crm(self) -> u8 {
        (self.0 >> 3) as u8 & 15
    }
    pub const fn op2(self) -> u8 {
        self.0 as u8 & 7
    }

    /// The feature ID space `op0=3, op1=0, CRn=0, CRm=1..=7` that
    /// `HCR_EL2.TID3` traps. Unallocated encodings in it are architecturally
    /// RAZ, which is how the hypervisor should emulate unknown ones.
    pub const fn is_feature_id(self) -> bool {
        self.op0() == 3 && self.op1() == 0 && self.crn() == 0 && matches!(self.crm(), 1..=7)
    }

    /// `DC ISW/CSW/CISW` and their MTE tag variants: the by-set/way cache
    /// maintenance instructions trapped by `HCR_EL2.TSW`. Set/way operations
    /// only make sense on the physical CPU's own caches, so a hypervisor
    /// turns them into by-VA cleaning of the guest's memory (or ignores them).
    pub const fn is_set_way(self) -> bool {
        self.op0() == 1
            && self.op1() == 0
            && self.crn() == 7
            && matches!(self.crm(), 6 | 10 | 14)
            && matches!(self.op2(), 2 | 4 | 6)
    }

    /// The architectural name, if this crate knows it.
    pub fn name(self) -> Option<&'static str> {
        name(self)
    }
}

impl fmt::Display for SysReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(
                f,
                "S{}_{}_C{}_C{}_{}",
                self.op0(),
                self.op1(),
                self.crn(),
                self.crm(),
                self.op2()
            ),
        }
    }
}

impl fmt::Debug for SysReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SysReg({self})")
    }
}

/// A trapped `MRS`, `MSR` (register) or `SYS`/`SYSL` from AArch64: the ISS
/// of EC 0x18.
///
/// ISS layout: `Op0` `[21:20]`, `Op2` `[19:17]`, `Op1` `[16:14]`, `CRn` `[13:10]`,
/// `Rt` `[9:5]`, `CRm` `[4:1]`, `Direction` `[0]` (1 = read, i.e. `MRS`/`SYSL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysRegAccess {
    pub op0: u8,
    pub op1: u8,
    pub crn: u8,
    pub crm: u8,
    pub op2: u8,
    /// Transfer register; 31 is `xzr` (reads as zero, writes discarded).
    pub rt: u8,
    /// `MRS`/`SYSL`: the hypervisor writes the result to `rt`.
    pub read: bool,
}

impl SysRegAccess {
    /// Decodes the ISS of an EC 0x18 syndrome.
    pub const fn from_iss(iss: u32) -> Self {
        Self {
            op0: ((iss >> 20) & 3) as u8,
            op2: ((iss >> 17) & 7) as u8,
            op1: ((iss >> 14) & 7) as u8,
            crn: ((iss >> 10) & 15) as u8,
            rt: ((iss >> 5) & 31) as u8,
            crm: ((iss >> 1) & 15) as u8,
            read: iss & 1 != 0,
        }
    }

    /// The register or instruction accessed, comparable to the constants of
    /// [this module](crate::sysreg).
    pub const fn encoding(&self) -> SysReg {
        SysReg::new(self.op0, self.op1, self.crn, self.crm, self.op2)
    }
}

impl fmt::Display for SysRegAccess {
    /// Renders the trapped instruction: `MRS x3, ID_AA64PFR0_EL1`,
    /// `MSR CNTP_CTL_EL0, x0`, `DC ISW, x5`, `SYSL x1, S1_0_C7_C6_0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reg = self.encoding();
        let rt = XReg(self.rt);
        match (self.op0 == 1, self.read) {
            (false, true) => write!(f, "MRS {rt}, {reg}"),
            (false, false) => write!(f, "MSR {reg}, {rt}"),
            (true, true) => write!(f, "SYSL {rt}, {reg}"),
            (true, false) if reg.name().is_some() => write!(f, "{reg}, {rt}"),
            (true, false) => write!(f, "SYS {reg}, {rt}"),
        }
    }
}

macro_rules! sysregs {
    ($($name:ident ($op0:literal, $op1:literal, $crn:literal, $crm:literal, $op2:literal)
       $(as $disp:literal)?;)*) => {
        $(
            #[doc = concat!(
                "`S", stringify!($op0), "_", stringify!($op1), "_C", stringify!($crn),
                "_C", stringify!($crm), "_", stringify!($op2), "`"
            )]
            pub const $name: SysReg = SysReg::new($op0, $op1, $crn, $crm, $op2);
        )*
        const TABLE: &[(SysReg, &str)] = &[$(($name, sysregs!(@disp $name $($disp)?))),*];
    };
    (@disp $name:ident) => { stringify!($name) };
    (@disp $name:ident $disp:literal) => { $disp };
}

sysregs! {
    // Identification: op0=3 op1=0 CRn=0, CRm=0..7 (HCR_EL2.TID1..TID3).
    MIDR_EL1(3, 0, 0, 0, 0);
    MPIDR_EL1(3, 0, 0, 0, 5);
    REVIDR_EL1(3, 0, 0, 0, 6);
    ID_PFR0_EL1(3, 0, 0, 1, 0);
    ID_PFR1_EL1(3, 0, 0, 1, 1);
    ID_DFR0_EL1(3, 0, 0, 1, 2);
    ID_AFR0_EL1(3, 0, 0, 1, 3);
    ID_MMFR0_EL1(3, 0, 0, 1, 4);
    ID_MMFR1_EL1(3, 0, 0, 1, 5);
    ID_MMFR2_EL1(3, 0, 0, 1, 6);
    ID_MMFR3_EL1(3, 0, 0, 1, 7);
    ID_ISAR0_EL1(3, 0, 0, 2, 0);
    ID_ISAR1_EL1(3, 0, 0, 2, 1);
    ID_ISAR2_EL1(3, 0, 0, 2, 2);
    ID_ISAR3_EL1(3, 0, 0, 2, 3);
    ID_ISAR4_EL1(3, 0, 0, 2, 4);
    ID_ISAR5_EL1(3, 0, 0, 2, 5);
    ID_MMFR4_EL1(3, 0, 0, 2, 6);
    ID_ISAR6_EL1(3, 0, 0, 2, 7);
    MVFR0_EL1(3, 0, 0, 3, 0);
    MVFR1_EL1(3, 0, 0, 3, 1);
    MVFR2_EL1(3, 0, 0, 3, 2);
    ID_PFR2_EL1(3, 0, 0, 3, 4);
    ID_DFR1_EL1(3, 0, 0, 3, 5);
    ID_MMFR5_EL1(3, 0, 0, 3, 6);
    ID_AA64PFR0_EL1(3, 0, 0, 4, 0);
    ID_AA64PFR1_EL1(3, 0, 0, 4, 1);
    ID_AA64PFR2_EL1(3, 0, 0, 4, 2);
    ID_AA64ZFR0_EL1(3, 0, 0, 4, 4);
    ID_AA64SMFR0_EL1(3, 0, 0, 4, 5);
    ID_AA64FPFR0_EL1(3, 0, 0, 4, 7);
    ID_AA64DFR0_EL1(3, 0, 0, 5, 0);
    ID_AA64DFR1_EL1(3, 0, 0, 5, 1);
    ID_AA64DFR2_EL1(3, 0, 0, 5, 2);
    ID_AA64AFR0_EL1(3, 0, 0, 5, 4);
    ID_AA64AFR1_EL1(3, 0, 0, 5, 5);
    ID_AA64ISAR0_EL1(3, 0, 0, 6, 0);
    ID_AA64ISAR1_EL1(3, 0, 0, 6, 1);
    ID_AA64ISAR2_EL1(3, 0, 0, 6, 2);
    ID_AA64ISAR3_EL1(3, 0, 0, 6, 3);
    ID_AA64MMFR0_EL1(3, 0, 0, 7, 0);
    ID_AA64MMFR1_EL1(3, 0, 0, 7, 1);
    ID_AA64MMFR2_EL1(3, 0, 0, 7, 2);
    ID_AA64MMFR3_EL1(3, 0, 0, 7, 3);
    ID_AA64MMFR4_EL1(3, 0, 0, 7, 4);

    // Cache identification (HCR_EL2.TID2) and DCZID (TID?/TDZ).
    CCSIDR_EL1(3, 1, 0, 0, 0);
    CLIDR_EL1(3, 1, 0, 0, 1);
    CCSIDR2_EL1(3, 1, 0, 0, 2);
    GMID_EL1(3, 1, 0, 0, 4);
    AIDR_EL1(3, 1, 0, 0, 7);
    CSSELR_EL1(3, 2, 0, 0, 0);
    CTR_EL0(3, 3, 0, 0, 1);
    DCZID_EL0(3, 3, 0, 0, 7);

    // EL1 memory-system control (HCR_EL2.TVM/TRVM, TACR, TLOR).
    SCTLR_EL1(3, 0, 1, 0, 0);
    ACTLR_EL1(3, 0, 1, 0, 1);
    CPACR_EL1(3, 0, 1, 0, 2);
    TTBR0_EL1(3, 0, 2, 0, 0);
    TTBR1_EL1(3, 0, 2, 0, 1);
    TCR_EL1(3, 0, 2, 0, 2);
    AFSR0_EL1(3, 0, 5, 1, 0);
    AFSR1_EL1(3, 0, 5, 1, 1);
    ESR_EL1(3, 0, 5, 2, 0);
    FAR_EL1(3, 0, 6, 0, 0);
    PAR_EL1(3, 0, 7, 4, 0);
    MAIR_EL1(3, 0, 10, 2, 0);
    AMAIR_EL1(3, 0, 10, 3, 0);
    LORSA_EL1(3, 0, 10, 4, 0);
    LOREA_EL1(3, 0, 10, 4, 1);
    LORN_EL1(3, 0, 10, 4, 2);
    LORC_EL1(3, 0, 10, 4, 3);
    LORID_EL1(3, 0, 10, 4, 7);
    VBAR_EL1(3, 0, 12, 0, 0);
    CONTEXTIDR_EL1(3, 0, 13, 0, 1);
    TPIDR_EL1(3, 0, 13, 0, 4);

    // Debug (MDCR_EL2.TDA/TDOSA/TDRA).
    MDCCINT_EL1(2, 0, 0, 2, 0);
    MDSCR_EL1(2, 0, 0, 2, 2);
    OSECCR_EL1(2, 0, 0, 6, 2);
    OSLAR_EL1(2, 0, 1, 0, 4);
    OSLSR_EL1(2, 0, 1, 1, 4);
    OSDLR_EL1(2, 0, 1, 3, 4);
    DBGPRCR_EL1(2, 0, 1, 4, 4);
    DBGCLAIMSET_EL1(2, 0, 7, 8, 6);
    DBGCLAIMCLR_EL1(2, 0, 7, 9, 6);
    DBGAUTHSTATUS_EL1(2, 0, 7, 14, 6);
    MDCCSR_EL0(2, 3, 0, 1, 0);

    // Performance monitors (MDCR_EL2.TPM/TPMCR).
    PMINTENSET_EL1(3, 0, 9, 14, 1);
    PMINTENCLR_EL1(3, 0, 9, 14, 2);
    PMCR_EL0(3, 3, 9, 12, 0);
    PMCNTENSET_EL0(3, 3, 9, 12, 1);
    PMCNTENCLR_EL0(3, 3, 9, 12, 2);
    PMOVSCLR_EL0(3, 3, 9, 12, 3);
    PMSWINC_EL0(3, 3, 9, 12, 4);
    PMSELR_EL0(3, 3, 9, 12, 5);
    PMCEID0_EL0(3, 3, 9, 12, 6);
    PMCEID1_EL0(3, 3, 9, 12, 7);
    PMCCNTR_EL0(3, 3, 9, 13, 0);
    PMXEVTYPER_EL0(3, 3, 9, 13, 1);
    PMXEVCNTR_EL0(3, 3, 9, 13, 2);
    PMUSERENR_EL0(3, 3, 9, 14, 0);
    PMOVSSET_EL0(3, 3, 9, 14, 3);
    PMCCFILTR_EL0(3, 3, 14, 15, 7);

    // Generic timer (CNTHCTL_EL2 traps).
    CNTKCTL_EL1(3, 0, 14, 1, 0);
    CNTFRQ_EL0(3, 3, 14, 0, 0);
    CNTPCT_EL0(3, 3, 14, 0, 1);
    CNTVCT_EL0(3, 3, 14, 0, 2);
    CNTPCTSS_EL0(3, 3, 14, 0, 5);
    CNTVCTSS_EL0(3, 3, 14, 0, 6);
    CNTP_TVAL_EL0(3, 3, 14, 2, 0);
    CNTP_CTL_EL0(3, 3, 14, 2, 1);
    CNTP_CVAL_EL0(3, 3, 14, 2, 2);
    CNTV_TVAL_EL0(3, 3, 14, 3, 0);
    CNTV_CTL_EL0(3, 3, 14, 3, 1);
    CNTV_CVAL_EL0(3, 3, 14, 3, 2);

    // GICv3 CPU interface (ICH_HCR_EL2 traps; SGI generation is always
    // trapped to the virtual GIC model when emulated).
    ICC_PMR_EL1(3, 0, 4, 6, 0);
    ICC_IAR0_EL1(3, 0, 12, 8, 0);
    ICC_EOIR0_EL1(3, 0, 12, 8, 1);
    ICC_HPPIR0_EL1(3, 0, 12, 8, 2);
    ICC_BPR0_EL1(3, 0, 12, 8, 3);
    ICC_AP0R0_EL1(3, 0, 12, 8, 4);
    ICC_AP0R1_EL1(3, 0, 12, 8, 5);
    ICC_AP0R2_EL1(3, 0, 12, 8, 6);
    ICC_AP0R3_EL1(3, 0, 12, 8, 7);
    ICC_AP1R0_EL1(3, 0, 12, 9, 0);
    ICC_AP1R1_EL1(3, 0, 12, 9, 1);
    ICC_AP1R2_EL1(3, 0, 12, 9, 2);
    ICC_AP1R3_EL1(3, 0, 12, 9, 3);
    ICC_DIR_EL1(3, 0, 12, 11, 1);
    ICC_RPR_EL1(3, 0, 12, 11, 3);
    ICC_SGI1R_EL1(3, 0, 12, 11, 5);
    ICC_ASGI1R_EL1(3, 0, 12, 11, 6);
    ICC_SGI0R_EL1(3, 0, 12, 11, 7);
    ICC_IAR1_EL1(3, 0, 12, 12, 0);
    ICC_EOIR1_EL1(3, 0, 12, 12, 1);
    ICC_HPPIR1_EL1(3, 0, 12, 12, 2);
    ICC_BPR1_EL1(3, 0, 12, 12, 3);
    ICC_CTLR_EL1(3, 0, 12, 12, 4);
    ICC_SRE_EL1(3, 0, 12, 12, 5);
    ICC_IGRPEN0_EL1(3, 0, 12, 12, 6);
    ICC_IGRPEN1_EL1(3, 0, 12, 12, 7);

    // Data cache maintenance by set/way (op0=1 SYS instructions, trapped by
    // HCR_EL2.TSW), with the FEAT_MTE2 tag variants.
    DC_ISW(1, 0, 7, 6, 2) as "DC ISW";
    DC_IGSW(1, 0, 7, 6, 4) as "DC IGSW";
    DC_IGDSW(1, 0, 7, 6, 6) as "DC IGDSW";
    DC_CSW(1, 0, 7, 10, 2) as "DC CSW";
    DC_CGSW(1, 0, 7, 10, 4) as "DC CGSW";
    DC_CGDSW(1, 0, 7, 10, 6) as "DC CGDSW";
    DC_CISW(1, 0, 7, 14, 2) as "DC CISW";
    DC_CIGSW(1, 0, 7, 14, 4) as "DC CIGSW";
    DC_CIGDSW(1, 0, 7, 14, 6) as "DC CIGDSW";
}

/// The architectural name of `r` (`"ID_AA64PFR0_EL1"`, `"DC ISW"`), if it is
/// one of the constants in this module. Linear search: for diagnostics, not
/// for the trap fast path (which matches on the constants).
pub fn name(r: SysReg) -> Option<&'static str> {
    TABLE.iter().find(|(reg, _)| *reg == r).map(|&(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn packing_matches_instruction_bits() {
        // MRS x0, MIDR_EL1 = 0xd5380000; bits [20:5] are the encoding.
        assert_eq!(SysReg((0xd538_0000u32 >> 5) as u16), MIDR_EL1);
        // MRS x0, ID_AA64PFR0_EL1 = 0xd5380400.
        assert_eq!(SysReg((0xd538_0400u32 >> 5) as u16), ID_AA64PFR0_EL1);
        // MSR CNTP_CTL_EL0, x0 = 0xd51be220.
        assert_eq!(SysReg(((0xd51b_e220u32 >> 5) & 0xffff) as u16), CNTP_CTL_EL0);
        // DC CISW, x0 = 0xd5087e40.
        assert_eq!(SysReg(((0xd508_7e40u32 >> 5) & 0xffff) as u16), DC_CISW);
        let r = SysReg::new(3, 3, 14, 2, 2);
        assert_eq!((r.op0(), r.op1(), r.crn(), r.crm(), r.op2()), (3, 3, 14, 2, 2));
        assert_eq!(r, CNTP_CVAL_EL0);
    }

    #[test]
    fn names() {
        assert_eq!(name(ID_AA64PFR0_EL1), Some("ID_AA64PFR0_EL1"));
        assert_eq!(name(ICC_SGI1R_EL1), Some("ICC_SGI1R_EL1"));
        assert_eq!(name(DC_CSW), Some("DC CSW"));
        assert_eq!(CNTP_TVAL_EL0.name(), Some("CNTP_TVAL_EL0"));
        assert_eq!(name(SysReg::new(3, 0, 0, 3, 3)), None);
        assert_eq!(format!("{}", SysReg::new(3, 0, 0, 3, 3)), "S3_0_C0_C3_3");
        assert_eq!(format!("{:?}", MPIDR_EL1), "SysReg(MPIDR_EL1)");
    }

    #[test]
    fn table_has_no_duplicates() {
        for (i, (a, an)) in TABLE.iter().enumerate() {
            for (b, bn) in &TABLE[i + 1..] {
                assert_ne!(a, b, "{an} and {bn} share an encoding");
                assert_ne!(an, bn);
            }
        }
    }

    #[test]
    fn id_block() {
        // Every register of the ID block is in the feature-ID space except
        // the CRm=0 ones (MIDR/MPIDR/REVIDR come from VPIDR/VMPIDR instead).
        let mut n = 0;
        for crm in 0..8 {
            for op2 in 0..8 {
                let r = SysReg::new(3, 0, 0, crm, op2);
                assert_eq!(r.is_feature_id(), crm >= 1);
                n += r.name().is_some() as u32;
            }
        }
        assert_eq!(n, 45);
        assert!(!CTR_EL0.is_feature_id());
        assert!(!SysReg::new(3, 0, 1, 1, 0).is_feature_id());
    }

    #[test]
    fn set_way() {
        for r in
            [DC_ISW, DC_CSW, DC_CISW, DC_IGSW, DC_IGDSW, DC_CGSW, DC_CGDSW, DC_CIGSW, DC_CIGDSW]
        {
            assert!(r.is_set_way(), "{r}");
        }
        // DC IVAC (1,0,7,6,1) and DC CIVAC (1,3,7,14,1) are by-VA.
        assert!(!SysReg::new(1, 0, 7, 6, 1).is_set_way());
        assert!(!SysReg::new(1, 3, 7, 14, 1).is_set_way());
        assert!(!SCTLR_EL1.is_set_way());
    }

    #[test]
    fn access_display() {
        let a =
            |op0, op1, crn, crm, op2, rt, read| SysRegAccess { op0, op1, crn, crm, op2, rt, read };
        assert_eq!(format!("{}", a(3, 0, 0, 4, 0, 3, true)), "MRS x3, ID_AA64PFR0_EL1");
        assert_eq!(format!("{}", a(3, 3, 14, 2, 1, 31, false)), "MSR CNTP_CTL_EL0, xzr");
        assert_eq!(format!("{}", a(1, 0, 7, 6, 2, 5, false)), "DC ISW, x5");
        assert_eq!(format!("{}", a(1, 0, 7, 5, 0, 1, false)), "SYS S1_0_C7_C5_0, x1");
        assert_eq!(format!("{}", a(1, 0, 7, 5, 0, 1, true)), "SYSL x1, S1_0_C7_C5_0");
    }
}
