//! The dynamic virtual interrupt distributor's mechanism: armhv's side of crate `irqdist`,
//! which profiles interrupt streams and decides when a saturated CPU should hand one of them
//! to another.
//!
//! * **Sources** are each VM's device interrupt lines (virtio devices and the PL011, SPIs), its
//!   virtual timer and the lines of devices assigned to it (passthrough). A stream *arrives* on the CPU of the vCPU the guest routed it to
//!   (`GICD_IROUTER`; for the timer, its own vCPU): that CPU pays for it unless armhv moves it.
//!   A real-time VM's streams, every timer and every assigned device's line stay put.
//! * **Moving** a stream is the vGIC's [`vgic::Vgic::redirect_spi`]: the SPI is delivered to
//!   the chosen vCPU whatever the guest routed, and the scheduler (`sched::notify`) kicks that vCPU's
//!   CPU with a physical IPI, where it is injected. With `spread = "all"` each rising edge goes
//!   to the next of the VM's vCPUs that the policy allows ([`Distributor::spread_targets`]:
//!   on other CPUs below its target limit) in turn.
//! * **Time**: CPU 0 evaluates the policy every bucket (10 ms): its run loop ends a slice or
//!   an idle period there ([`deadline`], [`tick_if_due`]). The CPU time each vCPU used is
//!   recorded when its run ends and, for runs still going, at every evaluation.
//! * **Console**: Ctrl-A d switches the policy on and off (off reverts every moved stream;
//!   profiling goes on), Ctrl-A t prints the last [`TRACE_TICKS`] ticks of interrupts per
//!   source and delivering CPU, and of each VM's share of each CPU (`run:VM@cpuN`, percent of
//!   the tick): whether a stream's CPU was saturated, and by whom, tick by tick.
//!
//! Lock order: a VM's vGIC, then this module's state (the device path holds the vGIC while it
//! records); actions are applied to the vGICs after the state's lock is released.

use super::registry;
use super::vm::Vm;
use super::wakeups::Wakeups;
use crate::arch::timer;
use crate::sync::{Class, Lock};
use ::irqdist::{Action, Distributor, Params};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};
use guest_abi::map;
use spin::Once;
use vmconfig::{IrqDistSpec, Spread};

/// The CPU that evaluates the policy.
const TICK_CPU: usize = 0;
/// Ticks the trace keeps (10 s of 10 ms ticks; the study's figures show 150). Enough for one
/// dump after a whole measured transfer: a dump runs on CPU 0, the contended one, so the
/// bench dumps only before and after the transfer.
pub const TRACE_TICKS: usize = 1000;
/// The virtual timer's INTID, as the guest sees it.
const TIMER_INTID: u32 = map::VTIMER_INTID;

static STATE: Once<Lock<State>> = Once::new();
/// When CPU 0 evaluates next (`u64::MAX`: never, not configured).
static NEXT_TICK: AtomicU64 = AtomicU64::new(u64::MAX);

struct Source {
    vm: usize,
    intid: u32,
    name: String,
    /// The vCPUs a redirected stream goes to (several with `spread = "all"`), and which is next.
    targets: Vec<usize>,
    next: usize,
    /// Where a redirected stream arrives.
    from_cpu: usize,
}

struct State {
    dist: Distributor,
    spread: Spread,
    sources: Vec<Source>,
    cpus: usize,
    /// Per CPU: the vCPU running there as `(vm, index)`, and since when it is not recorded.
    running: Vec<Option<(usize, usize, u64)>>,
    /// Per CPU: when its last run ended, unless it idled since. The time armhv spends between
    /// two runs (scheduling, switching) is charged to the run that follows: a CPU is busy
    /// whenever it is not idle.
    busy_since: Vec<Option<u64>>,
    tick_len: u64,
    /// When the current tick began: ticks are a fixed grid from the start.
    tick_at: u64,
    /// This tick's interrupts per `(source, delivering CPU)`, then per `(VM, CPU)` the time
    /// the VM's vCPUs ran there (timer units, a percentage once the tick is pushed); then the
    /// last ticks', oldest first (a ring of `TRACE_TICKS` rows from `trace_head`).
    current: Vec<u16>,
    run_time: Vec<u64>,
    vms: Vec<String>,
    /// Interrupts per `(source, delivering CPU)` since the start.
    totals: Vec<u64>,
    trace: Vec<u16>,
    trace_head: usize,
    trace_len: usize,
    ticks: u64,
}

impl State {
    fn source_of(&self, vm: usize, intid: u32) -> Option<usize> {
        self.sources.iter().position(|s| s.vm == vm && s.intid == intid)
    }

    fn count(&mut self, source: usize, cpu: usize) {
        let i = source * self.cpus + cpu;
        self.current[i] = self.current[i].saturating_add(1);
        self.totals[i] += 1;
    }

    /// `vm`'s vCPU `index` ran on `cpu` from `since` to `now`.
    fn ran(&mut self, cpu: usize, vm: usize, index: usize, since: u64, now: u64) {
        self.dist.record_run(cpu, vm, index, since, now);
        if let Some(t) = self.run_time.get_mut(vm * self.cpus + cpu) {
            *t += now.saturating_sub(since);
        }
    }

    /// Ends the ticks from `tick_at` to `now`: `n` of them when CPU 0 evaluates late (under
    /// icount other CPUs can hold the host thread past a deadline), so that tick `k` stays
    /// `k` tick lengths after the start. A late evaluation's interrupts are shared out over its
    /// ticks and its run time is a share of all of them.
    fn push_ticks(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.tick_at).max(1);
        let n = (elapsed / self.tick_len.max(1)).clamp(1, TRACE_TICKS as u64);
        let runs = self.sources.len() * self.cpus;
        for (i, t) in self.run_time.iter_mut().enumerate() {
            self.current[runs + i] = (*t * 100 / elapsed).min(100) as u16;
            *t = 0;
        }
        let width = self.current.len();
        for k in 0..n {
            let row = (self.trace_head + self.trace_len) % TRACE_TICKS;
            let dst = &mut self.trace[row * width..(row + 1) * width];
            for (i, (d, &c)) in dst.iter_mut().zip(&self.current).enumerate() {
                let c = u64::from(c);
                *d = if i < runs { (c / n + u64::from(k < c % n)) as u16 } else { c as u16 };
            }
            if self.trace_len < TRACE_TICKS {
                self.trace_len += 1;
            } else {
                self.trace_head = (self.trace_head + 1) % TRACE_TICKS;
            }
        }
        self.current.fill(0);
        self.ticks += n;
        self.tick_at += n * self.tick_len;
    }
}

/// Sets the distributor up for `vms` on `cpus` CPUs (after the scheduler placed the vCPUs).
pub fn install(
    vms: &[vmconfig::VmSpec<'static>],
    assigned: &[&[crate::vm::AssignedDevice]],
    placements: &[Vec<usize>],
    cpus: usize,
    spec: Option<IrqDistSpec>,
) {
    let Some(spec) = spec else { return };
    let units_per_ms = timer::frequency() / 1000;
    let params = Params {
        rt_busy_pct: spec.avoid_realtime_pct.map_or(u32::MAX, u32::from),
        ..Params::new(cpus, units_per_ms)
    };
    let mut dist = Distributor::new(params)
        .unwrap_or_else(|e| panic!("interrupt distributor parameters: {e}"));
    dist.set_enabled(spec.enabled);
    let mut sources = Vec::new();
    for (id, vm) in vms.iter().enumerate() {
        let added = dist.add_vm(&placements[id]).unwrap_or_else(|e| panic!("{}: {e}", vm.name));
        debug_assert_eq!(added, id);
        if vm.sched.realtime.is_some() {
            dist.set_realtime(id).unwrap_or_else(|e| panic!("{}: {e}", vm.name));
        }
        // The emulated devices' lines, movable unless the VM is real-time; then its timer and
        // its assigned devices' lines, never moved (a physical interrupt goes where armhv
        // routed it, to vCPU 0's CPU: they count for that CPU's load).
        let movable = vm.sched.realtime.is_none();
        let lines = device_lines(vm).into_iter().map(|(intid, name)| (intid, name, movable));
        let timer = (TIMER_INTID, format!("{}/timer", vm.name), false);
        let assigned = assigned[id].iter().flat_map(|d| {
            d.interrupts
                .iter()
                .map(|&(intid, _)| (intid, format!("{}/{}", vm.name, d.node_name), false))
        });
        for (intid, name, movable) in lines.chain(core::iter::once(timer)).chain(assigned) {
            dist.add_source(id, movable).unwrap_or_else(|e| panic!("{}: {e}", vm.name));
            let (targets, next, from_cpu) = (Vec::with_capacity(usize::from(vm.vcpus)), 0, 0);
            sources.push(Source { vm: id, intid, name, targets, next, from_cpu });
        }
    }
    let width = (sources.len() + vms.len()) * cpus;
    let tick_len = params.window / params.buckets as u64;
    log::info!(
        "irqdist: {} interrupt sources profiled over {} ms windows, policy {}, spread {}{}",
        sources.len(),
        params.window / units_per_ms,
        if spec.enabled { "on" } else { "off (Ctrl-A d)" },
        if spec.spread == Spread::All { "over every other CPU" } else { "to one CPU" },
        match params.rt_busy_pct {
            pct @ 0..=100 => format!(", never onto CPUs where real-time VMs ran >= {pct} %"),
            _ => String::new(),
        },
    );
    let sources_len = sources.len();
    let start = timer::now();
    STATE.call_once(|| {
        Lock::new(
            Class::IrqDist,
            State {
                dist,
                spread: spec.spread,
                sources,
                cpus,
                running: vec![None; cpus],
                busy_since: vec![None; cpus],
                tick_len,
                tick_at: start,
                current: vec![0; width],
                run_time: vec![0; vms.len() * cpus],
                vms: vms.iter().map(|v| String::from(v.name)).collect(),
                totals: vec![0; sources_len * cpus],
                trace: vec![0; width * TRACE_TICKS],
                trace_head: 0,
                trace_len: 0,
                ticks: 0,
            },
        )
    });
    NEXT_TICK.store(start + tick_len, Ordering::Release);
}

/// A VM's device interrupt lines and their names: `net0`, `blk0`, `console0`, `rng0`,
/// `control0` (virtio, numbered per kind in slot order), `uart`.
fn device_lines(vm: &vmconfig::VmSpec<'_>) -> Vec<(u32, String)> {
    use vmconfig::VirtioDevice;
    let mut lines = Vec::new();
    if vm.devices.contains(&vmconfig::DeviceKind::Pl011) {
        lines.push((map::spi_intid(map::UART_SPI), format!("{}/uart", vm.name)));
    }
    let (mut nets, mut blks) = (0.., 0..);
    for (slot, dev) in vm.virtio_devices().enumerate() {
        let name = match dev {
            VirtioDevice::Net(_) => format!("net{}", nets.next().unwrap_or(0)),
            VirtioDevice::Block(_) => format!("blk{}", blks.next().unwrap_or(0)),
            VirtioDevice::Console => "console0".into(),
            VirtioDevice::Rng => "rng0".into(),
            VirtioDevice::Control => "control0".into(),
        };
        let intid = map::spi_intid(map::virtio_spi(slot));
        lines.push((intid, format!("{}/{name}", vm.name)));
    }
    lines
}

/// An emulated device of `vm` raises SPI `intid` (a rising edge); `gic` is the VM's vGIC,
/// locked by the caller. Profiles it, counts it for the trace and, while it is spread over
/// several vCPUs, points it at the next one.
pub fn device_irq(vm: &Vm, intid: u32, gic: &mut vgic::Vgic) {
    let Some(state) = STATE.get() else { return };
    let mut st = state.lock();
    let Some(s) = st.source_of(vm.id, intid) else { return };
    let arrival = gic.routed_vcpu(intid).unwrap_or(0);
    let now = timer::now();
    st.dist.record_irq(vm.vcpus[arrival].cpu(), s, now);
    let src = &mut st.sources[s];
    let target = match src.targets.len() {
        0 => arrival,
        1 => src.targets[0],
        n => {
            let v = src.targets[src.next % n];
            src.next = (src.next + 1) % n;
            gic.redirect_spi(intid, Some(v));
            v
        }
    };
    st.count(s, vm.vcpus[target].cpu());
}

/// `vm`'s vCPU `index` has a virtual-timer interrupt.
pub fn timer_irq(vm: &Vm, index: usize) {
    fixed_irq(vm, TIMER_INTID, vm.vcpus[index].cpu());
}

/// A physical interrupt of a device assigned to `vm` arrived on this CPU.
pub fn passthrough_irq(vm: &Vm, intid: u32) {
    fixed_irq(vm, intid, crate::arch::cpu::current());
}

/// Profiles and counts an interrupt of a source that is never moved, arriving on `cpu`.
fn fixed_irq(vm: &Vm, intid: u32, cpu: usize) {
    let Some(state) = STATE.get() else { return };
    let mut st = state.lock();
    let Some(s) = st.source_of(vm.id, intid) else { return };
    st.dist.record_irq(cpu, s, timer::now());
    st.count(s, cpu);
}

/// Whether a distributor is configured: the hooks on the scheduler's path cost one load and
/// a branch without one (the VM-switch microbenchmark runs through them).
#[inline(always)]
fn configured() -> bool {
    NEXT_TICK.load(Ordering::Relaxed) != u64::MAX
}

/// `vm`'s vCPU `index` starts running on `cpu`.
#[inline(always)]
pub fn run_begins(cpu: usize, vm: usize, index: usize) {
    if configured() {
        record_run_begins(cpu, vm, index);
    }
}

fn record_run_begins(cpu: usize, vm: usize, index: usize) {
    let Some(state) = STATE.get() else { return };
    let mut st = state.lock();
    let since = st.busy_since[cpu].take().unwrap_or_else(timer::now);
    st.running[cpu] = Some((vm, index, since));
}

/// `cpu` has nothing to run and waits.
pub fn idles(cpu: usize) {
    if !configured() {
        return;
    }
    let Some(state) = STATE.get() else { return };
    state.lock().busy_since[cpu] = None;
}

/// The vCPU running on `cpu` stopped.
#[inline(always)]
pub fn run_ends(cpu: usize) {
    if configured() {
        record_run_ends(cpu);
    }
}

fn record_run_ends(cpu: usize) {
    let Some(state) = STATE.get() else { return };
    let mut st = state.lock();
    let now = timer::now();
    if let Some((vm, index, since)) = st.running[cpu].take() {
        st.ran(cpu, vm, index, since, now);
    }
    st.busy_since[cpu] = Some(now);
}

/// The scheduler moved `vm`'s vCPU `index` to `cpu`.
pub fn vcpu_moved(vm: usize, index: usize, cpu: usize) {
    let Some(state) = STATE.get() else { return };
    state.lock().dist.move_vcpu(vm, index, cpu);
}

/// When `cpu` must call [`tick_if_due`] next, if ever.
#[inline(always)]
pub fn deadline(cpu: usize) -> Option<u64> {
    let next = NEXT_TICK.load(Ordering::Relaxed);
    (cpu == TICK_CPU && next != u64::MAX).then_some(next)
}

/// Whether `cpu` evaluates the policy ([`tick`]).
#[inline(always)]
pub fn evaluates_on(cpu: usize) -> bool {
    cpu == TICK_CPU && configured()
}

/// On CPU 0 when its timer may have fired: evaluates the policy if a tick is due and applies
/// its decisions to the vGICs; the vCPUs to wake go into `wake`.
pub fn tick(now: u64, wake: &mut Wakeups) {
    if now < NEXT_TICK.load(Ordering::Relaxed) {
        return;
    }
    let Some(state) = STATE.get() else { return };
    let mut changes: Vec<(usize, u32, Option<usize>, String)> = Vec::new();
    {
        let mut st = state.lock();
        // Runs still going count up to now.
        for c in 0..st.cpus {
            if let Some((vm, index, since)) = st.running[c] {
                st.ran(c, vm, index, since, now);
                st.running[c] = Some((vm, index, now));
            }
        }
        st.push_ticks(now);
        NEXT_TICK.store(st.tick_at + st.tick_len, Ordering::Relaxed);
        let actions: Vec<Action> = st.dist.evaluate(now).to_vec();
        for action in actions {
            changes.extend(apply(&mut st, action));
        }
    }
    for (vm, intid, to, message) in changes {
        log::info!("irqdist: {message}");
        let Some(vm) = registry::get(vm) else { continue };
        let woken = vm.vgic.lock().redirect_spi(intid, to);
        if let Some(woken) = woken {
            wake.interrupts(vm.id, woken);
        }
    }
}

/// Records `action` in the sources; returns the vGIC change to make and what to log, or nothing
/// for a VM that has no life now.
fn apply(st: &mut State, action: Action) -> Option<(usize, u32, Option<usize>, String)> {
    match action {
        Action::Redirect { source, from_cpu, to_vcpu, to_cpu } => {
            registry::get(st.sources[source].vm)?;
            let State { dist, sources, spread, .. } = st;
            let src = &mut sources[source];
            // In place: the list has room for every vCPU from the start, so that a move
            // allocates nothing (the final report compares the heap with its baseline).
            src.targets.clear();
            if *spread == Spread::All {
                // Not every other vCPU: those on CPUs the policy would also move it to.
                src.targets.extend(dist.spread_targets(source).map(|(v, _)| v));
            } else {
                src.targets.push(to_vcpu);
            }
            let targets = &src.targets;
            let mut message = format!(
                "{} redirected from CPU {from_cpu} to vCPU {to_vcpu} on CPU {to_cpu}",
                src.name
            );
            if targets.len() > 1 {
                let _ = write!(message, " (in turn with vCPUs {targets:?})");
            }
            src.next = 0;
            src.from_cpu = from_cpu;
            Some((src.vm, src.intid, Some(to_vcpu), message))
        }
        Action::Revert { source } => {
            let src = &mut st.sources[source];
            src.targets.clear();
            Some((src.vm, src.intid, None, format!("{} back on CPU {}", src.name, src.from_cpu)))
        }
    }
}

/// A fresh vGIC after `vm`'s reset: its moved streams are moved again.
pub fn reapply(vm: &Vm, gic: &mut vgic::Vgic) {
    let Some(state) = STATE.get() else { return };
    let st = state.lock();
    for src in st.sources.iter().filter(|s| s.vm == vm.id) {
        if let Some(&v) = src.targets.first() {
            gic.redirect_spi(src.intid, Some(v));
        }
    }
}

/// Ctrl-A d: switches the policy on or off.
pub fn toggle() {
    let Some(state) = STATE.get() else {
        log::info!("console: no interrupt distributor (add an [irqdist] table to the config)");
        return;
    };
    let mut st = state.lock();
    let on = !st.dist.enabled();
    st.dist.set_enabled(on);
    log::info!("console: interrupt distributor {}", if on { "on" } else { "off" });
}

/// Ctrl-A t: the last ticks' interrupts per source and delivering CPU, oldest first; only
/// columns with an interrupt are shown. (Composed under the lock, printed after it: devices
/// raising interrupts on other CPUs must not wait for the console.)
pub fn print_trace() {
    let Some(state) = STATE.get() else {
        log::info!("console: no interrupt distributor (add an [irqdist] table to the config)");
        return;
    };
    let lines = {
        let st = state.lock();
        let width = st.current.len();
        let row = |t: usize| {
            let r = (st.trace_head + t) % TRACE_TICKS;
            &st.trace[r * width..(r + 1) * width]
        };
        let columns: Vec<usize> =
            (0..width).filter(|&c| (0..st.trace_len).any(|t| row(t)[c] != 0)).collect();
        let tick_ms = st.tick_len / (timer::frequency() / 1000).max(1);
        let mut header = format!("trace {} ticks of {tick_ms} ms, oldest first:", st.trace_len);
        let runs = st.sources.len();
        for &c in &columns {
            let (row, cpu) = (c / st.cpus, c % st.cpus);
            match st.sources.get(row) {
                Some(src) => write!(header, " {}@cpu{cpu}", src.name),
                None => write!(header, " run:{}@cpu{cpu}", st.vms[row - runs]),
            }
            .ok();
        }
        let now = timer::now();
        let p = st.dist.profiler();
        let mut summary = String::from("last window:");
        for c in 0..st.cpus {
            let _ = write!(summary, " cpu{c} {}% busy", p.cpu_stats(c, now).utilization);
        }
        for (i, src) in st.sources.iter().enumerate() {
            if let Some(stats) = p.source_stats(i, now).filter(|s| s.events > 0) {
                let _ = write!(summary, ", {} {:?} {}", src.name, stats.pattern, stats.events);
            }
        }
        let mut lines = vec![summary, header];
        let first = st.ticks - st.trace_len as u64;
        for t in 0..st.trace_len {
            let mut line = format!("tick {}", first + t as u64);
            for &c in &columns {
                let _ = write!(line, " {}", row(t)[c]);
            }
            lines.push(line);
        }
        lines
    };
    for line in lines {
        log::info!("irqdist: {line}");
    }
    log::info!("irqdist: trace end");
}

/// For the final report: every source's interrupts since the start, per delivering CPU.
pub fn print_totals() {
    let Some(state) = STATE.get() else { return };
    let line = {
        let st = state.lock();
        let mut line = String::from("irqdist: interrupts since the start:");
        for (i, &n) in st.totals.iter().enumerate().filter(|(_, n)| **n > 0) {
            let _ = write!(line, " {}@cpu{} {n},", st.sources[i / st.cpus].name, i % st.cpus);
        }
        line.pop();
        line
    };
    log::info!("{line}");
}
