//! The guest's EL1 physical timer (CNTP_*), emulated in software.
//!
//! armhv schedules with its own EL2 timer (CNTHP) and does not give the guest the physical
//! timer: CNTHCTL_EL2.EL1PCEN = 0 traps CNTP_CTL/CVAL/TVAL, and `gtimer::EmulatedTimer` answers.
//! The guest reads the physical counter directly (EL1PCTEN = 1, no offset), so the emulated
//! timer compares against the same counter. Its output drives virtual PPI 30; armhv's timer is
//! armed for its deadline while the vCPU runs or sleeps in WFI, and the line is re-evaluated on
//! every entry.

use crate::arch::timer;
use crate::exit_ctx::ExitCtx;
use crate::vcpu::Vcpu;
use crate::vm::Vm;
use gtimer::TimerReg;
use trap::sysreg::{self, SysReg};

/// The non-secure EL1 physical timer's architected PPI, as the guest sees it.
pub const PTIMER_INTID: u32 = guest_abi::map::PTIMER_INTID;

/// Which emulated register `reg` is, if it is one of CNTP_*.
pub fn register(reg: SysReg) -> Option<TimerReg> {
    match reg {
        sysreg::CNTP_CTL_EL0 => Some(TimerReg::Ctl),
        sysreg::CNTP_CVAL_EL0 => Some(TimerReg::Cval),
        sysreg::CNTP_TVAL_EL0 => Some(TimerReg::Tval),
        _ => None,
    }
}

/// A trapped CNTP_* access; returns the value a read gives.
pub fn access(ctx: &mut ExitCtx, reg: TimerReg, read: bool, value: u64) -> u64 {
    let now = timer::now();
    if read {
        return ctx.vcpu.ptimer.read(reg, now);
    }
    ctx.vcpu.ptimer.write(reg, value, now);
    sync(ctx.vm, ctx.vcpu);
    0
}

/// Drives the timer's output onto its virtual PPI; returns when armhv's timer must fire next
/// for it. Cheap when the guest does not use the timer: no counter read.
pub fn sync(vm: &Vm, vcpu: &mut Vcpu) -> Option<u64> {
    if !vcpu.ptimer.enabled() && !vcpu.ptimer_asserted {
        return None;
    }
    let now = timer::now();
    let level = vcpu.ptimer.output(now);
    if level != vcpu.ptimer_asserted {
        vcpu.ptimer_asserted = level;
        // The vCPU lives on this physical CPU, which re-reads the vGIC before entering it:
        // nobody to kick.
        vm.vgic.lock().set_level(PTIMER_INTID, vcpu.id, level);
    }
    vcpu.ptimer.deadline(now)
}
