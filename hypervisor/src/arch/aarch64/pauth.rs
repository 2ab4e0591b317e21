//! A vCPU's pointer-authentication keys (`vmm::arch::PauthKeys`) in the key registers,
//! switched lazily (`vmm::emulate::pauth`). The registers are named by their encodings
//! (APIAKeyLo_EL1 is S3_0_C2_C1_0, ...): the assembler knows their names only for ARMv8.3.

use vmm::arch::PauthKeys;

/// Copies the key registers into `keys`. Only on a CPU with pointer authentication.
pub fn save(keys: &mut PauthKeys) {
    let PauthKeys { apia, apib, apda, apdb, apga } = keys;
    // SAFETY: the monitor calls this only on CPUs with FEAT_PAuth (after a pointer-
    // authentication trap, which only they take), where these encodings are the key
    // registers; reading them at EL2 has no side effects.
    unsafe {
        core::arch::asm!(
            "mrs {0}, s3_0_c2_c1_0", "mrs {1}, s3_0_c2_c1_1",
            "mrs {2}, s3_0_c2_c1_2", "mrs {3}, s3_0_c2_c1_3",
            "mrs {4}, s3_0_c2_c2_0", "mrs {5}, s3_0_c2_c2_1",
            "mrs {6}, s3_0_c2_c2_2", "mrs {7}, s3_0_c2_c2_3",
            "mrs {8}, s3_0_c2_c3_0", "mrs {9}, s3_0_c2_c3_1",
            out(reg) apia[0], out(reg) apia[1], out(reg) apib[0], out(reg) apib[1],
            out(reg) apda[0], out(reg) apda[1], out(reg) apdb[0], out(reg) apdb[1],
            out(reg) apga[0], out(reg) apga[1],
            options(nomem, nostack, preserves_flags)
        );
    }
}

/// Loads `keys` into the key registers. Only on a CPU with pointer authentication.
pub fn restore(keys: &PauthKeys) {
    let PauthKeys { apia, apib, apda, apdb, apga } = keys;
    // SAFETY: as in `save`, only on CPUs with FEAT_PAuth. The keys are the EL1&0 regime's:
    // armhv itself runs without pointer authentication (SCTLR_EL2.EnIA/EnIB/EnDA/EnDB clear,
    // built without branch protection), so they only affect the guest about to run.
    unsafe {
        core::arch::asm!(
            "msr s3_0_c2_c1_0, {0}", "msr s3_0_c2_c1_1, {1}",
            "msr s3_0_c2_c1_2, {2}", "msr s3_0_c2_c1_3, {3}",
            "msr s3_0_c2_c2_0, {4}", "msr s3_0_c2_c2_1, {5}",
            "msr s3_0_c2_c2_2, {6}", "msr s3_0_c2_c2_3, {7}",
            "msr s3_0_c2_c3_0, {8}", "msr s3_0_c2_c3_1, {9}",
            in(reg) apia[0], in(reg) apia[1], in(reg) apib[0], in(reg) apib[1],
            in(reg) apda[0], in(reg) apda[1], in(reg) apdb[0], in(reg) apdb[1],
            in(reg) apga[0], in(reg) apga[1],
            options(nomem, nostack, preserves_flags)
        );
    }
}
