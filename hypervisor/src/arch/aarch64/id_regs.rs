//! Reading the ID registers a guest asks for. What the guest then sees of them is the portable
//! policy's business (`trap::id_regs`).

use aarch64_cpu::registers::{
    ID_AA64DFR0_EL1, ID_AA64DFR1_EL1, ID_AA64ISAR0_EL1, ID_AA64ISAR1_EL1, ID_AA64MMFR0_EL1,
    ID_AA64MMFR1_EL1, ID_AA64MMFR2_EL1, ID_AA64PFR0_EL1, ID_AA64PFR1_EL1, Readable,
};
use trap::id_regs::IdReg;

/// The ID registers `aarch64-cpu` does not name.
macro_rules! mrs {
    ($name:literal) => {{
        let v: u64;
        // SAFETY: reading an ID register has no side effects.
        unsafe { core::arch::asm!(concat!("mrs {}, ", $name), out(reg) v, options(nomem, nostack)) };
        v
    }};
}

/// This CPU's value of `reg`.
pub fn read(reg: IdReg) -> u64 {
    match reg {
        IdReg::IdPfr0 => mrs!("id_pfr0_el1"),
        IdReg::IdPfr1 => mrs!("id_pfr1_el1"),
        IdReg::IdDfr0 => mrs!("id_dfr0_el1"),
        IdReg::IdMmfr0 => mrs!("id_mmfr0_el1"),
        IdReg::IdMmfr1 => mrs!("id_mmfr1_el1"),
        IdReg::IdMmfr2 => mrs!("id_mmfr2_el1"),
        IdReg::IdMmfr3 => mrs!("id_mmfr3_el1"),
        IdReg::IdIsar0 => mrs!("id_isar0_el1"),
        IdReg::IdIsar1 => mrs!("id_isar1_el1"),
        IdReg::IdIsar2 => mrs!("id_isar2_el1"),
        IdReg::IdIsar3 => mrs!("id_isar3_el1"),
        IdReg::IdIsar4 => mrs!("id_isar4_el1"),
        IdReg::IdIsar5 => mrs!("id_isar5_el1"),
        IdReg::Mvfr0 => mrs!("mvfr0_el1"),
        IdReg::Mvfr1 => mrs!("mvfr1_el1"),
        IdReg::Mvfr2 => mrs!("mvfr2_el1"),
        IdReg::IdAa64Pfr0 => ID_AA64PFR0_EL1.get(),
        IdReg::IdAa64Pfr1 => ID_AA64PFR1_EL1.get(),
        IdReg::IdAa64Zfr0 => mrs!("s3_0_c0_c4_4"),
        IdReg::IdAa64Dfr0 => ID_AA64DFR0_EL1.get(),
        IdReg::IdAa64Dfr1 => ID_AA64DFR1_EL1.get(),
        IdReg::IdAa64Isar0 => ID_AA64ISAR0_EL1.get(),
        IdReg::IdAa64Isar1 => ID_AA64ISAR1_EL1.get(),
        // By its encoding: assemblers for older architectures do not name it, and CPUs older
        // than it read it as zero (a reserved ID encoding).
        IdReg::IdAa64Isar2 => mrs!("s3_0_c0_c6_2"),
        IdReg::IdAa64Mmfr0 => ID_AA64MMFR0_EL1.get(),
        IdReg::IdAa64Mmfr1 => ID_AA64MMFR1_EL1.get(),
        IdReg::IdAa64Mmfr2 => ID_AA64MMFR2_EL1.get(),
    }
}
