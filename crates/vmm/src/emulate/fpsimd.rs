//! Lazy FP/SIMD switching (the KVM/ARM paper's design): a vCPU's FP/SIMD registers are loaded
//! only when it actually uses them after another vCPU did. Each physical CPU remembers whose
//! FP state its registers hold; entering any other vCPU sets CPTR_EL2.TFP, and that vCPU's
//! first FP instruction traps here to swap the state.

use crate::arch::FpState;
use crate::arch::{cpu, el2_regs};
use crate::exit_ctx::ExitCtx;
use crate::vcpu::Vcpu;
use crate::{Action, registry, stats};
use core::sync::atomic::{AtomicUsize, Ordering};

const NOBODY: usize = 0;

/// Per physical CPU: the vCPU whose FP state is in the registers, as `encode(vm, vcpu)`.
static OWNER: [AtomicUsize; cpu::MAX_CPUS] = [const { AtomicUsize::new(NOBODY) }; cpu::MAX_CPUS];

fn encode(vm: usize, vcpu: usize) -> usize {
    ((vm + 1) << 8) | vcpu
}

/// Called when `vm`'s vCPU `vcpu` is about to run on this CPU.
#[cfg(not(feature = "eager-fp"))]
pub fn on_load(vm: usize, vcpu: usize, _fp: &FpState) {
    let owner = OWNER[cpu::current()].load(Ordering::Relaxed);
    el2_regs::set_fp_trap(owner != encode(vm, vcpu));
}

/// The `eager-fp` ablation: the registers change hands on every switch, used or not.
#[cfg(feature = "eager-fp")]
pub fn on_load(vm: usize, vcpu: usize, fp: &FpState) {
    let me = encode(vm, vcpu);
    el2_regs::set_fp_trap(false);
    let owner = OWNER[cpu::current()].swap(me, Ordering::Relaxed);
    if owner != me {
        save_owner(owner);
        fp.restore();
    }
}

/// Saves the registers into `owner`'s vCPU, unless it is nobody or its VM is gone.
fn save_owner(owner: usize) {
    if owner == NOBODY {
        return;
    }
    // The owner is pinned to this CPU and not running, so its lock is free.
    if let Some(vm) = registry::get((owner >> 8) - 1)
        && !vm.is_stopped()
        && let Some(slot) = vm.vcpus.get(owner & 0xff)
    {
        slot.state.lock().fp.save();
    }
}

/// The vCPU's first FP/SIMD instruction since it was loaded: take the registers over.
pub fn trap(ctx: &mut ExitCtx) -> Action {
    let me = encode(ctx.vm.id, ctx.vcpu.id);
    // CPTR_EL2.TFP traps EL2's own FP accesses too: lift it before touching the registers.
    el2_regs::set_fp_trap(false);
    let owner = OWNER[cpu::current()].swap(me, Ordering::Relaxed);
    if owner != me {
        save_owner(owner);
    }
    ctx.vcpu.fp.restore();
    stats::bump(&ctx.vm.stats.fp_switches);
    // Resume at the trapped instruction: it now runs with the vCPU's own registers.
    Action::Resume
}

/// `vcpu` (of VM `vm`) may run on another CPU next: if this CPU's registers hold its FP/SIMD
/// state, it goes back to memory.
pub fn release(vm: usize, vcpu: &mut Vcpu) {
    let me = encode(vm, vcpu.id);
    if OWNER[cpu::current()]
        .compare_exchange(me, NOBODY, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        el2_regs::set_fp_trap(false);
        vcpu.fp.save();
    }
}

/// A stopped VM's state is gone: its registers must not be saved into it later.
pub fn forget_vm(vm: usize) {
    for owner in &OWNER {
        let _ = owner.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| {
            (o != NOBODY && (o >> 8) - 1 == vm).then_some(NOBODY)
        });
    }
}

/// A vCPU was reset (PSCI CPU_ON after CPU_OFF): whatever its registers held is stale.
pub fn on_reset(vm: usize, vcpu: usize) {
    let me = encode(vm, vcpu);
    for owner in &OWNER {
        let _ = owner.compare_exchange(me, NOBODY, Ordering::Relaxed, Ordering::Relaxed);
    }
}
