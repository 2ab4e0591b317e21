//! What a guest's trap to EL2 leaves behind: the syndrome (ESR_EL2) and, for an abort, the
//! faulting virtual address (FAR_EL2) and IPA page (HPFAR_EL2). Each is read where it is needed:
//! ESR_EL2 on every synchronous exit, FAR_EL2 and HPFAR_EL2 only by the handlers that look at
//! them (nothing at EL2 traps in between to overwrite them). Decoding is `trap`'s.

use aarch64_cpu::registers::{ESR_EL2, FAR_EL2, HPFAR_EL2, Readable};

/// ESR_EL2: the exception class and its instruction-specific syndrome.
#[inline]
pub fn esr() -> u64 {
    ESR_EL2.get()
}

/// FAR_EL2: the virtual address of the guest's faulting access.
#[inline]
pub fn far() -> u64 {
    FAR_EL2.get()
}

/// HPFAR_EL2: the faulting IPA, page granular (its FIPA field).
#[inline]
pub fn hpfar() -> u64 {
    HPFAR_EL2.get()
}
