//! One vCPU on one physical CPU: putting its state into the hardware and taking it out again,
//! and its run loop, which enters the guest and handles exits until the vCPU needs the
//! scheduler.

use super::bench::{self, Class};
use super::emulate::{
    debug, fpsimd, hypercall, passthrough, pauth, pmu, ptimer, vgic, virtio_slot, vtimer,
};
use super::vcpu::Vcpu;
use super::vm::{STOPPED, Vm};
use super::wakeups::Wakeups;
use super::{Action, StopReason, earliest, exits, irq, sched, stats};
use crate::arch::ExitKind;
use crate::arch::timer;
use alloc::format;

/// Puts `vcpu`'s EL1 state into the hardware (FP/SIMD and the pointer-authentication keys
/// follow lazily: `emulate::fpsimd`, `emulate::pauth`; the PMU too unless it may be counting:
/// `emulate::pmu`; and the debug registers unless its breakpoints are enabled:
/// `emulate::debug`).
pub fn load(vm: &Vm, vcpu: &mut Vcpu) {
    bench::timed(Class::El1, || {
        vcpu.el1.restore();
        pauth::on_load();
        pmu::on_load(vm, vcpu);
    });
    bench::timed(Class::El2, || debug::on_load(vm.mdcr, vcpu));
    bench::timed(Class::Vgic, || vgic::load(vcpu));
    bench::timed(Class::Timer, || vtimer::on_load(vcpu));
    bench::timed(Class::FpSimd, || fpsimd::on_load(vm.id, vcpu));
}

/// Takes `vcpu`'s EL1 state out of the hardware.
pub fn put(vcpu: &mut Vcpu) {
    bench::timed(Class::El1, || {
        vcpu.el1.save();
        pauth::put(vcpu);
        pmu::put(vcpu);
    });
    bench::timed(Class::El2, || debug::put(vcpu));
    bench::timed(Class::Vgic, || vgic::put(vcpu));
}

/// Runs the (loaded) vCPU until it yields, blocks, resets or its VM stops. Exits that can be
/// handled without leaving the vCPU return here straight into the guest. armhv's timer is kept
/// armed for the end of the time slice, if any, or the emulated physical timer's deadline.
// Not inlined into the per-CPU loop: the guest's entry-exit loop keeps its registers to itself.
#[inline(never)]
pub fn run(vm: &Vm, vcpu: &mut Vcpu, slice_end: Option<u64>) -> Action {
    // armhv's timer is armed for `slice_end` and nothing has touched it since: only an
    // interrupt (its own firing) or the emulated physical timer change what it must be.
    let mut armed_for_slice = false;
    // The scheduler chose this vCPU before its VM began a reset or stopped, which then found
    // it not running yet and did not wait for it: its RAM may be being zeroed.
    if vm.is_held() {
        return Action::Block;
    }
    let mut wake = Wakeups::default();
    loop {
        bench::timed(Class::Timer, || {
            vtimer::sync(vm, vcpu);
            pmu::sync(vm, vcpu);
            if vcpu.ptimer.enabled() || vcpu.ptimer_asserted {
                timer::hyp_timer_set(earliest(slice_end, ptimer::sync(vm, vcpu)));
                armed_for_slice = false;
            } else if !armed_for_slice {
                // The guest does not use its physical timer.
                timer::hyp_timer_set(slice_end);
                armed_for_slice = true;
            }
        });
        if vm.device_backlog.is_set() {
            // Device work left from outside this VM's traps, done in its time.
            sched::notify(vm, virtio_slot::serve_backlog(vm));
        }
        let woken = bench::timed(Class::Vgic, || vgic::flush(vm, vcpu));
        sched::notify(vm, woken);
        let kind = vcpu.regs.enter();
        bench::on_exit(&vcpu.regs.stamps);
        stats::bump(&vm.stats.exits);
        hypercall::count_fast_calls(vm, &mut vcpu.regs);
        let woken = bench::timed(Class::Vgic, || vgic::sync(vm, vcpu));
        sched::notify(vm, woken);
        if !vm.assigned.is_empty() {
            passthrough::resample(vm, vcpu.id, &mut wake);
        }
        let action = match kind {
            ExitKind::Sync => exits::handle_sync(vm, vcpu, &mut wake),
            ExitKind::Irq | ExitKind::Fiq => {
                // At least once a tick: a guest that turned its caches on or off is seen.
                vm.memory.coherency().observe_live(vcpu.id, &mut vcpu.caches_seen);
                armed_for_slice = false;
                stats::bump(&vm.stats.irq);
                irq::handle_pending(Some((vm, &mut *vcpu)), &mut wake)
            }
            ExitKind::SError => Action::Stop(StopReason::Fault(format!(
                "SError from the guest at PC {:#x}",
                vcpu.regs.elr
            ))),
            ExitKind::AArch32 => Action::Stop(StopReason::Fault(format!(
                "exception from AArch32 state at PC {:#x}: armhv runs AArch64 guests only",
                vcpu.regs.elr
            ))),
        };
        if !wake.is_empty() {
            sched::wake_from(vm, &wake);
            wake.clear();
        }
        // One load for the three flags: most exits find none set.
        let flags = vm.flags();
        if flags != 0 {
            if flags & STOPPED != 0 {
                return Action::Stop(StopReason::PoweredOff);
            }
            return Action::Block; // resetting or paused
        }
        if !matches!(action, Action::Resume) {
            return action;
        }
    }
}
