//! Debian's stock kernel in an armhv VM on CPUs with SVE: it finds SVE, at the vector length
//! armhv allows, and a bare-metal VM using SVE on the same physical CPU keeps its registers.
//! (Apart from `linux.rs`, which boots the other CPU models.)

mod linux_guest;

use linux_guest::{BOOT_TIMEOUT, COMMAND_TIMEOUT, boot_on, run_command};
use xtask::MachineSpec;

/// The A64FX: SVE (not SVE2) with 512-bit vectors, and no pointer authentication.
#[test]
fn linux_sees_sve_on_a64fx() {
    linux_sees_sve("a64fx", 512, false);
}

/// Linux on `cpu`, whose CPUs give guests `bits`-bit vectors, with SVE2 or not. (QEMU's max,
/// 2048 bits with SVE2, waits for pointer authentication: its kernel stops at its first key
/// register write, SVE or not.)
fn linux_sees_sve(cpu: &str, bits: usize, sve2: bool) {
    let machine = MachineSpec { cpu: cpu.into(), ..MachineSpec::for_tests() };
    let mut run = boot_on("tests/linux-sve.toml", machine);
    let line = format!("sve: guests get SVE, vector length up to {bits} bits");
    run.expect(&line, BOOT_TIMEOUT).unwrap();
    run.expect("[linux0] armhv-guest: up, 2 cpus, kernel 6.1", BOOT_TIMEOUT).unwrap();
    run.expect("armhv-guest# ", COMMAND_TIMEOUT).unwrap();

    let out = run_command(&mut run, "grep -m1 ^Features /proc/cpuinfo");
    let features = out.lines().find(|l| l.starts_with("[linux0] Features")).unwrap_or("");
    assert!(features.split_whitespace().any(|f| f == "sve"), "no sve in:\n{out}");
    assert_eq!(features.split_whitespace().any(|f| f == "sve2"), sve2, "sve2:\n{out}");
    // The kernel probed the lengths with ZCR_EL1 (each write the vCPU's own) and found
    // armhv's limit.
    let out =
        run_command(&mut run, "dmesg | grep 'SVE: '; cat /proc/sys/abi/sve_default_vector_length");
    let max = format!("SVE: maximum available vector length {} bytes per vector", bits / 8);
    assert!(out.contains(&max), "the kernel's SVE lengths:\n{out}");
    assert!(out.contains("[linux0] 64\n"), "sve_default_vector_length:\n{out}");

    run.expect("[vm1] testguest: sve pattern 4 intact", COMMAND_TIMEOUT).unwrap();
    let out = run.output();
    assert!(out.contains(&format!("[vm1] testguest: sve vl {bits} bits")), "{out}");
    assert!(out.contains("[vm1] testguest: sve initial state clean"), "{out}");
    assert!(!out.contains("corrupted") && !out.contains("dirty"), "{out}");
    let mark = run.mark();
    run.send("poweroff\n").unwrap();
    run.expect_since(mark, "linux0: powered off by the guest", COMMAND_TIMEOUT).unwrap();
}
