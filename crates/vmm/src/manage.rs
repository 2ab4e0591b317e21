//! VMs managed while armhv runs: `list`, `start`, `stop`, `restart`, `pause`, `resume`, `info`
//! and `log` from the console or a control VM, the guests' own power events, faults, and the
//! restart policies. Each VM's state machine is crate `control`'s [`Lifecycle`]; this module
//! feeds it and carries out the [`Action`]s it returns.
//!
//! * **Definitions** live as long as armhv: each VM of the boot package, its spec and the host
//!   devices assigned to it (resolved once, at boot). A VM's *life* (`registry`) is built at its
//!   start from its definition and ends when its stop has zeroed its RAM; its frames, heap,
//!   network ports and device claims go back then.
//! * **Commands** are queued ([`submit`]) and carried out at the top of a CPU's loop
//!   ([`run_queued`]), where the CPU runs no vCPU: stopping, pausing or resetting a VM waits until
//!   none of its vCPUs runs, which a CPU inside one of them (the console's interrupt came in its
//!   exit; a control VM's own trap) could not wait for. One CPU carries them out at a time, in
//!   the order they came.
//! * **Guest events** (PSCI SYSTEM_OFF and SYSTEM_RESET, faults) come from the CPU that ran the
//!   vCPU, once it has left its guest ([`guest_stopped`], [`guest_reset`]).
//! * **Completions** come from `lifecycle`: a reset's or a stop's RAM is zero.
//!
//! The state lock ([`Class::Lifecycle`]) is never held while actions are carried out: those
//! wait for vCPUs, which may be reporting an event of their own.

use super::create::{self, HostDevice};
use super::emulate::control_channel;
use super::vm::{AssignedDevice, Vm};
use super::{StopReason, lifecycle, registry, sched};
use crate::arch::{cache, timer};
use crate::sync::{Class, Lock};
use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use control::command::{MAX_LINE, authorize, find_vm};
use control::reply::VmSummary;
use control::reply::{Reply as JsonReply, write_reply};
use control::{
    Action, Command, CrashLoop, Event, Input, Issuer, Lifecycle, NoRoom, Refusal, Request, State,
    StopWhy, parse,
};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use spin::Once;
use vmconfig::VmSpec;

/// Commands waiting at most: a console or control VM typing faster than armhv carries them out
/// is told to wait, not given the heap.
pub const MAX_QUEUED: usize = 16;

/// What armhv knows of the machine to build VMs on it.
pub struct Machine {
    pub cpu_mpidrs: Vec<u64>,
    pub ipa_bits: u8,
    /// Heap bytes and frames in use, for the check that a VM that failed to build left
    /// nothing behind (`None` in host tests).
    pub usage: Option<fn() -> (usize, usize)>,
}

struct Definition {
    spec: VmSpec<'static>,
    /// Its assigned host devices, resolved at boot, or why one cannot be assigned.
    assigned: Result<Vec<AssignedDevice>, String>,
}

struct Defined {
    machine: Machine,
    vms: Vec<Definition>,
}

static DEFINED: Once<Defined> = Once::new();

/// Who asked, and so where the answer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    Console,
    /// The control VM of this id, on its channel.
    ControlVm(usize),
}

/// A command, parsed and authorized, for VM `vm` (an id).
#[derive(Clone, Copy, Debug)]
pub struct Queued {
    pub command: Command,
    pub vm: usize,
    pub from: From,
}

struct Manager {
    vms: Vec<Lifecycle>,
    queue: VecDeque<Queued>,
}

static MANAGER: Lock<Manager> =
    Lock::new(Class::Lifecycle, Manager { vms: Vec::new(), queue: VecDeque::new() });
/// Commands are waiting.
static PENDING: AtomicBool = AtomicBool::new(false);
/// One of this module's flags or deadlines wants a look (read at the top of every CPU's loop).
static ATTENTION: AtomicBool = AtomicBool::new(false);
/// A CPU is carrying out commands.
static EXECUTING: AtomicBool = AtomicBool::new(false);
/// When a restart after a crash is due next (`u64::MAX`: none).
static DUE: AtomicU64 = AtomicU64::new(u64::MAX);
/// The last VM stopped by itself: armhv powers off once no VM value is left.
static POWER_OFF: AtomicBool = AtomicBool::new(false);
/// Ctrl-A q was typed.
static SHUTDOWN: AtomicBool = AtomicBool::new(false);
/// What armhv does once every VM has stopped by itself, or after Ctrl-A q (the final report
/// and the power-off), set by the top level at boot.
static ALL_STOPPED: Once<fn()> = Once::new();

/// Sets what happens once every VM has stopped.
pub fn when_all_stopped(f: fn()) {
    ALL_STOPPED.call_once(|| f);
}

/// What the console hears of commands and events (the control VMs' channels are served here).
pub struct Sinks {
    /// The reply to a command typed at the console.
    pub reply: fn(Reply<'_>),
    /// An event of VM `name` (and the VM, while it has a life), for the console's log.
    pub event: fn(&str, &Event, Option<&Vm>),
}

static SINKS: Once<Sinks> = Once::new();

/// The answer to a queued command.
#[derive(Clone, Copy)]
pub enum Reply<'a> {
    Done(&'a str, Command),
    Refused(&'a dyn core::fmt::Display),
}

/// Sets where replies and events go (once, at boot).
pub fn set_sinks(sinks: Sinks) {
    SINKS.call_once(|| sinks);
}

/// Defines the boot package's VMs on `machine` (none started): their registry slots, their
/// scheduler entries and states, and their assigned devices, each found by `host_device`.
pub fn define(
    specs: &[VmSpec<'static>],
    machine: Machine,
    host_device: &mut HostDevice,
    scheduler: &vmconfig::SchedSpec,
) {
    let vms: Vec<Definition> = specs
        .iter()
        .map(|spec| {
            let assigned = spec
                .passthrough
                .iter()
                .map(|pt| {
                    host_device(pt.path).map_err(|e| alloc::format!("passthrough {}: {e}", pt.path))
                })
                .collect();
            Definition { spec: spec.clone(), assigned }
        })
        .collect();
    registry::define(vms.len());
    let assigned: Vec<&[AssignedDevice]> =
        vms.iter().map(|d| d.assigned.as_deref().unwrap_or(&[])).collect();
    sched::install(specs, &assigned, machine.cpu_mpidrs.len(), scheduler);
    let crash_loop = CrashLoop::new(timer::frequency());
    let mut manager = MANAGER.lock();
    manager.vms =
        specs.iter().map(|spec| Lifecycle::new(spec.name, spec.policies, crash_loop)).collect();
    // Its room once: commands coming and going never grow the heap.
    manager.queue.reserve_exact(MAX_QUEUED);
    drop(manager);
    DEFINED.call_once(|| Defined { machine, vms });
    control_channel::set_answerer(answer);
}

fn defined() -> &'static Defined {
    DEFINED.get().expect("VMs are defined at boot, before any command")
}

/// The VMs' names, by id.
pub fn names() -> impl Iterator<Item = &'static str> {
    DEFINED.get().into_iter().flat_map(|d| d.vms.iter().map(|v| v.spec.name))
}

/// The id of the control VM named `name`, if it is one.
pub fn is_control(id: usize) -> bool {
    defined().vms.get(id).is_some_and(|d| d.spec.control)
}

/// What a line from control VM `vm_id` gets at once: the answer of a command that needs no
/// waiting (`list`, `info`, `help`, `log`), an error, or nothing (an empty string: the command
/// is queued and its reply comes when it is carried out).
pub(crate) fn answer(vm_id: usize, name: &str, line: &[u8], length: usize) -> String {
    let mut out = String::new();
    if line.first() == Some(&b'{') {
        // armhv's own JSON come back: a tty that echoes (`armhvctl` turns the echo off, but
        // the hvc driver turns it on again whenever the device is closed). Answering it would
        // feed the echo an answer of its own, without end.
        return out;
    }
    let too_long = (length > MAX_LINE).then_some(control::ParseError::TooLong(length));
    let request = match too_long.map_or_else(|| parse(line), Err) {
        Ok(request) => request,
        Err(e) => {
            let _ = write_reply(&mut out, &JsonReply::Error(&e));
            return out;
        }
    };
    if let Err(denied) = authorize(&request, Issuer::ControlVm(name)) {
        let _ = write_reply(&mut out, &JsonReply::Error(&denied));
        return out;
    }
    let _ = match request {
        Request::Help => write_reply(&mut out, &JsonReply::Help),
        Request::Log(level) => {
            set_log_level(level);
            write_reply(&mut out, &JsonReply::Ok)
        }
        Request::List => list(|vms| write_reply(&mut out, &JsonReply::List(vms))),
        Request::Vm(verb, vm) => match find_vm(names(), vm) {
            Err(e) => write_reply(&mut out, &JsonReply::Error(&e)),
            Ok(id) => match verb.command() {
                None => {
                    summary(id, |s| write_reply(&mut out, &JsonReply::Info(s))).unwrap_or(Ok(()))
                }
                Some(command) => {
                    match submit(Queued { command, vm: id, from: From::ControlVm(vm_id) }) {
                        Ok(()) => Ok(()),
                        Err(busy) => write_reply(&mut out, &JsonReply::Error(&busy)),
                    }
                }
            },
        },
    };
    out
}

/// Starts every VM marked to start at boot (`autostart`, the default), in package order, on
/// the boot CPU before the others run any: a VM that cannot be built is reported and the
/// others still start.
pub fn autostart() {
    let ids: Vec<usize> = defined()
        .vms
        .iter()
        .enumerate()
        .filter(|(_, d)| d.spec.autostart)
        .map(|(i, _)| i)
        .collect();
    for id in ids {
        // A refusal cannot happen: every VM is stopped at boot.
        let _ = command(id, Command::Start, From::Console, false);
    }
    if !MANAGER.lock().vms.iter().any(|l| l.state() != State::Stopped) {
        log::info!(
            "no VM is running: `start NAME` at the console's command line (Ctrl-A c) starts one, \
             Ctrl-A q powers off"
        );
    }
}

/// Queues a command; carried out at the top of a CPU's loop ([`run_queued`]), after which the
/// reply goes to `queued.from`. Refused when too many wait.
pub fn submit(queued: Queued) -> Result<(), &'static str> {
    let mut manager = MANAGER.lock();
    if manager.queue.len() >= MAX_QUEUED {
        return Err("armhv is busy with earlier commands; try again");
    }
    manager.queue.push_back(queued);
    PENDING.store(true, Ordering::Release);
    attention();
    Ok(())
}

/// Carries out the queued commands and the restarts that are due. Called at the top of every
/// CPU's loop, where the CPU runs no vCPU; one load when there is nothing to do.
#[inline(always)]
pub fn run_queued() {
    if ATTENTION.load(Ordering::Acquire) {
        run_queued_now();
    }
}

/// Something is queued or due (a command, Ctrl-A q, the power-off, a restart after a crash).
fn attention() {
    ATTENTION.store(true, Ordering::Release);
}

/// When the CPUs must look at [`run_queued`] even if nothing else wakes them.
pub fn deadline() -> Option<u64> {
    if POWER_OFF.load(Ordering::Relaxed) {
        return Some(timer::now() + timer::micros_to_ticks(1000));
    }
    let due = DUE.load(Ordering::Relaxed);
    (due != u64::MAX).then_some(due)
}

#[inline(never)]
fn run_queued_now() {
    if EXECUTING.swap(true, Ordering::Acquire) {
        return; // another CPU is at it
    }
    // Cleared before looking: whatever comes meanwhile sets it again.
    ATTENTION.store(false, Ordering::Release);
    loop {
        let next = {
            let mut manager = MANAGER.lock();
            let next = manager.queue.pop_front();
            PENDING.store(!manager.queue.is_empty(), Ordering::Release);
            next
        };
        let Some(q) = next else { break };
        match command(q.vm, q.command, q.from, true) {
            Ok(()) => {}
            Err(why) => reply(q.from, Reply::Refused(&why)),
        }
    }
    if SHUTDOWN.swap(false, Ordering::AcqRel) {
        shut_down_now();
    }
    let now = timer::now();
    if DUE.load(Ordering::Relaxed) <= now {
        DUE.store(u64::MAX, Ordering::Relaxed);
        let ticks: Vec<(usize, Vec<Action>)> = {
            let mut manager = MANAGER.lock();
            manager.vms.iter_mut().enumerate().map(|(id, l)| (id, l.tick(now))).collect()
        };
        for (id, actions) in ticks {
            perform(id, actions, None);
        }
    }
    if POWER_OFF.load(Ordering::Relaxed) && registry::alive() == 0 {
        POWER_OFF.store(false, Ordering::Relaxed);
        if let Some(all_stopped) = ALL_STOPPED.get() {
            all_stopped();
        }
    }
    // Still to come: a restart not yet due, a power-off waiting for the last VM to go.
    if DUE.load(Ordering::Relaxed) != u64::MAX || POWER_OFF.load(Ordering::Relaxed) {
        attention();
    }
    EXECUTING.store(false, Ordering::Release);
}

/// Refusals of a command, with the reasons the state machine does not know.
enum Refused {
    State(Refusal),
    NoRoom(String),
}

impl core::fmt::Display for Refused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::State(r) => r.fmt(f),
            Self::NoRoom(why) => f.write_str(why),
        }
    }
}

fn command(id: usize, command: Command, from: From, say: bool) -> Result<(), Refused> {
    let name = defined().vms[id].spec.name;
    // Only a start from stopped takes RAM: any other start is refused for its state.
    let stopped = MANAGER.lock().vms[id].state() == State::Stopped;
    if command == Command::Start
        && stopped
        && let Some(short) = no_room(id)
    {
        return Err(Refused::NoRoom(short));
    }
    let actions = {
        let mut manager = MANAGER.lock();
        manager.vms[id].handle(Input::Command(command), timer::now()).map_err(Refused::State)?
    };
    if say {
        reply(from, Reply::Done(name, command));
    }
    perform(id, actions, None);
    Ok(())
}

/// Why VM `id` cannot start now for want of RAM, if it cannot.
fn no_room(id: usize) -> Option<String> {
    let spec = &defined().vms[id].spec;
    let need = spec.memory.size
        + spec.disks.iter().filter(|d| d.partition.is_none()).map(|d| d.capacity).sum::<u64>();
    let free = crate::frames::free_bytes();
    (need > free).then(|| NoRoom { vm: spec.name, need, free }.to_string())
}

fn reply(from: From, reply: Reply<'_>) {
    match from {
        From::Console => {
            if let Some(sinks) = SINKS.get() {
                (sinks.reply)(reply);
            }
        }
        From::ControlVm(id) => {
            let Some(vm) = registry::get(id) else { return };
            let mut line = String::new();
            let _ = match reply {
                Reply::Done(..) => {
                    control::reply::write_reply(&mut line, &control::reply::Reply::Ok)
                }
                Reply::Refused(why) => {
                    control::reply::write_reply(&mut line, &control::reply::Reply::Error(why))
                }
            };
            sched::notify(&vm, control_channel::send(&vm, &line));
        }
    }
}

fn feed(id: usize, input: Input) -> Vec<Action> {
    let now = timer::now();
    let mut manager = MANAGER.lock();
    match manager.vms[id].handle(input, now) {
        Ok(actions) => actions,
        Err(why) => {
            log::error!("{why}");
            Vec::new()
        }
    }
}

/// Carries out `actions` for VM `id`; `caller` is the vCPU whose exit they come from, if any
/// (it has left its guest, and zeroes the RAM of a reset it asked for).
fn perform(id: usize, actions: Vec<Action>, caller: Option<usize>) {
    for action in actions {
        let vm = registry::get(id);
        match (action, vm) {
            (Action::BuildAndStart, _) => {
                let Defined { machine, vms } = defined();
                let before = machine.usage.map(|usage| usage());
                match build(id) {
                    Ok(vm) => {
                        registry::begin_life(vm.clone());
                        sched::vm_begins(&vm);
                        drop(vm);
                        perform(id, feed(id, Input::Started), None);
                    }
                    Err(why) => {
                        log::error!("{}: not started: {why}", vms[id].spec.name);
                        perform(id, feed(id, Input::StartFailed(why)), None);
                        // The reason has been reported and dropped: nothing of the VM is left.
                        if let (Some(before), Some(usage)) = (before, machine.usage) {
                            released(vms[id].spec.name, before, usage());
                        }
                    }
                }
            }
            (Action::PauseVcpus, Some(vm)) => lifecycle::pause(&vm),
            (Action::ResumeVcpus, Some(vm)) => lifecycle::resume(&vm),
            (Action::BeginReset, Some(vm)) => lifecycle::begin_reset(&vm, caller),
            (Action::TearDown, Some(vm)) => {
                lifecycle::stop(&vm);
            }
            (Action::ScrubAndRelease, _) => {} // `lifecycle::stop` zeroes the RAM, then `stop_done`
            (Action::WakeAt(at), _) => {
                DUE.fetch_min(at, Ordering::Relaxed);
                attention();
            }
            (Action::Report(event), vm) => emit(id, &event, vm.as_deref()),
            (action, None) => log::error!(
                "{}: {action:?} with no VM built (a monitor bug)",
                defined().vms[id].spec.name
            ),
        }
    }
}

fn emit(id: usize, event: &Event, vm: Option<&Vm>) {
    let name = defined().vms[id].spec.name;
    if let Some(sinks) = SINKS.get() {
        (sinks.event)(name, event, vm);
    }
    let line = control_channel::event_line(name, event);
    registry::for_each_live(|control| {
        if control.control.is_some() {
            sched::notify(control, control_channel::send(control, &line));
        }
    });
}

/// Builds VM `id`'s new life from its definition.
fn build(id: usize) -> Result<Arc<Vm>, String> {
    let Defined { machine, vms } = defined();
    let def = &vms[id];
    let assigned = def.assigned.as_ref().map_err(Clone::clone)?;
    let built = create::vm(id, &def.spec, &machine.cpu_mpidrs, machine.ipa_bits, &mut |path| {
        assigned
            .iter()
            .zip(&def.spec.passthrough)
            .find(|(_, pt)| pt.path == path)
            .map(|(dev, _)| dev.clone())
            .ok_or_else(|| String::from("not found"))
    });
    match built {
        Ok(vm) => {
            // A VMID the VM's last life used may still have translations cached.
            cache::flush_guest_tlbs();
            log::info!(
                "{}: {} vCPU(s) on CPU(s) {}, {} MiB RAM at {}, entry {}",
                vm.name,
                vm.vcpus.len(),
                Affinity(&vm.affinity),
                def.spec.memory.size >> 20,
                def.spec.memory.start,
                def.spec.entry
            );
            Ok(Arc::new(vm))
        }
        Err(why) => Err(why),
    }
}

/// Says whether VM `name`, which could not be built, gave back everything it took: its RAM,
/// tables and device models, and its NICs' network ports. Exact only while no other CPU
/// allocates (at boot, [`autostart`]); later it may report another CPU's allocations.
fn released(name: &str, before: (usize, usize), now: (usize, usize)) {
    if now == before {
        log::info!("{name}: everything it held is released (heap and frames as before it)");
    } else {
        log::warn!(
            "{name}: {:+} bytes of heap and {:+} frames since its start began (other VMs' \
             allocations count too once they run; at boot this is a leak in vmm::create, please \
             report it)",
            now.0 as i64 - before.0 as i64,
            now.1 as i64 - before.1 as i64
        );
    }
}

/// vCPU placement as the log shows it: `[0, 1]`, `any` for a vCPU the scheduler places.
struct Affinity<'a>(&'a [Option<usize>]);

impl core::fmt::Display for Affinity<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("[")?;
        for (i, a) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            match a {
                Some(c) => write!(f, "{sep}{c}")?,
                None => write!(f, "{sep}any")?,
            }
        }
        f.write_str("]")
    }
}

/// VM `vm` stopped from its own exit (`caller` has left its guest): it powered off, or armhv
/// stopped it on a fault. Its policy decides what follows.
pub fn guest_stopped(vm: &Vm, reason: &StopReason, caller: Option<usize>) {
    let input = match reason {
        StopReason::PoweredOff => Input::PowerOff,
        StopReason::Fault(why) => Input::Crash(why.clone()),
        StopReason::Shutdown => Input::Shutdown,
        StopReason::Command => Input::Command(Command::Stop),
    };
    let actions = feed(vm.id, input);
    perform(vm.id, actions, caller);
}

/// PSCI SYSTEM_RESET from vCPU `caller` of `vm`, which has left its guest.
pub fn guest_reset(vm: &Vm, caller: usize) {
    let actions = feed(vm.id, Input::Reboot);
    perform(vm.id, actions, Some(caller));
}

/// A reset's RAM is zero and the VM runs again (`lifecycle::run_scrub_slice`).
pub(crate) fn reset_done(vm: &Vm) {
    let actions = feed(vm.id, Input::ResetDone);
    perform(vm.id, actions, None);
}

/// A stop's RAM is zero (`lifecycle::run_scrub_slice`): the VM's life ends and what it held goes back (its
/// last references are dropped within a step of every CPU). After the last VM to stop by
/// itself, armhv powers off.
pub(crate) fn stop_done(vm: &Vm) {
    // Out of the registry before its state says stopped: a `start` that follows at once builds
    // a new life into an empty slot.
    let ended = registry::end_life(vm.id);
    let actions = feed(vm.id, Input::StopDone);
    let by_itself = actions.iter().any(|a| {
        matches!(
            a,
            Action::Report(Event::Stopped(
                StopWhy::PoweredOff
                    | StopWhy::Rebooted
                    | StopWhy::Crashed(_)
                    | StopWhy::CrashLoop { .. }
                    | StopWhy::Shutdown
            ))
        )
    });
    let (reports, rest): (Vec<Action>, Vec<Action>) =
        actions.into_iter().partition(|a| matches!(a, Action::Report(_)));
    for report in reports {
        if let Action::Report(event) = report {
            emit(vm.id, &event, Some(vm)); // with its statistics, which end with it
        }
    }
    drop(ended);
    perform(vm.id, rest, None);
    let all_stopped = {
        let manager = MANAGER.lock();
        manager.vms.iter().all(|l| l.state() == State::Stopped && l.restart_at().is_none())
    };
    if all_stopped {
        if by_itself {
            POWER_OFF.store(true, Ordering::Relaxed);
            attention();
        } else {
            log::info!(
                "no VM is running: `start NAME` at the console's command line (Ctrl-A c) \
                 starts one, Ctrl-A q powers off"
            );
        }
    }
}

/// Ctrl-A q: every VM stops, and armhv powers off once they have. Carried out at the top of
/// a CPU's loop, as a command.
pub fn shutdown() {
    SHUTDOWN.store(true, Ordering::Release);
    attention();
}

fn shut_down_now() {
    let count = registry::count();
    for id in 0..count {
        let actions = feed(id, Input::Shutdown);
        perform(id, actions, None);
    }
    let all_stopped = MANAGER.lock().vms.iter().all(|l| l.state() == State::Stopped);
    if all_stopped {
        POWER_OFF.store(true, Ordering::Relaxed);
        attention();
    }
}

/// What `list` and `info` show of VM `id`.
pub fn summary<R>(id: usize, f: impl FnOnce(&VmSummary<'_>) -> R) -> Option<R> {
    let cpus = cpus_of(id);
    Some(f(&summary_of(id, &cpus)?))
}

/// What `list` shows: every VM's summary, by id.
pub fn list<R>(f: impl FnOnce(&[VmSummary<'_>]) -> R) -> R {
    let count = registry::count();
    let cpus: Vec<Vec<u32>> = (0..count).map(cpus_of).collect();
    let vms: Vec<VmSummary<'_>> = (0..count).filter_map(|id| summary_of(id, &cpus[id])).collect();
    f(&vms)
}

/// The physical CPUs of VM `id`'s vCPUs (none while it is stopped).
fn cpus_of(id: usize) -> Vec<u32> {
    registry::get(id).map_or(Vec::new(), |vm| vm.vcpus.iter().map(|s| s.cpu() as u32).collect())
}

fn summary_of<'a>(id: usize, cpus: &'a [u32]) -> Option<VmSummary<'a>> {
    let def = defined().vms.get(id)?;
    let (state, uptime, restarts, policies) = {
        let manager = MANAGER.lock();
        let l = &manager.vms[id];
        (l.state(), l.uptime(timer::now()), l.restarts(), l.policies())
    };
    let exits = registry::get(id).map_or(0, |vm| vm.stats.exits.load(Ordering::Relaxed));
    let ticks_per_ms = (timer::frequency() / 1000).max(1);
    Some(VmSummary {
        name: def.spec.name,
        state,
        vcpus: def.spec.vcpus,
        cpus,
        memory_bytes: def.spec.memory.size,
        uptime_ms: uptime.map(|t| t / ticks_per_ms),
        exits,
        restarts,
        policies,
    })
}

/// `log LEVEL`: armhv's log level from now on.
pub fn set_log_level(level: control::LogLevel) {
    use control::LogLevel;
    log::set_max_level(match level {
        LogLevel::Error => log::LevelFilter::Error,
        LogLevel::Warn => log::LevelFilter::Warn,
        LogLevel::Info => log::LevelFilter::Info,
        LogLevel::Debug => log::LevelFilter::Debug,
        LogLevel::Trace => log::LevelFilter::Trace,
    });
}
