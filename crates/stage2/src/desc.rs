//! VMSAv8-64 Stage-2 descriptor encoding, 4 KiB granule, 48-bit output addresses.
//!
//! Field names follow the ARM ARM (D8.3 "Translation table descriptor formats"; in older
//! editions D4.3). Only what this crate writes is decoded; anything else reads as invalid.

use addr::PhysAddr;

use crate::{Fwb, MemAttr, S2Perms};

/// Descriptor bit[0]: the entry is valid; an invalid entry makes the walk fault.
pub(crate) const VALID: u64 = 1 << 0;
/// Descriptor bit[1]: "table" at levels 0..=2, "page" at level 3. Clear at level 1/2 means
/// "block". (Clear at level 3 is reserved, and 4 KiB granules have no level-0 blocks.)
pub(crate) const TYPE_TABLE_OR_PAGE: u64 = 1 << 1;

/// Output address bits [47:12] (next-level table, page or block base).
pub(crate) const OA_MASK: u64 = 0x0000_ffff_ffff_f000;

/// Stage-2 MemAttr[3:0] at bits [5:2], HCR_EL2.FWB = 0: 0b1111 = Normal, Outer WB, Inner WB
/// cacheable, combined with the stage-1 type (the stricter wins).
const MEMATTR_NORMAL_WB: u64 = 0b1111 << 2;
/// MemAttr with HCR_EL2.FWB = 1 (FEAT_S2FWB): MemAttr[2] = 1 with MemAttr[1:0] = 0b10 is
/// Normal Write-Back whatever stage 1 says (0b11 would take stage 1's cacheability, 0b01
/// force Non-cacheable).
const MEMATTR_FWB_FORCE_WB: u64 = 0b0110 << 2;
/// MemAttr 0b0001 = Device-nGnRE (0b00xx is Device; xx selects the G/R/E variant), the same
/// with or without FWB.
const MEMATTR_DEVICE_NGNRE: u64 = 0b0001 << 2;
/// MemAttr[3:2] == 0b00 marks a Device type, whatever MemAttr[1:0] is (with FWB too: its
/// Normal encodings have MemAttr[2] set).
const MEMATTR_OUTER_MASK: u64 = 0b1100 << 2;
/// S2AP[0] (bit 6): stage-2 read access allowed.
const S2AP_READ: u64 = 1 << 6;
/// S2AP[1] (bit 7): stage-2 write access allowed.
const S2AP_WRITE: u64 = 1 << 7;
/// SH[1:0] at bits [9:8], 0b11 = Inner Shareable. Ignored for Device memory, which is
/// always treated as Outer Shareable, so it is only set for Normal memory.
const SH_INNER: u64 = 0b11 << 8;
/// AF (bit 10). Set on every leaf: without FEAT_HAFDBS (VTCR_EL2.HA) a clear AF would
/// make the first access take an Access flag fault, which we have no use for.
const AF: u64 = 1 << 10;
/// XN[1:0] at bits [54:53] (bit 53 is RES0 without FEAT_XNX); 0b10 = execute-never at
/// EL1 and EL0. 0b00 allows execution at both.
const XN_NEVER: u64 = 0b10 << 53;
const XN_MASK: u64 = 0b11 << 53;

/// What one descriptor is, for the walker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Desc {
    Invalid,
    /// Next-level table at this physical address.
    Table(PhysAddr),
    /// Block (levels 1, 2) or page (level 3) descriptor; the raw value keeps the attributes.
    Leaf(u64),
}

impl Desc {
    pub(crate) fn decode(raw: u64, level: u8) -> Desc {
        if raw & VALID == 0 {
            return Desc::Invalid;
        }
        let table_or_page = raw & TYPE_TABLE_OR_PAGE != 0;
        match (level, table_or_page) {
            (3, true) => Desc::Leaf(raw),
            (0..=2, true) => Desc::Table(PhysAddr::new(raw & OA_MASK)),
            (1 | 2, false) => Desc::Leaf(raw),
            // Level-0 block or level-3 "block": reserved with a 4 KiB granule, faults.
            _ => Desc::Invalid,
        }
    }
}

pub(crate) fn table(pa: PhysAddr) -> u64 {
    // Stage-2 table descriptors carry no hierarchical attributes (NSTable, APTable, XNTable,
    // PXNTable are stage-1 only and RES0 here), so this is just the address and the type.
    (pa.raw() & OA_MASK) | TYPE_TABLE_OR_PAGE | VALID
}

/// The attribute bits (everything but the output address and the type bits) of a leaf.
pub(crate) fn leaf_attrs(perms: S2Perms, attr: MemAttr, fwb: Fwb) -> u64 {
    let mut bits = AF;
    bits |= match (attr, fwb) {
        (MemAttr::Normal, Fwb::Off) => MEMATTR_NORMAL_WB | SH_INNER,
        (MemAttr::Normal, Fwb::On) => MEMATTR_FWB_FORCE_WB | SH_INNER,
        (MemAttr::Device, _) => MEMATTR_DEVICE_NGNRE,
    };
    if perms.read {
        bits |= S2AP_READ;
    }
    if perms.write {
        bits |= S2AP_WRITE;
    }
    if !perms.exec {
        bits |= XN_NEVER;
    }
    bits
}

/// A block (level 1/2) or page (level 3) descriptor.
pub(crate) fn leaf(pa: PhysAddr, attrs: u64, level: u8) -> u64 {
    let ty = if level == 3 { TYPE_TABLE_OR_PAGE } else { 0 };
    (pa.raw() & OA_MASK) | (attrs & !(OA_MASK | TYPE_TABLE_OR_PAGE | VALID)) | ty | VALID
}

/// Attribute bits of an existing leaf, to re-create it at another level (block split).
pub(crate) fn attrs_of(raw: u64) -> u64 {
    raw & !(OA_MASK | TYPE_TABLE_OR_PAGE | VALID)
}

pub(crate) fn output_address(raw: u64) -> PhysAddr {
    PhysAddr::new(raw & OA_MASK)
}

pub(crate) fn perms_of(raw: u64) -> S2Perms {
    S2Perms { read: raw & S2AP_READ != 0, write: raw & S2AP_WRITE != 0, exec: raw & XN_MASK == 0 }
}

pub(crate) fn attr_of(raw: u64) -> MemAttr {
    if raw & MEMATTR_OUTER_MASK == 0 { MemAttr::Device } else { MemAttr::Normal }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_rwx_page_encoding() {
        let attrs = leaf_attrs(S2Perms::RWX, MemAttr::Normal, Fwb::Off);
        let raw = leaf(PhysAddr::new(0x8000_1000), attrs, 3);
        // OA | AF | SH=IS | S2AP=RW | MemAttr=1111 | page | valid
        assert_eq!(raw, 0x8000_1000 | 0x400 | 0x300 | 0xc0 | 0x3c | 0b11);
        assert_eq!(Desc::decode(raw, 3), Desc::Leaf(raw));
        // The same bits at level 2 are a table descriptor, not a leaf.
        assert_eq!(Desc::decode(raw, 2), Desc::Table(PhysAddr::new(0x8000_1000)));
    }

    #[test]
    fn device_ro_xn_block_encoding() {
        let raw =
            leaf(PhysAddr::new(0x20_0000), leaf_attrs(S2Perms::RO, MemAttr::Device, Fwb::Off), 2);
        assert_eq!(raw, (1 << 54) | 0x20_0000 | 0x400 | 0x40 | 0x04 | 0b01);
        assert_eq!(perms_of(raw), S2Perms::RO);
        assert_eq!(attr_of(raw), MemAttr::Device);
        assert_eq!(Desc::decode(raw, 2), Desc::Leaf(raw));
        // A block bit pattern at level 0 or 3 is reserved and must not be treated as a leaf.
        assert_eq!(Desc::decode(raw, 0), Desc::Invalid);
        assert_eq!(Desc::decode(raw, 3), Desc::Invalid);
    }

    /// With FWB, RAM is MemAttr 0b0110 (forced Normal Write-Back: a guest with its MMU off is
    /// coherent with armhv's cached accesses); device memory is encoded as without it.
    #[test]
    fn fwb_encodings() {
        let ram =
            leaf(PhysAddr::new(0x8000_1000), leaf_attrs(S2Perms::RWX, MemAttr::Normal, Fwb::On), 3);
        assert_eq!((ram >> 2) & 0xf, 0b0110);
        assert_eq!(ram, 0x8000_1000 | 0x400 | 0x300 | 0xc0 | 0x18 | 0b11);
        assert_eq!(attr_of(ram), MemAttr::Normal);
        let no_fwb = leaf(
            PhysAddr::new(0x8000_1000),
            leaf_attrs(S2Perms::RWX, MemAttr::Normal, Fwb::Off),
            3,
        );
        assert_eq!((no_fwb >> 2) & 0xf, 0b1111);
        for perms in [S2Perms::RO, S2Perms::RW] {
            assert_eq!(
                leaf_attrs(perms, MemAttr::Device, Fwb::On),
                leaf_attrs(perms, MemAttr::Device, Fwb::Off)
            );
        }
        let dev =
            leaf(PhysAddr::new(0x20_0000), leaf_attrs(S2Perms::RW, MemAttr::Device, Fwb::On), 2);
        assert_eq!((dev >> 2) & 0xf, 0b0001);
        assert_eq!(attr_of(dev), MemAttr::Device);
    }

    #[test]
    fn table_encoding() {
        assert_eq!(table(PhysAddr::new(0x1234_5000)), 0x1234_5003);
        assert_eq!(Desc::decode(0x1234_5002, 1), Desc::Invalid);
    }
}
