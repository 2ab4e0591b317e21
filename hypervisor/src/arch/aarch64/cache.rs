//! Cache and TLB maintenance on behalf of guests: what a guest must see of memory armhv wrote
//! while its caches are off, the set/way operations it may not perform itself, and guest TLB
//! entries left from VMIDs being (re)assigned; and whether Stage-2 forces guest RAM write-back
//! (FEAT_S2FWB), which makes the first of these unnecessary (docs/design.md, "Guests with
//! caches off").

use core::sync::atomic::{AtomicBool, Ordering};

/// Whether the CPUs run guests with HCR_EL2.FWB: decided once on the boot CPU, before the
/// first Stage-2 table is built with the matching encoding.
static FWB: AtomicBool = AtomicBool::new(false);

/// ID_AA64MMFR2_EL1.FWB (bits [43:40]): this CPU implements HCR_EL2.FWB.
pub fn cpu_has_fwb() -> bool {
    use aarch64_cpu::registers::{ID_AA64MMFR2_EL1, Readable};
    ID_AA64MMFR2_EL1.read(ID_AA64MMFR2_EL1::FWB) != 0
}

/// The boot CPU decides, from its own ID register, whether guests run with HCR_EL2.FWB. Every
/// other CPU must then agree ([`check_fwb`]): the VMs' Stage-2 tables are built once, with one
/// encoding of RAM, before they start.
pub fn decide_fwb() -> bool {
    let fwb = cpu_has_fwb();
    FWB.store(fwb, Ordering::Relaxed);
    fwb
}

/// Whether guests run with HCR_EL2.FWB (after [`decide_fwb`]).
#[inline]
pub fn stage2_fwb() -> bool {
    FWB.load(Ordering::Relaxed)
}

/// A CPU started after the decision can run the VMs' tables: it has FWB if they use it. (One
/// that has it when the boot CPU does not just leaves it off.)
pub fn check_fwb() -> Result<(), &'static str> {
    if stage2_fwb() && !cpu_has_fwb() {
        return Err("this CPU lacks FEAT_S2FWB, which the boot CPU has and the VMs' Stage-2 \
                    tables rely on: CPUs that disagree on it are not supported");
    }
    Ok(())
}

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
    for_each_line(start, len, |addr| {
        // SAFETY: cleaning a cache line writes back data without changing memory contents.
        unsafe { core::arch::asm!("dc cvac, {}", in(reg) addr, options(nostack)) };
    });
}

/// Cleans and invalidates `[start, start + len)` (identity-mapped) to the point of coherency,
/// so that armhv's next read of it comes from memory: what a guest with its caches off wrote
/// there. Never a plain invalidate (DC IVAC), which would throw away dirty lines: armhv's own
/// writes, or a caches-on vCPU's.
pub fn clean_invalidate_to_poc(start: u64, len: u64) {
    for_each_line(start, len, |addr| {
        // SAFETY: clean-and-invalidate writes a dirty line back before dropping it, so memory
        // contents are kept.
        unsafe { core::arch::asm!("dc civac, {}", in(reg) addr, options(nostack)) };
    });
}

/// Runs `op` on every data cache line that `[start, start + len)` touches, then waits for the
/// operations to complete (DSB ISH).
#[inline(always)]
fn for_each_line(start: u64, len: u64, op: impl Fn(u64)) {
    // CTR_EL0.DminLine: log2 of the smallest data cache line, in words.
    let ctr: u64;
    // SAFETY: reading CTR_EL0 has no side effects.
    unsafe { core::arch::asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    let line = 4u64 << ((ctr >> 16) & 0xf);
    let mut addr = start & !(line - 1);
    while addr < start + len {
        op(addr);
        addr += line;
    }
    // SAFETY: a barrier has no memory side effects.
    unsafe { core::arch::asm!("dsb ish", options(nostack)) };
}
