//! What a guest reads from the ID registers.
//!
//! HCR_EL2.TID3 traps every read of the feature-ID space (op0=3, op1=0, CRn=0, CRm=1..7).
//! The AArch64 registers are shown through an *allow-list*: each field armhv knows to be safe
//! is named below with its rule, and every other field reads as zero, "not implemented". A
//! feature a newer CPU adds in a field that was reserved when this table was written is hidden
//! by default, never half-exposed. The AArch32 registers (which only describe a guest's 32-bit
//! user processes: a guest's EL1 is always AArch64) pass through with a few fields hidden.
//!
//! This module is the policy, as pure functions of the hardware value; the hypervisor reads the
//! register ([`IdReg`] names which) and applies [`guest_value`]. Field names and positions are
//! the Arm ARM's (DDI 0487, D23.2 "General system control registers"). The table below is the
//! one record of what a guest sees; `docs/guest-abi.md` points here.
//!
//! | Register | Shown (hardware value) | Capped or fixed | Hidden (reads 0) |
//! |---|---|---|---|
//! | ID_AA64PFR0 | EL0, EL3, FP, AdvSIMD, DIT, CSV3; SVE to a VM with SVE (every CPU has it: its registers are switched, `vmm::emulate::fpsimd`) | EL1 <= 1 (EL1 is AArch64 only, HCR_EL2.RW); GIC <= 1 (the vGIC is GICv3); CSV2 <= 1 (CSV2_2 adds SCXTNUM_EL0/1, which trap, HCR_EL2.EnSCXT clear, and are UNDEFINED) | EL2 (no nested virtualization), RAS (HCR_EL2.TERR), SVE without it, SEL2, MPAM, AMU (its registers trap, CPTR_EL2.TAM, and are UNDEFINED; QEMU models no AMU), RME |
//! | ID_AA64PFR1 | BT, SSBS | CSV2_frac <= 1 (CSV2_1p2 adds SCXTNUM too) | MTE and MTE_frac (no tag memory), RAS_frac, MPAM_frac, SME, RNDR_trap, NMI, GCS, THE, MTEX, DF2, PFAR |
//! | ID_AA64ZFR0 | to a VM with SVE: SVEver (SVE2), AES, BitPerm, BF16, SHA3, SM4, I8MM, F32MM, F64MM (instructions on the switched SVE registers) | | all without SVE; any other field |
//! | ID_AA64PFR2, SMFR0, DFR1, AFR0, AFR1, MMFR3 | | | all (SME, IMPLEMENTATION DEFINED, registers armhv does not switch) |
//! | ID_AA64DFR0 | DebugVer, BRPs, WRPs, CTX_CMPs (the debug registers trap and read as zero, MDCR_EL2.TDA) | DoubleLock = 0xF, "not implemented" (OSDLR_EL1 traps, RAZ/WI); PMUVer, MTPMU, HPMN0 unless `pmu = "off"` | TraceVer, PMSS, SEBEP, PMSVer (SPE: its registers trap, MDCR_EL2.TPMS), TraceFilt (TRFCR_EL1 traps, MDCR_EL2.TTRF), TraceBuffer (TRBE), BRBE, ExtTrcBuff |
//! | ID_AA64ISAR0 | AES, SHA1, SHA2, CRC32, Atomic, RDM, SHA3, SM3, SM4, DP, FHM, TS, TLB (TLBI range and outer-shareable: VMID-tagged, HCR_EL2.FB), RNDR | | TME |
//! | ID_AA64ISAR1 | DPB, APA, API, GPA, GPI (pointer authentication: keys switched, `vmm::emulate::pauth`), JSCVT, FCMA, LRCPC, FRINTTS, SB, SPECRES, BF16, DGH, I8MM, XS | | LS64 (ACCDATA_EL1 is not switched) |
//! | ID_AA64ISAR2 | RPRES, GPA3, APA3, PAC_frac (pointer authentication), BC, CLRBHB | | WFxT (armhv's WFI trap has no timeout), MOPS, SYSREG_128, SYSINSTR_128, PRFMSLC, RPRFM, CSSC, LUT, ATS1A |
//! | ID_AA64MMFR0 | ASIDBits, BigEnd, SNSMem, BigEndEL0, TGran4, TGran16, TGran64, ExS | PARange <= 48 bits (Stage-2's IPA size, `stage2::ipa_bits_from_parange`); TGran4_2, TGran16_2, TGran64_2 = 1 (no stage 2: the guest has no EL2) | FGT, ECV (EL2 features) |
//! | ID_AA64MMFR1 | HAFDBS, HPDS, PAN, SpecSEI, ETS, AFP, nTLBPA, TIDCP1, CMOW, ECBHB | | VMIDBits, VH, XNX, TWED, HCX (EL2 features), LO (LORegions: its registers are not switched, HCR_EL2.TLOR makes them UNDEFINED) |
//! | ID_AA64MMFR2 | CnP, UAO, LSM, IESB, VARange, CCIDX, ST, AT, IDS, TTL, BBM, E0PD | | NV, FWB, EVT (EL2 features) |
//! | AArch32: ID_PFR0..MVFR2 | everything else | ID_DFR0.PerfMon unless `pmu = "off"` | ID_PFR0.RAS, ID_PFR0.AMU, ID_DFR0.CopTrc, MMapTrc, TraceFilt; ID_PFR2, ID_DFR1, ID_ISAR6, ID_MMFR4/5 read as zero |
//!
//! BTI needs nothing of EL2 (its guarded pages are the guest's own stage 1). Pointer
//! authentication is shown because armhv gives each vCPU its own five keys, switched lazily;
//! all of its fields (ISAR1.APA/API/GPA/GPI, ISAR2.APA3/GPA3/PAC_frac) pass together, so a
//! guest sees whichever algorithm the CPU has, or none. SVE is shown where every CPU has it (its
//! registers are switched lazily; without it its instructions trap, CPTR_EL2.TZ, and are
//! UNDEFINED). Hiding is not enough where
//! the hardware has the feature and a guest can still reach its state: SME's instructions trap
//! (CPTR_EL2.TSM) and are UNDEFINED, and its TPIDR2_EL0, which nothing but fine-grained traps
//! would trap, is switched with the EL1 registers.

use crate::sysreg::{self, SysReg};

/// An ID register whose (sanitized) hardware value the guest sees. Every other encoding of the
/// feature-ID space reads as zero: reserved encodings, registers of features hidden whole
/// (ID_AA64SMFR0_EL1 for SME, the IMPLEMENTATION DEFINED
/// ID_AA64AFR0/1_EL1, which armhv cannot vouch for) and newer registers armhv does not know (a
/// zero field means "not implemented").
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
    IdAa64Zfr0,
    IdAa64Dfr1,
    IdAa64Isar0,
    IdAa64Isar1,
    IdAa64Isar2,
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
        IdReg::IdAa64Zfr0,
        IdReg::IdAa64Dfr0,
        IdReg::IdAa64Dfr1,
        IdReg::IdAa64Isar0,
        IdReg::IdAa64Isar1,
        IdReg::IdAa64Isar2,
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
            IdReg::IdAa64Zfr0 => sysreg::ID_AA64ZFR0_EL1,
            IdReg::IdAa64Dfr1 => sysreg::ID_AA64DFR1_EL1,
            IdReg::IdAa64Isar0 => sysreg::ID_AA64ISAR0_EL1,
            IdReg::IdAa64Isar1 => sysreg::ID_AA64ISAR1_EL1,
            IdReg::IdAa64Isar2 => sysreg::ID_AA64ISAR2_EL1,
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
    /// The VM has a PMU (`pmu = "virtual"`, the default, or `"raw"`): its version fields are
    /// shown.
    pub pmu: bool,
    /// The VM has SVE (every CPU has it): ID_AA64PFR0_EL1.SVE and ID_AA64ZFR0_EL1 (SVE2 and
    /// its instruction sets, which need no state of their own) are the hardware's.
    pub sve: bool,
}

/// What the guest reads in one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The hardware's value: armhv virtualizes the feature (or it needs nothing of EL2).
    Show,
    /// The hardware's value, but at most this: an unsigned field whose higher values add what
    /// armhv does not virtualize.
    AtMost(u8),
    /// Always this value: a "not implemented" encoding that is not zero.
    Fixed(u8),
    /// The hardware's value to a VM given the PMU ([`IdOptions::pmu`]), else zero: its
    /// registers otherwise trap and read as zero (MDCR_EL2.TPM).
    Pmu,
    /// The hardware's value to a VM with SVE ([`IdOptions::sve`]), else zero.
    Sve,
    /// Zero, "not implemented". Only the AArch32 registers list these: in the AArch64 ones a
    /// field not listed is hidden.
    Hide,
}

/// A 4-bit ID register field and what the guest reads in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub reg: IdReg,
    /// The Arm ARM's name, `REGISTER.Field`.
    pub name: &'static str,
    /// The field's lowest bit.
    pub shift: u32,
    pub rule: Rule,
}

impl Field {
    const fn new(reg: IdReg, name: &'static str, shift: u32, rule: Rule) -> Self {
        Self { reg, name, shift, rule }
    }

    pub const fn mask(self) -> u64 {
        0xf << self.shift
    }

    /// The field's value in a register value.
    pub const fn get(self, value: u64) -> u8 {
        ((value >> self.shift) & 0xf) as u8
    }
}

use IdReg::*;
use Rule::{AtMost, Fixed, Hide, Pmu, Show, Sve};

macro_rules! fields {
    ($reg:ident $arm:literal: $($name:ident @ $shift:literal $rule:expr),* $(,)?) => {
        [$(Field::new($reg, concat!($arm, ".", stringify!($name)), $shift, $rule)),*]
    };
}

/// ID_AA64PFR0_EL1.
pub const AA64PFR0: [Field; 10] = fields!(IdAa64Pfr0 "ID_AA64PFR0_EL1":
    EL0 @ 0 Show, EL1 @ 4 AtMost(1), EL3 @ 12 Show, FP @ 16 Show, AdvSIMD @ 20 Show,
    GIC @ 24 AtMost(1), SVE @ 32 Sve, DIT @ 48 Show, CSV2 @ 56 AtMost(1), CSV3 @ 60 Show);
/// ID_AA64ZFR0_EL1: SVE2 and the instruction sets on the SVE registers.
pub const AA64ZFR0: [Field; 9] = fields!(IdAa64Zfr0 "ID_AA64ZFR0_EL1":
    SVEver @ 0 Sve, AES @ 4 Sve, BitPerm @ 16 Sve, BF16 @ 20 Sve, SHA3 @ 32 Sve, SM4 @ 40 Sve,
    I8MM @ 44 Sve, F32MM @ 52 Sve, F64MM @ 56 Sve);
/// ID_AA64PFR1_EL1.
pub const AA64PFR1: [Field; 3] =
    fields!(IdAa64Pfr1 "ID_AA64PFR1_EL1": BT @ 0 Show, SSBS @ 4 Show, CSV2_frac @ 32 AtMost(1));
/// ID_AA64DFR0_EL1.
pub const AA64DFR0: [Field; 8] = fields!(IdAa64Dfr0 "ID_AA64DFR0_EL1":
    DebugVer @ 0 Show, PMUVer @ 8 Pmu, BRPs @ 12 Show, WRPs @ 20 Show, CTX_CMPs @ 28 Show,
    DoubleLock @ 36 Fixed(0xf), MTPMU @ 48 Pmu, HPMN0 @ 60 Pmu);
/// ID_AA64ISAR0_EL1.
pub const AA64ISAR0: [Field; 14] = fields!(IdAa64Isar0 "ID_AA64ISAR0_EL1":
    AES @ 4 Show, SHA1 @ 8 Show, SHA2 @ 12 Show, CRC32 @ 16 Show, Atomic @ 20 Show,
    RDM @ 28 Show, SHA3 @ 32 Show, SM3 @ 36 Show, SM4 @ 40 Show, DP @ 44 Show, FHM @ 48 Show,
    TS @ 52 Show, TLB @ 56 Show, RNDR @ 60 Show);
/// ID_AA64ISAR1_EL1.
pub const AA64ISAR1: [Field; 15] = fields!(IdAa64Isar1 "ID_AA64ISAR1_EL1":
    DPB @ 0 Show, APA @ 4 Show, API @ 8 Show, JSCVT @ 12 Show, FCMA @ 16 Show,
    LRCPC @ 20 Show, GPA @ 24 Show, GPI @ 28 Show, FRINTTS @ 32 Show, SB @ 36 Show,
    SPECRES @ 40 Show, BF16 @ 44 Show, DGH @ 48 Show, I8MM @ 52 Show, XS @ 56 Show);
/// ID_AA64ISAR2_EL1.
pub const AA64ISAR2: [Field; 6] = fields!(IdAa64Isar2 "ID_AA64ISAR2_EL1":
    RPRES @ 4 Show, GPA3 @ 8 Show, APA3 @ 12 Show, BC @ 20 Show, PAC_frac @ 24 Show,
    CLRBHB @ 28 Show);
/// ID_AA64MMFR0_EL1. PARange at most 0b0101, 48 bits: the largest IPA size armhv's Stage-2
/// gives a VM (`stage2::ipa_bits_from_parange`).
pub const AA64MMFR0: [Field; 12] = fields!(IdAa64Mmfr0 "ID_AA64MMFR0_EL1":
    PARange @ 0 AtMost(0b0101), ASIDBits @ 4 Show, BigEnd @ 8 Show, SNSMem @ 12 Show,
    BigEndEL0 @ 16 Show, TGran16 @ 20 Show, TGran64 @ 24 Show, TGran4 @ 28 Show,
    TGran16_2 @ 32 Fixed(1), TGran64_2 @ 36 Fixed(1), TGran4_2 @ 40 Fixed(1), ExS @ 44 Show);
/// ID_AA64MMFR1_EL1.
pub const AA64MMFR1: [Field; 10] = fields!(IdAa64Mmfr1 "ID_AA64MMFR1_EL1":
    HAFDBS @ 0 Show, HPDS @ 12 Show, PAN @ 20 Show, SpecSEI @ 24 Show, ETS @ 36 Show,
    AFP @ 44 Show, nTLBPA @ 48 Show, TIDCP1 @ 52 Show, CMOW @ 56 Show, ECBHB @ 60 Show);
/// ID_AA64MMFR2_EL1.
pub const AA64MMFR2: [Field; 12] = fields!(IdAa64Mmfr2 "ID_AA64MMFR2_EL1":
    CnP @ 0 Show, UAO @ 4 Show, LSM @ 8 Show, IESB @ 12 Show, VARange @ 16 Show,
    CCIDX @ 20 Show, ST @ 28 Show, AT @ 32 Show, IDS @ 36 Show, TTL @ 48 Show, BBM @ 52 Show,
    E0PD @ 60 Show);

/// The AArch32 registers' hidden fields (the rest passes through).
pub const AARCH32_HIDDEN: [Field; 6] = [
    Field::new(IdPfr0, "ID_PFR0_EL1.AMU", 20, Hide),
    Field::new(IdPfr0, "ID_PFR0_EL1.RAS", 28, Hide),
    Field::new(IdDfr0, "ID_DFR0_EL1.CopTrc", 12, Hide),
    Field::new(IdDfr0, "ID_DFR0_EL1.MMapTrc", 16, Hide),
    Field::new(IdDfr0, "ID_DFR0_EL1.PerfMon", 24, Pmu),
    Field::new(IdDfr0, "ID_DFR0_EL1.TraceFilt", 28, Hide),
];

/// The pointer-authentication fields: shown together (armhv switches the keys), so that a
/// guest never sees one algorithm's address authentication without its generic one.
pub const PAUTH: [&str; 7] = [
    "ID_AA64ISAR1_EL1.APA",
    "ID_AA64ISAR1_EL1.API",
    "ID_AA64ISAR1_EL1.GPA",
    "ID_AA64ISAR1_EL1.GPI",
    "ID_AA64ISAR2_EL1.APA3",
    "ID_AA64ISAR2_EL1.GPA3",
    "ID_AA64ISAR2_EL1.PAC_frac",
];

/// Whether a CPU with these ID_AA64ISAR1_EL1 and ID_AA64ISAR2_EL1 values has pointer
/// authentication: any of its algorithms, for addresses or generic.
pub fn has_pauth(isar1: u64, isar2: u64) -> bool {
    let value = |name: &str| {
        let f = all_fields().find(|f| f.name == name).expect("a PAUTH field");
        f.get(if f.reg == IdAa64Isar1 { isar1 } else { isar2 })
    };
    // PAC_frac qualifies an algorithm; alone it is none.
    PAUTH.iter().filter(|n| !n.ends_with("PAC_frac")).any(|n| value(n) != 0)
}

fn all_fields() -> impl Iterator<Item = Field> {
    IdReg::ALL.into_iter().flat_map(|r| fields(r).iter().copied().filter(move |f| f.reg == r))
}

/// Whether `reg` is one of the AArch32 registers (shown minus [`AARCH32_HIDDEN`]).
pub const fn is_aarch32(reg: IdReg) -> bool {
    matches!(
        reg,
        IdPfr0
            | IdPfr1
            | IdDfr0
            | IdMmfr0
            | IdMmfr1
            | IdMmfr2
            | IdMmfr3
            | IdIsar0
            | IdIsar1
            | IdIsar2
            | IdIsar3
            | IdIsar4
            | IdIsar5
            | Mvfr0
            | Mvfr1
            | Mvfr2
    )
}

/// The fields of `reg` that have a rule: for an AArch64 register the fields shown (in some
/// form), for an AArch32 one the fields hidden.
pub fn fields(reg: IdReg) -> &'static [Field] {
    match reg {
        IdAa64Pfr0 => &AA64PFR0,
        IdAa64Pfr1 => &AA64PFR1,
        IdAa64Zfr0 => &AA64ZFR0,
        IdAa64Dfr0 => &AA64DFR0,
        IdAa64Isar0 => &AA64ISAR0,
        IdAa64Isar1 => &AA64ISAR1,
        IdAa64Isar2 => &AA64ISAR2,
        IdAa64Mmfr0 => &AA64MMFR0,
        IdAa64Mmfr1 => &AA64MMFR1,
        IdAa64Mmfr2 => &AA64MMFR2,
        IdAa64Dfr1 => &[],
        r if is_aarch32(r) => &AARCH32_HIDDEN,
        _ => &[],
    }
}

/// What `field` reads as, given the hardware's value of its register.
fn apply(field: Field, hardware: u64, options: IdOptions) -> u8 {
    let hw = field.get(hardware);
    match field.rule {
        Show => hw,
        AtMost(max) => hw.min(max),
        Fixed(v) => v,
        Pmu if options.pmu => hw,
        Sve if options.sve => hw,
        Pmu | Sve | Hide => 0,
    }
}

/// The value the guest reads from `reg`, given the hardware's.
pub fn guest_value(reg: IdReg, hardware: u64, options: IdOptions) -> u64 {
    let fields = fields(reg).iter().filter(|f| f.reg == reg);
    if is_aarch32(reg) {
        // Pass-through, with the listed fields replaced.
        fields.fold(hardware, |v, f| {
            (v & !f.mask()) | u64::from(apply(*f, hardware, options)) << f.shift
        })
    } else {
        // Allow-list: what is not listed reads as zero.
        fields.fold(0, |v, f| v | u64::from(apply(*f, hardware, options)) << f.shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_PMU: IdOptions = IdOptions { pmu: false, sve: false };
    const WITH_PMU: IdOptions = IdOptions { pmu: true, sve: false };
    const WITH_SVE: IdOptions = IdOptions { pmu: false, sve: true };
    const BOTH: [IdOptions; 2] = [NO_PMU, WITH_PMU];

    fn named(name: &str) -> Field {
        all_fields().find(|f| f.name == name).unwrap_or_else(|| panic!("no field {name}"))
    }

    fn field_of(value: u64, shift: u32) -> u64 {
        (value >> shift) & 0xf
    }

    #[test]
    fn an_aarch64_field_not_listed_reads_as_zero() {
        for reg in IdReg::ALL.into_iter().filter(|r| !is_aarch32(*r)) {
            let listed = fields(reg).iter().fold(0, |m, f| m | f.mask());
            for options in BOTH {
                for hw in [u64::MAX, 0x1234_5678_9abc_def0, 0] {
                    let v = guest_value(reg, hw, options);
                    assert_eq!(v & !listed, 0, "{reg:?}: unlisted bits shown in {v:#x}");
                }
            }
        }
    }

    #[test]
    fn each_rule_does_what_it_says() {
        for f in all_fields() {
            for options in BOTH {
                for hw_field in 0..16u64 {
                    let hw = hw_field << f.shift;
                    let seen = field_of(guest_value(f.reg, hw, options), f.shift);
                    let want = match f.rule {
                        Show => hw_field,
                        AtMost(max) => hw_field.min(u64::from(max)),
                        Fixed(v) => u64::from(v),
                        Pmu if options.pmu => hw_field,
                        Sve if options.sve => hw_field,
                        Pmu | Sve | Hide => 0,
                    };
                    assert_eq!(seen, want, "{} with hardware {hw_field:#x}, {options:?}", f.name);
                }
            }
        }
    }

    #[test]
    fn features_armhv_does_not_virtualize_are_hidden() {
        // (register, field's lowest bit, what): each reads as zero on a CPU that has all of it.
        let hidden = [
            (IdAa64Pfr0, 8, "EL2: no nested virtualization"),
            (IdAa64Pfr0, 28, "RAS"),
            (IdAa64Pfr0, 32, "SVE"),
            (IdAa64Pfr0, 36, "SEL2"),
            (IdAa64Pfr0, 40, "MPAM"),
            (IdAa64Pfr0, 44, "AMU"),
            (IdAa64Pfr0, 52, "RME"),
            (IdAa64Pfr1, 8, "MTE"),
            (IdAa64Pfr1, 12, "RAS_frac"),
            (IdAa64Pfr1, 16, "MPAM_frac"),
            (IdAa64Pfr1, 24, "SME"),
            (IdAa64Pfr1, 28, "RNDR_trap"),
            (IdAa64Pfr1, 36, "NMI"),
            (IdAa64Pfr1, 40, "MTE_frac"),
            (IdAa64Pfr1, 44, "GCS"),
            (IdAa64Pfr1, 48, "THE"),
            (IdAa64Dfr0, 4, "TraceVer"),
            (IdAa64Dfr0, 32, "PMSVer (SPE)"),
            (IdAa64Dfr0, 40, "TraceFilt"),
            (IdAa64Dfr0, 44, "TraceBuffer (TRBE)"),
            (IdAa64Dfr0, 52, "BRBE"),
            (IdAa64Isar0, 24, "TME"),
            (IdAa64Isar1, 60, "LS64"),
            (IdAa64Isar2, 0, "WFxT"),
            (IdAa64Isar2, 16, "MOPS"),
            (IdAa64Mmfr0, 56, "FGT"),
            (IdAa64Mmfr0, 60, "ECV"),
            (IdAa64Mmfr1, 4, "VMIDBits"),
            (IdAa64Mmfr1, 8, "VH"),
            (IdAa64Mmfr1, 16, "LO"),
            (IdAa64Mmfr1, 28, "XNX"),
            (IdAa64Mmfr1, 32, "TWED"),
            (IdAa64Mmfr1, 40, "HCX"),
            (IdAa64Mmfr2, 24, "NV"),
            (IdAa64Mmfr2, 40, "FWB"),
            (IdAa64Mmfr2, 56, "EVT"),
            (IdPfr0, 20, "AArch32 AMU"),
            (IdPfr0, 28, "AArch32 RAS"),
            (IdDfr0, 28, "AArch32 TraceFilt"),
        ];
        for (reg, shift, what) in hidden {
            for options in BOTH {
                let v = guest_value(reg, u64::MAX, options);
                assert_eq!(field_of(v, shift), 0, "{what} shown in {reg:?}: {v:#x}");
            }
        }
    }

    #[test]
    fn features_armhv_virtualizes_are_shown() {
        let shown = [
            ("ID_AA64PFR1_EL1.BT", 0),
            ("ID_AA64ISAR0_EL1.RNDR", 60),
            ("ID_AA64ISAR0_EL1.TLB", 56),
            ("ID_AA64ISAR1_EL1.APA", 4),
            ("ID_AA64ISAR1_EL1.API", 8),
            ("ID_AA64ISAR1_EL1.GPA", 24),
            ("ID_AA64ISAR1_EL1.GPI", 28),
            ("ID_AA64ISAR2_EL1.GPA3", 8),
            ("ID_AA64ISAR2_EL1.APA3", 12),
            ("ID_AA64ISAR2_EL1.PAC_frac", 24),
            ("ID_AA64ISAR2_EL1.CLRBHB", 28),
            ("ID_AA64MMFR2_EL1.E0PD", 60),
        ];
        for (name, shift) in shown {
            let f = named(name);
            assert_eq!((f.shift, f.rule), (shift, Show), "{name}");
        }
    }

    #[test]
    fn pointer_authentication_is_shown_whole() {
        for name in PAUTH {
            assert_eq!(named(name).rule, Show, "{name}");
        }
        // QEMU's max with QARMA5 (APA 5: FPAC and EPAC2, GPA 1), and with pauth-impdef=on
        // (API 5, GPI 1): the guest sees the same algorithm, for addresses and generic alike.
        for isar1 in [0x0000_0000_0100_0050u64, 0x0000_0000_1000_0500] {
            let v = guest_value(IdAa64Isar1, isar1, NO_PMU);
            assert_eq!(v & 0xff0_00ff0, isar1 & 0xff0_00ff0, "{isar1:#x} -> {v:#x}");
        }
        // QARMA3 (ISAR2.APA3, GPA3).
        let isar2 = 0x0000_0000_0000_5100;
        assert_eq!(guest_value(IdAa64Isar2, isar2, NO_PMU), isar2);
        assert!(has_pauth(0x0100_0050, 0) && has_pauth(0x1000_0500, 0) && has_pauth(0, isar2));
        // A Cortex-A76 (DPB, JSCVT, FCMA, LRCPC) has none; PAC_frac alone is none either.
        assert!(!has_pauth(0x0000_0000_0010_1001, 0) && !has_pauth(0, 1 << 24));
    }

    #[test]
    fn not_implemented_encodings_that_are_not_zero() {
        for options in BOTH {
            for hw in [0, u64::MAX] {
                // OSDLR_EL1 traps and is RAZ/WI: as on a CPU without the OS Double Lock.
                let dfr0 = guest_value(IdAa64Dfr0, hw, options);
                assert_eq!(field_of(dfr0, 36), 0xf, "DoubleLock in {dfr0:#x}");
                // No stage 2 for a guest without EL2: TGran4_2, TGran16_2, TGran64_2 = 1.
                let mmfr0 = guest_value(IdAa64Mmfr0, hw, options);
                for shift in [32, 36, 40] {
                    assert_eq!(field_of(mmfr0, shift), 1, "TGran*_2 in {mmfr0:#x}");
                }
            }
        }
        // The stage-1 granules are the hardware's, including 0xF, "4K/64K not implemented".
        let mmfr0 = guest_value(IdAa64Mmfr0, 0xf << 28 | 0xf << 24, NO_PMU);
        assert_eq!((field_of(mmfr0, 28), field_of(mmfr0, 24)), (15, 15));
    }

    #[test]
    fn capped_fields() {
        // max's 52-bit PA (PARange 6) reads as 48 bits, the IPA size Stage-2 gives; a smaller
        // one as it is.
        assert_eq!(guest_value(IdAa64Mmfr0, 6, NO_PMU) & 0xf, 5);
        assert_eq!(guest_value(IdAa64Mmfr0, 2, NO_PMU) & 0xf, 2);
        // max's CSV2 2 (FEAT_CSV2_2: SCXTNUM_ELx, which are not switched) reads as 1.
        assert_eq!(guest_value(IdAa64Pfr0, 2 << 56, NO_PMU), 1 << 56);
        assert_eq!(guest_value(IdAa64Pfr1, 2 << 32, NO_PMU), 1 << 32);
        // A GICv4.1 CPU interface (3) reads as GICv3's (1); EL1 with AArch32 (2) as AArch64
        // only (1), EL0 with AArch32 as it is.
        let pfr0 = guest_value(IdAa64Pfr0, 3 << 24 | 2 << 4 | 2, NO_PMU);
        assert_eq!(pfr0, 1 << 24 | 1 << 4 | 2);
    }

    #[test]
    fn the_pmu_is_shown_only_to_a_vm_given_it() {
        for name in ["ID_AA64DFR0_EL1.PMUVer", "ID_AA64DFR0_EL1.MTPMU", "ID_AA64DFR0_EL1.HPMN0"] {
            let f = named(name);
            assert_eq!(f.rule, Pmu, "{name}");
            assert_eq!(guest_value(f.reg, f.mask(), NO_PMU) & f.mask(), 0, "{name}");
            assert_eq!(guest_value(f.reg, f.mask(), WITH_PMU) & f.mask(), f.mask(), "{name}");
        }
        assert_eq!(guest_value(IdDfr0, 0xf << 24, NO_PMU), 0);
        assert_eq!(guest_value(IdDfr0, 0xf << 24, WITH_PMU), 0xf << 24);
    }

    #[test]
    fn aarch32_registers_pass_through_but_for_their_hidden_fields() {
        let hidden: u64 =
            AARCH32_HIDDEN.iter().filter(|f| f.rule == Hide).fold(0, |m, f| m | f.mask());
        for reg in IdReg::ALL.into_iter().filter(|r| is_aarch32(*r)) {
            let mine = AARCH32_HIDDEN.iter().filter(|f| f.reg == reg).fold(0, |m, f| m | f.mask());
            let v = guest_value(reg, u64::MAX, WITH_PMU);
            assert_eq!(v, !(mine & hidden), "{reg:?}");
        }
    }

    #[test]
    fn a_cortex_a76() {
        // A Cortex-A76's ID_AA64PFR0_EL1 (as QEMU models it, GIC field not filled in): EL0 and
        // EL1 (EL0 also AArch32), EL2, EL3, FP and AdvSIMD with half precision, RAS 1, CSV2,
        // CSV3. EL2 and RAS go.
        assert_eq!(guest_value(IdAa64Pfr0, 0x1100_0000_1011_1112, NO_PMU), 0x1100_0000_0011_1012);
        // ID_AA64DFR0_EL1: DebugVer 8.2, PMUVer 8.1 (4), 6 breakpoints / 4 watchpoints,
        // 2 context comparators; the OS Double Lock reads as not implemented.
        assert_eq!(guest_value(IdAa64Dfr0, 0x0000_0000_1030_5408, NO_PMU), 0x0000_00f0_1030_5008);
        assert_eq!(guest_value(IdAa64Dfr0, 0x0000_0000_1030_5408, WITH_PMU), 0x0000_00f0_1030_5408);
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
        // Fields within a register do not overlap, and their names are distinct.
        for reg in IdReg::ALL {
            let mut seen = 0u64;
            for f in fields(reg).iter().filter(|f| f.reg == reg) {
                assert_eq!(seen & f.mask(), 0, "{} overlaps", f.name);
                seen |= f.mask();
            }
        }
        // Hidden whole, reserved, or not passed through: no IdReg, so they read as zero.
        for r in [
            sysreg::ID_AA64SMFR0_EL1,
            sysreg::ID_AA64AFR0_EL1,
            sysreg::ID_AA64AFR1_EL1,
            sysreg::ID_AFR0_EL1,
            sysreg::ID_AA64PFR2_EL1,
            sysreg::ID_AA64MMFR3_EL1,
            SysReg::new(3, 0, 0, 7, 7),
            sysreg::MIDR_EL1,
        ] {
            assert_eq!(IdReg::from_sysreg(r), None, "{r:?}");
        }
    }

    #[test]
    fn sve_is_shown_only_to_a_vm_that_has_it() {
        let sve = named("ID_AA64PFR0_EL1.SVE");
        assert_eq!(guest_value(IdAa64Pfr0, sve.mask(), NO_PMU), 0);
        assert_eq!(guest_value(IdAa64Pfr0, sve.mask(), WITH_SVE), sve.mask());
        // SVE2 with some of its instruction sets: passed as the hardware has them, but for a
        // field the allow-list does not name (bits 39:36).
        let zfr0 = 0x0110_1110_0021_0021;
        assert_eq!(guest_value(IdAa64Zfr0, zfr0, NO_PMU), 0);
        assert_eq!(guest_value(IdAa64Zfr0, zfr0, WITH_SVE), zfr0 & !(0xf << 36));
        // The rest of ID_AA64PFR0_EL1 is as without SVE.
        assert_eq!(
            guest_value(IdAa64Pfr0, u64::MAX, WITH_SVE),
            guest_value(IdAa64Pfr0, u64::MAX, NO_PMU) | sve.mask()
        );
    }
}
