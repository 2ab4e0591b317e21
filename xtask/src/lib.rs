//! armhv's host-side tool: builds the hypervisor and the guests, validates VM configs, packs
//! them into one boot image and runs it on QEMU. The integration tests and the measurement
//! suite (`bench/harness`) use it as a library.

pub mod disk;
pub mod dtb;
pub mod elf;
pub mod hostnet;
pub mod image;
pub mod qemu;
pub mod setup;

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The hypervisor's target: soft-float, so armhv never touches the FP/SIMD registers that hold
/// the guest's state (they are switched only between vCPUs).
pub const HYP_TARGET: &str = "aarch64-unknown-none-softfloat";
pub const GUEST_TARGET: &str = "aarch64-unknown-none";

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Where build products go (ignored by git).
pub fn build_dir() -> PathBuf {
    root().join("build")
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    // A target directory of our own: the host `cargo test` that runs the integration tests
    // holds the lock on the default one.
    cmd.env("CARGO_TARGET_DIR", root().join("target").join("bare"));
    cmd
}

/// Builds one bare-metal crate in release mode; returns the ELF path.
pub fn cargo_build(package: &str, target: &str) -> Result<PathBuf> {
    cargo_build_with(package, target, &[])
}

/// Builds with extra cargo features, in a target directory of their own so that switching
/// feature sets does not rebuild the default one.
pub fn cargo_build_with(package: &str, target: &str, features: &[&str]) -> Result<PathBuf> {
    let (dir, note) = if features.is_empty() {
        ("bare".to_string(), String::new())
    } else {
        (format!("bare-{}", features.join("-")), format!(" with {}", features.join(",")))
    };
    let target_dir = root().join("target").join(dir);
    eprintln!("xtask: building {package} for {target}{note}");
    let mut cmd = cargo();
    cmd.env("CARGO_TARGET_DIR", &target_dir);
    cmd.args(["build", "--release", "--quiet", "-p", package, "--target", target]);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let status = cmd.status().context("could not run cargo")?;
    if !status.success() {
        bail!("building {package} failed");
    }
    Ok(target_dir.join(target).join("release").join(package))
}

/// The machine the image is built for (what QEMU is started with).
#[derive(Clone, Debug)]
pub struct MachineSpec {
    pub cpu: String,
    pub smp: u32,
    pub mem_mib: u64,
    /// The interrupt controller: 3 (GICv3) or 2 (GICv2 with the virtualization extensions, at
    /// most 8 CPUs); QEMU's `gic-version`.
    pub gic: u8,
    /// Cargo features of the hypervisor build (test and benchmark builds only).
    pub hyp_features: Vec<&'static str>,
    /// Deterministic timing (`qemu::command`): `-icount shift=0,sleep=off`, a fixed RTC and
    /// device tree; the cycle counter then counts one per instruction.
    pub icount: bool,
    /// With `icount`, idle time follows the host's clock (`sleep=on`) instead of jumping to the
    /// next timer: the bench's cost runs, whose guests wait for work done outside the
    /// instruction stream (QEMU's block layer, a client on the host) and must not see every
    /// such wait fire their timers. The instruction count itself stays exact.
    pub icount_sleep: bool,
    /// A QMP socket (`-qmp unix:PATH`) for a harness that asks QEMU for figures while it runs
    /// (the instruction count: `bench/harness`'s `qmp`).
    pub qmp: Option<PathBuf>,
    /// An image file attached as the machine's own virtio-blk disk (crate `machine-disk`);
    /// [`disk::machine_disk_for`] lays one out for a config's disks on partitions.
    pub machine_disk: Option<PathBuf>,
    /// The machine disk is attached read-only (QEMU fails every write to it): a device error.
    pub machine_disk_read_only: bool,
    /// The machine's own NIC, a virtio-net device on QEMU user networking: the uplink of the
    /// config's `[[network]]` with `uplink = true`.
    pub uplink: Option<Uplink>,
    /// A device tree to boot with instead of the one QEMU makes (`-dtb`): QEMU's own, dumped
    /// and edited by a test ([`dtb`]).
    pub dtb: Option<PathBuf>,
    /// Boot as on a board, through firmware, instead of QEMU's `-kernel`.
    pub firmware: Option<Firmware>,
}

/// Firmware that boots armhv as a board's would (docs/boards.md): QEMU runs `bios` (`-bios`),
/// with armhv's boot image placed in RAM at `load_addr` (`-device loader`), where the
/// firmware's own command starts it ([`qemu::Run::booti`] for U-Boot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Firmware {
    pub bios: PathBuf,
    pub load_addr: u64,
}

/// U-Boot for QEMU's `virt` board, from Debian's `u-boot-qemu` (installed for the tests by
/// `scripts/setup.sh --tests`). With `virtualization=on` it runs at EL2, and so does what its
/// `booti` starts.
pub const UBOOT_QEMU_ARM64: &str = "/usr/lib/u-boot/qemu_arm64/u-boot.bin";

impl Firmware {
    /// U-Boot, with the boot image at `load_addr`.
    pub fn u_boot(load_addr: u64) -> Self {
        Self { bios: PathBuf::from(UBOOT_QEMU_ARM64), load_addr }
    }
}

/// The machine's NIC on QEMU user networking (`-netdev user`): its DHCP server gives each MAC
/// an address from 10.0.2.15 up, 10.0.2.2 is the host's loopback, nothing else is reachable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Uplink {
    /// TCP ports forwarded from the host's 127.0.0.1 into the network (`hostfwd`): (host port,
    /// guest port), to 10.0.2.15, the first address QEMU's DHCP server hands out.
    pub hostfwd: Vec<(u16, u16)>,
}

impl Uplink {
    /// QEMU's arguments for the NIC.
    pub fn qemu_args(&self) -> [String; 4] {
        let mut netdev = String::from("user,id=uplink0");
        for (host, guest) in &self.hostfwd {
            netdev.push_str(&format!(",hostfwd=tcp:127.0.0.1:{host}-:{guest}"));
        }
        ["-netdev".into(), netdev, "-device".into(), "virtio-net-device,netdev=uplink0".into()]
    }
}

impl Default for MachineSpec {
    fn default() -> Self {
        Self {
            cpu: "cortex-a76".into(),
            smp: 4,
            mem_mib: 2048,
            gic: 3,
            hyp_features: Vec::new(),
            icount: false,
            icount_sleep: false,
            qmp: None,
            machine_disk: None,
            machine_disk_read_only: false,
            uplink: None,
            dtb: None,
            firmware: None,
        }
    }
}

/// The hypervisor features every QEMU integration test builds with: the lock-order check
/// (crate `lockorder`), so that a lock taken out of order fails the test that took it.
pub const TEST_FEATURES: [&str; 1] = ["lock-check"];

impl MachineSpec {
    /// The machine of a QEMU integration test: the default, built with [`TEST_FEATURES`].
    pub fn for_tests() -> Self {
        Self { hyp_features: TEST_FEATURES.to_vec(), ..Self::default() }
    }

    /// [`for_tests`](Self::for_tests) on `model`: a QEMU CPU model, with `+gicv2` after it for
    /// a GICv2 machine (`cortex-a72+gicv2`), so that tests written for a CPU model run
    /// unchanged on either interrupt controller.
    pub fn for_tests_on(model: &str) -> Self {
        let (cpu, gic) = match model.strip_suffix("+gicv2") {
            Some(cpu) => (cpu, 2),
            None => (model, 3),
        };
        Self { cpu: cpu.into(), gic, ..Self::for_tests() }
    }

    pub fn as_config_machine(&self) -> vmconfig::Machine {
        vmconfig::Machine { ram_bytes: self.mem_mib << 20, cpus: self.smp }
    }
}
