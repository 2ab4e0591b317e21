//! The pool of 4 KiB physical frames that guest RAM and Stage-2 tables are allocated from.
//!
//! A buddy allocator (buddy_system_allocator) keyed by frame number, so every block is naturally
//! aligned to its size in physical memory: a 512-frame block is a 2 MiB Stage-2 block.

use addr::{PAGE_SIZE, PhysAddr};
use buddy_system_allocator::FrameAllocator;
use core::sync::atomic::{AtomicUsize, Ordering};
use spin::Mutex;

static FRAMES: Mutex<FrameAllocator<32>> = Mutex::new(FrameAllocator::new());
/// Frames handed out and not yet given back (the allocator keeps no count of its own).
static USED: AtomicUsize = AtomicUsize::new(0);

const SHIFT: u32 = 12;

/// Adds `[start, end)` (page-aligned inwards) to the pool.
pub fn add_range(start: u64, end: u64) {
    let first = start.div_ceil(PAGE_SIZE);
    let last = end / PAGE_SIZE;
    if first < last {
        FRAMES.lock().add_frame(first as usize, last as usize);
    }
}

/// Allocates `count` contiguous frames (a power of two), aligned to their total size.
pub fn alloc(count: usize) -> Option<PhysAddr> {
    debug_assert!(count.is_power_of_two());
    let frame = FRAMES.lock().alloc(count)?;
    USED.fetch_add(count, Ordering::Relaxed);
    Some(PhysAddr((frame as u64) << SHIFT))
}

pub fn free(pa: PhysAddr, count: usize) {
    FRAMES.lock().dealloc((pa.0 >> SHIFT) as usize, count);
    USED.fetch_sub(count, Ordering::Relaxed);
}

/// Frames in use (guest RAM, Stage-2 tables, disks), for leak checks and statistics.
pub fn used_frames() -> usize {
    USED.load(Ordering::Relaxed)
}

/// Fills `count` frames at `pa` with zeros.
pub fn zero(pa: PhysAddr, count: usize) {
    // SAFETY: frames handed out by this pool are identity-mapped RAM owned by the caller.
    unsafe { core::ptr::write_bytes(pa.0 as *mut u8, 0, count * PAGE_SIZE as usize) };
}

/// Stage-2 table pages come from the same pool (identity mapped at EL2).
pub struct TablePages;

impl stage2::PageAllocator for TablePages {
    fn alloc_zeroed_page(&mut self) -> Option<PhysAddr> {
        let pa = alloc(1)?;
        zero(pa, 1);
        Some(pa)
    }

    fn free_page(&mut self, pa: PhysAddr) {
        free(pa, 1);
    }

    fn alloc_zeroed_pages(&mut self, count: usize) -> Option<PhysAddr> {
        let count = count.next_power_of_two();
        let pa = alloc(count)?;
        zero(pa, count);
        Some(pa)
    }

    fn free_pages(&mut self, pa: PhysAddr, count: usize) {
        free(pa, count.next_power_of_two());
    }

    fn phys_to_virt(&self, pa: PhysAddr) -> *mut u64 {
        pa.0 as *mut u64
    }
}
