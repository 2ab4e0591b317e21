//! The application workloads' cost runs end to end (`make bench ARGS="--only workloads"`, the
//! rows whose figure is the machine's instructions per unit of work): a disk workload the guest
//! marks and a request/response workload a client on the host drives, natively and under
//! armhv, with QEMU's count read over QMP. The figures must be there, plausible and
//! reproducible: the method exists because the wall clock's were not.

use bench_harness::catalog::{ARMHV, NATIVE};
use bench_harness::model::Kind;
use bench_harness::{self as bench, Options, Part};
use std::time::Duration;

#[test]
fn cost_runs_count_the_instructions_of_a_disk_and_an_uplink_workload() {
    let out_dir = xtask::build_dir().join("bench-test-workloads");
    let _ = std::fs::remove_dir_all(&out_dir);
    let opts = Options {
        parts: vec![Part::Workloads],
        workloads: vec!["blk-read".into(), "uplink-rr".into()],
        reps: 2,
        rounds: 1,
        timeout: Duration::from_secs(600),
        out_dir: out_dir.clone(),
        ..Options::default()
    };
    let results = bench::measure(&opts).expect("running the workloads");
    for variant in [NATIVE, ARMHV] {
        let run = results
            .runs
            .iter()
            .find(|r| r.kind == Kind::Workload && r.variant == variant)
            .unwrap_or_else(|| panic!("no {variant} run"));
        let out = run.workloads.as_ref().expect("the run's workloads");
        assert!(out.failures.is_empty(), "{variant}: {:?}", out.failures);
        for (name, metric, range) in [
            // Natively about 160,000 instructions per MiB, under armhv (which copies from its
            // RAM disk) about 720,000.
            ("blk-read", "instr_mib", 10_000.0..10_000_000.0),
            // Natively about 26,000, under armhv about 45,000.
            ("uplink-rr", "instr_rt", 5_000.0..1_000_000.0),
        ] {
            let samples: Vec<_> = out.samples.iter().filter(|s| s.workload == name).collect();
            assert_eq!(samples.len(), 2, "{variant} {name}: {samples:?}");
            for s in &samples {
                assert_eq!(s.metric, metric, "{variant} {name}");
                assert!(range.contains(&s.value), "{variant} {name}: {s:?}");
            }
            // Reproducible: the two repetitions agree within 10 %. On this loaded 2-core host
            // they differed by at most 6.4 % (native blk-read, under `make test`); a window
            // that caught a host-paced stretch of idle time, or a lock spin that ran out QEMU's
            // time slice, differed by 20 % to 40 times.
            let (a, b) = (samples[0].value, samples[1].value);
            assert!((a - b).abs() <= 0.10 * a.min(b), "{variant} {name}: {a} and {b}");
        }
    }
    // armhv's own work is in the figures: its RAM disk copies every byte it reads.
    let row = results.workloads.iter().find(|s| s.workload == "blk-read").unwrap();
    assert!(row.normalized.is_some_and(|n| n > 1.5), "{row:?}");
}
