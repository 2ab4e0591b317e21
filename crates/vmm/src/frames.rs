//! The pool of 4 KiB physical frames that guest RAM and Stage-2 tables are allocated from.
//!
//! A buddy allocator (buddy_system_allocator) keyed by frame number, so every block is naturally
//! aligned to its size in physical memory: a 512-frame block is a 2 MiB Stage-2 block.

use crate::sync::{Class, Lock};
use addr::{PAGE_SIZE, PhysAddr};
use buddy_system_allocator::FrameAllocator;
use core::sync::atomic::{AtomicUsize, Ordering};

static FRAMES: Lock<FrameAllocator<32>> = Lock::new(Class::Frames, FrameAllocator::new());
/// Frames handed out and not yet given back (the allocator keeps no count of its own).
static USED: AtomicUsize = AtomicUsize::new(0);
/// Frames added to the pool.
static TOTAL: AtomicUsize = AtomicUsize::new(0);

const SHIFT: u32 = 12;

/// Adds `[start, end)` (page-aligned inwards) to the pool.
pub fn add_range(start: u64, end: u64) {
    let first = start.div_ceil(PAGE_SIZE);
    let last = end / PAGE_SIZE;
    if first < last {
        FRAMES.lock().add_frame(first as usize, last as usize);
        TOTAL.fetch_add((last - first) as usize, Ordering::Relaxed);
    }
}

/// Exercises the pool once it has its ranges, before the heap's baseline is taken: the
/// allocator keeps its free lists in sets on the heap, which take their memory as blocks are
/// split and merged and keep some of it when they shrink again. One frame allocated and freed
/// splits a large block down to one frame (every order's set gets memory); then the whole
/// pool, taken as 2 MiB blocks (as VMs' RAM is) and given back, leaves the sets as large as
/// VMs coming and going make them. So the heap that a VM's life leaves is the heap it found
/// (the loader's check of a VM that fails to build, the final report's, the console's `list`).
pub fn prime() {
    drop(alloc(1));
    let mut taken = alloc::vec::Vec::new();
    while let Some(block) = alloc(512) {
        taken.push(block);
    }
    drop(taken);
    // Stage-2 tables and disks: blocks of every order below 2 MiB, many of each, interleaved.
    let mut taken = alloc::vec::Vec::new();
    for _ in 0..PRIME_BLOCKS {
        for order in 0..9 {
            taken.extend(alloc(1 << order));
        }
    }
    drop(taken);
}

/// How many blocks of each order below 2 MiB [`prime`] takes at once.
const PRIME_BLOCKS: usize = 64;

/// `count` contiguous frames from the pool, owned: only their owner can write them (zero them)
/// or give them back, which dropping does. Nothing in armhv holds a Rust reference to pool
/// memory it does not own this way, so zeroing frames one owns touches no one else's.
#[must_use = "dropping the frames gives them back to the pool"]
pub struct Frames {
    pa: PhysAddr,
    count: usize,
}

impl Frames {
    /// Physical (and, identity-mapped, EL2 virtual) address of the first frame.
    pub fn pa(&self) -> PhysAddr {
        self.pa
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.count as u64 * PAGE_SIZE
    }

    /// Fills the frames with zeros.
    pub fn zero(&mut self) {
        // SAFETY: the frames are identity-mapped RAM from the pool that this value owns (`alloc`
        // handed them out once; `from_raw`'s caller vouches for the same). Whoever else can
        // reach them (a guest through Stage-2, a device through a `RamView`) does so through raw
        // pointers only, so no Rust reference is invalidated; a guest racing with the zeroing
        // sees some mix of old bytes and zeros, in its own memory.
        unsafe { core::ptr::write_bytes(self.pa.0 as *mut u8, 0, self.bytes() as usize) };
    }

    /// Gives up ownership without returning the frames: they stay allocated for good (a disk
    /// that lives as long as armhv) or until [`Frames::from_raw`] takes them back.
    pub fn leak(self) -> PhysAddr {
        let pa = self.pa;
        core::mem::forget(self);
        pa
    }

    /// Takes back frames given up by [`Frames::leak`].
    ///
    /// # Safety
    ///
    /// `pa` and `count` must be those of a `Frames` that was leaked and not taken back since,
    /// and nothing may use the frames through `pa` any more (the new value may zero or free
    /// them).
    pub unsafe fn from_raw(pa: PhysAddr, count: usize) -> Self {
        Self { pa, count }
    }
}

impl Drop for Frames {
    fn drop(&mut self) {
        FRAMES.lock().dealloc((self.pa.0 >> SHIFT) as usize, self.count);
        USED.fetch_sub(self.count, Ordering::Relaxed);
    }
}

/// Allocates `count` contiguous frames (a power of two), aligned to their total size. Their
/// contents are whatever their last owner left.
pub fn alloc(count: usize) -> Option<Frames> {
    debug_assert!(count.is_power_of_two());
    let frame = FRAMES.lock().alloc(count)?;
    USED.fetch_add(count, Ordering::Relaxed);
    Some(Frames { pa: PhysAddr((frame as u64) << SHIFT), count })
}

/// Frames in use (guest RAM, Stage-2 tables, disks), for leak checks and statistics.
pub fn used_frames() -> usize {
    USED.load(Ordering::Relaxed)
}

/// Bytes of the pool not in use (some may be too fragmented for a VM's 2 MiB chunks).
pub fn free_bytes() -> u64 {
    let total = TOTAL.load(Ordering::Relaxed);
    (total.saturating_sub(USED.load(Ordering::Relaxed)) as u64) * PAGE_SIZE
}

/// Bytes in the pool, used or not.
pub fn total_bytes() -> u64 {
    TOTAL.load(Ordering::Relaxed) as u64 * PAGE_SIZE
}

/// Zeroed frames, given up to a caller that keeps only their address.
fn alloc_zeroed_raw(count: usize) -> Option<PhysAddr> {
    let mut frames = alloc(count)?;
    frames.zero();
    Some(frames.leak())
}

/// Stage-2 table pages come from the same pool (identity mapped at EL2).
pub struct TablePages;

impl stage2::PageAllocator for TablePages {
    fn alloc_zeroed_page(&mut self) -> Option<PhysAddr> {
        alloc_zeroed_raw(1)
    }

    fn free_page(&mut self, pa: PhysAddr) {
        // SAFETY: the Stage-2 builder frees only pages it got from `alloc_zeroed_page`, once,
        // and stops using them (`stage2::PageAllocator`'s contract).
        drop(unsafe { Frames::from_raw(pa, 1) });
    }

    fn alloc_zeroed_pages(&mut self, count: usize) -> Option<PhysAddr> {
        alloc_zeroed_raw(count.next_power_of_two())
    }

    fn free_pages(&mut self, pa: PhysAddr, count: usize) {
        // SAFETY: as in `free_page`, for a block from `alloc_zeroed_pages(count)`.
        drop(unsafe { Frames::from_raw(pa, count.next_power_of_two()) });
    }

    fn phys_to_virt(&self, pa: PhysAddr) -> *mut u64 {
        pa.0 as *mut u64
    }
}
