//! `make compare`'s KVM column end to end, quickly: Debian's kernel at EL2 on QEMU with
//! bench/kvm-vmm as its /init runs vmbench, and every operation KVM can run has a figure in
//! CNTVCT ticks while the ones it cannot say why. Needs scripts/linux-guest.sh's assets and the
//! network for the musl target the first time (scripts/kvm-host.sh adds it).

use bench_harness::Options;
use bench_harness::compare::{self, Cell, Status};
use std::time::Duration;

#[test]
fn kvm_column_measures_what_kvm_can_run_and_says_why_not_for_the_rest() {
    let out_dir = xtask::build_dir().join("compare-test");
    let _ = std::fs::remove_dir_all(&out_dir);
    let opts = Options {
        quick: true,
        timeout: Duration::from_secs(300),
        out_dir: out_dir.clone(),
        ..Options::default()
    };
    let c = compare::measure(&opts, &["kvm".to_owned()]).expect("running the KVM column");
    let kvm = c.columns.iter().find(|col| col.system == "kvm").expect("a KVM column");
    assert_eq!(kvm.status, Status::Ran, "{kvm:?}");
    // No PMU in the guest: everything in virtual-counter ticks.
    assert_eq!(kvm.clock.as_deref(), Some("cntvct"));
    for name in ["hypercall", "gic-trap", "ipi", "pl011-write", "io-roundtrip"] {
        match compare::cell(kvm, name) {
            // A trap to KVM and back is hundreds of instructions at least, and the user-space
            // exits cost more than the in-kernel ones.
            Cell::Value { median, resolution } => {
                assert_eq!(resolution, 16.0, "{name}");
                assert!((160.0..100_000.0).contains(&median), "{name}: {median}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    let value = |name| match compare::cell(kvm, name) {
        Cell::Value { median, .. } => median,
        other => panic!("{name}: {other:?}"),
    };
    assert!(value("pl011-write") > value("gic-trap"), "user space costs more than the kernel");
    // Completion uses the list registers: no trap, under one tick.
    assert!(value("eoi") < 32.0);
    for name in ["io-out", "io-in", "vmswitch"] {
        match compare::cell(kvm, name) {
            Cell::NotApplicable(why) => assert!(why.contains("ARMHV_"), "{name}: {why}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    // The others were not asked for, and say so rather than show figures.
    for col in c.columns.iter().filter(|col| col.system != "kvm") {
        assert!(matches!(col.status, Status::NotRun(_)), "{col:?}");
        assert!(col.figures.is_empty());
    }
    let written = compare::write(&out_dir, &c).expect("writing the table");
    assert_eq!(written.len(), 6, "md, json and svg, and their latest copies: {written:?}");
}
