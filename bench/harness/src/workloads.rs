//! The application workloads' runs: one Linux guest (Debian's kernel, `scripts/linux-guest.sh
//! --bench`'s initramfs) runs `armhv-bench` natively on plain QEMU and under armhv as VM
//! `linux0` of `configs/bench/workloads.toml`, with `linux1` serving the network tests over
//! armhv's switch; then each side's figures are summarized and normalized to native's
//! (`bench/README.md`, "Application workloads").

use crate::catalog::{self, ARMHV, CLIENT_VM, NATIVE, SERVER_VM, WORKLOADS};
use crate::configtext::{absolute_paths, rewrite_cmdline};
use crate::model::{Kind, Run, Stats, Summary};
use crate::options::{Options, Step};
use crate::parse::{Output, Sample};
use crate::runlog::{console_tail, host_load, rel, run_error};
use anyhow::{Context, Result, anyhow, bail};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use xtask::{MachineSpec, image, qemu, root};

/// The line the client prints last.
pub const DONE: &str = "armhv-bench: done";
/// The guest assets the runs need (`scripts/linux-guest.sh --bench` builds them).
pub const ASSETS_HINT: &str = "scripts/linux-guest.sh --bench";

/// armhv's figure normalized to native's as an overhead: armhv's time over native's, or native's
/// throughput over armhv's. 1.00 = no overhead, 1.25 = 25 % slower under armhv.
pub fn normalized(higher_is_better: bool, native: f64, armhv: f64) -> Option<f64> {
    let (num, den) = if higher_is_better { (native, armhv) } else { (armhv, native) };
    (den > 0.0 && num.is_finite()).then(|| num / den)
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
            let w = catalog::workload(&name);
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
        let text = rewrite_cmdline(&absolute_paths(&text, &dir), CLIENT_VM, &param)?;
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
            Err(e) => Err(run_error(&e)),
        };
        (console, seconds, line, done)
    };
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    let tail = || console_tail(&console, log);
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
