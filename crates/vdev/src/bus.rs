//! The per-VM MMIO bus: guest-physical ranges mapped to emulated devices.
//!
//! A VM has a handful of devices (UART, a few virtio-mmio slots; the GIC is
//! handled before the bus), so the bus is a `Vec` sorted by start address,
//! searched by binary search. Ranges never overlap, which `insert` enforces;
//! that makes "the region with the greatest start <= ipa" the only candidate.
//! The region found last is tried first: a guest's accesses come in runs to one
//! device (a UART's bytes, a virtio device's notify and interrupt acknowledgement).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use addr::{Ipa, IpaRange};

use crate::{AccessWidth, MmioDevice, MmioError};

struct Region {
    range: IpaRange,
    device: Box<dyn MmioDevice>,
}

/// Why a device could not be added to the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The range has size 0.
    Empty,
    /// The range runs past the end of the address space.
    Wraps,
    /// The range overlaps the range of the named device already on the bus.
    Overlaps { existing: &'static str, range: IpaRange },
}

impl fmt::Display for InsertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty MMIO range"),
            Self::Wraps => f.write_str("MMIO range wraps the address space"),
            Self::Overlaps { existing, range } => {
                write!(f, "MMIO range overlaps {existing} at {}+{:#x}", range.start, range.size)
            }
        }
    }
}

/// Maps IPA ranges to devices.
#[derive(Default)]
pub struct MmioBus {
    /// Sorted by `range.start`, pairwise disjoint.
    regions: Vec<Region>,
    /// The index [`find`](Self::find) returned last. Only a hint: an insert or a removal may
    /// shift it to another region, which is still the right one if it contains the address,
    /// since no two regions overlap.
    last: usize,
}

impl MmioBus {
    pub const fn new() -> Self {
        Self { regions: Vec::new(), last: 0 }
    }

    /// Adds `device` at `range`. Rejects empty or wrapping ranges and any
    /// overlap with a device already on the bus (two devices answering one
    /// address is always a configuration error).
    pub fn insert(
        &mut self,
        range: IpaRange,
        device: Box<dyn MmioDevice>,
    ) -> Result<(), InsertError> {
        if range.size == 0 {
            return Err(InsertError::Empty);
        }
        if range.checked_end().is_none() {
            return Err(InsertError::Wraps);
        }
        let idx = self.regions.partition_point(|r| r.range.start < range.start);
        // Disjoint sorted ranges: only the neighbours can overlap.
        for r in self.regions[idx.saturating_sub(1)..].iter().take(2) {
            if r.range.overlaps(&range) {
                return Err(InsertError::Overlaps { existing: r.device.name(), range: r.range });
            }
        }
        self.regions.insert(idx, Region { range, device });
        Ok(())
    }

    /// Removes and returns the device whose range starts at `start`.
    pub fn remove(&mut self, start: Ipa) -> Option<Box<dyn MmioDevice>> {
        let idx = self.regions.binary_search_by_key(&start, |r| r.range.start).ok()?;
        Some(self.regions.remove(idx).device)
    }

    fn find(&mut self, ipa: Ipa) -> Option<usize> {
        if self.regions.get(self.last).is_some_and(|r| r.range.contains(ipa)) {
            return Some(self.last);
        }
        let idx = self.regions.partition_point(|r| r.range.start <= ipa);
        let idx = idx.checked_sub(1)?;
        let found = self.regions[idx].range.contains(ipa).then_some(idx)?;
        self.last = found;
        Some(found)
    }

    /// The device owning `ipa` and the offset of `ipa` inside its range.
    pub fn lookup(&mut self, ipa: Ipa) -> Option<(&mut dyn MmioDevice, u64)> {
        let idx = self.find(ipa)?;
        let r = &mut self.regions[idx];
        Some((r.device.as_mut(), ipa.0 - r.range.start.0))
    }

    /// The range and device owning `ipa`, plus the offset, if the whole
    /// access `[ipa, ipa + width)` lies in that one range.
    fn route(
        &mut self,
        ipa: Ipa,
        width: AccessWidth,
    ) -> Result<(&mut dyn MmioDevice, u64), MmioError> {
        let idx = self.find(ipa).ok_or(MmioError::Unmapped)?;
        let r = &mut self.regions[idx];
        if !r.range.contains_span(ipa, width.bytes()) {
            // Straddles the end of the device's window.
            return Err(MmioError::Unmapped);
        }
        Ok((r.device.as_mut(), ipa.0 - r.range.start.0))
    }

    /// Performs a guest read at `ipa`; the result is truncated to `width`.
    pub fn read(&mut self, ipa: Ipa, width: AccessWidth) -> Result<u64, MmioError> {
        let (dev, offset) = self.route(ipa, width)?;
        dev.read(offset, width).map(|v| width.truncate(v))
    }

    /// Performs a guest write at `ipa`; `value` is truncated to `width`.
    pub fn write(&mut self, ipa: Ipa, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let (dev, offset) = self.route(ipa, width)?;
        dev.write(offset, width, width.truncate(value))
    }

    /// The first device of type `T` on the bus, as `T` (for the hypervisor
    /// to feed the UART's input, drain its output, sample its IRQ line).
    pub fn device_mut<T: MmioDevice>(&mut self) -> Option<&mut T> {
        self.regions.iter_mut().find_map(|r| r.device.as_mut().downcast_mut::<T>())
    }

    /// The device at `ipa`, as `T`.
    pub fn device_at_mut<T: MmioDevice>(&mut self, ipa: Ipa) -> Option<&mut T> {
        let idx = self.find(ipa)?;
        self.regions[idx].device.as_mut().downcast_mut::<T>()
    }

    /// Every device, in address order.
    pub fn devices_mut(&mut self) -> impl Iterator<Item = &mut dyn MmioDevice> + '_ {
        self.regions.iter_mut().map(|r| r.device.as_mut())
    }

    /// `(range, device name)` for every device, in address order.
    pub fn ranges(&self) -> impl Iterator<Item = (IpaRange, &'static str)> + '_ {
        self.regions.iter().map(|r| (r.range, r.device.name()))
    }

    pub fn len(&self) -> usize {
        self.regions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
}

impl fmt::Debug for MmioBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for (range, name) in self.ranges() {
            l.entry(&format_args!("{name}@{}..{:#x}", range.start, range.start.0 + range.size));
        }
        l.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pl011;
    use alloc::vec;
    use std::format;

    /// 16 bytes of little-endian RAM with a name; records the last offset.
    struct Scratch {
        name: &'static str,
        bytes: [u8; 16],
        last_offset: Option<u64>,
    }

    impl Scratch {
        fn boxed(name: &'static str) -> Box<dyn MmioDevice> {
            Box::new(Scratch { name, bytes: [0; 16], last_offset: None })
        }
    }

    impl MmioDevice for Scratch {
        fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
            self.last_offset = Some(offset);
            let mut v = 0u64;
            for i in (0..width.bytes()).rev() {
                v = (v << 8)
                    | *self.bytes.get((offset + i) as usize).ok_or(MmioError::Unmapped)? as u64;
            }
            // Return garbage above the width to check that the bus truncates.
            Ok(v | !width.mask())
        }
        fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
            self.last_offset = Some(offset);
            assert_eq!(value & !width.mask(), 0, "bus must truncate");
            for i in 0..width.bytes() {
                *self.bytes.get_mut((offset + i) as usize).ok_or(MmioError::Unmapped)? =
                    (value >> (8 * i)) as u8;
            }
            Ok(())
        }
        fn name(&self) -> &'static str {
            self.name
        }
    }

    fn range(start: u64, size: u64) -> IpaRange {
        IpaRange::new(Ipa(start), size)
    }

    fn bus() -> MmioBus {
        let mut bus = MmioBus::new();
        // Inserted out of order on purpose.
        bus.insert(range(0x0a00_0200, 0x200), Scratch::boxed("b")).unwrap();
        bus.insert(range(0x0900_0000, 0x1000), Scratch::boxed("uart")).unwrap();
        bus.insert(range(0x0a00_0000, 0x200), Scratch::boxed("a")).unwrap();
        bus
    }

    #[test]
    fn insert_keeps_order() {
        let bus = bus();
        assert_eq!(bus.len(), 3);
        assert!(!bus.is_empty());
        let names: vec::Vec<_> = bus.ranges().map(|(_, n)| n).collect();
        assert_eq!(names, ["uart", "a", "b"]);
        assert_eq!(
            format!("{bus:?}"),
            "[uart@0x9000000..0x9001000, a@0xa000000..0xa000200, b@0xa000200..0xa000400]"
        );
    }

    #[test]
    fn insert_rejects_overlaps() {
        let mut bus = bus();
        let uart = range(0x0900_0000, 0x1000);
        for (start, size) in [
            (0x0900_0000, 0x1000),      // identical
            (0x08ff_f000, 0x1001),      // covers the first byte
            (0x0900_0fff, 0x10),        // covers the last byte
            (0x0900_0100, 0x10),        // inside
            (0x0800_0000, 0x0200_0000), // contains
        ] {
            assert_eq!(
                bus.insert(range(start, size), Scratch::boxed("x")),
                Err(InsertError::Overlaps { existing: "uart", range: uart }),
                "{start:#x}+{size:#x}"
            );
        }
        // Overlapping the later neighbour is caught too.
        assert!(matches!(
            bus.insert(range(0x0a00_01f0, 0x20), Scratch::boxed("x")),
            Err(InsertError::Overlaps { existing: "a", .. })
        ));
        assert_eq!(bus.insert(range(0x1000, 0), Scratch::boxed("x")), Err(InsertError::Empty));
        assert_eq!(
            bus.insert(range(u64::MAX - 0xfff, 0x2000), Scratch::boxed("x")),
            Err(InsertError::Wraps)
        );
        assert_eq!(bus.len(), 3);
        // Exactly adjacent on both sides is fine.
        bus.insert(range(0x08ff_f000, 0x1000), Scratch::boxed("before")).unwrap();
        bus.insert(range(0x0900_1000, 0x1000), Scratch::boxed("after")).unwrap();
        assert_eq!(bus.len(), 5);
        assert_eq!(
            format!("{}", InsertError::Overlaps { existing: "uart", range: uart }),
            "MMIO range overlaps uart at 0x9000000+0x1000"
        );
    }

    #[test]
    fn lookup_finds_owner_and_offset() {
        let mut bus = bus();
        for (ipa, name, off) in [
            (0x0900_0000, "uart", 0),
            (0x0900_0018, "uart", 0x18),
            (0x0900_0fff, "uart", 0xfff),
            (0x0a00_0000, "a", 0),
            (0x0a00_01ff, "a", 0x1ff),
            (0x0a00_0200, "b", 0),
            (0x0a00_03ff, "b", 0x1ff),
        ] {
            let (dev, offset) = bus.lookup(Ipa(ipa)).unwrap();
            assert_eq!((dev.name(), offset), (name, off), "{ipa:#x}");
        }
        for ipa in [0, 0x08ff_ffff, 0x0900_1000, 0x0a00_0400, u64::MAX] {
            assert!(bus.lookup(Ipa(ipa)).is_none(), "{ipa:#x}");
        }
        assert!(MmioBus::new().lookup(Ipa(0)).is_none());
    }

    /// The last region found is tried first; regions added or removed since shift the
    /// indexes, and every lookup still finds its own device.
    #[test]
    fn the_hint_of_the_last_lookup_never_misleads() {
        let mut bus = bus();
        let name = |bus: &mut MmioBus, ipa| bus.lookup(Ipa(ipa)).map(|(d, off)| (d.name(), off));
        assert_eq!(name(&mut bus, 0x0a00_0204), Some(("b", 4)));
        assert_eq!(name(&mut bus, 0x0a00_0208), Some(("b", 8)));
        assert!(bus.remove(Ipa(0x0900_0000)).is_some()); // "b" moves down one index
        assert_eq!(name(&mut bus, 0x0a00_0000), Some(("a", 0)));
        assert_eq!(name(&mut bus, 0x0a00_0204), Some(("b", 4)));
        bus.insert(range(0x0800_0000, 0x1000), Scratch::boxed("first")).unwrap();
        assert_eq!(name(&mut bus, 0x0a00_0204), Some(("b", 4)));
        assert_eq!(name(&mut bus, 0x0800_0010), Some(("first", 0x10)));
        assert!(bus.remove(Ipa(0x0a00_0200)).is_some());
        assert_eq!(name(&mut bus, 0x0a00_0204), None, "a removed device is not found");
        assert_eq!(name(&mut bus, 0x0a00_0004), Some(("a", 4)));
    }

    #[test]
    fn read_write_route_and_truncate() {
        let mut bus = bus();
        bus.write(Ipa(0x0a00_0004), AccessWidth::Word, 0xdead_beef_1234_5678).unwrap();
        assert_eq!(bus.read(Ipa(0x0a00_0004), AccessWidth::Word), Ok(0x1234_5678));
        assert_eq!(bus.read(Ipa(0x0a00_0005), AccessWidth::Byte), Ok(0x56));
        assert_eq!(bus.read(Ipa(0x0a00_0004), AccessWidth::Half), Ok(0x5678));
        // The other device did not see it.
        assert_eq!(bus.read(Ipa(0x0a00_0204), AccessWidth::Word), Ok(0));
        let (dev, _) = bus.lookup(Ipa(0x0a00_0000)).unwrap();
        let dev = dev.downcast_mut::<Scratch>().unwrap();
        assert_eq!(dev.last_offset, Some(4));
        assert_eq!(bus.read(Ipa(0x0b00_0000), AccessWidth::Word), Err(MmioError::Unmapped));
        assert_eq!(bus.write(Ipa(0x0b00_0000), AccessWidth::Word, 0), Err(MmioError::Unmapped));
        // An access straddling the end of a window is not routed.
        assert_eq!(bus.read(Ipa(0x0a00_01fc), AccessWidth::Double), Err(MmioError::Unmapped));
    }

    #[test]
    fn typed_access_and_remove() {
        let mut bus = bus();
        assert!(bus.device_mut::<Pl011>().is_none());
        bus.insert(range(0x0c00_0000, 0x1000), Box::new(Pl011::new())).unwrap();
        assert!(bus.device_mut::<Pl011>().unwrap().push_input(b'x'));
        assert!(bus.device_at_mut::<Pl011>(Ipa(0x0c00_0018)).is_some());
        assert!(bus.device_at_mut::<Pl011>(Ipa(0x0900_0000)).is_none());
        assert_eq!(bus.read(Ipa(0x0c00_0000), AccessWidth::Word), Ok(b'x' as u64));
        let removed = bus.remove(Ipa(0x0c00_0000)).unwrap();
        assert_eq!(removed.name(), "pl011");
        assert!(bus.remove(Ipa(0x0c00_0000)).is_none());
        assert!(bus.remove(Ipa(0x0900_0004)).is_none());
        assert_eq!(bus.len(), 3);
    }
}
