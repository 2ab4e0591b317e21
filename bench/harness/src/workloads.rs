//! The application workloads' runs: one Linux guest (Debian's kernel, `scripts/linux-guest.sh
//! --bench`'s initramfs) runs `armhv-bench` natively on plain QEMU and under armhv as VM
//! `linux0` of `configs/bench/workloads.toml`, with `linux1` serving the network tests over
//! armhv's switch; then each side's figures are summarized and normalized to native's
//! (`bench/README.md`, "Application workloads").
//!
//! The real-I/O workloads (issue 15) see the same devices on both sides: a disk on a partition
//! of the machine disk under armhv is natively an image file of the partition's size, attached
//! the same way (`xtask::qemu::machine_disk_args`); the NIC on the uplink's network under armhv
//! is natively QEMU's own NIC, with the same MAC, on the same user network and `hostfwd`s, and
//! a client on the host (`hostio`) measures through them.

use crate::catalog::{self, ARMHV, CLIENT_VM, NATIVE, SERVER_VM, UPLINK_PORTS, WORKLOADS};
use crate::configtext::{absolute_paths, rewrite_cmdline};
use crate::convert::Mode;
use crate::hostio::{self, Window};
use crate::model::{Kind, Run, Stats, Summary};
use crate::options::{Options, Step};
use crate::parse::{Failure, Output, Sample};
use crate::runlog::{console_tail, host_load, rel, run_error};
use anyhow::{Context, Result, anyhow, bail};
use std::io::{Read, Write};
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
                clock: w.map(|w| w.clock),
                native: n,
                armhv: a,
                normalized: norm,
                normalized_best: best,
            }
        })
        .collect()
}

/// The client VM's real-I/O devices, as the config gives them: its disk on a partition of the
/// machine disk and its NIC on the network whose uplink is the machine's NIC.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RealIo {
    /// The partition's size in bytes.
    pub mdisk: Option<u64>,
    /// The NIC's MAC.
    pub uplink_mac: Option<[u8; 6]>,
}

impl RealIo {
    /// `vm`'s, in `cfg`. The guest tells the machine-disk disk from its RAM disk by size, so the
    /// sizes must differ and be whole MiB.
    pub fn of(cfg: &vmconfig::Config, vm: &str) -> Result<Self> {
        let index =
            cfg.vms.iter().position(|v| v.name == vm).ok_or_else(|| anyhow!("no VM {vm}"))?;
        let parts = cfg.partition_disks().map_err(|e| anyhow!("{e}"))?;
        let mdisk = parts.iter().find(|p| p.vm == index).map(|p| p.capacity);
        if let Some(bytes) = mdisk {
            let others = cfg.vms[index].disks.iter().filter(|d| d.partition.is_none());
            if bytes % (1 << 20) != 0 || others.clone().any(|d| d.size == Some(bytes)) {
                bail!(
                    "{}: VM {vm}'s disk on a partition must be a whole number of MiB and differ \
                     in size from its other disks (the guest finds it by its size)",
                    cfg.path.display()
                );
            }
        }
        let uplink_mac = cfg
            .uplink()
            .and_then(|net| cfg.vms[index].nics.iter().find(|n| n.network == net).map(|n| n.mac));
        Ok(Self { mdisk, uplink_mac })
    }

    /// armhv-bench's options for them.
    pub fn words(&self) -> Vec<String> {
        let mut words = Vec::new();
        if let Some(bytes) = self.mdisk {
            words.extend(["--mdisk".to_owned(), (bytes >> 20).to_string()]);
        }
        if let Some(mac) = self.uplink_mac {
            words.extend(["--uplink".to_owned(), mac_text(mac)]);
        }
        words
    }
}

/// `52:54:00:a5:be:01`, as Linux shows a NIC's address.
pub fn mac_text(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

/// How the guest is asked to run the workloads: `armhv.run=armhv-bench,...` (commas become
/// spaces in /init). `server`: the peer's address under armhv, `None` natively (loopback);
/// `seconds`: the network tests' duration, if not armhv-bench's default.
pub fn run_parameter(
    server: Option<&str>,
    reps: u32,
    seconds: Option<u32>,
    io: &RealIo,
    workloads: &[String],
) -> String {
    let mut words = vec!["armhv-bench".to_owned()];
    match server {
        Some(addr) => words.extend(["--peer".to_owned(), addr.to_owned()]),
        None => words.push("--local".to_owned()),
    }
    words.extend(["--reps".to_owned(), reps.to_string()]);
    if let Some(s) = seconds {
        words.extend(["--seconds".to_owned(), s.to_string()]);
    }
    words.extend(io.words());
    // The guest marks the windows of the workloads it drives whose figure is a cost.
    let marked = |w: &String| {
        catalog::workload(w.split(':').next().unwrap_or(w)).is_some_and(|w| w.marked.is_some())
    };
    if workloads.iter().any(marked) {
        words.push("--marks".to_owned());
    }
    words.extend(workloads.iter().cloned());
    format!("armhv.run={}", words.join(","))
}

/// The host ports for [`UPLINK_PORTS`]: (host, guest), free a moment ago.
pub fn uplink_forwards() -> Result<Vec<(u16, u16)>> {
    UPLINK_PORTS.iter().map(|&guest| Ok((xtask::hostnet::free_port()?, guest))).collect()
}

/// What a native run attaches besides the RAM disk's stand-in: the machine disk's image file
/// and the uplink's NIC (with the MAC of the VM's NIC on the uplink network).
#[derive(Clone, Debug, Default)]
pub struct NativeIo {
    pub machine_disk: Option<PathBuf>,
    pub nic: Option<(xtask::Uplink, [u8; 6])>,
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
/// armhv's), and `io`. The same QEMU machine on both sides matters under TCG: on `-smp 4 -m 2G`
/// instead of `-smp 2 -m 256M` the same kernel ran the CPU job about 25 % slower, which would
/// count as armhv's overhead.
pub fn native_command(
    machine: &MachineSpec,
    vm: &vmconfig::VmConfig,
    run: &str,
    disk: Option<&Path>,
    io: &NativeIo,
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
    if let Some(file) = &io.machine_disk {
        cmd.args(qemu::machine_disk_args(file, false));
    }
    if let Some((uplink, mac)) = &io.nic {
        let mut args = uplink.qemu_args();
        args[3] = format!("{},mac={}", args[3], mac_text(*mac));
        cmd.args(args);
    }
    if vm.devices.contains(&vmconfig::DeviceKind::VirtioRng) {
        cmd.args(["-device", "virtio-rng-device"]);
    }
    Ok(cmd)
}

/// How often a run's console is looked at for the guest's marks and requests.
const POLL: Duration = Duration::from_millis(50);

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
    let io = RealIo::of(&cfg, CLIENT_VM)?;
    let forwards = if io.uplink_mac.is_some() { uplink_forwards()? } else { Vec::new() };
    let bench_dir = xtask::build_dir().join("bench");
    std::fs::create_dir_all(&bench_dir)?;
    for r in [Some(&client.kernel), client.initrd.as_ref()].into_iter().flatten() {
        if let vmconfig::ImageRef::Path(p) = r
            && !p.exists()
        {
            bail!("{} is missing: run {ASSETS_HINT}", rel(p));
        }
    }
    let reps = if opts.quick { 1 } else { opts.reps };
    let icount = step.mode != Mode::WallClock;
    let cost = step.mode == Mode::Cost;
    // QEMU's count of the machine's instructions, for the cost runs.
    let qmp = cost.then(|| bench_dir.join(format!("{}.qmp", step.variant)));
    if let Some(p) = &qmp {
        let _ = std::fs::remove_file(p);
    }
    let host = || {
        let vm = (step.variant != NATIVE).then_some(CLIENT_VM);
        let host = hostio::Host::new(vm, &forwards);
        match &qmp {
            Some(p) => host.with_qmp(p.clone()),
            None => host,
        }
    };
    let names = catalog::on_clock(&opts.workloads, step.mode, reps);
    let seconds = (step.mode == Mode::Icount).then_some(catalog::ICOUNT_NET_SECONDS);
    // Under icount QEMU runs every CPU on one host thread, a few times slower in host time
    // when other QEMUs share the host.
    let timeout = if icount { opts.timeout * 2 } else { opts.timeout };
    let load_before = host_load();
    let (console, seconds, command, done, windows) = if step.variant == NATIVE {
        // Zeros, as armhv's RAM disk; created again for every run.
        let zeros = |name: &str, size: u64| -> Result<PathBuf> {
            let path = bench_dir.join(name);
            let _ = std::fs::remove_file(&path);
            let f = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            f.set_len(size)?;
            Ok(path)
        };
        let disk = match client.disks.iter().find(|d| d.partition.is_none()) {
            Some(d) => Some(zeros("native-disk.img", d.size.unwrap_or(64 << 20))?),
            None => None,
        };
        // The machine disk's partition as a file of its own: sparse at the start of every run,
        // as the armhv run's machine disk (see below).
        let native_io = NativeIo {
            machine_disk: io
                .mdisk
                .map(|size| zeros("native-machine-disk.img", size))
                .transpose()?,
            nic: io.uplink_mac.map(|mac| (xtask::Uplink { hostfwd: forwards.clone() }, mac)),
        };
        let param = run_parameter(None, reps, seconds, &io, &names);
        let mut cmd = native_command(&armhv_machine, client, &param, disk.as_deref(), &native_io)?;
        match step.mode {
            Mode::Icount => _ = cmd.args(qemu::ICOUNT_ARGS),
            Mode::Cost => _ = cmd.args(qemu::ICOUNT_SLEEP_ARGS),
            Mode::WallClock => {}
        }
        if let Some(p) = &qmp {
            cmd.args(qemu::qmp_args(p));
        }
        let line = qemu::command_line(&cmd);
        let mut host = host();
        let (console, seconds, done) = run_native(cmd, timeout, &mut host)?;
        (console, seconds, line, done, host.windows().to_vec())
    } else {
        let server = vm(SERVER_VM)?;
        let addr = vm_address(&server.cmdline).ok_or_else(|| {
            anyhow!("{}: VM {SERVER_VM} has no armhv.ip= in its cmdline", rel(config_path))
        })?;
        let param = run_parameter(Some(addr), reps, seconds, &io, &names);
        let text = std::fs::read_to_string(config_path)?;
        let dir = config_path.parent().unwrap_or(Path::new("."));
        let dir =
            if dir.is_absolute() { dir.to_owned() } else { std::env::current_dir()?.join(dir) };
        let text = rewrite_cmdline(&absolute_paths(&text, &dir), CLIENT_VM, &param)?;
        let copy: PathBuf = xtask::build_dir().join("bench").join("workloads-run.toml");
        std::fs::create_dir_all(copy.parent().unwrap())?;
        std::fs::write(&copy, text)?;
        let mut machine =
            MachineSpec { icount, icount_sleep: cost, qmp: qmp.clone(), ..armhv_machine.clone() };
        // A machine disk of its own, laid out afresh for every run (its partition sparse, as
        // the native run's file), and the uplink with the same forwards as natively.
        let machine_disk = bench_dir.join("machine-disk.img");
        let _ = std::fs::remove_file(&machine_disk);
        let copy_cfg = vmconfig::load(&copy, &armhv_machine.as_config_machine())
            .map_err(|e| anyhow!("{e}"))?;
        machine.machine_disk = xtask::disk::machine_disk_for(&copy_cfg, &machine_disk)?;
        if io.uplink_mac.is_some() {
            machine.uplink = Some(xtask::Uplink { hostfwd: forwards.clone() });
        }
        let img = image::build(&copy, &machine)?;
        let cmd = qemu::command(&img, &machine);
        let line = qemu::command_line(&cmd);
        let start = Instant::now();
        let mut q = qemu::Run::start(&img, &machine)?;
        let mut host = host();
        let waited = expect_serving(&mut q, &format!("[{CLIENT_VM}] {DONE}"), timeout, &mut host);
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
        (console, seconds, line, done, host.windows().to_vec())
    };
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    let tail = || console_tail(&console, log);
    let vm_tag = (step.variant != NATIVE).then_some(CLIENT_VM);
    let mut out = Output::parse(&console, vm_tag).with_context(tail)?;
    out.round = step.round;
    out.host_load = load_before.zip(host_load());
    if cost {
        apply_windows(&mut out, &windows);
    }
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
        tablev: None,
        paths: None,
        gic: armhv_machine.gic,
        not_run: None,
    })
}

/// The figures of the workloads the guest drives in a cost run (the disks'): each marked
/// repetition's instructions per MiB, from the host's `windows` and the MiB of its result
/// line, which stays beside them (`mib_s` is then on a clock that runs at the host's pace while
/// the guest waits). A repetition without its window's count becomes a failure.
pub fn apply_windows(out: &mut Output, windows: &[Window]) {
    let mut kept = Vec::new();
    for s in std::mem::take(&mut out.samples) {
        let marked = catalog::workload(&s.workload).filter(|w| w.marked == Some(&s.metric));
        let Some(w) = marked else {
            kept.push(s);
            continue;
        };
        let window = windows.iter().find(|x| x.workload == s.workload && x.rep == s.rep);
        let fail = |why: String| Failure { workload: s.workload.clone(), rep: s.rep, message: why };
        match (window.map(|x| &x.instructions), s.extra.get("mib").copied()) {
            (Some(Ok(n)), Some(mib)) if mib > 0.0 => {
                let mut extra = s.extra.clone();
                extra.insert(s.metric.clone(), s.value);
                extra.insert("instructions".to_owned(), *n as f64);
                let value = *n as f64 / mib;
                kept.push(Sample { metric: w.metric.to_owned(), value, extra, ..s });
            }
            (Some(Err(e)), _) => out.failures.push(fail(format!("its instructions: {e}"))),
            (None, _) => out.failures.push(fail(
                "no marked window for it on the console (armhv-bench --marks)".to_owned(),
            )),
            (Some(Ok(_)), _) => out.failures.push(fail("no mib= in its result".to_owned())),
        }
    }
    out.samples = kept;
}

/// Waits for `pattern` on `q`'s console as [`qemu::Run::expect`] does, serving the guest's
/// requests to the host (`host`) meanwhile.
fn expect_serving(
    q: &mut qemu::Run,
    pattern: &str,
    timeout: Duration,
    host: &mut hostio::Host,
) -> Result<()> {
    let start = Instant::now();
    loop {
        // Short steps: a guest that marked a window waits, idle, for its go (and the idle
        // time after a closing mark, until the count is read, falls inside the window).
        let step = timeout.saturating_sub(start.elapsed()).min(POLL);
        let waited = q.expect(pattern, step);
        let output = q.output();
        let over = start.elapsed() >= timeout
            || q.wait_exit(Duration::ZERO).is_ok()
            || qemu::FAILURE_PATTERNS.iter().any(|p| output.contains(p));
        if waited.is_ok() || over {
            return waited;
        }
        for _ in 0..host.poll(&output) {
            q.send("\n")?;
        }
    }
}

/// Runs a native QEMU until the guest prints [`DONE`] and powers off, or `timeout`, serving the
/// guest's requests to the host (`host`) meanwhile. Returns the console, the seconds it ran,
/// and whether `done` appeared (else why not).
fn run_native(
    mut cmd: Command,
    timeout: Duration,
    host: &mut hostio::Host,
) -> Result<(String, f64, std::result::Result<(), String>)> {
    // stdin: the guest's console input, for the goes of its marked windows.
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().context("could not start qemu-system-aarch64")?;
    let mut input = child.stdin.take().context("QEMU's stdin")?;
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
        let console = output.lock().unwrap().replace('\r', "");
        for _ in 0..host.poll(&console) {
            input.write_all(b"\n").context("writing to QEMU's serial input")?;
        }
        let now = Instant::now();
        if done_at.is_none() && console.contains(DONE) {
            done_at = Some(now);
        }
        if now >= deadline || done_at.is_some_and(|t| now >= t + GRACE) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(POLL);
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
