//! The mechanics of a VM's life after it was built, as `manage` asks for them: reset (PSCI
//! SYSTEM_RESET, `restart`), pause and resume, stop (SYSTEM_OFF, a fault, a command), the
//! zeroing of its RAM in between (`scrub`), and the release of what it held.
//!
//! ```text
//!  running ──reset──> resetting: its vCPUs leave their guests, one zeroes its RAM
//!     ^                    │     (run_scrub_slice), then finish_reset (and manage::reset_done)
//!     └────────────────────┘
//!  running, paused or resetting ──stop──> stopped: vCPUs leave, devices released, RAM
//!                                 zeroed, network ports left; then (the caller)
//!                                 manage::stop_done ends the VM's life: RAM and heap go back
//! ```

use super::emulate::uart::VmUart;
use super::emulate::{fpsimd, machine_disk, network, passthrough, virtio_slot};
use super::scrub::Step;
use super::vcpu::{Power, Vcpu};
use super::vm::{PAUSED, RESETTING, STOPPED, Vm};
use super::{Action, irq, irqdist, sched, stats};
use crate::arch::{cpu, timer};
use core::sync::atomic::Ordering;

/// PSCI SYSTEM_RESET from vCPU `caller`, or a `restart` (no caller: vCPU 0 does the work): the
/// VM stops running and that vCPU, in its turns on its CPU, zeroes its RAM (`scrub`) and then
/// restarts it alone ([`finish_reset`]). A vCPU that asks while another's reset is under way
/// (both at once) joins that one. A paused VM runs again after it.
pub fn begin_reset(vm: &Vm, caller: Option<usize>) {
    // SeqCst: paired with the check of a vCPU about to enter its guest (`run::run`).
    if vm.set(RESETTING) {
        return;
    }
    vm.clear(PAUSED);
    vm.generation.fetch_add(1, Ordering::AcqRel);
    leave_guests(vm, caller);
    // No vCPU of it runs: its assigned devices go quiet before its next life.
    passthrough::quiesce(vm);
    // Devices write into the VM only under its device lock and not while it resets: once the
    // lock is free, a delivery that was under way has ended.
    drop(vm.devices.lock());
    let owner = caller.unwrap_or(0);
    vm.scrub.begin_reset(owner);
    if caller.is_none() {
        sched::start(vm, owner);
    }
}

/// `pause`: the VM's vCPUs leave their guests and stay out, and its devices take nothing in
/// (`Vm::is_held`). Its timers go on counting: an interrupt that falls due meanwhile is
/// pending when it resumes, as after any time the guest did not run.
pub fn pause(vm: &Vm) {
    vm.set(PAUSED);
    leave_guests(vm, None);
}

/// `resume`: the vCPUs that were on run again.
pub fn resume(vm: &Vm) {
    vm.clear(PAUSED);
    for (i, slot) in vm.vcpus.iter().enumerate() {
        if slot.power() == Power::On {
            sched::start(vm, i);
        }
    }
}

/// The end of a reset, once its RAM is zero (`caller` is the state of the vCPU that did it):
/// fresh images and devices, vCPU 0 at the entry point and the others off, and the VM runs
/// again.
fn finish_reset(vm: &Vm, caller: &mut Vcpu) {
    if let Err(why) = vm.load_guest() {
        log::error!("{}: reset failed: {why}", vm.name);
    }
    // Queues set up by the old kernel point into RAM the new one owns: forgotten.
    devices_to_power_on(vm);
    passthrough::connect(vm);
    for (i, slot) in vm.vcpus.iter().enumerate() {
        slot.set_power(Power::Off);
        // A vCPU caught in WFI is not waiting any more: left set, the flag kept it from ever
        // being scheduled when CPU_ON started it again (Linux's secondaries).
        slot.set_wfi(false);
        if i != caller.id {
            let mut vcpu = slot.state.lock();
            vcpu.reset(0, 0);
            fpsimd::on_reset(vm.id, i);
            if i == 0 {
                vm.boot_vcpu0(&mut vcpu);
            }
        }
    }
    caller.reset(0, 0);
    fpsimd::on_reset(vm.id, caller.id);
    if caller.id == 0 {
        vm.boot_vcpu0(caller);
    }
    stats::bump(&vm.stats.resets);
    vm.clear(RESETTING);
    sched::start(vm, 0);
}

/// Makes every vCPU of the VM but `except` (the caller's own) leave its guest, and waits until
/// none runs.
fn leave_guests(vm: &Vm, except: Option<usize>) {
    sched::kick_vm(vm);
    for (i, slot) in vm.vcpus.iter().enumerate() {
        if Some(i) != except {
            while slot.is_running() {
                cpu::wait_for_event();
            }
        }
    }
}

/// Ends the VM (once): its vCPUs leave their guests (the others notice at their next exit),
/// and one of them zeroes its RAM (`scrub`), after which the stop is reported
/// ([`report_stop`]). Returns false if it had already stopped.
pub fn stop(vm: &Vm) -> bool {
    // Its FP/SIMD registers a CPU still holds must not be saved into it later. (Its PMU
    // registers go back to armhv at the next load there: `pmu::release_stale` puts them into
    // a scratch area for a vCPU that does not hold them live, such as one of a later life.)
    fpsimd::forget_vm(vm.id);
    // SeqCst: paired with the checks of a vCPU about to enter its guest (`run::run`) and of a
    // reset about to complete (`scrub`).
    if vm.set(STOPPED) {
        return false;
    }
    if let Some(uart) = vm.devices.lock().device_mut::<VmUart>() {
        uart.flush();
    }
    // Nothing of the guest may outlive it in memory that armhv could hand out again: once no
    // vCPU of it runs (nor a slice of a reset's zeroing), its RAM is zeroed.
    leave_guests(vm, None);
    // After the vCPUs (a reset completing meanwhile connects them again).
    passthrough::release(vm);
    // Another VM's frame in flight to this one, or console input, is delivered under the
    // device lock, and not to a stopped VM: once the lock is free, none is under way.
    drop(vm.devices.lock());
    if let Some(owner) = vm.scrub.begin_stop() {
        sched::start(vm, owner);
    }
    true
}

/// The stopped VM's RAM is zero: its NICs leave their networks. Its life can end
/// (`manage::stop_done`, which the caller calls).
fn stopped(vm: &Vm) {
    vm.memory.zeroed();
    for nic in &vm.nics {
        network::leave(nic.network, nic.port);
    }
}

/// What a zeroing job completed, for `manage` to hear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completed {
    /// A reset: the VM runs again.
    Reset,
    /// A stop: the VM holds nothing but its RAM (zero) and heap, which its end gives back.
    Stop,
}

/// Puts `vm`'s devices back in their power-on state (a reset; the end of the VM). Its vCPUs
/// must not be running. A disk keeps its contents.
pub fn devices_to_power_on(vm: &Vm) {
    {
        let mut devices = vm.devices.lock();
        if let Some(uart) = devices.device_mut::<VmUart>() {
            uart.reset();
        }
        virtio_slot::reset_all(&mut devices);
    }
    for nic in &vm.nics {
        network::reset_port(nic);
    }
    let mut gic = vm.vgic.lock();
    if let Ok(fresh) = vgic::Vgic::with_clean_flags(gic.config(), vm.vgic_clean.clone()) {
        *gic = fresh;
        irqdist::reapply(vm, &mut gic);
    }
}

/// The zeroing job's owner has its turn on this CPU (`owner` is its state, locked): zeroes
/// pieces of the RAM until the job is done, `until` has passed, or the CPU is wanted
/// elsewhere; the CPU's interrupts are taken between two pieces. At the end of the job it
/// restarts the VM (a reset) or ends the stop, and says which. Returns what the scheduler
/// does with the owner: `Reschedule` while work is left (it stays runnable), else `Block`, or
/// `Reschedule` for a vCPU the reset left powered on (vCPU 0: it runs its guest next).
pub fn run_scrub_slice(
    vm: &Vm,
    owner: &mut Vcpu,
    until: Option<u64>,
) -> (Action, Option<Completed>) {
    let stopped_before = vm.is_stopped();
    if machine_disk::in_flight_for(vm.id) {
        // The machine disk may still write into this RAM: zeroed once its requests are done
        // (none starts meanwhile, `emulate::machine_disk`).
        return (Action::Reschedule, None);
    }
    loop {
        match vm.scrub.next(vm.memory.pieces(), || vm.is_stopped()) {
            Step::Zero(index) => {
                vm.memory.zero_piece(index);
                vm.scrub.zeroed(index);
            }
            Step::Reset => {
                finish_reset(vm, owner);
                return (after_job(vm, owner.id), Some(Completed::Reset));
            }
            Step::Report => {
                stopped(vm);
                return (Action::Block, Some(Completed::Stop));
            }
            Step::WaitForStop => return (Action::Reschedule, None),
            Step::Done => return (after_job(vm, owner.id), None),
        }
        let action = irq::handle_pending_now(None);
        if !matches!(action, Action::Resume) {
            return (action, None); // the scheduler wants the CPU
        }
        // A stop waits for this slice to end before it takes the job over.
        if vm.is_stopped() != stopped_before || until.is_some_and(|t| timer::now() >= t) {
            return (Action::Reschedule, None);
        }
    }
}

fn after_job(vm: &Vm, index: usize) -> Action {
    if vm.vcpus[index].power() == Power::On && !vm.is_stopped() {
        Action::Reschedule
    } else {
        Action::Block
    }
}
