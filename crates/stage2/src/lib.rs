//! Stage-2 (IPA → PA) translation tables for ARMv8-A, 4 KiB granule.
//!
//! Portable: no system-register access and no inline assembly. The hypervisor activates a table
//! by writing [`Stage2Table::vtcr`] to `VTCR_EL2` and [`Stage2Table::vttbr`] to `VTTBR_EL2`, and it
//! does all TLB maintenance itself. On the host the same code is unit-tested with an allocator
//! whose "physical addresses" are host pointers.
//!
//! # Why not `aarch64-paging`
//! We evaluated `aarch64-paging` 0.12.3, which has a `Stage2` regime, as the walker underneath.
//! It does not fit cleanly:
//! - Its `RootTable` is always one 4 KiB table at a chosen level. It cannot *concatenate*
//!   initial-level tables (ARM ARM "Concatenated translation tables for the initial stage 2
//!   lookup"). Without concatenation, 32–34-bit IPA spaces need an extra level, and a 40- or
//!   42-bit IPA space would have to start at level 0. With a 4 KiB granule, `VTCR_EL2.SL0` =
//!   level 0 is invalid when PAMax < 44 bits (ARM ARM `AArch64.S2InvalidSL`). That case
//!   includes the 40-bit-PA cores (Cortex-A53/A72) that report exactly those sizes.
//! - `Translation::allocate_table` cannot fail. At EL2, running out of table pages while
//!   mapping a guest must be an error the VMM handles, not a panic.
//! - `map_range` silently replaces existing mappings (we must reject overlaps), and empty
//!   subtables are freed only by a separate walk of the whole tree (`compact_subtables`).
//!
//! Working around all three (per-root-page tables glued together, a pre-walk for overlaps, a
//! panicking allocator shim) would cost more code than the walker below. So the walker is our
//! own. It follows the same architecture rules as KVM's `hyp/pgtable.c` and shares no code.
//!
//! # Geometry
//! The start level is KVM's choice: concatenate up to 16 tables at the initial level so that
//! as few levels as possible are walked. The number of levels is `(ipa_bits - 8) / 9`:
//!
//! | IPA bits | T0SZ  | start level (SL0) | root tables |
//! |----------|-------|-------------------|-------------|
//! | 32..=34  | 32–30 | 2 (SL0=0)         | 4, 8, 16    |
//! | 35..=39  | 29–25 | 1 (SL0=1)         | 1           |
//! | 40..=43  | 24–21 | 1 (SL0=1)         | 2, 4, 8, 16 |
//! | 44..=48  | 20–16 | 0 (SL0=2)         | 1           |
//!
//! So level 0 is used only for IPA sizes of 44 bits and more, where it is always valid. When the
//! walk starts at level 2 (32..=34 bits) there is no level-1 table, and 2 MiB is the largest
//! block.
#![no_std]

mod desc;
#[cfg(test)]
mod tests;

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use addr::{Ipa, PAGE_SIZE, PhysAddr};
use desc::Desc;

/// Smallest IPA space supported (PARange 0b0000).
pub const MIN_IPA_BITS: u8 = 32;
/// Largest IPA space supported: 52-bit addresses need FEAT_LPA2 descriptors, which we do not use.
pub const MAX_IPA_BITS: u8 = 48;

/// Descriptors per 4 KiB table.
const ENTRIES: usize = 512;
/// Descriptors hold output address bits [47:12].
const OA_LIMIT: u64 = 1 << 48;
/// The ARM ARM allows at most 16 concatenated tables at the initial stage-2 lookup level.
const MAX_ROOT_PAGES: usize = 16;

/// Where table pages come from.
///
/// At EL2 a physical address is also the hypervisor's virtual address (identity map). On the
/// host, tests hand out host pointers as "physical addresses".
pub trait PageAllocator {
    /// A zeroed, 4 KiB-aligned page; `None` when out of memory.
    fn alloc_zeroed_page(&mut self) -> Option<PhysAddr>;
    /// Returns a page from [`alloc_zeroed_page`](Self::alloc_zeroed_page).
    fn free_page(&mut self, pa: PhysAddr);
    /// `count` (a power of two, at most 16) physically contiguous zeroed pages, aligned to
    /// `count * 4 KiB`. Used only for the root, because concatenated initial-level tables must
    /// be contiguous and aligned to their total size (`VTTBR_EL2.BADDR` low bits are RES0).
    /// `count == 1` must work whenever `alloc_zeroed_page` would.
    fn alloc_zeroed_pages(&mut self, count: usize) -> Option<PhysAddr>;
    /// Returns a run from [`alloc_zeroed_pages`](Self::alloc_zeroed_pages) with the same `count`.
    fn free_pages(&mut self, pa: PhysAddr, count: usize);
    /// Pointer through which the hypervisor can access the page at `pa`. Called once for each
    /// 4 KiB page, so the pages of a contiguous run do not have to be virtually contiguous.
    fn phys_to_virt(&self, pa: PhysAddr) -> *mut u64;
}

/// Lets a table borrow an allocator that lives elsewhere (for example a global heap).
impl<A: PageAllocator + ?Sized> PageAllocator for &mut A {
    fn alloc_zeroed_page(&mut self) -> Option<PhysAddr> {
        (**self).alloc_zeroed_page()
    }
    fn free_page(&mut self, pa: PhysAddr) {
        (**self).free_page(pa)
    }
    fn alloc_zeroed_pages(&mut self, count: usize) -> Option<PhysAddr> {
        (**self).alloc_zeroed_pages(count)
    }
    fn free_pages(&mut self, pa: PhysAddr, count: usize) {
        (**self).free_pages(pa, count)
    }
    fn phys_to_virt(&self, pa: PhysAddr) -> *mut u64 {
        (**self).phys_to_virt(pa)
    }
}

/// Memory type of a mapping: the Stage-2 descriptor's MemAttr[3:0] field. Without FWB it
/// combines with the guest's stage-1 type, and the stricter of the two wins; with FWB
/// ([`Fwb::On`]) RAM is Write-Back whatever stage 1 says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemAttr {
    /// Normal, Inner and Outer Write-Back cacheable, Inner Shareable (guest RAM).
    Normal,
    /// Device-nGnRE (passthrough MMIO). The guest cannot make it cacheable or gathering.
    Device,
}

/// How RAM's MemAttr is encoded: whether the CPUs run with HCR_EL2.FWB (FEAT_S2FWB, ARMv8.4).
/// Device mappings are the same either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fwb {
    /// HCR_EL2.FWB = 0: RAM is Normal Write-Back combined with the guest's stage-1 type, so a
    /// guest with its MMU or data cache off accesses it uncached.
    Off,
    /// HCR_EL2.FWB = 1: RAM is Normal Write-Back whatever the guest's stage 1 says, even with
    /// its MMU off; a guest's own uncached mapping of its RAM becomes cacheable too.
    On,
}

/// Stage-2 access permissions: S2AP[1:0] (read, write) and XN[1:0] (execute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct S2Perms {
    pub read: bool,
    pub write: bool,
    pub exec: bool,
}

impl S2Perms {
    pub const RWX: S2Perms = S2Perms { read: true, write: true, exec: true };
    pub const RW: S2Perms = S2Perms { read: true, write: true, exec: false };
    pub const RX: S2Perms = S2Perms { read: true, write: false, exec: true };
    pub const RO: S2Perms = S2Perms { read: true, write: false, exec: false };
}

/// The result of [`Stage2Table::lookup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// The physical address of the looked-up IPA (offset within the leaf included).
    pub pa: PhysAddr,
    pub perms: S2Perms,
    pub attr: MemAttr,
    /// Size of the leaf that maps it: `PAGE_SIZE`, `BLOCK_2M` or `BLOCK_1G`.
    pub size: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage2Error {
    /// The IPA size is outside `MIN_IPA_BITS..=MAX_IPA_BITS`.
    InvalidIpaBits(u8),
    /// An address or size is not a multiple of 4 KiB.
    Unaligned,
    /// The range extends beyond the IPA space or beyond 48-bit output addresses, or it wraps.
    OutOfRange,
    /// `ipa` (the lowest address of the requested range that is already mapped) is mapped.
    Overlap { ipa: Ipa },
    /// The allocator could not supply a table page.
    OutOfMemory,
}

impl fmt::Display for Stage2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage2Error::InvalidIpaBits(bits) => write!(f, "unsupported IPA size of {bits} bits"),
            Stage2Error::Unaligned => f.write_str("address or size not 4 KiB aligned"),
            Stage2Error::OutOfRange => f.write_str("range outside the address space"),
            Stage2Error::Overlap { ipa } => write!(f, "range overlaps the mapping at {ipa:?}"),
            Stage2Error::OutOfMemory => f.write_str("out of translation table pages"),
        }
    }
}

impl core::error::Error for Stage2Error {}

/// IPA size to use for a CPU whose `ID_AA64MMFR0_EL1.PARange` is `parange`. A guest cannot
/// address more than the CPU's physical address size. The result is capped at 48 bits
/// because 52-bit (FEAT_LPA/LPA2) descriptors are not supported.
pub fn ipa_bits_from_parange(parange: u8) -> u8 {
    match parange & 0xf {
        0b0000 => 32,
        0b0001 => 36,
        0b0010 => 40,
        0b0011 => 42,
        0b0100 => 44,
        // 0b0101 = 48, 0b0110 = 52, 0b0111 = 56 (FEAT_D128); anything newer is larger still.
        _ => 48,
    }
}

/// Address bit where the index into a level-`level` table starts (4 KiB granule).
const fn level_shift(level: u8) -> u32 {
    12 + 9 * (3 - level as u32)
}

/// Bytes mapped by one entry of a level-`level` table.
const fn level_size(level: u8) -> u64 {
    1 << level_shift(level)
}

/// The entries of one table that cover `[cur, end)`, as `(start, end, whole)` sub-ranges, where
/// `whole` says whether the sub-range covers its entry completely.
struct Chunks {
    cur: u64,
    end: u64,
    size: u64,
}

impl Chunks {
    fn new(start: u64, end: u64, level: u8) -> Chunks {
        Chunks { cur: start, end, size: level_size(level) }
    }
}

impl Iterator for Chunks {
    type Item = (u64, u64, bool);

    fn next(&mut self) -> Option<Self::Item> {
        if self.cur >= self.end {
            return None;
        }
        let base = self.cur & !(self.size - 1);
        // Cannot overflow: addresses stay below 2^48.
        let next = base + self.size;
        let chunk_end = self.end.min(next);
        let item = (self.cur, chunk_end, self.cur == base && chunk_end == next);
        self.cur = chunk_end;
        Some(item)
    }
}

/// One guest's Stage-2 translation tables.
///
/// Invariants: every table page below the root holds at least one valid entry (empty ones are
/// freed at once), and every table page is owned by exactly one table descriptor.
pub struct Stage2Table<A: PageAllocator> {
    alloc: A,
    root: PhysAddr,
    root_pages: usize,
    ipa_bits: u8,
    start_level: u8,
    fwb: Fwb,
}

impl<A: PageAllocator> Stage2Table<A> {
    /// An empty table for an IPA space of `ipa_bits` (see [`ipa_bits_from_parange`]), for CPUs
    /// that run it with HCR_EL2.FWB as `fwb` says.
    pub fn new(ipa_bits: u8, fwb: Fwb, mut alloc: A) -> Result<Self, Stage2Error> {
        if !(MIN_IPA_BITS..=MAX_IPA_BITS).contains(&ipa_bits) {
            return Err(Stage2Error::InvalidIpaBits(ipa_bits));
        }
        // KVM's stage2_pgtable_levels(): concatenation resolves up to 4 extra bits at the
        // initial level, so we need the levels of an (ipa_bits - 4)-bit stage-1 space.
        let levels = (ipa_bits - 8) / 9;
        let start_level = 4 - levels;
        let root_entries = 1usize << (u32::from(ipa_bits) - level_shift(start_level));
        let root_pages = root_entries.div_ceil(ENTRIES);
        debug_assert!(root_pages <= MAX_ROOT_PAGES);

        let root = alloc.alloc_zeroed_pages(root_pages).ok_or(Stage2Error::OutOfMemory)?;
        let root_bytes = root_pages as u64 * PAGE_SIZE;
        assert!(
            root.is_aligned(root_bytes) && root.raw() < OA_LIMIT,
            "allocator returned a misaligned or unreachable root {root:?}"
        );
        Ok(Stage2Table { alloc, root, root_pages, ipa_bits, start_level, fwb })
    }

    /// Physical address of the (first) root table, for `VTTBR_EL2.BADDR`.
    pub fn root(&self) -> PhysAddr {
        self.root
    }

    pub fn ipa_bits(&self) -> u8 {
        self.ipa_bits
    }

    /// The level the walk starts at (0, 1 or 2).
    pub fn start_level(&self) -> u8 {
        self.start_level
    }

    /// Number of concatenated 4 KiB tables at the start level.
    pub fn root_pages(&self) -> usize {
        self.root_pages
    }

    pub fn allocator(&self) -> &A {
        &self.alloc
    }

    /// `VTCR_EL2` for this table. `pa_bits_field` is `ID_AA64MMFR0_EL1.PARange` and goes into
    /// PS. It is capped at 0b101 (48 bits): our descriptors hold at most 48-bit output addresses.
    ///
    /// The walker's own accesses are Inner Shareable and Write-Back Write-Allocate cacheable.
    /// That is how the hypervisor writes the tables, so it needs no cache maintenance. VS=0
    /// selects 8-bit VMIDs, and HA/HD=0 because the tables are made with AF set.
    pub fn vtcr(&self, pa_bits_field: u8) -> u64 {
        const RES1: u64 = 1 << 31;
        const TG0_4K: u64 = 0b00 << 14;
        const SH0_INNER: u64 = 0b11 << 12;
        const ORGN0_WBWA: u64 = 0b01 << 10;
        const IRGN0_WBWA: u64 = 0b01 << 8;

        let t0sz = u64::from(64 - self.ipa_bits);
        // SL0 for a 4 KiB granule: 0b00 = level 2, 0b01 = level 1, 0b10 = level 0.
        let sl0 = u64::from(2 - self.start_level);
        let ps = u64::from(pa_bits_field.min(0b101));
        RES1 | (ps << 16) | TG0_4K | SH0_INNER | ORGN0_WBWA | IRGN0_WBWA | (sl0 << 6) | t0sz
    }

    /// `VTTBR_EL2`: VMID[55:48] (8-bit VMIDs, so `vmid` is masked) and BADDR (the root). CnP=0.
    pub fn vttbr(&self, vmid: u16) -> u64 {
        (u64::from(vmid & 0xff) << 48) | self.root.raw()
    }

    /// Maps `[ipa, ipa + size)` to `[pa, pa + size)`.
    ///
    /// Each table entry that the range covers completely, with an output address aligned to the
    /// entry's size, becomes a block (1 GiB at level 1, 2 MiB at level 2). Everything else is
    /// mapped with 4 KiB pages. If any part of the range is already mapped the call fails with
    /// [`Stage2Error::Overlap`]. On any error nothing has changed. A zero `size` does nothing.
    ///
    /// On a live table no TLB maintenance is needed, because only invalid entries are replaced.
    /// But issue `DSB ISHST` before resuming a guest that should see the new mappings.
    pub fn map(
        &mut self,
        ipa: Ipa,
        pa: PhysAddr,
        size: u64,
        perms: S2Perms,
        attr: MemAttr,
    ) -> Result<(), Stage2Error> {
        let end = self.check_range(ipa, size)?;
        if !pa.is_aligned(PAGE_SIZE) {
            return Err(Stage2Error::Unaligned);
        }
        match pa.raw().checked_add(size) {
            Some(pa_end) if pa_end <= OA_LIMIT => {}
            _ => return Err(Stage2Error::OutOfRange),
        }
        if size == 0 {
            return Ok(());
        }
        if let Some(first) = self.first_mapped(self.root, self.start_level, ipa.raw(), end) {
            return Err(Stage2Error::Overlap { ipa: Ipa::new(first) });
        }
        let attrs = desc::leaf_attrs(perms, attr, self.fwb);
        let result =
            self.map_range(self.root, self.start_level, ipa.raw(), end, ipa.raw(), pa, attrs);
        if result.is_err() {
            // The range was entirely unmapped before, so clearing it restores the old state
            // and frees any table page created above. No block straddles the range boundary,
            // so clearing needs no split and cannot fail.
            self.clear_range(self.root, self.start_level, ipa.raw(), end);
        }
        result
    }

    /// Removes every mapping in `[ipa, ipa + size)`. Unmapped parts are skipped, so unmapping
    /// twice is fine.
    ///
    /// A block that the range only partly covers is split first, into a table of smaller blocks
    /// or pages with the same attributes. Table pages left empty are freed. The splits come
    /// first, so an `OutOfMemory` error leaves every translation as it was (at most one split
    /// block may remain split).
    ///
    /// TLB maintenance is the caller's: on a live table, run `DSB ISHST; TLBI IPAS2E1IS` (or
    /// `VMALLS12E1IS`); `DSB ISH` before the freed table pages can be reused (they are returned
    /// to the allocator before this returns). A split writes a table over a valid block. The
    /// architecture calls this a break-before-make change of block size, so split live blocks
    /// only while the VM's vCPUs are stopped (or the CPU has FEAT_BBM level 2).
    pub fn unmap(&mut self, ipa: Ipa, size: u64) -> Result<(), Stage2Error> {
        let end = self.check_range(ipa, size)?;
        if size == 0 {
            return Ok(());
        }
        self.split_at(ipa.raw())?;
        self.split_at(end)?;
        self.clear_range(self.root, self.start_level, ipa.raw(), end);
        Ok(())
    }

    /// The translation of `ipa`, or `None` if it is unmapped or outside the IPA space.
    pub fn lookup(&self, ipa: Ipa) -> Option<Translation> {
        let ipa = ipa.raw();
        if ipa >= self.ipa_limit() {
            return None;
        }
        let mut table = self.root;
        let mut level = self.start_level;
        loop {
            match self.read(table, level, self.index(ipa, level)) {
                Desc::Invalid => return None,
                Desc::Table(next) => {
                    table = next;
                    level += 1;
                }
                Desc::Leaf(raw) => {
                    let size = level_size(level);
                    return Some(Translation {
                        pa: desc::output_address(raw) + (ipa & (size - 1)),
                        perms: desc::perms_of(raw),
                        attr: desc::attr_of(raw),
                        size,
                    });
                }
            }
        }
    }

    fn ipa_limit(&self) -> u64 {
        1 << self.ipa_bits
    }

    /// Checks alignment and range; returns the end of the range.
    fn check_range(&self, ipa: Ipa, size: u64) -> Result<u64, Stage2Error> {
        if !ipa.is_aligned(PAGE_SIZE) || !size.is_multiple_of(PAGE_SIZE) {
            return Err(Stage2Error::Unaligned);
        }
        match ipa.raw().checked_add(size) {
            Some(end) if end <= self.ipa_limit() => Ok(end),
            _ => Err(Stage2Error::OutOfRange),
        }
    }

    /// Index of the entry for `ipa` in a level-`level` table. At the start level the index spans
    /// all concatenated tables (bits above the start level's table are zero for in-range IPAs).
    fn index(&self, ipa: u64, level: u8) -> usize {
        let index = ipa >> level_shift(level);
        if level == self.start_level { index as usize } else { (index as usize) % ENTRIES }
    }

    /// The descriptor slot `index` of the table at `table` (the root may span several pages).
    fn slot(&self, table: PhysAddr, index: usize) -> &AtomicU64 {
        let page = table + (index / ENTRIES) as u64 * PAGE_SIZE;
        let ptr = self.alloc.phys_to_virt(page).wrapping_add(index % ENTRIES);
        // SAFETY: `page` is a table page this Stage2Table allocated and still owns (the root
        // run, or a page reached through one of our table descriptors), and `index % ENTRIES`
        // stays inside it. `phys_to_virt` gives a valid pointer to the 4 KiB-aligned page, so
        // `ptr` is valid and 8-byte aligned. Pages are freed only through `&mut self`, so the
        // page outlives the returned `&self`-bound reference. The page is only ever accessed
        // through these atomics (and by the hardware walker), never through non-atomic Rust
        // references.
        unsafe { AtomicU64::from_ptr(ptr) }
    }

    fn read(&self, table: PhysAddr, level: u8, index: usize) -> Desc {
        Desc::decode(self.slot(table, index).load(Ordering::Relaxed), level)
    }

    fn read_raw(&self, table: PhysAddr, index: usize) -> u64 {
        self.slot(table, index).load(Ordering::Relaxed)
    }

    /// Release ordering, as KVM's `smp_store_release` when it installs a table: a walker that
    /// sees a new table descriptor also sees the entries written into that table before it.
    fn write(&self, table: PhysAddr, index: usize, raw: u64) {
        self.slot(table, index).store(raw, Ordering::Release);
    }

    fn alloc_table(&mut self) -> Result<PhysAddr, Stage2Error> {
        let pa = self.alloc.alloc_zeroed_page().ok_or(Stage2Error::OutOfMemory)?;
        assert!(
            pa.is_aligned(PAGE_SIZE) && pa.raw() < OA_LIMIT,
            "allocator returned a misaligned or unreachable table page {pa:?}"
        );
        Ok(pa)
    }

    fn table_is_empty(&self, table: PhysAddr) -> bool {
        (0..ENTRIES).all(|i| self.read_raw(table, i) & desc::VALID == 0)
    }

    /// Lowest mapped address in `[start, end)`, if any.
    fn first_mapped(&self, table: PhysAddr, level: u8, start: u64, end: u64) -> Option<u64> {
        for (cur, chunk_end, _) in Chunks::new(start, end, level) {
            match self.read(table, level, self.index(cur, level)) {
                Desc::Invalid => {}
                Desc::Leaf(_) => return Some(cur),
                Desc::Table(next) => {
                    if let Some(ipa) = self.first_mapped(next, level + 1, cur, chunk_end) {
                        return Some(ipa);
                    }
                }
            }
        }
        None
    }

    /// Maps the unmapped range `[start, end)`; IPA `ipa0` goes to `pa0`.
    #[allow(clippy::too_many_arguments)]
    fn map_range(
        &mut self,
        table: PhysAddr,
        level: u8,
        start: u64,
        end: u64,
        ipa0: u64,
        pa0: PhysAddr,
        attrs: u64,
    ) -> Result<(), Stage2Error> {
        let size = level_size(level);
        for (cur, chunk_end, whole) in Chunks::new(start, end, level) {
            let index = self.index(cur, level);
            let out = pa0 + (cur - ipa0);
            if level == 3 {
                self.write(table, index, desc::leaf(out, attrs, 3));
                continue;
            }
            // 4 KiB granule: blocks exist at levels 1 and 2 only.
            if level >= 1 && whole && out.is_aligned(size) {
                debug_assert_eq!(self.read(table, level, index), Desc::Invalid);
                self.write(table, index, desc::leaf(out, attrs, level));
                continue;
            }
            let next = match self.read(table, level, index) {
                Desc::Table(next) => next,
                Desc::Invalid => {
                    let next = self.alloc_table()?;
                    self.write(table, index, desc::table(next));
                    next
                }
                Desc::Leaf(_) => unreachable!("overlap check missed a leaf at {cur:#x}"),
            };
            self.map_range(next, level + 1, cur, chunk_end, ipa0, pa0, attrs)?;
        }
        Ok(())
    }

    /// Makes sure no block straddles `boundary`, splitting the one that does (repeatedly, down
    /// to the level where `boundary` falls on an entry edge). Translations do not change.
    fn split_at(&mut self, boundary: u64) -> Result<(), Stage2Error> {
        if boundary >= self.ipa_limit() {
            return Ok(());
        }
        let mut table = self.root;
        let mut level = self.start_level;
        loop {
            let index = self.index(boundary, level);
            let next = match self.read(table, level, index) {
                Desc::Invalid => return Ok(()),
                Desc::Table(next) => next,
                Desc::Leaf(raw) => {
                    if boundary & (level_size(level) - 1) == 0 {
                        return Ok(());
                    }
                    // A page (level 3) always starts on a page boundary, so this is a block.
                    let next = self.alloc_table()?;
                    let child_size = level_size(level + 1);
                    let base = desc::output_address(raw);
                    let attrs = desc::attrs_of(raw);
                    for i in 0..ENTRIES {
                        let out = base + i as u64 * child_size;
                        self.write(next, i, desc::leaf(out, attrs, level + 1));
                    }
                    self.write(table, index, desc::table(next));
                    next
                }
            };
            table = next;
            level += 1;
        }
    }

    /// Invalidates every leaf in `[start, end)` and frees tables that end up empty. Leaves
    /// must not straddle the range ends (see `split_at`).
    fn clear_range(&mut self, table: PhysAddr, level: u8, start: u64, end: u64) {
        for (cur, chunk_end, whole) in Chunks::new(start, end, level) {
            let index = self.index(cur, level);
            match self.read(table, level, index) {
                Desc::Invalid => {}
                Desc::Leaf(_) => {
                    debug_assert!(whole, "clearing part of a block at {cur:#x}");
                    self.write(table, index, 0);
                }
                Desc::Table(next) => {
                    self.clear_range(next, level + 1, cur, chunk_end);
                    if whole || self.table_is_empty(next) {
                        debug_assert!(self.table_is_empty(next));
                        self.write(table, index, 0);
                        self.alloc.free_page(next);
                    }
                }
            }
        }
    }

    /// Frees every table page below `table` (not `table` itself).
    fn free_subtables(&mut self, table: PhysAddr, level: u8, entries: usize) {
        for index in 0..entries {
            if let Desc::Table(next) = self.read(table, level, index) {
                self.free_subtables(next, level + 1, ENTRIES);
                self.alloc.free_page(next);
            }
        }
    }
}

impl<A: PageAllocator> Drop for Stage2Table<A> {
    /// Frees the table pages. The memory they map belongs to the caller and is not touched.
    fn drop(&mut self) {
        self.free_subtables(self.root, self.start_level, self.root_pages * ENTRIES);
        self.alloc.free_pages(self.root, self.root_pages);
    }
}

impl<A: PageAllocator> fmt::Debug for Stage2Table<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stage2Table")
            .field("root", &self.root)
            .field("root_pages", &self.root_pages)
            .field("ipa_bits", &self.ipa_bits)
            .field("start_level", &self.start_level)
            .finish()
    }
}
