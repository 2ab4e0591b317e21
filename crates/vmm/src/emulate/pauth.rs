//! Lazy switching of the pointer-authentication keys (FEAT_PAuth), as KVM does it: each vCPU
//! has its own five keys, which are in the hardware only from its first use of them after it
//! was loaded until it is put.
//!
//! Loading a vCPU clears HCR_EL2.API and APK, so its first PAC instruction (ESR_EL2.EC 0x09)
//! or key-register access (EC 0x18) traps here: its keys go into the key registers, API and
//! APK are set, and the instruction runs again, now without trapping; it and every later one
//! until the vCPU is put. Putting it saves its keys if they were loaded. A guest that never
//! uses pointer authentication (or a CPU without it) costs nothing, one that does costs one
//! trap per load (counted as `pauth-switches`), not one per instruction. Unlike FP/SIMD, the
//! keys are saved at once when the vCPU is put, not when the next user of the registers
//! traps: ten registers cost little to save, and no CPU ever holds another vCPU's keys, so
//! nothing about them needs tracking across CPUs, resets or stopped VMs.

use crate::arch::{IdReg, cpu, el2_regs, id_regs};
use crate::exit_ctx::ExitCtx;
use crate::vcpu::Vcpu;
use crate::{Action, stats};
use core::sync::atomic::{AtomicBool, Ordering};
use trap::sysreg::SysReg;

/// Per physical CPU: the loaded vCPU's keys are in the key registers, and HCR_EL2.API and APK
/// are set. False (traps on) at boot, as `configure_hcr` leaves them. Only its own CPU reads
/// or writes an entry, so a load and a store do (no atomic read-modify-write on the switch
/// path).
static LIVE: [AtomicBool; cpu::MAX_CPUS] = [const { AtomicBool::new(false) }; cpu::MAX_CPUS];

/// APIAKeyLo_EL1 .. APGAKeyHi_EL1: op0=3, op1=0, CRn=2, CRm=1..=3 (op2 0..3: Lo, Hi of the
/// A key, Lo, Hi of the B key; CRm=3 is APGAKey, op2 0..1).
pub fn is_key_register(r: SysReg) -> bool {
    r.op0() == 3 && r.op1() == 0 && r.crn() == 2 && (1..=3).contains(&r.crm())
}

/// A vCPU is about to run on this CPU: whatever the key registers hold (the last vCPU's keys,
/// saved when it was put, or those of one reset or stopped since, which must not be saved)
/// is not its, so its first use traps.
pub fn on_load() {
    let live = &LIVE[cpu::current()];
    if live.load(Ordering::Relaxed) {
        live.store(false, Ordering::Relaxed);
        el2_regs::set_pauth_trap(true);
    }
}

/// `vcpu` leaves this CPU: its keys, if it loaded them, go back to memory.
pub fn put(vcpu: &mut Vcpu) {
    let live = &LIVE[cpu::current()];
    if live.load(Ordering::Relaxed) {
        live.store(false, Ordering::Relaxed);
        vcpu.pauth.save();
        el2_regs::set_pauth_trap(true);
    }
}

/// The vCPU's first PAC instruction or key-register access since it was loaded: its keys
/// go in, and the instruction runs again.
pub fn trap(ctx: &mut ExitCtx) -> Action {
    let (isar1, isar2) = (id_regs::read(IdReg::IdAa64Isar1), id_regs::read(IdReg::IdAa64Isar2));
    if !trap::id_regs::has_pauth(isar1, isar2) {
        // Not from a guest on this CPU, which has no key registers to trap: whatever it was
        // is UNDEFINED here.
        return ctx.inject_undef();
    }
    if LIVE[cpu::current()].load(Ordering::Relaxed) {
        return ctx.fault(
            "pointer-authentication trap with the vCPU's keys loaded: HCR_EL2.API/APK are \
             set, so this CPU should not have trapped (a bug in armhv's key switching)",
        );
    }
    ctx.vcpu.pauth.restore();
    el2_regs::set_pauth_trap(false);
    LIVE[cpu::current()].store(true, Ordering::Relaxed);
    stats::bump(&ctx.vm.stats.pauth_switches);
    // Not stepped over: the instruction runs again with the vCPU's own keys.
    Action::Resume
}
