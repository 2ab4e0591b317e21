//! A vCPU's FP/SIMD register file (`vmm::arch::FpState`, laid out as fpsimd.S expects), or its
//! SVE register file (`vmm::arch::SveState`), switched only when the physical CPU changes
//! hands; and this CPU's SVE vector lengths, which bound the guests' (`vmm::emulate::fpsimd`).

use aarch64_cpu::registers::{ID_AA64PFR0_EL1, Readable};
use core::sync::atomic::{AtomicBool, Ordering};
use vmm::arch::{FpState, SVE_MAX_VQ, SveState};

unsafe extern "C" {
    fn __fpsimd_save(state: *mut FpState);
    fn __fpsimd_restore(state: *const FpState);
    fn __sve_save(regs: *mut u128, zcr_el2: u64, ctrl: *mut [u64; 3]);
    fn __sve_restore(regs: *const u128, zcr_el2: u64, ctrl: *const [u64; 3]);
    fn __sve_lengths() -> u64;
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

/// The area's room for `vq` quadwords, checked: fpsimd.S trusts it.
fn check(state: &SveState, vq: usize) {
    assert!(
        (1..=SVE_MAX_VQ).contains(&vq) && state.regs().len() * 16 >= SveState::bytes(vq),
        "SVE save area of {} bytes for a {}-bit vector length",
        state.regs().len() * 16,
        vq * 128
    );
}

/// Saves the SVE registers at `vq` quadwords, which the monitor never sets above this CPU's
/// longest (it is the shortest longest over all CPUs).
pub fn sve_save(state: &mut SveState, vq: usize) {
    check(state, vq);
    // SAFETY: the area holds SveState::bytes(vq) bytes (checked above), which is what
    // __sve_save writes at ZCR_EL2.LEN = vq - 1, and `ctrl` has room for its 3 words. The
    // monitor has lifted CPTR_EL2.TFP and .TZ (were they set, the access would be a
    // synchronous exception at EL2, armhv's fatal report, not a stray write). It clobbers x3-x6
    // and the guest's P0 after saving it, none of which armhv's soft-float code relies on.
    unsafe { __sve_save(state.regs_mut().as_mut_ptr(), vq as u64 - 1, &mut state.ctrl) }
}

/// Loads the SVE registers at `vq` quadwords, and ZCR_EL2.LEN = `vq` - 1: the longest vector
/// length the guest can then select.
pub fn sve_restore(state: &SveState, vq: usize) {
    check(state, vq);
    // SAFETY: as in `sve_save`, reading the same bytes; loading the SVE registers and ZCR_EL1
    // cannot affect armhv, which never executes FP, SIMD or SVE instructions.
    unsafe { __sve_restore(state.regs().as_ptr(), vq as u64 - 1, &state.ctrl) }
}

/// A CPU of the machine had SVE: the boot log says what guests get of it.
static ANY_SVE: AtomicBool = AtomicBool::new(false);

/// Records this CPU's SVE vector lengths with the monitor (none without SVE); called on every
/// CPU after `el2_regs::configure_cpu`, before it runs a guest.
pub fn init_cpu(index: usize) {
    // ID_AA64PFR0_EL1.SVE, bits [35:32].
    if (ID_AA64PFR0_EL1.get() >> 32) & 0xf == 0 {
        vmm::emulate::fpsimd::record_cpu_sve(None);
        return;
    }
    ANY_SVE.store(true, Ordering::Relaxed);
    super::el2_regs::set_fp_traps(false, false);
    // SAFETY: this CPU has SVE (ID_AA64PFR0_EL1.SVE) and CPTR_EL2 traps none of it (just
    // lifted); the routine writes only ZCR_EL2, which nothing else uses until a vCPU's SVE
    // state is loaded with its own length, and x0-x4.
    let lengths = unsafe { __sve_lengths() } as u16;
    super::el2_regs::set_fp_traps(true, true);
    log::debug!("sve: CPU {index}: vector lengths {lengths:#06x} (bit n: (n + 1) x 128 bits)");
    vmm::emulate::fpsimd::record_cpu_sve(Some(lengths));
}

/// The boot log's line on SVE, once every CPU has recorded its own: nothing on a machine
/// without it.
pub fn report() {
    let vq = vmm::emulate::fpsimd::machine_vq();
    if vq != 0 {
        log::info!(
            "sve: guests get SVE, vector length up to {} bits (ZCR_EL2.LEN {}), {} bytes of \
             save area per vCPU",
            vq * 128,
            vq - 1,
            SveState::bytes(vq)
        );
    } else if ANY_SVE.load(Ordering::Relaxed) {
        log::warn!("sve: hidden from guests: not every CPU has SVE");
    }
}
