//! The suite end to end, quickly: the microbenchmarks (on GICv3 and on GICv2) and the
//! world-switch breakdown under icount, with the report, the charts and the JSON written. The
//! full suite, and its comparison with the committed baseline, is `make bench`.

use bench_harness::{self as bench, Options, Part};
use std::time::Duration;

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
    let names =
        ["hypercall", "gic-trap", "pl011-write", "ipi", "eoi", "vmswitch", "io-out", "io-in"];
    for name in names {
        let f = micro.figure(name).unwrap_or_else(|| panic!("no {name} result: {micro:?}"));
        assert!(f.min <= f.median && f.median <= f.max, "{name}: {f:?}");
        // Path lengths, not garbage: everything in armhv's paths is well under 10,000
        // instructions, and only the completion is free.
        assert!(f.median < 10_000.0, "{name}: {f:?}");
        assert!((name == "eoi") == (f.median < 20.0), "{name}: {f:?}");
    }
    // Completing a virtual interrupt never traps.
    assert_eq!(micro.figure("eoi").unwrap().exits_per_op, Some(0.0));
    // The same on a GICv2 host, where the guest's CPU interface is the mapped GICV.
    let v2 = results.micro_on(2).expect("a GICv2 micro run");
    assert_eq!(v2.not_run, None, "the GICv2 step did not run");
    assert_eq!(v2.console.vm("bench").and_then(|v| v.gic.as_deref()), Some("v2"));
    for name in names {
        let f = v2.figure(name).unwrap_or_else(|| panic!("no GICv2 {name} result: {v2:?}"));
        assert!(f.median < 10_000.0, "GICv2 {name}: {f:?}");
    }
    assert_eq!(v2.figure("eoi").unwrap().exits_per_op, Some(0.0));
    // Table 3's Trap: the probe build's bare trap, far shorter than any exit that saves the
    // guest's registers (the distributor trap), on both GICs.
    let full_exit = micro.figure("gic-trap").unwrap();
    for gic in [3, 2] {
        let probe = results.trap_probe_on(gic).expect("a trap-probe run");
        let trap = probe.figure("trap").unwrap_or_else(|| panic!("no trap result: {probe:?}"));
        assert!(trap.median > 0.0 && trap.median * 5.0 < full_exit.median, "{trap:?}");
    }
    // ARMHV_NOP and PSCI_VERSION take the vector's fast path: no registers saved, no run loop.
    for name in ["hypercall", "hypercall-psci-version"] {
        let call = micro.figure(name).unwrap_or_else(|| panic!("no {name} result: {micro:?}"));
        assert!(call.median * 5.0 < full_exit.median, "{name}: {call:?}");
    }
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
    for heading in [
        "Microbenchmarks (Table II layout)",
        "Microbenchmarks on GICv3 and GICv2",
        "KVM/ARM Table 3 layout (armhv, GICv2)",
        "World-switch breakdown",
    ] {
        assert!(report.contains(heading), "report without {heading:?}:\n{report}");
    }
}

/// The interrupt-distributor experiment's case 4 (Table 1, `make table1`) end to end, under
/// icount: the real-time VM's audio load on core 0, an iperf3 stream into the Linux VM whose
/// network interrupts the distributor spreads over its other vCPUs. The audio ran through the
/// measured seconds (else the run records a failure), core 0 was the real-time VM's, the stream
/// was moved and spread off core 0, and the transfer completed. (Before the device lines
/// reached the vGIC in order, a frame delivered on one CPU while the guest acknowledged the
/// interrupt on another could leave the line high, and the network stopped for good.)
#[test]
fn table1_spread_case_moves_the_stream_and_its_transfer_completes() {
    let out_dir = xtask::build_dir().join("bench-test-table1");
    let _ = std::fs::remove_dir_all(&out_dir);
    let opts = Options {
        parts: vec![Part::Distributor],
        cases: vec![4],
        rounds: 1,
        timeout: Duration::from_secs(300),
        out_dir,
        ..Options::default()
    };
    let results = bench::measure(&opts).expect("running case 4");
    let cases: Vec<_> = results.runs.iter().filter_map(|r| r.distributor.as_ref()).collect();
    assert_eq!(cases.len(), 1, "one run of case 4");
    let case = cases[0];
    assert_eq!(case.failure, None, "case 4 did not complete");
    let mbit = case.mbit_s.expect("iperf3's bandwidth");
    assert!(mbit > 1.0, "{mbit} Mb/s");
    assert!(
        case.events.iter().any(|e| matches!(e, bench::irqtrace::Event::Redirect { .. })),
        "the network stream was never moved: {:?}",
        case.events
    );
    let trace = case.trace.as_ref().expect("the measured seconds' trace");
    let share = bench::table1::CoreShare::of(trace, 0).expect("core 0's shares in the trace");
    assert!(share.rt > 50.0, "the audio held core 0 only {:.0} % of the time", share.rt);
    let net = trace.per_tick("gp/net0");
    let off_core0: Vec<usize> = net.keys().copied().filter(|&c| c != 0).collect();
    assert!(off_core0.len() >= 2, "not spread over two other cores: {net:?}");
}
