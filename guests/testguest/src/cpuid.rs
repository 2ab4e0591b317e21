//! Steps about the CPU's features: `idregs` (what the ID registers say) and `pauth=K`
//! (pointer authentication with a key of the guest's own, across hypervisor yields).

use baremetal::psci;
use guest_abi::hypercall::ARMHV_YIELD;

use crate::{println, time};

/// `pauth=K`: yields, each followed by ~1 ms of spinning and a check of the key.
const PAUTH_ROUNDS: u64 = 200;

macro_rules! mrs {
    ($enc:literal) => {{
        let v: u64;
        // SAFETY: reading an ID register has no side effects.
        unsafe { core::arch::asm!(concat!("mrs {}, ", $enc), out(reg) v, options(nomem, nostack)) };
        v
    }};
}

/// Prints the AArch64 ID registers, by encoding (assemblers name some only for newer
/// architectures).
pub fn idregs() {
    println!(
        "testguest: id pfr0={:#x} pfr1={:#x} zfr0={:#x} smfr0={:#x} dfr0={:#x} afr0={:#x} \
         isar0={:#x} isar1={:#x} isar2={:#x} mmfr0={:#x} mmfr1={:#x} mmfr2={:#x}",
        mrs!("s3_0_c0_c4_0"),
        mrs!("s3_0_c0_c4_1"),
        mrs!("s3_0_c0_c4_4"),
        mrs!("s3_0_c0_c4_5"),
        mrs!("s3_0_c0_c5_0"),
        mrs!("s3_0_c0_c5_4"),
        mrs!("s3_0_c0_c6_0"),
        mrs!("s3_0_c0_c6_1"),
        mrs!("s3_0_c0_c6_2"),
        mrs!("s3_0_c0_c7_0"),
        mrs!("s3_0_c0_c7_1"),
        mrs!("s3_0_c0_c7_2"),
    );
}

/// Whether the ID registers show address authentication with the A key (ID_AA64ISAR1_EL1.APA
/// or API, ID_AA64ISAR2_EL1.APA3).
fn has_address_auth() -> bool {
    let (isar1, isar2) = (mrs!("s3_0_c0_c6_1"), mrs!("s3_0_c0_c6_2"));
    (isar1 >> 4) & 0xff != 0 || (isar2 >> 12) & 0xf != 0
}

/// PACIA1716: x17 signed with the IA key and modifier x16 (a HINT: a NOP without the feature
/// or with SCTLR_EL1.EnIA clear).
fn pacia(ptr: u64, modifier: u64) -> u64 {
    let mut x17 = ptr;
    // SAFETY: computes a value in x17 from x17, x16 and the key; no memory, no other register.
    unsafe {
        core::arch::asm!("hint #8", inout("x17") x17, in("x16") modifier,
            options(nomem, nostack, preserves_flags));
    }
    x17
}

/// AUTIA1716: x17 authenticated; the pointer back if the signature is the key's.
fn autia(signed: u64, modifier: u64) -> u64 {
    let mut x17 = signed;
    // SAFETY: as in `pacia`.
    unsafe {
        core::arch::asm!("hint #12", inout("x17") x17, in("x16") modifier,
            options(nomem, nostack, preserves_flags));
    }
    x17
}

/// `pauth=K`: installs an IA key made from K, signs a pointer, then yields to the hypervisor
/// (another VM sharing the CPU runs and uses its own key) and signs it again, PAUTH_ROUNDS
/// times: the signature must stay the key's, and authenticate.
pub fn pauth(k: u64) {
    if !has_address_auth() {
        println!("testguest: pauth absent");
        return;
    }
    let (lo, hi) = (k.wrapping_mul(0x0101_0101_0101_0101), !k);
    // SAFETY: APIAKeyLo/Hi_EL1 and SCTLR_EL1.EnIA (bit 31) only change what PAC instructions
    // compute; this program's code has none (built without branch protection) but these.
    unsafe {
        core::arch::asm!(
            "msr s3_0_c2_c1_0, {lo}",
            "msr s3_0_c2_c1_1, {hi}",
            "mrs {t}, sctlr_el1",
            "orr {t}, {t}, #(1 << 31)",
            "msr sctlr_el1, {t}",
            "isb",
            lo = in(reg) lo, hi = in(reg) hi, t = out(reg) _,
            options(nostack)
        );
    }
    let (ptr, modifier) = (0x4000_1230u64, 0x5a5a);
    let reference = pacia(ptr, modifier);
    if reference == ptr {
        println!("testguest: pauth key {k}: PACIA1716 signed nothing ({ptr:#x})");
        return;
    }
    for round in 1..=PAUTH_ROUNDS {
        psci::call(ARMHV_YIELD, 0, 0, 0);
        time::spin_ms(1);
        let signed = pacia(ptr, modifier);
        if signed != reference || autia(reference, modifier) != ptr {
            println!(
                "testguest: pauth key {k} lost in round {round}: {signed:#x}, not {reference:#x}"
            );
            return;
        }
    }
    println!("testguest: pauth key {k} intact ({PAUTH_ROUNDS} rounds)");
}
