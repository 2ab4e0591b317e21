//! Facts about, and small operations on, the physical CPU we are running on.

use aarch64_cpu::registers::{
    ID_AA64MMFR0_EL1, ID_AA64MMFR1_EL1, MIDR_EL1, MPIDR_EL1, Readable, TPIDR_EL2, Writeable,
};

/// The most physical CPUs armhv manages (the boot stacks are sized for this many).
pub use vmm::arch::MAX_CPUS;

/// Logical index of this CPU (0 = the boot CPU), kept in TPIDR_EL2 since boot.
pub fn current() -> usize {
    TPIDR_EL2.get() as usize
}

pub fn set_current(index: usize) {
    TPIDR_EL2.set(index as u64);
}

/// MPIDR_EL1 affinity fields (Aff3..Aff0), the CPU's identity for PSCI.
pub fn mpidr_affinity() -> u64 {
    MPIDR_EL1.get() & 0xff_00ff_ffff
}

pub fn midr() -> u64 {
    MIDR_EL1.get()
}

/// Sets VPIDR_EL2: the value a guest reads from MIDR_EL1.
pub fn set_guest_midr(midr: u64) {
    // SAFETY: VPIDR_EL2 only changes what EL1 reads as MIDR_EL1; armhv reads the real MIDR_EL1
    // at EL2, which VPIDR_EL2 does not affect.
    unsafe { core::arch::asm!("msr vpidr_el2, {}", in(reg) midr, options(nomem, nostack)) };
}

/// At a guest's exit: whether a physical SError was pending, which is then consumed. An
/// SError is asynchronous: one the guest caused (a write to a failing device or bad memory)
/// may still be pending when it traps for another reason, with SErrors masked at EL2 since the
/// exception. Left pending, it would be taken at the next guest entry on this CPU, as an
/// SError of the next VM.
/// - With FEAT_RAS, ESB defers it into DISR_EL1, where it is read and cleared.
/// - Without, ISR_EL1.A shows it pending, and SErrors are unmasked for one instruction
///   (`__take_guest_serror` in vectors.S), as KVM's `__guest_exit` does.
///
/// QEMU's TCG never raises a physical SError, so neither path runs in the test suite.
pub fn take_pending_serror() -> bool {
    if has_ras() {
        return take_deferred_serror();
    }
    let isr: u64;
    // SAFETY: DSB and ISB only order this CPU's memory accesses and instruction stream; ISR_EL1
    // is a read-only status register. The DSB lets an SError from the guest's last accesses
    // become pending, the ISB keeps the read of ISR_EL1 from passing it.
    unsafe { core::arch::asm!("dsb sy", "isb", "mrs {}, isr_el1", out(reg) isr, options(nostack)) };
    // ISR_EL1.A: a physical SError is pending.
    if isr & (1 << 8) == 0 {
        return false;
    }
    unsafe extern "C" {
        fn __take_guest_serror() -> u64;
    }
    // SAFETY: the window unmasks only SErrors, only for one instruction, with the guest's
    // registers already saved; the EL2 SError handler returns into it (exception.rs) instead of
    // stopping this CPU, and it clobbers only x0.
    unsafe { __take_guest_serror() != 0 }
}

/// FEAT_RAS: an SError pending at ESB is deferred into DISR_EL1; reads and clears it.
fn take_deferred_serror() -> bool {
    let disr: u64;
    // SAFETY: FEAT_RAS is implemented (the caller checked), so ESB (hint #16) and DISR_EL1
    // (s3_0_c12_c1_1) exist. ESB only moves a pending, masked physical SError into DISR_EL1;
    // at EL2 DISR_EL1 is armhv's own record (a guest's DISR_EL1 is VDISR_EL2), cleared here.
    unsafe {
        core::arch::asm!(
            "hint #16",
            "mrs {d}, s3_0_c12_c1_1",
            "cbz {d}, 1f",
            "msr s3_0_c12_c1_1, xzr",
            "1:",
            d = out(reg) disr,
            options(nostack),
        )
    };
    // DISR_EL1.A: an SError was deferred.
    disr & (1 << 31) != 0
}

/// ID_AA64MMFR0_EL1.PARange: the physical address size this CPU supports.
pub fn pa_range() -> u8 {
    (ID_AA64MMFR0_EL1.get() & 0xf) as u8
}

/// Whether the CPU implements the RAS extension (FEAT_RAS: DISR_EL1, VDISR_EL2), read once.
pub fn has_ras() -> bool {
    use core::sync::atomic::{AtomicU8, Ordering};
    const UNKNOWN: u8 = 2;
    static RAS: AtomicU8 = AtomicU8::new(UNKNOWN);
    match RAS.load(Ordering::Relaxed) {
        UNKNOWN => {
            let ras = (aarch64_cpu::registers::ID_AA64PFR0_EL1.get() >> 28) & 0xf != 0;
            RAS.store(ras as u8, Ordering::Relaxed);
            ras
        }
        known => known == 1,
    }
}

/// Whether the CPU implements the Virtualization Host Extensions (FEAT_VHE).
pub fn has_vhe() -> bool {
    (ID_AA64MMFR1_EL1.get() >> 8) & 0xf != 0
}

/// Waits for an event (another CPU's `sev`, an interrupt): never a busy spin, which would starve
/// the other CPUs when QEMU runs them round-robin under `-icount`.
pub fn wait_for_event() {
    aarch64_cpu::asm::wfe();
}

/// Waits for an interrupt: wakes on one pending even while this CPU has interrupts masked, as
/// EL2 always does.
#[inline]
pub fn wait_for_interrupt() {
    aarch64_cpu::asm::wfi();
}

/// A busy wait's pause: `yield`. Rust's `spin_loop` is an `isb` on AArch64, which QEMU's
/// round-robin TCG (its only mode under `-icount`) runs as any other instruction: a CPU spinning
/// for a lock then spent its whole time slice while the holder, another emulated CPU, could not
/// run. Measured: the uplink's lock made a host-to-VM TCP stream cost 20 to 100 times native's
/// instructions per MiB. QEMU ends the slice at a `yield`; on hardware it is a free hint.
#[inline(always)]
pub fn relax() {
    // SAFETY: `yield` is a hint: it touches no memory, register or flag.
    unsafe { core::arch::asm!("yield", options(nomem, nostack, preserves_flags)) };
}

pub fn send_event() {
    aarch64_cpu::asm::sev();
}

/// Stops this CPU for good: used when the firmware refuses CPU_OFF.
pub fn park() -> ! {
    loop {
        aarch64_cpu::asm::wfe();
    }
}
