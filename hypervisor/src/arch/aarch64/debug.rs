//! A guest's self-hosted debug registers in the hardware (`vmm::arch::DebugRegs`): the
//! breakpoint and watchpoint slots this CPU implements and MDCCINT_EL1. The monitor decides
//! when they move (`vmm::emulate::debug`). Not the claim tags (DBGCLAIMSET/CLR_EL1): QEMU 7.2
//! does not implement them (an access is UNDEFINED, even at EL2), so armhv could not touch
//! them there.
//!
//! None of them acts at EL2: armhv never sets MDCR_EL2.TDE or HCR_EL2.TGE, so the debug target
//! EL is EL1, and debug exceptions are never generated at an EL above the debug target EL.

use vmm::arch::{DebugRegs, MAX_DEBUG_SLOTS};

/// Breakpoints and watchpoints this CPU implements (ID_AA64DFR0_EL1.BRPs, .WRPs, + 1).
fn slots() -> (usize, usize) {
    let dfr0 = super::id_regs::read(vmm::arch::IdReg::IdAa64Dfr0);
    (((dfr0 >> 12) & 0xf) as usize + 1, ((dfr0 >> 20) & 0xf) as usize + 1)
}

/// Reads or writes slot `$n` of a register family, `$n` being a run-time index: the register
/// is named in the instruction, so each slot is its own arm.
macro_rules! slot_access {
    (read $prefix:literal, $suffix:literal, $n:expr) => {{
        let v: u64;
        slot_access!(@arms $n, v, $prefix, $suffix, "mrs {}, ", "", out);
        v
    }};
    (write $prefix:literal, $suffix:literal, $n:expr, $value:expr) => {{
        let v: u64 = $value;
        slot_access!(@arms $n, v, $prefix, $suffix, "msr ", ", {}", in);
    }};
    (@arms $n:expr, $v:ident, $prefix:literal, $suffix:literal, $head:literal, $tail:literal,
     $dir:ident) => {
        slot_access!(@one $n, $v, $prefix, $suffix, $head, $tail, $dir,
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@one $n:expr, $v:ident, $prefix:literal, $suffix:literal, $head:literal, $tail:literal,
     $dir:ident, $($i:literal)*) => {
        match $n {
            $(
                // SAFETY: slot $i exists (the callers stay below the CPU's count from
                // ID_AA64DFR0_EL1). At EL2 with MDCR_EL2.TDE and HCR_EL2.TGE clear these
                // registers only act for EL1 and EL0: they cannot make armhv take an
                // exception, nor touch memory.
                $i => unsafe {
                    core::arch::asm!(
                        concat!($head, $prefix, stringify!($i), $suffix, $tail),
                        $dir(reg) $v,
                        options(nomem, nostack, preserves_flags)
                    )
                },
            )*
            _ => unreachable!("debug slot {} beyond the architecture's 16", $n),
        }
    };
}

/// Copies this CPU's debug registers into `state`.
pub fn save(state: &mut DebugRegs) {
    let (brps, wrps) = slots();
    for n in 0..brps.min(MAX_DEBUG_SLOTS) {
        state.bvr[n] = slot_access!(read "dbgbvr", "_el1", n);
        state.bcr[n] = slot_access!(read "dbgbcr", "_el1", n);
    }
    for n in 0..wrps.min(MAX_DEBUG_SLOTS) {
        state.wvr[n] = slot_access!(read "dbgwvr", "_el1", n);
        state.wcr[n] = slot_access!(read "dbgwcr", "_el1", n);
    }
    // SAFETY: reading MDCCINT_EL1 has no side effects.
    unsafe {
        core::arch::asm!("mrs {}, mdccint_el1", out(reg) state.mdccint,
            options(nomem, nostack, preserves_flags));
    }
}

/// Loads `state` into this CPU's debug registers, for the guest's next entry.
pub fn restore(state: &DebugRegs) {
    let (brps, wrps) = slots();
    for n in 0..brps.min(MAX_DEBUG_SLOTS) {
        slot_access!(write "dbgbvr", "_el1", n, state.bvr[n]);
        slot_access!(write "dbgbcr", "_el1", n, state.bcr[n]);
    }
    for n in 0..wrps.min(MAX_DEBUG_SLOTS) {
        slot_access!(write "dbgwvr", "_el1", n, state.wvr[n]);
        slot_access!(write "dbgwcr", "_el1", n, state.wcr[n]);
    }
    // SAFETY: MDCCINT_EL1 only enables the debug communications channel's interrupts, which
    // armhv does not use.
    unsafe {
        core::arch::asm!("msr mdccint_el1, {}", in(reg) state.mdccint,
            options(nomem, nostack, preserves_flags));
    }
}

/// Unlocks this CPU's OS lock and OS double lock, which may be locked from its reset (OSLK
/// resets to 1): while locked, no breakpoint, watchpoint or step exception is generated, and
/// guests, which see no OS lock, could not unlock it themselves.
pub fn unlock_os_lock() {
    let dfr0 = super::id_regs::read(vmm::arch::IdReg::IdAa64Dfr0);
    // ID_AA64DFR0_EL1.DoubleLock (bits 39:36): 0 = OSDLR_EL1 implemented, 0xf = not.
    if (dfr0 >> 36) & 0xf == 0 {
        // SAFETY: OSDLR_EL1 exists (DoubleLock = 0); clearing DLK only allows debug, which
        // targets EL1 (see the module's comment).
        unsafe {
            core::arch::asm!("msr osdlr_el1, xzr", options(nomem, nostack, preserves_flags));
        }
    }
    // SAFETY: as above; OSLAR_EL1 exists on every ARMv8-A CPU.
    unsafe {
        core::arch::asm!("msr oslar_el1, xzr", "isb", options(nomem, nostack, preserves_flags));
    }
}
