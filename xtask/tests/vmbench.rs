//! vmbench (guests/vmbench) booted directly on QEMU's `virt` board, no hypervisor: every
//! benchmark prints a result or says why it is skipped, and the run ends by itself. Then under
//! armhv with deterministic timing: completion costs no exits, armhv's I/O stamps are used, and
//! two runs print the same numbers.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Generous: QEMU TCG on a loaded 2-core machine.
const TIMEOUT: Duration = Duration::from_secs(180);

/// Builds vmbench and writes it as a flat arm64 Image, once per test process; returns its path.
fn vmbench_image() -> PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(build_image).clone()
}

fn build_image() -> PathBuf {
    let elf = xtask::cargo_build("vmbench", xtask::GUEST_TARGET).expect("building vmbench");
    let flat = xtask::elf::flatten(&std::fs::read(elf).unwrap()).expect("flattening vmbench");
    let dir = xtask::build_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vmbench-test.img");
    std::fs::write(&path, flat.bytes).unwrap();
    path
}

/// Runs `image` on plain QEMU (EL1, no EL2) with `bootargs` until it powers off; returns the
/// console output. Fails on a timeout or an unsuccessful exit.
fn run_plain(image: &Path, bootargs: &str) -> String {
    let mut cmd = Command::new("qemu-system-aarch64");
    cmd.args(["-M", "virt,gic-version=3", "-cpu", "cortex-a76", "-smp", "2", "-m", "256M"])
        // QEMU's virtio-mmio transports are legacy (version 1) unless told otherwise.
        .args(["-global", "virtio-mmio.force-legacy=false", "-device", "virtio-rng-device"])
        .arg("-kernel")
        .arg(image)
        .args(["-append", bootargs]);
    run(cmd)
}

/// Runs QEMU until it exits by itself; returns the console output.
fn run(mut cmd: Command) -> String {
    let mut child = cmd
        .args(["-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting qemu-system-aarch64");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        String::from_utf8_lossy(&out).replace('\r', "")
    });
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("vmbench still running after {TIMEOUT:?}:\n{}", reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.success(), "QEMU exit status {status}:\n{out}\n{err}");
    out
}

/// The `vmbench: result <name> ...` line, if any.
fn result_line<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!("vmbench: result {name} ");
    out.lines().find(|l| l.contains(&needle))
}

/// The value of `key=` in a result line.
fn field(line: &str, key: &str) -> u64 {
    let prefix = format!("{key}=");
    let word = line.split(' ').find_map(|w| w.strip_prefix(&prefix));
    word.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no integer {key}= in {line:?}"))
}

#[test]
fn vmbench_on_plain_qemu() {
    let image = vmbench_image();
    let out = run_plain(&image, "n=200 warmup=20");
    assert!(!out.contains("PANIC"), "{out}");
    let boot = out.lines().find(|l| l.starts_with("vmbench: boot ")).expect(&out);
    assert!(boot.contains(" cpus=2 ") && boot.ends_with(" armhv=no el=1"), "{boot}\n{out}");
    assert!(boot.contains(" clock=pmu ") || boot.contains(" clock=cntvct "), "{boot}");
    assert!(out.lines().any(|l| l.starts_with("vmbench: overhead unit=")), "{out}");

    let names = [
        "hypercall",
        "hypercall-psci-version",
        "gic-trap",
        "ipi",
        "eoi",
        "io-out",
        "io-in",
        "io-roundtrip",
    ];
    // The benchmarks that may skip on plain QEMU, and the one reason each may give: they time
    // with armhv's I/O stamps, which only armhv provides. Any other skip (a missing device, a
    // CPU that did not start, a GIC not found) means a benchmark never ran, so it fails here
    // rather than pass with nothing measured.
    const SKIPS: [(&str, &str); 2] =
        [("io-out", "not armhv (no ARMHV_IO_STAMPS)"), ("io-in", "not armhv (no ARMHV_IO_STAMPS)")];
    for name in names {
        let skipped = out.lines().find_map(|l| l.strip_prefix(&format!("vmbench: skip {name}: ")));
        let allowed = SKIPS.iter().find(|(n, _)| *n == name).map(|(_, why)| *why);
        match (result_line(&out, name), skipped, allowed) {
            (Some(line), None, None) => {
                assert_eq!(field(line, "n"), 200, "{line}");
                assert!(field(line, "min") <= field(line, "max"), "{line}");
            }
            (None, Some(reason), Some(why)) => assert_eq!(reason.trim(), why, "{name}\n{out}"),
            (_, Some(reason), None) => panic!("{name} did not run on plain QEMU: {reason}\n{out}"),
            _ => {
                panic!("{name}: expected exactly one result line (or its one allowed skip):\n{out}")
            }
        }
    }
    assert!(result_line(&out, "io-roundtrip").is_some(), "{out}");
    assert!(result_line(&out, "ipi").is_some(), "2 CPUs: ipi must run\n{out}");
    assert!(!result_line(&out, "eoi").unwrap().contains("exits-per-op"), "{out}");

    let hypercall = result_line(&out, "hypercall").expect(&out);
    let (min, median, max) =
        (field(hypercall, "min"), field(hypercall, "median"), field(hypercall, "max"));
    assert!(min <= median && median <= max, "{hypercall}");
    assert!(out.contains("vmbench: done"), "{out}");
}

#[test]
fn vmbench_parameters_and_unknown_names() {
    let image = vmbench_image();
    let out = run_plain(&image, "n=3 warmup=0 gic-trap bogus vmswitch");
    assert!(!out.contains("PANIC"), "{out}");
    assert_eq!(field(result_line(&out, "gic-trap").expect(&out), "n"), 3, "{out}");
    assert!(result_line(&out, "hypercall").is_none(), "only the named benchmarks run:\n{out}");
    assert!(out.contains("vmbench: skip bogus: unknown benchmark"), "{out}");
    assert!(out.contains("vmbench: skip vmswitch: not armhv"), "{out}");
    assert!(out.contains("vmbench: done"), "{out}");
}

/// Under armhv (cycle-exact `-icount`, one VM of 2 vCPUs on 2 CPUs with a virtio-rng): armhv
/// answers, acknowledge + EOI costs no exits, io-out and io-in come from ARMHV_IO_STAMPS, and
/// a second run prints exactly the same lines.
#[test]
fn vmbench_under_armhv_is_deterministic() {
    let dir = xtask::build_dir().join("vmbench-test");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("vmbench-armhv.toml");
    std::fs::write(
        &config,
        r#"[[vm]]
name = "bench"
vcpus = 2
cpu_affinity = [0, 1]
memory_size = "32M"
kernel = "@vmbench"
cmdline = "n=300 warmup=30"
devices = ["pl011", "virtio-rng"]
pmu = "off"
"#,
    )
    .unwrap();
    let machine = xtask::MachineSpec { smp: 2, ..Default::default() };
    let image = xtask::image::build(&config, &machine).expect("building the boot image");
    let boot = || {
        let mut cmd = Command::new("qemu-system-aarch64");
        cmd.args(["-M", "virt,virtualization=on,gic-version=3,dtb-randomness=off"])
            .args(["-cpu", &machine.cpu, "-smp", "2", "-m", &format!("{}M", machine.mem_mib)])
            .args(["-icount", "shift=0,sleep=off"])
            .arg("-kernel")
            .arg(&image);
        let out = run(cmd);
        let lines: Vec<String> =
            out.lines().filter(|l| l.starts_with("[bench] vmbench:")).map(String::from).collect();
        (out, lines)
    };
    let (out, first) = boot();
    assert!(!out.contains("PANIC") && !out.contains("FATAL"), "{out}");
    let text = first.join("\n");
    assert!(text.contains(" armhv=yes el=1"), "{out}");
    let eoi = result_line(&text, "eoi").expect(&out);
    assert!(eoi.ends_with(" exits-per-op=0.00"), "completion must not trap: {eoi}");
    for name in ["hypercall", "gic-trap", "ipi", "io-out", "io-in", "io-roundtrip"] {
        assert!(result_line(&text, name).is_some(), "{name}:\n{out}");
    }
    assert!(text.contains("vmbench: done"), "{out}");
    let (_, second) = boot();
    assert_eq!(first, second, "two -icount runs differ");
}
