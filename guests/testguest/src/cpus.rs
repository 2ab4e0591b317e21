//! Secondary CPUs: starting them with PSCI CPU_ON, what each does once up,
//! and the steps about CPUs: `smp`, `ipi`/`ipi4`, `smp-off`, `psci-errors`, `psci-race`; and the
//! CPU-heavy helpers of `audio=` (hogs).
//!
//! CPU 0 hands each CPU its task and stack slot before CPU_ON and waits for
//! it with `wfe` (woken by the other CPU's `sev` or the event stream). Every
//! step leaves the other CPUs off again, so steps can follow each other.

use baremetal::boot::MAX_CPUS;
use baremetal::console::Global;
use baremetal::cpu::{MPIDR_AFF_MASK, dsb_sev, mpidr, wfe};
use baremetal::psci::{self, AFFINITY_OFF, wait_off};

use crate::audio::{self, HogStats};
use crate::{Machine, gic, println, steps, time};

/// What a secondary CPU does once up (`TASK[slot]`).
const TASK_REPORT: u64 = 0;
const TASK_ANSWER: u64 = 1;
const TASK_ONLINE: u64 = 2;
const TASK_HOG: u64 = 3;
const TASK_RACER: u64 = 4;
const TASK_RACE_TARGET: u64 = 5;

const SMP_TIMEOUT_MS: u64 = 1000;
/// How long CPU 0 waits for each `ipi` answer before giving up on the step.
const IPI_TIMEOUT_MS: u64 = 1000;

/// Each CPU's task, read by it at start; written by CPU 0 while it is off.
static TASK: [Global<u64>; MAX_CPUS] = [const { Global::new(TASK_REPORT) }; MAX_CPUS];
/// Set by an `ipi` helper once its GIC interface takes SGIs.
static READY: [Global<bool>; MAX_CPUS] = [const { Global::new(false) }; MAX_CPUS];
/// Set by CPU 0 to end an `ipi` helper's loop.
static STOP: [Global<bool>; MAX_CPUS] = [const { Global::new(false) }; MAX_CPUS];
/// `psci-race`: the CPU the racers start, the start signal, each racer's CPU_ON status
/// (`NO_RESULT` until it has one) and the AFFINITY_INFO its caller got right after a SUCCESS,
/// and the target's leave to turn itself off.
static RACE_TARGET: Global<u64> = Global::new(0);
static RACE_GO: Global<bool> = Global::new(false);
static RACE_RESULT: [Global<i64>; MAX_CPUS] = [const { Global::new(NO_RESULT) }; MAX_CPUS];
static RACE_AFFINITY: Global<i64> = Global::new(NO_RESULT);
static RACE_RELEASE: Global<bool> = Global::new(false);
const NO_RESULT: i64 = i64::MIN;
/// The target's stack slot: the fifth CPU's.
const RACE_TARGET_SLOT: usize = 4;

/// Stack slot the secondary being started by `smp` has reported in with (0: none yet).
static CPU_UP: Global<u64> = Global::new(0);
/// `smp-off`: the slot whose turn it is to print (CPU 0 writes), and the
/// last slot that has printed (the secondaries write, one at a time).
static TURN: Global<u64> = Global::new(0);
static DONE: Global<u64> = Global::new(0);
/// Where `ipi` helpers send their answers: CPU 0's affinity.
static PRIMARY: Global<u64> = Global::new(0);
/// The hogs running (affinity per stack slot, 0: none) and what each reported when it stopped.
static HOGS: [Global<u64>; MAX_CPUS] = [const { Global::new(0) }; MAX_CPUS];
static HOG_STATS: [Global<HogStats>; MAX_CPUS] =
    [const { Global::new(HogStats { busy: 0, elapsed: 0, loops: 0 }) }; MAX_CPUS];

fn entry_point() -> u64 {
    baremetal::boot::secondary_entry_point()
}

/// Waits in `wfe` until `done()`, for up to `ms`; false on timeout.
fn wait_event(ms: u64, done: impl Fn() -> bool) -> bool {
    let deadline = time::counter() + time::ms_to_ticks(ms);
    while !done() {
        if time::passed(deadline) {
            return false;
        }
        wfe();
    }
    true
}

/// The other CPUs of the device tree, each with the stack slot it gets (1, 2, ...).
fn others<'a>(m: &'a Machine) -> impl Iterator<Item = (usize, u64)> + 'a {
    let me = mpidr() & MPIDR_AFF_MASK;
    m.cpus[..m.ncpus].iter().copied().filter(move |&c| c != me).enumerate().map(|(i, c)| (i + 1, c))
}

/// PSCI CPU_ON of `mpidr` into `task` on stack slot `slot`, once an earlier
/// step's CPU_OFF of it has completed. Returns PSCI's status.
fn start(slot: usize, mpidr: u64, task: u64) -> i64 {
    wait_off(mpidr, SMP_TIMEOUT_MS);
    TASK[slot].set(task);
    dsb_sev();
    psci::cpu_on(mpidr, slot)
}

/// `smp`: starts every other CPU of the device tree, one at a time, and waits
/// for each to report before the next, so their lines never interleave.
pub fn smp(m: &Machine) {
    let mut up = 1;
    for (slot, target) in others(m) {
        if slot >= MAX_CPUS {
            println!("testguest: smp cpu {target:#x} skipped (no stack)");
            continue;
        }
        CPU_UP.set(0);
        let r = start(slot, target, TASK_REPORT);
        if r != 0 {
            println!("testguest: smp cpu_on {target:#x} -> {r}");
            continue;
        }
        if wait_event(SMP_TIMEOUT_MS, || CPU_UP.get() == slot as u64) {
            up += 1;
        } else {
            println!("testguest: smp cpu {target:#x} timed out");
        }
    }
    println!("testguest: smp {up}/{} cpus up", m.ncpus.max(1));
}

/// Rust entry of a secondary CPU, with its stack slot.
pub fn secondary_main(slot: usize) -> ! {
    match TASK[slot].get() {
        TASK_ANSWER => answer_loop(slot),
        TASK_HOG => {
            READY[slot].set(true);
            dsb_sev();
            HOG_STATS[slot].set(audio::hog(|| STOP[slot].get()));
        }
        TASK_RACER => {
            READY[slot].set(true);
            dsb_sev();
            while !RACE_GO.get() {
                wfe();
            }
            race_cpu_on(slot);
        }
        TASK_RACE_TARGET => {
            while !RACE_RELEASE.get() {
                wfe();
            }
        }
        TASK_ONLINE => {
            while TURN.get() != slot as u64 {
                wfe();
            }
            println!("testguest: cpu {slot} online");
            DONE.set(slot as u64);
        }
        _ => {
            println!("testguest: smp cpu {slot} up mpidr={:#x}", mpidr() & MPIDR_AFF_MASK);
            CPU_UP.set(slot as u64);
        }
    }
    dsb_sev();
    psci::call(psci::PSCI_CPU_OFF, 0, 0, 0);
    println!("testguest: CPU_OFF returned");
    psci::halt()
}

/// An `ipi` helper: takes SGIs (answering each SGI_PING in the handler)
/// until CPU 0 sets STOP and kicks it.
fn answer_loop(slot: usize) {
    gic::init_cpu();
    READY[slot].set(true);
    dsb_sev();
    gic::wait_for(None, || STOP[slot].get());
}

/// SGI_PING's handler on a helper: answer CPU 0.
pub fn answer_ping() {
    gic::send_sgi(gic::SGI_PONG, PRIMARY.get());
}

/// `ipi=N` (`helpers` = 1) and `ipi4=N` (3): starts that many helper CPUs,
/// pings them round-robin, one SGI at a time, each time sleeping in `wfi`
/// until the answer arrives; then stops them.
pub fn ipi(m: &Machine, name: &str, n: u64, helpers: usize) {
    if m.ncpus < helpers + 1 {
        println!("testguest: {name} needs {} cpus, have {}", helpers + 1, m.ncpus);
        return;
    }
    if !steps::need_gic(name) {
        return;
    }
    let h = Helpers::start(m, name, helpers);
    let targets = h.targets();
    let received = || -> u64 { targets.iter().map(|&(s, _)| gic::count(s, gic::SGI_PING)).sum() };
    let received_before = received();
    let pongs_before = gic::count(0, gic::SGI_PONG);
    let answered = || gic::count(0, gic::SGI_PONG) - pongs_before;

    let mut sent = 0;
    if targets.len() == helpers {
        for i in 0..n {
            let (slot, mpidr) = targets[i as usize % targets.len()];
            gic::send_sgi(gic::SGI_PING, mpidr);
            sent += 1;
            if !gic::wait_ms(IPI_TIMEOUT_MS, || answered() >= sent) {
                println!("testguest: {name} no answer from cpu {slot} to ping {sent}");
                break;
            }
        }
    }
    let received = received() - received_before;
    h.stop();
    let answered = answered();
    println!("testguest: {name} sent {sent} received {received} lost {}", sent - answered);
}

/// Helper CPUs taking interrupts (SGIs, and SPIs routed or redirected to them) in `wfi` until
/// stopped; each answers SGI_PING with SGI_PONG to CPU 0.
pub struct Helpers<'n> {
    name: &'n str,
    targets: [(usize, u64); MAX_CPUS],
    count: usize,
}

impl<'n> Helpers<'n> {
    /// Starts up to `helpers` other CPUs (fewer, with a line saying why, if one fails).
    pub fn start(m: &Machine, name: &'n str, helpers: usize) -> Self {
        PRIMARY.set(mpidr() & MPIDR_AFF_MASK);
        let mut h = Helpers { name, targets: [(0, 0); MAX_CPUS], count: 0 };
        for (slot, mpidr) in others(m).take(helpers) {
            READY[slot].set(false);
            STOP[slot].set(false);
            let r = start(slot, mpidr, TASK_ANSWER);
            if r != 0 {
                println!("testguest: {name} cpu_on {mpidr:#x} -> {r}");
                break;
            }
            h.targets[h.count] = (slot, mpidr);
            h.count += 1;
            if !wait_event(SMP_TIMEOUT_MS, || READY[slot].get()) {
                println!("testguest: {name} cpu {mpidr:#x} not ready");
                break;
            }
        }
        h
    }

    /// `(stack slot, MPIDR)` of each helper started.
    pub fn targets(&self) -> &[(usize, u64)] {
        &self.targets[..self.count]
    }

    /// Ends every helper's loop and waits until each is off.
    pub fn stop(self) {
        for &(slot, mpidr) in self.targets() {
            STOP[slot].set(true);
            gic::send_sgi(gic::SGI_KICK, mpidr);
        }
        for &(_, mpidr) in self.targets() {
            let state = wait_off(mpidr, SMP_TIMEOUT_MS);
            if state != AFFINITY_OFF {
                println!("testguest: {} cpu {mpidr:#x} still on ({state})", self.name);
            }
        }
    }
}

/// Starts a hog (`audio::hog`) on every other CPU; returns how many run.
pub fn start_hogs(m: &Machine) -> usize {
    let mut n = 0;
    for (slot, mpidr) in others(m).filter(|&(slot, _)| slot < MAX_CPUS) {
        READY[slot].set(false);
        STOP[slot].set(false);
        let r = start(slot, mpidr, TASK_HOG);
        if r != 0 {
            println!("testguest: hog cpu_on {mpidr:#x} -> {r}");
            continue;
        }
        if !wait_event(SMP_TIMEOUT_MS, || READY[slot].get()) {
            println!("testguest: hog cpu {mpidr:#x} not ready");
        }
        HOGS[slot].set(mpidr);
        n += 1;
    }
    n
}

/// Stops the hogs `start_hogs` started and waits until each is off; returns each one's
/// stack slot and figures.
pub fn stop_hogs() -> impl Iterator<Item = (usize, HogStats)> {
    let running = || (1..MAX_CPUS).filter(|&s| HOGS[s].get() != 0);
    for slot in running() {
        STOP[slot].set(true);
        gic::send_sgi(gic::SGI_KICK, HOGS[slot].get());
    }
    for slot in running() {
        let mpidr = HOGS[slot].get();
        let state = wait_off(mpidr, SMP_TIMEOUT_MS);
        if state != AFFINITY_OFF {
            println!("testguest: hog cpu {mpidr:#x} still on ({state})");
        }
    }
    let stopped: [Option<HogStats>; MAX_CPUS] = core::array::from_fn(|s| {
        let was = s > 0 && HOGS[s].get() != 0;
        HOGS[s].set(0);
        was.then(|| HOG_STATS[s].get())
    });
    stopped.into_iter().enumerate().filter_map(|(s, h)| Some((s, h?)))
}

/// `smp-off`: starts all other CPUs at once; each prints its line when its
/// turn comes (so lines never interleave) and powers itself off with
/// CPU_OFF. Then waits until AFFINITY_INFO reports every one of them off.
pub fn smp_off(m: &Machine) {
    let mut started = [None; MAX_CPUS];
    let mut total = 0;
    TURN.set(0);
    DONE.set(0);
    for (slot, mpidr) in others(m).filter(|&(slot, _)| slot < MAX_CPUS) {
        total += 1;
        let r = start(slot, mpidr, TASK_ONLINE);
        if r == 0 {
            started[slot] = Some(mpidr);
        } else {
            println!("testguest: smp-off cpu_on {mpidr:#x} -> {r}");
        }
    }
    for slot in (1..MAX_CPUS).filter(|&s| started[s].is_some()) {
        TURN.set(slot as u64);
        dsb_sev();
        if !wait_event(SMP_TIMEOUT_MS, || DONE.get() == slot as u64) {
            println!("testguest: smp-off cpu {slot} timed out");
        }
    }
    let mut off = 0;
    for (slot, mpidr) in started.iter().enumerate().filter_map(|(s, m)| Some((s, (*m)?))) {
        match wait_off(mpidr, SMP_TIMEOUT_MS) {
            AFFINITY_OFF => off += 1,
            state => println!("testguest: smp-off cpu {slot} still on ({state})"),
        }
    }
    if off == total {
        println!("testguest: smp-off all {off} cpus off");
    } else {
        println!("testguest: smp-off {off}/{total} cpus off");
    }
}

/// One racer's CPU_ON of the target; the one that gets SUCCESS asks AFFINITY_INFO at once.
fn race_cpu_on(slot: usize) {
    let target = RACE_TARGET.get();
    let status = psci::cpu_on(target, RACE_TARGET_SLOT);
    if status == 0 {
        RACE_AFFINITY.set(psci::affinity_info(target));
    }
    RACE_RESULT[slot].set(status);
    dsb_sev();
}

/// `psci-race`: CPU 0 and three helpers call CPU_ON for a fifth CPU at the same moment. As on
/// KVM, exactly one gets SUCCESS and the others ALREADY_ON, and AFFINITY_INFO says ON (0) as
/// soon as SUCCESS has returned:
/// `testguest: psci-race <s> success, <a> already-on, <o> other; affinity after success <n>`.
pub fn psci_race(m: &Machine) {
    const RACERS: usize = 4;
    if m.ncpus < RACERS + 1 {
        println!("testguest: psci-race needs {} cpus, have {}", RACERS + 1, m.ncpus);
        return;
    }
    let mut helpers = [(0usize, 0u64); RACERS - 1];
    for (i, other) in others(m).take(RACERS - 1).enumerate() {
        helpers[i] = other;
    }
    let Some((_, target)) = others(m).nth(RACE_TARGET_SLOT - 1) else { return };
    wait_off(target, SMP_TIMEOUT_MS);
    TASK[RACE_TARGET_SLOT].set(TASK_RACE_TARGET);
    RACE_TARGET.set(target);
    RACE_GO.set(false);
    RACE_RELEASE.set(false);
    RACE_AFFINITY.set(NO_RESULT);
    RACE_RESULT.iter().for_each(|r| r.set(NO_RESULT));
    for &(slot, mpidr) in &helpers {
        READY[slot].set(false);
        let r = start(slot, mpidr, TASK_RACER);
        if r != 0 || !wait_event(SMP_TIMEOUT_MS, || READY[slot].get()) {
            println!("testguest: psci-race helper {mpidr:#x} did not start ({r})");
            return;
        }
    }
    RACE_GO.set(true);
    dsb_sev();
    race_cpu_on(0);
    let all_in = || (0..RACERS).all(|slot| RACE_RESULT[slot].get() != NO_RESULT);
    if !wait_event(SMP_TIMEOUT_MS, all_in) {
        println!("testguest: psci-race a racer did not answer");
    }
    let (mut success, mut already, mut other) = (0, 0, 0);
    for (slot, result) in RACE_RESULT.iter().take(RACERS).enumerate() {
        match result.get() {
            0 => success += 1,
            -4 => already += 1,
            status => {
                println!("testguest: psci-race cpu {slot} got {status}");
                other += 1;
            }
        }
    }
    RACE_RELEASE.set(true);
    dsb_sev();
    wait_off(target, SMP_TIMEOUT_MS);
    for &(_, mpidr) in &helpers {
        wait_off(mpidr, SMP_TIMEOUT_MS);
    }
    println!(
        "testguest: psci-race {success} success, {already} already-on, {other} other; \
         affinity after success {}",
        RACE_AFFINITY.get()
    );
}

/// `psci-errors`: PSCI calls that must fail (or report a CPU off), one line each.
pub fn psci_errors(m: &Machine) {
    let me = mpidr() & MPIDR_AFF_MASK;
    let other = others(m).next().map(|(_, mpidr)| mpidr);
    // Context id 0: should any of these start a CPU after all, it parks.
    let cpu_on = |mpidr: u64, entry: u64| psci::call(psci::PSCI_CPU_ON, mpidr, entry, 0)[0] as i64;

    println!("testguest: psci cpu_on self -> {}", cpu_on(me, entry_point()));

    // QEMU's own PSCI does not check the entry point: it would start the CPU
    // there, running garbage for the rest of the run. Only ask armhv.
    if psci::under_armhv() {
        let target = other.unwrap_or(me);
        if let Some(mpidr) = other {
            wait_off(mpidr, SMP_TIMEOUT_MS);
        }
        println!("testguest: psci cpu_on bad-entry -> {}", cpu_on(target, m.ram_end));
    } else {
        println!("testguest: psci cpu_on bad-entry skipped (not armhv)");
    }

    println!("testguest: psci cpu_on bad-mpidr -> {}", cpu_on(0xff, entry_point()));

    match other {
        Some(mpidr) => {
            // An earlier step's CPU_OFF may still be completing.
            println!("testguest: psci affinity_info off -> {}", wait_off(mpidr, SMP_TIMEOUT_MS));
        }
        None => println!("testguest: psci affinity_info off skipped (1 cpu)"),
    }
    println!("testguest: psci-errors done");
}
