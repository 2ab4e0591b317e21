//! Which vCPU each physical CPU runs: a round-robin over the vCPUs placed on it, with a 10 ms
//! time slice when several are runnable. (The credit scheduler replaces the policy; the
//! loaded-state bookkeeping stays.)
//!
//! A vCPU's EL1, vGIC and FP/SIMD state stays in the hardware after it stops running and is
//! only saved when a different vCPU is about to run on this CPU. A vCPU in WFI is not run
//! until an interrupt is deliverable to it; an idle CPU sleeps in WFI with armhv's timer armed
//! for the earliest timer deadline (virtual or emulated physical) of its blocked vCPUs.

use super::bench::{self, Class};
use super::vcpu::Power;
use super::vcpu::earliest;
use super::vm::Vm;
use super::{Action, irq, ptimer, vm, vtimer};
use crate::arch::aarch64::{cpu, firmware, timer};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use spin::Once;

/// Time slice when several vCPUs are runnable on one physical CPU.
const QUANTUM_US: u64 = 10_000;

static VMS: Once<Vec<Arc<Vm>>> = Once::new();
/// Per physical CPU: the vCPU inside `Vcpu::run`, as `(vm + 1) << 8 | vcpu`, or 0.
static RUNNING: [AtomicUsize; cpu::MAX_CPUS] = [const { AtomicUsize::new(0) }; cpu::MAX_CPUS];

/// Per physical CPU: when the running vCPU's time slice ends (`u64::MAX`: no other vCPU waits).
static SLICE_END: [AtomicU64; cpu::MAX_CPUS] = [const { AtomicU64::new(u64::MAX) }; cpu::MAX_CPUS];

/// Whether the running vCPU's time slice on this CPU is over (armhv's timer also fires for
/// emulated-timer deadlines, which end no slice).
pub fn slice_over() -> bool {
    timer::now() >= SLICE_END[cpu::current()].load(Ordering::Relaxed)
}

/// Whether `vm`'s vCPU `vcpu` is the one running on this physical CPU right now.
pub fn is_running_here(vm: usize, vcpu: usize) -> bool {
    RUNNING[cpu::current()].load(Ordering::Relaxed) == ((vm + 1) << 8 | vcpu)
}
static LIVE_VMS: AtomicUsize = AtomicUsize::new(0);

/// Per physical CPU: exactly one vCPU is placed on it, so there is never a choice to make.
static ALONE: [AtomicBool; cpu::MAX_CPUS] = [const { AtomicBool::new(false) }; cpu::MAX_CPUS];

/// Whether this CPU runs a single vCPU (and nothing else).
pub fn alone_here() -> bool {
    ALONE[cpu::current()].load(Ordering::Relaxed)
}

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
        super::usage::final_report();
        bench::report();
        log::info!(
            "all VMs have stopped ({} KiB of heap in use): powering off",
            crate::mm::heap::used_bytes() / 1024
        );
        firmware::system_off();
    }
}

/// Whether the vCPU can run now. A vCPU in WFI becomes runnable when an interrupt is
/// deliverable to it (for one that is not loaded, its virtual timer is checked in software).
fn runnable(vm: &Vm, index: usize, loaded: bool) -> bool {
    let slot = &vm.vcpus[index];
    if vm.is_stopped() || vm.is_resetting() || slot.power() == Power::Off {
        return false;
    }
    if !slot.in_wfi() {
        return true;
    }
    if let Some(mut vcpu) = slot.state.try_lock() {
        // A loaded vCPU's virtual timer is live in the hardware and raises its own interrupt.
        if !loaded {
            vtimer::check_saved(vm, &mut vcpu);
        }
        ptimer::sync(vm, &mut vcpu);
    }
    if vm.vgic.lock().pending_for(index) {
        slot.set_wfi(false);
        return true;
    }
    false
}

/// The per-CPU loop: never returns.
pub fn run_cpu(this_cpu: usize) -> ! {
    let placed = placed_on(this_cpu);
    super::usage::cpu_ready(); // the baseline is taken once every CPU has its list
    ALONE[this_cpu].store(placed.len() == 1, Ordering::Relaxed);
    // Index into `placed` of the vCPU whose state is in the hardware, and its VM's generation
    // then.
    let mut loaded: Option<usize> = None;
    let mut loaded_generation = 0;
    let mut next = 0;
    loop {
        // A VM reset while this CPU slept (or ran another vCPU) also makes what the registers
        // hold stale: the vCPU must be loaded afresh, and never `put` over its reset state.
        if let Some(i) = loaded
            && (placed[i].0.is_stopped()
                || placed[i].0.is_resetting()
                || placed[i].0.generation() != loaded_generation)
        {
            loaded = None; // its state dies with it
        }
        let mut chosen = None;
        let mut others_runnable = false;
        for step in 0..placed.len() {
            let i = (next + step) % placed.len();
            let (vm, index) = &placed[i];
            if runnable(vm, *index, loaded == Some(i)) {
                if chosen.is_none() {
                    chosen = Some(i);
                } else {
                    others_runnable = true;
                    break;
                }
            }
        }
        let Some(i) = chosen else {
            idle(&placed, loaded);
            continue;
        };
        let (vm, index) = &placed[i];
        let slot = &vm.vcpus[*index];
        let mut vcpu = slot.state.lock();
        let generation = vm.generation();
        if slot.power() == Power::Starting && loaded == Some(i) {
            // CPU_ON gives it a fresh state: what the registers hold from before its CPU_OFF
            // (EL1 registers, list registers) must not survive.
            loaded = None;
        }
        slot.take_start(vm.id, &mut vcpu);
        if slot.power() != Power::On {
            continue;
        }
        if loaded != Some(i) {
            if let Some(old) = loaded {
                let (old_vm, old_index) = &placed[old];
                old_vm.vcpus[*old_index].state.lock().put();
            }
            load_vm_registers(vm);
            vcpu.load(vm.id);
            loaded = Some(i);
            loaded_generation = generation;
            bench::switched();
            if vcpu.yielded {
                vcpu.regs.x[1] = 1; // ARMHV_YIELD: another vCPU ran meanwhile
            }
        }
        vcpu.yielded = false;
        // The slice also ends when a timer of a vCPU sleeping here expires: otherwise a vCPU
        // that never blocks keeps the CPU, and the sleeper, past its deadline.
        // A deadline already past whose vCPU still is not runnable (its interrupt cannot be
        // delivered) waits a quantum, not an interrupt storm.
        let now = timer::now();
        let quantum_end = now + timer::micros_to_ticks(QUANTUM_US);
        let wake = sleepers_deadline(&placed, i).map(|d| if d > now { d } else { quantum_end });
        let slice_end = earliest(others_runnable.then_some(quantum_end), wake);
        SLICE_END[this_cpu].store(slice_end.unwrap_or(u64::MAX), Ordering::Relaxed);
        next = i + 1;
        slot.set_running(true);
        RUNNING[this_cpu].store((vm.id + 1) << 8 | index, Ordering::Relaxed);
        let action = vcpu.run(vm, slice_end);
        RUNNING[this_cpu].store(0, Ordering::Relaxed);
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
    }
}

/// The earliest timer deadline of the vCPUs placed here, other than `chosen`, that wait in
/// WFI (they are not loaded: their saved timer state is current).
fn sleepers_deadline(placed: &[(Arc<Vm>, usize)], chosen: usize) -> Option<u64> {
    let mut deadline = None;
    for (i, (vm, index)) in placed.iter().enumerate() {
        let slot = &vm.vcpus[*index];
        if i == chosen || !slot.in_wfi() || slot.power() != Power::On || vm.is_stopped() {
            continue;
        }
        if let Some(mut vcpu) = slot.state.try_lock() {
            deadline = earliest(deadline, ptimer::sync(vm, &mut vcpu));
            deadline = earliest(deadline, vtimer::saved_deadline(vm, &vcpu));
        }
    }
    deadline
}

/// The VM's EL2 registers: Stage-2 table, virtual counter offset, debug and PMU traps.
fn load_vm_registers(vm: &Vm) {
    use crate::arch::aarch64::stage2;
    bench::timed(Class::Stage2, || stage2::load_vttbr(vm.vttbr));
    bench::timed(Class::Timer, || stage2::load_cntvoff(vm.cntvoff));
    bench::timed(Class::El2, || {
        stage2::load_mdcr(vm.mdcr);
        stage2::load_vm_done();
    });
}

/// Nothing to run: sleep until an interrupt (a kick, a timer) and handle it.
fn idle(placed: &[(Arc<Vm>, usize)], loaded: Option<usize>) {
    let mut deadline: Option<u64> = None;
    for (i, (vm, index)) in placed.iter().enumerate() {
        let slot = &vm.vcpus[*index];
        if !slot.in_wfi() || slot.power() != Power::On || vm.is_stopped() {
            continue;
        }
        let mut vcpu = slot.state.lock();
        deadline = earliest(deadline, ptimer::sync(vm, &mut vcpu));
        // The loaded vCPU's virtual timer interrupts by itself.
        if Some(i) != loaded {
            deadline = earliest(deadline, vtimer::saved_deadline(vm, &vcpu));
        }
    }
    timer::hyp_timer_set(deadline);
    // WFI wakes on a pending interrupt even though EL2 runs with interrupts masked.
    aarch64_cpu::asm::wfi();
    match loaded {
        // The loaded vCPU's virtual timer is live in the hardware and may be what woke us.
        Some(i) if !placed[i].0.is_stopped() => {
            let (vm, index) = &placed[i];
            let mut vcpu = vm.vcpus[*index].state.lock();
            irq::handle_pending(Some((vm, &mut vcpu)));
        }
        _ => {
            irq::handle_pending(None);
        }
    }
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
