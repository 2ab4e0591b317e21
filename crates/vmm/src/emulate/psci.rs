//! PSCI as a guest sees it: armhv emulates the firmware interface for each VM's vCPUs.

use crate::exit_ctx::ExitCtx;
use crate::vcpu::Power;
use crate::{Action, StopReason};
use smccc::psci::*;

pub const PSCI_VERSION_1_1: u64 = 0x1_0001;
/// MIGRATE_INFO_TYPE: no Trusted OS that needs migrating.
const TOS_NOT_PRESENT: u64 = 2;

fn err(e: i32) -> u64 {
    e as i64 as u64
}

/// Returns what to do next and the value for x0 (None: the call set the registers itself).
pub fn call(ctx: &mut ExitCtx, fid: u32) -> (Action, Option<u64>) {
    let x1 = ctx.vcpu.regs.x[1];
    let x2 = ctx.vcpu.regs.x[2];
    let x3 = ctx.vcpu.regs.x[3];
    match fid {
        PSCI_VERSION => (Action::Resume, Some(PSCI_VERSION_1_1)),
        PSCI_FEATURES => (Action::Resume, Some(features(x1 as u32))),
        PSCI_MIGRATE_INFO_TYPE => (Action::Resume, Some(TOS_NOT_PRESENT)),
        PSCI_CPU_ON_64 => (Action::Resume, Some(cpu_on(ctx, x1, x2, x3))),
        PSCI_CPU_ON_32 => (
            Action::Resume,
            Some(cpu_on(ctx, x1 & 0xffff_ffff, x2 & 0xffff_ffff, x3 & 0xffff_ffff)),
        ),
        PSCI_AFFINITY_INFO_64 | PSCI_AFFINITY_INFO_32 => {
            (Action::Resume, Some(affinity_info(ctx, x1, x2)))
        }
        PSCI_CPU_SUSPEND_64 | PSCI_CPU_SUSPEND_32 => {
            // A standby request: returning at once is a valid implementation (as for WFI).
            (Action::Reschedule, Some(0))
        }
        PSCI_CPU_OFF => cpu_off(ctx),
        PSCI_SYSTEM_OFF => (Action::Stop(StopReason::PoweredOff), Some(0)),
        // The run loop begins the reset (`lifecycle::begin_reset`): the vCPU zeroes the RAM
        // next, as the scheduler gives it time, and the reset gives every vCPU new registers.
        PSCI_SYSTEM_RESET => (Action::Reset, None),
        _ => (Action::Resume, Some(err(error::NOT_SUPPORTED))),
    }
}

fn features(fid: u32) -> u64 {
    match fid {
        PSCI_VERSION
        | PSCI_FEATURES
        | PSCI_MIGRATE_INFO_TYPE
        | PSCI_CPU_ON_64
        | PSCI_CPU_ON_32
        | PSCI_AFFINITY_INFO_64
        | PSCI_AFFINITY_INFO_32
        | PSCI_CPU_OFF
        | PSCI_SYSTEM_OFF
        | PSCI_SYSTEM_RESET => 0,
        // CPU_SUSPEND: original power_state format, no OS-initiated mode.
        PSCI_CPU_SUSPEND_64 | PSCI_CPU_SUSPEND_32 => 0,
        _ => err(error::NOT_SUPPORTED),
    }
}

/// The vCPU index a guest MPIDR names (Aff0 = vCPU index; higher levels must be zero).
fn target(ctx: &ExitCtx, mpidr: u64) -> Option<usize> {
    let aff = mpidr & 0xff_00ff_ffff;
    if aff >> 8 != 0 {
        return None;
    }
    let index = aff as usize;
    (index < ctx.vm.vcpus.len()).then_some(index)
}

fn cpu_on(ctx: &mut ExitCtx, mpidr: u64, entry: u64, context: u64) -> u64 {
    let Some(index) = target(ctx, mpidr) else {
        return err(error::INVALID_PARAMETERS);
    };
    if index == ctx.vcpu.id {
        return err(error::ALREADY_ON);
    }
    if !ctx.vm.memory.contains(addr::Ipa(entry)) || entry & 3 != 0 {
        return err(error::INVALID_ADDRESS);
    }
    // As KVM: CPU_ON completes at once for the guest. A vCPU started but not yet scheduled
    // is ON (AFFINITY_INFO) and a second CPU_ON for it gets ALREADY_ON, never ON_PENDING,
    // which guests and test suites written against KVM do not expect.
    if !ctx.vm.vcpus[index].request_start(entry, context) {
        return err(error::ALREADY_ON);
    }
    ctx.wake.started(ctx.vm.id, index);
    0
}

fn affinity_info(ctx: &ExitCtx, mpidr: u64, level: u64) -> u64 {
    if level != 0 {
        return err(error::INVALID_PARAMETERS);
    }
    match target(ctx, mpidr) {
        None => err(error::INVALID_PARAMETERS),
        Some(i) if i == ctx.vcpu.id => 0,
        Some(i) => match ctx.vm.vcpus[i].power() {
            // Starting is ON for the guest: its CPU_ON has returned SUCCESS (see `cpu_on`).
            Power::On | Power::Starting => 0,
            Power::Off => 1,
        },
    }
}

fn cpu_off(ctx: &mut ExitCtx) -> (Action, Option<u64>) {
    ctx.vm.vcpus[ctx.vcpu.id].set_power(Power::Off);
    let others_on = ctx.vm.vcpus.iter().any(|v| v.power() != Power::Off);
    if others_on {
        (Action::Block, Some(0))
    } else {
        (Action::Stop(StopReason::PoweredOff), Some(0))
    }
}
