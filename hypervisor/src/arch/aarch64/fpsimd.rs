//! A vCPU's FP/SIMD register file, switched only when the physical CPU changes hands.

#[repr(C, align(16))]
#[derive(Clone, Default)]
pub struct FpState {
    pub q: [u128; 32],
    pub fpsr: u64,
    pub fpcr: u64,
}

unsafe extern "C" {
    fn __fpsimd_save(state: *mut FpState);
    fn __fpsimd_restore(state: *const FpState);
}

impl FpState {
    pub fn save(&mut self) {
        // SAFETY: `self` is a valid, 16-byte aligned FpState matching the layout fpsimd.S writes;
        // CPTR_EL2 does not trap FP at EL2 and the routine clobbers only x1, x2 (caller-saved).
        unsafe { __fpsimd_save(self) }
    }

    pub fn restore(&self) {
        // SAFETY: as in `save`; restoring the FP register file cannot affect armhv, which is
        // built soft-float and never reads FP/SIMD registers.
        unsafe { __fpsimd_restore(self) }
    }
}
