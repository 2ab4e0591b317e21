//! The `ICH_LR<n>_EL2` list-register format (GICv3 architecture, IHI 0069,
//! "`ICH_LR<n>_EL2`, Interrupt Controller List Registers").
//!
//! A list register is how EL2 hands one virtual interrupt to the virtual CPU
//! interface: the guest acknowledges (`ICC_IAR1_EL1`) and completes
//! (`ICC_EOIR1_EL1` / `ICC_DIR_EL1`) it in hardware, without trapping, and the
//! hardware updates `State`. The model writes these values in
//! [`Vgic::flush_lrs`](crate::Vgic::flush_lrs) and reads the hardware's
//! updates back in [`Vgic::sync_lrs`](crate::Vgic::sync_lrs).

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
}
