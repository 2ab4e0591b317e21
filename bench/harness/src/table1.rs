//! The distributor experiment's table: one row per case, for the terminal and the report.

use crate::catalog::{AUDIO_CPU, AUDIO_SOURCE, CASES, Case, GP_VM, NET_SOURCE, PEER_VM, RT_VM};
use crate::irqtrace::Event;
use crate::model::{CaseRun, Kind, Results, Run, Stats};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Where `bench/README.md` describes the experiment, from the report in `bench/results/`.
pub const METHOD: &str = "../README.md#the-interrupt-distributor";

/// A CPU counts as one of a stream's cores when it carries at least this share of it.
const CORE_SHARE: f64 = 0.1;

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

/// How core 0 (the audio's) was shared over a run's measured ticks, from the trace's
/// `run:VM@cpu0` columns (percent of each tick each VM's vCPUs ran there).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoreShare {
    /// Mean percent of a tick the core ran any vCPU.
    pub busy: f64,
    /// Share of the ticks in which it was busy at least [`SATURATED_PCT`].
    pub saturated: f64,
    /// Mean percent of a tick the real-time and the general-purpose VM ran there.
    pub rt: f64,
    pub gp: f64,
}

/// A tick counts as saturated when its CPU ran vCPUs for at least this share of it.
pub const SATURATED_PCT: u32 = 95;

impl CoreShare {
    pub fn of(t: &crate::irqtrace::Trace, cpu: usize) -> Option<Self> {
        let vms: Vec<&str> = t
            .columns
            .iter()
            .filter(|c| c.cpu == cpu)
            .filter_map(|c| c.source.strip_prefix("run:"))
            .collect();
        if vms.is_empty() || t.ticks.is_empty() {
            return None;
        }
        let n = t.ticks.len() as f64;
        let vm = |name: &str| t.series(&format!("run:{name}"), cpu);
        let busy: Vec<u32> = (0..t.ticks.len())
            .map(|k| vms.iter().map(|v| vm(v)[k]).sum::<u32>().min(100))
            .collect();
        let mean = |v: &[u32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        Some(Self {
            busy: mean(&busy),
            saturated: busy.iter().filter(|&&b| b >= SATURATED_PCT).count() as f64 / n,
            rt: mean(&vm(RT_VM)),
            gp: mean(&vm(GP_VM)),
        })
    }

    /// `99 % (rt 81, gp 18; 97 % of ticks saturated)`
    pub fn describe(&self) -> String {
        format!(
            "{:.0} % (rt {:.0}, gp {:.0}; {:.0} % of ticks saturated)",
            self.busy,
            self.rt,
            self.gp,
            self.saturated * 100.0
        )
    }
}

/// A row of the table: a case's runs. The bandwidth is over every run that measured one; the
/// per-tick figures are the median run's (the one whose bandwidth is the median, the lower of
/// the two middle ones for an even count).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub case: &'static Case,
    pub audio_cores: String,
    pub network_cores: String,
    /// iperf3's bandwidth over the runs, Mb/s.
    pub mbit_s: Option<Stats>,
    /// The median relative to case 1's median, and the runs' least and most relative to it.
    pub relative: Option<Stats>,
    /// Audio (on the audio core) and network interrupts per tick per core.
    pub audio_per_tick: BTreeMap<usize, f64>,
    pub net_per_tick: BTreeMap<usize, f64>,
    /// The real-time VM's timer on the other cores: the CPU-heavy job's own wake-ups.
    pub hog_per_tick: BTreeMap<usize, f64>,
    /// The median run's redirects.
    pub redirects: usize,
    /// In how many profiler windows (one per dump) each stream was periodic, of how many.
    pub audio_periodic: (usize, usize),
    pub net_periodic: (usize, usize),
    /// The audio core's utilization in those windows: least and most, percent.
    pub audio_cpu_busy: Option<(u32, u32)>,
    /// How the audio core was shared, tick by tick, in the median run.
    pub core0: Option<CoreShare>,
    pub runs: usize,
    /// Why runs failed, one entry per failed run.
    pub failures: Vec<String>,
}

impl Row {
    /// The bandwidth cell: the median Mb/s and the runs' range, or why there is none.
    pub fn bandwidth(&self) -> String {
        match (&self.mbit_s, self.failures.is_empty()) {
            (Some(m), _) if m.n > 1 => format!("{:.1} ({:.1}–{:.1})", m.median, m.min, m.max),
            (Some(m), _) => format!("{:.1}", m.median),
            (None, false) => "failed".to_owned(),
            (None, true) => "-".to_owned(),
        }
    }

    /// The ratio cell: the median's ratio to case 1's and the runs' range.
    pub fn ratio(&self) -> String {
        match &self.relative {
            Some(r) if r.n > 1 => format!("{:.2} ({:.2}–{:.2})", r.median, r.min, r.max),
            Some(r) => format!("{:.2}", r.median),
            None => "-".to_owned(),
        }
    }
}

/// Each case's runs among `runs`, in case order, and its median run (see [`Row`]).
pub fn by_case(runs: &[Run]) -> Vec<(u32, Vec<&CaseRun>, &CaseRun)> {
    let mut cases: BTreeMap<u32, Vec<&CaseRun>> = BTreeMap::new();
    for c in
        runs.iter().filter(|r| r.kind == Kind::Distributor).filter_map(|r| r.distributor.as_ref())
    {
        cases.entry(c.case).or_default().push(c);
    }
    cases
        .into_iter()
        .map(|(case, all)| {
            let mut measured: Vec<&CaseRun> =
                all.iter().copied().filter(|c| c.mbit_s.is_some()).collect();
            measured.sort_by(|a, b| a.mbit_s.unwrap_or(0.0).total_cmp(&b.mbit_s.unwrap_or(0.0)));
            let median = match measured.len() {
                0 => all[0],
                n => measured[(n - 1) / 2],
            };
            (case, all, median)
        })
        .collect()
}

/// The rows for the distributor runs among `runs`, in case order.
pub fn rows(runs: &[Run]) -> Vec<Row> {
    let cases = by_case(runs);
    let bandwidths =
        |all: &[&CaseRun]| -> Vec<f64> { all.iter().filter_map(|c| c.mbit_s).collect() };
    let base = cases
        .iter()
        .find(|(n, ..)| *n == 1)
        .and_then(|(_, all, _)| Stats::of(&bandwidths(all)))
        .map(|s| s.median)
        .filter(|b| *b > 0.0);
    cases
        .into_iter()
        .filter_map(|(number, all, c)| {
            let case = crate::catalog::case(number)?;
            let timer = c.per_tick(AUDIO_SOURCE);
            let audio: BTreeMap<usize, f64> =
                timer.iter().filter(|(cpu, _)| **cpu == AUDIO_CPU).map(|(k, v)| (*k, *v)).collect();
            let hog = timer.into_iter().filter(|(cpu, _)| *cpu != AUDIO_CPU).collect();
            let net = c.per_tick(NET_SOURCE);
            let mbit = bandwidths(&all);
            let relative: Vec<f64> =
                base.map_or(Vec::new(), |b| mbit.iter().map(|m| m / b).collect());
            Some(Row {
                case,
                audio_cores: if case.audio { cores(&audio) } else { "no audio".to_owned() },
                network_cores: cores(&net),
                mbit_s: Stats::of(&mbit),
                relative: Stats::of(&relative),
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
                core0: c.trace.as_ref().and_then(|t| CoreShare::of(t, AUDIO_CPU)),
                runs: all.len(),
                failures: all.iter().filter_map(|c| c.failure.clone()).collect(),
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
    let header = [
        "Case",
        "Audio",
        "Network",
        "Mb/s median (range)",
        "vs 1",
        "study",
        "core 0 busy",
        "network/tick by core",
        "periodic a/n",
        "moves",
        "runs",
    ];
    let mut lines = vec![header.map(str::to_owned).to_vec()];
    let base = CASES[0].study_mbit;
    for r in &rows {
        lines.push(vec![
            format!("{} {}", r.case.number, r.case.name),
            r.audio_cores.clone(),
            r.network_cores.clone(),
            r.bandwidth(),
            r.ratio(),
            format!("{} ({:.2})", r.case.study_mbit, r.case.study_mbit / base),
            r.core0.map_or("-".to_owned(), |c| {
                format!("{:.0} % (rt {:.0}, gp {:.0})", c.busy, c.rt, c.gp)
            }),
            per_core(&r.net_per_tick),
            format!(
                "{}/{} {}/{}",
                r.audio_periodic.0, r.audio_periodic.1, r.net_periodic.0, r.net_periodic.1
            ),
            r.redirects.to_string(),
            format!(
                "{}{}",
                r.runs,
                if r.failures.is_empty() {
                    String::new()
                } else {
                    format!(" ({} failed)", r.failures.len())
                }
            ),
        ]);
    }
    let width: Vec<usize> = (0..header.len())
        .map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::from(
        "\nInterrupt distributor (the multicore CE study's Table 1), under icount: iperf3 into VM \
         gp, Mb/s of the guest's clock, median and range over the runs; the median run's core 0 \
         (rt's and gp's share of each tick there), network interrupts per 10 ms tick by core \
         over the measured seconds, profiler windows in which the audio and network streams \
         were periodic, and the distributor's moves (study: Mb/s, relative to case 1):\n",
    );
    for l in &lines {
        let mut s = String::from(" ");
        for (i, cell) in l.iter().enumerate() {
            if matches!(i, 3 | 4 | 9) {
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

/// The report's section: the table and each case's details.
pub fn markdown(md: &mut String, r: &Results) {
    let rows = rows(&r.runs);
    if rows.is_empty() {
        return;
    }
    let config = r.meta.distributor_config.as_deref().unwrap_or("configs/bench/distributor.toml");
    let _ = writeln!(md, "## Interrupt distributor (the multicore CE study's Table 1)\n");
    let _ = writeln!(
        md,
        "The study's experiment on QEMU `virt` with 4 CPUs under icount (`{config}`): audio on \
         core {AUDIO_CPU}, iperf3 into VM `{GP_VM}` from `{PEER_VM}`, the distributor off \
         (cases 1, 2, 5), moving the network stream to one other core (3, 6) or spreading it \
         (4, 7). **Bandwidth**: iperf3's, on the guest's clock; median and range over the runs, \
         and relative to case 1's median. **Audio** and **Network**: the cores that took at \
         least a tenth of each stream; **Core 0**: how much of each 10 ms tick core 0 ran vCPUs, \
         and whose, with the share of ticks it was saturated (at least {SATURATED_PCT} %); these \
         and the per-tick figures are the median run's ([the experiment]({METHOD})).\n"
    );
    let _ = writeln!(
        md,
        "| Case | Audio | Network | Bandwidth (Mb/s) | vs case 1 | Study: network, Mb/s (vs 1) \
         | Core 0 busy | Network irq/tick by core | Periodic: audio, network | Redirects | Runs |"
    );
    let _ = writeln!(md, "|---|---|---|---:|---:|---|---|---|---|---:|---:|");
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
                Some(_) => format!("**{}**", row.bandwidth()),
                None => row.bandwidth(),
            },
            row.ratio(),
            c.study_network,
            c.study_mbit,
            c.study_mbit / base,
            row.core0.map_or("–".to_owned(), |c| c.describe()),
            per_core(&row.net_per_tick),
            row.audio_periodic.0,
            row.audio_periodic.1,
            row.net_periodic.0,
            row.net_periodic.1,
            row.redirects,
            match row.failures.len() {
                0 => row.runs.to_string(),
                n => format!("{} ({n} failed)", row.runs),
            }
        );
    }
    md.push('\n');
    let _ = writeln!(md, "Per run (host seconds in brackets):\n");
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
                "{} ticks measured from {} dumps (at {} s of the transfer, armhv's clock)",
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
        if let Some(share) = d.trace.as_ref().and_then(|t| CoreShare::of(t, AUDIO_CPU)) {
            notes.push(format!("core {AUDIO_CPU} busy {}", share.describe()));
        }
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
        let mbit = d.mbit_s.map_or("no result".to_owned(), |m| format!("{m:.1} Mb/s"));
        let _ = writeln!(
            md,
            "- **Case {}**, {mbit} ({:.0} s): {}.",
            d.case,
            run.seconds,
            notes.join("; ")
        );
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributor::tests::case_run;

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
        assert_eq!(rows[1].relative.map(|r| r.median), Some(0.2));
        // Measured ticks 200..1200: audio 3 or 4 in turn, network 1, 2, 3 in turn.
        assert!((rows[1].audio_per_tick[&0] - 3.5).abs() < 1e-9);
        assert!((rows[2].net_per_tick[&1] - 2.0).abs() < 0.01, "{:?}", rows[2].net_per_tick);
        assert_eq!((rows[1].audio_periodic, rows[1].net_periodic), ((2, 2), (0, 2)));
        assert_eq!(rows[1].audio_cpu_busy, Some((96, 96)));
        // rt 60 % of every tick, gp 40 % of every other one.
        let share = rows[1].core0.unwrap();
        assert_eq!((share.busy, share.rt, share.gp, share.saturated), (80.0, 60.0, 20.0, 0.5));
        let t = terminal(&runs);
        assert!(t.contains("2 only core0"), "{t}");
        assert!(t.contains("0.20"), "{t}");
        assert!(t.contains("2.3 (0.15)"), "{t}");
        assert!(t.contains("2/2 0/2"), "{t}");
        assert!(t.contains("80 % (rt 60, gp 20)"), "{t}");
        // A case that did not complete keeps what it measured and says so.
        let mut failed = case_run(5, 1.0, 0);
        let d = failed.distributor.as_mut().unwrap();
        d.mbit_s = None;
        d.failure = Some("waiting for iperf3's result: timed out".into());
        let rows = super::rows(&[failed]);
        assert_eq!(rows[0].bandwidth(), "failed");
        assert_eq!(rows[0].network_cores, "core0");
    }

    #[test]
    fn several_runs_give_a_median_and_a_range() {
        let runs = [
            case_run(1, 100.0, 0),
            case_run(1, 120.0, 0),
            case_run(1, 110.0, 0),
            case_run(2, 20.0, 0),
            case_run(2, 33.0, 0),
        ];
        let rows = rows(&runs);
        assert_eq!(rows[0].bandwidth(), "110.0 (100.0–120.0)");
        assert_eq!(rows[0].runs, 3);
        // Against case 1's median.
        assert_eq!(rows[1].ratio(), "0.24 (0.18–0.30)");
        // The median run of an even count is the lower middle one.
        let picked = by_case(&runs)[1].2;
        assert_eq!(picked.mbit_s, Some(20.0));
    }
}
