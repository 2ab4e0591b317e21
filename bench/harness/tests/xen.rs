//! vmbench under Xen 4.17 dom0less (the Xen column of `make compare`), on QEMU with icount:
//! the rows Xen can run print a result, and the run ends with `vmbench: done`. Fetches Xen
//! with scripts/xen-host.sh the first time.

use bench_harness::parse;
use bench_harness::xen::{XenRun, run_vmbench};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// vmbench as a flat arm64 Image, built once per test process.
fn vmbench_image() -> PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let elf = xtask::cargo_build("vmbench", xtask::GUEST_TARGET).expect("building vmbench");
            let flat =
                xtask::elf::flatten(&std::fs::read(elf).unwrap()).expect("flattening vmbench");
            let dir = xtask::build_dir().join("xen-test");
            std::fs::create_dir_all(&dir).unwrap();
            let image = dir.join("vmbench.img");
            std::fs::write(&image, flat.bytes).unwrap();
            image
        })
        .clone()
}

#[test]
fn vmbench_runs_under_xen_with_icount() {
    let run = XenRun {
        vmbench: vmbench_image(),
        bootargs: "n=200 warmup=20 hypercall gic-trap pl011-write eoi".into(),
        cpu: "cortex-a76".into(),
        icount: true,
        timeout: Duration::from_secs(300),
        log: xtask::build_dir().join("xen-test/icount.log"),
    };
    let lines = run_vmbench(&run).unwrap_or_else(|e| panic!("{e:#}"));
    println!("{lines}");
    let console = parse::parse_console(&lines).unwrap();
    let vm = console.vm("").unwrap();
    let boot = vm.boot.as_ref().expect("a boot line");
    assert_eq!(boot.clock, "cntvct", "Xen does not virtualize the PMU");
    for name in [
        "hypercall",
        "hypercall-psci-version",
        "hypercall-xen-version",
        "gic-trap",
        "pl011-write",
        "eoi",
    ] {
        assert!(vm.result(name).is_some(), "no {name} result:\n{lines}");
    }
}

/// Without icount Xen boots on two physical CPUs and the domain gets two vCPUs: the virtual
/// IPI has its second CPU (timings then follow the host clock).
#[test]
fn vmbench_ipi_under_xen_without_icount() {
    let run = XenRun {
        vmbench: vmbench_image(),
        bootargs: "n=200 warmup=20 hypercall ipi".into(),
        cpu: "cortex-a76".into(),
        icount: false,
        timeout: Duration::from_secs(300),
        log: xtask::build_dir().join("xen-test/no-icount.log"),
    };
    let lines = run_vmbench(&run).unwrap_or_else(|e| panic!("{e:#}"));
    println!("{lines}");
    let console = parse::parse_console(&lines).unwrap();
    let vm = console.vm("").unwrap();
    assert_eq!(vm.boot.as_ref().map(|b| b.cpus), Some(2));
    assert!(vm.result("ipi").is_some(), "no ipi result:\n{lines}");
}
