//! The hypervisor's heap, a buddy allocator over a region carved from RAM at boot.

use buddy_system_allocator::LockedHeap;

#[global_allocator]
static HEAP: LockedHeap<32> = LockedHeap::empty();

/// # Safety
/// `[start, start + size)` must be RAM that nothing else uses, mapped read-write.
pub unsafe fn init(start: usize, size: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { HEAP.lock().init(start, size) };
}

/// Bytes currently allocated (for leak checks and statistics).
pub fn used_bytes() -> usize {
    HEAP.lock().stats_alloc_actual()
}
