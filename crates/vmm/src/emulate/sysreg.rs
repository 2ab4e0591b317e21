//! Trapped system-register accesses and system instructions (ESR_EL2.EC = 0x18).
//!
//! - ID registers (HCR_EL2.TID3) read the hardware value with the features armhv does not
//!   virtualize hidden, so a guest never tries to use them (the policy: `trap::id_regs`).
//! - The pointer-authentication key registers (HCR_EL2.APK) trap only until the vCPU's keys are
//!   loaded (`pauth`).
//! - Set/way cache maintenance (HCR_EL2.TSW) is performed as clean+invalidate.
//! - Debug registers (MDCR_EL2.TDA/TDOSA/TDRA) are the guest's own breakpoints, watchpoints
//!   and step, loaded at its first access (`debug`); the OS lock, DCC and debug ROM are inert.
//! - PMU registers are the vCPU's own virtual PMU's (`pmu`), or read as zero and ignore
//!   writes for a VM without one (`pmu = "off"`); a raw-PMU VM (`pmu = "raw"`) uses the
//!   physical PMU without trapping.
//! - ACTLR_EL1 (HCR_EL2.TACR) reads as zero and ignores writes.
//! - The EL1 physical timer (CNTP_*) is emulated (`ptimer`).
//! - The RAS error records (ERRIDR_EL1, ERRSELR_EL1, ERX*_EL1; HCR_EL2.TERR) are UNDEFINED,
//!   as on a CPU without FEAT_RAS, which is what ID_AA64PFR0_EL1.RAS = 0 tells the guest: they
//!   are the physical CPU's error records, which a guest must neither read, clear nor disable.
//! - Anything else is UNDEFINED for the guest, as on a CPU without that register.

use super::debug::Access;
use super::pmu;
use crate::arch::PmuMode;
use crate::arch::cache::clean_invalidate_set_way;
use crate::arch::id_regs as arch_id_regs;
use crate::exit_ctx::ExitCtx;
use crate::{Action, stats};
use trap::id_regs::{self, IdOptions, IdReg};
use trap::sysreg::{self, SysReg, SysRegAccess};

pub fn handle(ctx: &mut ExitCtx) -> Action {
    stats::bump(&ctx.vm.stats.sysreg);
    // The exit table sends only EC 0x18 here: its ISS alone says everything (the general
    // decode would read FAR and HPFAR too, for nothing; every IPI comes this way).
    let acc = SysRegAccess::from_iss(ctx.esr.iss());
    let reg = acc.encoding();
    let result = match reg {
        // Group 1 SGIs, first: the one trap here on a hot path (every IPI). They always trap
        // while HCR_EL2.IMO is set.
        sysreg::ICC_SGI1R_EL1 | sysreg::ICC_ASGI1R_EL1 => {
            if !acc.read {
                let value = ctx.vcpu.regs.get(acc.rt);
                let woken = ctx.vm.vgic.lock().send_sgi(ctx.vcpu.id, value);
                // The target is told (its CPU kicked) now, not at the end of this exit through
                // `ctx.wake`: the kick starts the receiver's half of the IPI, so everything
                // between here and the end of the exit was latency. No lock is held here (the
                // vGIC's was released above), as when the run loop notifies after a flush.
                crate::sched::notify(ctx.vm, woken);
                stats::bump(&ctx.vm.stats.sgi);
            }
            Some(0)
        }
        // The first key-register access since the vCPU was loaded (HCR_EL2.APK clear).
        r if super::pauth::is_key_register(r) => return super::pauth::trap(ctx),
        // Group 0 does not exist for guests.
        sysreg::ICC_SGI0R_EL1 => Some(0),
        r if r.is_feature_id() => {
            let sve = ctx.vcpu.sve.is_some() && super::fpsimd::machine_vq() != 0;
            let pmu = ctx.vm.spec.pmu != PmuMode::Off;
            Some(id_register(r, IdOptions { pmu, sve }))
        }
        // Traps because ICC_SRE_EL2.Enable = 0. The system-register interface is always on,
        // IRQ/FIQ bypass disabled: SRE | DFB | DIB.
        sysreg::ICC_SRE_EL1 => Some(0x7),
        r if r.is_set_way() => {
            clean_invalidate_set_way(ctx.vcpu.regs.get(acc.rt));
            Some(0)
        }
        sysreg::ACTLR_EL1 => Some(0),
        r if let Some(timer_reg) = super::ptimer::register(r) => {
            let value = ctx.vcpu.regs.get(acc.rt);
            Some(super::ptimer::access(ctx, timer_reg, acc.read, value))
        }
        r if is_debug(r) => match super::debug::access(ctx, &acc) {
            // The instruction runs again, on the vCPU's own registers now loaded.
            Access::Loaded => return Action::Resume,
            Access::Value(value) => Some(value),
            Access::Undefined => None,
        },
        r if pmu::is_pmu(r) => {
            let value = ctx.vcpu.regs.get(acc.rt);
            pmu::access(ctx, r, acc.read, value)
        }
        r if is_error_record(r) => None,
        _ => None,
    };
    match result {
        Some(value) => {
            if acc.read {
                ctx.vcpu.regs.set(acc.rt, value);
            }
            ctx.skip_instruction();
            Action::Resume
        }
        None => {
            log::debug!(
                "{}: unhandled {} at PC {:#x}: UNDEFINED",
                ctx.vm.name,
                acc,
                ctx.vcpu.regs.elr
            );
            ctx.inject_undef()
        }
    }
}

/// RAS error-record registers: op0=3, op1=0, CRn=5, CRm=3..=5 (ERRIDR_EL1, ERRSELR_EL1,
/// ERXFR/CTLR/STATUS/ADDR_EL1, ERXPFG*, ERXMISC0..3_EL1).
fn is_error_record(r: SysReg) -> bool {
    r.op0() == 3 && r.op1() == 0 && r.crn() == 5 && (3..=5).contains(&r.crm())
}

/// Debug registers (and the OS lock registers): op0 = 2.
fn is_debug(r: SysReg) -> bool {
    r.op0() == 2
}

/// The ID register value the guest sees: this CPU's, as `trap::id_regs` sanitizes it. Encodings
/// of the ID space it does not pass through read as zero (as the architecture requires for
/// reserved ID encodings).
fn id_register(r: SysReg, options: IdOptions) -> u64 {
    match IdReg::from_sysreg(r) {
        Some(reg) => id_regs::guest_value(reg, arch_id_regs::read(reg), options),
        None => 0,
    }
}
