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

use super::bench::{self, Class};
use super::vcpu::earliest;
use super::vcpu::{Power, VcpuSlot};
use super::vm::Vm;
use super::{Action, irq, ptimer, vm, vtimer};
use crate::arch::aarch64::{cpu, firmware, timer};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use credit::{CpuSet, Decision, Scheduler};
use spin::{Mutex, Once};
use vgic::VcpuSet;

static VMS: Once<Vec<Arc<Vm>>> = Once::new();
static CREDIT: Once<Mutex<Scheduler>> = Once::new();
/// Per physical CPU: the vCPU inside `Vcpu::run`, as `(vm + 1) << 8 | vcpu`, or 0.
static RUNNING: [AtomicUsize; cpu::MAX_CPUS] = [const { AtomicUsize::new(0) }; cpu::MAX_CPUS];
/// Per physical CPU: when the running vCPU's time slice ends (`u64::MAX`: no other vCPU waits).
static SLICE_END: [AtomicU64; cpu::MAX_CPUS] = [const { AtomicU64::new(u64::MAX) }; cpu::MAX_CPUS];
/// Per physical CPU: the only vCPU that may run there, as `(vm + 1) << 8 | vcpu`, or 0 (shared).
static DEDICATED: [AtomicUsize; cpu::MAX_CPUS] = [const { AtomicUsize::new(0) }; cpu::MAX_CPUS];
/// Per physical CPU: the scheduler asked it to choose again (a preemption, or a vCPU to pick up).
static RESCHED: [AtomicBool; cpu::MAX_CPUS] = [const { AtomicBool::new(false) }; cpu::MAX_CPUS];
/// Per physical CPU: the vCPU it runs yielded; told to the scheduler with the next decision,
/// under the same lock.
static YIELDED: [AtomicBool; cpu::MAX_CPUS] = [const { AtomicBool::new(false) }; cpu::MAX_CPUS];
/// The scheduler's quantum in counter ticks, readable without its lock.
static QUANTUM: AtomicU64 = AtomicU64::new(0);
static LIVE_VMS: AtomicUsize = AtomicUsize::new(0);

fn key(vm: usize, vcpu: usize) -> usize {
    (vm + 1) << 8 | vcpu
}

fn credit_vcpu(vm: usize, index: usize) -> credit::Vcpu {
    credit::Vcpu { vm, index }
}

fn scheduler() -> spin::MutexGuard<'static, Scheduler> {
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

/// Sets up the scheduler for `vms` on a machine of `cpus` CPUs: the credit scheduler gets every
/// vCPU (pinned ones with their CPU as affinity, the others with every CPU), the CPUs that only
/// one vCPU may use become dedicated, and the vCPUs that are on are made runnable.
pub fn install(vms: Vec<Arc<Vm>>, cpus: usize, spec: &vmconfig::SchedSpec) {
    let ticks_per_ms = timer::frequency() / 1000;
    let params = credit::Params::new(cpus, ticks_per_ms, u64::from(spec.quantum_ms))
        .unwrap_or_else(|e| panic!("scheduler parameters checked by vmconfig: {e}"));
    QUANTUM.store(params.quantum, Ordering::Relaxed);
    let mut sched = Scheduler::new(params);
    let all = CpuSet::first(cpus);
    let mut users = [0usize; cpu::MAX_CPUS];
    for vm in &vms {
        let affinity: Vec<CpuSet> =
            vm.affinity.iter().map(|a| a.map_or(all, CpuSet::single)).collect();
        for set in &affinity {
            set.iter().for_each(|c| users[c] += 1);
        }
        let rt = vm.sched.realtime.map(|rt| credit::RealTime {
            budget: timer::micros_to_ticks(u64::from(rt.budget_us)),
            period: timer::micros_to_ticks(u64::from(rt.period_us)),
        });
        let params = credit::VmParams { weight: vm.sched.weight, cap: vm.sched.cap, realtime: rt };
        let id = sched.add_vm(params, &affinity).unwrap_or_else(|e| {
            panic!("{}: scheduling parameters checked by vmconfig: {e}", vm.name)
        });
        debug_assert_eq!(id, vm.id);
    }
    for vm in &vms {
        for (i, slot) in vm.vcpus.iter().enumerate() {
            match vm.affinity[i] {
                Some(c) if users[c] == 1 => {
                    DEDICATED[c].store(key(vm.id, i), Ordering::Relaxed);
                    slot.set_cpu(c);
                }
                _ => {
                    slot.set_cpu(sched.cpu_of(credit_vcpu(vm.id, i)));
                    if slot.power() == Power::On {
                        sched.vcpu_runnable(credit_vcpu(vm.id, i), timer::now());
                    }
                }
            }
        }
    }
    super::irqdist::install(&vms, cpus, spec.irqdist);
    CREDIT.call_once(|| Mutex::new(sched));
    LIVE_VMS.store(vms.len(), Ordering::Release);
    VMS.call_once(|| vms);
}

pub fn vms() -> &'static [Arc<Vm>] {
    VMS.get().map(|v| v.as_slice()).unwrap_or(&[])
}

fn is_dedicated(vm: usize, vcpu: usize, cpu: usize) -> bool {
    DEDICATED[cpu].load(Ordering::Relaxed) == key(vm, vcpu)
}

/// Kicks the CPUs in `cpus` to choose again.
fn resched(cpus: CpuSet) {
    if cpus.is_empty() {
        return;
    }
    let mut mask = 0u16;
    for c in cpus.iter() {
        RESCHED[c].store(true, Ordering::Release);
        mask |= 1 << c;
    }
    crate::drivers::gic::kick(mask);
    cpu::send_event();
}

/// Interrupts became deliverable to the vCPUs in `set` of VM `vm`: each must see them soon. A
/// running vCPU sees them at its next entry, so its CPU is kicked out of the guest (unless that
/// is this CPU); a dedicated CPU is woken; on a shared CPU the scheduler wakes the vCPU from
/// WFI and says whether it must preempt what runs there (a real-time vCPU with budget does).
pub fn notify(vm: usize, set: VcpuSet) {
    if set.is_empty() {
        return;
    }
    let Some(vm) = vms().get(vm) else {
        return; // still being built: it starts with whatever is pending
    };
    let mut kick = 0u16;
    let mut preempt = CpuSet::EMPTY;
    for v in set.iter() {
        let slot = &vm.vcpus[v];
        let home = slot.cpu();
        if is_running_here(vm.id, v) {
            continue;
        }
        // A running vCPU only needs to leave its guest: the scheduler has nothing to decide
        // for it (a vCPU on its way out rechecks once the scheduler knows it waits).
        if is_dedicated(vm.id, v, home) || slot.is_running() {
            kick |= 1 << home;
            continue;
        }
        if slot.power() != Power::On {
            continue;
        }
        slot.set_wfi(false);
        let cpus = scheduler().interrupt_for(credit_vcpu(vm.id, v), timer::now());
        preempt = preempt.union(cpus);
    }
    crate::drivers::gic::kick(kick);
    if !preempt.is_empty() {
        resched(preempt);
    }
}

/// vCPU `index` of `vm` was made runnable (PSCI CPU_ON, the end of a reset): the CPU that will
/// run it must look.
pub fn start(vm: &Vm, index: usize) {
    let home = vm.vcpus[index].cpu();
    if is_dedicated(vm.id, index, home) {
        crate::drivers::gic::kick(1 << home);
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

/// Stops a VM (once). One of its vCPUs then zeroes its RAM (`run_scrub`), and [`vm_ended`]
/// follows.
pub fn stop_vm(vm: &vm::Vm, reason: &super::StopReason) {
    super::fpsimd::forget_vm(vm.id);
    vm.stop(reason);
}

/// A stopped VM's RAM is zero: when it was the last VM, the final report and the power-off.
pub fn vm_ended() {
    if LIVE_VMS.fetch_sub(1, Ordering::AcqRel) == 1 {
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
    if vm.scrub.is_owner(index) {
        return true; // it zeroes its VM's RAM (`run_scrub`)
    }
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
    super::usage::cpu_ready(); // the baseline is taken once every CPU is ready
    let dedicated = DEDICATED[this_cpu].load(Ordering::Relaxed);
    if dedicated != 0 {
        let vm = vms()[(dedicated >> 8) - 1].clone();
        run_dedicated(this_cpu, &vm, dedicated & 0xff)
    } else {
        run_shared(this_cpu)
    }
}

/// The vCPU whose EL1 state is in this CPU's registers, and the VM generation it belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Loaded {
    vm: usize,
    index: usize,
    generation: usize,
}

impl Loaded {
    /// Still the live state of a live vCPU (not of a VM that stopped or was reset since).
    fn valid(self) -> bool {
        let vm = &vms()[self.vm];
        !vm.is_stopped() && !vm.is_resetting() && vm.generation() == self.generation
    }
}

/// Runs the chosen vCPU until it exits to the scheduler: loads it unless it is `loaded`
/// already, runs it until `slice_end`, and returns what it asked for.
fn run_vcpu(
    this_cpu: usize,
    vm: &Arc<Vm>,
    index: usize,
    loaded: &mut Option<Loaded>,
    slice_end: Option<u64>,
) -> Option<Action> {
    if vm.scrub.is_owner(index) {
        return run_scrub(this_cpu, vm, index, loaded, slice_end);
    }
    let slot = &vm.vcpus[index];
    let mut vcpu = slot.state.lock();
    if slot.power() == Power::Starting && loaded.is_some_and(|l| (l.vm, l.index) == (vm.id, index))
    {
        // CPU_ON gives it a fresh state: what the registers hold from before its CPU_OFF (EL1
        // registers, list registers) must neither survive nor be saved over the new state.
        *loaded = None;
    }
    slot.take_start(vm.id, &mut vcpu);
    if slot.power() != Power::On || vm.is_stopped() || vm.is_resetting() {
        return None;
    }
    let generation = vm.generation();
    let me = Loaded { vm: vm.id, index, generation };
    if *loaded != Some(me) {
        unload(loaded);
        load_vm_registers(vm);
        vcpu.load(vm.id);
        *loaded = Some(me);
        bench::switched();
        if vcpu.yielded {
            vcpu.regs.x[1] = 1; // ARMHV_YIELD: another vCPU ran meanwhile
        }
    }
    vcpu.yielded = false;
    SLICE_END[this_cpu].store(slice_end.unwrap_or(u64::MAX), Ordering::Relaxed);
    slot.set_running(true);
    RUNNING[this_cpu].store(key(vm.id, index), Ordering::Relaxed);
    super::irqdist::run_begins(this_cpu, vm.id, index);
    let action = vcpu.run(vm, slice_end);
    super::irqdist::run_ends(this_cpu);
    RUNNING[this_cpu].store(0, Ordering::Relaxed);
    if vm.generation() != generation || vm.is_resetting() {
        *loaded = None; // the VM was reset: what the registers hold is stale
    } else if vm.affinity[index].is_none() {
        // It may run elsewhere next: its state must be in memory, not in this CPU.
        vcpu.put();
        super::fpsimd::release(vm.id, &mut vcpu);
        *loaded = None;
    }
    drop(vcpu);
    slot.set_running(false);
    if let Action::Stop(reason) = &action {
        *loaded = None;
        stop_vm(vm, reason);
    }
    Some(action)
}

/// A vCPU whose VM's RAM is being zeroed after a reset or stop (`super::scrub`): its turn
/// zeroes pieces of it until `slice_end` instead of running its guest, with a guest run's
/// bookkeeping (a stop waits for it as for a running vCPU; Ctrl-A q here tells it to stop).
fn run_scrub(
    this_cpu: usize,
    vm: &Arc<Vm>,
    index: usize,
    loaded: &mut Option<Loaded>,
    slice_end: Option<u64>,
) -> Option<Action> {
    unload(loaded); // what the registers hold is no live vCPU's while the CPU zeroes
    let slot = &vm.vcpus[index];
    let mut vcpu = slot.state.lock();
    SLICE_END[this_cpu].store(slice_end.unwrap_or(u64::MAX), Ordering::Relaxed);
    slot.set_running(true);
    RUNNING[this_cpu].store(key(vm.id, index), Ordering::Relaxed);
    super::irqdist::run_begins(this_cpu, vm.id, index);
    let action = super::scrub::run_slice(vm, &mut vcpu, slice_end);
    super::irqdist::run_ends(this_cpu);
    RUNNING[this_cpu].store(0, Ordering::Relaxed);
    drop(vcpu);
    slot.set_running(false);
    if let Action::Stop(reason) = &action {
        stop_vm(vm, reason);
    }
    Some(action)
}

/// Saves the vCPU whose state this CPU holds (unless it is stale) and forgets it.
fn unload(loaded: &mut Option<Loaded>) {
    if let Some(old) = loaded.take()
        && old.valid()
    {
        vms()[old.vm].vcpus[old.index].state.lock().put();
    }
}

/// A CPU that only one vCPU may use: run it whenever it can run, else sleep.
fn run_dedicated(this_cpu: usize, vm: &Arc<Vm>, index: usize) -> ! {
    let mut loaded = None;
    loop {
        if loaded.is_some_and(|l: Loaded| !l.valid()) {
            loaded = None;
        }
        // (Without an interrupt distributor nothing ends the vCPU's run but its own exits.)
        let tick = super::irqdist::deadline(this_cpu);
        if runnable(vm, index, loaded.is_some()) {
            run_vcpu(this_cpu, vm, index, &mut loaded, tick);
        } else {
            idle(this_cpu, loaded, tick);
        }
        super::irqdist::tick_if_due(this_cpu);
    }
}

/// A CPU several vCPUs may use: run what the credit scheduler picks.
fn run_shared(this_cpu: usize) -> ! {
    let mut loaded = None;
    // The slice in progress: a run that ended early (an exit, a kick, a timer of another vCPU,
    // the distributor's tick) resumes it unless the scheduler says otherwise, so that the
    // vCPUs of one class share the CPU in quanta, not in whatever came first.
    let mut slice: Option<Decision> = None;
    loop {
        if loaded.is_some_and(|l: Loaded| !l.valid()) {
            loaded = None;
        }
        RESCHED[this_cpu].store(false, Ordering::Relaxed);
        wake_watched(this_cpu, loaded);
        let decision = {
            let mut sched = scheduler();
            let now = timer::now();
            let yielded = YIELDED[this_cpu].swap(false, Ordering::Relaxed);
            match (slice, sched.running(this_cpu)) {
                (Some(d), Some(v))
                    if !yielded && d.vcpu == Some(v) && !sched.tick(this_cpu, now) =>
                {
                    Decision { migrated_from: None, kick: CpuSet::EMPTY, ..d }
                }
                (_, running) => {
                    if let (true, Some(v)) = (yielded, running) {
                        sched.vcpu_yield(v);
                    }
                    sched.pick_next(this_cpu, now)
                }
            }
        };
        slice = Some(decision);
        resched(decision.kick);
        let until = (decision.run_until != u64::MAX).then_some(decision.run_until);
        let until = earliest(until, super::irqdist::deadline(this_cpu));
        let Some(v) = decision.vcpu else {
            idle(this_cpu, loaded, until);
            super::irqdist::tick_if_due(this_cpu);
            continue;
        };
        // A blocked vCPU's timer expiring while another runs must reach the scheduler at once
        // (it may be real-time), so the slice ends at the earliest of their deadlines too.
        let vm = &vms()[v.vm];
        let running = Loaded { vm: v.vm, index: v.index, generation: vm.generation() };
        if loaded.is_some_and(|l| (l.vm, l.index) != (v.vm, v.index)) {
            // Save the vCPU switched out before its deadline is read below: until then its
            // timer lives in the hardware and the saved copy is from its previous run (a
            // real-time vCPU's wake-up would wait a quantum for it).
            unload(&mut loaded);
        }
        // Only `v` will be loaded: every other vCPU's virtual timer is in software then.
        // A deadline already past whose vCPU still cannot run (its interrupt is not
        // deliverable) waits a quantum, not an interrupt storm.
        let now = timer::now();
        let quantum_end = now + QUANTUM.load(Ordering::Relaxed);
        let wake = watched_deadline(this_cpu, Some(running))
            .map(|d| if d > now { d } else { quantum_end });
        let until = earliest(until, wake);
        let slot = &vm.vcpus[v.index];
        if slot.cpu() != this_cpu {
            slot.set_cpu(this_cpu);
            super::irqdist::vcpu_moved(v.vm, v.index, this_cpu);
        }
        let action = run_vcpu(this_cpu, vm, v.index, &mut loaded, until);
        super::irqdist::tick_if_due(this_cpu);
        if !matches!(action, Some(Action::Resume | Action::Yield)) {
            slice = None;
            let now = timer::now();
            let mut sched = scheduler();
            sched.vcpu_blocked(v, now);
            // An event that came while the vCPU was on its way out (an interrupt after it
            // decided to wait, a CPU_ON after CPU_OFF, the end of a reset) found it still
            // running and woke nobody: look once more, now that the scheduler knows it waits.
            let kick = match wake_reason(vm, v.index) {
                Some(Wake::Interrupt) => sched.vcpu_woke(v, now),
                Some(Wake::Started) => sched.vcpu_runnable(v, now),
                None => CpuSet::EMPTY,
            };
            drop(sched);
            resched(kick);
        }
    }
}

enum Wake {
    Interrupt,
    Started,
}

/// Why a vCPU the scheduler holds blocked can run after all, if it can.
fn wake_reason(vm: &Vm, index: usize) -> Option<Wake> {
    if vm.scrub.is_owner(index) {
        return Some(Wake::Started); // it zeroes its VM's RAM (`run_scrub`)
    }
    let slot = &vm.vcpus[index];
    if vm.is_stopped() || vm.is_resetting() || slot.power() == Power::Off {
        return None;
    }
    if !slot.in_wfi() {
        return Some(Wake::Started);
    }
    vm.vgic.lock().pending_for(index).then(|| {
        slot.set_wfi(false);
        Wake::Interrupt
    })
}

/// The VM's EL2 registers: Stage-2 table, virtual counter offset, debug and PMU traps.
fn load_vm_registers(vm: &Vm) {
    use crate::arch::aarch64::el2_regs;
    bench::timed(Class::Stage2, || el2_regs::load_vttbr(vm.vttbr));
    bench::timed(Class::Timer, || el2_regs::load_cntvoff(vm.cntvoff));
    bench::timed(Class::El2, || {
        el2_regs::load_mdcr(vm.mdcr);
        el2_regs::load_vm_done();
    });
}

/// Nothing to run: sleep until an interrupt (a kick, a timer) or `until`, and handle it.
fn idle(this_cpu: usize, loaded: Option<Loaded>, until: Option<u64>) {
    super::irqdist::idles(this_cpu);
    timer::hyp_timer_set(earliest(until, watched_deadline(this_cpu, loaded)));
    // WFI wakes on a pending interrupt even though EL2 runs with interrupts masked.
    if !RESCHED[this_cpu].load(Ordering::Acquire) {
        cpu::wait_for_interrupt();
    }
    match loaded {
        // The loaded vCPU's virtual timer is live in the hardware and may be what woke us.
        Some(l) if l.valid() => {
            let vm = &vms()[l.vm];
            let mut vcpu = vm.vcpus[l.index].state.lock();
            irq::handle_pending(Some((vm, &mut vcpu)));
        }
        _ => {
            irq::handle_pending(None);
        }
    }
}

/// The earliest timer deadline among the blocked vCPUs this CPU watches; the loaded vCPU's
/// virtual timer is live in the hardware and interrupts by itself.
fn watched_deadline(this_cpu: usize, loaded: Option<Loaded>) -> Option<u64> {
    let mut deadline = None;
    for_watched(this_cpu, |vm, index, vcpu| {
        deadline = earliest(deadline, ptimer::sync(vm, vcpu));
        if loaded.is_none_or(|l| (l.vm, l.index) != (vm.id, index)) {
            deadline = earliest(deadline, vtimer::saved_deadline(vm, vcpu));
        }
    });
    deadline
}

/// Wakes the blocked vCPUs this CPU watches whose timers have expired (or that have an
/// interrupt pending by now), so that the next decision sees them.
fn wake_watched(this_cpu: usize, loaded: Option<Loaded>) {
    let mut kick = CpuSet::EMPTY;
    for_watched(this_cpu, |vm, index, vcpu| {
        if loaded.is_none_or(|l| (l.vm, l.index) != (vm.id, index)) {
            vtimer::check_saved(vm, vcpu);
        }
        ptimer::sync(vm, vcpu);
        if vm.vgic.lock().pending_for(index) {
            vm.vcpus[index].set_wfi(false);
            kick = kick.union(scheduler().vcpu_woke(credit_vcpu(vm.id, index), timer::now()));
        }
    });
    kick.remove(this_cpu); // it decides next anyway
    resched(kick);
}

/// Calls `f` on each vCPU in WFI that this CPU watches (its run queue holds it).
fn for_watched(this_cpu: usize, mut f: impl FnMut(&Vm, usize, &mut super::vcpu::Vcpu)) {
    if !VcpuSlot::any_in_wfi() {
        return;
    }
    for vm in vms() {
        if vm.is_stopped() || vm.is_resetting() {
            continue;
        }
        for (index, slot) in vm.vcpus.iter().enumerate() {
            if slot.cpu() != this_cpu || !slot.in_wfi() || slot.power() != Power::On {
                continue;
            }
            if let Some(mut vcpu) = slot.state.try_lock() {
                f(vm, index, &mut vcpu);
            }
        }
    }
}

/// Makes every physical CPU that runs one of `vm`'s vCPUs leave its guest and look again.
pub fn kick_vm(vm: &Vm) {
    let mut cpus = 0u16;
    for slot in &vm.vcpus {
        let home = slot.cpu();
        if home != cpu::current() {
            cpus |= 1 << home;
        }
    }
    crate::drivers::gic::kick(cpus);
    cpu::send_event();
}
