//! Installs what the build and the tests need when it is missing, saying what it does.

use anyhow::{Result, bail};
use std::process::Command;

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// QEMU for arm64 (Debian package qemu-system-arm).
pub fn ensure_qemu() -> Result<()> {
    if have("qemu-system-aarch64") {
        return Ok(());
    }
    eprintln!(
        "xtask: qemu-system-aarch64 is missing; installing Debian's qemu-system-arm with apt-get"
    );
    let sudo = if is_root() { "" } else { "sudo " };
    let script = format!(
        "{sudo}apt-get update -qq && DEBIAN_FRONTEND=noninteractive {sudo}apt-get install -y -qq qemu-system-arm"
    );
    let ok = Command::new("sh").args(["-c", &script]).status().is_ok_and(|s| s.success());
    if !ok || !have("qemu-system-aarch64") {
        bail!(
            "could not install qemu-system-arm; install it yourself (apt-get install qemu-system-arm) and retry"
        );
    }
    Ok(())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"))
}
