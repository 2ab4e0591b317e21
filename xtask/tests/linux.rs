//! Debian's stock arm64 kernel in armhv VMs, driven over the shared console. The guest assets
//! come from `scripts/linux-guest.sh` (run here if they are missing).

mod linux_guest;

use linux_guest::{BOOT_TIMEOUT, COMMAND_TIMEOUT, boot_on, root, run_command};
use std::path::Path;
use std::process::Command;
use xtask::MachineSpec;
use xtask::qemu::Run;

fn boot(cfg: &str, cpu: &str) -> Run {
    boot_on(cfg, MachineSpec::for_tests_on(cpu))
}

#[test]
fn stock_kernels_boot_smp_with_virtio_devices_and_talk() {
    let mut run = boot("tests/linux.toml", "cortex-a76");
    for (vm, cpus) in [("linux0", 2), ("linux1", 4)] {
        let up = format!("[{vm}] armhv-guest: up, {cpus} cpus, kernel 6.1");
        run.expect(&up, BOOT_TIMEOUT).unwrap();
    }
    run.expect("armhv-guest# ", COMMAND_TIMEOUT).unwrap();

    // Console input goes to VM 0 (linux0) until Ctrl-A switches.
    let out = run_command(&mut run, "grep -c ^processor /proc/cpuinfo");
    assert!(out.contains("[linux0] 2\n"), "expected 2 CPUs:\n{out}");
    // Spectre (docs/guest-abi.md, "Speculation"): armhv runs the branch-history loop on this
    // core's exits and says so at boot; the kernel, told WORKAROUND_1 is not required, finds
    // Spectre-v2 absent (CSV2) and clears the history itself on its own exception entries.
    run.expect(
        "speculation: Cortex-A76 (MIDR 0x414fd0b1): Spectre-v2 unaffected (CSV2), \
         Spectre-BHB: loop k=24 on exits",
        COMMAND_TIMEOUT,
    )
    .unwrap();
    let out = run_command(&mut run, "cat /sys/devices/system/cpu/vulnerabilities/spectre_v2");
    assert!(out.contains("[linux0] Mitigation: CSV2, BHB\n"), "spectre_v2:\n{out}");
    let before = run_command(&mut run, "cat /proc/interrupts");

    disk_pattern_reads_back(&mut run);

    // The network: linux0 pings linux1 through armhv's switch, with packets that need the
    // 9000-byte MTU the config gives lan0 (announced with VIRTIO_NET_F_MTU; linux1's receive
    // buffers are sized for it, or the replies would not arrive).
    let out = run_command(&mut run, "cat /sys/class/net/eth0/mtu");
    assert!(out.contains("[linux0] 9000"), "MTU:\n{out}");
    let out = run_command(&mut run, "ping -c 3 -W 5 -s 8000 10.0.0.2");
    assert!(out.contains("3 packets received"), "ping:\n{out}");

    interrupts_rose(&mut run, &before);
    let out = run_command(&mut run, "head -c 16 /dev/hwrng | wc -c");
    assert!(out.contains("[linux0] 16\n"), "virtio-rng:\n{out}");

    run.expect("[vm2] testguest: heartbeat 19", BOOT_TIMEOUT).unwrap();
    // Console statistics on demand: Ctrl-A s.
    let mark = run.mark();
    run.send("\x01s").unwrap();
    run.expect_since(mark, "console: vm 0 (linux0, running): exits", COMMAND_TIMEOUT).unwrap();
    run.expect_since(mark, "virtio-blk at", COMMAND_TIMEOUT).unwrap();

    // poweroff ends each VM cleanly and armhv reports it; Ctrl-A 1 moves input to linux1,
    // whose shell runs on hvc0: the command reaches it through virtio-console.
    let mark = run.mark();
    run.send("poweroff\n").unwrap();
    run.expect_since(mark, "linux0: powered off by the guest", COMMAND_TIMEOUT).unwrap();
    run.send("\x011").unwrap();
    // The whole output: the message may land before the mark, over a partial line it erases.
    run.expect("console: input goes to vm 1 (linux1)", COMMAND_TIMEOUT).unwrap();
    let out = run_command(&mut run, "tty");
    assert!(out.contains("[linux1] /dev/hvc0"), "linux1's shell on hvc0:\n{out}");
    let mark = run.mark();
    run.send("poweroff\n").unwrap();
    run.expect_since(mark, "linux1: powered off by the guest", COMMAND_TIMEOUT).unwrap();
    run.expect("all VMs have stopped", COMMAND_TIMEOUT).unwrap();
}

/// A GICv2 host (QEMU `gic-version=2`, a GIC-400's layout): Debian's kernel finds a GICv2 in
/// its device tree and drives it (the distributor emulated, the CPU interface the hardware's
/// virtual one), brings up its CPUs with IPIs, takes its timer, disk and network interrupts,
/// and pings the other VM across armhv's switch.
#[test]
fn stock_kernel_on_a_gicv2_host() {
    let mut run = boot("tests/linux.toml", "cortex-a72+gicv2");
    run.expect("interrupt controller: GICv2", BOOT_TIMEOUT).unwrap();
    for (vm, cpus) in [("linux0", 2), ("linux1", 4)] {
        let up = format!("[{vm}] armhv-guest: up, {cpus} cpus, kernel 6.1");
        run.expect(&up, BOOT_TIMEOUT).unwrap();
    }
    run.expect("armhv-guest# ", COMMAND_TIMEOUT).unwrap();
    let out = run_command(&mut run, "grep -c ^processor /proc/cpuinfo");
    assert!(out.contains("[linux0] 2\n"), "expected 2 CPUs:\n{out}");
    let before = run_command(&mut run, "cat /proc/interrupts");
    // Linux names a GICv2 interrupt chip "GIC-0" (a GICv3 one "GICv3").
    let timer = before.lines().find(|l| l.ends_with("arch_timer")).unwrap_or_default();
    assert!(timer.contains("GIC-0"), "the timer's interrupt chip:\n{before}");

    disk_pattern_reads_back(&mut run);
    let out = run_command(&mut run, "ping -c 3 -W 5 -s 8000 10.0.0.2");
    assert!(out.contains("3 packets received"), "ping:\n{out}");

    interrupts_rose(&mut run, &before);
    run.expect("[vm2] testguest: heartbeat 19", BOOT_TIMEOUT).unwrap();
    let mark = run.mark();
    run.send("poweroff\n").unwrap();
    run.expect_since(mark, "linux0: powered off by the guest", COMMAND_TIMEOUT).unwrap();
    run.send("\x011").unwrap();
    run.expect("console: input goes to vm 1 (linux1)", COMMAND_TIMEOUT).unwrap();
    let mark = run.mark();
    run.send("poweroff\n").unwrap();
    run.expect_since(mark, "linux1: powered off by the guest", COMMAND_TIMEOUT).unwrap();
    run.expect("all VMs have stopped", COMMAND_TIMEOUT).unwrap();
}

/// Linux's perf in a VM with a virtual PMU (issue 21, item 2): the kernel finds the PMU through
/// the device tree and probes it on every CPU (each access trapped and performed by armhv);
/// the driver registers its event source with PMCR_EL0.N event counters and the cycle
/// counter, and its overflow interrupt on PPI 7. Beside it, a bare-metal VM on one of its CPUs
/// counts its own work. (No `perf` tool in the initramfs: Debian ships it dynamically linked
/// against its libraries, and busybox has no applet for perf_event_open.)
fn perf_events_in_a_linux_vm(cpu: &str) {
    let mut run = boot("tests/linux-pmu.toml", cpu);
    run.expect("[linux0] armhv-guest: up, 2 cpus, kernel 6.1", BOOT_TIMEOUT).unwrap();
    run.expect("armhv-guest# ", COMMAND_TIMEOUT).unwrap();
    let out = run_command(&mut run, "dmesg | grep 'hw perfevents'");
    // QEMU's CPUs have 6 event counters: 7 with the cycle counter.
    assert!(
        out.contains("hw perfevents: enabled with armv8_pmuv3 PMU driver, 7 counters available"),
        "the kernel's PMU driver:\n{out}"
    );
    let out =
        run_command(&mut run, "cat /sys/bus/event_source/devices/armv8_pmuv3*/events/cpu_cycles");
    assert!(out.contains("[linux0] event=0x0011"), "perf's event source:\n{out}");
    let out = run_command(&mut run, "grep arm-pmu /proc/interrupts");
    let line = out.lines().find(|l| l.ends_with("arm-pmu")).unwrap_or_default();
    assert!(line.contains(" 23 ") && line.contains("Level"), "the overflow interrupt:\n{out}");
    run.expect("[vm1] testguest: pmu overflow interrupts 1 intid 23", BOOT_TIMEOUT).unwrap();
    let mark = run.mark();
    run.send("poweroff\n").unwrap();
    run.expect_since(mark, "linux0: powered off by the guest", COMMAND_TIMEOUT).unwrap();
    run.expect("all VMs have stopped", COMMAND_TIMEOUT).unwrap();
}

#[test]
fn perf_events_in_a_linux_vm_on_cortex_a76() {
    perf_events_in_a_linux_vm("cortex-a76");
}

#[test]
fn perf_events_in_a_linux_vm_on_cortex_a57() {
    perf_events_in_a_linux_vm("cortex-a57");
}

/// linux0's disk: a pattern written, the page cache dropped, read back from the device.
fn disk_pattern_reads_back(run: &mut Run) {
    let out = run_command(
        run,
        "echo armhv-disk-pattern | dd of=/dev/vda bs=512 conv=sync 2>/dev/null; sync; \
         echo 3 > /proc/sys/vm/drop_caches; dd if=/dev/vda bs=512 count=1 2>/dev/null | head -1",
    );
    assert!(out.contains("[linux0] armhv-disk-pattern"), "disk read-back:\n{out}");
}

/// linux0's interrupts counted up since `before` (its /proc/interrupts), across disk and
/// network traffic: the timer on both CPUs, the NIC (virtio0) and the disk (virtio1), in slot
/// order.
fn interrupts_rose(run: &mut Run, before: &str) {
    let after = run_command(run, "cat /proc/interrupts");
    for (name, cpus) in [("arch_timer", 2), ("virtio0", 1), ("virtio1", 1)] {
        let (a, b) = (interrupt_counts(before, name), interrupt_counts(&after, name));
        let rose = a.iter().zip(&b).filter(|(a, b)| b > a).count();
        assert!(rose >= cpus, "{name}: {a:?} -> {b:?}\nbefore:\n{before}\nafter:\n{after}");
    }
}

/// Per-CPU counts of the /proc/interrupts line whose action is `name`, e.g.
/// ` 12:   1507   1322   GICv3  27 Level   arch_timer`.
fn interrupt_counts(proc_interrupts: &str, name: &str) -> Vec<u64> {
    let line = proc_interrupts
        .lines()
        .find(|l| l.split_whitespace().last() == Some(name))
        .unwrap_or_else(|| panic!("no {name} in /proc/interrupts:\n{proc_interrupts}"));
    let fields = line.split_whitespace().skip_while(|f| !f.ends_with(':')).skip(1);
    fields.map_while(|c| c.parse().ok()).collect()
}

/// `make run`'s configuration, on the machine `make run` gives it (a NIC on QEMU user
/// networking, lan0's uplink): both Linux VMs reach their shell with an address from QEMU's
/// DHCP server, ping each other on lan0, and fetch a page from a server on the host.
#[test]
fn default_demo_reaches_two_shells_that_ping() {
    default_demo("cortex-a76");
}

/// The same on a GICv2 host (`make run GIC=2`): the machine's own NIC and disk interrupts
/// are targeted through GICD_ITARGETSR, the VMs' through their virtual GICv2.
#[test]
fn default_demo_on_a_gicv2_host() {
    default_demo("cortex-a72+gicv2");
}

fn default_demo(model: &str) {
    let server = xtask::hostnet::PayloadServer::start("armhv-demo-host-page").unwrap();
    let start = std::time::Instant::now();
    let machine =
        MachineSpec { uplink: Some(xtask::Uplink::default()), ..MachineSpec::for_tests_on(model) };
    let mut run = boot_on("default.toml", machine);
    for vm in ["linux0", "linux1"] {
        run.expect(&format!("[{vm}] armhv-guest: eth0 dhcp 10.0.2."), BOOT_TIMEOUT).unwrap();
        run.expect(&format!("[{vm}] armhv-guest: /dev/vda mounted at /data"), BOOT_TIMEOUT)
            .unwrap();
        run.expect(&format!("[{vm}] armhv-guest: up, 2 cpus"), BOOT_TIMEOUT).unwrap();
    }
    println!("both Linux VMs up after {:.1} s of wall time", start.elapsed().as_secs_f64());
    let out = run_command(&mut run, "ping -c 2 -W 5 10.0.0.2");
    assert!(out.contains("2 packets received"), "ping:\n{out}");
    let out = run_command(&mut run, &format!("wget -q -O - http://10.0.2.2:{}/", server.port));
    assert!(out.contains("[linux0] armhv-demo-host-page"), "wget from the host:\n{out}");
}

/// Waits for both VMs of configs/tests/linux-disk.toml to have /data mounted and a shell;
/// returns whether they made a filesystem on their disk on the way.
fn disks_mounted(run: &mut Run, mark: usize) -> bool {
    for vm in ["linux0", "linux1"] {
        let mounted = format!("[{vm}] armhv-guest: /dev/vda mounted at /data");
        run.expect_since(mark, &mounted, BOOT_TIMEOUT).unwrap();
    }
    run.expect_since(mark, "armhv-guest# ", COMMAND_TIMEOUT).unwrap();
    run.output_since(mark).contains("has no filesystem: making one")
}

/// `e2fsck -fn` on partition `name` of the machine disk `disk` (copied out first): its output,
/// and whether the filesystem checked clean.
fn fsck_partition(disk: &Path, name: &str) -> (bool, String) {
    use std::io::{Read, Seek, SeekFrom};
    let parts = machine_disk::read_file(disk).unwrap().expect("the machine disk exists");
    let part = parts.iter().find(|p| p.name == name).expect("the partition exists");
    let mut file = std::fs::File::open(disk).unwrap();
    file.seek(SeekFrom::Start(part.offset())).unwrap();
    let mut bytes = vec![0; part.size() as usize];
    file.read_exact(&mut bytes).unwrap();
    let copy = disk.with_extension(format!("{name}.fsck"));
    std::fs::write(&copy, &bytes).unwrap();
    let out = Command::new("e2fsck")
        .args(["-f", "-n"])
        .arg(&copy)
        .output()
        .expect("running e2fsck (scripts/setup.sh installs e2fsprogs)");
    let _ = std::fs::remove_file(&copy);
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Two VMs write their disks at once, on partitions of one machine disk; what they wrote
/// survives a VM reset, a VM power-off, and (once synced) QEMU killed with SIGKILL; both
/// filesystems then check clean, and the next boot finds everything.
#[test]
fn persistent_disks_survive_resets_power_offs_and_a_killed_machine() {
    let disk = root().join(format!("build/tests/linux-disk-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&disk);
    std::fs::create_dir_all(disk.parent().unwrap()).unwrap();
    let machine = MachineSpec {
        cpu: "cortex-a76".into(),
        machine_disk: Some(disk.clone()),
        ..MachineSpec::for_tests()
    };

    let mut run = boot_on("tests/linux-disk.toml", machine.clone());
    assert!(disks_mounted(&mut run, 0), "a new disk gets a filesystem:\n{}", run.output());
    // Both VMs write 8 MiB at once: linux0 in the background while linux1 writes. (Short
    // command lines: the shell's line editor garbles a line longer than the terminal.)
    let mark = run.mark();
    for vm in ["linux0", "linux1"] {
        run_command(&mut run, "cd /data");
        run_command(&mut run, "w() { dd if=/dev/urandom of=big bs=64k count=128; }");
        run_command(&mut run, "s() { md5sum big >big.md5 && sync; }");
        if vm == "linux0" {
            run_command(&mut run, "(w 2>/dev/null; s; echo linux0-wrote) & true");
            run.send("\x011").unwrap();
        }
    }
    run_command(&mut run, "w 2>/dev/null; s");
    run.expect_since(mark, "linux0-wrote\n", COMMAND_TIMEOUT).unwrap();

    // linux0 resets (PSCI SYSTEM_RESET): its disk keeps what it wrote.
    run.send("\x010").unwrap();
    run_command(&mut run, "echo kept-across-reset >note && sync");
    let mark = run.mark();
    run.send("reboot\n").unwrap();
    run.expect_since(mark, "[linux0] armhv-guest: /dev/vda mounted at /data", BOOT_TIMEOUT)
        .unwrap();
    run.expect_since(mark, "armhv-guest# ", COMMAND_TIMEOUT).unwrap();
    assert!(!run.output_since(mark).contains("making one"), "{}", run.output_since(mark));
    let out = run_command(&mut run, "cd /data; cat note; md5sum -c big.md5");
    assert!(out.contains("[linux0] kept-across-reset\n"), "{out}");
    assert!(out.contains("[linux0] big: OK"), "{out}");

    // linux0 powers off; linux1 writes, syncs, and the machine is killed mid-run.
    run.send("poweroff\n").unwrap();
    run.expect("linux0: powered off by the guest", COMMAND_TIMEOUT).unwrap();
    run.send("\x011").unwrap();
    run_command(&mut run, "echo synced-then-killed >note && sync");
    drop(run); // SIGKILL

    for name in ["linux0-data", "linux1-data"] {
        let (clean, out) = fsck_partition(&disk, name);
        assert!(clean, "{name} does not check clean:\n{out}");
    }

    let mut run = boot_on("tests/linux-disk.toml", machine);
    assert!(!disks_mounted(&mut run, 0), "the filesystems were kept:\n{}", run.output());
    for (n, vm, note) in [(0, "linux0", "kept-across-reset"), (1, "linux1", "synced-then-killed")] {
        run.send(&format!("\x01{n}")).unwrap();
        let out = run_command(&mut run, "cd /data; cat note; md5sum -c big.md5");
        assert!(out.contains(&format!("[{vm}] {note}\n")), "{out}");
        assert!(out.contains(&format!("[{vm}] big: OK")), "{out}");
    }
    drop(run);
    let _ = std::fs::remove_file(&disk);
}

/// One CPU model of the matrix: what its guest must find in /proc/cpuinfo's `Features` line
/// (features armhv shows) and must not (features it hides), and whether it has pointer
/// authentication.
struct Model {
    cpu: &'static str,
    /// /proc/cpuinfo's "CPU part" (MIDR_EL1.PartNum, the physical CPU's: errata workarounds).
    part: &'static str,
    features: &'static [&'static str],
    hidden: &'static [&'static str],
    pauth: bool,
}

/// Debian's kernel on `model`, in one VM whose two vCPUs share one physical CPU
/// (`configs/tests/linux-cpu.toml`): both CPUs come online, the model's features are there
/// and the hidden ones are not, a workload on both vCPUs completes, and, where the model has
/// pointer authentication, the guest uses it (`paca pacg`; its kernel signs its own return
/// addresses, with per-task keys, so a key left behind by the other vCPU would crash it) with
/// one key switch per vCPU load, not one per instruction (armhv's statistics).
fn linux_on(model: Model) {
    let start = std::time::Instant::now();
    let machine = MachineSpec { cpu: model.cpu.into(), smp: 2, ..MachineSpec::for_tests() };
    let mut run = boot_on("tests/linux-cpu.toml", machine);
    run.expect("[linux] armhv-guest: up, 2 cpus, kernel 6.1", BOOT_TIMEOUT).unwrap();
    run.expect("armhv-guest# ", COMMAND_TIMEOUT).unwrap();
    let booted = start.elapsed().as_secs_f64();

    let out = run_command(&mut run, "grep -c ^processor /proc/cpuinfo");
    assert!(out.contains("[linux] 2\n"), "expected 2 CPUs online:\n{out}");
    let out = run_command(
        &mut run,
        "grep -m1 'CPU part' /proc/cpuinfo; grep -m1 ^Features /proc/cpuinfo",
    );
    assert!(out.contains(&format!(": {}\n", model.part)), "{}: CPU part:\n{out}", model.cpu);
    let features: Vec<&str> = out
        .lines()
        .find_map(|l| l.split_once("Features\t: ").map(|(_, f)| f))
        .unwrap_or_else(|| panic!("no Features line:\n{out}"))
        .split_whitespace()
        .collect();
    for f in model.features {
        assert!(features.contains(f), "{}: the guest lacks {f}: {features:?}", model.cpu);
    }
    for f in model.hidden {
        assert!(!features.contains(f), "{}: the guest sees hidden {f}: {features:?}", model.cpu);
    }
    let pauth = features.contains(&"paca") && features.contains(&"pacg");
    assert_eq!(pauth, model.pauth, "{}: pointer authentication in {features:?}", model.cpu);

    // Both vCPUs busy at once (forks, execs, context switches: new kernel keys each time), on
    // the one physical CPU they share.
    let out = run_command(
        &mut run,
        "for c in 0 1; do taskset -c $c sh -c 'for i in $(seq 50); do /bin/true; done' & done; \
         wait; echo workload-done",
    );
    assert!(out.contains("[linux] workload-done"), "{out}");

    // armhv's statistics of the VM, in its report when the VM ends: "linux: powered off by
    // the guest (exits 44224, ..., pauth-switches 2318, ...)".
    let mark = run.mark();
    run.send("poweroff\n").unwrap();
    run.expect_since(mark, "all VMs have stopped", COMMAND_TIMEOUT).unwrap();
    let out = run.output_since(mark);
    let line = out
        .lines()
        .find(|l| l.contains("linux: powered off by the guest"))
        .unwrap_or_else(|| panic!("no power-off report:\n{out}"))
        .to_owned();
    let count = |label: &str| -> u64 {
        line.split(&format!("{label} "))
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let (exits, switches) = (count("exits"), count("pauth-switches"));
    assert!(exits > 0, "no exit count in armhv's report: {line}");
    eprintln!("{}: booted in {booted:.1} s; {line}", model.cpu);
    if model.pauth {
        // Lazy: a trap when a vCPU that was switched out first signs or authenticates again.
        assert!(switches > 0, "{}: no pointer-authentication key loads: {line}", model.cpu);
        assert!(switches * 4 < exits, "{}: key loads are not rare: {line}", model.cpu);
    } else {
        assert_eq!(switches, 0, "{}: key loads without pointer authentication: {line}", model.cpu);
    }
    eprintln!("{}: {:.1} s in all", model.cpu, start.elapsed().as_secs_f64());
}

/// Every CPU model QEMU 7.2 offers with EL2, one boot each (`linux_on`); cortex-a76 is
/// `stock_kernels_boot_smp_with_virtio_devices_and_talk`'s and the others'.
mod cpu_models {
    use super::{Model, linux_on};

    /// ARMv8.0's crypto and CRC, shown (ID_AA64ISAR0_EL1).
    const V80: &[&str] = &["fp", "asimd", "aes", "pmull", "sha1", "sha2", "crc32", "cpuid"];
    /// What no model shows a guest: SME, MTE (no tag memory); and SVE on models without it.
    const HIDDEN: &[&str] = &["sve", "sve2", "sme", "mte", "mte3"];
    /// What models with SVE hide: SME and MTE.
    const HIDDEN_WITH_SVE: &[&str] = &["sme", "mte", "mte3"];

    #[test]
    fn cortex_a53() {
        linux_on(Model {
            cpu: "cortex-a53",
            part: "0xd03",
            features: V80,
            hidden: HIDDEN,
            pauth: false,
        });
    }

    #[test]
    fn cortex_a57() {
        linux_on(Model {
            cpu: "cortex-a57",
            part: "0xd07",
            features: V80,
            hidden: HIDDEN,
            pauth: false,
        });
    }

    #[test]
    fn cortex_a72() {
        linux_on(Model {
            cpu: "cortex-a72",
            part: "0xd08",
            features: V80,
            hidden: HIDDEN,
            pauth: false,
        });
    }

    #[test]
    fn neoverse_n1() {
        linux_on(Model {
            cpu: "neoverse-n1",
            part: "0xd0c",
            features: &["atomics", "asimdhp", "lrcpc", "dcpop", "asimddp"],
            hidden: HIDDEN,
            pauth: false,
        });
    }

    #[test]
    fn a64fx() {
        linux_on(Model {
            cpu: "a64fx",
            part: "0x001",
            features: &["atomics", "fphp", "sve"],
            hidden: &["sve2", "sme", "mte", "mte3"],
            pauth: false,
        });
    }

    /// `max` with QEMU's fast IMPLEMENTATION DEFINED pointer-authentication algorithm.
    #[test]
    fn max_pauth_impdef() {
        linux_on(Model {
            cpu: "max,pauth-impdef=on",
            part: "0x051",
            features: &[
                "paca", "pacg", "bti", "rng", "flagm2", "dcpodp", "ilrcpc", "sb", "sve", "sve2",
            ],
            hidden: HIDDEN_WITH_SVE,
            pauth: true,
        });
    }

    /// Plain `max`: the architected QARMA5 algorithm (about 3x slower under TCG).
    #[test]
    fn max() {
        linux_on(Model {
            cpu: "max",
            part: "0x051",
            features: &["paca", "pacg", "bti", "sve"],
            hidden: HIDDEN_WITH_SVE,
            pauth: true,
        });
    }
}

/// A Linux control VM (issue 18, configs/tests/linux-control.toml): `ctl` lists, stops, starts,
/// pauses and resumes the other VMs with `armhvctl` over its control channel, is refused what
/// it may not do to itself, and stops, starts and restarts a Linux VM; `plain`, with no `control = true`,
/// finds no channel (its virtio-console is its own console, not armhv's).
#[test]
fn control_vm_manages_the_others() {
    let mut run = boot("tests/linux-control.toml", "cortex-a76");
    for vm in ["ctl", "plain"] {
        run.expect(&format!("[{vm}] armhv-guest: up, 1 cpus, kernel 6.1"), BOOT_TIMEOUT).unwrap();
    }
    run.expect("[beat] testguest: hello from EL1", BOOT_TIMEOUT).unwrap();
    run.expect("armhv-guest# ", COMMAND_TIMEOUT).unwrap();

    // Console input goes to VM 0: ctl.
    let out = run_command(&mut run, "armhvctl list");
    for (vm, state) in [("ctl", "running"), ("plain", "running"), ("beat", "running")] {
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("[ctl] {vm} ")))
            .unwrap_or_else(|| panic!("no row of {vm}:\n{out}"));
        assert!(row.contains(state), "{vm} not {state}:\n{out}");
    }
    let out = run_command(&mut run, "armhvctl stop beat; echo rc=$?");
    assert!(out.contains("[ctl] rc=0"), "{out}");
    run.expect("beat: stopped by a command", COMMAND_TIMEOUT).unwrap();
    let out = run_command(&mut run, "armhvctl info beat");
    assert_eq!(info_field(&out, "state"), "stopped", "{out}");
    let mark = run.mark();
    let out = run_command(&mut run, "armhvctl start beat; echo rc=$?");
    assert!(out.contains("[ctl] rc=0"), "{out}");
    run.expect_since(mark, "[beat] testguest: hello from EL1", COMMAND_TIMEOUT).unwrap();

    // What a control VM may not do, and a VM that does not exist: refused, with why.
    let out = run_command(&mut run, "armhvctl stop ctl; echo rc=$?");
    assert!(out.contains("a control VM cannot stop itself"), "{out}");
    assert!(out.contains("[ctl] rc=1"), "{out}");
    let out = run_command(&mut run, "armhvctl start nosuch; echo rc=$?");
    assert!(out.contains("no VM is named \"nosuch\""), "{out}");
    assert!(out.contains("[ctl] rc=1"), "{out}");
    let out = run_command(&mut run, "armhvctl -j list");
    assert!(out.contains("[ctl] {\"ok\":true,\"vms\":[{\"name\":\"ctl\""), "{out}");

    // A Linux VM paused and resumed, then stopped and started again.
    let out = run_command(&mut run, "armhvctl pause plain; armhvctl info plain");
    assert_eq!(info_field(&out, "state"), "paused", "{out}");
    run.expect("plain: paused", COMMAND_TIMEOUT).unwrap();
    let out = run_command(&mut run, "sleep 1; armhvctl resume plain; echo rc=$?");
    assert!(out.contains("[ctl] rc=0"), "{out}");
    run.expect("plain: resumed", COMMAND_TIMEOUT).unwrap();
    let mark = run.mark();
    let out = run_command(&mut run, "armhvctl stop plain; echo rc=$?");
    assert!(out.contains("[ctl] rc=0"), "{out}");
    run.expect_since(mark, "plain: stopped by a command", COMMAND_TIMEOUT).unwrap();
    let mark = run.mark();
    run_command(&mut run, "armhvctl start plain");
    run.expect_since(mark, "[plain] armhv-guest: up, 1 cpus", BOOT_TIMEOUT).unwrap();
    let mark = run.mark();
    run_command(&mut run, "armhvctl restart plain");
    run.expect_since(mark, "plain: restarted by a command", COMMAND_TIMEOUT).unwrap();
    run.expect_since(mark, "[plain] armhv-guest: up, 1 cpus", BOOT_TIMEOUT).unwrap();

    // Events arrive on the channel: `armhvctl events` in ctl's shell sees beat stopped from
    // the console's command line meanwhile.
    let mark = run.mark();
    run.send("timeout 10 armhvctl events; echo done-$((6*7))\n").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    run.send("\x01c").unwrap();
    run.send("stop beat\r").unwrap();
    run.expect_since(mark, "beat: stopped by a command", COMMAND_TIMEOUT).unwrap();
    run.send("exit\r").unwrap();
    run.expect_since(mark, "done-42\n", COMMAND_TIMEOUT).unwrap();
    let out = run.output_since(mark);
    assert!(out.contains("[ctl] beat: stopped by a command"), "no event on the channel:\n{out}");

    // plain has no channel: armhvctl says so.
    run.send("\x011").unwrap();
    run.expect("console: input goes to vm 1 (plain)", COMMAND_TIMEOUT).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let out = run_command(&mut run, "armhvctl list; echo rc=$?");
    assert!(out.contains("this VM has no control channel"), "{out}");
    assert!(out.contains("[plain] rc=2"), "{out}");

    run.send("\x01q").unwrap();
    run.expect("all VMs have stopped", BOOT_TIMEOUT).unwrap();
    let out = run.output();
    let end = out.lines().find(|l| l.contains("usage: end: ")).expect("the final usage line");
    assert!(end.ends_with(": back to the baseline"), "{end}");
}

/// A field of `armhvctl info` as the control VM `ctl` printed it (`[ctl] state    running`).
fn info_field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix("[ctl] ")?.strip_prefix(name)?.strip_prefix(' '))
        .map_or("", str::trim)
}
