//! Exit handling: one table, indexed by the exception class in ESR_EL2, as in the ARM ARM.
//! Each handler decodes its own syndrome (with the portable `trap` crate) and says what the run
//! loop does next.

use super::vcpu::Vcpu;
use super::vm::Vm;
use super::{Action, StopReason, fpsimd, hypercall, mmio, stats, sysreg};
use crate::arch::aarch64::el1_state::El1State;
use crate::arch::aarch64::syndrome;
use addr::Ipa;
use alloc::format;
use trap::esr::{Esr, ec};
use trap::exit::{Exit, MmioAccess};
use trap::inject::AbortKind;

/// Everything a handler needs about one exit.
pub struct ExitCtx<'a> {
    pub vm: &'a Vm,
    pub vcpu: &'a mut Vcpu,
    pub esr: Esr,
}

impl ExitCtx<'_> {
    /// The exit decoded. FAR_EL2 and HPFAR_EL2 are read here, by the handlers that need them
    /// (aborts), not on every exit: nothing at EL2 traps in between to overwrite them.
    pub fn exit(&self) -> Exit {
        trap::exit::decode(self.esr.0, syndrome::far(), syndrome::hpfar())
    }

    /// For a data abort: the load or store to emulate and its IPA, if the syndrome describes
    /// one (`trap::exit::decode_mmio`); `None` sends the abort down the general path.
    #[inline]
    pub fn mmio_access(&self) -> Option<(Ipa, MmioAccess)> {
        trap::exit::decode_mmio(self.esr.iss(), syndrome::far(), syndrome::hpfar())
    }

    /// Steps over the trapped instruction (for traps that report the instruction itself).
    pub fn skip_instruction(&mut self) {
        self.vcpu.regs.elr += self.esr.instr_len();
    }

    /// Makes the guest take a synchronous external abort for the faulting access.
    pub fn inject_abort(&mut self, data: bool) -> Action {
        let kind = if data {
            // ISS.WnR (bit 6) of the data abort being reflected.
            AbortKind::Data { write: self.esr.iss() & (1 << 6) != 0 }
        } else {
            AbortKind::Instruction
        };
        let inj = trap::inject::inject_abort(self.vcpu.regs.spsr, El1State::live_sctlr(), kind);
        self.deliver(inj, syndrome::far());
        stats::bump(&self.vm.stats.aborts_injected);
        Action::Resume
    }

    /// Makes the guest take an Undefined Instruction exception at the trapped instruction.
    pub fn inject_undef(&mut self) -> Action {
        let inj = trap::inject::inject_undef(self.vcpu.regs.spsr, El1State::live_sctlr());
        self.deliver(inj, 0);
        stats::bump(&self.vm.stats.undef_injected);
        Action::Resume
    }

    /// Enters the guest's EL1 exception vector as the architecture would for `inj`.
    fn deliver(&mut self, inj: trap::inject::Injection, far: u64) {
        let regs = &mut self.vcpu.regs;
        El1State::write_live_fault(inj.esr_el1, far, regs.elr, regs.spsr);
        regs.elr = El1State::live_vbar() + inj.vector_offset;
        regs.spsr = inj.new_spsr;
    }

    /// Whether to report the abort about to be injected: the first few of a VM, then ever more
    /// rarely (the 32nd, 64th, ...), each with its number. A guest looping on a fault must not
    /// flood the console every VM shares.
    pub fn abort_worth_logging(&self) -> Option<u64> {
        let n = self.vm.stats.aborts_injected.load(core::sync::atomic::Ordering::Relaxed) + 1;
        (n <= 16 || n.is_power_of_two()).then_some(n)
    }

    pub fn fault(&self, what: &str) -> Action {
        Action::Stop(StopReason::Fault(format!(
            "{what} at PC {:#x} ({})",
            self.vcpu.regs.elr, self.esr
        )))
    }
}

type Handler = fn(&mut ExitCtx) -> Action;

/// The exit table: ESR_EL2.EC -> handler.
static HANDLERS: [Handler; 64] = {
    let mut t: [Handler; 64] = [unexpected; 64];
    t[ec::WFX as usize] = wfx;
    t[ec::FP_ASIMD as usize] = fpsimd::trap;
    t[ec::HVC64 as usize] = hypercall::hvc;
    t[ec::SMC64 as usize] = hypercall::smc;
    t[ec::SYS64 as usize] = sysreg::handle;
    t[ec::IABT_LOW as usize] = instruction_abort;
    t[ec::DABT_LOW as usize] = mmio::data_abort;
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

pub fn handle_sync(vm: &Vm, vcpu: &mut Vcpu) -> Action {
    let esr = Esr(syndrome::esr());
    let mut ctx = ExitCtx { vm, vcpu, esr };
    HANDLERS[(esr.ec() & 0x3f) as usize](&mut ctx)
}

/// WFI: the vCPU blocks until an interrupt is deliverable to it (at once, if one already is);
/// its CPU idles or runs another vCPU meanwhile. WFE: it yields.
fn wfx(ctx: &mut ExitCtx) -> Action {
    stats::bump(&ctx.vm.stats.wfx);
    ctx.skip_instruction();
    // ISS bit 0 (TI): 0 = WFI, 1 = WFE.
    if ctx.esr.iss() & 1 != 0 {
        super::sched::yield_cpu();
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

/// An instruction fetch from an IPA the VM was not given.
fn instruction_abort(ctx: &mut ExitCtx) -> Action {
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

fn unexpected(ctx: &mut ExitCtx) -> Action {
    ctx.fault(&format!(
        "unexpected exit class {:#x} ({})",
        ctx.esr.ec(),
        trap::esr::ec_name(ctx.esr.ec())
    ))
}
