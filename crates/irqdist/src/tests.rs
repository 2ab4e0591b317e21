//! Host tests: interrupt streams and CPU loads generated over simulated time, fed to the
//! distributor the way the hypervisor would, with `evaluate` every bucket.

use std::vec::Vec;

use crate::*;

/// Time unit of the tests: nanoseconds.
const MS: u64 = 1_000_000;
/// How often the hypervisor evaluates: one bucket.
const STEP: u64 = 10 * MS;

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Every `period`, each gap off by up to `jitter_pct` % either way.
    Periodic {
        period: u64,
        jitter_pct: u64,
    },
    /// Independent arrivals, `mean` apart on average.
    Poisson {
        mean: u64,
    },
    /// `count` interrupts `gap` apart, every `every`.
    Bursts {
        every: u64,
        count: u64,
        gap: u64,
    },
    Off,
}

struct Stream {
    source: usize,
    cpu: usize,
    kind: Kind,
    next: u64,
    rng: u64,
}

impl Stream {
    fn random(&mut self) -> u64 {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// The gap to the next interrupt.
    fn gap(&mut self) -> u64 {
        match self.kind {
            Kind::Periodic { period, jitter_pct } => {
                let span = period * jitter_pct / 100;
                period - span + self.random() % (2 * span + 1)
            }
            Kind::Poisson { mean } => {
                let u = (self.random() >> 11) as f64 / (1u64 << 53) as f64;
                (-(1.0 - u).ln() * mean as f64) as u64 + 1
            }
            Kind::Bursts { every, count, gap } => {
                if self.next % every < (count - 1) * gap {
                    gap
                } else {
                    every - (count - 1) * gap
                }
            }
            Kind::Off => u64::MAX / 4,
        }
    }
}

/// A machine whose streams and loads feed one distributor.
struct World {
    d: Distributor,
    now: u64,
    streams: Vec<Stream>,
    /// (cpu, vm, vcpu, percent busy)
    loads: Vec<(usize, usize, usize, u64)>,
    actions: Vec<(u64, Action)>,
}

impl World {
    fn new(cpus: usize) -> Self {
        Self::with(Params::new(cpus, MS))
    }

    fn with(p: Params) -> Self {
        Self {
            d: Distributor::new(p).unwrap(),
            now: 0,
            streams: Vec::new(),
            loads: Vec::new(),
            actions: Vec::new(),
        }
    }

    fn stream(&mut self, vm: usize, movable: bool, cpu: usize, kind: Kind) -> usize {
        let source = self.d.add_source(vm, movable).unwrap();
        let seed = 0x9e37_79b9_7f4a_7c15 ^ (source as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
        self.streams.push(Stream { source, cpu, kind, next: self.now, rng: seed });
        source
    }

    fn set_kind(&mut self, source: usize, kind: Kind) {
        let now = self.now;
        let s = self.streams.iter_mut().find(|s| s.source == source).unwrap();
        s.kind = kind;
        s.next = now;
    }

    fn load(&mut self, cpu: usize, vm: usize, vcpu: usize, percent: u64) {
        self.loads.retain(|l| !(l.1 == vm && l.2 == vcpu));
        self.loads.push((cpu, vm, vcpu, percent));
    }

    /// One bucket of time, then an evaluation; returns its actions.
    fn step(&mut self) -> Vec<Action> {
        let end = self.now + STEP;
        for s in &mut self.streams {
            if matches!(s.kind, Kind::Off) {
                s.next = end;
                continue;
            }
            while s.next < end {
                self.d.record_irq(s.cpu, s.source, s.next);
                s.next += s.gap();
            }
        }
        for &(cpu, vm, vcpu, pct) in &self.loads {
            self.d.record_run(cpu, vm, vcpu, self.now, self.now + STEP * pct / 100);
        }
        self.now = end;
        let actions: Vec<Action> = self.d.evaluate(end).to_vec();
        for a in &actions {
            if let Action::Redirect { source, to_vcpu, to_cpu, from_cpu } = *a {
                let vm = self.d.profiler().source_vm(source);
                assert_eq!(
                    self.d.profiler().vcpu_cpu(vm, to_vcpu),
                    Some(to_cpu),
                    "target has the VM's vCPU"
                );
                assert_ne!(to_cpu, from_cpu);
            }
            self.actions.push((end, *a));
        }
        // After every evaluation, every route in force targets a vCPU that is where it says.
        for source in 0..self.streams.len() {
            if let Some(r) = self.d.route(source) {
                let vm = self.d.profiler().source_vm(source);
                assert_eq!(self.d.profiler().vcpu_cpu(vm, r.to_vcpu), Some(r.to_cpu), "{r:?}");
            }
        }
        actions
    }

    fn run_for(&mut self, time: u64) -> Vec<(u64, Action)> {
        let first = self.actions.len();
        let end = self.now + time;
        while self.now < end {
            self.step();
        }
        self.actions[first..].to_vec()
    }

    fn pattern(&self, source: usize) -> Pattern {
        self.d.profiler().source_stats(source, self.now).unwrap().pattern
    }
}

const AUDIO: Kind = Kind::Periodic { period: 2_500_000, jitter_pct: 5 };
const NET: Kind = Kind::Periodic { period: 10 * MS, jitter_pct: 10 };

/// The paper's machine: CPU 0 runs a real-time VM (0) and a general-purpose VM (1) with
/// vCPUs on CPUs 0, 1 and 2; audio (RT, not movable) and network (GP) interrupts arrive on
/// CPU 0, which is saturated; CPU 1 is 60 % busy, CPU 2 10 %.
fn paper() -> (World, usize, usize) {
    let mut w = World::new(4);
    let rt = w.d.add_vm(&[0]).unwrap();
    let gp = w.d.add_vm(&[0, 1, 2]).unwrap();
    let audio = w.stream(rt, false, 0, AUDIO);
    let net = w.stream(gp, true, 0, NET);
    w.load(0, rt, 0, 70);
    w.load(0, gp, 0, 30);
    w.load(1, gp, 1, 60);
    w.load(2, gp, 2, 10);
    (w, audio, net)
}

#[test]
fn classifies_periodic_and_sporadic_streams() {
    let mut w = World::new(1);
    let vm = w.d.add_vm(&[0]).unwrap();
    let audio = w.stream(vm, true, 0, AUDIO);
    let net = w.stream(vm, true, 0, NET);
    let requests = w.stream(vm, true, 0, Kind::Poisson { mean: 3 * MS });
    // A network stream as measured under iperf3: 0 to 18 interrupts per 10 ms, a burst of 6
    // at a time, roughly 3 bursts every 40 ms.
    let coalesced = w.stream(vm, true, 0, Kind::Bursts { every: 13 * MS, count: 6, gap: MS / 20 });
    let now_and_then = w.stream(vm, true, 0, Kind::Poisson { mean: 40 * MS });
    let bursts = w.stream(vm, true, 0, Kind::Bursts { every: 30 * MS, count: 8, gap: MS / 10 });
    let slow = w.stream(vm, true, 0, Kind::Periodic { period: 40 * MS, jitter_pct: 0 });
    w.run_for(1000 * MS);
    assert_eq!(w.pattern(audio), Pattern::Periodic, "400 Hz");
    assert_eq!(w.pattern(net), Pattern::Periodic, "100 Hz, 10 % jitter");
    assert_eq!(w.pattern(requests), Pattern::Periodic, "a sustained 333 Hz of requests");
    assert_eq!(w.pattern(coalesced), Pattern::Periodic, "irregular gaps, but every bucket");
    assert_eq!(w.pattern(now_and_then), Pattern::Sporadic, "25 Hz Poisson: most buckets empty");
    assert_eq!(w.pattern(bursts), Pattern::Sporadic, "a burst in one bucket of three");
    assert_eq!(w.pattern(slow), Pattern::Sporadic, "regular but too rare (2-3 per window)");
    let stats = w.d.profiler().source_stats(requests, w.now).unwrap();
    assert!((20..=50).contains(&stats.events), "about 33 per window: {stats:?}");
    // A stream that stops is sporadic one window later.
    w.set_kind(audio, Kind::Off);
    w.run_for(100 * MS);
    let stats = w.d.profiler().source_stats(audio, w.now).unwrap();
    assert_eq!(stats, SourceStats { events: 0, pattern: Pattern::Sporadic, cpu: Some(0) });
}

#[test]
fn profiles_per_cpu_per_source_and_per_vcpu_over_a_sliding_window() {
    let mut d = Distributor::new(Params::new(2, MS)).unwrap();
    let vm = d.add_vm(&[0, 1]).unwrap();
    let s = d.add_source(vm, true).unwrap();
    for k in 0..50 {
        d.record_irq(1, s, k * 2 * MS);
    }
    d.record_irq(0, 7, 5 * MS); // an unregistered source counts for its CPU
    d.record_run(0, vm, 0, 5 * MS, 25 * MS); // spans two buckets
    d.record_run(1, vm, 1, 0, 100 * MS);
    let p = d.profiler();
    assert_eq!(p.window(), 100 * MS);
    // Only complete buckets count: at 95 ms, the window is 0..90 ms.
    assert_eq!(p.source_stats(s, 95 * MS).unwrap().events, 45);
    assert_eq!(p.source_stats(s, 100 * MS).unwrap().events, 50);
    assert_eq!(p.cpu_stats(1, 100 * MS), CpuStats { irqs: 50, utilization: 100 });
    assert_eq!(p.cpu_stats(0, 100 * MS), CpuStats { irqs: 1, utilization: 20 });
    assert_eq!(p.vcpu_utilization(vm, 0, 100 * MS), 20);
    // The window slides one bucket at a time.
    assert_eq!(p.cpu_stats(0, 110 * MS), CpuStats { irqs: 0, utilization: 15 });
    assert_eq!(p.cpu_stats(0, 120 * MS), CpuStats { irqs: 0, utilization: 5 });
    assert_eq!(p.source_stats(s, 150 * MS).unwrap().events, 25);
    assert_eq!(p.cpu_stats(1, 200 * MS), CpuStats { irqs: 0, utilization: 0 });
    // Early on, utilization is over the time measured so far: 15 ms of 20.
    assert_eq!(p.covered(20 * MS), 20 * MS);
    assert_eq!(p.cpu_stats(0, 20 * MS).utilization, 75);
}

#[test]
fn redirects_a_periodic_stream_off_a_saturated_cpu() {
    let (mut w, audio, net) = paper();
    let first = w.run_for(100 * MS);
    assert_eq!(
        first,
        [(100 * MS, Action::Redirect { source: net, from_cpu: 0, to_vcpu: 2, to_cpu: 2 })],
        "the network stream goes to the GP VM's vCPU on the least utilized CPU, once"
    );
    assert_eq!(w.d.route(net), Some(Route { from_cpu: 0, to_cpu: 2, to_vcpu: 2 }));
    assert_eq!(w.d.route(audio), None, "the real-time stream stays");
    // Still two periodic streams, so it stays redirected.
    assert_eq!(w.run_for(3000 * MS), []);
}

#[test]
fn no_redirect_unless_saturated_with_two_periodic_streams() {
    // Not saturated.
    let (mut w, _, _) = paper();
    w.load(0, 0, 0, 50);
    assert_eq!(w.run_for(1000 * MS), []);
    // Saturated, but the network stream is sporadic.
    let (mut w, _, net) = paper();
    w.set_kind(net, Kind::Poisson { mean: 40 * MS });
    assert_eq!(w.run_for(1000 * MS), []);
    // Saturated with one periodic stream.
    let (mut w, audio, _) = paper();
    w.set_kind(audio, Kind::Off);
    assert_eq!(w.run_for(1000 * MS), []);
    // Both periodic, but only the real-time one is... real-time; nothing movable.
    let mut w = World::new(2);
    let rt = w.d.add_vm(&[0, 1]).unwrap();
    w.stream(rt, false, 0, AUDIO);
    w.stream(rt, false, 0, NET);
    w.load(0, rt, 0, 100);
    assert_eq!(w.run_for(1000 * MS), []);
}

#[test]
fn never_targets_a_cpu_where_the_vm_has_no_vcpu() {
    // CPUs 1 and 2 are idle, but the GP VM's other vCPU is on CPU 3 (50 % busy).
    let mut w = World::new(4);
    let rt = w.d.add_vm(&[0]).unwrap();
    let gp = w.d.add_vm(&[0, 3]).unwrap();
    w.stream(rt, false, 0, AUDIO);
    let net = w.stream(gp, true, 0, NET);
    w.load(0, rt, 0, 95);
    w.load(3, gp, 1, 50);
    assert_eq!(
        w.run_for(100 * MS),
        [(100 * MS, Action::Redirect { source: net, from_cpu: 0, to_vcpu: 1, to_cpu: 3 })]
    );
    // With CPU 3 busy too there is nowhere to go.
    let mut w = World::new(4);
    let rt = w.d.add_vm(&[0]).unwrap();
    let gp = w.d.add_vm(&[0, 3]).unwrap();
    w.stream(rt, false, 0, AUDIO);
    w.stream(gp, true, 0, NET);
    w.load(0, rt, 0, 95);
    w.load(3, gp, 1, 80);
    assert_eq!(w.run_for(1000 * MS), []);
    // A VM whose vCPUs all share the saturated CPU.
    let mut w = World::new(4);
    let rt = w.d.add_vm(&[0]).unwrap();
    let gp = w.d.add_vm(&[0, 0]).unwrap();
    w.stream(rt, false, 0, AUDIO);
    w.stream(gp, true, 0, NET);
    w.load(0, rt, 0, 95);
    assert_eq!(w.run_for(1000 * MS), []);
}

#[test]
fn targets_follow_vcpus_in_random_machines() {
    // World::step asserts, for every redirect, that the target CPU holds the target vCPU.
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut redirects = 0;
    for _ in 0..40 {
        let cpus = 2 + random(4) as usize;
        let mut w = World::new(cpus);
        for vm in 0..3 {
            let placement: Vec<usize> =
                (0..1 + random(3)).map(|_| random(cpus as u64) as usize).collect();
            w.d.add_vm(&placement).unwrap();
            for (i, &cpu) in placement.iter().enumerate() {
                w.load(cpu, vm, i, random(101));
            }
            for _ in 0..2 {
                let kind = if random(3) == 0 { Kind::Poisson { mean: 5 * MS } } else { AUDIO };
                w.stream(vm, random(4) != 0, random(cpus as u64) as usize, kind);
            }
        }
        for _ in 0..20 {
            w.run_for(50 * MS);
            // The scheduler moves vCPUs around meanwhile.
            let vm = random(3) as usize;
            let n = w.d.profiler().vcpus_of(vm).count();
            w.d.move_vcpu(vm, random(n as u64) as usize, random(cpus as u64) as usize);
        }
        redirects += w.actions.iter().filter(|(_, a)| matches!(a, Action::Redirect { .. })).count();
    }
    assert!(redirects > 10, "the random machines did redirect ({redirects})");
}

#[test]
fn reverts_with_hysteresis_when_a_stream_turns_sporadic() {
    let (mut w, _, net) = paper();
    w.run_for(600 * MS);
    assert!(w.d.route(net).is_some());
    // The network stream pauses for 150 ms out of every 300: sporadic for stretches shorter
    // than revert_after, so it stays where it is.
    for _ in 0..5 {
        w.set_kind(net, Kind::Off);
        assert_eq!(w.run_for(150 * MS), []);
        assert_eq!(w.pattern(net), Pattern::Sporadic, "unpaired for a while");
        w.set_kind(net, NET);
        assert_eq!(w.run_for(150 * MS), []);
    }
    // The transfer ends (a packet now and then): reverted once unpaired for 300 ms.
    w.set_kind(net, Kind::Poisson { mean: 100 * MS });
    let start = w.now;
    let actions = w.run_for(1000 * MS);
    assert_eq!(actions.len(), 1, "{actions:?}");
    let (at, action) = actions[0];
    assert_eq!(action, Action::Revert { source: net });
    assert!(at - start >= w.d.params().revert_after, "reverted after {} ms", (at - start) / MS);
    assert!(at - start <= w.d.params().revert_after + w.d.params().window + STEP);
    assert_eq!(w.d.route(net), None);
    // And it does not come back while sporadic.
    assert_eq!(w.run_for(2000 * MS), []);
}

#[test]
fn reverts_when_the_other_stream_stops() {
    let (mut w, audio, net) = paper();
    w.run_for(600 * MS);
    w.set_kind(audio, Kind::Off);
    let actions = w.run_for(1000 * MS);
    assert_eq!(actions.iter().map(|a| a.1).collect::<Vec<_>>(), [Action::Revert { source: net }]);
    // The music starts again: CPU 0 saturated with two periodic streams once more.
    w.set_kind(audio, AUDIO);
    let actions = w.run_for(1000 * MS);
    assert_eq!(
        actions.iter().map(|a| a.1).collect::<Vec<_>>(),
        [Action::Redirect { source: net, from_cpu: 0, to_vcpu: 2, to_cpu: 2 }]
    );
}

#[test]
fn min_dwell_delays_an_early_revert() {
    let (mut w, _, net) = paper();
    let redirected = w.run_for(100 * MS)[0].0;
    // Sporadic right away: unpaired for 300 ms well before 500 ms have passed.
    w.set_kind(net, Kind::Off);
    let actions = w.run_for(1000 * MS);
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0], (redirected + w.d.params().min_dwell, Action::Revert { source: net }));
}

#[test]
fn reverts_at_once_when_the_target_vcpu_moves() {
    let (mut w, _, net) = paper();
    w.run_for(100 * MS);
    assert_eq!(w.d.route(net).unwrap().to_cpu, 2);
    w.d.move_vcpu(1, 2, 3);
    assert_eq!(w.step(), [Action::Revert { source: net }]);
}

#[test]
fn switched_off_it_reverts_everything_and_holds_still() {
    let (mut w, _, net) = paper();
    w.run_for(100 * MS);
    assert!(w.d.route(net).is_some());
    w.d.set_enabled(false);
    assert!(!w.d.enabled());
    assert_eq!(w.step(), [Action::Revert { source: net }]);
    assert_eq!(w.run_for(1000 * MS), [], "conditions still hold, but it is off");
    // Profiling went on meanwhile.
    assert_eq!(w.pattern(net), Pattern::Periodic);
    w.d.set_enabled(true);
    assert_eq!(w.step(), [Action::Redirect { source: net, from_cpu: 0, to_vcpu: 2, to_cpu: 2 }]);
}

#[test]
fn moves_the_busiest_movable_stream_first() {
    let mut w = World::new(3);
    let rt = w.d.add_vm(&[0]).unwrap();
    let gp = w.d.add_vm(&[0, 1, 2]).unwrap();
    w.stream(rt, false, 0, AUDIO);
    let net = w.stream(gp, true, 0, NET);
    let disk = w.stream(gp, true, 0, Kind::Periodic { period: 5 * MS, jitter_pct: 10 });
    w.load(0, rt, 0, 100);
    w.load(1, gp, 1, 20);
    w.load(2, gp, 2, 40);
    let actions: Vec<Action> = w.run_for(200 * MS).iter().map(|a| a.1).collect();
    assert_eq!(
        actions,
        [
            Action::Redirect { source: disk, from_cpu: 0, to_vcpu: 1, to_cpu: 1 },
            // CPU 0 is still saturated with two periodic streams: one evaluation later, the
            // network goes too (CPU 1 has the disk's interrupts now but is still the least
            // busy in this test's fixed loads).
            Action::Redirect { source: net, from_cpu: 0, to_vcpu: 1, to_cpu: 1 },
        ]
    );
}

#[test]
fn config_errors() {
    assert_eq!(Distributor::new(Params::new(0, MS)).unwrap_err(), ConfigError::NoCpus);
    assert_eq!(
        Distributor::new(Params { window: 5, buckets: 10, ..Params::new(1, MS) }).unwrap_err(),
        ConfigError::Window
    );
    let mut d = Distributor::new(Params::new(2, MS)).unwrap();
    assert_eq!(d.add_vm(&[]), Err(ConfigError::NoVcpus));
    assert_eq!(d.add_vm(&[0, 2]), Err(ConfigError::Placement { index: 1, cpu: 2 }));
    assert_eq!(d.add_source(0, true), Err(ConfigError::UnknownVm(0)));
    assert_eq!(d.add_vm(&[1]), Ok(0));
    assert_eq!(d.add_source(0, true), Ok(0));
    // Out-of-range reports are ignored, not fatal: they come from interrupt handlers.
    d.record_irq(9, 0, 0);
    d.record_run(0, 5, 0, 0, MS);
    d.move_vcpu(0, 3, 1);
    assert_eq!(d.evaluate(100 * MS), []);
}

/// A CPU that never idles is 100 % busy even when the current bucket already has records
/// when the window is read (armhv evaluates at any phase of a bucket): the ring keeps the
/// window's oldest bucket apart from the current one. (It read 90 %, never saturated.)
#[test]
fn a_cpu_that_never_idles_is_fully_busy_mid_bucket() {
    let mut d = Distributor::new(Params::new(1, MS)).unwrap();
    let vm = d.add_vm(&[0]).unwrap();
    let s = d.add_source(vm, true).unwrap();
    let mut t = 0;
    while t < 500 * MS {
        d.record_run(0, vm, 0, t, t + MS);
        d.record_irq(0, s, t);
        t += MS;
    }
    // 500 ms of 1 ms runs and interrupts: read 3 ms into the current bucket.
    d.record_run(0, vm, 0, t, t + 3 * MS);
    d.record_irq(0, s, t + MS);
    let now = t + 3 * MS;
    assert_eq!(d.profiler().cpu_stats(0, now).utilization, 100);
    assert_eq!(d.profiler().source_stats(s, now).unwrap().events, 100);
}

/// The study's cases 6 and 7: the real-time VM's CPU-heavy job on CPUs 1 and 2 beside its
/// audio on CPU 0, the general-purpose VM's vCPUs on CPUs 0-2 (and 3 when `spare`). The job
/// leaves those CPUs below the target limit, so only the real-time rule (`rt_busy_pct` 10)
/// keeps the stream off.
fn with_rt_job(realtime: bool, spare: bool) -> (World, usize) {
    let mut w = World::with(Params { rt_busy_pct: 10, ..Params::new(4, MS) });
    let rt = w.d.add_vm(&[0, 1, 2]).unwrap();
    if realtime {
        w.d.set_realtime(rt).unwrap();
    }
    let gp_cpus: &[usize] = if spare { &[0, 1, 2, 3] } else { &[0, 1, 2] };
    let gp = w.d.add_vm(gp_cpus).unwrap();
    w.stream(rt, false, 0, AUDIO);
    let net = w.stream(gp, true, 0, NET);
    w.load(0, rt, 0, 70);
    w.load(0, gp, 0, 30);
    w.load(1, rt, 1, 40);
    w.load(2, rt, 2, 40);
    w.load(1, gp, 1, 10);
    w.load(2, gp, 2, 5);
    (w, net)
}

#[test]
fn by_default_a_realtime_job_does_not_keep_a_stream_off_its_cpu() {
    let (mut w, net) = with_rt_job(true, false);
    w.d = Distributor::new(Params::new(4, MS)).unwrap();
    let rt = w.d.add_vm(&[0, 1, 2]).unwrap();
    w.d.set_realtime(rt).unwrap();
    w.d.add_vm(&[0, 1, 2]).unwrap();
    w.d.add_source(rt, false).unwrap();
    w.d.add_source(1, true).unwrap();
    w.run_for(100 * MS);
    assert_eq!(w.d.route(net).map(|r| r.to_cpu), Some(2));
}

#[test]
fn with_rt_busy_pct_never_moves_a_stream_onto_a_busy_realtime_job() {
    // Unmarked, the job's CPUs look like fair targets: CPU 2 is the least utilized.
    let (mut w, net) = with_rt_job(false, false);
    w.run_for(100 * MS);
    assert_eq!(w.d.route(net).map(|r| r.to_cpu), Some(2));
    // Marked real-time, they are not, and there is no other: the stream stays.
    let (mut w, net) = with_rt_job(true, false);
    assert_eq!(w.run_for(1000 * MS), []);
    assert_eq!(w.d.route(net), None);
    // A free CPU is still taken.
    let (mut w, net) = with_rt_job(true, true);
    w.run_for(100 * MS);
    assert_eq!(w.d.route(net), Some(Route { from_cpu: 0, to_cpu: 3, to_vcpu: 3 }));
    // An idle real-time vCPU does not count: the job stopped, its CPUs are targets again.
    let (mut w, net) = with_rt_job(true, false);
    w.load(1, 0, 1, 0);
    w.load(2, 0, 2, 5);
    w.run_for(100 * MS);
    assert_eq!(w.d.route(net).map(|r| r.to_cpu), Some(1));
}

#[test]
fn with_rt_busy_pct_spreads_only_over_cpus_without_a_realtime_job() {
    let (mut w, net) = with_rt_job(true, true);
    assert_eq!(w.d.spread_targets(net).count(), 0, "not redirected yet");
    w.load(2, 0, 2, 0);
    w.run_for(100 * MS);
    // CPU 1 carries the job, CPU 2 no longer does; CPU 0 is where the stream comes from.
    let targets: Vec<(usize, usize)> = w.d.spread_targets(net).collect();
    assert_eq!(w.d.route(net).map(|r| r.to_cpu), Some(3));
    assert_eq!(targets, [(2, 2), (3, 3)]);
    assert_eq!(w.d.set_realtime(7), Err(ConfigError::UnknownVm(7)));
}
