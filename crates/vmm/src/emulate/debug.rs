//! Self-hosted debug for guests: breakpoints, watchpoints and software step, switched lazily
//! per vCPU as KVM does (`arch/arm64/kvm/debug.c`, `hyp/include/hyp/debug-sr.h`).
//!
//! - The guest's debug exceptions are its own: MDCR_EL2.TDE is never set, so the debug target
//!   EL is EL1 and breakpoint, watchpoint and step exceptions go to the guest's vectors, never
//!   to EL2. They cannot fire in armhv either: a debug exception is never taken from an EL
//!   above the debug target EL (Arm ARM D2.1, "Debug exceptions are disabled at ELs higher
//!   than the debug target EL"), and armhv runs at EL2 with HCR_EL2.TGE = 0.
//! - MDSCR_EL1 is part of every vCPU's EL1 state (`arch::El1State`), switched whenever a CPU
//!   changes vCPUs. Its MDE bit gates every breakpoint and watchpoint: with it clear, nothing
//!   that DBGBCR/DBGWCR hold can fire.
//! - The breakpoint and watchpoint registers (and MDCCINT_EL1) are switched only for a vCPU
//!   that uses them. A vCPU runs with MDCR_EL2.TDA set until its
//!   first access to any of them (MDSCR_EL1 included): that access traps here, its registers
//!   are loaded, TDA is cleared for it, and the instruction executes again, now on its own
//!   registers. It is then "live": saved when it leaves the CPU, and loaded again at its next
//!   entry if its MDSCR_EL1.MDE is set (its breakpoints may fire at any time, so they must be
//!   in place). A vCPU entered without MDE runs with TDA set again: whatever another vCPU
//!   left in the hardware can neither fire in it (MDE is clear, and it cannot set MDE without
//!   trapping here first) nor be read by it (every access traps, and loads its own first).
//! - Not virtualized, so hidden or inert: the OS lock (OSLSR_EL1.OSLM reads 0b00, "not
//!   implemented"; OSLAR_EL1 writes are ignored), the OS double lock (ID_AA64DFR0_EL1.DoubleLock
//!   reads 0xf; OSDLR_EL1 reads as zero), DBGPRCR_EL1 (RAZ/WI: the core's power-down request),
//!   MDRAR_EL1 (zero: no debug ROM), and, while the vCPU's registers are not live, the claim
//!   tags, the debug communications channel, OSECCR_EL1 and DBGAUTHSTATUS_EL1 (RAZ/WI). While
//!   they are live, these last few reach the physical CPU, as under KVM: with MDCR_EL2.TDA
//!   clear, nothing traps them (`docs/guest-abi.md`, "Debug"). The claim tags are not
//!   switched because QEMU 7.2, where armhv is tested, does not implement them.

use crate::arch::{MDCR_EL2_TDA, MDSCR_EL1_MDE, el2_regs, id_regs};
use crate::exit_ctx::ExitCtx;
use crate::stats;
use crate::vcpu::Vcpu;
use trap::id_regs::IdReg;
use trap::sysreg::{SysReg, SysRegAccess};

/// What a trapped debug-register access does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The vCPU's debug registers are now in the hardware: the instruction runs again.
    Loaded,
    /// Emulated: a read returns this value, a write is ignored.
    Value(u64),
    /// The register does not exist on this CPU.
    Undefined,
}

/// MDCR_EL2 for `vcpu` of a VM whose MDCR_EL2 is `vm_mdcr` as it enters its CPU: its debug
/// registers are loaded first if its breakpoints and watchpoints are enabled (MDSCR_EL1.MDE,
/// which its EL1 state, just restored, holds).
pub fn on_load(vm_mdcr: u64, vcpu: &mut Vcpu) {
    vcpu.debug_live = vcpu.el1.mdscr_el1 & MDSCR_EL1_MDE != 0;
    if vcpu.debug_live {
        vcpu.debug.restore();
    }
    el2_regs::load_mdcr(mdcr(vm_mdcr, vcpu.debug_live));
}

/// `vcpu` leaves its CPU: its debug registers go back to memory if they were live. What they
/// leave in the hardware is inert for whoever runs next (see the module's comment).
pub fn put(vcpu: &mut Vcpu) {
    if vcpu.debug_live {
        vcpu.debug.save();
        vcpu.debug_live = false;
    }
}

fn mdcr(vm_mdcr: u64, live: bool) -> u64 {
    if live { vm_mdcr & !MDCR_EL2_TDA } else { vm_mdcr | MDCR_EL2_TDA }
}

/// Breakpoints and watchpoints this CPU implements (ID_AA64DFR0_EL1.BRPs and .WRPs, + 1),
/// all of which the guest gets.
pub fn slots() -> (usize, usize) {
    let dfr0 = id_regs::read(IdReg::IdAa64Dfr0);
    (((dfr0 >> 12) & 0xf) as usize + 1, ((dfr0 >> 20) & 0xf) as usize + 1)
}

/// OSLSR_EL1 as guests read it: OSLM = 0b00 (no OS lock), OSLK = 0.
const OSLSR_NO_OS_LOCK: u64 = 0;

/// A trapped access (op0 = 2) of the loaded vCPU.
pub fn access(ctx: &mut ExitCtx, acc: &SysRegAccess) -> Access {
    let r = acc.encoding();
    match classify(r) {
        Class::Switched if !ctx.vcpu.debug_live => {
            load(ctx);
            Access::Loaded
        }
        // TDA is clear while the registers are live, so these no longer trap; if one does
        // (a CPU that traps more than MDCR_EL2 asks), the hardware has the guest's value.
        Class::Switched => Access::Value(0),
        Class::Slot { kind, index } => {
            let (brps, wrps) = slots();
            let count = if matches!(kind, SlotKind::Bvr | SlotKind::Bcr) { brps } else { wrps };
            if index >= count {
                return Access::Undefined;
            }
            if !ctx.vcpu.debug_live {
                load(ctx);
                return Access::Loaded;
            }
            Access::Value(0)
        }
        Class::Inert(value) => Access::Value(value),
    }
}

/// The vCPU's first debug-register access since it entered: its registers into the hardware,
/// and its accesses no longer trap.
fn load(ctx: &mut ExitCtx) {
    ctx.vcpu.debug.restore();
    ctx.vcpu.debug_live = true;
    // Takes effect at the guest's entry (`eret` synchronizes the context).
    el2_regs::load_mdcr(mdcr(ctx.vm.mdcr, true));
    stats::bump(&ctx.vm.stats.debug_loads);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotKind {
    Bvr,
    Bcr,
    Wvr,
    Wcr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// DBGBVR<n>_EL1, DBGBCR<n>_EL1, DBGWVR<n>_EL1, DBGWCR<n>_EL1.
    Slot { kind: SlotKind, index: usize },
    /// MDSCR_EL1 (in the EL1 state), MDCCINT_EL1: live with the slots.
    Switched,
    /// Emulated: reads return the value, writes are ignored.
    Inert(u64),
}

fn classify(r: SysReg) -> Class {
    use trap::sysreg::*;
    if r.op1() == 0 && r.crn() == 0 && r.op2() >= 4 {
        let kind = match r.op2() {
            4 => SlotKind::Bvr,
            5 => SlotKind::Bcr,
            6 => SlotKind::Wvr,
            _ => SlotKind::Wcr,
        };
        return Class::Slot { kind, index: r.crm() as usize };
    }
    match r {
        MDSCR_EL1 | MDCCINT_EL1 => Class::Switched,
        OSLSR_EL1 => Class::Inert(OSLSR_NO_OS_LOCK),
        // OSLAR_EL1, OSDLR_EL1, DBGPRCR_EL1, MDRAR_EL1, the claim tags, the DCC, OSECCR_EL1,
        // DBGAUTHSTATUS_EL1 and any other op0 = 2 encoding that traps (trace).
        _ => Class::Inert(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trap::sysreg;

    #[test]
    fn classes() {
        let slot = |op2, crm| classify(SysReg::new(2, 0, 0, crm, op2));
        assert_eq!(slot(4, 0), Class::Slot { kind: SlotKind::Bvr, index: 0 });
        assert_eq!(slot(5, 5), Class::Slot { kind: SlotKind::Bcr, index: 5 });
        assert_eq!(slot(6, 15), Class::Slot { kind: SlotKind::Wvr, index: 15 });
        assert_eq!(slot(7, 3), Class::Slot { kind: SlotKind::Wcr, index: 3 });
        for r in [sysreg::MDSCR_EL1, sysreg::MDCCINT_EL1] {
            assert_eq!(classify(r), Class::Switched, "{r}");
        }
        for r in [
            sysreg::OSLAR_EL1,
            sysreg::OSLSR_EL1,
            sysreg::OSDLR_EL1,
            sysreg::DBGPRCR_EL1,
            sysreg::DBGCLAIMSET_EL1,
            sysreg::DBGCLAIMCLR_EL1,
            sysreg::OSECCR_EL1,
            sysreg::MDCCSR_EL0,
            sysreg::DBGAUTHSTATUS_EL1,
            SysReg::new(2, 0, 1, 0, 0), // MDRAR_EL1
            SysReg::new(2, 3, 0, 4, 0), // DBGDTR_EL0
        ] {
            assert_eq!(classify(r), Class::Inert(0), "{r}");
        }
    }

    #[test]
    fn tda_follows_liveness() {
        let vm = 0x0000_0000_0000_0e00; // TDRA | TDOSA | TDA
        assert_eq!(mdcr(vm, true), 0x0c00);
        assert_eq!(mdcr(vm, false), 0x0e00);
        assert_eq!(mdcr(0x0c00, false), 0x0e00);
    }
}
