//! Exit handling: one table, indexed by the exception class in ESR_EL2, as in the ARM ARM.
//! Each handler decodes its own syndrome (with the portable `trap` crate) and says what the run
//! loop does next.

use super::emulate::{fpsimd, hypercall, mmio, pauth, sysreg};
use super::exit_ctx::ExitCtx;
use super::vcpu::Vcpu;
use super::vm::Vm;
use super::wakeups::Wakeups;
use super::{Action, stats};
use crate::arch::syndrome;
use alloc::format;
use trap::esr::{Esr, ec};

type Handler = fn(&mut ExitCtx) -> Action;

/// The exit table: ESR_EL2.EC -> handler.
static HANDLERS: [Handler; 64] = {
    let mut t: [Handler; 64] = [unexpected; 64];
    t[ec::WFX as usize] = wfx;
    t[ec::FP_ASIMD as usize] = fpsimd::trap;
    t[ec::SVE as usize] = fpsimd::sve_trap;
    t[ec::PAC as usize] = pauth::trap;
    // SME, hidden from guests, traps (CPTR_EL2.TSM): UNDEFINED, as on a CPU without it.
    t[ec::SME as usize] = hidden_feature;
    t[ec::HVC64 as usize] = hypercall::hvc;
    t[ec::SMC64 as usize] = hypercall::smc;
    t[ec::SYS64 as usize] = sysreg::handle;
    t[ec::IABT_LOW as usize] = instruction_abort;
    t[ec::DABT_LOW as usize] = data_abort;
    // A guest's 32-bit user code reaching a trapped coprocessor register (CP15 timer and ID
    // registers, CP14 debug).
    t[ec::CP15_32 as usize] = aarch32_coprocessor;
    t[ec::CP15_64 as usize] = aarch32_coprocessor;
    t[ec::CP14_MR as usize] = aarch32_coprocessor;
    t[ec::CP14_LS as usize] = aarch32_coprocessor;
    t[ec::CP14_64 as usize] = aarch32_coprocessor;
    t[ec::CP10_ID as usize] = aarch32_coprocessor;
    t
};

/// A synchronous exit of `vcpu`: handled by its exception class's handler, which records the
/// vCPUs its work wakes in `wake`.
pub fn handle_sync(vm: &Vm, vcpu: &mut Vcpu, wake: &mut Wakeups) -> Action {
    let esr = Esr(syndrome::esr());
    let mut ctx = ExitCtx { vm, vcpu, esr, wake };
    HANDLERS[(esr.ec() & 0x3f) as usize](&mut ctx)
}

/// WFI: the vCPU blocks until an interrupt is deliverable to it (at once, if one already is);
/// its CPU idles or runs another vCPU meanwhile. WFE: it yields.
fn wfx(ctx: &mut ExitCtx) -> Action {
    stats::bump(&ctx.vm.stats.wfx);
    // An idle guest's caches, seen (`coherency`): it may sleep through several ticks.
    ctx.vm.memory.coherency().observe_live(ctx.vcpu.id, &mut ctx.vcpu.caches_seen);
    ctx.skip_instruction();
    // ISS bit 0 (TI): 0 = WFI, 1 = WFE.
    if ctx.esr.iss() & 1 != 0 {
        return Action::Yield;
    }
    let slot = &ctx.vm.vcpus[ctx.vcpu.id];
    slot.set_wfi(true);
    // Checked after publishing the wait: an interrupt injected in between kicks this CPU.
    if ctx.vm.vgic.lock().pending_for(ctx.vcpu.id) {
        slot.set_wfi(false);
        return Action::Resume;
    }
    Action::Block
}

/// A data abort: an emulated device's access (`mmio`), an access outside the VM, or an error
/// the memory system reported for the guest's own access.
fn data_abort(ctx: &mut ExitCtx) -> Action {
    if trap::esr::is_external_abort(ctx.esr.iss() as u8) {
        return external_abort(ctx, true);
    }
    mmio::data_abort(ctx)
}

/// A synchronous external abort (or parity/ECC error) on the guest's own access: with
/// HCR_EL2.TEA set they come to EL2 instead of the guest's vectors, so that armhv sees every
/// memory error a guest causes. Its syndrome names no IPA (HPFAR_EL2 is not valid for it), so
/// it is never emulated: it goes back to the guest as the abort it was.
fn external_abort(ctx: &mut ExitCtx, data: bool) -> Action {
    if let Some(n) = ctx.abort_worth_logging() {
        log::warn!(
            "{}: external abort on its own {} at PC {:#x} ({}): injected back (abort #{n})",
            ctx.vm.name,
            if data { "access" } else { "instruction fetch" },
            ctx.vcpu.regs.elr,
            ctx.esr
        );
    }
    ctx.inject_abort(data)
}

/// An instruction fetch from an IPA the VM was not given.
fn instruction_abort(ctx: &mut ExitCtx) -> Action {
    if trap::esr::is_external_abort(ctx.esr.iss() as u8) {
        return external_abort(ctx, false);
    }
    if let Some(n) = ctx.abort_worth_logging() {
        log::warn!(
            "{}: instruction fetch outside its memory at PC {:#x}: injecting a prefetch abort \
             (abort #{n})",
            ctx.vm.name,
            ctx.vcpu.regs.elr
        );
    }
    ctx.inject_abort(false)
}

/// The AArch64 accessors of these registers are emulated; their AArch32 forms, reachable only
/// from a guest's EL0, are not: the instruction is UNDEFINED for the guest's user process, as
/// on a CPU without them. It must never end the VM.
fn aarch32_coprocessor(ctx: &mut ExitCtx) -> Action {
    log::debug!(
        "{}: AArch32 coprocessor access ({}) at PC {:#x}: UNDEFINED",
        ctx.vm.name,
        ctx.esr,
        ctx.vcpu.regs.elr
    );
    ctx.inject_undef()
}

/// An instruction of a feature the ID registers hide (`trap::id_regs`) that the hardware has
/// and traps: UNDEFINED for the guest, never the end of its VM.
fn hidden_feature(ctx: &mut ExitCtx) -> Action {
    log::debug!(
        "{}: {} at PC {:#x}: a hidden feature, UNDEFINED",
        ctx.vm.name,
        ctx.esr,
        ctx.vcpu.regs.elr
    );
    ctx.inject_undef()
}

fn unexpected(ctx: &mut ExitCtx) -> Action {
    ctx.fault(&format!(
        "unexpected exit class {:#x} ({})",
        ctx.esr.ec(),
        trap::esr::ec_name(ctx.esr.ec())
    ))
}
