//! Lazy FP/SIMD and SVE switching (the KVM/ARM paper's design): a vCPU's FP/SIMD registers are
//! loaded only when it actually uses them after another vCPU did. Each physical CPU remembers
//! whose FP state its registers hold; entering any other vCPU sets CPTR_EL2.TFP and .TZ, and
//! that vCPU's first FP or SVE instruction traps here to swap the state.
//!
//! SVE (docs/design.md, "Lazy FP/SIMD and SVE"): a VM has it when every physical CPU has it
//! ([`machine_vq`]); each of its vCPUs then has an [`SveState`] save area. A vCPU's state is
//! kept as FP/SIMD state until its first SVE instruction (CPTR_EL2.TZ stays set while it owns
//! the registers), and from then until its reset as SVE state, at the machine's vector length.
//!
//! ```text
//!            FP trap (EC 0x07)                       SVE trap (EC 0x19)
//! not owner ─────────────────> owner, FP-only ─────────────────────────> owner, SVE
//!  (TFP, TZ)   save the owner,   (TZ)          its V registers become      (no traps)
//!              load its FP                     its Z registers, loaded
//! not owner ───────────────────────────────────────────────────────────> owner, SVE
//!  (TFP, TZ)   FP or SVE trap of a vCPU that used SVE: save the owner, load its SVE state
//! ```

use crate::arch::{SVE_MAX_VQ, SveState};
use crate::arch::{cpu, el2_regs};
use crate::exit_ctx::ExitCtx;
use crate::vcpu::Vcpu;
use crate::{Action, registry, stats};
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};

const NOBODY: usize = 0;

/// Per physical CPU: the vCPU whose FP state is in the registers, as `encode(vm, vcpu)`.
static OWNER: [AtomicUsize; cpu::MAX_CPUS] = [const { AtomicUsize::new(NOBODY) }; cpu::MAX_CPUS];

fn encode(vm: usize, vcpu: usize) -> usize {
    ((vm + 1) << 8) | vcpu
}

/// The SVE vector lengths of the CPUs recorded so far (bit `vq - 1` for `vq` quadwords): those
/// all of them support, those some of them do, and whether one has no SVE at all.
static SVE_COMMON: AtomicU16 = AtomicU16::new(u16::MAX);
static SVE_ANY: AtomicU16 = AtomicU16::new(0);
static SVE_MISSING: AtomicBool = AtomicBool::new(false);
/// What they make of the guests' vector length ([`guest_vq`]), 0 for no SVE: read on every
/// switch, so kept decided.
static MACHINE_VQ: AtomicUsize = AtomicUsize::new(0);

/// Adds one physical CPU's SVE to the machine's: the vector lengths it supports (bit `vq - 1`
/// for `vq` quadwords, as ZCR_EL2.LEN and RDVL find them) or `None` without SVE. Every CPU
/// records before the first guest runs (the boot's start barrier), so guests see one answer;
/// each record can only shorten the vector length or take SVE away.
pub fn record_cpu_sve(lengths: Option<u16>) {
    match lengths {
        Some(set) => {
            SVE_COMMON.fetch_and(set, Ordering::Relaxed);
            SVE_ANY.fetch_or(set, Ordering::Relaxed);
        }
        None => SVE_MISSING.store(true, Ordering::Relaxed),
    }
    let vq = if SVE_MISSING.load(Ordering::Relaxed) {
        None
    } else {
        guest_vq(SVE_COMMON.load(Ordering::Relaxed), SVE_ANY.load(Ordering::Relaxed))
    };
    MACHINE_VQ.store(vq.unwrap_or(0), Ordering::Release);
}

/// The vector length guests get, in quadwords (128 bits), or 0: no SVE for guests (a CPU
/// lacks it, or none has it).
pub fn machine_vq() -> usize {
    MACHINE_VQ.load(Ordering::Acquire)
}

/// The longest vector length (quadwords) a guest may use on CPUs that all support the lengths
/// in `common` and some support those in `any`: the longest all support such that no CPU
/// supports a shorter one the others lack, at most [`SVE_MAX_VQ`] (KVM's rule). A guest
/// picks its length with ZCR_EL1.LEN and gets the longest supported one below it: if CPUs
/// disagreed below the limit, the same ZCR_EL1 would give a vCPU different lengths on
/// different CPUs.
pub fn guest_vq(common: u16, any: u16) -> Option<usize> {
    let mut best = None;
    for vq in 1..=SVE_MAX_VQ {
        let bit = 1u16 << (vq - 1);
        if common & bit != any & bit {
            break;
        }
        if common & bit != 0 {
            best = Some(vq);
        }
    }
    best
}

/// Called when `vm`'s vCPU `vcpu` is about to run on this CPU.
#[cfg(not(feature = "eager-fp"))]
pub fn on_load(vm: usize, vcpu: &Vcpu) {
    let mine = OWNER[cpu::current()].load(Ordering::Relaxed) == encode(vm, vcpu.id);
    el2_regs::set_fp_traps(!mine, !(mine && uses_sve(vcpu)));
}

/// The `eager-fp` ablation: the registers change hands on every switch, used or not.
#[cfg(feature = "eager-fp")]
pub fn on_load(vm: usize, vcpu: &Vcpu) {
    let me = encode(vm, vcpu.id);
    let vq = machine_vq();
    el2_regs::set_fp_traps(false, vq == 0);
    let owner = OWNER[cpu::current()].swap(me, Ordering::Relaxed);
    if owner != me {
        save_owner(owner, vq);
        match &vcpu.sve {
            Some(sve) if sve.in_use => sve.restore(vq),
            _ => vcpu.fp.restore(),
        }
    }
    if vq != 0 && !uses_sve(vcpu) {
        // Its first SVE instruction still traps, to turn its state into SVE state.
        el2_regs::set_fp_traps(false, true);
    }
}

/// Its state is SVE state (which only a VM with SVE on a machine with SVE has).
fn uses_sve(vcpu: &Vcpu) -> bool {
    vcpu.sve.as_ref().is_some_and(|s| s.in_use)
}

/// Saves the live registers into `vcpu`, in the form it keeps them.
fn save_into(vcpu: &mut Vcpu, vq: usize) {
    match &mut vcpu.sve {
        Some(sve) if sve.in_use => sve.save(vq),
        _ => vcpu.fp.save(),
    }
}

/// Saves the registers into `owner`'s vCPU, unless it is nobody or its VM is gone.
fn save_owner(owner: usize, vq: usize) {
    if owner == NOBODY {
        return;
    }
    // The owner is pinned to this CPU and not running, so its lock is free.
    if let Some(vm) = registry::get((owner >> 8) - 1)
        && !vm.is_stopped()
        && let Some(slot) = vm.vcpus.get(owner & 0xff)
    {
        save_into(&mut slot.state.lock(), vq);
    }
}

/// Makes this CPU's registers hold `vcpu`'s state, as SVE state if it has used SVE or
/// `want_sve` (its first SVE instruction), and lifts the traps that state allows.
fn take_registers(vm: usize, vcpu: &mut Vcpu, want_sve: bool) {
    let me = encode(vm, vcpu.id);
    let vq = machine_vq();
    // CPTR_EL2 traps EL2's own FP and SVE accesses too: lifted before touching the registers.
    el2_regs::set_fp_traps(false, vq == 0);
    let owner = OWNER[cpu::current()].swap(me, Ordering::Relaxed);
    // Its state is in the registers already (an FP-only vCPU's first SVE instruction).
    let live = owner == me;
    if !live {
        save_owner(owner, vq);
    }
    match &mut vcpu.sve {
        Some(sve) if vq != 0 && (sve.in_use || want_sve) => {
            if !sve.in_use {
                // Its first SVE instruction since its reset: its FP/SIMD state becomes its
                // SVE state, and stays so. Loading it whole also clears what the previous
                // owner left in the upper halves of the Z registers, P0-P15 and FFR, which it
                // can read from now on.
                if live {
                    vcpu.fp.save();
                }
                sve.load_fp(&vcpu.fp, vq);
                sve.in_use = true;
                sve.restore(vq);
            } else if !live {
                sve.restore(vq);
            }
        }
        _ => {
            if !live {
                vcpu.fp.restore();
            }
            if vq != 0 {
                // An FP-only vCPU: the registers beyond its V registers are still another's,
                // out of its reach while SVE traps.
                el2_regs::set_fp_traps(false, true);
            }
        }
    }
}

/// The vCPU's first FP/SIMD instruction since it was loaded: take the registers over.
pub fn trap(ctx: &mut ExitCtx) -> Action {
    take_registers(ctx.vm.id, ctx.vcpu, false);
    stats::bump(&ctx.vm.stats.fp_switches);
    // Resume at the trapped instruction: it now runs with the vCPU's own registers.
    Action::Resume
}

/// An SVE instruction, or an access to ZCR_EL1, trapped by CPTR_EL2.TZ: the vCPU's first since
/// it was loaded, or since its reset. UNDEFINED in a VM without SVE, as its ID registers say.
pub fn sve_trap(ctx: &mut ExitCtx) -> Action {
    if ctx.vcpu.sve.is_none() || machine_vq() == 0 {
        log::debug!("{}: SVE instruction at PC {:#x}: UNDEFINED", ctx.vm.name, ctx.vcpu.regs.elr);
        return ctx.inject_undef();
    }
    take_registers(ctx.vm.id, ctx.vcpu, true);
    stats::bump(&ctx.vm.stats.sve_switches);
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
        let vq = machine_vq();
        el2_regs::set_fp_traps(false, vq == 0);
        save_into(vcpu, vq);
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

/// The save areas of a new VM's vCPUs: each with room for the machine's vector length if it
/// has SVE. VMs are built on the boot CPU before the others record theirs, which can only
/// shorten it.
pub fn new_sve_state() -> Option<SveState> {
    let vq = machine_vq();
    (vq != 0).then(|| SveState::new(vq))
}
