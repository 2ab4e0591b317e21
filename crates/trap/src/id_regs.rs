//! What a guest reads from the ID registers.
//!
//! HCR_EL2.TID3 traps every read of the feature-ID space (op0=3, op1=0, CRn=0, CRm=1..7). The
//! guest sees the hardware's value with the fields of the features armhv does not virtualize
//! cleared ("not implemented"), so it never tries to use them: SVE, SME, AMU, RAS, MPAM, MTE,
//! the statistical profiling extension, trace and the trace buffer, and the PMU unless the VM
//! was given it (`pmu = true`). Registers armhv does not pass through read as zero.
//!
//! This module is the policy, as pure functions of the hardware value; the hypervisor reads the
//! register ([`IdReg`] names which) and applies [`guest_value`]. Field names and positions are
//! the Arm ARM's (DDI 0487, D23.2 "General system control registers").

use crate::sysreg::{self, SysReg};

/// An ID register whose (sanitized) hardware value the guest sees. Every other encoding of the
/// feature-ID space reads as zero: reserved encodings, registers of features hidden whole
/// (ID_AA64ZFR0_EL1 for SVE, ID_AA64SMFR0_EL1 for SME) and newer registers armhv does not
/// know (a zero field means "not implemented").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdReg {
    IdPfr0,
    IdPfr1,
    IdDfr0,
    IdMmfr0,
    IdMmfr1,
    IdMmfr2,
    IdMmfr3,
    IdIsar0,
    IdIsar1,
    IdIsar2,
    IdIsar3,
    IdIsar4,
    IdIsar5,
    Mvfr0,
    Mvfr1,
    Mvfr2,
    IdAa64Pfr0,
    IdAa64Pfr1,
    IdAa64Dfr0,
    IdAa64Dfr1,
    IdAa64Afr0,
    IdAa64Afr1,
    IdAa64Isar0,
    IdAa64Isar1,
    IdAa64Mmfr0,
    IdAa64Mmfr1,
    IdAa64Mmfr2,
}

impl IdReg {
    /// Every register the guest sees, in encoding order.
    pub const ALL: [IdReg; 27] = [
        IdReg::IdPfr0,
        IdReg::IdPfr1,
        IdReg::IdDfr0,
        IdReg::IdMmfr0,
        IdReg::IdMmfr1,
        IdReg::IdMmfr2,
        IdReg::IdMmfr3,
        IdReg::IdIsar0,
        IdReg::IdIsar1,
        IdReg::IdIsar2,
        IdReg::IdIsar3,
        IdReg::IdIsar4,
        IdReg::IdIsar5,
        IdReg::Mvfr0,
        IdReg::Mvfr1,
        IdReg::Mvfr2,
        IdReg::IdAa64Pfr0,
        IdReg::IdAa64Pfr1,
        IdReg::IdAa64Dfr0,
        IdReg::IdAa64Dfr1,
        IdReg::IdAa64Afr0,
        IdReg::IdAa64Afr1,
        IdReg::IdAa64Isar0,
        IdReg::IdAa64Isar1,
        IdReg::IdAa64Mmfr0,
        IdReg::IdAa64Mmfr1,
        IdReg::IdAa64Mmfr2,
    ];

    /// The register's encoding.
    pub const fn sysreg(self) -> SysReg {
        match self {
            IdReg::IdPfr0 => sysreg::ID_PFR0_EL1,
            IdReg::IdPfr1 => sysreg::ID_PFR1_EL1,
            IdReg::IdDfr0 => sysreg::ID_DFR0_EL1,
            IdReg::IdMmfr0 => sysreg::ID_MMFR0_EL1,
            IdReg::IdMmfr1 => sysreg::ID_MMFR1_EL1,
            IdReg::IdMmfr2 => sysreg::ID_MMFR2_EL1,
            IdReg::IdMmfr3 => sysreg::ID_MMFR3_EL1,
            IdReg::IdIsar0 => sysreg::ID_ISAR0_EL1,
            IdReg::IdIsar1 => sysreg::ID_ISAR1_EL1,
            IdReg::IdIsar2 => sysreg::ID_ISAR2_EL1,
            IdReg::IdIsar3 => sysreg::ID_ISAR3_EL1,
            IdReg::IdIsar4 => sysreg::ID_ISAR4_EL1,
            IdReg::IdIsar5 => sysreg::ID_ISAR5_EL1,
            IdReg::Mvfr0 => sysreg::MVFR0_EL1,
            IdReg::Mvfr1 => sysreg::MVFR1_EL1,
            IdReg::Mvfr2 => sysreg::MVFR2_EL1,
            IdReg::IdAa64Pfr0 => sysreg::ID_AA64PFR0_EL1,
            IdReg::IdAa64Pfr1 => sysreg::ID_AA64PFR1_EL1,
            IdReg::IdAa64Dfr0 => sysreg::ID_AA64DFR0_EL1,
            IdReg::IdAa64Dfr1 => sysreg::ID_AA64DFR1_EL1,
            IdReg::IdAa64Afr0 => sysreg::ID_AA64AFR0_EL1,
            IdReg::IdAa64Afr1 => sysreg::ID_AA64AFR1_EL1,
            IdReg::IdAa64Isar0 => sysreg::ID_AA64ISAR0_EL1,
            IdReg::IdAa64Isar1 => sysreg::ID_AA64ISAR1_EL1,
            IdReg::IdAa64Mmfr0 => sysreg::ID_AA64MMFR0_EL1,
            IdReg::IdAa64Mmfr1 => sysreg::ID_AA64MMFR1_EL1,
            IdReg::IdAa64Mmfr2 => sysreg::ID_AA64MMFR2_EL1,
        }
    }

    /// Which register a trapped read of `r` asks for, if the guest sees it.
    pub fn from_sysreg(r: SysReg) -> Option<Self> {
        Self::ALL.into_iter().find(|reg| reg.sysreg() == r)
    }
}

/// How the VM was configured, as far as its ID registers are concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdOptions {
    /// The VM was given the PMU (`pmu = true`): its PMU version fields are shown.
    pub pmu: bool,
}

/// A 4-bit ID register field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub reg: IdReg,
    /// The Arm ARM's name, `REGISTER.Field`.
    pub name: &'static str,
    /// The field's lowest bit.
    pub shift: u32,
}

impl Field {
    const fn new(reg: IdReg, name: &'static str, shift: u32) -> Self {
        Self { reg, name, shift }
    }

    pub const fn mask(self) -> u64 {
        0xf << self.shift
    }
}

/// Fields every guest reads as zero: features that are not virtualized, so a guest using them
/// would reach the physical CPU's state (or trap with nothing to emulate it).
pub const HIDDEN: [Field; 10] = [
    Field::new(IdReg::IdAa64Pfr0, "ID_AA64PFR0_EL1.RAS", 28),
    Field::new(IdReg::IdAa64Pfr0, "ID_AA64PFR0_EL1.SVE", 32),
    Field::new(IdReg::IdAa64Pfr0, "ID_AA64PFR0_EL1.MPAM", 40),
    Field::new(IdReg::IdAa64Pfr0, "ID_AA64PFR0_EL1.AMU", 44),
    Field::new(IdReg::IdAa64Pfr1, "ID_AA64PFR1_EL1.MTE", 8),
    Field::new(IdReg::IdAa64Pfr1, "ID_AA64PFR1_EL1.MPAM_frac", 16),
    Field::new(IdReg::IdAa64Pfr1, "ID_AA64PFR1_EL1.SME", 24),
    Field::new(IdReg::IdAa64Dfr0, "ID_AA64DFR0_EL1.TraceVer", 4),
    Field::new(IdReg::IdAa64Dfr0, "ID_AA64DFR0_EL1.PMSVer", 32),
    Field::new(IdReg::IdAa64Dfr0, "ID_AA64DFR0_EL1.TraceBuffer", 44),
];

/// The PMU's version fields: zero unless the VM was given the PMU ([`IdOptions::pmu`]), since
/// its registers otherwise trap and read as zero (MDCR_EL2.TPM).
pub const PMU: [Field; 2] = [
    Field::new(IdReg::IdDfr0, "ID_DFR0_EL1.PerfMon", 24),
    Field::new(IdReg::IdAa64Dfr0, "ID_AA64DFR0_EL1.PMUVer", 8),
];

/// Fields whose "not implemented" is 0xf, which the guest reads as such: the OS double lock
/// (OSDLR_EL1), which armhv does not virtualize (`vmm::emulate::debug`). Guests keep the
/// hardware's breakpoint and watchpoint counts (BRPs, WRPs, CTX_CMPs): armhv switches them all.
pub const ABSENT_AS_F: [Field; 1] =
    [Field::new(IdReg::IdAa64Dfr0, "ID_AA64DFR0_EL1.DoubleLock", 36)];

/// The bits of `reg` the guest reads as zero.
pub fn hidden_bits(reg: IdReg, options: IdOptions) -> u64 {
    let pmu: &[Field] = if options.pmu { &[] } else { &PMU };
    HIDDEN.iter().chain(pmu).filter(|f| f.reg == reg).fold(0, |m, f| m | f.mask())
}

/// The value the guest reads from `reg`, given the hardware's.
pub fn guest_value(reg: IdReg, hardware: u64, options: IdOptions) -> u64 {
    (hardware & !hidden_bits(reg, options)) | absent_bits(reg)
}

/// The bits of `reg` the guest reads as ones ([`ABSENT_AS_F`]).
pub fn absent_bits(reg: IdReg) -> u64 {
    ABSENT_AS_F.iter().filter(|f| f.reg == reg).fold(0, |m, f| m | f.mask())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_PMU: IdOptions = IdOptions { pmu: false };
    const WITH_PMU: IdOptions = IdOptions { pmu: true };

    fn field(name: &str) -> Field {
        HIDDEN.iter().chain(&PMU).copied().find(|f| f.name == name).unwrap()
    }

    #[test]
    fn every_hidden_field_reads_as_zero_and_nothing_else_changes() {
        for f in HIDDEN {
            for options in [NO_PMU, WITH_PMU] {
                let v = guest_value(f.reg, u64::MAX, options);
                assert_eq!(v & f.mask(), 0, "{} shown", f.name);
                // A hardware value with only this field set reads as zero.
                let v = guest_value(f.reg, f.mask(), options) & !absent_bits(f.reg);
                assert_eq!(v, 0, "{}", f.name);
            }
        }
        // Exactly those fields: every other bit of the register is the hardware's.
        let f = |shift: u32| 0xfu64 << shift;
        for options in [NO_PMU, WITH_PMU] {
            let pfr0 = guest_value(IdReg::IdAa64Pfr0, u64::MAX, options);
            assert_eq!(pfr0, !(f(28) | f(32) | f(40) | f(44)));
            let pfr1 = guest_value(IdReg::IdAa64Pfr1, u64::MAX, options);
            assert_eq!(pfr1, !(f(8) | f(16) | f(24)));
        }
    }

    #[test]
    fn the_named_fields() {
        // One check per feature, against the Arm ARM's field positions.
        let cases = [
            ("ID_AA64PFR0_EL1.SVE", IdReg::IdAa64Pfr0, 0xf << 32),
            ("ID_AA64PFR0_EL1.AMU", IdReg::IdAa64Pfr0, 0xf << 44),
            ("ID_AA64PFR0_EL1.RAS", IdReg::IdAa64Pfr0, 0xf << 28),
            ("ID_AA64PFR0_EL1.MPAM", IdReg::IdAa64Pfr0, 0xf << 40),
            ("ID_AA64PFR1_EL1.MTE", IdReg::IdAa64Pfr1, 0xf << 8),
            ("ID_AA64PFR1_EL1.SME", IdReg::IdAa64Pfr1, 0xf << 24),
            ("ID_AA64PFR1_EL1.MPAM_frac", IdReg::IdAa64Pfr1, 0xf << 16),
            ("ID_AA64DFR0_EL1.PMSVer", IdReg::IdAa64Dfr0, 0xf << 32),
            ("ID_AA64DFR0_EL1.TraceVer", IdReg::IdAa64Dfr0, 0xf << 4),
            ("ID_AA64DFR0_EL1.TraceBuffer", IdReg::IdAa64Dfr0, 0xf << 44),
            ("ID_AA64DFR0_EL1.PMUVer", IdReg::IdAa64Dfr0, 0xf << 8),
            ("ID_DFR0_EL1.PerfMon", IdReg::IdDfr0, 0xf << 24),
        ];
        for (name, reg, mask) in cases {
            let f = field(name);
            assert_eq!((f.reg, f.mask()), (reg, mask), "{name}");
        }
        assert_eq!(cases.len(), HIDDEN.len() + PMU.len());
    }

    #[test]
    fn the_pmu_is_shown_only_to_a_vm_given_it() {
        for f in PMU {
            let guest = |options| guest_value(f.reg, f.mask(), options) & !absent_bits(f.reg);
            assert_eq!(guest(NO_PMU), 0, "{}", f.name);
            assert_eq!(guest(WITH_PMU), f.mask(), "{}", f.name);
        }
        // The other debug features stay hidden with the PMU.
        let dfr0 = guest_value(IdReg::IdAa64Dfr0, u64::MAX, WITH_PMU);
        assert_eq!(dfr0, !(0xf << 4 | 0xf << 32 | 0xf << 44));
        assert_eq!(
            guest_value(IdReg::IdAa64Dfr0, u64::MAX, NO_PMU),
            !(0xf << 4 | 0xf << 8 | 0xf << 32 | 0xf << 44)
        );
        assert_eq!(guest_value(IdReg::IdDfr0, u64::MAX, WITH_PMU), u64::MAX);
    }

    #[test]
    fn registers_without_hidden_fields_pass_through() {
        let touched = [IdReg::IdDfr0, IdReg::IdAa64Pfr0, IdReg::IdAa64Pfr1, IdReg::IdAa64Dfr0];
        for reg in IdReg::ALL.into_iter().filter(|r| !touched.contains(r)) {
            for options in [NO_PMU, WITH_PMU] {
                assert_eq!(guest_value(reg, u64::MAX, options), u64::MAX, "{reg:?}");
                assert_eq!(guest_value(reg, 0x1234_5678_9abc_def0, options), 0x1234_5678_9abc_def0);
            }
        }
    }

    #[test]
    fn a_cortex_a76() {
        // A Cortex-A76's ID_AA64PFR0_EL1 (as QEMU models it, GIC field not filled in): EL0-EL3
        // (EL0 also AArch32), FP and AdvSIMD with half precision, RAS 1, CSV2, CSV3. Only RAS
        // goes.
        assert_eq!(
            guest_value(IdReg::IdAa64Pfr0, 0x1100_0000_1011_1112, NO_PMU),
            0x1100_0000_0011_1112
        );
        // ID_AA64DFR0_EL1: DebugVer 8.2, PMUVer 8.1 (4), 6 breakpoints / 4 watchpoints (kept),
        // OS double lock implemented (DoubleLock 0): shown as not (0xf).
        assert_eq!(
            guest_value(IdReg::IdAa64Dfr0, 0x0000_0000_1030_5408, NO_PMU),
            0x0000_00f0_1030_5008
        );
        assert_eq!(
            guest_value(IdReg::IdAa64Dfr0, 0x0000_0000_1030_5408, WITH_PMU),
            0x0000_00f0_1030_5408
        );
    }

    #[test]
    fn the_os_double_lock_reads_as_absent() {
        for options in [NO_PMU, WITH_PMU] {
            let dfr0 = guest_value(IdReg::IdAa64Dfr0, 0, options);
            assert_eq!((dfr0 >> 36) & 0xf, 0xf);
            assert_eq!(dfr0 & !(0xf << 36), 0, "only DoubleLock is forced");
        }
    }

    #[test]
    fn encodings() {
        for reg in IdReg::ALL {
            assert!(reg.sysreg().is_feature_id(), "{reg:?}");
            assert_eq!(IdReg::from_sysreg(reg.sysreg()), Some(reg));
        }
        // Sorted and distinct.
        assert!(IdReg::ALL.windows(2).all(|w| w[0].sysreg() < w[1].sysreg()));
        // Hidden whole, reserved, or not passed through: no IdReg, so they read as zero.
        for r in [
            sysreg::ID_AA64ZFR0_EL1,
            sysreg::ID_AA64SMFR0_EL1,
            sysreg::ID_AFR0_EL1,
            sysreg::ID_AA64PFR2_EL1,
            SysReg::new(3, 0, 0, 7, 7),
            sysreg::MIDR_EL1,
        ] {
            assert_eq!(IdReg::from_sysreg(r), None, "{r:?}");
        }
    }
}
