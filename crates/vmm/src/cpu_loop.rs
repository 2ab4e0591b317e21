//! What each physical CPU runs, forever: the vCPU the scheduler (`sched`) chooses, loaded
//! only when it is not the one whose state the CPU already holds, or the zeroing of a VM's RAM
//! (`lifecycle::run_scrub_slice`), or nothing (WFI until an interrupt or a deadline).

use super::bench::{self, Class};
use super::emulate::{fpsimd, ptimer, vtimer};
use super::sched::{
    DEDICATED, QUANTUM, RESCHED, RUNNING, SLICE_END, YIELDED, credit_vcpu, key, resched, scheduler,
};
use super::vcpu::{Power, Vcpu, VcpuSlot};
use super::vm::{RESETTING, STOPPED, Vm};
use super::wakeups::Wakeups;
use super::{Action, earliest, irq, irqdist, lifecycle, manage, registry, run, sched};
use crate::arch::{cpu, el2_regs, timer};
use alloc::sync::Arc;
use core::sync::atomic::Ordering;
use credit::{CpuSet, Decision};

/// Whether the vCPU can run now. A vCPU in WFI becomes runnable when an interrupt is
/// deliverable to it (for one that is not loaded, its virtual timer is checked in software).
fn runnable(vm: &Vm, index: usize, loaded: bool) -> bool {
    if vm.scrub.is_owner(index) {
        return true; // it zeroes its VM's RAM (`run_scrub`)
    }
    let slot = &vm.vcpus[index];
    if vm.is_held() || slot.power() == Power::Off {
        return false;
    }
    if !slot.in_wfi() {
        return true;
    }
    if vm.device_backlog.is_set() {
        // Its devices have work left over that a vCPU of the VM does (`run::run`): a WFI
        // may end at any time.
        slot.set_wfi(false);
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
    let mut cpu = Cpu::new(this_cpu);
    loop {
        cpu.step();
    }
}

/// One physical CPU's loop, a step at a time (the host tests step it).
pub struct Cpu {
    this_cpu: usize,
    /// The only vCPU this CPU may run, if it is dedicated to one: (VM id, vCPU index). Ids,
    /// not VMs: a VM's life must end with no CPU holding on to it.
    dedicated: Option<(usize, usize)>,
    /// Whose state the CPU's registers hold.
    loaded: Option<Loaded>,
    /// The slice in progress (shared CPUs): a run that ended early (an exit, a kick, a timer of
    /// another vCPU, the distributor's tick) resumes it unless the scheduler says otherwise, so
    /// that the vCPUs of one class share the CPU in quanta, not in whatever came first.
    slice: Option<Decision>,
}

/// What one step of a CPU did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Ran vCPU `index` of VM `vm` (or its RAM zeroing) until it needed the scheduler.
    Ran { vm: usize, index: usize },
    /// Had nothing to run: waited for an interrupt or a deadline.
    Idled,
}

impl Cpu {
    /// CPU `this_cpu`, once the VMs are installed (`sched::install`).
    pub fn new(this_cpu: usize) -> Self {
        let dedicated = DEDICATED[this_cpu].load(Ordering::Relaxed);
        let dedicated = (dedicated != 0).then(|| ((dedicated >> 8) - 1, dedicated & 0xff));
        Self { this_cpu, dedicated, loaded: None, slice: None }
    }

    /// Runs the vCPU this CPU should run until it needs the scheduler, or idles.
    pub fn step(&mut self) -> Step {
        // Here this CPU runs no vCPU: commands that wait for a VM's vCPUs to leave can be
        // carried out.
        manage::run_queued();
        let Cpu { this_cpu, dedicated, loaded, slice } = self;
        // State of a VM that stopped or reset since is let go of (the power-off after the
        // last VM waits until no CPU holds one).
        if loaded.as_ref().is_some_and(|l| !l.valid()) {
            *loaded = None;
        }
        let step = match *dedicated {
            Some((id, index)) => dedicated_step(*this_cpu, id, index, loaded),
            None => shared_step(*this_cpu, loaded, slice),
        };
        distributor_tick(*this_cpu);
        step
    }
}

/// The vCPU whose EL1 state is in this CPU's registers, its VM and the VM generation it
/// belongs to. The VM is held only while its state is loaded: a stop or reset makes it stale,
/// which the CPU sees at its next step (the stop kicks it) and lets go of.
struct Loaded {
    vm: Arc<Vm>,
    index: usize,
    generation: usize,
}

impl Loaded {
    /// Still the live state of a live vCPU (not of a VM that stopped or was reset since).
    fn valid(&self) -> bool {
        let vm = &self.vm;
        vm.flags() & (STOPPED | RESETTING) == 0 && vm.generation() == self.generation
    }

    /// (VM id, vCPU index).
    fn key(&self) -> (usize, usize) {
        (self.vm.id, self.index)
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
    if slot.power() == Power::Starting && loaded.as_ref().is_some_and(|l| l.key() == (vm.id, index))
    {
        // CPU_ON gives it a fresh state: what the registers hold from before its CPU_OFF (EL1
        // registers, list registers) must neither survive nor be saved over the new state.
        *loaded = None;
    }
    if slot.take_start(&mut vcpu) {
        fpsimd::on_reset(vm.id, index);
    }
    if slot.power() != Power::On || vm.is_held() {
        return None;
    }
    let generation = vm.generation();
    let mine = |l: &Loaded| l.key() == (vm.id, index) && l.generation == generation;
    if !loaded.as_ref().is_some_and(mine) {
        unload(loaded);
        load_vm_registers(vm);
        run::load(vm, &mut vcpu);
        *loaded = Some(Loaded { vm: vm.clone(), index, generation });
        bench::switched();
        if vcpu.yielded {
            vcpu.regs.x[1] = 1; // ARMHV_YIELD: another vCPU ran meanwhile
        }
    }
    vcpu.yielded = false;
    begin_run(this_cpu, vm, index, slice_end);
    let mut action = run::run(vm, &mut vcpu, slice_end);
    // SYSTEM_RESET is told once this vCPU has left (below): its VM's policy may stop the VM,
    // which waits until none of its vCPUs runs.
    let reset = matches!(action, Action::Reset);
    match action {
        Action::Reset => action = Action::Block,
        Action::Yield => sched::yield_cpu(),
        _ => {}
    }
    end_run(this_cpu);
    if vm.generation() != generation || vm.is_resetting() {
        *loaded = None; // the VM was reset: what the registers hold is stale
    } else if vm.affinity[index].is_none() {
        // It may run elsewhere next: its state must be in memory, not in this CPU.
        run::put(&mut vcpu);
        fpsimd::release(vm.id, &mut vcpu);
        *loaded = None;
    }
    drop(vcpu);
    slot.set_running(false);
    if reset {
        *loaded = None;
        manage::guest_reset(vm, index);
    }
    if let Action::Stop(reason) = &action {
        *loaded = None;
        manage::guest_stopped(vm, reason, Some(index));
    }
    Some(action)
}

/// This CPU starts running vCPU `index` of `vm` (its guest or its VM's zeroing) until
/// `slice_end`: what other CPUs and the interrupt distributor see of it.
fn begin_run(this_cpu: usize, vm: &Vm, index: usize, slice_end: Option<u64>) {
    SLICE_END[this_cpu].store(slice_end.unwrap_or(u64::MAX), Ordering::Relaxed);
    vm.vcpus[index].set_running(true);
    RUNNING[this_cpu].store(key(vm.id, index), Ordering::Relaxed);
    irqdist::run_begins(this_cpu, vm.id, index);
}

/// The run [`begin_run`] began has ended (the vCPU is marked not running once its state is
/// put away).
fn end_run(this_cpu: usize) {
    irqdist::run_ends(this_cpu);
    RUNNING[this_cpu].store(0, Ordering::Relaxed);
}

/// A vCPU whose VM's RAM is being zeroed after a reset or stop (`scrub`): its turn
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
    begin_run(this_cpu, vm, index, slice_end);
    let (action, completed) = lifecycle::run_scrub_slice(vm, &mut vcpu, slice_end);
    end_run(this_cpu);
    drop(vcpu);
    slot.set_running(false);
    match completed {
        Some(lifecycle::Completed::Reset) => manage::reset_done(vm),
        Some(lifecycle::Completed::Stop) => manage::stop_done(vm),
        None => {}
    }
    Some(action)
}

/// Saves the vCPU whose state this CPU holds (unless it is stale) and forgets it.
fn unload(loaded: &mut Option<Loaded>) {
    if let Some(old) = loaded.take()
        && old.valid()
    {
        run::put(&mut old.vm.vcpus[old.index].state.lock());
    }
}

/// A CPU that only one vCPU may use: run it whenever it can run, else sleep.
fn dedicated_step(this_cpu: usize, id: usize, index: usize, loaded: &mut Option<Loaded>) -> Step {
    // (Without an interrupt distributor nothing ends the vCPU's run but its own exits.)
    let tick = irqdist::deadline(this_cpu);
    // Its VM as the loaded state holds it (the common case), else looked up. Not held while
    // the CPU sleeps: a VM whose life ends meanwhile must not wait for it.
    let vm = match loaded.as_ref() {
        Some(l) if l.vm.id == id => Some(l.vm.clone()),
        _ => registry::get(id),
    };
    match vm.filter(|vm| runnable(vm, index, loaded.is_some())) {
        Some(vm) => {
            run_vcpu(this_cpu, &vm, index, loaded, tick);
            Step::Ran { vm: id, index }
        }
        None => {
            idle(this_cpu, loaded.as_ref(), tick);
            Step::Idled
        }
    }
}

/// A CPU several vCPUs may use: run what the credit scheduler picks.
fn shared_step(this_cpu: usize, loaded: &mut Option<Loaded>, slice: &mut Option<Decision>) -> Step {
    RESCHED[this_cpu].store(false, Ordering::Relaxed);
    wake_watched(this_cpu, loaded.as_ref().map(Loaded::key));
    let decision = {
        let mut sched = scheduler();
        let now = timer::now();
        let yielded = YIELDED[this_cpu].swap(false, Ordering::Relaxed);
        match (*slice, sched.running(this_cpu)) {
            (Some(d), Some(v)) if !yielded && d.vcpu == Some(v) && !sched.tick(this_cpu, now) => {
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
    *slice = Some(decision);
    resched(decision.kick);
    let until = (decision.run_until != u64::MAX).then_some(decision.run_until);
    let until = earliest(until, irqdist::deadline(this_cpu));
    let Some(v) = decision.vcpu else {
        idle(this_cpu, loaded.as_ref(), until);
        return Step::Idled;
    };
    // A blocked vCPU's timer expiring while another runs must reach the scheduler at once (it
    // may be real-time), so the slice ends at the earliest of their deadlines too.
    let vm = match loaded.as_ref() {
        Some(l) if l.vm.id == v.vm => Some(l.vm.clone()),
        _ => registry::get(v.vm),
    };
    let Some(vm) = vm else {
        // A vCPU of a VM that has no life (stopped meanwhile): it waits for its next start.
        scheduler().vcpu_blocked(v, timer::now());
        *slice = None;
        return Step::Idled;
    };
    let vm = &vm;
    if loaded.as_ref().is_some_and(|l| l.key() != (v.vm, v.index)) {
        // Save the vCPU switched out before its deadline is read below: until then its timer
        // lives in the hardware and the saved copy is from its previous run (a real-time
        // vCPU's wake-up would wait a quantum for it).
        unload(loaded);
    }
    // Only `v` will be loaded: every other vCPU's virtual timer is in software then. A
    // deadline already past whose vCPU still cannot run (its interrupt is not deliverable)
    // waits a quantum, not an interrupt storm.
    let now = timer::now();
    let quantum_end = now + QUANTUM.load(Ordering::Relaxed);
    let wake = watched_deadline(this_cpu, Some((v.vm, v.index)))
        .map(|d| if d > now { d } else { quantum_end });
    let until = earliest(until, wake);
    let slot = &vm.vcpus[v.index];
    if slot.cpu() != this_cpu {
        slot.set_cpu(this_cpu);
        irqdist::vcpu_moved(v.vm, v.index, this_cpu);
    }
    let action = run_vcpu(this_cpu, vm, v.index, loaded, until);
    if !matches!(action, Some(Action::Resume | Action::Yield | Action::Reschedule)) {
        *slice = None;
        let now = timer::now();
        let mut sched = scheduler();
        sched.vcpu_blocked(v, now);
        // An event that came while the vCPU was on its way out (an interrupt after it decided
        // to wait, a CPU_ON after CPU_OFF, the end of a reset) found it still running and
        // woke nobody: look once more, now that the scheduler knows it waits.
        let kick = match wake_reason(vm, v.index) {
            Some(Wake::Interrupt) => sched.vcpu_woke(v, now),
            Some(Wake::Started) => sched.vcpu_runnable(v, now),
            None => CpuSet::EMPTY,
        };
        drop(sched);
        resched(kick);
    }
    Step::Ran { vm: v.vm, index: v.index }
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
    if vm.is_held() || slot.power() == Power::Off {
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

/// The VM's EL2 registers: Stage-2 table, virtual counter offset. (Its debug and PMU traps,
/// MDCR_EL2, depend on the vCPU too: `run::load`.)
fn load_vm_registers(vm: &Vm) {
    bench::timed(Class::Stage2, || el2_regs::load_vttbr(vm.vttbr));
    bench::timed(Class::Timer, || el2_regs::load_cntvoff(vm.cntvoff));
    bench::timed(Class::El2, el2_regs::load_vm_done);
}

/// Nothing to run: sleep until an interrupt (a kick, a timer) or `until`, and handle it.
fn idle(this_cpu: usize, loaded: Option<&Loaded>, until: Option<u64>) {
    irqdist::idles(this_cpu);
    let until = earliest(until, manage::deadline());
    timer::hyp_timer_set(earliest(until, watched_deadline(this_cpu, loaded.map(Loaded::key))));
    // WFI wakes on a pending interrupt even though EL2 runs with interrupts masked.
    if !RESCHED[this_cpu].load(Ordering::Acquire) {
        cpu::wait_for_interrupt();
    }
    match loaded.filter(|l| l.valid()) {
        // The loaded vCPU's virtual timer is live in the hardware and may be what woke us.
        Some(l) => {
            let mut vcpu = l.vm.vcpus[l.index].state.lock();
            irq::handle_pending_now(Some((&l.vm, &mut vcpu)));
        }
        None => {
            irq::handle_pending_now(None);
        }
    }
}

/// The earliest timer deadline among the blocked vCPUs this CPU watches; the loaded vCPU's
/// virtual timer is live in the hardware and interrupts by itself.
fn watched_deadline(this_cpu: usize, loaded: Option<(usize, usize)>) -> Option<u64> {
    let mut deadline = None;
    for_watched(this_cpu, |vm, index, vcpu| {
        deadline = earliest(deadline, ptimer::sync(vm, vcpu));
        if loaded != Some((vm.id, index)) {
            deadline = earliest(deadline, vtimer::saved_deadline(vm, vcpu));
        }
    });
    deadline
}

/// Wakes the blocked vCPUs this CPU watches whose timers have expired (or that have an
/// interrupt pending by now), so that the next decision sees them.
fn wake_watched(this_cpu: usize, loaded: Option<(usize, usize)>) {
    let mut kick = CpuSet::EMPTY;
    for_watched(this_cpu, |vm, index, vcpu| {
        if loaded != Some((vm.id, index)) {
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
fn for_watched(this_cpu: usize, mut f: impl FnMut(&Vm, usize, &mut Vcpu)) {
    if !VcpuSlot::any_in_wfi() {
        return;
    }
    registry::for_each_live(|vm| {
        if vm.is_held() {
            return;
        }
        for (index, slot) in vm.vcpus.iter().enumerate() {
            if slot.cpu() != this_cpu || !slot.in_wfi() || slot.power() != Power::On {
                continue;
            }
            if let Some(mut vcpu) = slot.state.try_lock() {
                f(vm, index, &mut vcpu);
            }
        }
    });
}

/// On the CPU that evaluates the interrupt distributor's policy, when its timer may have
/// fired: a tick if one is due, and the vCPUs its moves of interrupt streams wake.
#[inline(always)]
fn distributor_tick(this_cpu: usize) {
    if irqdist::evaluates_on(this_cpu) {
        let mut wake = Wakeups::default();
        irqdist::tick(timer::now(), &mut wake);
        sched::wake(&wake);
    }
}
