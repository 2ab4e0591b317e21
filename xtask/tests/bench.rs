//! `cargo xtask bench` end to end, quickly: the microbenchmarks and the world-switch breakdown
//! under icount, with the report, the charts and the JSON written. The full suite, and its
//! comparison with the committed baseline, is `make bench`.

use std::time::Duration;
use xtask::bench::{self, Options, Part};

#[test]
fn quick_suite_measures_every_benchmark_and_writes_its_report() {
    let out_dir = xtask::build_dir().join("bench-test");
    let _ = std::fs::remove_dir_all(&out_dir);
    let opts = Options {
        parts: vec![Part::Micro, Part::Breakdown],
        quick: true,
        timeout: Duration::from_secs(300),
        out_dir: out_dir.clone(),
        ..Options::default()
    };
    let results = bench::measure(&opts).expect("running the suite");
    let micro = results.micro().expect("a micro run");
    for name in ["hypercall", "gic-trap", "ipi", "eoi", "vmswitch", "io-out", "io-in"] {
        let f = micro.figure(name).unwrap_or_else(|| panic!("no {name} result: {micro:?}"));
        assert!(f.min <= f.median && f.median <= f.max, "{name}: {f:?}");
        // Path lengths, not garbage: everything in armhv's paths is well under 10,000
        // instructions, and only the completion is free.
        assert!(f.median < 10_000.0, "{name}: {f:?}");
        assert!((name == "eoi") == (f.median < 20.0), "{name}: {f:?}");
    }
    // Completing a virtual interrupt never traps.
    assert_eq!(micro.figure("eoi").unwrap().exits_per_op, Some(0.0));
    let paths: Vec<&str> = results.breakdown().iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["hypercall", "vm-switch"], "breakdown paths");

    let written = bench::write_outputs(&out_dir, &results).expect("writing the outputs");
    for ext in ["json", "md", "svg"] {
        assert!(
            written.iter().any(|p| p.extension().is_some_and(|e| e == ext)),
            "no .{ext} among {written:?}"
        );
    }
    let report = std::fs::read_to_string(out_dir.join("latest.md")).unwrap();
    for heading in ["Microbenchmarks (Table II layout)", "World-switch breakdown"] {
        assert!(report.contains(heading), "report without {heading:?}:\n{report}");
    }
}
