//! Volatile access to the memory the hostile virtio drivers share with a device: each keeps its
//! own static area for rings and buffers (`virtio.rs`, `net.rs`, `vcons.rs`) and writes
//! descriptors through these.

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
