//! Volatile access to the memory the hostile virtio drivers share with a device: each keeps its
//! own static area for rings and buffers (`virtio.rs`, `net.rs`, `vcons.rs`) and writes
//! descriptors through these.

use baremetal::console::Global;

/// A page-aligned, zeroed static area of `WORDS` 64-bit words that a driver shares with its
/// device (its address is what goes into the queue registers and descriptors).
#[repr(C, align(4096))]
pub struct DmaArea<const WORDS: usize>([Global<u64>; WORDS]);

impl<const WORDS: usize> DmaArea<WORDS> {
    pub const fn new() -> Self {
        Self([const { Global::new(0) }; WORDS])
    }

    pub fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
}

/// Writes `v` at `addr`.
pub fn wr<T: Copy>(addr: u64, v: T) {
    // SAFETY: every caller passes an address inside one of the drivers' static areas (volatile
    // cells) at an offset aligned for `T`, or the canary at the end of our RAM, which no Rust
    // object uses; the device may access it concurrently, which is why it is volatile.
    unsafe { (addr as *mut T).write_volatile(v) }
}

/// Reads a `T` at `addr`.
pub fn rd<T: Copy>(addr: u64) -> T {
    // SAFETY: as in `wr`.
    unsafe { (addr as *const T).read_volatile() }
}

/// Writes descriptor `i` of the table at `table`.
pub fn desc(table: u64, i: u64, addr: u64, len: u32, flags: u16, next: u16) {
    let d = table + 16 * i;
    wr::<u64>(d, addr);
    wr::<u32>(d + 8, len);
    wr::<u16>(d + 12, flags);
    wr::<u16>(d + 14, next);
}
