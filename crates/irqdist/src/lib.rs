//! The dynamic virtual interrupt distributor's policy, and the profiler it decides from.
//!
//! A physical CPU that carries two periodic interrupt streams while it is saturated spends its
//! time switching between them: on the multicore CE hypervisor that this reproduces, a
//! real-time VM's audio interrupts (3–4 per 10 ms tick, each preempting) left a
//! general-purpose VM's network stack on the same CPU a seventh of its bandwidth. Delivering
//! one of the streams to a vCPU of its VM on a lightly loaded CPU (forwarded there by a
//! physical IPI and injected) gave it back. This crate decides *when* and *where*; the
//! hypervisor moves the interrupts.
//!
//! # Policy
//!
//! At each [`Distributor::evaluate`] (every bucket, 10 ms by default), over the profiler's
//! sliding window (100 ms):
//!
//! * **Redirect** when a CPU is saturated (utilization ≥ `saturation_pct`) and carries at least
//!   two [periodic](Pattern::Periodic) streams. Of those, the one moved is a `movable` source
//!   (a real-time VM's stream stays where its vCPU preempts) that is not redirected already,
//!   whose VM has a vCPU on another CPU below `target_max_pct`; among several, the busiest
//!   stream (it frees the most). The target is the least utilized such CPU (lowest number on a
//!   tie) and the VM's lowest-numbered vCPU there.
//! * **Optionally never onto a real-time job** (`rt_busy_pct`, the config's
//!   `[irqdist] avoid_realtime_pct`, off by default): a CPU where a
//!   [real-time](Distributor::set_realtime) VM's vCPUs ran at least `rt_busy_pct` of the window
//!   is no target, however idle it is otherwise, nor part of a spread
//!   ([`Distributor::spread_targets`]). Off because it hurt where it was meant to help: in
//!   Table 1's cases 6 and 7 (a real-time job on 40 % of the target CPUs) moving the network
//!   stream there gave 0.65 of case 1's bandwidth, and keeping it off them 0.12
//!   (`bench/README.md`).
//! * **Revert** a redirected stream when it is no longer *paired*: it, or every other periodic
//!   stream on the CPU it came from, has become sporadic. Hysteresis keeps this from flapping:
//!   the stream must stay unpaired for `revert_after` without a break (a stream that is
//!   sporadic for one window and periodic again the next is left where it is), and no stream
//!   changes place within `min_dwell` of its last change. Saturation plays no part in the
//!   revert: the CPU the stream left is unsaturated *because* it left.
//! * **Forced revert** at once, whatever the hysteresis, when the target vCPU has been moved
//!   off the target CPU ([`Distributor::move_vcpu`]), and for every stream when the distributor
//!   is switched off ([`Distributor::set_enabled`]). Profiling goes on while it is off.
//!
//! # How the hypervisor drives it
//!
//! ```text
//!  physical IRQ of a profiled source on CPU c:  record_irq(c, source, now)
//!  a vCPU stops running on CPU c:               record_run(c, vm, vcpu, start, end)
//!  the scheduler moves a vCPU:                  move_vcpu(vm, vcpu, cpu)
//!  every 10 ms on one CPU:                      for a in evaluate(now): apply a
//!      Redirect { source, to_cpu, to_vcpu, .. }: from now on forward source's interrupts to
//!          to_cpu (SGI) and inject them into to_vcpu there
//!      Revert { source }: inject on the arrival CPU again
//! ```
//!
//! Everything is allocated when VMs and sources are added; recording and evaluating allocate
//! nothing. The hypervisor keeps the `Distributor` behind one lock; `record_irq` is a few
//! additions, `evaluate` is O(sources × (sources + vCPUs)).
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

use alloc::vec::Vec;
use core::fmt;

mod profile;
#[cfg(test)]
mod tests;

pub use profile::{CpuStats, Pattern, Profiler, SourceStats};

/// Profiling window unless configured (as in the paper).
pub const DEFAULT_WINDOW_MS: u64 = 100;
/// Buckets per window: the window slides by a tenth.
pub const DEFAULT_BUCKETS: usize = 10;

/// Tunables. Times are in the caller's unit (whatever `now` counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub cpus: usize,
    /// The sliding window over which everything is measured.
    pub window: u64,
    /// Buckets per window.
    pub buckets: usize,
    /// Fewest interrupts in a window for a periodic stream.
    pub min_events: u32,
    /// Least share of the window's buckets (percent) with an interrupt for a periodic stream.
    pub min_presence_pct: u32,
    /// Utilization at or above which a CPU is saturated.
    pub saturation_pct: u32,
    /// A target CPU must be below this utilization.
    pub target_max_pct: u32,
    /// How long a redirected stream must stay unpaired before it is reverted.
    pub revert_after: u64,
    /// Least time between two changes of one stream.
    pub min_dwell: u64,
    /// Share of the window (percent) a real-time VM's vCPUs must run on a CPU to keep streams
    /// off it; above 100: never.
    pub rt_busy_pct: u32,
}

impl Params {
    /// The defaults for `cpus` CPUs, with `units_per_ms` time units to the millisecond: a
    /// 100 ms window of 10 buckets; periodic = at least 5 interrupts (50 Hz), in at least 6
    /// of the 10 buckets; saturated at 90 %; targets below 70 %; revert after 300 ms unpaired;
    /// 500 ms between changes; real-time jobs do not keep streams off a CPU (the crate
    /// documentation says why).
    pub fn new(cpus: usize, units_per_ms: u64) -> Self {
        Self {
            cpus,
            window: DEFAULT_WINDOW_MS * units_per_ms,
            buckets: DEFAULT_BUCKETS,
            min_events: 5,
            min_presence_pct: 60,
            saturation_pct: 90,
            target_max_pct: 70,
            revert_after: 300 * units_per_ms,
            min_dwell: 500 * units_per_ms,
            rt_busy_pct: u32::MAX,
        }
    }
}

/// A configuration the distributor cannot take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    NoCpus,
    /// No buckets, or a window shorter than one time unit per bucket.
    Window,
    /// A VM with no vCPUs.
    NoVcpus,
    /// vCPU `index` placed on a CPU that does not exist.
    Placement {
        index: usize,
        cpu: usize,
    },
    /// A source of a VM that was not added.
    UnknownVm(usize),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoCpus => write!(f, "no CPUs to distribute interrupts over"),
            Self::Window => {
                write!(f, "the window needs at least one bucket and one time unit per bucket")
            }
            Self::NoVcpus => write!(f, "a VM needs at least one vCPU"),
            Self::Placement { index, cpu } => {
                write!(f, "vCPU {index} is on CPU {cpu}, which does not exist")
            }
            Self::UnknownVm(vm) => write!(f, "VM {vm} was not added"),
        }
    }
}

/// What the hypervisor must change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Deliver `source`'s interrupts, which arrive on `from_cpu`, to vCPU `to_vcpu` of the
    /// source's VM, on `to_cpu`.
    Redirect { source: usize, from_cpu: usize, to_vcpu: usize, to_cpu: usize },
    /// Deliver `source`'s interrupts where they arrive again.
    Revert { source: usize },
}

/// Where a redirected source's interrupts go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub from_cpu: usize,
    pub to_cpu: usize,
    pub to_vcpu: usize,
}

#[derive(Clone, Copy, Debug)]
struct Policy {
    movable: bool,
    route: Option<Route>,
    changed_at: Option<u64>,
    unpaired_since: Option<u64>,
}

/// The profiler and the policy (see the crate documentation).
#[derive(Debug)]
pub struct Distributor {
    params: Params,
    profiler: Profiler,
    enabled: bool,
    policy: Vec<Policy>,
    /// Scratch for `evaluate`, one entry per source / CPU.
    stats: Vec<SourceStats>,
    utilization: Vec<u32>,
    /// Per CPU: percent of the window real-time VMs' vCPUs ran there.
    rt_load: Vec<u32>,
    /// Per VM: real-time ([`Self::set_realtime`]).
    realtime: Vec<bool>,
    actions: Vec<Action>,
}

impl Distributor {
    /// A distributor, switched on, with no VMs or sources yet.
    pub fn new(params: Params) -> Result<Self, ConfigError> {
        let profiler = Profiler::new(&params)?;
        Ok(Self {
            params,
            profiler,
            enabled: true,
            policy: Vec::new(),
            stats: Vec::new(),
            utilization: alloc::vec![0; params.cpus],
            rt_load: alloc::vec![0; params.cpus],
            realtime: Vec::new(),
            actions: Vec::new(),
        })
    }

    /// Adds a VM whose vCPU `i` is on CPU `placement[i]`; returns its index. Allocates.
    pub fn add_vm(&mut self, placement: &[usize]) -> Result<usize, ConfigError> {
        if placement.is_empty() {
            return Err(ConfigError::NoVcpus);
        }
        if let Some((index, &cpu)) =
            placement.iter().enumerate().find(|(_, c)| **c >= self.params.cpus)
        {
            return Err(ConfigError::Placement { index, cpu });
        }
        self.realtime.push(false);
        Ok(self.profiler.add_vm(placement))
    }

    /// Marks `vm` as real-time: no stream is moved onto a CPU where its vCPUs are busy.
    pub fn set_realtime(&mut self, vm: usize) -> Result<(), ConfigError> {
        let slot = self.realtime.get_mut(vm).ok_or(ConfigError::UnknownVm(vm))?;
        *slot = true;
        Ok(())
    }

    /// Adds an interrupt source delivered to `vm`; `movable`: the policy may redirect it (say
    /// no for a real-time VM's streams). Returns its index. Allocates.
    pub fn add_source(&mut self, vm: usize, movable: bool) -> Result<usize, ConfigError> {
        if vm >= self.profiler.vm_count() {
            return Err(ConfigError::UnknownVm(vm));
        }
        self.policy.push(Policy { movable, route: None, changed_at: None, unpaired_since: None });
        self.stats.push(SourceStats { events: 0, pattern: Pattern::Sporadic, cpu: None });
        // At most a revert and a redirect per source per evaluation.
        self.actions.reserve(2 * self.policy.len());
        Ok(self.profiler.add_source(vm))
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    pub fn profiler(&self) -> &Profiler {
        &self.profiler
    }

    /// Switches the policy on or off. Off, the next [`Self::evaluate`] reverts every redirected
    /// stream and later ones change nothing; profiling goes on.
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// An interrupt from `source` arrived on physical CPU `cpu` at `now` (before any
    /// forwarding). An unknown source is counted for the CPU alone.
    pub fn record_irq(&mut self, cpu: usize, source: usize, now: u64) {
        self.profiler.record_irq(cpu, source, now);
    }

    /// `vm`'s vCPU `index` ran on `cpu` from `start` to `end`.
    pub fn record_run(&mut self, cpu: usize, vm: usize, index: usize, start: u64, end: u64) {
        self.profiler.record_run(cpu, vm, index, start, end);
    }

    /// `vm`'s vCPU `index` is now on `cpu` (the scheduler moved it).
    pub fn move_vcpu(&mut self, vm: usize, index: usize, cpu: usize) {
        self.profiler.move_vcpu(vm, index, cpu);
    }

    /// Where `source`'s interrupts go while redirected.
    pub fn route(&self, source: usize) -> Option<Route> {
        self.policy.get(source).and_then(|p| p.route)
    }

    /// The CPU that handles `source`'s interrupts: its target while redirected, else where
    /// they arrive.
    fn carrier(&self, source: usize) -> Option<usize> {
        match self.policy[source].route {
            Some(r) => Some(r.to_cpu),
            None => self.stats[source].cpu,
        }
    }

    fn periodic(&self, source: usize) -> bool {
        self.stats[source].pattern == Pattern::Periodic
    }

    /// Whether a stream other than `source` is periodic on `cpu`.
    fn partner_on(&self, cpu: usize, source: usize) -> bool {
        (0..self.policy.len())
            .any(|t| t != source && self.periodic(t) && self.carrier(t) == Some(cpu))
    }

    fn dwell_over(&self, source: usize, now: u64) -> bool {
        self.policy[source]
            .changed_at
            .is_none_or(|t| now.saturating_sub(t) >= self.params.min_dwell)
    }

    /// Whether a stream arriving on `from` may be delivered on `cpu`, by the last evaluation's
    /// figures: another CPU, below the target limit, with no busy real-time job.
    fn eligible(&self, cpu: usize, from: usize) -> bool {
        cpu != from
            && self.utilization[cpu] < self.params.target_max_pct
            && self.rt_load[cpu] < self.params.rt_busy_pct
    }

    /// The vCPUs of `source`'s VM a redirected stream may be spread over, as (vCPU, CPU):
    /// those on [eligible](Self) CPUs by the last evaluation, its target among them. Empty
    /// while the stream is not redirected.
    pub fn spread_targets(&self, source: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let route = self.policy.get(source).and_then(|p| p.route);
        let vm = route.map_or(usize::MAX, |_| self.profiler.source_vm(source));
        self.profiler.vcpus_of(vm).filter(move |&(index, cpu)| {
            route.is_some_and(|r| index == r.to_vcpu || self.eligible(cpu, r.from_cpu))
        })
    }

    /// The least utilized eligible CPU where `vm` has a vCPU, and that vCPU (the
    /// lowest-numbered there).
    fn target(&self, vm: usize, from: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for (index, cpu) in self.profiler.vcpus_of(vm) {
            if !self.eligible(cpu, from) {
                continue;
            }
            let better = match best {
                None => true,
                Some((c, _)) => {
                    let (u, bu) = (self.utilization[cpu], self.utilization[c]);
                    u < bu || (u == bu && cpu < c)
                }
            };
            if better {
                best = Some((cpu, index));
            }
        }
        best
    }

    fn revert(&mut self, source: usize, now: u64, counts_as_change: bool) {
        let p = &mut self.policy[source];
        p.route = None;
        p.unpaired_since = None;
        if counts_as_change {
            p.changed_at = Some(now);
        }
        self.actions.push(Action::Revert { source });
    }

    /// Decides on the window ending at `now`; returns the changes to make (empty when none).
    pub fn evaluate(&mut self, now: u64) -> &[Action] {
        self.actions.clear();
        let sources = self.policy.len();
        for s in 0..sources {
            if let Some(st) = self.profiler.source_stats(s, now) {
                self.stats[s] = st;
            }
        }
        for cpu in 0..self.params.cpus {
            self.utilization[cpu] = self.profiler.cpu_stats(cpu, now).utilization;
            self.rt_load[cpu] = 0;
        }
        for vm in (0..self.realtime.len()).filter(|&v| self.realtime[v]) {
            for (index, cpu) in self.profiler.vcpus_of(vm) {
                let used = self.profiler.vcpu_utilization(vm, index, now);
                self.rt_load[cpu] = self.rt_load[cpu].saturating_add(used);
            }
        }
        self.profiler.start(now);
        if !self.enabled {
            for s in 0..sources {
                if self.policy[s].route.is_some() {
                    self.revert(s, now, false);
                }
            }
            return &self.actions;
        }
        for s in 0..sources {
            let Some(r) = self.policy[s].route else { continue };
            let vm = self.profiler.source_vm(s);
            if self.profiler.vcpu_cpu(vm, r.to_vcpu) != Some(r.to_cpu) {
                self.revert(s, now, true);
                continue;
            }
            let paired = self.periodic(s) && self.partner_on(r.from_cpu, s);
            if paired {
                self.policy[s].unpaired_since = None;
                continue;
            }
            let since = *self.policy[s].unpaired_since.get_or_insert(now);
            if now - since >= self.params.revert_after && self.dwell_over(s, now) {
                self.revert(s, now, true);
            }
        }
        // New moves only on a whole window of measurements.
        if self.profiler.covered(now) < self.profiler.window() {
            return &self.actions;
        }
        for cpu in 0..self.params.cpus {
            if self.utilization[cpu] < self.params.saturation_pct {
                continue;
            }
            let periodic =
                (0..sources).filter(|&t| self.periodic(t) && self.carrier(t) == Some(cpu)).count();
            if periodic < 2 {
                continue;
            }
            // (events, source, target CPU, target vCPU) of the stream to move.
            let mut pick: Option<(u32, usize, usize, usize)> = None;
            for s in 0..sources {
                let p = &self.policy[s];
                if !p.movable
                    || p.route.is_some()
                    || !self.periodic(s)
                    || self.carrier(s) != Some(cpu)
                    || !self.dwell_over(s, now)
                {
                    continue;
                }
                let Some((to_cpu, to_vcpu)) = self.target(self.profiler.source_vm(s), cpu) else {
                    continue;
                };
                let events = self.stats[s].events;
                if pick.is_none_or(|(e, ..)| events > e) {
                    pick = Some((events, s, to_cpu, to_vcpu));
                }
            }
            if let Some((_, source, to_cpu, to_vcpu)) = pick {
                let p = &mut self.policy[source];
                p.route = Some(Route { from_cpu: cpu, to_cpu, to_vcpu });
                p.changed_at = Some(now);
                p.unpaired_since = None;
                self.actions.push(Action::Redirect { source, from_cpu: cpu, to_vcpu, to_cpu });
            }
        }
        &self.actions
    }
}
