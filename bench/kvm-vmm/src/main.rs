//! `kvm-vmm`: runs vmbench as a KVM guest (the KVM column of `make compare`). Built for
//! `aarch64-unknown-linux-musl` by `scripts/kvm-host.sh` and put in an initramfs as `/init`
//! of Debian's stock arm64 kernel, booted at EL2 on QEMU `virt`.
//!
//! As process 1 it mounts devtmpfs, runs itself again as the VMM (so that whatever the VMM's
//! threads are doing when it ends, init is left to power the machine off), and powers off.
//! As any other process it is the VMM: `kvm-vmm [--image PATH] [--vcpus N] [--mem MIB]
//! [--timeout SECS] [BOOTARG...]`; the guest's console (its PL011) goes to stdout.

#[cfg(target_arch = "aarch64")]
mod kvm;

use std::process::ExitCode;

#[cfg(target_arch = "aarch64")]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if std::process::id() == 1 { kvm::init(&args) } else { kvm::vmm(args) };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvm-vmm: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(target_arch = "aarch64"))]
fn main() -> ExitCode {
    eprintln!(
        "kvm-vmm: error: this VMM drives arm64 KVM and runs only on aarch64 Linux; build it with \
         scripts/kvm-host.sh (target aarch64-unknown-linux-musl) and run it in the KVM host"
    );
    ExitCode::FAILURE
}
