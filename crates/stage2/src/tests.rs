//! Host tests. "Physical addresses" of table pages are host pointers. Mapped output addresses
//! are plain numbers that are never dereferenced.

extern crate std;

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::vec::Vec;

use addr::{BLOCK_1G, BLOCK_2M, Ipa, PAGE_SIZE, PhysAddr};

use crate::{
    Fwb, MemAttr, PageAllocator, S2Perms, Stage2Error, Stage2Table, Translation,
    ipa_bits_from_parange,
};

#[derive(Default)]
struct Pool {
    /// Live allocations: address -> page count.
    live: BTreeMap<u64, usize>,
    /// Pages that may still be handed out; `None` = unlimited.
    budget: Option<usize>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Tests assert on leaks; this only keeps a failing test from leaking host memory.
        for (&pa, &count) in &self.live {
            // SAFETY: `pa` came from `alloc_zeroed` with this layout and was not freed.
            unsafe { dealloc(std::ptr::with_exposed_provenance_mut(pa as usize), layout(count)) };
        }
    }
}

fn layout(count: usize) -> Layout {
    let bytes = count * PAGE_SIZE as usize;
    Layout::from_size_align(bytes, bytes).unwrap()
}

/// Counting allocator; clones share the pool, so a test can look at it after the table is gone.
#[derive(Clone, Default)]
struct TestAlloc(Rc<RefCell<Pool>>);

impl TestAlloc {
    fn live_pages(&self) -> usize {
        self.0.borrow().live.values().sum()
    }
    fn set_budget(&self, pages: Option<usize>) {
        self.0.borrow_mut().budget = pages;
    }
}

impl PageAllocator for TestAlloc {
    fn alloc_zeroed_page(&mut self) -> Option<PhysAddr> {
        self.alloc_zeroed_pages(1)
    }
    fn free_page(&mut self, pa: PhysAddr) {
        self.free_pages(pa, 1)
    }
    fn alloc_zeroed_pages(&mut self, count: usize) -> Option<PhysAddr> {
        let mut pool = self.0.borrow_mut();
        if let Some(budget) = pool.budget {
            pool.budget = Some(budget.checked_sub(count)?);
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout(count)) };
        assert!(!ptr.is_null());
        let pa = ptr.expose_provenance() as u64;
        pool.live.insert(pa, count);
        Some(PhysAddr::new(pa))
    }
    fn free_pages(&mut self, pa: PhysAddr, count: usize) {
        let recorded = self.0.borrow_mut().live.remove(&pa.raw());
        assert_eq!(recorded, Some(count), "free of {pa:?} x{count} does not match an allocation");
        // SAFETY: `pa` came from `alloc_zeroed` with this layout and is freed only once (the
        // `live` map entry was just removed).
        unsafe { dealloc(std::ptr::with_exposed_provenance_mut(pa.raw() as usize), layout(count)) };
    }
    fn phys_to_virt(&self, pa: PhysAddr) -> *mut u64 {
        std::ptr::with_exposed_provenance_mut(pa.raw() as usize)
    }
}

fn table(ipa_bits: u8) -> (Stage2Table<TestAlloc>, TestAlloc) {
    let alloc = TestAlloc::default();
    (Stage2Table::new(ipa_bits, Fwb::Off, alloc.clone()).unwrap(), alloc)
}

fn normal(pa: u64, size: u64, perms: S2Perms) -> Translation {
    Translation { pa: PhysAddr::new(pa), perms, attr: MemAttr::Normal, size }
}

const GUEST_RAM: u64 = 0x4000_0000;
const HOST_RAM: u64 = 0x8_0000_0000;

#[test]
fn parange_to_ipa_bits() {
    let bits: Vec<u8> = (0..=7).map(ipa_bits_from_parange).collect();
    assert_eq!(bits, [32, 36, 40, 42, 44, 48, 48, 48]);
}

#[test]
fn geometry_and_vtcr_per_ipa_size() {
    // (ipa_bits, T0SZ, start level, SL0, root pages)
    let cases = [
        (32, 32, 2, 0, 4),
        (33, 31, 2, 0, 8),
        (34, 30, 2, 0, 16),
        (35, 29, 1, 1, 1),
        (36, 28, 1, 1, 1),
        (39, 25, 1, 1, 1),
        (40, 24, 1, 1, 2),
        (42, 22, 1, 1, 8),
        (43, 21, 1, 1, 16),
        (44, 20, 0, 2, 1),
        (48, 16, 0, 2, 1),
    ];
    for (bits, t0sz, level, sl0, pages) in cases {
        let (t, alloc) = table(bits);
        assert_eq!(t.start_level(), level, "{bits}-bit start level");
        assert_eq!(t.root_pages(), pages, "{bits}-bit root pages");
        assert_eq!(alloc.live_pages(), pages);
        assert!(t.root().is_aligned(pages as u64 * PAGE_SIZE), "{bits}-bit root alignment");
        let vtcr = t.vtcr(0b010);
        assert_eq!(vtcr & 0x3f, t0sz, "{bits}-bit T0SZ");
        assert_eq!((vtcr >> 6) & 0b11, sl0, "{bits}-bit SL0");
        assert_eq!(vtcr & !0xff, 0x8002_3500, "{bits}-bit fixed fields");
    }
}

#[test]
fn vtcr_exact_values() {
    // 40-bit IPA on a 40-bit PA CPU: the value KVM programs on Cortex-A53/A72 class parts.
    assert_eq!(table(40).0.vtcr(0b010), 0x8002_3558);
    // 48-bit, PS=48: T0SZ=16, SL0=2 (level 0).
    assert_eq!(table(48).0.vtcr(0b101), 0x8005_3590);
    // 32-bit: T0SZ=32, SL0=0 (level 2), PS=32.
    assert_eq!(table(32).0.vtcr(0b000), 0x8000_3520);
    // PARange 0b0110 (52 bits) is capped to PS=0b101: our descriptors hold 48-bit addresses.
    assert_eq!(table(48).0.vtcr(0b110), 0x8005_3590);
}

#[test]
fn vttbr_masks_vmid() {
    let (t, _) = table(40);
    let root = t.root().raw();
    assert_eq!(t.vttbr(0), root);
    assert_eq!(t.vttbr(5), (5 << 48) | root);
    assert_eq!(t.vttbr(0x1ff), (0xff << 48) | root);
}

#[test]
fn rejects_unsupported_ipa_sizes() {
    for bits in [0, 31, 49, 52] {
        let alloc = TestAlloc::default();
        assert_eq!(
            Stage2Table::new(bits, Fwb::Off, alloc.clone()).unwrap_err(),
            Stage2Error::InvalidIpaBits(bits)
        );
        assert_eq!(alloc.live_pages(), 0);
    }
}

#[test]
fn new_reports_out_of_memory() {
    let alloc = TestAlloc::default();
    alloc.set_budget(Some(1));
    // 40-bit needs a two-page root.
    assert_eq!(
        Stage2Table::new(40, Fwb::Off, alloc.clone()).unwrap_err(),
        Stage2Error::OutOfMemory
    );
    assert_eq!(alloc.live_pages(), 0);
}

#[test]
fn maps_and_looks_up_a_page() {
    let (mut t, alloc) = table(40);
    t.map(Ipa::new(GUEST_RAM), PhysAddr::new(HOST_RAM), PAGE_SIZE, S2Perms::RWX, MemAttr::Normal)
        .unwrap();
    assert_eq!(
        t.lookup(Ipa::new(GUEST_RAM + 0x123)),
        Some(normal(HOST_RAM + 0x123, PAGE_SIZE, S2Perms::RWX))
    );
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM + PAGE_SIZE)), None);
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM - 1)), None);
    // Root (2 pages) + level 2 + level 3.
    assert_eq!(alloc.live_pages(), 4);
}

#[test]
fn aligned_2m_region_gets_a_block() {
    let (mut t, alloc) = table(40);
    t.map(Ipa::new(GUEST_RAM), PhysAddr::new(HOST_RAM), BLOCK_2M, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    assert_eq!(
        t.lookup(Ipa::new(GUEST_RAM + 0x1f_fff8)),
        Some(normal(HOST_RAM + 0x1f_fff8, BLOCK_2M, S2Perms::RW))
    );
    // Root (2 pages) + one level-2 table; no level-3 table.
    assert_eq!(alloc.live_pages(), 3);
}

#[test]
fn misaligned_output_gets_pages() {
    let (mut t, alloc) = table(40);
    // IPA 2 MiB aligned but PA only 4 KiB aligned: blocks are impossible.
    let pa = HOST_RAM + PAGE_SIZE;
    t.map(Ipa::new(GUEST_RAM), PhysAddr::new(pa), BLOCK_2M, S2Perms::RW, MemAttr::Normal).unwrap();
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM)), Some(normal(pa, PAGE_SIZE, S2Perms::RW)));
    assert_eq!(
        t.lookup(Ipa::new(GUEST_RAM + BLOCK_2M - 8)),
        Some(normal(pa + BLOCK_2M - 8, PAGE_SIZE, S2Perms::RW))
    );
    assert_eq!(alloc.live_pages(), 4);
}

#[test]
fn short_or_offset_regions_mix_blocks_and_pages() {
    let (mut t, _) = table(40);
    // [GUEST_RAM - 4K, GUEST_RAM + 2M + 4K): page, 2 MiB block, page.
    let ipa = GUEST_RAM - PAGE_SIZE;
    let pa = HOST_RAM - PAGE_SIZE;
    t.map(Ipa::new(ipa), PhysAddr::new(pa), BLOCK_2M + 2 * PAGE_SIZE, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    let size_at = |off: u64| t.lookup(Ipa::new(ipa + off)).map(|tr| tr.size);
    assert_eq!(size_at(0), Some(PAGE_SIZE));
    assert_eq!(size_at(PAGE_SIZE), Some(BLOCK_2M));
    assert_eq!(size_at(PAGE_SIZE + BLOCK_2M), Some(PAGE_SIZE));
    assert_eq!(size_at(2 * PAGE_SIZE + BLOCK_2M), None);
    assert_eq!(
        t.lookup(Ipa::new(GUEST_RAM + 0x1234)).unwrap().pa,
        PhysAddr::new(HOST_RAM + 0x1234)
    );
}

#[test]
fn aligned_1g_region_gets_a_1g_block() {
    let (mut t, alloc) = table(40);
    t.map(Ipa::new(BLOCK_1G), PhysAddr::new(HOST_RAM), BLOCK_1G, S2Perms::RWX, MemAttr::Normal)
        .unwrap();
    assert_eq!(
        t.lookup(Ipa::new(BLOCK_1G + 0x3456_7890)),
        Some(normal(HOST_RAM + 0x3456_7890, BLOCK_1G, S2Perms::RWX))
    );
    // A level-1 block lives in the root: no table page besides the two root pages.
    assert_eq!(alloc.live_pages(), 2);
}

#[test]
fn level2_start_has_no_1g_blocks() {
    let (mut t, alloc) = table(32);
    t.map(Ipa::new(BLOCK_1G), PhysAddr::new(HOST_RAM), BLOCK_1G, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    assert_eq!(t.lookup(Ipa::new(BLOCK_1G)).unwrap().size, BLOCK_2M);
    // The root (4 concatenated level-2 tables) holds all 512 blocks.
    assert_eq!(alloc.live_pages(), 4);
    // The top of the 4 GiB space is in the last concatenated table.
    t.map(Ipa::new(0xffff_f000), PhysAddr::new(0x1000), PAGE_SIZE, S2Perms::RO, MemAttr::Normal)
        .unwrap();
    assert_eq!(t.lookup(Ipa::new(0xffff_ffff)).unwrap().pa, PhysAddr::new(0x1fff));
}

#[test]
fn concatenated_root_tables_are_indexed_across_pages() {
    let (mut t, _) = table(40);
    // 512 GiB is the first entry of the second concatenated level-1 table.
    let hi = 512 * BLOCK_1G;
    t.map(Ipa::new(0), PhysAddr::new(0), BLOCK_1G, S2Perms::RW, MemAttr::Normal).unwrap();
    t.map(Ipa::new(hi), PhysAddr::new(BLOCK_1G), BLOCK_1G, S2Perms::RO, MemAttr::Normal).unwrap();
    assert_eq!(t.lookup(Ipa::new(0x10)).unwrap().pa, PhysAddr::new(0x10));
    assert_eq!(t.lookup(Ipa::new(hi + 0x10)).unwrap().pa, PhysAddr::new(BLOCK_1G + 0x10));
    assert_eq!(t.lookup(Ipa::new(hi)).unwrap().perms, S2Perms::RO);
}

#[test]
fn top_of_the_ipa_space() {
    for bits in [32, 36, 40, 42, 44, 48] {
        let (mut t, _) = table(bits);
        let top = (1u64 << bits) - PAGE_SIZE;
        t.map(Ipa::new(top), PhysAddr::new(HOST_RAM), PAGE_SIZE, S2Perms::RW, MemAttr::Normal)
            .unwrap();
        assert_eq!(t.lookup(Ipa::new(top + 8)).unwrap().pa, PhysAddr::new(HOST_RAM + 8));
        assert_eq!(t.lookup(Ipa::new(1 << bits)), None);
        assert_eq!(
            t.map(Ipa::new(top), PhysAddr::new(0), 2 * PAGE_SIZE, S2Perms::RW, MemAttr::Normal),
            Err(Stage2Error::OutOfRange)
        );
    }
}

/// The leaf descriptor that maps `ipa`, as the hardware walker would find it.
fn leaf_descriptor(t: &Stage2Table<TestAlloc>, ipa: u64) -> u64 {
    let (mut table, mut level) = (t.root, t.start_level);
    loop {
        match t.read(table, level, t.index(ipa, level)) {
            crate::desc::Desc::Table(next) => (table, level) = (next, level + 1),
            crate::desc::Desc::Leaf(raw) => return raw,
            crate::desc::Desc::Invalid => panic!("{ipa:#x} is not mapped"),
        }
    }
}

/// A table built for CPUs with HCR_EL2.FWB maps RAM as forced Normal Write-Back (MemAttr
/// 0b0110), so that a guest with its MMU off accesses it cached like armhv; one built for CPUs
/// without it keeps the combining encoding (0b1111). Device mappings are Device-nGnRE in both.
#[test]
fn ram_is_forced_write_back_with_fwb_only() {
    for (fwb, ram_attr) in [(Fwb::On, 0b0110), (Fwb::Off, 0b1111)] {
        let alloc = TestAlloc::default();
        let mut t = Stage2Table::new(40, fwb, alloc).unwrap();
        t.map(
            Ipa::new(GUEST_RAM),
            PhysAddr::new(HOST_RAM),
            BLOCK_2M,
            S2Perms::RWX,
            MemAttr::Normal,
        )
        .unwrap();
        t.map(
            Ipa::new(0x0900_0000),
            PhysAddr::new(0x0900_0000),
            PAGE_SIZE,
            S2Perms::RW,
            MemAttr::Device,
        )
        .unwrap();
        let memattr = |t: &Stage2Table<TestAlloc>, ipa| (leaf_descriptor(t, ipa) >> 2) & 0xf;
        assert_eq!(memattr(&t, GUEST_RAM + 0x1000), ram_attr, "{fwb:?}");
        assert_eq!(memattr(&t, 0x0900_0000), 0b0001, "{fwb:?}");
        assert_eq!(t.lookup(Ipa::new(GUEST_RAM)).unwrap().attr, MemAttr::Normal);
        assert_eq!(t.lookup(Ipa::new(0x0900_0000)).unwrap().attr, MemAttr::Device);
        // A split block keeps the encoding.
        t.unmap(Ipa::new(GUEST_RAM), PAGE_SIZE).unwrap();
        assert_eq!(memattr(&t, GUEST_RAM + PAGE_SIZE), ram_attr, "{fwb:?}");
    }
}

#[test]
fn permissions_and_attributes_round_trip() {
    let (mut t, _) = table(40);
    let write_only = S2Perms { read: false, write: true, exec: false };
    let exec_only = S2Perms { read: false, write: false, exec: true };
    let none = S2Perms { read: false, write: false, exec: false };
    let cases = [
        (S2Perms::RWX, MemAttr::Normal),
        (S2Perms::RW, MemAttr::Device),
        (S2Perms::RX, MemAttr::Normal),
        (S2Perms::RO, MemAttr::Device),
        (write_only, MemAttr::Normal),
        (exec_only, MemAttr::Normal),
        (none, MemAttr::Device),
    ];
    for (i, (perms, attr)) in cases.into_iter().enumerate() {
        let ipa = 0x0900_0000 + i as u64 * PAGE_SIZE;
        t.map(Ipa::new(ipa), PhysAddr::new(ipa), PAGE_SIZE, perms, attr).unwrap();
    }
    for (i, (perms, attr)) in cases.into_iter().enumerate() {
        let ipa = 0x0900_0000 + i as u64 * PAGE_SIZE;
        let tr = t.lookup(Ipa::new(ipa)).unwrap();
        assert_eq!((tr.perms, tr.attr), (perms, attr), "case {i}");
    }
    // Blocks carry attributes too.
    t.map(Ipa::new(BLOCK_1G), PhysAddr::new(0), BLOCK_1G, S2Perms::RO, MemAttr::Device).unwrap();
    let tr = t.lookup(Ipa::new(BLOCK_1G)).unwrap();
    assert_eq!((tr.perms, tr.attr, tr.size), (S2Perms::RO, MemAttr::Device, BLOCK_1G));
}

#[test]
fn overlap_is_rejected_and_changes_nothing() {
    let (mut t, alloc) = table(40);
    let ram = |t: &mut Stage2Table<TestAlloc>, ipa: u64, size: u64| {
        t.map(Ipa::new(ipa), PhysAddr::new(HOST_RAM), size, S2Perms::RW, MemAttr::Normal)
    };
    ram(&mut t, GUEST_RAM, BLOCK_2M).unwrap();
    ram(&mut t, GUEST_RAM + 2 * BLOCK_2M, PAGE_SIZE).unwrap();
    let pages = alloc.live_pages();

    // Starts before the block, runs into it: the first overlapping IPA is the block start.
    assert_eq!(
        ram(&mut t, GUEST_RAM - BLOCK_2M, 2 * BLOCK_2M),
        Err(Stage2Error::Overlap { ipa: Ipa::new(GUEST_RAM) })
    );
    // Inside the block.
    assert_eq!(
        ram(&mut t, GUEST_RAM + 0x5000, PAGE_SIZE),
        Err(Stage2Error::Overlap { ipa: Ipa::new(GUEST_RAM + 0x5000) })
    );
    // Needs new tables before reaching the single page at the end.
    assert_eq!(
        ram(&mut t, GUEST_RAM + BLOCK_2M, 2 * BLOCK_2M),
        Err(Stage2Error::Overlap { ipa: Ipa::new(GUEST_RAM + 2 * BLOCK_2M) })
    );
    // Covers a whole 1 GiB entry that has mappings in its table.
    assert_eq!(
        ram(&mut t, BLOCK_1G, BLOCK_1G),
        Err(Stage2Error::Overlap { ipa: Ipa::new(GUEST_RAM) })
    );

    assert_eq!(alloc.live_pages(), pages);
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM - BLOCK_2M)), None);
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM + BLOCK_2M)), None);
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM + 2 * BLOCK_2M + PAGE_SIZE)), None);
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM)).unwrap().size, BLOCK_2M);
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM + 2 * BLOCK_2M)).unwrap().size, PAGE_SIZE);
}

#[test]
fn bad_inputs_are_rejected() {
    let (mut t, alloc) = table(40);
    let map = |t: &mut Stage2Table<TestAlloc>, ipa: u64, pa: u64, size: u64| {
        t.map(Ipa::new(ipa), PhysAddr::new(pa), size, S2Perms::RW, MemAttr::Normal)
    };
    assert_eq!(map(&mut t, 0x1001, 0, PAGE_SIZE), Err(Stage2Error::Unaligned));
    assert_eq!(map(&mut t, 0x1000, 0x10, PAGE_SIZE), Err(Stage2Error::Unaligned));
    assert_eq!(map(&mut t, 0x1000, 0, 0x800), Err(Stage2Error::Unaligned));
    // Beyond the 40-bit IPA space.
    assert_eq!(map(&mut t, 1 << 40, 0, PAGE_SIZE), Err(Stage2Error::OutOfRange));
    assert_eq!(map(&mut t, (1 << 40) - PAGE_SIZE, 0, 2 * PAGE_SIZE), Err(Stage2Error::OutOfRange));
    // Wrap-around of the IPA and of the PA.
    assert_eq!(map(&mut t, u64::MAX - 0xfff, 0, 2 * PAGE_SIZE), Err(Stage2Error::OutOfRange));
    assert_eq!(map(&mut t, 0, u64::MAX - 0xfff, 2 * PAGE_SIZE), Err(Stage2Error::OutOfRange));
    // Output address beyond 48 bits.
    assert_eq!(map(&mut t, 0, 1 << 48, PAGE_SIZE), Err(Stage2Error::OutOfRange));
    assert_eq!(map(&mut t, 0, (1 << 48) - PAGE_SIZE, 2 * PAGE_SIZE), Err(Stage2Error::OutOfRange));
    assert_eq!(t.unmap(Ipa::new(0x1800), PAGE_SIZE), Err(Stage2Error::Unaligned));
    assert_eq!(t.unmap(Ipa::new(0), 0x10), Err(Stage2Error::Unaligned));
    assert_eq!(t.unmap(Ipa::new(1 << 40), PAGE_SIZE), Err(Stage2Error::OutOfRange));
    assert_eq!(t.unmap(Ipa::new(u64::MAX - 0xfff), 2 * PAGE_SIZE), Err(Stage2Error::OutOfRange));
    // Zero-sized requests are accepted and do nothing.
    assert_eq!(map(&mut t, 0, 0, 0), Ok(()));
    assert_eq!(t.unmap(Ipa::new(0), 0), Ok(()));
    assert_eq!(t.lookup(Ipa::new(0)), None);
    assert_eq!(alloc.live_pages(), 2);
}

#[test]
fn unmap_page_frees_tables() {
    let (mut t, alloc) = table(40);
    t.map(
        Ipa::new(GUEST_RAM),
        PhysAddr::new(HOST_RAM),
        2 * PAGE_SIZE,
        S2Perms::RW,
        MemAttr::Normal,
    )
    .unwrap();
    assert_eq!(alloc.live_pages(), 4);
    t.unmap(Ipa::new(GUEST_RAM), PAGE_SIZE).unwrap();
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM)), None);
    assert_eq!(
        t.lookup(Ipa::new(GUEST_RAM + PAGE_SIZE)).unwrap().pa,
        PhysAddr::new(HOST_RAM + PAGE_SIZE)
    );
    assert_eq!(alloc.live_pages(), 4);
    t.unmap(Ipa::new(GUEST_RAM + PAGE_SIZE), PAGE_SIZE).unwrap();
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM + PAGE_SIZE)), None);
    // Level-3 and level-2 tables became empty and were freed; only the root is left.
    assert_eq!(alloc.live_pages(), 2);
}

#[test]
fn unmap_is_idempotent() {
    let (mut t, alloc) = table(40);
    t.unmap(Ipa::new(GUEST_RAM), BLOCK_1G).unwrap();
    t.map(Ipa::new(GUEST_RAM), PhysAddr::new(HOST_RAM), BLOCK_2M, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    t.unmap(Ipa::new(GUEST_RAM), BLOCK_2M).unwrap();
    t.unmap(Ipa::new(GUEST_RAM), BLOCK_2M).unwrap();
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM)), None);
    assert_eq!(alloc.live_pages(), 2);
}

#[test]
fn unmapping_a_page_splits_a_2m_block() {
    let (mut t, alloc) = table(40);
    t.map(Ipa::new(GUEST_RAM), PhysAddr::new(HOST_RAM), BLOCK_2M, S2Perms::RX, MemAttr::Device)
        .unwrap();
    let hole = GUEST_RAM + 0x10_0000;
    t.unmap(Ipa::new(hole), PAGE_SIZE).unwrap();
    assert_eq!(t.lookup(Ipa::new(hole)), None);
    assert_eq!(t.lookup(Ipa::new(hole + PAGE_SIZE - 1)), None);
    let expect = |off: u64| {
        Some(Translation {
            pa: PhysAddr::new(HOST_RAM + off),
            perms: S2Perms::RX,
            attr: MemAttr::Device,
            size: PAGE_SIZE,
        })
    };
    assert_eq!(t.lookup(Ipa::new(hole - 8)), expect(0x10_0000 - 8));
    assert_eq!(t.lookup(Ipa::new(hole + PAGE_SIZE)), expect(0x10_1000));
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM)), expect(0));
    assert_eq!(t.lookup(Ipa::new(GUEST_RAM + BLOCK_2M - 1)), expect(BLOCK_2M - 1));
    // Root (2) + level 2 + the new level-3 table.
    assert_eq!(alloc.live_pages(), 4);
}

#[test]
fn unmapping_a_page_splits_a_1g_block_twice() {
    let (mut t, alloc) = table(40);
    t.map(Ipa::new(BLOCK_1G), PhysAddr::new(HOST_RAM), BLOCK_1G, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    let hole = BLOCK_1G + 5 * BLOCK_2M + 3 * PAGE_SIZE;
    t.unmap(Ipa::new(hole), PAGE_SIZE).unwrap();
    assert_eq!(t.lookup(Ipa::new(hole)), None);
    let at = |ipa: u64| t.lookup(Ipa::new(ipa)).map(|tr| (tr.pa.raw() - HOST_RAM, tr.size));
    assert_eq!(at(hole - PAGE_SIZE), Some((hole - PAGE_SIZE - BLOCK_1G, PAGE_SIZE)));
    assert_eq!(at(hole + PAGE_SIZE), Some((hole + PAGE_SIZE - BLOCK_1G, PAGE_SIZE)));
    assert_eq!(at(BLOCK_1G), Some((0, BLOCK_2M)));
    assert_eq!(at(BLOCK_1G + 6 * BLOCK_2M + 7), Some((6 * BLOCK_2M + 7, BLOCK_2M)));
    assert_eq!(at(2 * BLOCK_1G - 1), Some((BLOCK_1G - 1, BLOCK_2M)));
    // Root (2) + level 2 + level 3.
    assert_eq!(alloc.live_pages(), 4);
}

#[test]
fn unmapping_across_blocks_keeps_the_outside_parts() {
    let (mut t, alloc) = table(40);
    t.map(Ipa::new(GUEST_RAM), PhysAddr::new(HOST_RAM), 2 * BLOCK_2M, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    // Cut [1 MiB, 3 MiB) out of two 2 MiB blocks.
    t.unmap(Ipa::new(GUEST_RAM + BLOCK_2M / 2), BLOCK_2M).unwrap();
    let at =
        |off: u64| t.lookup(Ipa::new(GUEST_RAM + off)).map(|tr| (tr.pa.raw() - HOST_RAM, tr.size));
    assert_eq!(at(0), Some((0, PAGE_SIZE)));
    assert_eq!(at(BLOCK_2M / 2 - PAGE_SIZE), Some((BLOCK_2M / 2 - PAGE_SIZE, PAGE_SIZE)));
    assert_eq!(at(BLOCK_2M / 2), None);
    assert_eq!(at(BLOCK_2M), None);
    assert_eq!(at(3 * BLOCK_2M / 2 - PAGE_SIZE), None);
    assert_eq!(at(3 * BLOCK_2M / 2), Some((3 * BLOCK_2M / 2, PAGE_SIZE)));
    assert_eq!(at(2 * BLOCK_2M - PAGE_SIZE), Some((2 * BLOCK_2M - PAGE_SIZE, PAGE_SIZE)));
    // Root (2) + level 2 + two level-3 tables.
    assert_eq!(alloc.live_pages(), 5);
    // Unmap the rest; everything below the root goes away, and the range can be mapped again.
    t.unmap(Ipa::new(GUEST_RAM), 2 * BLOCK_2M).unwrap();
    assert_eq!(alloc.live_pages(), 2);
    t.map(Ipa::new(GUEST_RAM), PhysAddr::new(HOST_RAM), 2 * BLOCK_2M, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    let tr = t.lookup(Ipa::new(GUEST_RAM + BLOCK_2M)).unwrap();
    assert_eq!((tr.pa, tr.size), (PhysAddr::new(HOST_RAM + BLOCK_2M), BLOCK_2M));
}

#[test]
fn out_of_memory_during_map_changes_nothing() {
    let (mut t, alloc) = table(48);
    t.map(Ipa::new(GUEST_RAM), PhysAddr::new(HOST_RAM), PAGE_SIZE, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    let pages = alloc.live_pages();
    // The PA is not 2 MiB aligned, so this is all pages: every 2 MiB needs a new level-3
    // table, and each budget runs out part-way through.
    for budget in [0, 1, 2, 3] {
        alloc.set_budget(Some(budget));
        let ipa = GUEST_RAM + BLOCK_2M;
        let size = (1 << 40) + PAGE_SIZE - ipa;
        assert_eq!(
            t.map(Ipa::new(ipa), PhysAddr::new(PAGE_SIZE), size, S2Perms::RW, MemAttr::Normal),
            Err(Stage2Error::OutOfMemory),
            "budget {budget}"
        );
        assert_eq!(alloc.live_pages(), pages, "budget {budget}");
        assert_eq!(t.lookup(Ipa::new(ipa)), None);
        assert_eq!(t.lookup(Ipa::new(1 << 40)), None);
        assert_eq!(t.lookup(Ipa::new(GUEST_RAM)).unwrap().pa, PhysAddr::new(HOST_RAM));
    }
    alloc.set_budget(None);
}

#[test]
fn out_of_memory_during_unmap_keeps_translations() {
    let (mut t, alloc) = table(40);
    t.map(Ipa::new(BLOCK_1G), PhysAddr::new(HOST_RAM), BLOCK_1G, S2Perms::RW, MemAttr::Normal)
        .unwrap();
    for budget in [0, 1] {
        alloc.set_budget(Some(budget));
        assert_eq!(
            t.unmap(Ipa::new(BLOCK_1G + PAGE_SIZE), PAGE_SIZE),
            Err(Stage2Error::OutOfMemory)
        );
        let tr = t.lookup(Ipa::new(BLOCK_1G + PAGE_SIZE)).unwrap();
        assert_eq!(tr.pa, PhysAddr::new(HOST_RAM + PAGE_SIZE), "budget {budget}");
    }
    alloc.set_budget(None);
    t.unmap(Ipa::new(BLOCK_1G + PAGE_SIZE), PAGE_SIZE).unwrap();
    assert_eq!(t.lookup(Ipa::new(BLOCK_1G + PAGE_SIZE)), None);
}

#[test]
fn drop_frees_every_table_page() {
    for bits in [32, 36, 40, 42, 44, 48] {
        let (mut t, alloc) = table(bits);
        let limit = 1u64 << bits;
        // Pages, 2 MiB blocks, a 1 GiB block where the geometry has one, and a split block.
        t.map(
            Ipa::new(0),
            PhysAddr::new(0),
            BLOCK_1G + 3 * PAGE_SIZE,
            S2Perms::RW,
            MemAttr::Normal,
        )
        .unwrap();
        t.map(
            Ipa::new(limit - BLOCK_2M - PAGE_SIZE),
            PhysAddr::new(0),
            BLOCK_2M,
            S2Perms::RO,
            MemAttr::Device,
        )
        .unwrap();
        t.unmap(Ipa::new(BLOCK_2M + PAGE_SIZE), PAGE_SIZE).unwrap();
        assert!(alloc.live_pages() > t.root_pages(), "{bits}-bit");
        drop(t);
        assert_eq!(alloc.live_pages(), 0, "{bits}-bit");
    }
}
