//! Which vCPU each physical CPU runs: for now a round-robin over the vCPUs placed on it.
//! (The credit scheduler replaces the policy; the loaded-state bookkeeping stays.)
//!
//! A vCPU's EL1 and FP/SIMD state stays in the hardware after it stops running and is only
//! saved when a different vCPU is about to run on this CPU.

use super::vcpu::Power;
use super::vm::Vm;
use super::{Action, vm};
use crate::arch::aarch64::{cpu, firmware, stage2};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use spin::Once;

static VMS: Once<Vec<Arc<Vm>>> = Once::new();
static LIVE_VMS: AtomicUsize = AtomicUsize::new(0);

pub fn install(vms: Vec<Arc<Vm>>) {
    LIVE_VMS.store(vms.len(), Ordering::Release);
    VMS.call_once(|| vms);
}

pub fn vms() -> &'static [Arc<Vm>] {
    VMS.get().map(|v| v.as_slice()).unwrap_or(&[])
}

/// The vCPUs placed on physical CPU `cpu`, as (VM, vCPU index).
fn placed_on(cpu: usize) -> Vec<(Arc<Vm>, usize)> {
    let mut list = Vec::new();
    for vm in vms() {
        for (i, &p) in vm.placement.iter().enumerate() {
            if p == cpu {
                list.push((vm.clone(), i));
            }
        }
    }
    list
}

/// Stops a VM and, when it was the last one running, powers the machine off.
pub fn stop_vm(vm: &vm::Vm, reason: &super::StopReason) {
    super::fpsimd::forget_vm(vm.id);
    if vm.stop(reason) && LIVE_VMS.fetch_sub(1, Ordering::AcqRel) == 1 {
        log::info!(
            "all VMs have stopped ({} KiB of heap in use): powering off",
            crate::mm::heap::used_bytes() / 1024
        );
        firmware::system_off();
    }
}

/// The per-CPU loop: never returns.
pub fn run_cpu(this_cpu: usize) -> ! {
    let placed = placed_on(this_cpu);
    // (index into `placed`) of the vCPU whose state is in the hardware.
    let mut loaded: Option<usize> = None;
    let mut next = 0;
    loop {
        let mut ran = false;
        for step in 0..placed.len() {
            let i = (next + step) % placed.len();
            let (vm, vcpu_index) = &placed[i];
            if vm.is_stopped() || vm.is_resetting() {
                if loaded == Some(i) {
                    loaded = None; // its state dies with it
                }
                continue;
            }
            let slot = &vm.vcpus[*vcpu_index];
            if slot.power() == Power::Off {
                continue;
            }
            let mut vcpu = slot.state.lock();
            slot.take_start(vm.id, &mut vcpu);
            if slot.power() != Power::On {
                continue;
            }
            if loaded != Some(i) {
                if let Some(old) = loaded {
                    let (old_vm, old_index) = &placed[old];
                    old_vm.vcpus[*old_index].state.lock().put();
                }
                stage2::load_vm(vm.vttbr, vm.cntvoff);
                vcpu.load(vm.id);
                loaded = Some(i);
            }
            ran = true;
            next = i + 1;
            let generation = vm.generation();
            slot.set_running(true);
            let action = vcpu.run(vm);
            drop(vcpu);
            slot.set_running(false);
            if vm.generation() != generation || vm.is_resetting() {
                loaded = None; // the VM was reset: what the registers hold is stale
            }
            match action {
                Action::Resume | Action::Yield | Action::Block => {}
                Action::Stop(reason) => {
                    loaded = None;
                    stop_vm(vm, &reason);
                }
            }
            break;
        }
        if !ran {
            cpu::wait_for_event();
        }
    }
}

/// Wakes CPUs idling in `run_cpu` (e.g. after PSCI CPU_ON made a vCPU runnable).
pub fn kick_all() {
    cpu::send_event();
}

/// Makes every physical CPU that runs one of `vm`'s vCPUs leave its guest and look again.
pub fn kick_vm(vm: &Vm) {
    let mut cpus = 0u16;
    for &p in &vm.placement {
        if p != cpu::current() {
            cpus |= 1 << p;
        }
    }
    crate::drivers::gic::kick(cpus);
    cpu::send_event();
}
