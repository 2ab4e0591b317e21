//! The profiler: interrupt counts and busy time over a sliding window, and each interrupt
//! source's pattern.
//!
//! Time is cut into buckets (window / buckets long, 10 ms by default); each bucket keeps what
//! happened in it, in rings of fixed size allocated when a CPU, source or vCPU is added: one
//! bucket more than the window, so that recording into the current bucket never clears the
//! oldest one the window still reads. The window is the last `buckets` complete buckets before
//! `now`, so it slides one bucket at a
//! time and every figure is over exactly one window length: an event is only counted once its
//! bucket is complete (at most one bucket late). A bucket that was last written a whole ring
//! ago is cleared when next written; one older than the window is simply not read.
//!
//! A source is **periodic** when, as in the paper, its frequency holds up interval after
//! interval: it fired at least `min_events` times in the window, and in at least
//! `min_presence_pct` % of the window's buckets. An audio period or a timer fires in every
//! bucket; so does a network stream under load, although NAPI and interrupt coalescing make its
//! gaps anything but regular (0 to 18 interrupts per 10 ms under iperf3). A keypress, a
//! disk request now and then or a burst every 30 ms leaves most buckets empty: sporadic.

use alloc::vec::Vec;

use crate::{ConfigError, Params};

/// How a source's interrupts arrive over the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Often and at regular intervals: a stream that keeps its CPU busy.
    Periodic,
    /// Rarely, or irregularly.
    Sporadic,
}

/// A bucket's index in time (`time / bucket length`); `EMPTY`: never written.
const EMPTY: u64 = u64::MAX;

trait Bucket: Copy {
    fn epoch(&self) -> u64;
    fn fresh(epoch: u64) -> Self;
}

/// The bucket of ring `ring` for time bucket `epoch`, cleared if it held an older one; `None`
/// if the ring has moved past it (an event reported too late to count).
fn bucket_mut<B: Bucket>(ring: &mut [B], epoch: u64) -> Option<&mut B> {
    let slot = &mut ring[(epoch % ring.len() as u64) as usize];
    let held = slot.epoch();
    if held == epoch {
        Some(slot)
    } else if held == EMPTY || held < epoch {
        *slot = B::fresh(epoch);
        Some(slot)
    } else {
        None
    }
}

/// The buckets of `ring` inside the window that ends at time bucket `current` (excluded): all
/// but the one slot kept for the current bucket.
fn window<B: Bucket>(ring: &[B], current: u64) -> impl Iterator<Item = &B> {
    let n = ring.len() as u64 - 1;
    ring.iter()
        .filter(move |b| b.epoch() != EMPTY && b.epoch() < current && b.epoch() + n >= current)
}

#[derive(Clone, Copy, Debug)]
struct SourceBucket {
    epoch: u64,
    events: u32,
}

impl Bucket for SourceBucket {
    fn epoch(&self) -> u64 {
        self.epoch
    }
    fn fresh(epoch: u64) -> Self {
        Self { epoch, events: 0 }
    }
}

#[derive(Clone, Copy, Debug)]
struct CpuBucket {
    epoch: u64,
    irqs: u32,
    busy: u64,
}

impl Bucket for CpuBucket {
    fn epoch(&self) -> u64 {
        self.epoch
    }
    fn fresh(epoch: u64) -> Self {
        Self { epoch, irqs: 0, busy: 0 }
    }
}

#[derive(Clone, Copy, Debug)]
struct BusyBucket {
    epoch: u64,
    busy: u64,
}

impl Bucket for BusyBucket {
    fn epoch(&self) -> u64 {
        self.epoch
    }
    fn fresh(epoch: u64) -> Self {
        Self { epoch, busy: 0 }
    }
}

#[derive(Clone, Copy, Debug)]
struct Source {
    vm: usize,
    /// CPU of its latest interrupt.
    cpu: Option<usize>,
}

#[derive(Clone, Copy, Debug)]
struct VmSlot {
    first: usize,
    count: usize,
}

/// One interrupt source over the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceStats {
    /// Interrupts in the window.
    pub events: u32,
    pub pattern: Pattern,
    /// The CPU its latest interrupt arrived on.
    pub cpu: Option<usize>,
}

/// One physical CPU over the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuStats {
    /// Interrupts that arrived on it, from any source.
    pub irqs: u32,
    /// Percent of the window during which it ran a vCPU.
    pub utilization: u32,
}

/// Interrupt and busy-time statistics over a sliding window (see the module documentation).
#[derive(Debug)]
pub struct Profiler {
    bucket: u64,
    buckets: usize,
    min_events: u32,
    min_presence_pct: u32,
    cpu_ring: Vec<CpuBucket>,
    sources: Vec<Source>,
    source_ring: Vec<SourceBucket>,
    vms: Vec<VmSlot>,
    /// Per vCPU (flat, VM after VM): the CPU it is on.
    placement: Vec<usize>,
    vcpu_ring: Vec<BusyBucket>,
    /// The time bucket of the first report: windows before it are only partly measured.
    origin: Option<u64>,
}

impl Profiler {
    pub(crate) fn new(p: &Params) -> Result<Self, ConfigError> {
        if p.cpus == 0 {
            return Err(ConfigError::NoCpus);
        }
        if p.buckets == 0 || p.window < p.buckets as u64 {
            return Err(ConfigError::Window);
        }
        Ok(Self {
            bucket: p.window / p.buckets as u64,
            buckets: p.buckets,
            min_events: p.min_events.max(2),
            min_presence_pct: p.min_presence_pct,
            cpu_ring: alloc::vec![CpuBucket::fresh(EMPTY); p.cpus * (p.buckets + 1)],
            sources: Vec::new(),
            source_ring: Vec::new(),
            vms: Vec::new(),
            placement: Vec::new(),
            vcpu_ring: Vec::new(),
            origin: None,
        })
    }

    /// CPUs profiled.
    pub fn cpus(&self) -> usize {
        self.cpu_ring.len() / self.slots()
    }

    /// Ring slots per CPU, source or vCPU: the window's buckets and the current one.
    fn slots(&self) -> usize {
        self.buckets + 1
    }

    /// The window's length (a whole number of buckets).
    pub fn window(&self) -> u64 {
        self.bucket * self.buckets as u64
    }

    fn ring<B>(ring: &[B], i: usize, n: usize) -> &[B] {
        &ring[i * n..(i + 1) * n]
    }

    fn ring_mut<B>(ring: &mut [B], i: usize, n: usize) -> &mut [B] {
        &mut ring[i * n..(i + 1) * n]
    }

    pub(crate) fn add_vm(&mut self, placement: &[usize]) -> usize {
        self.vms.push(VmSlot { first: self.placement.len(), count: placement.len() });
        self.placement.extend_from_slice(placement);
        self.vcpu_ring.resize(self.placement.len() * self.slots(), BusyBucket::fresh(EMPTY));
        self.vms.len() - 1
    }

    pub(crate) fn add_source(&mut self, vm: usize) -> usize {
        self.sources.push(Source { vm, cpu: None });
        self.source_ring.resize(self.sources.len() * self.slots(), SourceBucket::fresh(EMPTY));
        self.sources.len() - 1
    }

    pub(crate) fn vm_count(&self) -> usize {
        self.vms.len()
    }

    pub(crate) fn source_vm(&self, source: usize) -> usize {
        self.sources[source].vm
    }

    fn vcpu_slot(&self, vm: usize, index: usize) -> Option<usize> {
        let v = self.vms.get(vm)?;
        (index < v.count).then_some(v.first + index)
    }

    /// The vCPUs of `vm` as (index, CPU).
    pub fn vcpus_of(&self, vm: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let v = self.vms.get(vm).copied().unwrap_or(VmSlot { first: 0, count: 0 });
        self.placement[v.first..v.first + v.count].iter().copied().enumerate()
    }

    /// The CPU `vm`'s vCPU `index` is on.
    pub fn vcpu_cpu(&self, vm: usize, index: usize) -> Option<usize> {
        self.vcpu_slot(vm, index).map(|i| self.placement[i])
    }

    pub(crate) fn move_vcpu(&mut self, vm: usize, index: usize, cpu: usize) {
        if cpu < self.cpus()
            && let Some(i) = self.vcpu_slot(vm, index)
        {
            self.placement[i] = cpu;
        }
    }

    /// An interrupt from `source` arrived on `cpu` at `now`. An unknown source counts for the
    /// CPU only.
    pub(crate) fn record_irq(&mut self, cpu: usize, source: usize, now: u64) {
        if cpu >= self.cpus() {
            return;
        }
        self.start(now);
        let (epoch, n) = (now / self.bucket, self.slots());
        if let Some(b) = bucket_mut(Self::ring_mut(&mut self.cpu_ring, cpu, n), epoch) {
            b.irqs = b.irqs.saturating_add(1);
        }
        let Some(s) = self.sources.get_mut(source) else { return };
        s.cpu = Some(cpu);
        if let Some(b) = bucket_mut(Self::ring_mut(&mut self.source_ring, source, n), epoch) {
            b.events = b.events.saturating_add(1);
        }
    }

    /// `vm`'s vCPU `index` ran on `cpu` from `start` to `end`. The time is split over the
    /// buckets it covers.
    pub(crate) fn record_run(&mut self, cpu: usize, vm: usize, index: usize, start: u64, end: u64) {
        if cpu >= self.cpus() || end <= start {
            return;
        }
        self.start(start);
        let vcpu = self.vcpu_slot(vm, index);
        let n = self.slots();
        // Only the last ring's worth can still be recorded.
        let start =
            start.max((end / self.bucket).saturating_sub(self.buckets as u64) * self.bucket);
        let mut t = start;
        while t < end {
            let epoch = t / self.bucket;
            let next = ((epoch + 1) * self.bucket).min(end);
            let d = next - t;
            if let Some(b) = bucket_mut(Self::ring_mut(&mut self.cpu_ring, cpu, n), epoch) {
                b.busy = b.busy.saturating_add(d);
            }
            if let Some(v) = vcpu
                && let Some(b) = bucket_mut(Self::ring_mut(&mut self.vcpu_ring, v, n), epoch)
            {
                b.busy = b.busy.saturating_add(d);
            }
            t = next;
        }
    }

    /// Starts measuring at `now`, unless it started earlier.
    pub(crate) fn start(&mut self, now: u64) {
        let epoch = now / self.bucket;
        self.origin = Some(self.origin.map_or(epoch, |o| o.min(epoch)));
    }

    /// How much of the window at `now` was measured: all of it once a window has passed
    /// since the first report.
    pub fn covered(&self, now: u64) -> u64 {
        let Some(origin) = self.origin else { return 0 };
        (now / self.bucket).saturating_sub(origin).min(self.buckets as u64) * self.bucket
    }

    fn percent(&self, busy: u64, now: u64) -> u32 {
        let covered = self.covered(now);
        if covered == 0 {
            return 0;
        }
        (u128::from(busy) * 100 / u128::from(covered)).min(100) as u32
    }

    pub fn cpu_stats(&self, cpu: usize, now: u64) -> CpuStats {
        if cpu >= self.cpus() {
            return CpuStats { irqs: 0, utilization: 0 };
        }
        let (mut irqs, mut busy) = (0u32, 0u64);
        for b in window(Self::ring(&self.cpu_ring, cpu, self.slots()), now / self.bucket) {
            irqs = irqs.saturating_add(b.irqs);
            busy = busy.saturating_add(b.busy);
        }
        CpuStats { irqs, utilization: self.percent(busy, now) }
    }

    /// Percent of the window during which `vm`'s vCPU `index` ran.
    pub fn vcpu_utilization(&self, vm: usize, index: usize, now: u64) -> u32 {
        let Some(v) = self.vcpu_slot(vm, index) else { return 0 };
        let ring = Self::ring(&self.vcpu_ring, v, self.slots());
        let busy = window(ring, now / self.bucket).map(|b| b.busy).sum();
        self.percent(busy, now)
    }

    pub fn source_stats(&self, source: usize, now: u64) -> Option<SourceStats> {
        let s = self.sources.get(source)?;
        let (mut events, mut present) = (0u32, 0u64);
        for b in window(Self::ring(&self.source_ring, source, self.slots()), now / self.bucket) {
            events = events.saturating_add(b.events);
            present += u64::from(b.events > 0);
        }
        // Over the buckets measured so far, so that a stream is judged early on too.
        let measured = self.covered(now) / self.bucket;
        let periodic = events >= self.min_events
            && measured > 0
            && present * 100 >= u64::from(self.min_presence_pct) * measured;
        let pattern = if periodic { Pattern::Periodic } else { Pattern::Sporadic };
        Some(SourceStats { events, pattern, cpu: s.cpu })
    }
}
