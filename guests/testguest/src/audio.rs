//! `audio=MS,PERIOD_US,WORK_US[,HOG_PCT]`: the soft-real-time "audio" workload of the
//! interrupt-distributor experiment (the multicore CE hypervisor study's Table 1, reproduced
//! by `make table1`).
//!
//! The study's real-time VM played an MP3 file: its audio interrupts came 3–4 times per 10 ms
//! tick, each preempting whatever ran on core 0 and costing a fixed amount of decoding. Here
//! CPU 0's virtual timer fires every `PERIOD_US` µs (3000: 3.3 per 10 ms) and the handler
//! busy-waits `WORK_US` µs of the counter, for `MS` ms (0: until the VM is stopped). The
//! study's second workload, an H.264 decoder on the other cores, is `HOG_PCT`: every other
//! CPU of the VM spins that percentage of each 10 ms and sleeps in `wfi` for the rest.
//!
//! Lines (CPU 0):
//!
//! ```text
//! testguest: audio period <us> us work <us> us for <ms> ms, hog <pct> % on <k> cpus
//!     ("until stopped" for MS = 0)
//! testguest: audio <ms> ms: <n> interrupts (<r> per 10 ms), work <ms> ms in <loops> loops,
//!     latency max <us> us mean <us> us
//!     (one line, every 5 s and at the end; cumulative from the start)
//! testguest: audio hog cpu <slot>: busy <ms> ms of <ms> ms, <loops> loops   (at the end)
//! testguest: audio done
//! ```
//!
//! `loops` are busy-loop iterations: with the time they took they show how much of it the
//! vCPU actually had. Latency is from each deadline to its handler.

use baremetal::console::Global;

use crate::timer::{self, Timer};
use crate::{Machine, cpus, gic, println, steps, time};

/// A summary line this often.
const REPORT_MS: u64 = 5000;
/// The hog's duty cycle is over this period.
const HOG_PERIOD_MS: u64 = 10;

/// One hog's figures, written by it when it stops, read by CPU 0 once it is off.
#[derive(Clone, Copy)]
pub struct HogStats {
    pub busy: u64,
    pub elapsed: u64,
    pub loops: u64,
}

/// The hog's duty cycle, set by CPU 0 before it starts any hog.
static HOG_PCT: Global<u64> = Global::new(0);

/// The step's arguments.
struct Args {
    ms: u64,
    period_us: u64,
    work_us: u64,
    hog_pct: u64,
}

fn parse(arg: &str) -> Option<Args> {
    let mut fields = arg.split(',').map(|f| f.parse::<u64>().ok());
    let ms = fields.next()??;
    let period_us = fields.next()??;
    let work_us = fields.next()??;
    let hog_pct = match fields.next() {
        Some(f) => f?,
        None => 0,
    };
    if fields.next().is_some() {
        return None;
    }
    Some(Args { ms, period_us, work_us, hog_pct })
}

/// Microseconds to counter ticks.
fn us_to_ticks(us: u64) -> u64 {
    (u128::from(us) * u128::from(time::frequency()) / 1_000_000) as u64
}

pub fn step(m: &Machine, word: &str, arg: &str) {
    let Some(a) = parse(arg) else {
        println!("testguest: bad number in '{word}'");
        return;
    };
    if a.period_us == 0 || a.work_us >= a.period_us || a.hog_pct > 100 {
        println!(
            "testguest: audio needs 0 <= WORK_US < PERIOD_US and HOG_PCT <= 100 (got '{word}')"
        );
        return;
    }
    if !steps::need_gic("audio") {
        return;
    }
    HOG_PCT.set(a.hog_pct);
    let hogs = if a.hog_pct > 0 { cpus::start_hogs(m) } else { 0 };
    let (period, work) = (us_to_ticks(a.period_us), us_to_ticks(a.work_us));
    // The interrupts the duration holds; MS = 0: as many as the counter allows.
    let count = if a.ms == 0 { u64::MAX } else { (a.ms * 1000 / a.period_us).max(1) };
    match a.ms {
        0 => println!(
            "testguest: audio period {} us work {} us until stopped, hog {} % on {hogs} cpus",
            a.period_us, a.work_us, a.hog_pct
        ),
        ms => println!(
            "testguest: audio period {} us work {} us for {ms} ms, hog {} % on {hogs} cpus",
            a.period_us, a.work_us, a.hog_pct
        ),
    }

    timer::select(Timer::Virtual);
    timer::set_work(work);
    let start = timer::start_periodic(period, count);
    let report = time::ms_to_ticks(REPORT_MS);
    // Give up on a timer at half speed (the interrupts themselves wake every wait).
    let give_up = (a.ms > 0).then(|| start + 2 * time::ms_to_ticks(a.ms) + time::ms_to_ticks(1000));
    let mut next = start + report;
    let ok = loop {
        let finished = gic::wait_for(give_up, || timer::ticks() >= count || time::passed(next));
        if !finished {
            break false;
        }
        if timer::ticks() >= count {
            break true;
        }
        summary(start);
        next += report;
    };
    timer::stop();
    timer::set_work(0);
    if ok {
        summary(start);
    } else {
        println!("testguest: audio timed out after {} of {count} interrupts", timer::ticks());
    }
    for (slot, stats) in cpus::stop_hogs() {
        println!(
            "testguest: audio hog cpu {slot}: busy {} ms of {} ms, {} loops",
            time::ticks_to_ms(stats.busy),
            time::ticks_to_ms(stats.elapsed),
            stats.loops
        );
    }
    println!("testguest: audio done");
}

/// The cumulative summary line.
fn summary(start: u64) {
    let elapsed = time::counter() - start;
    let n = timer::ticks();
    let ms = time::ticks_to_ms(elapsed);
    // Interrupts per 10 ms, with one decimal.
    let per_tick_x10 = (n * 100).checked_div(ms).unwrap_or(0);
    let (work, loops) = timer::work_done();
    let (max, sum) = timer::latency();
    let mean = sum.checked_div(n).unwrap_or(0);
    println!(
        "testguest: audio {ms} ms: {n} interrupts ({}.{} per 10 ms), work {} ms in {loops} \
         loops, latency max {} us mean {} us",
        per_tick_x10 / 10,
        per_tick_x10 % 10,
        time::ticks_to_ms(work),
        time::ticks_to_us(max),
        time::ticks_to_us(mean)
    );
}

/// A hog on a secondary CPU (`cpus::TASK_HOG`): spins `HOG_PCT` % of every 10 ms and sleeps
/// in `wfi` on its own virtual timer for the rest, until `stop()`; returns what it did.
pub fn hog(stop: impl Fn() -> bool) -> HogStats {
    gic::init_cpu();
    let period = time::ms_to_ticks(HOG_PERIOD_MS);
    let busy = period * HOG_PCT.get() / 100;
    let begin = time::counter();
    let mut stats = HogStats { busy: 0, elapsed: 0, loops: 0 };
    let mut t = begin;
    while !stop() {
        // From when it actually woke (a loaded host wakes it late), within its period: a late
        // wake-up must not eat into the share it spins.
        let from = time::counter();
        let end = (from + busy).min(t + period);
        while !time::passed(end) {
            stats.loops += 1;
            timer::spin_hint(stats.loops);
        }
        stats.busy += time::counter() - from;
        t += period;
        if time::passed(t) {
            // Preempted past the period: start the next one from now.
            t = time::counter();
            continue;
        }
        if busy < period {
            timer::arm_local(t);
            gic::wait_for(None, || time::passed(t) || stop());
        }
    }
    stats.elapsed = time::counter() - begin;
    stats
}
