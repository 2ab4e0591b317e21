//! Reading a benchmark run's console: vmbench's lines (tagged by armhv with the VM's name),
//! armhv's `ws-breakdown:` lines, the Linux guests' `armhv-bench:` lines and testguest's audio
//! summary. armhv's interrupt-distributor lines are `irqtrace`'s.
//!
//! ```text
//! [bench] vmbench: boot cpus=2 clock=pmu freq=62500000 armhv=yes el=1
//! [bench] vmbench: overhead unit=cycles 3
//! [bench] vmbench: result hypercall unit=cycles n=100000 min=96 median=96 mean=96.4 max=130
//! [bench] vmbench: result eoi unit=cycles n=100000 min=9 median=9 mean=9.0 max=9 exits-per-op=0.00
//! [bench] vmbench: skip io-in: no virtio-rng device
//! [bench] vmbench: done
//! [  12.000001 armhv INFO  cpu0] ws-breakdown: hypercall n=100000 gp=40.0 ... total=96.0
//! ```
//!
//! vmbench also runs on plain QEMU without armhv; its lines then have no `[vm]` tag and are
//! filed under the VM name `""`.

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What one count of a figure is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// The PMU cycle counter (PMCCNTR_EL0).
    Cycles,
    /// The virtual counter (CNTVCT_EL0), at the frequency of the `boot` line.
    Ticks,
}

impl Unit {
    fn parse(s: &str) -> Result<Self> {
        match s {
            "cycles" => Ok(Self::Cycles),
            "ticks" => Ok(Self::Ticks),
            _ => bail!("unknown unit {s:?} (expected cycles or ticks)"),
        }
    }
}

/// `vmbench: boot cpus=<n> clock=<pmu|cntvct> freq=<hz> armhv=<yes|no> el=<n>[ cntfrq=<hz>]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Boot {
    pub cpus: u32,
    /// The counter of single-CPU figures: `pmu` (unit cycles) or `cntvct` (unit ticks).
    pub clock: String,
    /// The rate of that clock: CNTFRQ_EL0 for `cntvct`, a nominal 1 GHz for `pmu`.
    pub freq: u64,
    pub armhv: bool,
    pub el: u32,
    /// CNTFRQ_EL0, if vmbench prints it (it is `freq` when the clock is `cntvct`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cntfrq: Option<u64>,
}

/// CNTFRQ_EL0 on QEMU `virt` (every CPU model): the rate of `ticks` when vmbench's boot line
/// does not give it.
pub const QEMU_VIRT_CNTFRQ: u64 = 62_500_000;

impl Boot {
    /// The rate of `ticks` (CNTVCT_EL0), which vmbench uses for the cross-CPU figures even
    /// when its clock is the PMU.
    pub fn tick_freq(&self) -> u64 {
        self.cntfrq.or((self.clock == "cntvct").then_some(self.freq)).unwrap_or(QEMU_VIRT_CNTFRQ)
    }
}

/// `vmbench: result <name> unit=<u> n=<N> min= median= mean= max=[ exits-per-op=]`, as printed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawResult {
    pub name: String,
    pub unit: Unit,
    pub n: u64,
    pub min: u64,
    pub median: u64,
    pub mean: f64,
    pub max: u64,
    /// Exits to armhv per operation, for the benchmarks that count them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub exits_per_op: Option<f64>,
}

/// `vmbench: skip <name>: <reason>`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skip {
    pub name: String,
    pub reason: String,
}

/// Everything vmbench printed in one VM.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VmOutput {
    pub boot: Option<Boot>,
    /// The counter-read overhead vmbench measured: (unit, value).
    pub overhead: Option<(Unit, u64)>,
    pub results: Vec<RawResult>,
    pub skips: Vec<Skip>,
    /// `vmbench: gic <v3|v2|none>`: the GIC vmbench found in its device tree.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gic: Option<String>,
    /// `vmbench: done` was seen.
    pub done: bool,
}

impl VmOutput {
    pub fn result(&self, name: &str) -> Option<&RawResult> {
        self.results.iter().find(|r| r.name == name)
    }

    pub fn skip(&self, name: &str) -> Option<&Skip> {
        self.skips.iter().find(|s| s.name == name)
    }
}

/// One `ws-breakdown:` line: mean instructions per event by state class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BreakdownPath {
    /// `hypercall` or `vm-switch`.
    pub path: String,
    pub n: u64,
    /// (class, mean instructions) in the order printed: gp, fpsimd, el1, vgic, timer, el2,
    /// stage2, other.
    pub classes: Vec<(String, f64)>,
    pub total: f64,
}

impl BreakdownPath {
    pub fn class(&self, name: &str) -> Option<f64> {
        self.classes.iter().find(|(c, _)| c == name).map(|(_, v)| *v)
    }
}

/// A whole console, parsed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Console {
    /// vmbench's output by VM name.
    pub vms: BTreeMap<String, VmOutput>,
    pub breakdown: Vec<BreakdownPath>,
}

impl Console {
    pub fn vm(&self, name: &str) -> Option<&VmOutput> {
        self.vms.get(name)
    }
}

/// Parses a console transcript. Lines that are neither vmbench's nor a breakdown are ignored;
/// a vmbench or breakdown line that does not parse is an error naming it (the formats are a
/// contract between vmbench, armhv and this tool, and a silent drop would hide a benchmark).
pub fn parse_console(text: &str) -> Result<Console> {
    let mut console = Console::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        let what = || format!("console line {}: {line:?}", i + 1);
        if let Some(rest) = after(line, "ws-breakdown: ") {
            console.breakdown.push(parse_breakdown(rest).with_context(what)?);
            continue;
        }
        let (vm, body) = split_vm_tag(line);
        let Some(body) = body.strip_prefix("vmbench: ") else { continue };
        let out = console.vms.entry(vm.to_owned()).or_default();
        parse_vmbench(body, out).with_context(what)?;
    }
    Ok(console)
}

/// The text after the first `marker` that starts the line or follows `] ` (armhv's log prefix).
fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    if let Some(rest) = line.strip_prefix(marker) {
        return Some(rest);
    }
    let pos = line.find(&format!("] {marker}"))?;
    Some(&line[pos + 2 + marker.len()..])
}

/// `[vm] text` -> ("vm", "text"); armhv's own `[   0.93 armhv INFO  cpu0] ...` prefix (which
/// has spaces) and untagged lines -> ("", line).
pub fn split_vm_tag(line: &str) -> (&str, &str) {
    if let Some(rest) = line.strip_prefix('[')
        && let Some(end) = rest.find("] ")
    {
        let name = &rest[..end];
        if !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b))
        {
            return (name, &rest[end + 2..]);
        }
    }
    ("", line)
}

fn parse_vmbench(body: &str, out: &mut VmOutput) -> Result<()> {
    let (kind, rest) = body.split_once(' ').unwrap_or((body, ""));
    match kind {
        "boot" => {
            let kv = KeyValues::parse(rest)?;
            out.boot = Some(Boot {
                cpus: kv.num("cpus")?,
                clock: kv.get("clock")?.to_owned(),
                freq: kv.num("freq")?,
                armhv: match kv.get("armhv")? {
                    "yes" => true,
                    "no" => false,
                    v => bail!("armhv={v}: expected yes or no"),
                },
                el: kv.num("el")?,
                cntfrq: kv.opt("cntfrq").map(parse_num).transpose()?,
            });
        }
        "overhead" => {
            let mut words = rest.split_whitespace();
            let unit = words
                .next()
                .and_then(|w| w.strip_prefix("unit="))
                .ok_or_else(|| anyhow!("expected unit=<cycles|ticks> <value>"))?;
            let value = words.next().ok_or_else(|| anyhow!("no value"))?;
            out.overhead = Some((Unit::parse(unit)?, parse_num(value)?));
        }
        "result" => {
            let (name, rest) =
                rest.split_once(' ').ok_or_else(|| anyhow!("a result line with no values"))?;
            let kv = KeyValues::parse(rest)?;
            let result = RawResult {
                name: name.to_owned(),
                unit: Unit::parse(kv.get("unit")?)?,
                n: kv.num("n")?,
                min: kv.num("min")?,
                median: kv.num("median")?,
                mean: kv.num("mean")?,
                max: kv.num("max")?,
                exits_per_op: kv.opt("exits-per-op").map(parse_num).transpose()?,
            };
            if out.result(name).is_some() {
                bail!("a second result for {name}");
            }
            out.results.push(result);
        }
        "skip" => {
            let (name, reason) =
                rest.split_once(": ").ok_or_else(|| anyhow!("expected skip <name>: <reason>"))?;
            out.skips.push(Skip { name: name.to_owned(), reason: reason.to_owned() });
        }
        "gic" => out.gic = Some(rest.trim().to_owned()),
        "done" => out.done = true,
        // Free-form progress and notes from vmbench.
        _ => {}
    }
    Ok(())
}

fn parse_breakdown(rest: &str) -> Result<BreakdownPath> {
    let (path, rest) = rest.split_once(' ').ok_or_else(|| anyhow!("a breakdown with no values"))?;
    let kv = KeyValues::parse(rest)?;
    let mut classes = Vec::new();
    for (k, v) in &kv.0 {
        if *k != "n" && *k != "total" {
            classes.push(((*k).to_owned(), parse_num(v)?));
        }
    }
    Ok(BreakdownPath { path: path.to_owned(), n: kv.num("n")?, classes, total: kv.num("total")? })
}

/// `key=value` words, in order.
struct KeyValues<'a>(Vec<(&'a str, &'a str)>);

impl<'a> KeyValues<'a> {
    fn parse(text: &'a str) -> Result<Self> {
        let mut kv = Vec::new();
        for word in text.split_whitespace() {
            let (k, v) =
                word.split_once('=').ok_or_else(|| anyhow!("{word:?} is not key=value"))?;
            kv.push((k, v));
        }
        Ok(Self(kv))
    }

    fn opt(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn get(&self, key: &str) -> Result<&'a str> {
        self.opt(key).ok_or_else(|| anyhow!("no {key}="))
    }

    fn num<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        parse_num(self.get(key)?).with_context(|| format!("{key}="))
    }
}

fn parse_num<T: std::str::FromStr>(s: &str) -> Result<T> {
    s.parse().map_err(|_| anyhow!("{s:?} is not a number of the expected kind"))
}

// --- armhv-bench (the application workloads) ---
//
// The Linux guest prints, per repetition:
//
// ```text
// armhv-bench: workload hackbench: /usr/local/bin/hackbench -P -g 2 -f 10 -l 100 -s 100
// armhv-bench: result hackbench rep=1 seconds=2.674
// armhv-bench: result tcp-rr rep=1 usec=935.360 mean_usec=1867.762 n=2673
// armhv-bench: error iperf3 rep=2: iperf3: error - unable to connect to server
// armhv-bench: done
// ```
//
// Under armhv each line carries the VM's tag (`[linux0] armhv-bench: ...`).

/// One repetition's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub workload: String,
    pub rep: u32,
    /// The first `key=value` of the line: the workload's figure.
    pub metric: String,
    pub value: f64,
    /// The others (e.g. tcp-rr's `mean_usec`, `n`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub workload: String,
    /// 0: the workload did not start.
    pub rep: u32,
    pub message: String,
}

/// What armhv-bench printed in one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// Workload -> the command it ran, as armhv-bench described it.
    pub commands: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
    pub failures: Vec<Failure>,
    pub done: bool,
    /// Which round of the bench this run was (from 1).
    #[serde(default)]
    pub round: u32,
    /// The host's load average over the last minute (`/proc/loadavg`) when the run started
    /// and when it ended: other work on the host slows QEMU down.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host_load: Option<(f64, f64)>,
}

impl Output {
    /// `vm`: the VM's tag under armhv; `None` natively (untagged lines).
    pub fn parse(console: &str, vm: Option<&str>) -> Result<Self> {
        const MARK: &str = "armhv-bench: ";
        let mut out = Self::default();
        for (i, line) in console.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            let (tag, body) = split_vm_tag(line);
            if tag != vm.unwrap_or("") {
                continue;
            }
            let Some(rest) = body.strip_prefix(MARK) else { continue };
            let at = || format!("console line {}: {line:?}", i + 1);
            let (kind, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            match kind {
                "done" => out.done = true,
                "workload" => {
                    let (name, cmd) =
                        rest.split_once(": ").ok_or_else(|| anyhow!("no ': ' in {}", at()))?;
                    out.commands.insert(name.to_owned(), cmd.to_owned());
                }
                "result" => out.samples.push(parse_result(rest).with_context(at)?),
                "error" => {
                    let (head, message) = rest.split_once(": ").unwrap_or((rest, ""));
                    let mut words = head.split_whitespace();
                    let workload = words.next().unwrap_or_default().to_owned();
                    let rep = words
                        .next()
                        .and_then(|w| w.strip_prefix("rep="))
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(0);
                    out.failures.push(Failure { workload, rep, message: message.to_owned() });
                }
                _ => {} // serving, stopped, could not stop ...: progress only
            }
        }
        Ok(out)
    }

    /// The values of one workload's figure, in repetition order.
    pub fn values(&self, workload: &str) -> Vec<f64> {
        self.samples.iter().filter(|s| s.workload == workload).map(|s| s.value).collect()
    }
}

/// `NAME rep=I METRIC=VALUE [KEY=VALUE...]`
fn parse_result(rest: &str) -> Result<Sample> {
    let mut words = rest.split_whitespace();
    let workload = words.next().ok_or_else(|| anyhow!("a result without a name"))?.to_owned();
    let rep = words
        .next()
        .and_then(|w| w.strip_prefix("rep="))
        .ok_or_else(|| anyhow!("no rep= after the name"))?;
    let rep: u32 = rep.parse().map_err(|_| anyhow!("rep={rep} is not a number"))?;
    let mut pairs = Vec::new();
    for w in words {
        let (k, v) = w.split_once('=').ok_or_else(|| anyhow!("{w:?} is not KEY=VALUE"))?;
        let v: f64 = v.parse().map_err(|_| anyhow!("{k}={v} is not a number"))?;
        if !v.is_finite() {
            bail!("{k}={v} is not a finite number");
        }
        pairs.push((k.to_owned(), v));
    }
    if pairs.is_empty() {
        bail!("a result without a figure");
    }
    let (metric, value) = pairs.remove(0);
    if let Some(w) = crate::catalog::workload(&workload)
        && w.metric != metric
        && w.marked != Some(metric.as_str())
    {
        bail!("{workload}'s figure is {}=, not {metric}=", w.metric);
    }
    Ok(Sample { workload, rep, metric, value, extra: pairs.into_iter().collect() })
}

// --- testguest's audio step (the distributor experiment) ---

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A console as a full run under armhv prints it (values are illustrative).
    pub(crate) const SAMPLE: &str = "\
[   0.000000 armhv INFO  cpu0] armhv 0.1.0 at EL2, 2 CPU(s), 2048 MiB RAM
[   0.031250 armhv INFO  cpu0] bench: 2 vCPU(s) on CPU(s) [0, 1], 32 MiB RAM at 0x40000000, entry 0x40080000
[   0.046875 armhv INFO  cpu0] partner: 1 vCPU(s) on CPU(s) [0], 32 MiB RAM at 0x40000000, entry 0x40080000
[bench] vmbench: boot cpus=2 clock=pmu freq=1000000000 armhv=yes el=1
[partner] vmbench: boot cpus=1 clock=cntvct freq=62500000 armhv=yes el=1
[partner] vmbench: overhead unit=ticks 0
[bench] vmbench: overhead unit=cycles 3
[bench] vmbench: result hypercall unit=cycles n=100000 min=96 median=96 mean=96.4 max=130
[bench] vmbench: result hypercall-psci-version unit=cycles n=100000 min=131 median=131 mean=131.0 max=160
[bench] vmbench: result gic-trap unit=cycles n=100000 min=212 median=214 mean=214.7 max=260 exits-per-op=1.00
[bench] vmbench: result ipi unit=ticks n=10000 min=40 median=44 mean=44.8 max=71
[bench] vmbench: result eoi unit=cycles n=100000 min=9 median=9 mean=9.0 max=9 exits-per-op=0.00
[bench] vmbench: result io-out unit=cycles n=100000 min=233 median=240 mean=241.2 max=300 exits-per-op=1.00
[bench] vmbench: result io-in unit=cycles n=10000 min=800 median=812 mean=820.5 max=1200
[bench] vmbench: result io-roundtrip unit=cycles n=10000 min=1300 median=1322 mean=1330.0 max=1800
[bench] vmbench: result vmswitch unit=cycles n=10000 min=1020 median=1024 mean=1030.1 max=1400
[bench] vmbench: done
[   9.500000 armhv INFO  cpu0] bench: powered off by the guest (exits 134081, hypercalls 44010)
[partner] vmbench: partner done
[   9.600000 armhv INFO  cpu0] partner: powered off by the guest (exits 297049)
[   9.700000 armhv INFO  cpu0] ws-breakdown: hypercall n=100021 gp=34.0 fpsimd=0.0 el1=0.0 vgic=12.0 timer=0.0 el2=6.0 stage2=0.0 other=28.0 total=80.0
[   9.700001 armhv INFO  cpu0] ws-breakdown: vm-switch n=20002 gp=68.0 fpsimd=4.0 el1=180.5 vgic=44.0 timer=22.0 el2=16.0 stage2=12.0 other=300.2 total=646.7
[   9.800000 armhv INFO  cpu0] all VMs have stopped (12 KiB of heap in use): powering off
";

    #[test]
    fn parses_a_full_console() {
        let c = parse_console(SAMPLE).unwrap();
        let b = c.vm("bench").unwrap();
        assert!(b.done);
        assert_eq!(
            b.boot,
            Some(Boot {
                cpus: 2,
                clock: "pmu".into(),
                freq: 1_000_000_000,
                armhv: true,
                el: 1,
                cntfrq: None
            })
        );
        assert_eq!(b.overhead, Some((Unit::Cycles, 3)));
        assert_eq!(b.results.len(), 9);
        let h = b.result("hypercall").unwrap();
        assert_eq!((h.unit, h.n, h.min, h.median, h.max), (Unit::Cycles, 100_000, 96, 96, 130));
        assert_eq!(h.mean, 96.4);
        assert_eq!(h.exits_per_op, None);
        assert_eq!(b.result("eoi").unwrap().exits_per_op, Some(0.0));
        assert_eq!(b.result("ipi").unwrap().unit, Unit::Ticks);
        // The PMU's nominal rate is not the ticks' rate.
        assert_eq!(b.boot.as_ref().unwrap().tick_freq(), QEMU_VIRT_CNTFRQ);
        let p = c.vm("partner").unwrap();
        assert!(!p.done && p.results.is_empty());
        assert_eq!(p.overhead, Some((Unit::Ticks, 0)));
        let with = parse_console(
            "[bench] vmbench: boot cpus=2 clock=pmu freq=1000000000 armhv=yes el=1 cntfrq=100000000\n",
        )
        .unwrap();
        assert_eq!(with.vm("bench").unwrap().boot.as_ref().unwrap().tick_freq(), 100_000_000);
        assert_eq!(c.breakdown.len(), 2);
        let hb = &c.breakdown[0];
        assert_eq!((hb.path.as_str(), hb.n, hb.total), ("hypercall", 100_021, 80.0));
        assert_eq!(hb.class("gp"), Some(34.0));
        assert_eq!(hb.classes.len(), 8);
        assert_eq!(hb.classes[7], ("other".to_string(), 28.0));
        assert_eq!(c.breakdown[1].class("el1"), Some(180.5));
    }

    #[test]
    fn skips_and_untagged_lines() {
        let c = parse_console(
            "vmbench: boot cpus=1 clock=cntvct freq=24000000 armhv=no el=1\n\
             vmbench: skip gic-trap: not under armhv\n\
             vmbench: skip io-in: no virtio-rng device\n\
             vmbench: done\n",
        )
        .unwrap();
        let v = c.vm("").unwrap();
        assert!(v.done);
        assert!(!v.boot.as_ref().unwrap().armhv);
        assert_eq!(v.boot.as_ref().unwrap().tick_freq(), 24_000_000);
        assert_eq!(v.skip("io-in").unwrap().reason, "no virtio-rng device");
        assert_eq!(v.skips.len(), 2);
    }

    #[test]
    fn armhv_log_lines_are_not_vm_tags() {
        let c = parse_console("[   0.939018 armhv INFO  cpu0] vmbench: done\n").unwrap();
        assert!(!c.vms.contains_key("   0.939018 armhv INFO  cpu0"));
        assert!(c.vms.is_empty());
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_line() {
        for bad in [
            "[bench] vmbench: result hypercall unit=cycles n=10 min=1 median=x mean=1.0 max=1",
            "[bench] vmbench: result hypercall unit=furlongs n=10 min=1 median=1 mean=1.0 max=1",
            "[bench] vmbench: result hypercall unit=cycles n=10 min=1 mean=1.0 max=1",
            "[bench] vmbench: boot cpus=2 clock=pmu freq=62500000 armhv=maybe el=1",
            "[x] ws-breakdown: hypercall n=1 gp=1.0 total",
        ] {
            let e = format!("{:#}", parse_console(&format!("ok\n{bad}\n")).unwrap_err());
            assert!(e.contains("console line 2"), "{e}");
        }
        let twice = "[bench] vmbench: result eoi unit=cycles n=1 min=1 median=1 mean=1.0 max=1\n";
        assert!(parse_console(&format!("{twice}{twice}")).is_err());
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
        let a = last_audio(console, "rt").unwrap();
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
        assert_eq!(last_audio("[rt] testguest: done\n", "rt"), None);
    }
}
