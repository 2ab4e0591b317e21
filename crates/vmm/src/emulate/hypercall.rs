//! HVC and SMC from guests: SMCCC function IDs routed to the architecture calls, PSCI, or
//! armhv's own calls (SMCCC "vendor specific hypervisor service", owner 6; their IDs are
//! `guest_abi::hypercall`'s). See docs/guest-abi.md for the list.

use super::psci;
use crate::bench;
use crate::exit_ctx::ExitCtx;
use crate::{Action, stats};
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use guest_abi::hypercall::{
    ARMHV_IO_STAMPS, ARMHV_NOP, ARMHV_VM_EXITS, ARMHV_VM_INFO, ARMHV_YIELD,
};
#[cfg(feature = "fault-injection")]
use guest_abi::hypercall::{
    ARMHV_TEST_CONSOLE_PANIC, ARMHV_TEST_HYP_FAULT, ARMHV_TEST_PANIC_HOLDING_DEVICES,
};
use trap::smccc::{FunctionId, NOT_SUPPORTED, Owner, SUCCESS};
use trap::speculation::{self, Plan, State};

/// SMCCC version 1.1.
const SMCCC_VERSION_1_1: u64 = 0x1_0001;

/// The calls whose answer is a constant, as (function ID, x0): the EL2 vector answers them
/// through the HVC conduit without leaving its code (the hypercall fast path), and `hvc`
/// and `smc` below give the same answers otherwise. Only x0 changes.
pub const FAST_CALLS: [(u32, u64); 3] = [
    (ARMHV_NOP, SUCCESS as u64),
    (smccc::psci::PSCI_VERSION, psci::PSCI_VERSION_1_1),
    (smccc::arch::SMCCC_VERSION, SMCCC_VERSION_1_1),
];

/// The Spectre-v2 and Spectre-BHB states of the machine: the worst over its CPUs, since a
/// vCPU may run on any of them. Every CPU records its plan before the first guest runs
/// (`reports::cpu_ready` waits for all of them), so guests see one final answer.
static SPECTRE_V2: AtomicU8 = AtomicU8::new(State::Unaffected as u8);
static SPECTRE_BHB: AtomicU8 = AtomicU8::new(State::Unaffected as u8);
static SPECTRE_KNOWN: AtomicBool = AtomicBool::new(false);

/// Adds one CPU's plan (`arch::aarch64::speculation`) to what guests are told.
pub fn record_speculation(plan: &Plan) {
    SPECTRE_V2.fetch_max(plan.v2_state() as u8, Ordering::Relaxed);
    SPECTRE_BHB.fetch_max(plan.bhb_state() as u8, Ordering::Relaxed);
    SPECTRE_KNOWN.store(true, Ordering::Release);
}

/// The machine's states; vulnerable until a CPU has said otherwise.
fn spectre_states() -> (State, State) {
    if !SPECTRE_KNOWN.load(Ordering::Acquire) {
        return (State::Vulnerable, State::Vulnerable);
    }
    let load = |s: &AtomicU8| State::from_u8(s.load(Ordering::Relaxed));
    (load(&SPECTRE_V2), load(&SPECTRE_BHB))
}

/// Adds the hypercalls the vector answered since the last exit (`FAST_CALLS`) to the VM's
/// statistics: they were exits and hypercalls like any other.
#[inline(always)]
pub fn count_fast_calls(vm: &crate::vm::Vm, regs: &mut crate::arch::GuestRegs) {
    if regs.fast_calls != 0 {
        count_fast_calls_slow(vm, regs);
    }
}

#[cold]
fn count_fast_calls_slow(vm: &crate::vm::Vm, regs: &mut crate::arch::GuestRegs) {
    let n = core::mem::take(&mut regs.fast_calls);
    vm.stats.exits.fetch_add(n, Ordering::Relaxed);
    vm.stats.hypercalls.fetch_add(n, Ordering::Relaxed);
}

pub fn hvc(ctx: &mut ExitCtx) -> Action {
    stats::bump(&ctx.vm.stats.hypercalls);
    // The cheapest round trip is what the benchmarks time: no decoding for it.
    if ctx.vcpu.regs.x[0] as u32 == ARMHV_NOP {
        bench::mark(bench::Path::Hypercall);
        ctx.vcpu.regs.x[0] = SUCCESS as u64;
        return Action::Resume;
    }
    // ELR_EL2 already points past an HVC.
    call(ctx)
}

/// SMC is trapped (HCR_EL2.TSC) and treated as the same calls: the firmware is not the guest's.
pub fn smc(ctx: &mut ExitCtx) -> Action {
    stats::bump(&ctx.vm.stats.smc);
    ctx.skip_instruction();
    call(ctx)
}

fn call(ctx: &mut ExitCtx) -> Action {
    let fid = FunctionId(ctx.vcpu.regs.x[0] as u32);
    let (action, result) = match fid.owner() {
        Owner::Arch => (Action::Resume, Some(arch_call(fid.0, ctx.vcpu.regs.x[1] as u32))),
        Owner::StandardSecure => psci::call(ctx, fid.0),
        Owner::VendorHyp => armhv_call(ctx, fid.0),
        _ => (Action::Resume, Some(NOT_SUPPORTED as u64)),
    };
    if let Some(x0) = result {
        ctx.vcpu.regs.x[0] = x0;
    }
    action
}

fn arch_call(fid: u32, arg: u32) -> u64 {
    match fid {
        smccc::arch::SMCCC_VERSION => SMCCC_VERSION_1_1,
        smccc::arch::SMCCC_ARCH_FEATURES => match arg {
            smccc::arch::SMCCC_VERSION => SUCCESS as u64,
            _ => {
                let (v2, bhb) = spectre_states();
                speculation::features(arg, v2, bhb).unwrap_or(NOT_SUPPORTED) as u64
            }
        },
        // The guest asks for the mitigation on its own behalf: armhv's exit path has just
        // done it (arch vectors), so there is nothing left but to say so; where nothing does
        // it, the function does not exist, as ARCH_FEATURES said.
        smccc::arch::SMCCC_ARCH_WORKAROUND_1 | smccc::arch::SMCCC_ARCH_WORKAROUND_3 => {
            let (v2, bhb) = spectre_states();
            match speculation::features(fid, v2, bhb) {
                Some(answer) if answer != NOT_SUPPORTED => SUCCESS as u64,
                _ => NOT_SUPPORTED as u64,
            }
        }
        _ => NOT_SUPPORTED as u64,
    }
}

fn armhv_call(ctx: &mut ExitCtx, fid: u32) -> (Action, Option<u64>) {
    match fid {
        ARMHV_NOP => (Action::Resume, Some(SUCCESS as u64)),
        ARMHV_VM_INFO => {
            let regs = &mut ctx.vcpu.regs;
            regs.x[1] = ctx.vm.id as u64;
            regs.x[2] = ctx.vcpu.id as u64;
            regs.x[3] = ctx.vm.vcpus.len() as u64;
            (Action::Resume, Some(SUCCESS as u64))
        }
        ARMHV_YIELD => {
            bench::mark(bench::Path::Yield);
            ctx.vcpu.regs.x[1] = 0; // the run loop sets it if another vCPU runs first
            ctx.vcpu.yielded = true;
            (Action::Yield, Some(SUCCESS as u64))
        }
        ARMHV_IO_STAMPS => {
            let (notify, irq) = ctx.vm.io_stamps.get();
            let regs = &mut ctx.vcpu.regs;
            regs.x[1] = notify;
            regs.x[2] = irq;
            regs.x[3] = ctx.vm.io_stamps.pmu as u64;
            (Action::Resume, Some(SUCCESS as u64))
        }
        ARMHV_VM_EXITS => {
            ctx.vcpu.regs.x[1] = ctx.vm.stats.exits.load(core::sync::atomic::Ordering::Relaxed);
            (Action::Resume, Some(SUCCESS as u64))
        }
        #[cfg(feature = "fault-injection")]
        ARMHV_TEST_HYP_FAULT => {
            crate::arch::fault::provoke_fault(0);
            unreachable!("armhv's fault injection returned")
        }
        #[cfg(feature = "fault-injection")]
        ARMHV_TEST_CONSOLE_PANIC => {
            crate::arch::fault::provoke_fault(1);
            unreachable!("armhv's fault injection returned")
        }
        #[cfg(feature = "fault-injection")]
        ARMHV_TEST_PANIC_HOLDING_DEVICES => {
            let _held_for_good = ctx.vm.devices.lock();
            crate::arch::fault::provoke_fault(2);
            unreachable!("armhv's fault injection returned")
        }
        _ => (Action::Resume, Some(NOT_SUPPORTED as u64)),
    }
}
