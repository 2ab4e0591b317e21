//! A credit scheduler: which vCPU each physical CPU runs, and for how long.
//!
//! The model is Xen's credit scheduler (credit1), kept as a pure state machine: no clock, no
//! globals, no allocation after [`Scheduler::add_vm`]. The hypervisor reports events with the
//! time they happened (`now`, in any unit; armhv passes counter ticks) and asks what to run.
//!
//! # Algorithm
//!
//! * **Credits are CPU time.** Every vCPU holds a signed balance in time units. Running costs
//!   exactly the time run: the running vCPU is charged `now - last charge` on every call that
//!   concerns its CPU (`tick`, `pick_next`, `vcpu_blocked`, accounting). Xen samples the running
//!   vCPU at each 10 ms tick and charges it a whole tick; charging the measured time instead
//!   gives the same long-run shares with no sampling error, and means a vCPU blocked in WFI is
//!   charged nothing at all.
//! * **Accounting period** = `quanta_per_period` quanta (default 3: 30 ms with the default
//!   10 ms quantum, as Xen). At each period the CPU time of the period (`period × CPUs`) is
//!   divided among the *active* VMs in proportion to their weights, water-filling: a VM never
//!   gets more than it can use (its active vCPUs, bounded by the CPUs their affinity spans) or
//!   than its cap allows, and what it cannot take goes to the others by weight. A VM's share is
//!   split evenly among its active vCPUs. A vCPU is active if it is runnable or ran during the
//!   period, so a vCPU that sleeps through a period neither receives credit nor owes any.
//!   Balances are clamped to ±one period so that neither a long sleep nor a burst of running
//!   alone is carried forward without bound. Accounting is done by whichever CPU calls in
//!   first once the period is over (one lock holder, O(vCPUs + VMs²) once per period).
//! * **Classes.** A runnable vCPU is, from highest to lowest, [`Class::RealTime`] (its VM is
//!   real-time and its server has budget left), [`Class::Boost`] (woken by an event with
//!   no debt, until its first tick or until it stops running), [`Class::Under`]
//!   (credit > 0) or [`Class::Over`] (credit ≤ 0). Each CPU runs its highest class first, the
//!   longest-waiting vCPU first within a class (round-robin). Over vCPUs still run when nothing
//!   better waits: the scheduler is work-conserving, credit orders the vCPUs but does not idle a
//!   CPU (only a cap does). BOOST is kept from Xen because the guests armhv runs are interrupt-driven (virtio,
//!   timers, IPIs): a vCPU that slept in WFI and is woken by its device should handle it now,
//!   not after the CPU-bound vCPUs' quanta. It cannot be used to take more than the VM's share:
//!   it is granted only to a vCPU not in debt (credit ≥ 0), the time is charged as usual, and
//!   it ends at the next tick or when the vCPU stops running.
//! * **Caps** (percent of one CPU, per VM) limit the VM's share at accounting, and a capped
//!   vCPU with no credit is *parked*: not runnable until the next period gives it credit. A
//!   capped vCPU's slice also ends when its credit does, so the cap holds to within the timer's
//!   latency rather than a quantum.
//! * **Real-time VMs** give each of their vCPUs a sporadic server: `budget` of time at
//!   [`Class::RealTime`] in any window of `period`. Time used at that class is given back
//!   `period` after the run that used it started, so a real-time vCPU can never take more
//!   than `budget` per `period` ahead of the others however many interrupts it gets (unlike a
//!   budget simply refilled at period boundaries, which allows two budgets back to back).
//!   With budget left it preempts any other class at once: [`Scheduler::interrupt_for`] names
//!   the CPU to interrupt. Without budget it competes as an ordinary vCPU, and its
//!   real-time time is charged to its credit like any other.
//! * **Run queues and balancing.** Each vCPU belongs to one CPU's run queue at a time, within
//!   its affinity (a pinned vCPU's affinity is one CPU). A decision scans only that CPU's queue,
//!   except when its best vCPU is Over or there is none: then it *steals* the best waiting vCPU
//!   of a higher class from another CPU (Xen's `csched_load_balance`). Together with placing a
//!   woken vCPU on an idle CPU of its affinity and naming idle CPUs to kick when vCPUs wait,
//!   this keeps every CPU busy while an unpinned runnable vCPU waits anywhere it may run, and
//!   spreads credit (so weights) across CPUs.
//!
//! Weights are exact when the vCPUs that compete can run on the same CPUs; with affinities
//! that split competitors unevenly the shares are approximate (as in Xen).
//!
//! # How the hypervisor drives it
//!
//! ```text
//!  CPU c's loop:   d = pick_next(c, now) ──> run d.vcpu until d.run_until (or idle until then)
//!                  timer fires: tick(c, now) == true ──> pick_next again
//!                  vCPU executes WFI: vcpu_blocked(v, now); pick_next(c, now)
//!                  vCPU yields, or c was kicked to reschedule: pick_next(c, now)
//!  any CPU:        interrupt made deliverable to v: interrupt_for(v, now) ──> CPUs to kick
//!                  PSCI CPU_ON: vcpu_runnable(v, now) ──> CPUs to kick; CPU_OFF: vcpu_blocked
//! ```
//!
//! A "kick" asks CPU `k` to call [`Scheduler::pick_next`] soon: leave its guest (an IPI) or wake
//! from WFI. The calling CPU may be in the set; it then reschedules at its next exit.
//!
//! # Locking
//!
//! One `Scheduler` serves all CPUs behind one lock, held for one call at a time and never while
//! a vCPU runs. A call costs O(vCPUs queued on that CPU); stealing (only when that CPU would
//! otherwise idle or run an Over vCPU) and accounting (once per period) look at every vCPU.
//! With at most a few hundred vCPUs that is a few microseconds, a hundred times a second per
//! CPU: one lock is simpler than per-CPU locks with a lock order, and contention stays low.
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

use alloc::vec::Vec;
use core::fmt;
use core::ops::RangeInclusive;

#[cfg(test)]
mod tests;

/// Most physical CPUs: a [`CpuSet`] is one `u64`.
pub const MAX_CPUS: usize = 64;
/// Weight of a VM whose configuration names none (Xen's default).
pub const DEFAULT_WEIGHT: u32 = 256;
/// Quantum unless configured.
pub const DEFAULT_QUANTUM_MS: u64 = 10;
/// Quanta a configuration may choose: short for responsiveness, long for throughput.
pub const QUANTUM_MS: RangeInclusive<u64> = 10..=50;
/// Quanta per accounting period, as Xen (30 ms with a 10 ms quantum).
pub const DEFAULT_QUANTA_PER_PERIOD: u64 = 3;
/// Replenishments a real-time server remembers; more runs within one period are merged into
/// the last, which only delays their return (so the budget still holds).
const REPLENISHMENTS: usize = 4;

/// A set of physical CPUs, one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(pub u64);

impl CpuSet {
    pub const EMPTY: Self = Self(0);

    /// `{cpu}`; empty if `cpu` ≥ [`MAX_CPUS`].
    pub const fn single(cpu: usize) -> Self {
        if cpu < MAX_CPUS { Self(1 << cpu) } else { Self::EMPTY }
    }

    /// `{0, .., n-1}` (n capped at [`MAX_CPUS`]).
    pub const fn first(n: usize) -> Self {
        if n >= MAX_CPUS { Self(u64::MAX) } else { Self((1 << n) - 1) }
    }

    pub const fn contains(self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.0 & (1 << cpu) != 0
    }

    pub fn insert(&mut self, cpu: usize) {
        *self = self.union(Self::single(cpu));
    }

    pub fn remove(&mut self, cpu: usize) {
        self.0 &= !Self::single(cpu).0;
    }

    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    pub const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The lowest-numbered CPU in the set.
    pub const fn lowest(self) -> Option<usize> {
        if self.0 == 0 { None } else { Some(self.0.trailing_zeros() as usize) }
    }

    /// The CPUs in the set, lowest first; costs one step per member, not per possible CPU
    /// (it runs on every scheduling decision).
    pub fn iter(self) -> impl Iterator<Item = usize> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            let cpu = bits.trailing_zeros();
            (cpu < 64).then(|| {
                bits &= bits - 1;
                cpu as usize
            })
        })
    }
}

/// A vCPU: the index of its VM (in [`Scheduler::add_vm`] order) and its index in the VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vcpu {
    pub vm: usize,
    pub index: usize,
}

/// Scheduler-wide parameters. Times are in the caller's unit (whatever `now` counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Physical CPUs, numbered 0..cpus.
    pub cpus: usize,
    /// Longest a vCPU runs before another of its class gets the CPU.
    pub quantum: u64,
    /// Accounting period, in quanta.
    pub quanta_per_period: u64,
}

impl Params {
    /// `cpus` CPUs and a quantum of `quantum_ms` (within [`QUANTUM_MS`]), with time counted in
    /// units of which `units_per_ms` make a millisecond (1_000_000 for nanoseconds, the
    /// counter frequency / 1000 for counter ticks).
    pub fn new(cpus: usize, units_per_ms: u64, quantum_ms: u64) -> Result<Self, ConfigError> {
        if cpus == 0 || cpus > MAX_CPUS {
            return Err(ConfigError::Cpus(cpus));
        }
        if !QUANTUM_MS.contains(&quantum_ms) || units_per_ms == 0 {
            return Err(ConfigError::Quantum(quantum_ms));
        }
        Ok(Self {
            cpus,
            quantum: units_per_ms * quantum_ms,
            quanta_per_period: DEFAULT_QUANTA_PER_PERIOD,
        })
    }

    /// The accounting period in time units.
    pub const fn period(&self) -> u64 {
        self.quantum * self.quanta_per_period
    }
}

/// What the configuration says about one VM's share of the CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmParams {
    /// Relative share against the other VMs, ≥ 1.
    pub weight: u32,
    /// Most CPU time the VM may use, in percent of one CPU (150 = one and a half CPUs), even
    /// when CPUs would otherwise idle.
    pub cap: Option<u32>,
    /// The VM's vCPUs preempt others when they have work, within a budget.
    pub realtime: Option<RealTime>,
}

impl Default for VmParams {
    fn default() -> Self {
        Self { weight: DEFAULT_WEIGHT, cap: None, realtime: None }
    }
}

/// A real-time vCPU's server: at most `budget` time units at [`Class::RealTime`] in any
/// window of `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealTime {
    pub budget: u64,
    pub period: u64,
}

/// A configuration the scheduler cannot take; each names the offending value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// CPU count outside 1..=[`MAX_CPUS`].
    Cpus(usize),
    /// Quantum (ms) outside [`QUANTUM_MS`].
    Quantum(u64),
    /// A weight of zero.
    Weight,
    /// A cap of 0 %, or more than all CPUs.
    Cap(u32),
    /// Real-time budget of zero or longer than its period.
    RealTime(RealTime),
    /// A VM with no vCPUs.
    NoVcpus,
    /// vCPU `index`'s affinity is empty or names a CPU that does not exist.
    Affinity { index: usize, set: CpuSet },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpus(n) => write!(f, "{n} CPUs: the scheduler handles 1..={MAX_CPUS}"),
            Self::Quantum(ms) => write!(
                f,
                "quantum of {ms} ms: use {}..={} ms",
                QUANTUM_MS.start(),
                QUANTUM_MS.end()
            ),
            Self::Weight => write!(f, "weight 0: use 1 or more"),
            Self::Cap(pct) => write!(f, "cap of {pct} %: use 1 up to 100 × the CPU count"),
            Self::RealTime(rt) => write!(
                f,
                "real-time budget {} per period {}: the budget must be > 0 and ≤ the period",
                rt.budget, rt.period
            ),
            Self::NoVcpus => write!(f, "a VM needs at least one vCPU"),
            Self::Affinity { index, set } => {
                write!(f, "vCPU {index}: affinity {:#x} is empty or names a missing CPU", set.0)
            }
        }
    }
}

/// Scheduling class, lowest first: a CPU runs the highest class it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Nothing runnable (a CPU's class when it idles).
    Idle,
    /// Credit used up: runs only when nothing better waits.
    Over,
    /// Credit left.
    Under,
    /// Just woken, not in debt.
    Boost,
    /// A real-time vCPU with budget left.
    RealTime,
}

/// A vCPU's scheduling state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not runnable: in WFI, powered off, or its VM stopped. Charged nothing.
    Blocked,
    /// Runnable, in its CPU's run queue.
    Waiting,
    /// The vCPU its CPU runs.
    Running,
}

/// What a CPU should do until it next calls the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The vCPU to run; `None`: idle.
    pub vcpu: Option<Vcpu>,
    /// Its class ([`Class::Idle`] when idle).
    pub class: Class,
    /// When to call [`Scheduler::tick`] (running) or [`Scheduler::pick_next`] (idle) at the
    /// latest; `u64::MAX`: not before an event.
    pub run_until: u64,
    /// The CPU the vCPU last ran on, when that was another one: its state must be saved there
    /// before it is loaded here.
    pub migrated_from: Option<usize>,
    /// Idle CPUs to kick: vCPUs wait here that they may run.
    pub kick: CpuSet,
}

#[derive(Clone, Copy, Debug, Default)]
struct Replenishment {
    at: u64,
    amount: u64,
}

/// A real-time vCPU's sporadic server.
#[derive(Clone, Copy, Debug)]
struct Server {
    budget: u64,
    period: u64,
    left: u64,
    pending: [Replenishment; REPLENISHMENTS],
    count: usize,
}

impl Server {
    fn new(rt: RealTime) -> Self {
        Self {
            budget: rt.budget,
            period: rt.period,
            left: rt.budget,
            pending: [Replenishment::default(); REPLENISHMENTS],
            count: 0,
        }
    }

    /// Uses up to `time` of the budget in a run that started at `activated`, to come back one
    /// period after that start.
    fn consume(&mut self, time: u64, activated: u64) {
        let used = time.min(self.left);
        if used == 0 {
            return;
        }
        self.left -= used;
        let at = activated.saturating_add(self.period);
        match self.count {
            0 => {}
            n if self.pending[n - 1].at == at => {
                self.pending[n - 1].amount += used;
                return;
            }
            n if n == REPLENISHMENTS => {
                // Merging into the last entry at the later time returns the older amount late,
                // never early: the budget still holds.
                self.pending[n - 1] =
                    Replenishment { at, amount: self.pending[n - 1].amount + used };
                return;
            }
            _ => {}
        }
        self.pending[self.count] = Replenishment { at, amount: used };
        self.count += 1;
    }

    fn replenish(&mut self, now: u64) {
        let due = self.pending[..self.count].iter().take_while(|r| r.at <= now).count();
        for r in &self.pending[..due] {
            self.left = (self.left + r.amount).min(self.budget);
        }
        self.pending.copy_within(due..self.count, 0);
        self.count -= due;
    }

    /// When budget next comes back, if it is exhausted.
    fn next_replenishment(&self) -> Option<u64> {
        (self.left == 0 && self.count > 0).then(|| self.pending[0].at)
    }
}

#[derive(Debug)]
struct VmSlot {
    params: VmParams,
    first: usize,
    count: usize,
}

#[derive(Debug)]
struct VcpuSlot {
    id: Vcpu,
    affinity: CpuSet,
    /// The CPU whose run queue holds it.
    cpu: usize,
    last_cpu: Option<usize>,
    state: State,
    credit: i64,
    boost: bool,
    /// Gave its CPU up (a yield): the next pick on its CPU prefers any other vCPU.
    yielded: bool,
    capped: bool,
    /// When it last became Waiting: the round-robin order within a class.
    queued_at: u64,
    charged_at: u64,
    run_time: u64,
    /// Ran since the last accounting.
    ran: bool,
    server: Option<Server>,
}

impl VcpuSlot {
    /// Its class now, `None` when it cannot run (blocked, or parked by its cap).
    fn class(&self) -> Option<Class> {
        if self.state == State::Blocked || (self.capped && self.credit <= 0) {
            return None;
        }
        Some(match self.server {
            Some(s) if s.left > 0 => Class::RealTime,
            _ if self.boost => Class::Boost,
            _ if self.credit > 0 => Class::Under,
            _ => Class::Over,
        })
    }

    /// Whether it precedes `other` in its CPU's queue.
    fn before(&self, class: Class, other: Option<(&VcpuSlot, Class)>) -> bool {
        match other {
            None => true,
            Some((o, oc)) => class > oc || (class == oc && self.queued_at < o.queued_at),
        }
    }
}

#[derive(Debug)]
struct CpuSlot {
    /// Indices of the vCPUs in this run queue, whatever their state. Capacity: every vCPU.
    queue: Vec<usize>,
    current: Option<usize>,
    /// The class `current` was picked in.
    class: Class,
    /// When `current` was picked: the activation time of a real-time run.
    picked_at: u64,
    run_until: u64,
    /// Asked to reschedule and not yet done: no longer a free CPU for placement.
    kicked: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct VmAccount {
    active: u64,
    /// Its weight within the component being accounted (scaled by the fraction of its active
    /// vCPUs there).
    weight: u128,
    limit: u128,
    share: u128,
    fixed: bool,
}

/// The scheduler: see the crate documentation.
#[derive(Debug)]
pub struct Scheduler {
    params: Params,
    vms: Vec<VmSlot>,
    vcpus: Vec<VcpuSlot>,
    cpus: Vec<CpuSlot>,
    /// Per VM, reused at each accounting.
    accounts: Vec<VmAccount>,
    started: bool,
    last_account: u64,
    next_account: u64,
    /// Some VM is real-time (its vCPUs have servers): only then do the per-pick walks of a
    /// queue for servers' replenishments find anything (VMs are never removed).
    realtime: bool,
}

impl Scheduler {
    /// A scheduler with no VMs. `params` from [`Params::new`]; a hand-built one is made sane
    /// (1..=[`MAX_CPUS`] CPUs, a quantum and a period of at least one unit).
    pub fn new(mut params: Params) -> Self {
        params.cpus = params.cpus.clamp(1, MAX_CPUS);
        params.quantum = params.quantum.max(1);
        params.quanta_per_period = params.quanta_per_period.max(1);
        let cpus = (0..params.cpus)
            .map(|_| CpuSlot {
                queue: Vec::new(),
                current: None,
                class: Class::Idle,
                picked_at: 0,
                run_until: u64::MAX,
                kicked: false,
            })
            .collect();
        Self {
            params,
            vms: Vec::new(),
            vcpus: Vec::new(),
            cpus,
            accounts: Vec::new(),
            started: false,
            last_account: 0,
            next_account: 0,
            realtime: false,
        }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Adds a VM with one vCPU per entry of `affinity` (the CPUs each may run on; one CPU:
    /// pinned), all blocked. Returns the VM's index. Allocates: call at setup only.
    pub fn add_vm(&mut self, params: VmParams, affinity: &[CpuSet]) -> Result<usize, ConfigError> {
        let cpus = self.cpus.len();
        if params.weight == 0 {
            return Err(ConfigError::Weight);
        }
        if let Some(cap) = params.cap
            && (cap == 0 || cap as usize > 100 * cpus)
        {
            return Err(ConfigError::Cap(cap));
        }
        if let Some(rt) = params.realtime
            && (rt.budget == 0 || rt.budget > rt.period)
        {
            return Err(ConfigError::RealTime(rt));
        }
        if affinity.is_empty() {
            return Err(ConfigError::NoVcpus);
        }
        let all = CpuSet::first(cpus);
        if let Some((index, &set)) =
            affinity.iter().enumerate().find(|(_, s)| s.is_empty() || s.intersection(all) != **s)
        {
            return Err(ConfigError::Affinity { index, set });
        }
        let vm = self.vms.len();
        let first = self.vcpus.len();
        for (index, &set) in affinity.iter().enumerate() {
            // Spread unpinned vCPUs: the allowed CPU with the fewest vCPUs so far.
            let cpu = set.iter().min_by_key(|&c| self.cpus[c].queue.len()).unwrap_or(0);
            self.cpus[cpu].queue.push(self.vcpus.len());
            self.vcpus.push(VcpuSlot {
                id: Vcpu { vm, index },
                affinity: set,
                cpu,
                last_cpu: None,
                state: State::Blocked,
                credit: 0,
                boost: false,
                yielded: false,
                capped: params.cap.is_some(),
                queued_at: 0,
                charged_at: 0,
                run_time: 0,
                ran: false,
                server: params.realtime.map(Server::new),
            });
        }
        self.realtime |= params.realtime.is_some();
        self.vms.push(VmSlot { params, first, count: affinity.len() });
        self.accounts.push(VmAccount::default());
        // Any queue may come to hold every vCPU: no allocation when vCPUs migrate.
        let total = self.vcpus.len();
        for c in &mut self.cpus {
            c.queue.reserve(total - c.queue.len());
        }
        Ok(vm)
    }

    fn slot(&self, v: Vcpu) -> usize {
        let vm = &self.vms[v.vm];
        assert!(v.index < vm.count, "{v:?}: VM {} has {} vCPUs", v.vm, vm.count);
        vm.first + v.index
    }

    /// A blocked vCPU became runnable without an event to handle at once (PSCI CPU_ON, the end
    /// of a reset). Returns the CPUs to kick.
    pub fn vcpu_runnable(&mut self, v: Vcpu, now: u64) -> CpuSet {
        let i = self.slot(v);
        self.wake(i, now, false)
    }

    /// A blocked vCPU was woken by an event (an interrupt became deliverable to it in WFI).
    /// Unless it is in debt it is boosted. Returns the CPUs to kick.
    pub fn vcpu_woke(&mut self, v: Vcpu, now: u64) -> CpuSet {
        let i = self.slot(v);
        self.wake(i, now, true)
    }

    /// An interrupt was made pending for `v`. Wakes it if blocked (as [`Self::vcpu_woke`]);
    /// if it waits for its CPU in a higher class than what that CPU runs (always so for a
    /// real-time vCPU with budget left and a general-purpose vCPU running), returns that CPU:
    /// it must preempt what it runs now.
    pub fn interrupt_for(&mut self, v: Vcpu, now: u64) -> CpuSet {
        let i = self.slot(v);
        match self.vcpus[i].state {
            State::Blocked => self.wake(i, now, true),
            State::Waiting => {
                self.replenish(i, now);
                self.preempt_check(i)
            }
            State::Running => CpuSet::EMPTY,
        }
    }

    /// `v` stopped being runnable (WFI with nothing pending, PSCI CPU_OFF, VM stopped). If it is
    /// running, its CPU must then call [`Self::pick_next`].
    pub fn vcpu_blocked(&mut self, v: Vcpu, now: u64) {
        let i = self.slot(v);
        let cpu = self.vcpus[i].cpu;
        if self.cpus[cpu].current == Some(i) {
            self.charge(cpu, now);
        }
        let s = &mut self.vcpus[i];
        s.state = State::Blocked;
        s.boost = false;
    }

    /// The running `v` yields its CPU (a guest's yield or doorbell hypercall): its CPU's next
    /// [`Self::pick_next`] runs any other vCPU that may run there, whatever its class, before
    /// it (Xen's yield puts it behind one lower-priority vCPU; handing over to whichever waits
    /// is what a VM switch between two guests needs).
    pub fn vcpu_yield(&mut self, v: Vcpu) {
        let i = self.slot(v);
        if self.vcpus[i].state == State::Running {
            self.vcpus[i].yielded = true;
        }
    }

    /// The CPU's timer fired (at [`Decision::run_until`] or for another reason). Charges the
    /// running vCPU and returns whether the CPU must reschedule: its slice is over, it blocked
    /// or was parked, its real-time budget ran out, or a vCPU of a higher class waits.
    pub fn tick(&mut self, cpu: usize, now: u64) -> bool {
        self.housekeeping(now);
        self.charge(cpu, now);
        self.replenish_queue(cpu, now);
        let waiting = self.best_waiting(cpu).map(|(_, c)| c);
        let c = &self.cpus[cpu];
        let Some(i) = c.current else { return waiting.is_some() };
        let (until, picked_class) = (c.run_until, c.class);
        let v = &mut self.vcpus[i];
        v.boost = false; // a boost lasts until the first tick
        let Some(class) = v.class() else { return true };
        now >= until
            || (picked_class == Class::RealTime && class != Class::RealTime)
            || waiting.is_some_and(|w| w > class)
    }

    /// What CPU `cpu` runs next. The vCPU it ran, if still runnable, goes back to the queue
    /// behind the others of its class.
    pub fn pick_next(&mut self, cpu: usize, now: u64) -> Decision {
        self.housekeeping(now);
        self.charge(cpu, now);
        let c = &mut self.cpus[cpu];
        c.kicked = false;
        let mut yielded = None;
        if let Some(i) = c.current.take() {
            let v = &mut self.vcpus[i];
            v.boost = false;
            v.last_cpu = Some(cpu);
            if v.state == State::Running {
                v.state = State::Waiting;
                v.queued_at = now;
            }
            if core::mem::take(&mut v.yielded) && v.state == State::Waiting {
                // Out of the running until something else has been picked.
                v.state = State::Blocked;
                yielded = Some(i);
            }
        }
        self.replenish_queue(cpu, now);
        let local = self.best_waiting(cpu);
        let mut pick = match local {
            Some((_, class)) if class >= Class::Under => local,
            _ => self.steal(cpu, local.map_or(Class::Idle, |(_, c)| c)).or(local),
        };
        if let Some(i) = yielded {
            self.vcpus[i].state = State::Waiting;
            if pick.is_none() {
                pick = self.vcpus[i].class().map(|class| (i, class));
            }
        }
        let Some((i, class)) = pick else {
            let c = &mut self.cpus[cpu];
            c.class = Class::Idle;
            // A vCPU parked by its cap becomes runnable at the next accounting.
            let parked = c.queue.iter().any(|&j| {
                let v = &self.vcpus[j];
                v.state == State::Waiting && v.class().is_none()
            });
            c.run_until = if parked { self.next_account } else { u64::MAX };
            return Decision {
                vcpu: None,
                class: Class::Idle,
                run_until: c.run_until,
                migrated_from: None,
                kick: CpuSet::EMPTY,
            };
        };
        let v = &mut self.vcpus[i];
        v.state = State::Running;
        v.charged_at = now;
        let migrated_from = v.last_cpu.filter(|&l| l != cpu);
        let mut run_until = now.saturating_add(self.params.quantum);
        if let (Class::RealTime, Some(s)) = (class, v.server) {
            run_until = run_until.min(now + s.left);
        }
        if v.capped {
            run_until = run_until.min(now + v.credit.max(0) as u64);
        }
        // Wake up when a waiting real-time vCPU gets its budget back.
        for &j in self.realtime_queue(cpu) {
            let w = &self.vcpus[j];
            if w.state == State::Waiting
                && let Some(at) = w.server.and_then(|s| s.next_replenishment())
            {
                run_until = run_until.min(at.max(now));
            }
        }
        let c = &mut self.cpus[cpu];
        c.current = Some(i);
        c.class = class;
        c.picked_at = now;
        c.run_until = run_until;
        let kick = self.kick_idle_for_waiting(cpu);
        Decision { vcpu: Some(self.vcpus[i].id), class, run_until, migrated_from, kick }
    }

    /// Total time `v` has been charged for.
    pub fn run_time(&self, v: Vcpu) -> u64 {
        self.vcpus[self.slot(v)].run_time
    }

    /// `v`'s credit balance (time units; > 0: Under).
    pub fn credit(&self, v: Vcpu) -> i64 {
        self.vcpus[self.slot(v)].credit
    }

    pub fn state(&self, v: Vcpu) -> State {
        self.vcpus[self.slot(v)].state
    }

    /// `v`'s class now ([`Class::Idle`]: blocked or parked).
    pub fn class(&self, v: Vcpu) -> Class {
        self.vcpus[self.slot(v)].class().unwrap_or(Class::Idle)
    }

    /// The CPU whose run queue holds `v`.
    pub fn cpu_of(&self, v: Vcpu) -> usize {
        self.vcpus[self.slot(v)].cpu
    }

    /// The vCPU `cpu` runs, if any.
    pub fn running(&self, cpu: usize) -> Option<Vcpu> {
        self.cpus[cpu].current.map(|i| self.vcpus[i].id)
    }

    /// Charges the vCPU running on `cpu` for the time since its last charge.
    fn charge(&mut self, cpu: usize, now: u64) {
        let c = &self.cpus[cpu];
        let Some(i) = c.current else { return };
        let (class, picked_at) = (c.class, c.picked_at);
        let v = &mut self.vcpus[i];
        let d = now.saturating_sub(v.charged_at);
        if d == 0 {
            return;
        }
        v.charged_at = now;
        v.credit = v.credit.saturating_sub(i64::try_from(d).unwrap_or(i64::MAX));
        v.run_time += d;
        v.ran = true;
        if class == Class::RealTime
            && let Some(s) = &mut v.server
        {
            s.consume(d, picked_at);
        }
    }

    fn replenish(&mut self, i: usize, now: u64) {
        if let Some(s) = &mut self.vcpus[i].server {
            s.replenish(now);
        }
    }

    fn replenish_queue(&mut self, cpu: usize, now: u64) {
        for k in 0..self.realtime_queue(cpu).len() {
            let i = self.cpus[cpu].queue[k];
            self.replenish(i, now);
        }
    }

    /// `cpu`'s queue where a vCPU in it may have a server, else nothing: the walks for
    /// servers skip the queue (a VM switch picks twice per round trip) when no VM is real-time.
    fn realtime_queue(&self, cpu: usize) -> &[usize] {
        if self.realtime { &self.cpus[cpu].queue } else { &[] }
    }

    /// The best waiting vCPU in `cpu`'s queue and its class.
    fn best_waiting(&self, cpu: usize) -> Option<(usize, Class)> {
        let mut best: Option<(usize, Class)> = None;
        for &i in &self.cpus[cpu].queue {
            let v = &self.vcpus[i];
            if v.state != State::Waiting {
                continue;
            }
            let Some(class) = v.class() else { continue };
            if v.before(class, best.map(|(b, bc)| (&self.vcpus[b], bc))) {
                best = Some((i, class));
            }
        }
        best
    }

    /// Moves to `cpu` the best vCPU waiting elsewhere that may run here and whose class is
    /// above `floor`.
    fn steal(&mut self, cpu: usize, floor: Class) -> Option<(usize, Class)> {
        let mut best: Option<(usize, Class)> = None;
        let n = self.cpus.len();
        // Start after this CPU so that no peer is always robbed first.
        for peer in (1..n).map(|k| (cpu + k) % n) {
            for &i in &self.cpus[peer].queue {
                let v = &self.vcpus[i];
                if v.state != State::Waiting || !v.affinity.contains(cpu) {
                    continue;
                }
                let Some(class) = v.class() else { continue };
                if class > floor && v.before(class, best.map(|(b, bc)| (&self.vcpus[b], bc))) {
                    best = Some((i, class));
                }
            }
        }
        let (i, _) = best?;
        self.migrate(i, cpu);
        best
    }

    fn migrate(&mut self, i: usize, to: usize) {
        let from = self.vcpus[i].cpu;
        if from == to {
            return;
        }
        let q = &mut self.cpus[from].queue;
        if let Some(k) = q.iter().position(|&j| j == i) {
            q.swap_remove(k);
        }
        self.cpus[to].queue.push(i);
        self.vcpus[i].cpu = to;
    }

    /// Idle CPUs nobody has kicked yet.
    fn free_cpus(&self) -> CpuSet {
        let mut set = CpuSet::EMPTY;
        for (k, c) in self.cpus.iter().enumerate() {
            if c.current.is_none() && !c.kicked {
                set.insert(k);
            }
        }
        set
    }

    /// For each vCPU still waiting on `cpu`, one free CPU it may run on: kicked, it will steal.
    fn kick_idle_for_waiting(&mut self, cpu: usize) -> CpuSet {
        let mut free = self.free_cpus();
        free.remove(cpu);
        let mut kick = CpuSet::EMPTY;
        for &i in &self.cpus[cpu].queue {
            if free.is_empty() {
                break;
            }
            let v = &self.vcpus[i];
            if v.state != State::Waiting || v.class().is_none() {
                continue;
            }
            if let Some(k) = v.affinity.intersection(free).lowest() {
                free.remove(k);
                kick.insert(k);
            }
        }
        for k in kick.iter() {
            self.cpus[k].kicked = true;
        }
        kick
    }

    fn wake(&mut self, i: usize, now: u64, boost: bool) -> CpuSet {
        let v = &mut self.vcpus[i];
        if v.state != State::Blocked {
            return CpuSet::EMPTY;
        }
        let cpu = v.cpu;
        if self.cpus[cpu].current == Some(i) {
            // Blocked and woken before its CPU rescheduled: it simply goes on running.
            v.state = State::Running;
            return CpuSet::EMPTY;
        }
        v.state = State::Waiting;
        v.queued_at = now;
        v.boost = boost && v.credit >= 0;
        let affinity = v.affinity;
        self.replenish(i, now);
        let c = &self.cpus[cpu];
        if (c.current.is_some() || c.kicked)
            && let Some(k) = self.free_cpus().intersection(affinity).lowest()
        {
            self.migrate(i, k);
        }
        self.preempt_check(i)
    }

    /// The CPU to kick if `i` outranks what its CPU runs.
    fn preempt_check(&mut self, i: usize) -> CpuSet {
        let v = &self.vcpus[i];
        let Some(class) = v.class() else { return CpuSet::EMPTY };
        let c = &self.cpus[v.cpu];
        let running = c.current.and_then(|j| self.vcpus[j].class()).unwrap_or(Class::Idle);
        if class <= running || (c.current.is_none() && c.kicked) {
            return CpuSet::EMPTY;
        }
        let cpu = v.cpu;
        self.cpus[cpu].kicked = true;
        CpuSet::single(cpu)
    }

    /// Accounts once the period is over (the first call starts the first period).
    fn housekeeping(&mut self, now: u64) {
        let period = self.params.period();
        if !self.started {
            self.started = true;
            self.account(now, period);
        } else if now >= self.next_account {
            // A late accounting (every CPU idle for a while) still gives at most two periods.
            let span = (now - self.last_account).min(2 * period);
            self.account(now, span);
        }
    }

    /// Gives the active VMs the CPU time of `span` by weight (see the crate documentation).
    fn account(&mut self, now: u64, span: u64) {
        for cpu in 0..self.cpus.len() {
            self.charge(cpu, now);
        }
        let period = self.params.period();
        self.last_account = now;
        self.next_account = now.saturating_add(period);
        let span = u128::from(span);
        let active = |v: &VcpuSlot| v.state != State::Blocked || v.ran;
        // The CPUs split into groups that no active vCPU's affinity crosses: each group's time
        // goes to the vCPUs that can use it. Two VMs pinned to one CPU share that CPU's time by
        // weight even while other CPUs idle. (No allocation: at most one group per CPU.)
        let mut groups = [CpuSet::EMPTY; MAX_CPUS];
        let mut count = 0;
        for v in self.vcpus.iter().filter(|v| active(v)) {
            let mut set = v.affinity;
            let mut k = 0;
            while k < count {
                if groups[k].intersection(set).is_empty() {
                    k += 1;
                } else {
                    set = set.union(groups[k]);
                    count -= 1;
                    groups[k] = groups[count];
                }
            }
            groups[count] = set;
            count += 1;
        }
        let bound = i64::try_from(period).unwrap_or(i64::MAX);
        for &group in &groups[..count] {
            self.account_group(group, span, bound);
        }
        for v in &mut self.vcpus {
            v.credit = v.credit.clamp(-bound, bound);
            v.ran = false;
        }
    }

    /// Gives the CPU time of `group` over `span` to the active vCPUs that run in it, by their
    /// VMs' weights (a VM with vCPUs in several groups takes part in each with the matching
    /// fraction of its weight).
    fn account_group(&mut self, group: CpuSet, span: u128, bound: i64) {
        let in_group = |v: &VcpuSlot| {
            (v.state != State::Blocked || v.ran) && !v.affinity.intersection(group).is_empty()
        };
        let mut remaining = span * group.len() as u128;
        for (vm, a) in self.vms.iter().zip(&mut self.accounts) {
            let vcpus = &self.vcpus[vm.first..vm.first + vm.count];
            let total = vcpus.iter().filter(|v| v.state != State::Blocked || v.ran).count() as u128;
            let mut cpus = CpuSet::EMPTY;
            let mut active = 0;
            for v in vcpus.iter().filter(|v| in_group(v)) {
                active += 1;
                cpus = cpus.union(v.affinity);
            }
            let mut limit = span * active.min(cpus.len() as u64) as u128;
            if let Some(cap) = vm.params.cap {
                limit = limit.min(span * u128::from(cap) * u128::from(active) / 100 / total.max(1));
            }
            let weight = u128::from(vm.params.weight) * u128::from(active) * 1024 / total.max(1);
            *a = VmAccount { active, weight, limit, share: 0, fixed: active == 0 };
        }
        // Water-filling: VMs whose weighted share exceeds what they can use take their limit;
        // the rest is shared again among the others until every share fits.
        loop {
            let weights: u128 = self.accounts.iter().filter(|a| !a.fixed).map(|a| a.weight).sum();
            if weights == 0 {
                break;
            }
            let mut clipped = false;
            for a in &mut self.accounts {
                if !a.fixed && remaining * a.weight / weights >= a.limit {
                    a.share = a.limit;
                    a.fixed = true;
                    remaining -= a.limit;
                    clipped = true;
                }
            }
            if !clipped {
                for a in &mut self.accounts {
                    if !a.fixed {
                        a.share = remaining * a.weight / weights;
                        a.fixed = true;
                    }
                }
                break;
            }
        }
        for (vm, a) in self.vms.iter().zip(&self.accounts) {
            let each = if a.active == 0 { 0 } else { a.share / u128::from(a.active) };
            let each = i64::try_from(each).unwrap_or(bound);
            for v in &mut self.vcpus[vm.first..vm.first + vm.count] {
                if in_group(v) {
                    v.credit = v.credit.saturating_add(each);
                }
            }
        }
    }
}
