//! What armhv's interrupt distributor prints, parsed: the per-tick trace that Ctrl-A t dumps,
//! the redirect and revert lines, and Ctrl-A d's on/off lines. Each arrives as one of armhv's
//! log lines (`[   1.234567 armhv INFO  cpu0] irqdist: ...`):
//!
//! ```text
//! irqdist: last window: cpu0 100% busy cpu1 12% busy, rt/timer Periodic 33, gp/net0 Sporadic 27
//! irqdist: trace 300 ticks of 10 ms, oldest first: rt/timer@cpu0 gp/net0@cpu0 gp/net0@cpu1
//! irqdist: tick 0 3 1 0
//! ...
//! irqdist: trace end
//! irqdist: gp/net0 redirected from CPU 0 to vCPU 1 on CPU 1
//! irqdist: gp/net0 back on CPU 0
//! console: interrupt distributor on
//! ```
//!
//! A trace column counts the interrupts of one source injected on one physical CPU in each
//! tick; only columns with an interrupt somewhere in the trace are listed. Ticks are numbered
//! from the distributor's start, so dumps taken a few seconds apart overlap and merge into one
//! trace ([`Trace::merge`]). The `last window` line before each dump is the profiler's view at
//! that moment: each CPU's utilization and each source's pattern and interrupts over the
//! last 100 ms, which is what the policy decides on.

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One of armhv's log lines: `[   1.234567 armhv INFO  cpu0] message` -> (1.234567, message).
pub fn armhv_line(line: &str) -> Option<(f64, &str)> {
    let rest = line.strip_prefix('[')?;
    let end = rest.find("] ")?;
    let mut words = rest[..end].split_whitespace();
    let secs = words.next()?.parse().ok()?;
    (words.next()? == "armhv").then_some((secs, &rest[end + 2..]))
}

/// A trace column: interrupts of `source` injected on physical CPU `cpu`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Column {
    pub source: String,
    pub cpu: usize,
}

impl Column {
    /// `gp/net0@cpu1`
    fn parse(word: &str) -> Result<Self> {
        let (source, cpu) = word
            .rsplit_once("@cpu")
            .ok_or_else(|| anyhow!("column {word:?} is not SOURCE@cpuN"))?;
        if source.is_empty() {
            bail!("column {word:?} names no source");
        }
        let cpu = cpu.parse().map_err(|_| anyhow!("column {word:?}: {cpu:?} is not a CPU"))?;
        Ok(Self { source: source.to_owned(), cpu })
    }
}

/// One Ctrl-A t dump.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// Tick length in ms.
    pub tick_ms: u32,
    pub columns: Vec<Column>,
    /// Oldest first: the tick's number as printed, and a count per column.
    pub ticks: Vec<(u64, Vec<u32>)>,
    /// armhv's clock when the dump started (seconds since boot).
    pub at_secs: f64,
}

impl Trace {
    fn column(&self, source: &str, cpu: usize) -> Option<usize> {
        self.columns.iter().position(|c| c.source == source && c.cpu == cpu)
    }

    /// `source`'s interrupts on `cpu` in each tick (zeros if it has no column).
    pub fn series(&self, source: &str, cpu: usize) -> Vec<u32> {
        match self.column(source, cpu) {
            Some(c) => self.ticks.iter().map(|(_, counts)| counts[c]).collect(),
            None => vec![0; self.ticks.len()],
        }
    }

    /// The CPUs `source` was injected on, in order.
    pub fn cpus_of(&self, source: &str) -> Vec<usize> {
        let mut cpus: Vec<usize> =
            self.columns.iter().filter(|c| c.source == source).map(|c| c.cpu).collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }

    /// `source`'s mean interrupts per tick on each CPU it was injected on.
    pub fn per_tick(&self, source: &str) -> BTreeMap<usize, f64> {
        let n = self.ticks.len().max(1) as f64;
        self.cpus_of(source)
            .into_iter()
            .map(|cpu| {
                let total: u64 = self.series(source, cpu).iter().map(|&v| u64::from(v)).sum();
                (cpu, total as f64 / n)
            })
            .collect()
    }

    /// The last `n` ticks (all of them if fewer).
    pub fn last(&self, n: usize) -> Trace {
        let from = self.ticks.len().saturating_sub(n);
        Trace { ticks: self.ticks[from..].to_vec(), ..self.clone() }
    }
}

impl Trace {
    /// The number of its last tick.
    pub fn last_tick(&self) -> Option<u64> {
        self.ticks.last().map(|(k, _)| *k)
    }

    /// One trace from several dumps: the union of their columns (in order of first
    /// appearance) and of their ticks (in tick order; where dumps overlap, the later one's
    /// counts). The tick length and time are the last dump's.
    pub fn merge(dumps: &[Trace]) -> Trace {
        let mut columns: Vec<Column> = Vec::new();
        for c in dumps.iter().flat_map(|d| &d.columns) {
            if !columns.contains(c) {
                columns.push(c.clone());
            }
        }
        let mut ticks: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for d in dumps {
            let map: Vec<usize> = d
                .columns
                .iter()
                .map(|c| columns.iter().position(|x| x == c).unwrap_or_default())
                .collect();
            for (k, counts) in &d.ticks {
                let mut row = vec![0; columns.len()];
                for (i, v) in counts.iter().enumerate() {
                    row[map[i]] = *v;
                }
                ticks.insert(*k, row);
            }
        }
        let last = dumps.last();
        Trace {
            tick_ms: last.map_or(0, |d| d.tick_ms),
            columns,
            ticks: ticks.into_iter().collect(),
            at_secs: last.map_or(0.0, |d| d.at_secs),
        }
    }

    /// `source`'s interrupts per tick, summed over the CPUs.
    pub fn totals(&self, source: &str) -> Vec<u32> {
        let cols: Vec<usize> =
            (0..self.columns.len()).filter(|&c| self.columns[c].source == source).collect();
        self.ticks.iter().map(|(_, counts)| cols.iter().map(|&c| counts[c]).sum()).collect()
    }

    /// How steady `source` is tick by tick: the share of ticks with at least one of its
    /// interrupts, and the coefficient of variation of its count per tick (`None` without
    /// ticks or interrupts).
    pub fn steadiness(&self, source: &str) -> Option<(f64, f64)> {
        let t = self.totals(source);
        let n = t.len() as f64;
        let mean = t.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        if t.is_empty() || mean == 0.0 {
            return None;
        }
        let var = t.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
        let present = t.iter().filter(|&&v| v > 0).count() as f64 / n;
        Some((present, var.sqrt() / mean))
    }

    /// The ticks numbered `from..=to`.
    pub fn range(&self, from: u64, to: u64) -> Trace {
        let ticks = self.ticks.iter().filter(|(k, _)| (from..=to).contains(k)).cloned().collect();
        Trace { ticks, ..self.clone() }
    }
}

/// The last complete trace in `console`, if any (see [`traces`]).
pub fn last_trace(console: &str) -> Result<Option<Trace>> {
    Ok(traces(console)?.pop())
}

/// Every complete trace in `console`, in order. A trace that starts but does not end, or
/// whose lines do not fit its header, is an error naming the line.
pub fn traces(console: &str) -> Result<Vec<Trace>> {
    let mut found = Vec::new();
    let mut open: Option<(Trace, usize)> = None; // the trace being read, its declared length
    for (i, line) in console.lines().enumerate() {
        let Some((secs, msg)) = armhv_line(line.trim_end()) else { continue };
        let Some(rest) = msg.strip_prefix("irqdist: ") else { continue };
        let at = || format!("console line {}: {line:?}", i + 1);
        if let Some(head) = rest.strip_prefix("trace ") {
            if head == "end" {
                let (t, n) = open
                    .take()
                    .ok_or_else(|| anyhow!("a trace end without a start"))
                    .with_context(at)?;
                if t.ticks.len() != n {
                    bail!("the trace announced {n} ticks and has {}: {}", t.ticks.len(), at());
                }
                found.push(t);
            } else {
                if open.is_some() {
                    bail!("a trace starts inside another: {}", at());
                }
                open = Some(parse_header(head, secs).with_context(at)?);
            }
        } else if let Some(tick) = rest.strip_prefix("tick ") {
            let (t, _) =
                open.as_mut().ok_or_else(|| anyhow!("a tick outside a trace")).with_context(at)?;
            let mut words = tick.split_whitespace();
            let k = words.next().and_then(|w| w.parse().ok());
            let counts: Option<Vec<u32>> = words.map(|w| w.parse().ok()).collect();
            match (k, counts) {
                (Some(k), Some(c)) if c.len() == t.columns.len() => t.ticks.push((k, c)),
                _ => bail!("a tick line does not match the {} columns: {}", t.columns.len(), at()),
            }
        }
    }
    if open.is_some() {
        bail!("the last trace has no `irqdist: trace end`");
    }
    Ok(found)
}

/// `<n> ticks of <ms> ms, oldest first: <col> <col> ...`
fn parse_header(head: &str, secs: f64) -> Result<(Trace, usize)> {
    let (counts, cols) =
        head.split_once(", oldest first:").ok_or_else(|| anyhow!("no `, oldest first:`"))?;
    let words: Vec<&str> = counts.split_whitespace().collect();
    let (n, ms) = match words[..] {
        [n, "ticks", "of", ms, "ms"] => (n.parse().ok(), ms.parse().ok()),
        _ => (None, None),
    };
    let (Some(n), Some(tick_ms)) = (n, ms) else {
        bail!("a trace header is `trace N ticks of MS ms, oldest first: ...`");
    };
    let columns = cols.split_whitespace().map(Column::parse).collect::<Result<Vec<_>>>()?;
    Ok((Trace { tick_ms, columns, ticks: Vec::with_capacity(n), at_secs: secs }, n))
}

/// A source's pattern in the profiler's last window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceWindow {
    pub source: String,
    pub periodic: bool,
    /// Interrupts in the window.
    pub events: u32,
}

/// The profiler's view when a trace was dumped (`irqdist: last window: ...`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub at_secs: f64,
    /// Utilization of each CPU, in percent, by CPU number.
    pub busy: Vec<u32>,
    pub sources: Vec<SourceWindow>,
}

impl Window {
    /// `cpu0 100% busy cpu1 1% busy, rt/timer Sporadic 28, gp/net0 Periodic 27`
    fn parse(rest: &str, at_secs: f64) -> Result<Self> {
        let mut parts = rest.split(", ");
        let cpus: Vec<&str> = parts.next().unwrap_or_default().split_whitespace().collect();
        let mut busy = Vec::new();
        for (i, chunk) in cpus.chunks(3).enumerate() {
            let pct = match chunk {
                [cpu, pct, "busy"] if *cpu == format!("cpu{i}") => {
                    pct.strip_suffix('%').and_then(|p| p.parse().ok())
                }
                _ => None,
            };
            busy.push(pct.ok_or_else(|| anyhow!("not `cpuN P% busy`: {chunk:?}"))?);
        }
        let sources = parts
            .map(|p| match p.split_whitespace().collect::<Vec<_>>()[..] {
                [source, pattern @ ("Periodic" | "Sporadic"), events] => Ok(SourceWindow {
                    source: source.to_owned(),
                    periodic: pattern == "Periodic",
                    events: events.parse().map_err(|_| anyhow!("{events:?} is not a count"))?,
                }),
                _ => bail!("not `SOURCE Periodic|Sporadic N`: {p:?}"),
            })
            .collect::<Result<_>>()?;
        Ok(Self { at_secs, busy, sources })
    }

    pub fn source(&self, name: &str) -> Option<&SourceWindow> {
        self.sources.iter().find(|s| s.source == name)
    }
}

/// Every `irqdist: last window:` line in `console`, in order.
pub fn windows(console: &str) -> Result<Vec<Window>> {
    let mut out = Vec::new();
    for (i, line) in console.lines().enumerate() {
        let Some((secs, msg)) = armhv_line(line.trim_end()) else { continue };
        let Some(rest) = msg.strip_prefix("irqdist: last window:") else { continue };
        let w = Window::parse(rest.trim(), secs)
            .with_context(|| format!("console line {}: {line:?}", i + 1))?;
        out.push(w);
    }
    Ok(out)
}

/// A change the distributor made, or the console's switch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum Event {
    Redirect { secs: f64, source: String, from_cpu: usize, to_vcpu: usize, to_cpu: usize },
    Back { secs: f64, source: String, cpu: usize },
    Switched { secs: f64, on: bool },
}

impl Event {
    pub fn secs(&self) -> f64 {
        match self {
            Self::Redirect { secs, .. } | Self::Back { secs, .. } | Self::Switched { secs, .. } => {
                *secs
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Redirect { secs, source, from_cpu, to_vcpu, to_cpu } => format!(
                "{secs:.2} s: {source} redirected from core {from_cpu} to vCPU {to_vcpu} on \
                 core {to_cpu}"
            ),
            Self::Back { secs, source, cpu } => format!("{secs:.2} s: {source} back on core {cpu}"),
            Self::Switched { secs, on } => {
                format!("{secs:.2} s: distributor switched {}", if *on { "on" } else { "off" })
            }
        }
    }
}

/// The distributor's changes in `console`, in order. Lines that do not parse are errors.
pub fn events(console: &str) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    for (i, line) in console.lines().enumerate() {
        let Some((secs, msg)) = armhv_line(line.trim_end()) else { continue };
        let at = || format!("console line {}: {line:?}", i + 1);
        if let Some(state) = msg.strip_prefix("console: interrupt distributor ") {
            match state.trim() {
                "on" => out.push(Event::Switched { secs, on: true }),
                "off" => out.push(Event::Switched { secs, on: false }),
                _ => bail!("not `on` or `off`: {}", at()),
            }
            continue;
        }
        let Some(rest) = msg.strip_prefix("irqdist: ") else { continue };
        if rest.starts_with("trace ") || rest.starts_with("tick ") || rest.starts_with("last ") {
            continue;
        }
        if let Some((source, rest)) = rest.split_once(" redirected from CPU ") {
            // With spread = "all": `... on CPU B (in turn with vCPUs [1, 2])`.
            let rest = rest.split_once(" (in turn").map_or(rest, |(r, _)| r);
            let w: Vec<&str> = rest.split_whitespace().collect();
            let num = |s: &str| s.parse::<usize>().ok();
            match w[..] {
                [from, "to", "vCPU", vcpu, "on", "CPU", to] => {
                    let (Some(from_cpu), Some(to_vcpu), Some(to_cpu)) =
                        (num(from), num(vcpu), num(to))
                    else {
                        bail!("a CPU or vCPU is not a number: {}", at());
                    };
                    out.push(Event::Redirect {
                        secs,
                        source: source.to_owned(),
                        from_cpu,
                        to_vcpu,
                        to_cpu,
                    });
                }
                _ => bail!("not `SOURCE redirected from CPU A to vCPU V on CPU B`: {}", at()),
            }
        } else if let Some((source, cpu)) = rest.split_once(" back on CPU ") {
            let cpu = cpu.trim().parse().map_err(|_| anyhow!("not a CPU: {}", at()))?;
            out.push(Event::Back { secs, source: source.to_owned(), cpu });
        }
        // Other irqdist lines (start-up, statistics) are not events.
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSOLE: &str = "\
[   0.939018 armhv INFO  cpu0] rt: 3 vCPU(s) on CPU(s) [0, 1, 2], 16 MiB RAM at 0x40000000, entry 0x40080000
[rt] testguest: audio period 3000 us work 1500 us until stopped, hog 0 % on 0 cpus
[   5.120000 armhv INFO  cpu2] irqdist: gp/net0 redirected from CPU 0 to vCPU 1 on CPU 1
[gp] armhv-bench: workload iperf3: /usr/local/bin/iperf3 -c 10.0.0.2 -p 5201 -t 10 -O 1 -f m -R
[  11.999000 armhv INFO  cpu1] irqdist: last window: cpu0 100% busy cpu1 12% busy, rt/timer Periodic 33, gp/net0 Sporadic 27
[  12.000000 armhv INFO  cpu1] irqdist: trace 3 ticks of 10 ms, oldest first: rt/timer@cpu0 gp/net0@cpu0 gp/net0@cpu1
[  12.000100 armhv INFO  cpu1] irqdist: tick 1197 3 1 0
[gp] armhv-guest: something in between
[  12.000200 armhv INFO  cpu1] irqdist: tick 1198 4 0 2
[  12.000300 armhv INFO  cpu1] irqdist: tick 1199 3 0 1
[  12.000400 armhv INFO  cpu1] irqdist: trace end
[  13.000000 armhv INFO  cpu0] console: interrupt distributor off
[  13.010000 armhv INFO  cpu0] irqdist: gp/net0 back on CPU 0
";

    #[test]
    fn log_lines() {
        assert_eq!(armhv_line("[   0.939018 armhv INFO  cpu0] hello"), Some((0.939018, "hello")));
        assert_eq!(armhv_line("[rt] testguest: x"), None);
        assert_eq!(armhv_line("[ 1.0 other INFO cpu0] x"), None);
        assert_eq!(armhv_line("no prefix"), None);
    }

    #[test]
    fn parses_a_trace() {
        let t = last_trace(CONSOLE).unwrap().unwrap();
        assert_eq!(t.tick_ms, 10);
        assert_eq!(t.at_secs, 12.0);
        assert_eq!(
            t.columns,
            [
                Column { source: "rt/timer".into(), cpu: 0 },
                Column { source: "gp/net0".into(), cpu: 0 },
                Column { source: "gp/net0".into(), cpu: 1 },
            ]
        );
        assert_eq!(t.ticks.len(), 3);
        assert_eq!(t.ticks[0], (1197, vec![3, 1, 0]));
        assert_eq!(t.series("rt/timer", 0), [3, 4, 3]);
        assert_eq!(t.series("gp/net0", 1), [0, 2, 1]);
        assert_eq!(t.series("gp/net0", 2), [0, 0, 0], "no column: zeros");
        assert_eq!(t.cpus_of("gp/net0"), [0, 1]);
        let per = t.per_tick("gp/net0");
        assert!((per[&0] - 1.0 / 3.0).abs() < 1e-9 && per[&1] == 1.0, "{per:?}");
        assert_eq!(t.last(2).ticks[0].0, 1198);
        assert_eq!(t.totals("gp/net0"), [1, 2, 1]);
        let (present, cv) = t.steadiness("gp/net0").unwrap();
        assert_eq!(present, 1.0);
        assert!((cv - (2f64 / 9.0).sqrt() / (4.0 / 3.0)).abs() < 1e-9, "{cv}");
        assert_eq!(t.steadiness("nothing"), None);
        assert_eq!(t.last(10).ticks.len(), 3);
    }

    #[test]
    fn the_last_complete_trace_wins() {
        let second = "\
[  20.0 armhv INFO  cpu0] irqdist: trace 1 ticks of 10 ms, oldest first:
[  20.1 armhv INFO  cpu0] irqdist: tick 5
[  20.2 armhv INFO  cpu0] irqdist: trace end
";
        let t = last_trace(&format!("{CONSOLE}{second}")).unwrap().unwrap();
        assert!(t.columns.is_empty());
        assert_eq!(t.ticks, [(5, vec![])]);
        assert_eq!(last_trace("[rt] nothing\n").unwrap(), None);
    }

    #[test]
    fn broken_traces_are_errors() {
        let unfinished = "[ 1.0 armhv INFO  cpu0] irqdist: trace 2 ticks of 10 ms, oldest first: a@cpu0\n\
                          [ 1.1 armhv INFO  cpu0] irqdist: tick 0 1\n";
        assert!(last_trace(unfinished).is_err());
        let short = format!("{unfinished}[ 1.2 armhv INFO  cpu0] irqdist: trace end\n");
        let e = last_trace(&short).unwrap_err();
        assert!(format!("{e:#}").contains("announced 2 ticks and has 1"), "{e:#}");
        let wide = "[ 1.0 armhv INFO  cpu0] irqdist: trace 1 ticks of 10 ms, oldest first: a@cpu0\n\
                    [ 1.1 armhv INFO  cpu0] irqdist: tick 0 1 2\n";
        let e = last_trace(wide).unwrap_err();
        assert!(format!("{e:#}").contains("console line 2"), "{e:#}");
        let bad_col =
            "[ 1.0 armhv INFO  cpu0] irqdist: trace 1 ticks of 10 ms, oldest first: a@cpuX\n";
        assert!(last_trace(bad_col).is_err());
        assert!(last_trace("[ 1.0 armhv INFO  cpu0] irqdist: tick 0 1\n").is_err());
    }

    #[test]
    fn dumps_merge_by_tick() {
        let second = "\
[  13.0 armhv INFO  cpu0] irqdist: trace 3 ticks of 10 ms, oldest first: gp/net0@cpu2 rt/timer@cpu0
[  13.0 armhv INFO  cpu0] irqdist: tick 1199 7 9
[  13.0 armhv INFO  cpu0] irqdist: tick 1200 1 3
[  13.0 armhv INFO  cpu0] irqdist: tick 1201 0 4
[  13.1 armhv INFO  cpu0] irqdist: trace end
";
        let all = traces(&format!("{CONSOLE}{second}")).unwrap();
        assert_eq!(all.len(), 2);
        let m = Trace::merge(&all);
        assert_eq!(m.columns.len(), 4);
        assert_eq!(m.columns[3], Column { source: "gp/net0".into(), cpu: 2 });
        let ks: Vec<u64> = m.ticks.iter().map(|(k, _)| *k).collect();
        assert_eq!(ks, [1197, 1198, 1199, 1200, 1201]);
        // Tick 1199 is in both: the later dump's counts, its missing columns zero.
        assert_eq!(m.ticks[2].1, [9, 0, 0, 7]);
        assert_eq!(m.series("rt/timer", 0), [3, 4, 9, 3, 4]);
        assert_eq!(m.at_secs, 13.0);
        assert_eq!(m.last_tick(), Some(1201));
        assert_eq!(m.range(1198, 1200).ticks.len(), 3);
        assert_eq!(Trace::merge(&[]).ticks.len(), 0);
    }

    #[test]
    fn profiler_windows() {
        let w = windows(CONSOLE).unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].busy, [100, 12]);
        assert_eq!(w[0].at_secs, 11.999);
        assert_eq!(
            w[0].source("gp/net0"),
            Some(&SourceWindow { source: "gp/net0".into(), periodic: false, events: 27 })
        );
        assert!(w[0].source("rt/timer").unwrap().periodic);
        let idle = "[ 1.0 armhv INFO  cpu0] irqdist: last window: cpu0 0% busy cpu1 0% busy\n";
        assert!(windows(idle).unwrap()[0].sources.is_empty());
        let bad = "[ 1.0 armhv INFO  cpu0] irqdist: last window: cpu0 x% busy\n";
        assert!(windows(bad).is_err());
        let bad = "[ 1.0 armhv INFO  cpu0] irqdist: last window: cpu0 1% busy, a Regular 3\n";
        assert!(windows(bad).is_err());
    }

    #[test]
    fn parses_events() {
        let e = events(CONSOLE).unwrap();
        assert_eq!(
            e,
            [
                Event::Redirect {
                    secs: 5.12,
                    source: "gp/net0".into(),
                    from_cpu: 0,
                    to_vcpu: 1,
                    to_cpu: 1
                },
                Event::Switched { secs: 13.0, on: false },
                Event::Back { secs: 13.01, source: "gp/net0".into(), cpu: 0 },
            ]
        );
        assert_eq!(e[0].describe(), "5.12 s: gp/net0 redirected from core 0 to vCPU 1 on core 1");
        assert!(
            events("[ 1.0 armhv INFO  cpu0] irqdist: x redirected from CPU a to vCPU 1 on CPU 2\n")
                .is_err()
        );
        let all = "[ 1.0 armhv INFO  cpu0] irqdist: gp/net0 redirected from CPU 0 to vCPU 1 on CPU 1 \
                   (in turn with vCPUs [1, 2])\n";
        assert!(matches!(events(all).unwrap()[..], [Event::Redirect { to_cpu: 1, .. }]));
    }
}
