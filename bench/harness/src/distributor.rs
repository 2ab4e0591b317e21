//! The interrupt-distributor experiment: the multicore CE hypervisor study's Table 1 and
//! Figures 9 and 10, on QEMU `-smp 4` (`make table1`).
//!
//! The study consolidated a soft-real-time VM playing audio with a general-purpose Linux VM
//! receiving a TCP stream. The audio interrupts (3–4 per 10 ms tick, each preempting) landed on
//! core 0 together with the network's, and the network lost most of its bandwidth; a virtual
//! interrupt distributor moving the network interrupt to another core gave it back.
//!
//! Here, on `configs/bench/distributor.toml` (the template; one copy per case is written to
//! `build/table1/`):
//!
//! * VM `rt` (real-time class, vCPU 0 on CPU 0, two more vCPUs on CPUs 1 and 2) runs
//!   testguest's `audio=` step: its virtual timer every 3 ms with a fixed busy-wait in each
//!   handler; in cases 5–7 its other vCPUs also spin part of every 10 ms (the study's H.264
//!   decoder on the other cores).
//! * VM `gp` (Debian's kernel, vCPU 0 on CPU 0 beside `rt`, vCPUs 1 and 2 on CPUs 1 and 2)
//!   receives an iperf3 stream (`iperf3 -R`) from VM `peer` (CPU 3) over armhv's switch: its
//!   virtio-net receive interrupts, `gp/net0`, are the network stream.
//! * `[irqdist]` is in every case (it profiles and traces); `enabled` and `spread` make the
//!   cases: off (1, 2, 5), `spread = "one"` (3, 6), `spread = "all"` (4, 7).
//!
//! For each case the runner boots QEMU, waits until iperf3 runs, dumps armhv's per-tick trace
//! (Ctrl-A t: the last 3 s) every 2.5 s of the transfer, waits for iperf3's result, stops
//! every VM (Ctrl-A q), and parses the console: the bandwidth, the trace of the measured
//! seconds (the dumps merged by tick number: interrupts of each source on each CPU per 10 ms
//! tick), the profiler's view at each dump, the distributor's redirects and the audio guest's
//! own summary.

use crate::irqtrace::{self, Event, Trace, Window};
use crate::parse::split_vm_tag;
use crate::report::Charts;
use crate::results::{Kind, Results, Run};
use crate::workloads::{self, Output};
use crate::{Options, Step, rel};
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xtask::{MachineSpec, image, qemu};

/// The VMs of the template.
pub const RT_VM: &str = "rt";
pub const GP_VM: &str = "gp";
pub const PEER_VM: &str = "peer";
/// The audio stream (the real-time VM's virtual timer) and the network stream.
pub const AUDIO_SOURCE: &str = "rt/timer";
pub const NET_SOURCE: &str = "gp/net0";
/// The CPU the audio is delivered on (`rt`'s vCPU 0).
pub const AUDIO_CPU: usize = 0;
/// Ticks shown in the figure, as in the study's Figures 9 and 10 (1.5 s).
pub const PLOT_TICKS: usize = 150;
/// iperf3 -O 1: the transfer's first second is not measured.
const OMITTED_SECS: f64 = 1.0;
/// The first trace dump, and the time between dumps (less than the 3 s a dump holds).
const FIRST_DUMP_SECS: f64 = 3.0;
const DUMP_EVERY_SECS: f64 = 2.5;
/// How long armhv may take to dump the trace, and the VMs to stop after Ctrl-A q.
const DUMP_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long iperf3's result may take after the last dump (the end of the transfer).
const RESULT_TIMEOUT: Duration = Duration::from_secs(90);
/// A CPU counts as one of a stream's cores when it carries at least this share of it.
const CORE_SHARE: f64 = 0.1;

/// What the distributor does in a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// `[irqdist] enabled = false`: profiling and tracing only.
    Off,
    /// `spread = "one"`: to the VM's vCPU on the least-utilized other CPU.
    One,
    /// `spread = "all"`: rotated over the VM's vCPUs on every other CPU.
    All,
}

impl Spread {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::One => "one other core",
            Self::All => "all other cores",
        }
    }
}

/// One row of the study's Table 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Case {
    pub number: u32,
    /// The study's name for it.
    pub name: &'static str,
    pub audio: bool,
    /// The CPU-heavy job in the real-time VM (the study's H.264 decoder).
    pub hog: bool,
    pub spread: Spread,
    /// The study's figures (ARM11 MPCore, 4 x 250 MHz, Linux 2.6.21): bandwidth and where
    /// the network interrupts went.
    pub study_mbit: f64,
    pub study_network: &'static str,
}

pub const CASES: [Case; 7] = [
    Case {
        number: 1,
        name: "max bandwidth, no audio",
        audio: false,
        hog: false,
        spread: Spread::Off,
        study_mbit: 15.7,
        study_network: "core0",
    },
    Case {
        number: 2,
        name: "only core0",
        audio: true,
        hog: false,
        spread: Spread::Off,
        study_mbit: 2.30,
        study_network: "core0",
    },
    Case {
        number: 3,
        name: "distribution #1",
        audio: true,
        hog: false,
        spread: Spread::One,
        study_mbit: 13.4,
        study_network: "core1",
    },
    Case {
        number: 4,
        name: "distribution #2",
        audio: true,
        hog: false,
        spread: Spread::All,
        study_mbit: 13.0,
        study_network: "core1-3",
    },
    Case {
        number: 5,
        name: "only core0 with H.264",
        audio: true,
        hog: true,
        spread: Spread::Off,
        study_mbit: 2.21,
        study_network: "core0",
    },
    Case {
        number: 6,
        name: "distribution #3 with H.264",
        audio: true,
        hog: true,
        spread: Spread::One,
        study_mbit: 11.6,
        study_network: "core1",
    },
    Case {
        number: 7,
        name: "distribution #4 with H.264",
        audio: true,
        hog: true,
        spread: Spread::All,
        study_mbit: 11.5,
        study_network: "core1-3",
    },
];

pub fn case(number: u32) -> Option<&'static Case> {
    CASES.iter().find(|c| c.number == number)
}

/// The step variant naming a case: `case3`.
pub fn variant(number: u32) -> String {
    format!("case{number}")
}

pub fn case_of_variant(variant: &str) -> Option<&'static Case> {
    case(variant.strip_prefix("case")?.parse().ok()?)
}

/// `--cases 1,2,5`
pub fn parse_cases(list: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for w in list.split(',') {
        let n = w
            .trim()
            .parse()
            .ok()
            .filter(|n| case(*n).is_some())
            .ok_or_else(|| anyhow!("--cases: {w:?} is not a case of Table 1 (1 to 7)"))?;
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

// --- the configs ---

/// The `audio=MS,PERIOD_US,WORK_US[,HOG_PCT]` word of a cmdline, as its fields.
fn audio_fields(cmdline: &str) -> Option<Vec<&str>> {
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("audio="))
        .map(|a| a.split(',').collect())
}

/// The real-time VM's cmdline for `case`, from the template's: the `audio=` word kept whole
/// (cases 5–7; it must carry HOG_PCT), without HOG_PCT (2–4), or removed (1).
pub fn rt_cmdline(template: &str, case: &Case) -> Result<String> {
    let fields = audio_fields(template)
        .ok_or_else(|| anyhow!("VM {RT_VM}'s cmdline has no audio=MS,PERIOD_US,WORK_US,HOG_PCT"))?;
    if fields.len() != 4 {
        bail!(
            "VM {RT_VM}'s audio= word needs all four fields, MS,PERIOD_US,WORK_US,HOG_PCT (the \
             H.264 cases use HOG_PCT; the others drop it)"
        );
    }
    let words = template.split_whitespace().filter_map(|w| {
        if !w.starts_with("audio=") {
            return Some(w.to_owned());
        }
        match (case.audio, case.hog) {
            (false, _) => None,
            (true, false) => Some(format!("audio={}", fields[..3].join(","))),
            (true, true) => Some(w.to_owned()),
        }
    });
    Ok(words.collect::<Vec<_>>().join(" "))
}

/// Config text with `key = value` set in the top-level table `[name]` (added before the first
/// `[[vm]]` if there is none; a key it lacks is added under its header).
pub fn set_table_keys(text: &str, name: &str, keys: &[(&str, &str)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let header = format!("[{name}]");
    let start = match lines.iter().position(|l| l.trim().replace(' ', "") == header) {
        Some(i) => i,
        None => {
            let at = lines.iter().position(|l| l.trim().starts_with('[')).unwrap_or(lines.len());
            lines.splice(at..at, [header.clone(), String::new()]);
            at
        }
    };
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.trim().starts_with('['))
        .map_or(lines.len(), |i| start + 1 + i);
    for (key, value) in keys {
        let line = format!("{key} = {value}");
        let found = (start + 1..end).find(|&i| {
            let t = lines[i].trim_start();
            t.strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('='))
        });
        match found {
            Some(i) => lines[i] = line,
            None => lines.insert(start + 1, line),
        }
    }
    lines.join("\n") + "\n"
}

/// The config of `case` from the template's text (paths already absolute).
pub fn case_config(template: &str, case: &Case) -> Result<String> {
    let rt = crate::cmdline_of(template, RT_VM)?.unwrap_or_default();
    let rt = rt_cmdline(&rt, case)?;
    let text = crate::edit_cmdline(template, RT_VM, |_| rt.clone())?;
    let (enabled, spread) = match case.spread {
        Spread::Off => ("false", "\"one\""),
        Spread::One => ("true", "\"one\""),
        Spread::All => ("true", "\"all\""),
    };
    Ok(set_table_keys(&text, "irqdist", &[("enabled", enabled), ("spread", spread)]))
}

/// The length of the network test, from the `--seconds,N` of the VM's `armhv.run=` (5 by
/// default, as armhv-bench's).
pub fn net_seconds(cmdline: &str) -> u64 {
    let run = cmdline.split_whitespace().find_map(|w| w.strip_prefix("armhv.run=")).unwrap_or("");
    let words: Vec<&str> = run.split(',').collect();
    words.windows(2).find(|w| w[0] == "--seconds").and_then(|w| w[1].parse().ok()).unwrap_or(5)
}

// --- what a run reports ---

/// The audio guest's last summary line (`testguest: audio <ms> ms: ...`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Audio {
    pub ms: u64,
    pub interrupts: u64,
    pub work_ms: u64,
    pub loops: u64,
    pub latency_max_us: u64,
    pub latency_mean_us: u64,
}

impl Audio {
    /// Interrupts per 10 ms tick.
    pub fn per_tick(&self) -> f64 {
        if self.ms == 0 { 0.0 } else { self.interrupts as f64 * 10.0 / self.ms as f64 }
    }

    /// `<ms> ms: <n> interrupts (<r> per 10 ms), work <ms> ms in <loops> loops, latency max
    /// <us> us mean <us> us`
    fn parse(rest: &str) -> Option<Self> {
        let nums: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .filter(|w| !w.is_empty() && !w.contains('.'))
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?;
        // ms, n, [rate has a dot: skipped], work, loops, max, mean (the `10` of "per 10 ms").
        match nums[..] {
            [ms, interrupts, 10, work_ms, loops, latency_max_us, latency_mean_us] => {
                Some(Self { ms, interrupts, work_ms, loops, latency_max_us, latency_mean_us })
            }
            _ => None,
        }
    }
}

/// The last audio summary `vm` printed.
pub fn last_audio(console: &str, vm: &str) -> Option<Audio> {
    console.lines().rev().find_map(|line| {
        let (tag, body) = split_vm_tag(line.trim_end());
        if tag != vm {
            return None;
        }
        let rest = body.strip_prefix("testguest: audio ")?;
        rest.contains(" interrupts (").then(|| Audio::parse(rest)).flatten()
    })
}

/// When to dump the trace, in seconds after iperf3 started, for a transfer of `seconds`
/// measured seconds after the omitted one: every [`DUMP_EVERY_SECS`] from [`FIRST_DUMP_SECS`],
/// and at the end.
pub fn dump_offsets(seconds: u64) -> Vec<f64> {
    let end = OMITTED_SECS + seconds as f64;
    let mut out = Vec::new();
    let mut d = FIRST_DUMP_SECS.min(end);
    while d < end {
        out.push(d);
        d += DUMP_EVERY_SECS;
    }
    out.push(end);
    out
}

/// The measured seconds' trace from the dumps taken `offsets` seconds after iperf3 started:
/// merged, from the tick at which the omitted second ended to the one at which the transfer
/// did (placed by the first and the last dump). All of it if the dumps cannot be placed.
pub fn measured(dumps: &[Trace], offsets: &[f64], seconds: u64) -> Option<Trace> {
    let (first, last) = (dumps.first()?, dumps.last()?);
    let merged = Trace::merge(dumps);
    if dumps.len() != offsets.len() {
        return Some(merged);
    }
    let tick_s = f64::from(first.tick_ms.max(1)) / 1000.0;
    let ticks = |secs: f64| (secs.max(0.0) / tick_s).round() as u64;
    let from = first.last_tick()?.saturating_sub(ticks(offsets[0] - OMITTED_SECS));
    let end = OMITTED_SECS + seconds as f64;
    let to = last.last_tick()?.saturating_sub(ticks(offsets[offsets.len() - 1] - end));
    Some(merged.range(from + 1, to))
}

/// One case's run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseRun {
    pub case: u32,
    /// The generated config, relative to the repository.
    pub config: String,
    /// The real-time VM's cmdline in this case.
    pub rt_cmdline: String,
    /// iperf3's receiver throughput in the general-purpose VM.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mbit_s: Option<f64>,
    /// iperf3 failures, as armhv-bench reported them.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub errors: Vec<String>,
    /// The measured seconds' trace ([`measured`]).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub trace: Option<Trace>,
    /// When the trace was dumped, in seconds after iperf3 started.
    pub dumps: Vec<f64>,
    /// The profiler's view at each dump.
    pub windows: Vec<Window>,
    pub events: Vec<Event>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub audio: Option<Audio>,
    /// The host's one-minute load average before and after the run: other work on the host
    /// slows QEMU's CPUs down, and here their timing is the experiment.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host_load: Option<(f64, f64)>,
    /// Why the case did not complete (a wait that timed out, no result), if it did not.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub failure: Option<String>,
}

impl CaseRun {
    /// Everything but the run itself from a finished console, whose trace dumps were taken
    /// `dumps` seconds after iperf3 started a transfer of `seconds` measured seconds.
    pub fn from_console(
        case: &Case,
        config: String,
        rt_cmdline: String,
        console: &str,
        dumps: &[f64],
        seconds: u64,
    ) -> Result<Self> {
        let out = Output::parse(console, Some(GP_VM))?;
        let mbit_s = out.values("iperf3").last().copied();
        let errors = out.failures.iter().map(|f| f.message.clone()).collect();
        Ok(Self {
            case: case.number,
            config,
            rt_cmdline,
            mbit_s,
            errors,
            trace: measured(&irqtrace::traces(console)?, dumps, seconds),
            dumps: dumps.to_vec(),
            windows: irqtrace::windows(console)?,
            events: irqtrace::events(console)?,
            audio: last_audio(console, RT_VM),
            host_load: None,
            failure: None,
        })
    }

    /// In how many of the profiler's windows `source` was periodic, of how many.
    pub fn periodic(&self, source: &str) -> (usize, usize) {
        let n = self.windows.iter().filter(|w| w.source(source).is_some_and(|s| s.periodic));
        (n.count(), self.windows.len())
    }

    /// Mean interrupts per tick of `source` on each CPU, over the whole trace.
    pub fn per_tick(&self, source: &str) -> BTreeMap<usize, f64> {
        self.trace.as_ref().map(|t| t.per_tick(source)).unwrap_or_default()
    }
}

/// The cores carrying a stream: `core0`, `core1-2`, `core0+2`, or `none`. A core counts when it
/// has at least a tenth of the stream's interrupts.
pub fn cores(per_tick: &BTreeMap<usize, f64>) -> String {
    let total: f64 = per_tick.values().sum();
    let cpus: Vec<usize> = per_tick
        .iter()
        .filter(|(_, v)| total > 0.0 && **v >= CORE_SHARE * total)
        .map(|(c, _)| *c)
        .collect();
    match cpus[..] {
        [] => "none".to_owned(),
        [one] => format!("core{one}"),
        _ if cpus.windows(2).all(|w| w[1] == w[0] + 1) => {
            format!("core{}-{}", cpus[0], cpus[cpus.len() - 1])
        }
        _ => format!("core{}", cpus.iter().map(usize::to_string).collect::<Vec<_>>().join("+")),
    }
}

/// `0: 3.3, 1: 0.4` (mean interrupts per tick per core), or `-`.
pub fn per_core(per_tick: &BTreeMap<usize, f64>) -> String {
    if per_tick.is_empty() {
        return "-".to_owned();
    }
    per_tick.iter().map(|(c, v)| format!("{c}: {v:.1}")).collect::<Vec<_>>().join(", ")
}

/// A row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub case: &'static Case,
    pub audio_cores: String,
    pub network_cores: String,
    pub mbit_s: Option<f64>,
    /// Relative to case 1's bandwidth, when both were measured.
    pub relative: Option<f64>,
    /// Audio (on the audio core) and network interrupts per tick per core.
    pub audio_per_tick: BTreeMap<usize, f64>,
    pub net_per_tick: BTreeMap<usize, f64>,
    /// The real-time VM's timer on the other cores: the CPU-heavy job's own wake-ups.
    pub hog_per_tick: BTreeMap<usize, f64>,
    pub redirects: usize,
    /// In how many profiler windows (one per dump) each stream was periodic, of how many.
    pub audio_periodic: (usize, usize),
    pub net_periodic: (usize, usize),
    /// The audio core's utilization over those windows: least and most, percent.
    pub audio_cpu_busy: Option<(u32, u32)>,
    pub failure: Option<String>,
}

impl Row {
    /// The bandwidth cell: Mb/s, or why there is none.
    pub fn bandwidth(&self) -> String {
        match (self.mbit_s, &self.failure) {
            (Some(m), _) => format!("{m:.1}"),
            (None, Some(_)) => "failed".to_owned(),
            (None, None) => "-".to_owned(),
        }
    }
}

/// The rows for the distributor runs among `runs`, in case order.
pub fn rows(runs: &[Run]) -> Vec<Row> {
    let mut found: Vec<&CaseRun> = runs
        .iter()
        .filter(|r| r.kind == Kind::Distributor)
        .filter_map(|r| r.distributor.as_ref())
        .collect();
    found.sort_by_key(|c| c.case);
    let base = found.iter().find(|c| c.case == 1).and_then(|c| c.mbit_s);
    found
        .into_iter()
        .filter_map(|c| {
            let case = case(c.case)?;
            let timer = c.per_tick(AUDIO_SOURCE);
            let audio: BTreeMap<usize, f64> =
                timer.iter().filter(|(cpu, _)| **cpu == AUDIO_CPU).map(|(k, v)| (*k, *v)).collect();
            let hog = timer.into_iter().filter(|(cpu, _)| *cpu != AUDIO_CPU).collect();
            let net = c.per_tick(NET_SOURCE);
            Some(Row {
                case,
                audio_cores: if case.audio { cores(&audio) } else { "no audio".to_owned() },
                network_cores: cores(&net),
                mbit_s: c.mbit_s,
                relative: c.mbit_s.zip(base).filter(|(_, b)| *b > 0.0).map(|(m, b)| m / b),
                audio_per_tick: audio,
                net_per_tick: net,
                hog_per_tick: hog,
                redirects: c.events.iter().filter(|e| matches!(e, Event::Redirect { .. })).count(),
                audio_periodic: c.periodic(AUDIO_SOURCE),
                net_periodic: c.periodic(NET_SOURCE),
                audio_cpu_busy: {
                    let busy = c.windows.iter().filter_map(|w| w.busy.get(AUDIO_CPU).copied());
                    busy.clone().min().zip(busy.max())
                },
                failure: c.failure.clone(),
            })
        })
        .collect()
}

/// The table, for the terminal.
pub fn terminal(runs: &[Run]) -> String {
    let rows = rows(runs);
    if rows.is_empty() {
        return String::new();
    }
    let mut lines = vec![[
        "Case".to_owned(),
        "Audio".to_owned(),
        "Network".to_owned(),
        "Mb/s".to_owned(),
        "vs 1".to_owned(),
        "study".to_owned(),
        "audio/tick".to_owned(),
        "network/tick by core".to_owned(),
        "periodic a/n".to_owned(),
        "moves".to_owned(),
    ]];
    let base = CASES[0].study_mbit;
    for r in &rows {
        lines.push([
            format!("{} {}", r.case.number, r.case.name),
            r.audio_cores.clone(),
            r.network_cores.clone(),
            r.bandwidth(),
            r.relative.map_or("-".to_owned(), |v| format!("{v:.2}")),
            format!("{} ({:.2})", r.case.study_mbit, r.case.study_mbit / base),
            per_core(&r.audio_per_tick),
            per_core(&r.net_per_tick),
            format!(
                "{}/{} {}/{}",
                r.audio_periodic.0, r.audio_periodic.1, r.net_periodic.0, r.net_periodic.1
            ),
            r.redirects.to_string(),
        ]);
    }
    let width: Vec<usize> =
        (0..10).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::from(
        "\nInterrupt distributor (the multicore CE study's Table 1): iperf3 into VM gp; \
         interrupts per 10 ms tick by core over the measured seconds; in how many profiler \
         windows the audio and network streams were periodic; the distributor's moves (study: \
         Mb/s, relative to case 1):\n",
    );
    for l in &lines {
        let mut s = String::from(" ");
        for (i, cell) in l.iter().enumerate() {
            let right = matches!(i, 3 | 4 | 9);
            if right {
                s.push_str(&format!(" {:>w$}", cell, w = width[i]));
            } else {
                s.push_str(&format!(" {:<w$}", cell, w = width[i]));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    }
    out
}

/// The report's section: the table, each case's details, the figures and the method.
pub fn markdown(md: &mut String, r: &Results, charts: &Charts) {
    use std::fmt::Write;
    let rows = rows(&r.runs);
    if rows.is_empty() {
        return;
    }
    let config = r.meta.distributor_config.as_deref().unwrap_or("configs/bench/distributor.toml");
    let _ = writeln!(md, "## Interrupt distributor (the multicore CE study's Table 1)\n");
    let _ = writeln!(
        md,
        "The study's experiment on QEMU `virt` with 4 CPUs (`{config}`): VM `{RT_VM}` \
         (real-time class) takes \"audio\" interrupts on core {AUDIO_CPU}, its virtual timer \
         every few ms, each handler busy-waiting a fixed time (testguest's `audio=` step); in \
         cases 5–7 its vCPUs on the other cores also spin part of every 10 ms (the study's \
         H.264 decoder). VM `{GP_VM}` (Debian's kernel; vCPU 0 on core 0 beside the audio, \
         vCPUs 1 and 2 on cores 1 and 2) receives an iperf3 stream from VM `{PEER_VM}` (core 3) \
         over armhv's virtual switch; its virtio-net interrupts (`{NET_SOURCE}`) are the \
         network stream. The distributor is off in cases 1, 2 and 5, moves the stream to one \
         other core in 3 and 6 and spreads it over all of `{GP_VM}`'s other cores in 4 and 7. \
         **Audio** and **Network** name the cores that received at least a tenth of each \
         stream in armhv's trace of the measured seconds (Ctrl-A t dumped every 2.5 s of the \
         transfer and merged); the per-tick figures are means over its 10 ms ticks. \
         **Periodic** counts the profiler's 100 ms windows, one per dump, in which the audio \
         and the network stream were classified periodic: the policy moves a stream only off a \
         saturated core carrying two periodic ones. Bandwidth is iperf3's receiver figure, on \
         the host's clock without icount (noisy; QEMU's TCG sets the scale, so compare the \
         ratios to case 1, not the Mb/s, with the study's ARM11 MPCore).\n"
    );
    let _ = writeln!(
        md,
        "| Case | Audio | Network | Bandwidth (Mb/s) | vs case 1 | Study: network, Mb/s (vs 1) \
         | Audio irq/tick | Network irq/tick by core | Periodic: audio, network | Core 0 busy \
         | Redirects |"
    );
    let _ = writeln!(md, "|---|---|---|---:|---:|---|---|---|---|---|---:|");
    let base = CASES[0].study_mbit;
    for row in &rows {
        let c = row.case;
        let _ = writeln!(
            md,
            "| {} {} | {} | {} | {} | {} | {}, {} ({:.2}) | {} | {} | {}/{}, {}/{} | {} | {} |",
            c.number,
            c.name,
            row.audio_cores,
            row.network_cores,
            match row.mbit_s {
                Some(m) => format!("**{m:.1}**"),
                None => row.bandwidth(),
            },
            row.relative.map_or("–".to_owned(), |v| format!("{v:.2}")),
            c.study_network,
            c.study_mbit,
            c.study_mbit / base,
            per_core(&row.audio_per_tick),
            per_core(&row.net_per_tick),
            row.audio_periodic.0,
            row.audio_periodic.1,
            row.net_periodic.0,
            row.net_periodic.1,
            row.audio_cpu_busy.map_or("–".to_owned(), |(a, b)| if a == b {
                format!("{a} %")
            } else {
                format!("{a}–{b} %")
            }),
            row.redirects
        );
    }
    md.push('\n');
    let _ = writeln!(md, "Per case:\n");
    let mut cases: Vec<(&Run, &CaseRun)> =
        r.runs.iter().filter_map(|run| Some((run, run.distributor.as_ref()?))).collect();
    cases.sort_by_key(|(_, d)| d.case);
    for (run, d) in cases {
        let mut notes = vec![match d.rt_cmdline.trim() {
            "" => format!("`{RT_VM}` idle"),
            cmdline => format!("`{RT_VM}`: `{cmdline}`"),
        }];
        if let Some(a) = &d.audio {
            notes.push(format!(
                "the audio guest counted {} interrupts in {} ms ({:.1} per tick), latency \
                 mean {} µs, max {} µs",
                a.interrupts,
                a.ms,
                a.per_tick(),
                a.latency_mean_us,
                a.latency_max_us
            ));
        }
        if let Some(t) = &d.trace {
            notes.push(format!(
                "{} ticks traced in {} dumps (at {} s of the transfer)",
                t.ticks.len(),
                d.dumps.len(),
                d.dumps.iter().map(|o| format!("{o:.1}")).collect::<Vec<_>>().join(", ")
            ));
            let hog = t.per_tick(AUDIO_SOURCE);
            let hog: BTreeMap<usize, f64> =
                hog.into_iter().filter(|(cpu, _)| *cpu != AUDIO_CPU).collect();
            if !hog.is_empty() {
                notes.push(format!(
                    "{AUDIO_SOURCE} on other cores (the CPU-heavy job's wake-ups): {}",
                    per_core(&hog)
                ));
            }
        }
        let stream = |name: &str| {
            let events: Vec<String> = d
                .windows
                .iter()
                .map(|w| {
                    w.source(name).map_or("0".to_owned(), |s| {
                        format!("{}{}", s.events, if s.periodic { " P" } else { "" })
                    })
                })
                .collect();
            format!("{name} {}", events.join(" "))
        };
        if let Some(t) = &d.trace {
            let steady = |name: &str| match t.steadiness(name) {
                Some((present, cv)) => format!(
                    "{name} in {:.0} % of the ticks, per-tick count varying by {:.0} % (CV)",
                    present * 100.0,
                    cv * 100.0
                ),
                None => format!("no {name}"),
            };
            notes.push(format!("{}; {}", steady(AUDIO_SOURCE), steady(NET_SOURCE)));
        }
        if !d.windows.is_empty() {
            notes.push(format!(
                "profiler windows (interrupts per 100 ms, P = periodic): {}; {}",
                stream(AUDIO_SOURCE),
                stream(NET_SOURCE)
            ));
        }
        if let Some((before, after)) = d.host_load {
            notes.push(format!("host load average {before:.2} -> {after:.2}"));
        }
        match d.events.len() {
            0 => notes.push("no redirect".to_owned()),
            n => {
                let shown: Vec<String> = d.events.iter().take(4).map(Event::describe).collect();
                let more = if n > 4 { format!(" and {} more", n - 4) } else { String::new() };
                notes.push(format!("{}{more}", shown.join("; ")));
            }
        }
        for e in &d.errors {
            notes.push(format!("iperf3 error: {e}"));
        }
        if let Some(why) = &d.failure {
            notes.insert(0, format!("**failed: {why}**"));
        }
        let _ = writeln!(md, "- **Case {}** ({:.0} s): {}.", d.case, run.seconds, notes.join("; "));
    }
    md.push('\n');
    for (title, file) in [
        ("Bandwidth relative to case 1", &charts.distributor_bandwidth),
        ("Interrupts per tick", &charts.distributor_ticks),
    ] {
        if let Some(f) = file {
            let _ = writeln!(md, "![{title}]({f})\n");
        }
    }
}

// --- running a case ---

/// The machine of the experiment: the study's four cores.
pub fn machine(opts: &Options) -> MachineSpec {
    MachineSpec { cpu: opts.machine.cpu.clone(), smp: 4, mem_mib: 2048, ..MachineSpec::default() }
}

/// Writes `case`'s config into build/table1 from the template; returns its path and the
/// real-time VM's cmdline there.
pub fn write_config(template: &Path, case: &Case) -> Result<(PathBuf, String)> {
    let text = std::fs::read_to_string(template)
        .with_context(|| format!("reading {}", template.display()))?;
    let dir = template.parent().unwrap_or(Path::new("."));
    let dir = if dir.is_absolute() { dir.to_owned() } else { std::env::current_dir()?.join(dir) };
    let text = case_config(&workloads::absolute_paths(&text, &dir), case)
        .with_context(|| format!("{}: case {}", rel(template), case.number))?;
    let out = xtask::build_dir().join("table1").join(format!("case{}.toml", case.number));
    std::fs::create_dir_all(out.parent().unwrap())?;
    std::fs::write(&out, &text)?;
    let rt = crate::cmdline_of(&text, RT_VM)?.unwrap_or_default();
    Ok((out, rt))
}

/// Runs one case (`step.variant` = `caseN`) and returns its record; the console goes to `log`.
pub fn run(step: &Step, opts: &Options, log: &Path, tag: &str) -> Result<Run> {
    let case = case_of_variant(&step.variant)
        .ok_or_else(|| anyhow!("{} is not a case of Table 1", step.variant))?;
    let (config, rt_cmdline) = write_config(&opts.distributor_config, case)?;
    let machine = machine(opts);
    let cfg = vmconfig::load(&config, &machine.as_config_machine()).map_err(|e| anyhow!("{e}"))?;
    let gp = cfg
        .vms
        .iter()
        .find(|v| v.name == GP_VM)
        .ok_or_else(|| anyhow!("{}: no VM named {GP_VM:?}", rel(&opts.distributor_config)))?;
    for r in [Some(&gp.kernel), gp.initrd.as_ref()].into_iter().flatten() {
        if let vmconfig::ImageRef::Path(p) = r
            && !p.exists()
        {
            bail!("{} is missing: run {}", rel(p), workloads::ASSETS_HINT);
        }
    }
    let seconds = net_seconds(&gp.cmdline);
    let img = image::build(&config, &machine)?;
    let qemu_command = qemu::command_line(&qemu::command(&img, &machine));
    let load_before = workloads::host_load();
    let start = Instant::now();
    let mut q = qemu::Run::start(&img, &machine)?;
    eprintln!("{tag}: booting ({})", rel(&config));
    let mut dumps = Vec::new();
    let waited = drive(&mut q, opts, seconds, tag, &mut dumps);
    let seconds_run = start.elapsed().as_secs_f64();
    let console = q.output();
    drop(q); // stops QEMU if it is still running
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    let tail = || crate::console_tail(&console, log);
    let mut run = CaseRun::from_console(case, rel(&config), rt_cmdline, &console, &dumps, seconds)
        .with_context(tail)?;
    run.host_load = load_before.zip(workloads::host_load());
    // A case that goes wrong is recorded as such, with what it measured, and the others go on:
    // how the guests behave under this load is part of the experiment.
    run.failure = match waited {
        Err(e) => Some(crate::run_error(&e)),
        Ok(()) if run.mbit_s.is_none() => Some(format!("no iperf3 result from VM {GP_VM}")),
        Ok(()) if run.trace.is_none() => Some("no irqdist trace after Ctrl-A t".to_owned()),
        Ok(()) => None,
    };
    if let Some(why) = &run.failure {
        eprintln!("{tag}: FAILED: {why}\n{}", tail());
    }
    Ok(Run {
        kind: Kind::Distributor,
        variant: step.variant.clone(),
        features: Vec::new(),
        mode: step.mode,
        seconds: seconds_run,
        figures: Vec::new(),
        skips: Vec::new(),
        overhead: None,
        console: Default::default(),
        qemu_command,
        workloads: None,
        distributor: Some(run),
    })
}

/// The console side of a case: wait for the transfer, dump the trace at [`dump_offsets`]
/// (recorded in `dumps`, in seconds after iperf3 started), wait for the result, stop everything.
fn drive(
    q: &mut qemu::Run,
    opts: &Options,
    seconds: u64,
    tag: &str,
    dumps: &mut Vec<f64>,
) -> Result<()> {
    let started = format!("[{GP_VM}] armhv-bench: workload iperf3:");
    q.expect(&started, opts.timeout).context("waiting for iperf3 to start")?;
    let t0 = Instant::now();
    let offsets = dump_offsets(seconds);
    eprintln!(
        "{tag}: iperf3 running ({:.0} s); trace dumps at {} s",
        OMITTED_SECS + seconds as f64,
        offsets.iter().map(|o| format!("{o:.1}")).collect::<Vec<_>>().join(", ")
    );
    for at in offsets {
        std::thread::sleep(
            (t0 + Duration::from_secs_f64(at)).saturating_duration_since(Instant::now()),
        );
        let mark = q.mark();
        dumps.push(t0.elapsed().as_secs_f64());
        q.send("\x01t")?;
        q.expect_since(mark, "irqdist: trace end", DUMP_TIMEOUT)
            .context("waiting for the trace (Ctrl-A t)")?;
    }
    eprintln!("{tag}: {} dumps taken; waiting for iperf3's result", dumps.len());
    let done = format!("[{GP_VM}] {}", workloads::DONE);
    if let Err(e) = q.expect(&done, RESULT_TIMEOUT) {
        // The VMs' statistics at the stall (Ctrl-A s: each virtio device's line, interrupt
        // state and queue indices) go into the console log for the diagnosis.
        let mark = q.mark();
        q.send("\x01s")?;
        let _ = q.expect_since(mark, &format!("({PEER_VM}, "), DUMP_TIMEOUT);
        std::thread::sleep(Duration::from_secs(1));
        return Err(e).context("waiting for iperf3's result (Ctrl-A s in the console log)");
    }
    let mark = q.mark();
    q.send("\x01q")?;
    q.expect_since(mark, "all VMs have stopped", STOP_TIMEOUT)
        .context("stopping the VMs (Ctrl-A q)")?;
    q.wait_exit(STOP_TIMEOUT).map(|_| ())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const TEMPLATE: &str = "\
# comment
[scheduler]
quantum_ms = 10

[irqdist]
enabled = true
spread = \"one\"

[[vm]]
name = \"rt\"
vcpus = 3
cmdline = \"audio=0,3000,1500,40 off\"

[[vm]]
name = \"gp\"
cmdline = \"console=ttyAMA0 armhv.run=armhv-bench,--peer,10.0.0.2,--seconds,12,--reverse,iperf3\"
";

    #[test]
    fn cases_and_options() {
        assert_eq!(CASES.len(), 7);
        assert!(CASES.iter().enumerate().all(|(i, c)| c.number == i as u32 + 1));
        assert_eq!(parse_cases("3,1,3").unwrap(), [1, 3]);
        assert!(parse_cases("8").is_err());
        assert!(parse_cases("x").is_err());
        assert_eq!(case_of_variant(&variant(5)).unwrap().number, 5);
        assert!(case_of_variant("case9").is_none());
    }

    #[test]
    fn the_audio_word_per_case() {
        let t = "audio=0,3000,1500,40 off";
        assert_eq!(rt_cmdline(t, &CASES[0]).unwrap(), "off");
        assert_eq!(rt_cmdline(t, &CASES[1]).unwrap(), "audio=0,3000,1500 off");
        assert_eq!(rt_cmdline(t, &CASES[6]).unwrap(), "audio=0,3000,1500,40 off");
        assert!(rt_cmdline("audio=0,3000,1500", &CASES[1]).is_err(), "no HOG_PCT");
        assert!(rt_cmdline("hello", &CASES[1]).is_err());
    }

    #[test]
    fn table_keys() {
        let t = set_table_keys(TEMPLATE, "irqdist", &[("enabled", "false"), ("spread", "\"all\"")]);
        assert!(t.contains("[irqdist]\nenabled = false\nspread = \"all\"\n"), "{t}");
        assert!(t.contains("quantum_ms = 10"));
        // A table or key the text lacks is added.
        let bare = "[[vm]]\nname = \"x\"\n";
        let t = set_table_keys(bare, "irqdist", &[("enabled", "true")]);
        assert_eq!(t, "[irqdist]\nenabled = true\n\n[[vm]]\nname = \"x\"\n");
        let t = set_table_keys("[irqdist]\nenabled = true\n", "irqdist", &[("spread", "\"one\"")]);
        assert_eq!(t, "[irqdist]\nspread = \"one\"\nenabled = true\n");
    }

    #[test]
    fn case_configs() {
        let c2 = case_config(TEMPLATE, &CASES[1]).unwrap();
        assert!(c2.contains("cmdline = \"audio=0,3000,1500 off\""), "{c2}");
        assert!(c2.contains("enabled = false"));
        let c7 = case_config(TEMPLATE, &CASES[6]).unwrap();
        assert!(c7.contains("cmdline = \"audio=0,3000,1500,40 off\""));
        assert!(c7.contains("enabled = true\nspread = \"all\""), "{c7}");
        // The general-purpose VM is untouched.
        assert!(c7.contains("--seconds,12,--reverse,iperf3"));
        assert_eq!(net_seconds("x armhv.run=armhv-bench,--seconds,12,iperf3"), 12);
        assert_eq!(net_seconds("x armhv.run=armhv-bench,iperf3"), 5);
    }

    #[test]
    fn the_template_validates_for_every_case() {
        let stand_in = crate::tests::StandInImages::new("configs/bench/distributor.toml");
        let (text, dir) = (stand_in.text(), stand_in.config_dir());
        let m = MachineSpec { smp: 4, ..MachineSpec::default() };
        for case in &CASES {
            let text = case_config(&workloads::absolute_paths(&text, &dir), case).unwrap();
            let path = std::env::temp_dir().join(format!("armhv-table1-case{}.toml", case.number));
            std::fs::write(&path, &text).unwrap();
            let cfg = vmconfig::load(&path, &m.as_config_machine())
                .unwrap_or_else(|e| panic!("case {}: {e}", case.number));
            let names: Vec<&str> = cfg.vms.iter().map(|v| v.name.as_str()).collect();
            assert_eq!(names, [RT_VM, GP_VM, PEER_VM]);
            let _ = std::fs::remove_file(&path);
        }
    }

    #[test]
    fn audio_summaries() {
        let console = "\
[rt] testguest: audio period 3000 us work 1500 us until stopped, hog 0 % on 0 cpus
[rt] testguest: audio 5000 ms: 1666 interrupts (3.3 per 10 ms), work 2510 ms in 4000 loops, latency max 8206 us mean 1043 us
[gp] testguest: audio 1 ms: 1 interrupts (1.0 per 10 ms), work 1 ms in 1 loops, latency max 1 us mean 1 us
[rt] testguest: audio 10001 ms: 3333 interrupts (3.3 per 10 ms), work 5020 ms in 8000 loops, latency max 9000 us mean 1100 us
[rt] testguest: audio done
";
        let a = last_audio(console, RT_VM).unwrap();
        assert_eq!(
            a,
            Audio {
                ms: 10001,
                interrupts: 3333,
                work_ms: 5020,
                loops: 8000,
                latency_max_us: 9000,
                latency_mean_us: 1100
            }
        );
        assert!((a.per_tick() - 3.333).abs() < 0.01);
        assert_eq!(last_audio("[rt] testguest: done\n", RT_VM), None);
    }

    #[test]
    fn core_names() {
        let m = |v: &[(usize, f64)]| v.iter().copied().collect::<BTreeMap<_, _>>();
        assert_eq!(cores(&m(&[])), "none");
        assert_eq!(cores(&m(&[(0, 0.0)])), "none");
        assert_eq!(cores(&m(&[(0, 3.3)])), "core0");
        assert_eq!(cores(&m(&[(0, 0.05), (1, 1.0)])), "core1", "a twentieth does not count");
        assert_eq!(cores(&m(&[(1, 0.5), (2, 0.5)])), "core1-2");
        assert_eq!(cores(&m(&[(0, 0.5), (2, 0.5)])), "core0+2");
        assert_eq!(per_core(&m(&[(0, 0.26), (1, 1.0)])), "0: 0.3, 1: 1.0");
        assert_eq!(per_core(&m(&[])), "-");
    }

    /// A case's console as armhv and the guests print it.
    pub(crate) fn console(case: u32, mbit: f64, net_cpu: usize) -> String {
        let redirect = if net_cpu != 0 {
            format!(
                "[   6.000000 armhv INFO  cpu0] irqdist: gp/net0 redirected from CPU 0 to vCPU \
                 {net_cpu} on CPU {net_cpu}\n"
            )
        } else {
            String::new()
        };
        let audio = if case == 1 { 0 } else { 3 };
        let mut ticks = String::new();
        // Ticks 0..300 end 3 s after the start: 0..100 are the omitted second.
        for k in 0..300 {
            ticks.push_str(&format!(
                "[  12.000000 armhv INFO  cpu1] irqdist: tick {k} {} {}\n",
                audio + k % 2,
                1 + k % 3
            ));
        }
        format!(
            "[   0.9 armhv INFO  cpu0] rt: 3 vCPU(s) on CPU(s) [0, 1, 2]\n\
             [rt] testguest: audio 5000 ms: 1666 interrupts (3.3 per 10 ms), work 2510 ms in \
             4000 loops, latency max 8206 us mean 1043 us\n\
             {redirect}\
             [gp] armhv-bench: workload iperf3: iperf3 -c 10.0.0.2 -R\n\
             [  12.000000 armhv INFO  cpu1] irqdist: last window: cpu0 96% busy cpu1 3% busy cpu2 \
             0% busy cpu3 50% busy, rt/timer Periodic 33, gp/net0 Sporadic 20\n\
             [  12.000000 armhv INFO  cpu1] irqdist: trace 300 ticks of 10 ms, oldest first: \
             rt/timer@cpu0 gp/net0@cpu{net_cpu}\n\
             {ticks}\
             [  12.100000 armhv INFO  cpu1] irqdist: trace end\n\
             [gp] armhv-bench: result iperf3 rep=1 mbit_s={mbit}\n\
             [gp] armhv-bench: done\n"
        )
    }

    pub(crate) fn case_run(case: u32, mbit: f64, net_cpu: usize) -> Run {
        let c = self::case(case).unwrap();
        let console = console(case, mbit, net_cpu);
        // One dump, 3 s after iperf3 started a transfer of 10 s: its ticks from 1 s on.
        let d = CaseRun::from_console(
            c,
            "build/table1/x.toml".into(),
            String::new(),
            &console,
            &[3.0],
            10,
        )
        .unwrap();
        Run {
            kind: Kind::Distributor,
            variant: variant(case),
            features: Vec::new(),
            mode: crate::convert::Mode::WallClock,
            seconds: 60.0,
            figures: Vec::new(),
            skips: Vec::new(),
            overhead: None,
            console: Default::default(),
            qemu_command: String::new(),
            workloads: None,
            distributor: Some(d),
        }
    }

    #[test]
    fn dumps_cover_the_measured_seconds() {
        assert_eq!(dump_offsets(10), [3.0, 5.5, 8.0, 10.5, 11.0]);
        assert_eq!(dump_offsets(1), [2.0]);
        let dump = |last: u64| Trace {
            tick_ms: 10,
            columns: vec![irqtrace::Column { source: "a".into(), cpu: 0 }],
            ticks: (last - 299..=last).map(|k| (k, vec![1])).collect(),
            at_secs: 0.0,
        };
        // Dumps 3 s and 11.5 s after the start of 1 + 10 s: ticks 1 s .. 11 s after it.
        let t = measured(&[dump(1300), dump(2150)], &[3.0, 11.5], 10).unwrap();
        assert_eq!(t.ticks.first().unwrap().0, 1101);
        assert_eq!(t.ticks.last().unwrap().0, 2100);
        // The gap between the dumps has no ticks.
        assert_eq!(t.ticks.len(), 200 + 250);
        // Offsets that do not match the dumps: all of them.
        assert_eq!(measured(&[dump(1300)], &[], 10).unwrap().ticks.len(), 300);
        assert!(measured(&[], &[], 10).is_none());
    }

    #[test]
    fn rows_from_consoles() {
        let runs = [case_run(2, 20.0, 0), case_run(1, 100.0, 0), case_run(3, 80.0, 1)];
        let rows = rows(&runs);
        assert_eq!(rows.iter().map(|r| r.case.number).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(rows[0].audio_cores, "no audio");
        assert_eq!(rows[1].audio_cores, "core0");
        assert_eq!(rows[1].network_cores, "core0");
        assert_eq!(rows[2].network_cores, "core1");
        assert_eq!(rows[2].redirects, 1);
        assert_eq!(rows[1].relative, Some(0.2));
        // Ticks 100..300: audio 3 or 4 in turn, network 1, 2, 3 in turn.
        assert!((rows[1].audio_per_tick[&0] - 3.5).abs() < 1e-9);
        assert!((rows[2].net_per_tick[&1] - 2.0).abs() < 0.01, "{:?}", rows[2].net_per_tick);
        assert_eq!((rows[1].audio_periodic, rows[1].net_periodic), ((1, 1), (0, 1)));
        assert_eq!(rows[1].audio_cpu_busy, Some((96, 96)));
        let t = terminal(&runs);
        assert!(t.contains("2 only core0"), "{t}");
        assert!(t.contains("0.20"), "{t}");
        assert!(t.contains("2.3 (0.15)"), "{t}");
        assert!(t.contains("1/1 0/1"), "{t}");
        // A case that did not complete keeps what it measured and says so.
        let mut failed = case_run(5, 1.0, 0);
        let d = failed.distributor.as_mut().unwrap();
        d.mbit_s = None;
        d.failure = Some("waiting for iperf3's result: timed out".into());
        let rows = super::rows(&[failed]);
        assert_eq!(rows[0].bandwidth(), "failed");
        assert_eq!(rows[0].network_cores, "core0");
    }
}
