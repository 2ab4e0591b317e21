//! What armhv's interrupt distributor prints, parsed: the per-tick trace that Ctrl-A t dumps,
//! the redirect and revert lines, and Ctrl-A d's on/off lines. Each arrives as one of armhv's
//! log lines (`[   1.234567 armhv INFO  cpu0] irqdist: ...`):
//!
//! ```text
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
//! tick; only columns with an interrupt somewhere in the trace are listed.

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

/// The last complete trace in `console`, if any. A trace that starts but does not end, or
/// whose lines do not fit its header, is an error naming the line.
pub fn last_trace(console: &str) -> Result<Option<Trace>> {
    let mut found = None;
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
                found = Some(t);
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
        if rest.starts_with("trace ") || rest.starts_with("tick ") {
            continue;
        }
        if let Some((source, rest)) = rest.split_once(" redirected from CPU ") {
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
    }
}
