//! Booting from firmware as on a board (docs/boards.md): QEMU runs U-Boot (Debian's
//! `u-boot-qemu`, `qemu_arm64`) as its firmware at EL2, with armhv's boot image in RAM at an
//! address other than where QEMU's `-kernel` puts it (0x40080000, armhv's link address);
//! U-Boot's `booti` starts it, at EL2 with the device tree in x0. armhv relocates itself to
//! where it runs, finds its boot package right after its own image, and runs its VMs as
//! under `-kernel` (the expectations of boot.rs's two_vms_run_concurrently).
//!
//! Two placements, one per CPU model: one that `booti` moves (the Image header asks for a
//! 2 MiB-aligned base + text_offset; U-Boot then copies `image_size` bytes, so the package
//! must be counted in it), and one where it runs in place. And `make run`'s demo, two Debian
//! kernels on the machine's NIC and disk, which U-Boot probed before armhv.

mod linux_guest;

use linux_guest::{BOOT_TIMEOUT, guest_assets, run_command};
use std::path::{Path, PathBuf};
use std::time::Duration;
use xtask::qemu::Run;
use xtask::{Firmware, MachineSpec, UBOOT_QEMU_ARM64, image};

/// Generous: QEMU TCG on a loaded 2-core machine.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Where armhv is linked, and where `-kernel` runs it.
const LINK_ADDR: u64 = 0x4008_0000;

fn config(name: &str) -> PathBuf {
    xtask::root().join("configs").join(name)
}

/// Position of `needle` in `hay`, or a failure showing the console.
fn pos(hay: &str, needle: &str) -> usize {
    hay.find(needle).unwrap_or_else(|| panic!("{needle:?} not in console output:\n{hay}"))
}

/// Starts `cfg` on `machine` with U-Boot as the firmware and has it `booti` armhv: returns the
/// run, the console mark before the command, and the boot image's size.
fn start_from_u_boot(cfg: &str, machine: &MachineSpec) -> (Run, usize, u64) {
    assert!(
        Path::new(UBOOT_QEMU_ARM64).is_file(),
        "{UBOOT_QEMU_ARM64} is missing: `make setup-tests` installs Debian's u-boot-qemu"
    );
    let cfg = config(cfg);
    let img = image::build(&cfg, machine).expect("building the boot image");
    let image_len = std::fs::metadata(&img).unwrap().len();
    let mut run = Run::start_config(&cfg, &img, machine).expect("starting QEMU");
    let mark = run.booti(machine, TIMEOUT).unwrap();
    (run, mark, image_len)
}

/// Checks that U-Boot started armhv with `booti` from `load_addr` (moving it or not, `moved`)
/// and that armhv says it runs at `runs_at` with an image of `image_len` bytes; returns the
/// console from U-Boot's "Starting kernel" on.
fn started_by_u_boot(
    out: &str,
    mark: usize,
    load_addr: u64,
    runs_at: u64,
    moved: bool,
    image_len: u64,
) -> &str {
    // U-Boot was the firmware, and its booti started armhv: nothing else could have.
    let before = &out[..mark];
    pos(before, "U-Boot 20");
    // The key stopped its autoboot: the prompt follows the countdown (nothing was loaded).
    let countdown = &before[pos(before, "Hit any key to stop autoboot")..];
    assert_eq!(countdown.lines().skip(1).collect::<Vec<_>>(), ["=> "], "{out}");
    assert!(!before.contains("armhv"), "armhv ran before booti:\n{out}");
    let after = &out[mark..];
    pos(after, &xtask::qemu::booti_command(load_addr));
    let moving = format!("Moving Image from {load_addr:#x} to {runs_at:#x}");
    assert_eq!(after.contains(&moving), moved, "U-Boot's move ({moving:?}):\n{out}");
    let started = pos(after, "Starting kernel");
    let boot_log = &after[started..];
    // armhv runs where U-Boot put it, and its image and boot package end where the file does.
    pos(
        boot_log,
        &format!(
            "armhv at {runs_at:#x} (linked at {LINK_ADDR:#x}), image and boot package up to {:#x}",
            runs_at + image_len
        ),
    );
    // The RAM below the image's 2 MiB-aligned base is not kept from guests: the frame pool
    // has some of it (the heap, 16 MiB, may take RAM base).
    let pool = boot_log.lines().find(|l| l.contains("frame pool:")).expect("a frame pool line");
    let first = pool.split("frame pool: 0x").nth(1).and_then(|r| r.split("..").next());
    let first = first.and_then(|a| u64::from_str_radix(a, 16).ok()).expect("a frame pool range");
    assert!(first < runs_at & !0x1f_ffff, "RAM below armhv unused: {pool}\n{out}");
    boot_log
}

/// Boots configs/tests/two-vms.toml from U-Boot on `cpu` with the image at `load_addr`, which
/// armhv must report running at `runs_at`, after U-Boot moved it there or not (`moved`).
fn boot_from_u_boot(cpu: &str, load_addr: u64, runs_at: u64, moved: bool) {
    let machine = MachineSpec {
        cpu: cpu.into(),
        firmware: Some(Firmware::u_boot(load_addr)),
        ..MachineSpec::for_tests()
    };
    let (mut run, mark, image_len) = start_from_u_boot("tests/two-vms.toml", &machine);
    run.expect("all VMs have stopped", TIMEOUT).unwrap();
    let status = run.wait_exit(TIMEOUT).unwrap();
    let out = run.output();
    assert!(status.success(), "QEMU exit status {status}:\n{out}");
    let boot_log = started_by_u_boot(&out, mark, load_addr, runs_at, moved, image_len);

    // Its VMs run as they do under -kernel.
    for vm in ["vm0", "vm1"] {
        pos(boot_log, &format!("[{vm}] testguest: hello from EL1"));
        pos(boot_log, &format!("[{vm}] testguest: heartbeat 7"));
        let off = &boot_log[pos(boot_log, &format!("{vm}: powered off by the guest"))..];
        assert!(off.lines().next().unwrap().ends_with("; RAM zeroed"), "{out}");
    }
    assert!(
        pos(boot_log, "[vm1] testguest: heartbeat 1")
            < pos(boot_log, "[vm0] testguest: heartbeat 7"),
        "{out}"
    );
    pos(boot_log, "vm0: 1 vCPU(s) on CPU(s) [0]");
    pos(boot_log, "vm1: 1 vCPU(s) on CPU(s) [1]");
    pos(boot_log, "[vm1] testguest: pl011 id 11 10 14 00 0d f0 05 b1");
}

/// Loaded at 0x48000000, not 2 MiB + text_offset: `booti` moves the image, package and all,
/// to 0x48080000 (its `image_size` covers the package; were it only armhv's own, the package
/// would be left behind and armhv would find none).
#[test]
fn booti_moves_armhv_and_its_package_to_a_2mib_base() {
    boot_from_u_boot("cortex-a76", 0x4800_0000, 0x4808_0000, true);
}

/// Loaded at 0x60080000, already 2 MiB + text_offset: `booti` starts it where it is.
#[test]
fn armhv_runs_where_booti_finds_it() {
    boot_from_u_boot("cortex-a57", 0x6008_0000, 0x6008_0000, false);
}

/// `make run`'s configuration from U-Boot, loaded at 0x50000000 (run at 0x50080000): both
/// Debian kernels reach their shell with their disk (a partition of the machine disk) mounted
/// and an address from QEMU's DHCP server through the uplink, and ping each other. U-Boot
/// probed that NIC (its `eth0`) before armhv took it over.
#[test]
fn default_demo_boots_from_u_boot() {
    guest_assets();
    let machine = MachineSpec {
        uplink: Some(xtask::Uplink::default()),
        firmware: Some(Firmware::u_boot(0x5000_0000)),
        ..MachineSpec::for_tests()
    };
    let (mut run, mark, image_len) = start_from_u_boot("default.toml", &machine);
    for vm in ["linux0", "linux1"] {
        run.expect(&format!("[{vm}] armhv-guest: eth0 dhcp 10.0.2."), BOOT_TIMEOUT).unwrap();
        run.expect(&format!("[{vm}] armhv-guest: /dev/vda mounted at /data"), BOOT_TIMEOUT)
            .unwrap();
        run.expect(&format!("[{vm}] armhv-guest: up, 2 cpus"), BOOT_TIMEOUT).unwrap();
    }
    let out = run.output();
    pos(&out, "U-Boot 20");
    pos(&out, "Net:   eth0: virtio-net");
    started_by_u_boot(&out, mark, 0x5000_0000, 0x5008_0000, true, image_len);
    let out = run_command(&mut run, "ping -c 2 -W 5 10.0.0.2");
    assert!(out.contains("2 packets received"), "ping:\n{out}");
}
