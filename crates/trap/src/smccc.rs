//! SMC Calling Convention (Arm DEN 0028) function identifiers and return
//! codes.
//!
//! The function ID arrives in `w0` of an `HVC #0`/`SMC #0`. Its layout:
//! bit 31 fast call (1) or yielding call (0); bit 30 SMC64 (1) or SMC32 (0)
//! calling convention; bits `[29:24]` the Owning Entity Number; bits `[23:17]`
//! must be zero; bit 16 the SVE live-state hint (SMCCC v1.3); bits `[15:0]`
//! the function number.

/// `SUCCESS`.
pub const SUCCESS: i64 = 0;
/// `NOT_SUPPORTED`: unknown function ID (written to `x0` as `-1`, all ones).
pub const NOT_SUPPORTED: i64 = -1;
/// `NOT_REQUIRED`: e.g. a firmware workaround the platform does not need.
pub const NOT_REQUIRED: i64 = -2;
/// What `SMCCC_ARCH_FEATURES` answers about a workaround this PE does not need (a
/// positive value: the function still exists).
pub const UNAFFECTED: i64 = 1;
/// `INVALID_PARAMETER`.
pub const INVALID_PARAMETER: i64 = -3;

/// `SMCCC_VERSION`: returns the implemented SMCCC version.
pub const SMCCC_VERSION: FunctionId = FunctionId(0x8000_0000);
/// `SMCCC_ARCH_FEATURES`: is function ID `w1` implemented?
pub const SMCCC_ARCH_FEATURES: FunctionId = FunctionId(0x8000_0001);
/// `SMCCC_ARCH_SOC_ID`.
pub const SMCCC_ARCH_SOC_ID: FunctionId = FunctionId(0x8000_0002);
/// `SMCCC_ARCH_WORKAROUND_1` (Spectre v2 / CVE-2017-5715).
pub const SMCCC_ARCH_WORKAROUND_1: FunctionId = FunctionId(0x8000_8000);
/// `SMCCC_ARCH_WORKAROUND_2` (Spectre v4 / CVE-2018-3639).
pub const SMCCC_ARCH_WORKAROUND_2: FunctionId = FunctionId(0x8000_7fff);
/// `SMCCC_ARCH_WORKAROUND_3` (Spectre-BHB).
pub const SMCCC_ARCH_WORKAROUND_3: FunctionId = FunctionId(0x8000_3fff);

/// An SMCCC function identifier (`w0` of the call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct FunctionId(pub u32);

/// Who defines a function: the Owning Entity Number, bits `[29:24]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// 0: Arm architecture calls (`SMCCC_VERSION`, workarounds).
    Arch,
    /// 1: CPU service calls.
    Cpu,
    /// 2: SiP (silicon partner) service calls.
    Sip,
    /// 3: OEM service calls.
    Oem,
    /// 4: standard secure service calls (PSCI lives here).
    StandardSecure,
    /// 5: standard hypervisor service calls.
    StandardHyp,
    /// 6: vendor-specific hypervisor service calls (armhv's own calls).
    VendorHyp,
    /// 48–49: trusted application calls.
    TrustedApp,
    /// 50–63: trusted OS calls.
    TrustedOs,
    /// 7–47: reserved for future use.
    Reserved,
}

impl Owner {
    pub const fn from_oen(oen: u8) -> Self {
        match oen {
            0 => Self::Arch,
            1 => Self::Cpu,
            2 => Self::Sip,
            3 => Self::Oem,
            4 => Self::StandardSecure,
            5 => Self::StandardHyp,
            6 => Self::VendorHyp,
            48..=49 => Self::TrustedApp,
            50..=63 => Self::TrustedOs,
            _ => Self::Reserved,
        }
    }
}

impl FunctionId {
    pub const FAST: u32 = 1 << 31;
    pub const SMC64: u32 = 1 << 30;
    /// SMCCC v1.3 hint that the caller has no live SVE state; callers may
    /// set it on any fast call, so dispatch must ignore it.
    pub const SVE_HINT: u32 = 1 << 16;

    /// Takes the function ID from `x0`: only `w0` is significant.
    pub const fn from_x0(x0: u64) -> Self {
        Self(x0 as u32)
    }

    /// Fast call (atomic from the caller's view) rather than yielding.
    pub const fn is_fast(self) -> bool {
        self.0 & Self::FAST != 0
    }

    /// SMC64/HVC64 calling convention (64-bit arguments in `x1..x17`).
    pub const fn is_smc64(self) -> bool {
        self.0 & Self::SMC64 != 0
    }

    /// Owning Entity Number, bits `[29:24]`.
    pub const fn oen(self) -> u8 {
        ((self.0 >> 24) & 0x3f) as u8
    }

    pub const fn owner(self) -> Owner {
        Owner::from_oen(self.oen())
    }

    /// Function number within the owner's range, bits `[15:0]`.
    pub const fn number(self) -> u16 {
        self.0 as u16
    }

    /// The ID with the SVE hint bit cleared, for matching against constants.
    pub const fn without_hints(self) -> Self {
        Self(self.0 & !Self::SVE_HINT)
    }

    /// Whether the must-be-zero bits `[23:17]` are clear.
    pub const fn is_well_formed(self) -> bool {
        self.0 & 0x00fe_0000 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_fields() {
        let v = SMCCC_VERSION;
        assert!(v.is_fast() && !v.is_smc64());
        assert_eq!(v.owner(), Owner::Arch);
        assert_eq!(v.number(), 0);

        // PSCI_CPU_ON (SMC64) 0xC4000003.
        let f = FunctionId(0xc400_0003);
        assert!(f.is_fast() && f.is_smc64());
        assert_eq!(f.owner(), Owner::StandardSecure);
        assert_eq!(f.number(), 3);

        // PSCI_VERSION (SMC32) 0x84000000.
        let f = FunctionId(0x8400_0000);
        assert!(f.is_fast() && !f.is_smc64());
        assert_eq!(f.owner(), Owner::StandardSecure);

        // ARMHV_VM_INFO 0xC6000001: vendor hypervisor service, fast, SMC64.
        let f = FunctionId::from_x0(0xffff_ffff_c600_0001);
        assert_eq!(f, FunctionId(0xc600_0001));
        assert!(f.is_fast() && f.is_smc64());
        assert_eq!(f.owner(), Owner::VendorHyp);
        assert_eq!(f.oen(), 6);
        assert_eq!(f.number(), 1);

        // A yielding trusted-OS call.
        let f = FunctionId(0x3200_0010);
        assert!(!f.is_fast());
        assert_eq!(f.owner(), Owner::TrustedOs);
        assert_eq!(f.number(), 0x10);
    }

    #[test]
    fn owners() {
        let expect = |oen: u8| match oen {
            0 => Owner::Arch,
            1 => Owner::Cpu,
            2 => Owner::Sip,
            3 => Owner::Oem,
            4 => Owner::StandardSecure,
            5 => Owner::StandardHyp,
            6 => Owner::VendorHyp,
            7..=47 => Owner::Reserved,
            48 | 49 => Owner::TrustedApp,
            _ => Owner::TrustedOs,
        };
        for oen in 0..64u8 {
            let f = FunctionId(0x8000_0000 | ((oen as u32) << 24));
            assert_eq!(f.oen(), oen);
            assert_eq!(f.owner(), expect(oen), "OEN {oen}");
        }
    }

    #[test]
    fn hints_and_reserved_bits() {
        let f = FunctionId(0x8400_0000 | FunctionId::SVE_HINT);
        assert_ne!(f, FunctionId(0x8400_0000));
        assert_eq!(f.without_hints(), FunctionId(0x8400_0000));
        assert!(f.is_well_formed());
        assert!(!FunctionId(0x8402_0000).is_well_formed());
        assert_eq!(f.number(), 0);
    }

    #[test]
    fn return_codes() {
        assert_eq!(NOT_SUPPORTED as u64, u64::MAX);
        assert_eq!(NOT_REQUIRED as u64, 0xffff_ffff_ffff_fffe);
        assert_eq!(INVALID_PARAMETER as u64, 0xffff_ffff_ffff_fffd);
        assert_eq!(SUCCESS, 0);
    }
}
