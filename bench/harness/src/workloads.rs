//! The application workloads: the study's application benchmarks, scaled to QEMU. One Linux
//! guest (Debian's kernel, `scripts/linux-guest.sh --bench`'s initramfs) runs
//! `guests/linux/bench/armhv-bench` twice: natively on plain QEMU (no EL2, no armhv), and under
//! armhv as VM `linux0` of `configs/bench/workloads.toml`, with `linux1` serving the network
//! tests over armhv's virtual switch. Both without icount: figures are the guest's clock, paced
//! by the host, so each workload is repeated and the median kept. The report gives armhv's
//! figure normalized to native's, 1.00 meaning no overhead.
//!
//! The guest prints, per repetition:
//!
//! ```text
//! armhv-bench: workload hackbench: /usr/local/bin/hackbench -P -g 2 -f 10 -l 100 -s 100
//! armhv-bench: result hackbench rep=1 seconds=2.674
//! armhv-bench: result tcp-rr rep=1 usec=935.360 mean_usec=1867.762 n=2673
//! armhv-bench: error iperf3 rep=2: iperf3: error - unable to connect to server
//! armhv-bench: done
//! ```
//!
//! Under armhv each line carries the VM's tag (`[linux0] armhv-bench: ...`).

use crate::parse::split_vm_tag;
use crate::results::{Kind, Run};
use crate::{Options, Step, rel};
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use xtask::{MachineSpec, image, qemu, root};

/// The VM that runs the workloads, and the one that serves the network tests.
pub const CLIENT_VM: &str = "linux0";
pub const SERVER_VM: &str = "linux1";
/// The variants of a workload run.
pub const NATIVE: &str = "native";
pub const ARMHV: &str = "armhv";
/// The line the client prints last.
pub const DONE: &str = "armhv-bench: done";
/// The guest assets the runs need (`scripts/linux-guest.sh --bench` builds them).
pub const ASSETS_HINT: &str = "scripts/linux-guest.sh --bench";

pub struct Workload {
    /// armhv-bench's name for it.
    pub name: &'static str,
    /// The report's row name.
    pub row: &'static str,
    /// The key of its figure in the result line.
    pub metric: &'static str,
    /// The figure's unit, for the report.
    pub unit: &'static str,
    /// Throughput (more is better) rather than time or latency (less is better).
    pub higher_is_better: bool,
    /// Whether it talks over the network: natively over loopback within the one guest, under
    /// armhv between the two VMs.
    pub network: bool,
    /// What is run and measured.
    pub what: &'static str,
}

/// In the order armhv-bench runs them (the local ones first, while the server VM boots).
pub const WORKLOADS: &[Workload] = &[
    Workload {
        name: "hackbench",
        row: "Hackbench",
        metric: "seconds",
        unit: "s",
        higher_is_better: false,
        network: false,
        what: "rt-tests' hackbench with processes over Unix sockets: 2 groups of 10 senders and \
               10 receivers, each sender sending 100 messages of 100 bytes to every receiver \
               of its group (the study ran 100 groups and 500 loops on hardware); its own \
               `Time:`. Scheduler, IPI and wake-up heavy",
    },
    Workload {
        name: "cpu-job",
        row: "CPU-bound job (xz)",
        metric: "seconds",
        unit: "s",
        higher_is_better: false,
        network: false,
        what: "the build-like job, needing no compiler: 8 files of 512 KiB (the initramfs's \
               libraries, busybox and modules) compressed by Debian's `xz -3` in separate \
               processes, two at a time (`xargs -P 2`, like `make -j2` over 8 units); wall time \
               on the guest's clock",
    },
    Workload {
        name: "blk-write",
        row: "Block write (virtio-blk)",
        metric: "mib_s",
        unit: "MiB/s",
        higher_is_better: true,
        network: false,
        what: "4 passes of `dd if=/dev/zero of=/dev/vda bs=1M count=64 oflag=direct \
               conv=fsync`: direct 1 MiB writes through virtio-blk to a 64 MiB disk held in \
               memory (armhv's RAM disk; natively a host file with `cache=unsafe`)",
    },
    Workload {
        name: "blk-read",
        row: "Block read (virtio-blk)",
        metric: "mib_s",
        unit: "MiB/s",
        higher_is_better: true,
        network: false,
        what: "4 passes of `dd if=/dev/vda of=/dev/null bs=1M count=64 iflag=direct`: direct \
               1 MiB reads through virtio-blk",
    },
    Workload {
        name: "iperf3",
        row: "TCP stream (iperf3)",
        metric: "mbit_s",
        unit: "Mbit/s",
        higher_is_better: true,
        network: true,
        what: "`iperf3 -c SERVER -t 5 -O 1`: one TCP stream for 5 s after a first, omitted \
               second (slow start); the receiver's throughput",
    },
    Workload {
        name: "tcp-rr",
        row: "TCP request/response (sockperf)",
        metric: "usec",
        unit: "µs",
        higher_is_better: false,
        network: true,
        what: "`sockperf ping-pong --tcp -m 64 -t 5 --full-rtt`: one 64-byte message over a TCP \
               connection, echoed back by the server, then the next, for 5 s; the median full \
               round trip (netperf's TCP_RR is not in Debian main)",
    },
];

pub fn workload(name: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name == name)
}

pub fn all_names() -> Vec<String> {
    WORKLOADS.iter().map(|w| w.name.to_owned()).collect()
}

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

/// The host's one-minute load average.
pub(crate) fn host_load() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
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
    if let Some(w) = self::workload(&workload)
        && w.metric != metric
    {
        bail!("{workload}'s figure is {}=, not {metric}=", w.metric);
    }
    Ok(Sample { workload, rep, metric, value, extra: pairs.into_iter().collect() })
}

/// Median and spread of the repetitions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Self { n, median, min: v[0], max: v[n - 1] })
    }

    /// The best repetition: the most throughput, or the least time.
    pub fn best(&self, higher_is_better: bool) -> f64 {
        if higher_is_better { self.max } else { self.min }
    }

    /// (max - min) / median: the spread of the repetitions, relative.
    pub fn spread(&self) -> f64 {
        if self.median == 0.0 { 0.0 } else { (self.max - self.min) / self.median }
    }
}

/// armhv's figure normalized to native's as an overhead: armhv's time over native's, or native's
/// throughput over armhv's. 1.00 = no overhead, 1.25 = 25 % slower under armhv.
pub fn normalized(higher_is_better: bool, native: f64, armhv: f64) -> Option<f64> {
    let (num, den) = if higher_is_better { (native, armhv) } else { (armhv, native) };
    (den > 0.0 && num.is_finite()).then(|| num / den)
}

/// One row of the report: a workload's figures natively and under armhv.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub workload: String,
    pub metric: String,
    pub higher_is_better: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub native: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub armhv: Option<Stats>,
    /// [`normalized`] of the medians.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub normalized: Option<f64>,
    /// [`normalized`] of each side's best repetition (least time, most throughput): other load
    /// on the host only ever slows a run down, so the best of n is the least disturbed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub normalized_best: Option<f64>,
}

/// The rows for the workload runs among `runs`: the catalogue's workloads that either run
/// reported, then any other name.
pub fn summarize(runs: &[Run]) -> Vec<Summary> {
    // All rounds of a variant together.
    let out = |variant: &str| {
        let mine = || runs.iter().filter(|r| r.kind == Kind::Workload && r.variant == variant);
        let samples = mine().filter_map(|r| r.workloads.as_ref()).flat_map(|o| &o.samples);
        let samples: Vec<Sample> = samples.cloned().collect();
        mine().next().is_some().then(|| Output { samples, ..Output::default() })
    };
    let (native, armhv) = (out(NATIVE), out(ARMHV));
    let (native, armhv) = (native.as_ref(), armhv.as_ref());
    if native.is_none() && armhv.is_none() {
        return Vec::new();
    }
    let mut names: Vec<String> = Vec::new();
    for o in [native, armhv].into_iter().flatten() {
        for s in &o.samples {
            if !names.contains(&s.workload) {
                names.push(s.workload.clone());
            }
        }
    }
    let order = |n: &String| WORKLOADS.iter().position(|w| w.name == n).unwrap_or(usize::MAX);
    names.sort_by_key(order); // stable: unknown names keep their order, last
    names
        .into_iter()
        .map(|name| {
            let w = workload(&name);
            let stats = |o: Option<&Output>| o.and_then(|o| Stats::of(&o.values(&name)));
            let (n, a) = (stats(native), stats(armhv));
            let metric = w.map(|w| w.metric.to_owned()).unwrap_or_else(|| {
                [native, armhv]
                    .into_iter()
                    .flatten()
                    .flat_map(|o| &o.samples)
                    .find(|s| s.workload == name)
                    .map(|s| s.metric.clone())
                    .unwrap_or_default()
            });
            // Unknown workloads: a rate per second is a throughput.
            let higher = w.map_or(metric.ends_with("_s"), |w| w.higher_is_better);
            let (norm, best) = match (n, a) {
                (Some(n), Some(a)) => (
                    normalized(higher, n.median, a.median),
                    normalized(higher, n.best(higher), a.best(higher)),
                ),
                _ => (None, None),
            };
            Summary {
                workload: name,
                metric,
                higher_is_better: higher,
                native: n,
                armhv: a,
                normalized: norm,
                normalized_best: best,
            }
        })
        .collect()
}

/// How the guest is asked to run the workloads: `armhv.run=armhv-bench,...` (commas become
/// spaces in /init). `server`: the peer's address under armhv, `None` natively (loopback).
pub fn run_parameter(server: Option<&str>, reps: u32, workloads: &[String]) -> String {
    let mut words = vec!["armhv-bench".to_owned()];
    match server {
        Some(addr) => words.extend(["--peer".to_owned(), addr.to_owned()]),
        None => words.push("--local".to_owned()),
    }
    words.extend(["--reps".to_owned(), reps.to_string()]);
    words.extend(workloads.iter().cloned());
    format!("armhv.run={}", words.join(","))
}

/// The client's cmdline natively: the config's, without the armhv.* words that need armhv's
/// network or name another run, plus `run`.
pub fn native_cmdline(config_cmdline: &str, run: &str) -> String {
    let mut words: Vec<&str> = config_cmdline
        .split_whitespace()
        .filter(|w| !["armhv.ip=", "armhv.gw=", "armhv.run="].iter().any(|p| w.starts_with(p)))
        .collect();
    words.push(run);
    words.join(" ")
}

/// The address in a VM's `armhv.ip=ADDR/PREFIX`.
pub fn vm_address(cmdline: &str) -> Option<&str> {
    cmdline.split_whitespace().find_map(|w| w.strip_prefix("armhv.ip="))?.split('/').next()
}

/// Config text with every relative `kernel`, `initrd` and `image` path made absolute against
/// `dir` (the original's directory), so that a copy elsewhere still finds the files.
pub fn absolute_paths(text: &str, dir: &Path) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        let key = ["kernel", "initrd", "image"]
            .into_iter()
            .find(|k| t.strip_prefix(k).is_some_and(|r| r.trim_start().starts_with('=')));
        let value = key.and_then(|k| crate::string_value(line, k));
        match (key, value) {
            (Some(k), Some(v)) if !v.starts_with('@') && Path::new(v).is_relative() => {
                out.push_str(&format!("{k} = \"{}\"", dir.join(v).display()));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The machine the armhv run boots on: the config needs 4 CPUs (2 per VM) and 2 GiB.
pub fn armhv_machine(opts: &Options) -> MachineSpec {
    MachineSpec { cpu: opts.machine.cpu.clone(), smp: 4, mem_mib: 2048, ..MachineSpec::default() }
}

/// The native QEMU command line: the machine the armhv run boots (`machine`), its kernel
/// limited to the client VM's vCPUs and RAM (`maxcpus=`, `mem=`), and the VM's kernel, initrd,
/// cmdline, disk size and entropy device, with QEMU's own virtio-mmio devices (modern, as
/// armhv's). The same QEMU machine on both sides matters under TCG: on `-smp 4 -m 2G` instead
/// of `-smp 2 -m 256M` the same kernel ran the CPU job about 25 % slower, which would count as
/// armhv's overhead.
pub fn native_command(
    machine: &MachineSpec,
    vm: &vmconfig::VmConfig,
    run: &str,
    disk: Option<&Path>,
) -> Result<Command> {
    let path = |r: &vmconfig::ImageRef| match r {
        vmconfig::ImageRef::Path(p) => Ok(p.canonicalize().unwrap_or_else(|_| p.clone())),
        vmconfig::ImageRef::Built(n) => bail!("VM {}: @{n}: natively only files boot", vm.name),
    };
    let mut cmd = Command::new("qemu-system-aarch64");
    // dtb-randomness=off: no kaslr-seed in the device tree, as in the one armhv gives its
    // guests. With a seed Linux randomizes its base and so forces KPTI on, whose address-space
    // switch on every kernel entry flushes QEMU's TLBs: natively, hackbench took twice as
    // long as under armhv only because of that.
    cmd.args(["-M", "virt,gic-version=3,dtb-randomness=off", "-cpu", &machine.cpu])
        .args(["-smp", &machine.smp.to_string(), "-m", &format!("{}M", machine.mem_mib)])
        .arg("-kernel")
        .arg(path(&vm.kernel)?);
    if let Some(initrd) = &vm.initrd {
        cmd.arg("-initrd").arg(path(initrd)?);
    }
    let shape = format!("maxcpus={} mem={}M", vm.vcpus, vm.memory.size >> 20);
    cmd.args(["-append", &format!("{} {shape}", native_cmdline(&vm.cmdline, run))])
        .args(["-no-reboot", "-display", "none", "-serial", "stdio", "-monitor", "none"])
        .args(["-global", "virtio-mmio.force-legacy=false"]);
    if let Some(disk) = disk {
        cmd.args(["-device", "virtio-blk-device,drive=d0", "-drive"])
            .arg(format!("if=none,id=d0,format=raw,cache=unsafe,file={}", disk.display()));
    }
    if vm.devices.contains(&vmconfig::DeviceKind::VirtioRng) {
        cmd.args(["-device", "virtio-rng-device"]);
    }
    Ok(cmd)
}

/// How long QEMU may take to power off after the client's `done` (the server VM stops too).
const GRACE: Duration = Duration::from_secs(60);

/// Runs one workload step (native or armhv) and returns its record; the console goes to `log`.
pub fn run(step: &Step, opts: &Options, log: &Path) -> Result<Run> {
    let config_path = &opts.workloads_config;
    let armhv_machine = armhv_machine(opts);
    let cfg = vmconfig::load(config_path, &armhv_machine.as_config_machine())
        .map_err(|e| anyhow!("{e}"))?;
    let vm = |name: &str| {
        cfg.vms.iter().find(|v| v.name == name).ok_or_else(|| {
            anyhow!("{}: no VM named {name:?} (the workloads need it)", rel(config_path))
        })
    };
    let client = vm(CLIENT_VM)?;
    for r in [Some(&client.kernel), client.initrd.as_ref()].into_iter().flatten() {
        if let vmconfig::ImageRef::Path(p) = r
            && !p.exists()
        {
            bail!("{} is missing: run {ASSETS_HINT}", rel(p));
        }
    }
    let reps = if opts.quick { 1 } else { opts.reps };
    let load_before = host_load();
    let (console, seconds, command, done) = if step.variant == NATIVE {
        let disk = match client.disks.first() {
            Some(d) => {
                let path = xtask::build_dir().join("bench").join("native-disk.img");
                std::fs::create_dir_all(path.parent().unwrap())?;
                let size = d.size.unwrap_or(64 << 20);
                let f = std::fs::File::create(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
                f.set_len(size)?; // zeros, as armhv's RAM disk
                Some(path)
            }
            None => None,
        };
        let param = run_parameter(None, reps, &opts.workloads);
        let cmd = native_command(&armhv_machine, client, &param, disk.as_deref())?;
        let line = qemu::command_line(&cmd);
        let (console, seconds, done) = run_native(cmd, opts.timeout)?;
        (console, seconds, line, done)
    } else {
        let server = vm(SERVER_VM)?;
        let addr = vm_address(&server.cmdline).ok_or_else(|| {
            anyhow!("{}: VM {SERVER_VM} has no armhv.ip= in its cmdline", rel(config_path))
        })?;
        let param = run_parameter(Some(addr), reps, &opts.workloads);
        let text = std::fs::read_to_string(config_path)?;
        let dir = config_path.parent().unwrap_or(Path::new("."));
        let dir =
            if dir.is_absolute() { dir.to_owned() } else { std::env::current_dir()?.join(dir) };
        let text = crate::rewrite_cmdline(&absolute_paths(&text, &dir), CLIENT_VM, &param)?;
        let copy: PathBuf = xtask::build_dir().join("bench").join("workloads-run.toml");
        std::fs::create_dir_all(copy.parent().unwrap())?;
        std::fs::write(&copy, text)?;
        let img = image::build(&copy, &armhv_machine)?;
        let cmd = qemu::command(&img, &armhv_machine);
        let line = qemu::command_line(&cmd);
        let start = Instant::now();
        let mut q = qemu::Run::start(&img, &armhv_machine)?;
        let waited = q.expect(&format!("[{CLIENT_VM}] {DONE}"), opts.timeout);
        if waited.is_ok() {
            let _ = q.wait_exit(GRACE);
        }
        let seconds = start.elapsed().as_secs_f64();
        let console = q.output();
        drop(q);
        let done = match waited {
            Ok(()) => Ok(()),
            Err(e) => Err(crate::run_error(&e)),
        };
        (console, seconds, line, done)
    };
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    let tail = || crate::console_tail(&console, log);
    let vm_tag = (step.variant != NATIVE).then_some(CLIENT_VM);
    let mut out = Output::parse(&console, vm_tag).with_context(tail)?;
    out.round = step.round;
    out.host_load = load_before.zip(host_load());
    if let Err(why) = done {
        bail!("no `{DONE}`: {why}\n{}", tail());
    }
    if out.samples.is_empty() {
        bail!("armhv-bench reported no result\n{}", tail());
    }
    Ok(Run {
        kind: Kind::Workload,
        variant: step.variant.clone(),
        features: Vec::new(),
        mode: step.mode,
        seconds,
        figures: Vec::new(),
        skips: Vec::new(),
        overhead: None,
        console: Default::default(),
        qemu_command: command,
        workloads: Some(out),
        distributor: None,
    })
}

/// Runs a native QEMU until the guest prints [`DONE`] and powers off, or `timeout`. Returns
/// the console, the seconds it ran, and whether `done` appeared (else why not).
fn run_native(
    mut cmd: Command,
    timeout: Duration,
) -> Result<(String, f64, std::result::Result<(), String>)> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().context("could not start qemu-system-aarch64")?;
    let output = Arc::new(Mutex::new(String::new()));
    let readers: Vec<_> = [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ]
    .into_iter()
    .map(|mut stream| {
        let out = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                out.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    })
    .collect();
    let deadline = start + timeout;
    let mut done_at: Option<Instant> = None;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        let now = Instant::now();
        if done_at.is_none() && output.lock().unwrap().contains(DONE) {
            done_at = Some(now);
        }
        if now >= deadline || done_at.is_some_and(|t| now >= t + GRACE) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for r in readers {
        let _ = r.join();
    }
    let seconds = start.elapsed().as_secs_f64();
    let console = output.lock().unwrap().replace('\r', "");
    let done = if console.contains(DONE) {
        Ok(())
    } else {
        match status {
            Some(st) => Err(format!("QEMU exited ({st}) first")),
            None => Err(format!("timed out after {timeout:?}")),
        }
    };
    Ok((console, seconds, done))
}

/// The assets must exist before a run: built here, as `make bench` builds the others.
pub fn ensure_assets() -> Result<()> {
    let script = root().join("scripts/linux-guest.sh");
    let status = Command::new(&script)
        .arg("--bench")
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("{ASSETS_HINT} failed");
    }
    Ok(())
}
