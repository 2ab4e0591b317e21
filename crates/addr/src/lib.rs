//! Address types that cannot be mixed by accident.
//!
//! The hypervisor juggles three address spaces: host physical addresses (what the
//! MMU and DMA see), intermediate physical addresses (what a guest believes is
//! physical memory, translated by Stage-2) and hypervisor virtual addresses
//! (identity-mapped to physical at EL2, but kept distinct so the identity
//! assumption is visible where it is used).
#![no_std]

use core::fmt;
use core::ops::{Add, Sub};

macro_rules! address_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub u64);

        impl $name {
            pub const fn new(raw: u64) -> Self {
                Self(raw)
            }
            pub const fn raw(self) -> u64 {
                self.0
            }
            /// Rounds down to a multiple of `align` (a power of two).
            pub const fn align_down(self, align: u64) -> Self {
                Self(self.0 & !(align - 1))
            }
            /// Rounds up to a multiple of `align` (a power of two); `None` on overflow.
            pub const fn checked_align_up(self, align: u64) -> Option<Self> {
                match self.0.checked_add(align - 1) {
                    Some(v) => Some(Self(v & !(align - 1))),
                    None => None,
                }
            }
            pub const fn is_aligned(self, align: u64) -> bool {
                self.0 & (align - 1) == 0
            }
            pub const fn checked_add(self, off: u64) -> Option<Self> {
                match self.0.checked_add(off) {
                    Some(v) => Some(Self(v)),
                    None => None,
                }
            }
            /// Offset of `self` from `base`, if `self >= base`.
            pub const fn offset_from(self, base: Self) -> Option<u64> {
                self.0.checked_sub(base.0)
            }
        }

        impl Add<u64> for $name {
            type Output = Self;
            fn add(self, rhs: u64) -> Self {
                Self(self.0 + rhs)
            }
        }

        impl Sub<u64> for $name {
            type Output = Self;
            fn sub(self, rhs: u64) -> Self {
                Self(self.0 - rhs)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{:#x}"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    };
}

address_type!(
    /// A host physical address.
    PhysAddr,
    "PA:"
);
address_type!(
    /// A guest-physical (intermediate physical) address, translated by Stage-2.
    Ipa,
    "IPA:"
);
address_type!(
    /// A hypervisor virtual address (EL2 stage-1).
    VirtAddr,
    "VA:"
);

/// A half-open range `[start, start + size)` of guest-physical addresses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IpaRange {
    pub start: Ipa,
    pub size: u64,
}

impl IpaRange {
    pub const fn new(start: Ipa, size: u64) -> Self {
        Self { start, size }
    }
    /// One past the last address; `None` if the range wraps the address space.
    pub const fn checked_end(&self) -> Option<Ipa> {
        self.start.checked_add(self.size)
    }
    pub fn contains(&self, ipa: Ipa) -> bool {
        ipa >= self.start && ipa.0 - self.start.0 < self.size
    }
    /// Whether `[ipa, ipa + len)` lies entirely inside this range.
    pub fn contains_span(&self, ipa: Ipa, len: u64) -> bool {
        match ipa.offset_from(self.start) {
            Some(off) => off <= self.size && len <= self.size - off,
            None => false,
        }
    }
    pub fn overlaps(&self, other: &IpaRange) -> bool {
        self.size != 0
            && other.size != 0
            && self.start.0 < other.start.0.saturating_add(other.size)
            && other.start.0 < self.start.0.saturating_add(self.size)
    }
}

pub const PAGE_SIZE: u64 = 4096;
pub const BLOCK_2M: u64 = 2 << 20;
pub const BLOCK_1G: u64 = 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment() {
        assert_eq!(Ipa(0x1234).align_down(0x1000), Ipa(0x1000));
        assert_eq!(Ipa(0x1234).checked_align_up(0x1000), Some(Ipa(0x2000)));
        assert_eq!(Ipa(u64::MAX).checked_align_up(0x1000), None);
        assert!(PhysAddr(0x20_0000).is_aligned(BLOCK_2M));
    }

    #[test]
    fn ranges() {
        let r = IpaRange::new(Ipa(0x4000_0000), 0x1000);
        assert!(r.contains(Ipa(0x4000_0fff)));
        assert!(!r.contains(Ipa(0x4000_1000)));
        assert!(!r.contains(Ipa(0x3fff_ffff)));
        assert!(r.contains_span(Ipa(0x4000_0ff0), 0x10));
        assert!(!r.contains_span(Ipa(0x4000_0ff0), 0x11));
        assert!(!r.contains_span(Ipa(0x4000_0ff0), u64::MAX));
        assert!(r.overlaps(&IpaRange::new(Ipa(0x4000_0fff), 1)));
        assert!(!r.overlaps(&IpaRange::new(Ipa(0x4000_1000), 1)));
        assert!(!r.overlaps(&IpaRange::new(Ipa(0x4000_0000), 0)));
    }
}
