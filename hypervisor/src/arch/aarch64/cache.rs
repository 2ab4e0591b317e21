//! Cache and TLB maintenance on behalf of guests: what a guest must see of memory armhv wrote
//! while its caches are off, the set/way operations it may not perform itself, and guest TLB
//! entries left from VMIDs being (re)assigned.

/// Invalidates every guest (EL1&0, any VMID) TLB entry on all CPUs: VMIDs get (re)assigned.
pub fn flush_guest_tlbs() {
    // SAFETY: TLB invalidation has no effect on memory contents.
    unsafe {
        core::arch::asm!("dsb ishst", "tlbi alle1is", "dsb ish", "isb", options(nostack));
    }
}

/// Performs a trapped set/way cache operation as clean-and-invalidate, which never discards
/// another VM's dirty data (the guest's DC ISW would).
pub fn clean_invalidate_set_way(operand: u64) {
    // SAFETY: DC CISW writes back and invalidates one cache line slot; memory contents are kept.
    unsafe { core::arch::asm!("dc cisw, {}", in(reg) operand, options(nostack)) };
}

/// Cleans `[start, start + len)` (identity-mapped) to the point of coherency and invalidates the
/// instruction cache, so a guest running with its MMU and caches off sees what armhv wrote.
pub fn clean_to_poc(start: u64, len: u64) {
    clean_data_to_poc(start, len);
    // SAFETY: I-cache invalidation and barriers have no memory side effects.
    unsafe { core::arch::asm!("ic ialluis", "dsb ish", "isb", options(nostack)) };
}

/// Cleans `[start, start + len)` (identity-mapped) to the point of coherency: for data a guest
/// may read with its caches off, not code (the instruction cache is left alone).
pub fn clean_data_to_poc(start: u64, len: u64) {
    // CTR_EL0.DminLine: log2 of the smallest data cache line, in words.
    let ctr: u64;
    // SAFETY: reading CTR_EL0 has no side effects.
    unsafe { core::arch::asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    let line = 4u64 << ((ctr >> 16) & 0xf);
    let mut addr = start & !(line - 1);
    while addr < start + len {
        // SAFETY: cleaning a cache line writes back data without changing memory contents.
        unsafe { core::arch::asm!("dc cvac, {}", in(reg) addr, options(nostack)) };
        addr += line;
    }
    // SAFETY: a barrier has no memory side effects.
    unsafe { core::arch::asm!("dsb ish", options(nostack)) };
}
