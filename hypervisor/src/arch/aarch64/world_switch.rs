//! Entering a guest and coming back: the fast path every trap takes.
//!
//! `enter` runs the vCPU until its next exception to EL2. Only the general-purpose registers,
//! ELR_EL2 and SPSR_EL2 move through memory on that path (vectors.S); everything else is the
//! business of `vmm::vcpu` when the CPU changes hands.

/// The guest state that the vector code saves on every trap. Layout is fixed by vectors.S.
#[repr(C)]
#[derive(Clone, Default, Debug)]
pub struct GuestRegs {
    pub x: [u64; 31],
    /// The guest PC: where `eret` resumes.
    pub elr: u64,
    /// The guest PSTATE.
    pub spsr: u64,
    /// Cycle-counter probes of the vector code, written only by a `ws-breakdown` build: the
    /// trap's vector entry, its registers saved; the next `__guest_enter` call, its `eret`.
    pub stamps: [u64; 4],
}

const _: () = assert!(core::mem::offset_of!(GuestRegs, elr) == 248);
const _: () = assert!(core::mem::offset_of!(GuestRegs, spsr) == 256);
const _: () = assert!(core::mem::offset_of!(GuestRegs, stamps) == 264);

/// Instructions of the exit path before its first probe (the vector's `stp`), and of the entry
/// path after its last probe (`ldp`, `eret`): the breakdown adds them back.
#[cfg(feature = "ws-breakdown")]
pub const STAMP_EXIT_HEAD: u64 = 1;
#[cfg(feature = "ws-breakdown")]
pub const STAMP_ENTRY_TAIL: u64 = 2;

/// SPSR value for a vCPU's first entry: EL1h with D, A, I, F masked (arm64 boot protocol).
pub const SPSR_EL1H_MASKED: u64 = 0x3c5;

/// Why the guest stopped running: which vector was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    Sync,
    Irq,
    Fiq,
    SError,
    /// An exception from AArch32 state: armhv only runs AArch64 guests.
    AArch32,
}

unsafe extern "C" {
    fn __guest_enter(regs: *mut GuestRegs) -> u64;
}

impl GuestRegs {
    /// Reads general-purpose register `n` as an instruction operand: 31 is the zero register.
    pub fn get(&self, n: u8) -> u64 {
        if n < 31 { self.x[n as usize] } else { 0 }
    }

    /// Writes general-purpose register `n`; writes to the zero register are discarded.
    pub fn set(&mut self, n: u8, value: u64) {
        if n < 31 {
            self.x[n as usize] = value;
        }
    }

    /// Runs the guest until it traps to EL2.
    pub fn enter(&mut self) -> ExitKind {
        // SAFETY: the vCPU's Stage-2 tables, HCR_EL2 and EL1 state are loaded on this CPU
        // (vmm::vcpu::load), so the guest can only reach what its VM was given. __guest_enter
        // preserves the AAPCS callee-saved registers and returns here on the next trap.
        let kind = unsafe { __guest_enter(self) };
        match kind {
            0 => ExitKind::Sync,
            1 => ExitKind::Irq,
            2 => ExitKind::Fiq,
            3 => ExitKind::SError,
            _ => ExitKind::AArch32,
        }
    }
}
