//! What the tests that drive Linux guests share (`linux.rs`, `uplink.rs`): the guest assets,
//! booting a config, and typing a command on the focused VM's shell.
#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;
use std::time::Duration;
use xtask::MachineSpec;
use xtask::qemu::Run;

pub const BOOT_TIMEOUT: Duration = Duration::from_secs(180);
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Fetches and builds the kernel and initramfs once per test process.
pub fn guest_assets() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let status = Command::new(root().join("scripts/linux-guest.sh"))
            .current_dir(root())
            .status()
            .expect("running scripts/linux-guest.sh");
        assert!(status.success(), "scripts/linux-guest.sh failed");
    });
}

/// Boots `configs/<cfg>` on `machine` (e.g. with the machine disk file its run must keep, or an
/// uplink), with a scratch machine disk for the config's disks on partitions if it has any and
/// `machine` names none.
pub fn boot_on(cfg: &str, machine: MachineSpec) -> Run {
    guest_assets();
    let config = root().join("configs").join(cfg);
    let image = xtask::image::build(&config, &machine)
        .unwrap_or_else(|e| panic!("building the boot image: {e:#}"));
    Run::start_config(&config, &image, &machine).expect("starting QEMU")
}

/// Types `command` into the focused VM's shell and returns the console output up to the end
/// of its output (a marker the shell computes, so the echo of the command does not match it).
pub fn run_command(run: &mut Run, command: &str) -> String {
    let mark = run.mark();
    run.send(&format!("{command}; echo done-$((6*7))\n")).unwrap();
    // With its newline: the line is complete, never to be redrawn after the next mark.
    run.expect_since(mark, "done-42\n", COMMAND_TIMEOUT).unwrap();
    run.output_since(mark)
}
