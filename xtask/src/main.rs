//! `cargo xtask <command>`: see `usage()`.

use anyhow::{Result, anyhow, bail};
use std::path::{Path, PathBuf};
use xtask::{MachineSpec, disk, image, qemu, setup};

fn usage() -> String {
    "usage: cargo xtask <command> [options]

commands:
  build [CONFIG]     validate CONFIG (default configs/default.toml) and build its boot image;
                     lay out the machine disk build/machine-disk.img for its disks on
                     partitions (created when missing; existing partitions are kept)
  run [CONFIG]       build, then boot it on QEMU with the console on this terminal (and the
                     machine disk attached: what VMs write to their partitions persists;
                     delete build/machine-disk.img to start over)
  check CONFIG...    validate config files only
  setup              install missing tools (QEMU)

options:
  --cpu MODEL        QEMU CPU model: cortex-a76 (default, VHE) or cortex-a57 (ARMv8.0)
  --smp N            physical CPUs (default 4)
  --mem MIB          RAM in MiB (default 2048)
  --gic 3|2          the interrupt controller: GICv3 (default) or GICv2 (GIC-400 with the
                     virtualization extensions; at most 8 CPUs); the VMs get the same
  --icount           deterministic timing: -icount shift=0,sleep=off (the cycle counter
                     counts instructions), fixed RTC and device tree
  --no-uplink        run: attach no NIC to the machine even if the config gives a network
                     an uplink (armhv then says so and runs the network without it)
  --u-boot ADDR      run: boot as on a board (docs/boards.md): U-Boot (Debian's u-boot-qemu)
                     as the firmware, the boot image in RAM at ADDR; type U-Boot's booti
                     command that xtask prints

The measurement suite is make bench (bench/harness, bench/README.md)."
        .to_owned()
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Builds the boot image and lays out the machine disk it boots with (attached to `machine`).
fn build(config: &Path, machine: &mut MachineSpec) -> Result<PathBuf> {
    let cfg = vmconfig::load(config, &machine.as_config_machine()).map_err(|e| anyhow!("{e}"))?;
    let img = image::build_loaded(config, &cfg, machine)?;
    machine.machine_disk = disk::machine_disk_for(&cfg, &disk::default_path())?;
    Ok(img)
}

fn real_main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(cmd) = args.next() else {
        println!("{}", usage());
        return Ok(());
    };
    if cmd == "-h" || cmd == "--help" {
        println!("{}", usage());
        return Ok(());
    }
    let mut machine = MachineSpec::default();
    let mut files = Vec::new();
    let mut no_uplink = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cpu" => machine.cpu = args.next().unwrap_or_default(),
            "--smp" => machine.smp = args.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "--mem" => machine.mem_mib = args.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "--gic" => machine.gic = args.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "--icount" => machine.icount = true,
            "--no-uplink" => no_uplink = true,
            "--u-boot" => {
                let addr = args.next().unwrap_or_default();
                let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16)
                    .map_err(|_| anyhow!("--u-boot takes a hexadecimal address, not {addr:?}"))?;
                if !Path::new(xtask::UBOOT_QEMU_ARM64).is_file() {
                    bail!(
                        "--u-boot needs {}: apt-get install u-boot-qemu",
                        xtask::UBOOT_QEMU_ARM64
                    );
                }
                machine.firmware = Some(xtask::Firmware::u_boot(addr));
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return Ok(());
            }
            _ if a.starts_with('-') => bail!("unknown option {a}\n{}", usage()),
            _ => files.push(PathBuf::from(a)),
        }
    }
    if machine.smp == 0 || machine.mem_mib == 0 {
        bail!("--smp and --mem take a positive number");
    }
    if !matches!(machine.gic, 2 | 3) {
        bail!("--gic takes 3 (GICv3) or 2 (GICv2)");
    }
    if machine.gic == 2 && machine.smp > 8 {
        bail!("a GICv2 reaches at most 8 CPUs: use --smp 8 or fewer, or --gic 3");
    }
    let config =
        files.first().cloned().unwrap_or_else(|| xtask::root().join("configs/default.toml"));
    match cmd.as_str() {
        "setup" => setup::ensure_qemu(),
        "build" => build(&config, &mut machine).map(|_| ()),
        "run" => {
            setup::ensure_qemu()?;
            // A config that gives a network the machine's NIC gets one, on QEMU user networking.
            let has_uplink = vmconfig::load(&config, &machine.as_config_machine())
                .is_ok_and(|c| c.uplink().is_some());
            if has_uplink && !no_uplink {
                machine.uplink = Some(xtask::Uplink::default());
            }
            let img = build(&config, &mut machine)?;
            let status = qemu::run_interactive(&img, &machine)?;
            if !status.success() {
                bail!("QEMU exited with {status}");
            }
            Ok(())
        }
        "check" => {
            let mut bad = 0;
            for f in &files {
                match vmconfig::load(f, &machine.as_config_machine()) {
                    Ok(c) => println!("{}: ok ({} VMs)", f.display(), c.vms.len()),
                    Err(e) => {
                        eprintln!("{e}");
                        bad += 1;
                    }
                }
            }
            if bad > 0 {
                bail!("{bad} invalid config file(s)");
            }
            Ok(())
        }
        _ => bail!("unknown command {cmd}\n{}", usage()),
    }
}
