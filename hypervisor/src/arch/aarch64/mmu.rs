//! The hypervisor's own EL2 translation: an identity map of RAM and of the devices armhv drives.
//!
//! Built with `aarch64-paging` on the boot CPU; the other CPUs load the same root table.

use aarch64_cpu::registers::{MAIR_EL2, ReadWriteable, SCTLR_EL2, TCR_EL2, TTBR0_EL2, Writeable};
use aarch64_paging::descriptor::El23Attributes;
use aarch64_paging::idmap::IdMap;
use aarch64_paging::paging::{El2, MemoryRegion};
use core::sync::atomic::{AtomicU64, Ordering};

/// MAIR_EL2 attribute indices.
const ATTR_DEVICE: El23Attributes = El23Attributes::ATTRIBUTE_INDEX_0;
const ATTR_NORMAL: El23Attributes =
    El23Attributes::ATTRIBUTE_INDEX_1.union(El23Attributes::INNER_SHAREABLE);

const BASE: El23Attributes = El23Attributes::VALID.union(El23Attributes::ACCESSED);

/// Root level 1 gives a 39-bit (512 GiB) address space: all of QEMU virt's RAM and devices.
const ROOT_LEVEL: usize = 1;
const T0SZ: u64 = 64 - 39;

static ROOT: AtomicU64 = AtomicU64::new(0);
/// The active map, kept for what is mapped after boot ([`map_device_late`]).
static ACTIVE: spin::Mutex<Option<IdMap<El2>>> = spin::Mutex::new(None);

/// What the identity map contains.
pub enum Region {
    /// The hypervisor's code: read-only, executable.
    Text,
    /// Read-only data.
    ReadOnly,
    /// RAM: read-write, never executable.
    ReadWrite,
    /// A device's registers.
    Device,
}

pub struct Builder {
    map: IdMap<El2>,
}

impl Builder {
    pub fn new() -> Self {
        Self { map: IdMap::new(ROOT_LEVEL, El2) }
    }

    pub fn map(
        &mut self,
        start: u64,
        end: u64,
        kind: Region,
    ) -> Result<(), aarch64_paging::MapError> {
        let flags = match kind {
            Region::Text => BASE | ATTR_NORMAL | El23Attributes::READ_ONLY,
            Region::ReadOnly => BASE | ATTR_NORMAL | El23Attributes::READ_ONLY | El23Attributes::XN,
            Region::ReadWrite => BASE | ATTR_NORMAL | El23Attributes::XN,
            Region::Device => BASE | ATTR_DEVICE | El23Attributes::XN,
        };
        let region = MemoryRegion::new(start as usize, end as usize);
        self.map.map_range(&region, flags)
    }

    /// Turns the MMU on for this CPU with the new tables, and keeps them forever.
    pub fn activate(mut self) {
        // SAFETY: the map covers the hypervisor's image, stack, heap and console (the caller
        // maps them before activating), so execution continues seamlessly at the same addresses.
        unsafe {
            self.map.activate();
        }
        ROOT.store(self.map.root_address().0 as u64, Ordering::Release);
        enable(false);
        // The tables are in use by every CPU until the machine powers off: never dropped.
        *ACTIVE.lock() = Some(self.map);
    }
}

/// Maps a device's registers `start..end` into the active map, where nothing was mapped before
/// (a device assigned to a VM, which armhv quiesces at the VM's stop). Adding entries where
/// there were none needs no break-before-make, only that the new entries are visible before
/// the first access, on every CPU (they share the tables).
pub fn map_device_late(start: u64, end: u64) -> Result<(), &'static str> {
    let mut active = ACTIVE.lock();
    let map = active.as_mut().ok_or("armhv's page tables are not active yet")?;
    let region = MemoryRegion::new(start as usize, end as usize);
    map.map_range(&region, BASE | ATTR_DEVICE | El23Attributes::XN)
        .map_err(|_| "its registers cannot be mapped into armhv's page tables")?;
    // SAFETY: barriers have no memory side effects; they make the table writes visible to
    // every CPU's walker before the caller's first access.
    unsafe { core::arch::asm!("dsb ish", "isb", options(nostack)) };
    Ok(())
}

/// Turns the MMU on for a secondary CPU with the boot CPU's tables.
pub fn enable_secondary() {
    TTBR0_EL2.set(ROOT.load(Ordering::Acquire));
    enable(true);
}

fn enable(invalidate: bool) {
    // Attr0: Device-nGnRE. Attr1: Normal, inner/outer write-back read/write-allocate.
    MAIR_EL2.write(
        MAIR_EL2::Attr0_Device::nonGathering_nonReordering_EarlyWriteAck
            + MAIR_EL2::Attr1_Normal_Inner::WriteBack_NonTransient_ReadWriteAlloc
            + MAIR_EL2::Attr1_Normal_Outer::WriteBack_NonTransient_ReadWriteAlloc,
    );
    let ps = super::cpu::pa_range().min(5) as u64;
    TCR_EL2.write(
        TCR_EL2::T0SZ.val(T0SZ)
            + TCR_EL2::PS.val(ps)
            + TCR_EL2::TG0::KiB_4
            + TCR_EL2::SH0::Inner
            + TCR_EL2::ORGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
            + TCR_EL2::IRGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable,
    );
    // SAFETY: barriers and a local TLB invalidation have no memory side effects.
    unsafe {
        if invalidate {
            core::arch::asm!("tlbi alle2", options(nostack));
        }
        core::arch::asm!("dsb ish", "isb", options(nostack));
    }
    SCTLR_EL2.modify(SCTLR_EL2::M::Enable + SCTLR_EL2::C::Cacheable + SCTLR_EL2::I::Cacheable);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}
