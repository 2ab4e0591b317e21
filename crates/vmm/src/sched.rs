//! Which vCPU each physical CPU runs.
//!
//! A CPU is one of two kinds, fixed when the VMs are installed:
//!
//! * **Dedicated**: exactly one vCPU may ever run there (it is pinned there and no other vCPU's
//!   affinity includes the CPU). There is nothing to decide: the CPU runs that vCPU whenever it
//!   is runnable and sleeps otherwise, and a kick simply resumes it. This is the fast path the
//!   microbenchmarks measure, and what a consolidated system gives its latency-critical vCPUs.
//! * **Shared**: the credit scheduler (crate `credit`, one instance behind one lock) decides,
//!   from weights, caps, real-time servers, run queues and load balancing. This module only
//!   reports events to it (a vCPU blocked in WFI, was woken by an interrupt, was started, used
//!   up its slice, yielded) and carries out its decisions.
//!
//! A vCPU's EL1, vGIC and FP/SIMD state stays in the hardware after it stops running and is
//! only saved when a different vCPU is about to run on the CPU, as long as the vCPU is pinned.
//! A vCPU that may migrate is saved as soon as its run ends, so that any CPU can load it next
//! (KVM saves on every vcpu_put; pinning keeps the cheaper lazy path).
//!
//! A blocked vCPU whose timer is not live in the hardware is watched by the CPU whose run queue
//! holds it: armhv's timer is armed for the earliest such deadline, whether the CPU idles or
//! runs another vCPU, so that a timer interrupt reaches the scheduler when it is due.

use super::vcpu::Power;
use super::vm::Vm;
use super::wakeups::Wakeups;
use super::{irqdist, registry};
use crate::arch::{cpu, timer};
use crate::sync::{Class, Lock, LockGuard};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use credit::{CpuSet, Scheduler};
use spin::Once;
use vgic::VcpuSet;

static CREDIT: Once<Lock<Scheduler>> = Once::new();
/// Per physical CPU: the vCPU inside `run::run`, as `(vm + 1) << 8 | vcpu`, or 0.
pub(super) static RUNNING: [AtomicUsize; cpu::MAX_CPUS] =
    [const { AtomicUsize::new(0) }; cpu::MAX_CPUS];
/// Per physical CPU: when the running vCPU's time slice ends (`u64::MAX`: no other vCPU waits).
pub(super) static SLICE_END: [AtomicU64; cpu::MAX_CPUS] =
    [const { AtomicU64::new(u64::MAX) }; cpu::MAX_CPUS];
/// Per physical CPU: the only vCPU that may run there, as `(vm + 1) << 8 | vcpu`, or 0 (shared).
pub(super) static DEDICATED: [AtomicUsize; cpu::MAX_CPUS] =
    [const { AtomicUsize::new(0) }; cpu::MAX_CPUS];
/// Per physical CPU: the scheduler asked it to choose again (a preemption, or a vCPU to pick up).
pub(super) static RESCHED: [AtomicBool; cpu::MAX_CPUS] =
    [const { AtomicBool::new(false) }; cpu::MAX_CPUS];
/// Per physical CPU: the vCPU it runs yielded; told to the scheduler with the next decision,
/// under the same lock.
pub(super) static YIELDED: [AtomicBool; cpu::MAX_CPUS] =
    [const { AtomicBool::new(false) }; cpu::MAX_CPUS];
/// The scheduler's quantum in counter ticks, readable without its lock.
pub(super) static QUANTUM: AtomicU64 = AtomicU64::new(0);

pub(super) fn key(vm: usize, vcpu: usize) -> usize {
    (vm + 1) << 8 | vcpu
}

pub(super) fn credit_vcpu(vm: usize, index: usize) -> credit::Vcpu {
    credit::Vcpu { vm, index }
}

pub(super) fn scheduler() -> LockGuard<'static, Scheduler> {
    CREDIT.get().expect("the scheduler is installed before any CPU schedules").lock()
}

/// Whether the running vCPU's time slice on this CPU is over (armhv's timer also fires for
/// emulated-timer deadlines, which end no slice).
pub fn slice_over() -> bool {
    timer::now() >= SLICE_END[cpu::current()].load(Ordering::Relaxed)
}

/// Whether the scheduler asked this CPU to choose again since it last looked (and forgets it).
pub fn take_resched() -> bool {
    RESCHED[cpu::current()].swap(false, Ordering::AcqRel)
}

/// Whether `vm`'s vCPU `vcpu` is the one running on this physical CPU right now.
pub fn is_running_here(vm: usize, vcpu: usize) -> bool {
    RUNNING[cpu::current()].load(Ordering::Relaxed) == key(vm, vcpu)
}

/// Sets up the scheduler for the boot package's VMs (`specs`, by id; `assigned`, each one's
/// assigned devices) on a machine of `cpus` CPUs: the credit scheduler gets every vCPU of every
/// VM, running or not (pinned ones with their CPU as affinity, the others with every CPU), and
/// the CPUs that only one vCPU may ever use become dedicated. A VM's vCPUs become runnable when
/// it starts ([`vm_begins`]).
pub fn install(
    specs: &[vmconfig::VmSpec<'static>],
    assigned: &[&[crate::vm::AssignedDevice]],
    cpus: usize,
    spec: &vmconfig::SchedSpec,
) {
    let ticks_per_ms = timer::frequency() / 1000;
    let params = credit::Params::new(cpus, ticks_per_ms, u64::from(spec.quantum_ms))
        .unwrap_or_else(|e| panic!("scheduler parameters checked by vmconfig: {e}"));
    QUANTUM.store(params.quantum, Ordering::Relaxed);
    let mut sched = Scheduler::new(params);
    let all = CpuSet::first(cpus);
    let mut users = [0usize; cpu::MAX_CPUS];
    // A CPU beyond the machine's makes the VM fail to build (`create`): counted as any.
    let pinned = |c: &Option<u32>| c.map(|c| c as usize).filter(|&c| c < cpus);
    for (id, vm) in specs.iter().enumerate() {
        let affinity: Vec<CpuSet> =
            vm.affinity().iter().map(|a| pinned(a).map_or(all, CpuSet::single)).collect();
        for set in &affinity {
            set.iter().for_each(|c| users[c] += 1);
        }
        let rt = vm.sched.realtime.map(|rt| credit::RealTime {
            budget: timer::micros_to_ticks(u64::from(rt.budget_us)),
            period: timer::micros_to_ticks(u64::from(rt.period_us)),
        });
        let params = credit::VmParams { weight: vm.sched.weight, cap: vm.sched.cap, realtime: rt };
        let added = sched.add_vm(params, &affinity).unwrap_or_else(|e| {
            panic!("{}: scheduling parameters checked by vmconfig: {e}", vm.name)
        });
        debug_assert_eq!(added, id);
    }
    let mut placements = Vec::with_capacity(specs.len());
    for (id, vm) in specs.iter().enumerate() {
        let mut placement = Vec::with_capacity(vm.affinity().len());
        for (i, a) in vm.affinity().iter().enumerate() {
            match pinned(a) {
                Some(c) if users[c] == 1 => {
                    DEDICATED[c].store(key(id, i), Ordering::Relaxed);
                    placement.push(c);
                }
                _ => placement.push(sched.cpu_of(credit_vcpu(id, i))),
            }
        }
        placements.push(placement);
    }
    irqdist::install(specs, assigned, &placements, cpus, spec.irqdist);
    CREDIT.call_once(|| Lock::new(Class::Scheduler, sched));
}

/// VM `vm` begins a life: each vCPU is placed where the scheduler holds it (or on its
/// dedicated CPU), and those that are on are made runnable.
pub fn vm_begins(vm: &Vm) {
    for (i, slot) in vm.vcpus.iter().enumerate() {
        match vm.affinity[i] {
            Some(c) if is_dedicated(vm.id, i, c) => slot.set_cpu(c),
            _ => slot.set_cpu(scheduler().cpu_of(credit_vcpu(vm.id, i))),
        }
        if slot.power() == Power::On {
            start(vm, i);
        }
    }
}

fn is_dedicated(vm: usize, vcpu: usize, cpu: usize) -> bool {
    DEDICATED[cpu].load(Ordering::Relaxed) == key(vm, vcpu)
}

/// Kicks the CPUs in `cpus` to choose again.
pub(super) fn resched(cpus: CpuSet) {
    if cpus.is_empty() {
        return;
    }
    for c in cpus.iter() {
        RESCHED[c].store(true, Ordering::Release);
    }
    crate::arch::gic::kick(cpus);
    cpu::send_event();
}

/// Interrupts became deliverable to the vCPUs in `set` of VM `vm`: each must see them soon. A
/// running vCPU sees them at its next entry, so its CPU is kicked out of the guest (unless that
/// is this CPU); a dedicated CPU is woken; on a shared CPU the scheduler wakes the vCPU from
/// WFI and says whether it must preempt what runs there (a real-time vCPU with budget does).
#[inline(always)]
pub fn notify(vm: &Vm, set: VcpuSet) {
    // Inline: most exits make no interrupt deliverable, and the run loop asks twice per exit.
    if !set.is_empty() {
        notify_vcpus(vm, set);
    }
}

fn notify_vcpus(vm: &Vm, set: VcpuSet) {
    let mut kick = CpuSet::EMPTY;
    let mut preempt = CpuSet::EMPTY;
    for v in set.iter() {
        let slot = &vm.vcpus[v];
        let home = slot.cpu();
        if is_running_here(vm.id, v) {
            continue;
        }
        // A running vCPU only needs to leave its guest: the scheduler has nothing to decide
        // for it (a vCPU on its way out rechecks once the scheduler knows it waits).
        if is_dedicated(vm.id, v, home) {
            kick.insert(home);
            continue;
        }
        if slot.is_running() {
            // Its CPU read again after `is_running`: a vCPU that just moved is marked running
            // on its new CPU only after it got there (`emulate::vgic::flush` relies on this
            // kick reaching a vCPU that is being switched in).
            kick.insert(slot.cpu());
            continue;
        }
        if slot.power() != Power::On {
            continue;
        }
        slot.set_wfi(false);
        let cpus = scheduler().interrupt_for(credit_vcpu(vm.id, v), timer::now());
        preempt = preempt.union(cpus);
    }
    crate::arch::gic::kick(kick);
    if !preempt.is_empty() {
        resched(preempt);
    }
}

/// vCPU `index` of `vm` was made runnable (PSCI CPU_ON, the end of a reset): the CPU that will
/// run it must look.
pub fn start(vm: &Vm, index: usize) {
    let home = vm.vcpus[index].cpu();
    if is_dedicated(vm.id, index, home) {
        crate::arch::gic::kick(CpuSet::single(home));
        cpu::send_event();
        return;
    }
    let cpus = scheduler().vcpu_runnable(credit_vcpu(vm.id, index), timer::now());
    resched(cpus);
}

/// The vCPU running on this CPU yields it (ARMHV_YIELD, WFE): another one that may run there
/// goes first. A dedicated CPU has no other to run and ignores it.
pub fn yield_cpu() {
    YIELDED[cpu::current()].store(true, Ordering::Relaxed);
}

/// Hands what an event recorded (`Wakeups`) to the scheduler: interrupts for some vCPUs
/// ([`notify`]), vCPUs started ([`start`]).
#[inline(always)]
pub fn wake(wakeups: &Wakeups) {
    if !wakeups.is_empty() {
        wake_all(wakeups, None);
    }
}

/// [`wake`], from a vCPU of `vm`: what concerns its own VM (an IPI between its vCPUs, its
/// devices' interrupts), the usual case, is handed over without looking the VM up.
#[inline(always)]
pub fn wake_from(vm: &Vm, wakeups: &Wakeups) {
    if !wakeups.is_empty() {
        wake_all(wakeups, Some(vm));
    }
}

fn wake_all(wakeups: &Wakeups, own: Option<&Vm>) {
    let wake_vm = |vm: &Vm, interrupts, started: VcpuSet| {
        notify(vm, interrupts);
        started.iter().for_each(|index| start(vm, index));
    };
    for (id, interrupts, started) in wakeups.iter() {
        if interrupts.is_empty() && started.is_empty() {
            continue;
        }
        match own {
            Some(vm) if vm.id == id => wake_vm(vm, interrupts, started),
            _ => {
                if let Some(vm) = registry::get(id) {
                    wake_vm(&vm, interrupts, started);
                }
            }
        }
    }
}

/// Makes every physical CPU that runs one of `vm`'s vCPUs leave its guest and look again.
pub fn kick_vm(vm: &Vm) {
    let mut cpus = CpuSet::EMPTY;
    for slot in &vm.vcpus {
        let home = slot.cpu();
        if home != cpu::current() {
            cpus.insert(home);
        }
    }
    crate::arch::gic::kick(cpus);
    cpu::send_event();
}
