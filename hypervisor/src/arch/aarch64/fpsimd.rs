//! A vCPU's FP/SIMD register file (`vmm::arch::FpState`, laid out as fpsimd.S expects),
//! switched only when the physical CPU changes hands.

use vmm::arch::FpState;

unsafe extern "C" {
    fn __fpsimd_save(state: *mut FpState);
    fn __fpsimd_restore(state: *const FpState);
}

pub fn save(state: &mut FpState) {
    // SAFETY: `state` is a valid, 16-byte aligned FpState matching the layout fpsimd.S writes;
    // CPTR_EL2 does not trap FP at EL2 and the routine clobbers only x1, x2 (caller-saved).
    unsafe { __fpsimd_save(state) }
}

pub fn restore(state: &FpState) {
    // SAFETY: as in `save`; restoring the FP register file cannot affect armhv, which is built
    // soft-float and never reads FP/SIMD registers.
    unsafe { __fpsimd_restore(state) }
}
