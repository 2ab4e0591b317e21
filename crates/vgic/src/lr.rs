//! The `ICH_LR<n>_EL2` list-register format (GICv3 architecture, IHI 0069,
//! "`ICH_LR<n>_EL2`, Interrupt Controller List Registers").
//!
//! A list register is how EL2 hands one virtual interrupt to the virtual CPU
//! interface: the guest acknowledges (`ICC_IAR1_EL1`) and completes
//! (`ICC_EOIR1_EL1` / `ICC_DIR_EL1`) it in hardware, without trapping, and the
//! hardware updates `State`. The model writes these values in
//! [`Vgic::flush_lrs`](crate::Vgic::flush_lrs) and reads the hardware's
//! updates back in [`Vgic::sync_lrs`](crate::Vgic::sync_lrs), in this encoding
//! whatever the GIC version; on a GICv2 host [`v2`] translates them to and from
//! `GICH_LR<n>`.

/// `State[63:62]` bit 62: the virtual interrupt is pending.
pub const PENDING: u64 = 1 << 62;
/// `State[63:62]` bit 63: the virtual interrupt is active.
pub const ACTIVE: u64 = 1 << 63;
/// `State[63:62]`, both bits.
pub const STATE_MASK: u64 = PENDING | ACTIVE;
/// `HW[61]`: the virtual interrupt is linked to the physical interrupt in
/// `pINTID`; deactivating it deactivates the physical one.
pub const HW: u64 = 1 << 61;
/// `Group[60]`: 1 for Group 1 (signalled as vIRQ), 0 for Group 0 (vFIQ when
/// `ICH_VMCR_EL2.VFIQEn` is set).
pub const GROUP: u64 = 1 << 60;
/// `Priority[55:48]`.
pub const PRIORITY_SHIFT: u32 = 48;
/// `EOI[41]` (only when `HW` is 0): raise a maintenance interrupt
/// (`ICH_MISR_EL2.EOI`, `ICH_EISR_EL2`) when the entry becomes invalid, i.e.
/// when the guest deactivates the interrupt.
pub const EOI: u64 = 1 << 41;
/// `pINTID[44:32]` (only when `HW` is 1).
pub const PINTID_SHIFT: u32 = 32;
/// Width mask of `pINTID` (13 bits).
pub const PINTID_MASK: u64 = 0x1fff;
/// `vINTID[31:0]`.
pub const VINTID_MASK: u64 = 0xffff_ffff;
/// Model-internal, GICv2 models only: the source CPU ID of a virtual SGI, in bits `[34:32]`,
/// RES0 in `ICH_LR<n>_EL2` when `HW` is 0 (SGIs are never hardware-linked). Its place in
/// `pINTID` mirrors `GICH_LR.CPUID`'s in `PhysicalID` (bits 2:0 of either), as `EOI` (bit 9 of
/// either) does, so [`v2`] moves the whole field across unchanged. A GICv3 model never sets it.
pub const SGI_SOURCE_SHIFT: u32 = 32;
/// Width mask of the SGI source (3 bits: CPU IDs 0..7).
pub const SGI_SOURCE_MASK: u64 = 0x7;

/// The decoded `State` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LrState {
    /// `0b00`: the entry holds nothing.
    Invalid,
    /// `0b01`.
    Pending,
    /// `0b10`: acknowledged, not yet deactivated.
    Active,
    /// `0b11`: active, and pending again behind it.
    PendingActive,
}

impl LrState {
    /// `State` of a list-register value.
    pub const fn of(lr: u64) -> Self {
        match (lr & STATE_MASK) >> 62 {
            0 => Self::Invalid,
            1 => Self::Pending,
            2 => Self::Active,
            _ => Self::PendingActive,
        }
    }

    pub const fn is_pending(self) -> bool {
        matches!(self, Self::Pending | Self::PendingActive)
    }

    pub const fn is_active(self) -> bool {
        matches!(self, Self::Active | Self::PendingActive)
    }
}

/// `vINTID` of a list-register value.
pub const fn vintid(lr: u64) -> u32 {
    (lr & VINTID_MASK) as u32
}

/// `Priority` of a list-register value.
pub const fn priority(lr: u64) -> u8 {
    (lr >> PRIORITY_SHIFT) as u8
}

/// `pINTID` of a list-register value, if `HW` is set.
pub const fn pintid(lr: u64) -> Option<u32> {
    if lr & HW != 0 { Some(((lr >> PINTID_SHIFT) & PINTID_MASK) as u32) } else { None }
}

/// The SGI source CPU ID of a GICv2 model's list-register value (0 for everything else).
pub const fn sgi_source(lr: u64) -> usize {
    if lr & HW != 0 { 0 } else { ((lr >> SGI_SOURCE_SHIFT) & SGI_SOURCE_MASK) as usize }
}

/// The GICv2 list-register format, `GICH_LR<n>` (IHI 0048B, "GICH_LRn, List Registers"), for a
/// GICv2 host: the model speaks the `ICH_LR<n>_EL2` encoding above, and the hypervisor
/// translates each value on its way to and from the GICH frame.
///
/// ```text
///  GICH_LR:      31  30    29:28   27:23     22:20  19:10       9:0
///                HW  Grp1  State   Priority  -      PhysicalID  VirtualID
///  ICH_LR_EL2:   61  60    63:62   55:51     -      41:32       9:0
/// ```
///
/// `PhysicalID` is the physical INTID when `HW` = 1; otherwise its bit 9 is `EOI` and bits 2:0
/// the `CPUID` of an SGI's source, the same bits of `pINTID` that hold `EOI` and
/// [`SGI_SOURCE_SHIFT`]. `Priority` keeps the top 5 bits of the 8-bit priority, all the
/// model keeps ([`PRIORITY_MASK`](crate::PRIORITY_MASK)).
pub mod v2 {
    /// `VirtualID[9:0]`.
    pub const VIRTUAL_ID_MASK: u32 = 0x3ff;
    /// `PhysicalID[19:10]`.
    pub const PHYSICAL_ID_SHIFT: u32 = 10;
    pub const PHYSICAL_ID_MASK: u32 = 0x3ff;
    /// `EOI[19]` (bit 9 of `PhysicalID`, when `HW` = 0).
    pub const EOI: u32 = 1 << 19;
    /// `CPUID[12:10]` (bits 2:0 of `PhysicalID`, when `HW` = 0): an SGI's source.
    pub const CPUID_SHIFT: u32 = 10;
    /// `Priority[27:23]`: the top 5 bits of the priority.
    pub const PRIORITY_SHIFT: u32 = 23;
    /// `State[29:28]`.
    pub const STATE_SHIFT: u32 = 28;
    pub const PENDING: u32 = 1 << 28;
    pub const ACTIVE: u32 = 1 << 29;
    /// `Grp1[30]`.
    pub const GRP1: u32 = 1 << 30;
    /// `HW[31]`.
    pub const HW: u32 = 1 << 31;

    /// Where `PhysicalID` sits in an `ICH_LR<n>_EL2` value: `pINTID[9:0]`.
    const ICH_PHYSICAL_SHIFT: u32 = super::PINTID_SHIFT;
    /// Where `State` sits in an `ICH_LR<n>_EL2` value.
    const ICH_STATE_SHIFT: u32 = 62;

    /// The `GICH_LR<n>` value of an `ICH_LR<n>_EL2`-format value the model wrote. What
    /// `GICH_LR` has no room for is dropped: `vINTID` and `pINTID` bits above 9 (the model's
    /// INTIDs are below 1020) and the low 3 bits of the priority (always 0).
    pub const fn to_gich(lr: u64) -> u32 {
        let virtual_id = lr as u32 & VIRTUAL_ID_MASK;
        let physical = (lr >> ICH_PHYSICAL_SHIFT) as u32 & PHYSICAL_ID_MASK;
        let priority = super::priority(lr) as u32 >> 3;
        let state = (lr >> ICH_STATE_SHIFT) as u32 & 0b11;
        let mut v = virtual_id
            | physical << PHYSICAL_ID_SHIFT
            | priority << PRIORITY_SHIFT
            | state << STATE_SHIFT;
        if lr & super::GROUP != 0 {
            v |= GRP1;
        }
        if lr & super::HW != 0 {
            v |= HW;
        }
        v
    }

    /// The `ICH_LR<n>_EL2`-format value of a `GICH_LR<n>` value read back, for
    /// [`Vgic::sync_lrs`](crate::Vgic::sync_lrs): the inverse of [`to_gich`] on every value
    /// the model writes.
    pub const fn from_gich(v: u32) -> u64 {
        let virtual_id = (v & VIRTUAL_ID_MASK) as u64;
        let physical = ((v >> PHYSICAL_ID_SHIFT) & PHYSICAL_ID_MASK) as u64;
        let priority = (((v >> PRIORITY_SHIFT) & 0x1f) << 3) as u64;
        let state = ((v >> STATE_SHIFT) & 0b11) as u64;
        let mut lr = virtual_id
            | physical << ICH_PHYSICAL_SHIFT
            | priority << super::PRIORITY_SHIFT
            | state << ICH_STATE_SHIFT;
        if v & GRP1 != 0 {
            lr |= super::GROUP;
        }
        if v & HW != 0 {
            lr |= super::HW;
        }
        lr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_fields() {
        // Pending+active, HW, Group 1, priority 0xa0, pINTID 27, vINTID 27.
        let lr = PENDING | ACTIVE | HW | GROUP | (0xa0 << PRIORITY_SHIFT) | (27 << 32) | 27;
        assert_eq!(LrState::of(lr), LrState::PendingActive);
        assert_eq!(vintid(lr), 27);
        assert_eq!(priority(lr), 0xa0);
        assert_eq!(pintid(lr), Some(27));
        assert_eq!(pintid(lr & !HW), None);
        assert_eq!(LrState::of(0), LrState::Invalid);
        assert_eq!(LrState::of(PENDING), LrState::Pending);
        assert_eq!(LrState::of(ACTIVE), LrState::Active);
        assert!(LrState::PendingActive.is_pending() && LrState::PendingActive.is_active());
        assert!(!LrState::Active.is_pending() && !LrState::Pending.is_active());
    }

    /// Every kind of value the model writes survives the trip through `GICH_LR`.
    #[test]
    fn gich_round_trip_of_every_model_value() {
        let states = [PENDING, ACTIVE, PENDING | ACTIVE];
        let mut checked = 0u64;
        for vintid in 0..1020u64 {
            // (extra bits: nothing; EOI; HW with a physical INTID; an SGI's source)
            let mut extras = std::vec![0, EOI];
            if vintid >= 16 {
                extras.extend([HW | vintid << PINTID_SHIFT, HW | (1019 - vintid) << PINTID_SHIFT]);
            } else {
                for source in 0..8 {
                    extras.push(source << SGI_SOURCE_SHIFT);
                    extras.push(source << SGI_SOURCE_SHIFT | EOI);
                }
            }
            for state in states {
                for group in [0, GROUP] {
                    for priority in (0..=0xf8u64).step_by(8) {
                        for &extra in &extras {
                            let lr = vintid | state | group | priority << PRIORITY_SHIFT | extra;
                            assert_eq!(v2::from_gich(v2::to_gich(lr)), lr, "{lr:#x}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 400_000, "{checked}");
    }

    #[test]
    fn gich_fields() {
        // Pending, Group 1, priority 0xa0, EOI, SGI 3 from CPU 5.
        let lr = PENDING | GROUP | 0xa0 << PRIORITY_SHIFT | EOI | 5 << SGI_SOURCE_SHIFT | 3;
        let gich = v2::to_gich(lr);
        assert_eq!(gich, 1 << 28 | 1 << 30 | (0xa0 >> 3) << 23 | 1 << 19 | 5 << 10 | 3);
        assert_eq!(gich & v2::VIRTUAL_ID_MASK, 3);
        assert_eq!(gich >> v2::CPUID_SHIFT & 0x7, 5);
        assert_eq!(sgi_source(lr), 5);
        // Active, Group 0, HW, physical INTID 1019, virtual 27, priority 0xf8.
        let lr = ACTIVE | HW | 1019 << PINTID_SHIFT | 0xf8 << PRIORITY_SHIFT | 27;
        assert_eq!(v2::to_gich(lr), 1 << 29 | 1 << 31 | 1019 << 10 | 0x1f << 23 | 27);
        assert_eq!(sgi_source(lr), 0, "no SGI source in a hardware-linked entry");

        // Hand-made GICH_LR values, as a GICv2 host reads them back.
        let pending_sgi = 0x1000_0000 | 0x4000_0000 | 0x10 << 23 | 2 << 10 | 1;
        let lr = v2::from_gich(pending_sgi);
        assert_eq!(LrState::of(lr), LrState::Pending);
        assert_eq!((vintid(lr), priority(lr), sgi_source(lr)), (1, 0x80, 2));
        assert_eq!(lr & (GROUP | HW | EOI), GROUP);
        let active_hw = 0x2000_0000 | 0x8000_0000 | 30 << 10 | 27;
        let lr = v2::from_gich(active_hw);
        assert_eq!(LrState::of(lr), LrState::Active);
        assert_eq!((vintid(lr), pintid(lr), priority(lr)), (27, Some(30), 0));
        assert_eq!(lr & GROUP, 0);
        let invalid_with_eoi = v2::EOI | 0x5 << 23 | 40;
        let lr = v2::from_gich(invalid_with_eoi);
        assert_eq!(LrState::of(lr), LrState::Invalid);
        assert_eq!((vintid(lr), priority(lr), lr & EOI), (40, 0x28, EOI));
        assert_eq!(LrState::of(v2::from_gich(v2::PENDING | v2::ACTIVE)), LrState::PendingActive);
    }
}
