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

pub fn send_event() {
    aarch64_cpu::asm::sev();
}

/// Stops this CPU for good: used when the firmware refuses CPU_OFF.
pub fn park() -> ! {
    loop {
        aarch64_cpu::asm::wfe();
    }
}
