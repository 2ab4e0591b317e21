//! What an exit handler gets: the VM, the vCPU (locked), the syndrome, and where to record
//! the vCPUs its work wakes; with the operations every handler may need (step over the
//! instruction, inject an abort or an Undefined Instruction exception).

use super::vcpu::Vcpu;
use super::vm::Vm;
use super::wakeups::Wakeups;
use super::{Action, StopReason, stats};
use crate::arch::El1State;
use crate::arch::syndrome;
use addr::Ipa;
use alloc::format;
use trap::esr::Esr;
use trap::exit::{Exit, MmioAccess};
use trap::inject::AbortKind;

/// PSTATE.SS, the software step state bit, as SPSR_EL2 holds it (bit 21).
pub const SPSR_SS: u64 = 1 << 21;

/// Everything a handler needs about one exit.
pub struct ExitCtx<'a> {
    pub vm: &'a Vm,
    pub vcpu: &'a mut Vcpu,
    pub esr: Esr,
    /// The vCPUs (of this VM or others) the exit's handling made runnable or gave interrupts.
    pub wake: &'a mut Wakeups,
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
    /// The instruction has completed, as far as the guest can tell: if it was being stepped
    /// (MDSCR_EL1.SS, PSTATE.SS = 1: active-not-pending), the step ends here, so PSTATE.SS is
    /// cleared and the guest takes its software step exception before the next instruction,
    /// as KVM's `kvm_skip_instr` does. Left set, the guest would step two instructions at once.
    pub fn skip_instruction(&mut self) {
        self.vcpu.regs.elr += self.esr.instr_len();
        self.vcpu.regs.spsr &= !SPSR_SS;
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
