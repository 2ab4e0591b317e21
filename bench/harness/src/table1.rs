//! The distributor experiment's table: one row per case, for the terminal and the report.

use crate::catalog::{AUDIO_CPU, AUDIO_SOURCE, CASES, Case, GP_VM, NET_SOURCE, PEER_VM, RT_VM};
use crate::irqtrace::Event;
use crate::model::{CaseRun, Kind, Results, Run};
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
            let case = crate::catalog::case(c.case)?;
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
        "The study's experiment on QEMU `virt` with 4 CPUs (`{config}`): audio on core \
         {AUDIO_CPU}, iperf3 into VM `{GP_VM}` from `{PEER_VM}`, the distributor off (cases 1, \
         2, 5), moving the network stream to one other core (3, 6) or spreading it over all (4, \
         7). **Audio** and **Network**: the cores that took at least a tenth of each stream; \
         per-tick figures are means over the measured seconds; **Periodic**: the profiler \
         windows in which each stream was periodic. Bandwidth is on the host's clock (noisy): \
         compare the ratios to case 1, not the Mb/s ([the experiment]({METHOD})).\n"
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
