//! The suite's host side end to end on recorded consoles: parsing, conversion, the baseline
//! check, the report and the charts. No QEMU.

use super::*;
use crate::baseline::{self, Baseline};
use crate::catalog::{ARMHV, CLIENT_VM, NATIVE, SERVER_VM};
use crate::charts::tests::labels;
use crate::configtext::rewrite_cmdline;
use crate::convert::Mode;
use crate::micro::run_from_console;
use crate::model::{Check, Kind, Results, Stats, Summary, Verdict};
use crate::options::{plan, plan_with};
use crate::parse::Output;
use crate::parse::tests::SAMPLE;
use std::time::Duration;
use xtask::{MachineSpec, qemu};

/// A bench config copied beside stand-ins for the Linux images it names, so that it validates
/// on a clean checkout: scripts/linux-guest.sh builds the real ones, and the tests check the
/// config, not the build. The copy is removed on drop.
pub(crate) struct StandInImages {
    root: PathBuf,
    config: PathBuf,
}

impl StandInImages {
    pub(crate) fn new(config: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("armhv-stand-in-{}-{n}", std::process::id()));
        let images = root.join("build/linux");
        std::fs::create_dir_all(&images).unwrap();
        for name in ["Image", "initramfs-bench.cpio.gz"] {
            std::fs::write(images.join(name), [0u8; 4096]).unwrap();
        }
        let text = std::fs::read_to_string(xtask::root().join(config)).unwrap();
        assert!(
            text.contains("\"../../build/linux/Image\""),
            "{config}: the stand-ins no longer match the images it names"
        );
        let config = root.join(config);
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, text).unwrap();
        StandInImages { root, config }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.config
    }

    pub(crate) fn config_dir(&self) -> PathBuf {
        self.config.parent().unwrap().to_owned()
    }

    pub(crate) fn text(&self) -> String {
        std::fs::read_to_string(&self.config).unwrap()
    }
}

impl Drop for StandInImages {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn step(kind: Kind, variant: &str, mode: Mode) -> Step {
    let features = match kind {
        Kind::Micro | Kind::Wall => vec![],
        Kind::Breakdown => vec![catalog::BREAKDOWN_FEATURE],
        Kind::Ablation => {
            vec![catalog::ABLATIONS.iter().find(|a| a.feature == variant).unwrap().feature]
        }
        Kind::Workload | Kind::Distributor | Kind::TableV | Kind::Paths => vec![],
    };
    Step { kind, variant: variant.into(), features, mode, round: 0, gic: catalog::GICV3 }
}

/// `SAMPLE` with one result's median (and min) replaced.
fn with_median(console: &str, name: &str, median: u64) -> String {
    console
        .lines()
        .map(|l| {
            if l.contains(&format!("vmbench: result {name} ")) {
                l.split(' ')
                    .map(|w| {
                        if w.starts_with("median=") {
                            format!("median={median}")
                        } else if w.starts_with("min=") {
                            format!("min={median}")
                        } else {
                            w.to_owned()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A full suite's results from sample consoles.
pub(crate) fn sample_results() -> Results {
    let eager = with_median(SAMPLE, "vmswitch", 1200);
    let lrs = with_median(&with_median(SAMPLE, "hypercall", 104), "gic-trap", 230);
    // Wall clock: the same lines, other numbers.
    let wall = with_median(SAMPLE, "hypercall", 2412);
    let runs = vec![
        run_from_console(&step(Kind::Micro, "default", Mode::Icount), "bench", SAMPLE, 80.0),
        run_from_console(
            &step(Kind::Breakdown, "ws-breakdown", Mode::Icount),
            "bench",
            SAMPLE,
            81.0,
        ),
        run_from_console(&step(Kind::Ablation, "eager-fp", Mode::Icount), "bench", &eager, 82.0),
        run_from_console(&step(Kind::Ablation, "all-lrs", Mode::Icount), "bench", &lrs, 83.0),
        run_from_console(&step(Kind::Wall, "default", Mode::WallClock), "bench", &wall, 20.0),
    ];
    Results {
        schema: model::SCHEMA,
        meta: baseline::tests::meta(),
        runs: runs.into_iter().collect::<Result<_>>().unwrap(),
        baseline: Check::NotRun,
        workloads: Vec::new(),
    }
}

#[test]
fn plan_follows_the_parts() {
    let labels: Vec<String> = plan(&Part::ALL).iter().map(Step::label).collect();
    assert_eq!(
        labels,
        [
            "micro (icount)",
            "micro, GICv2 (icount)",
            "micro, trap-probe build (icount)",
            "micro, GICv2, trap-probe build (icount)",
            "breakdown, ws-breakdown build (icount)",
            "ablation eager-fp (icount)",
            "ablation all-lrs (icount)",
            "ablation no-spectre-bhb (icount)",
            "micro (wall clock, no icount)",
            "workloads, native (icount), round 1",
            "workloads, under armhv (icount), round 1",
            "workloads, native (icount, instructions counted by QEMU), round 1",
            "workloads, under armhv (icount, instructions counted by QEMU), round 1",
            "distributor case 1, max bandwidth, no audio (icount), round 1",
            "distributor case 2, only core0 (icount), round 1",
            "distributor case 3, distribution #1 (icount), round 1",
            "distributor case 4, distribution #2 (icount), round 1",
            "distributor case 5, only core0 with H.264 (icount), round 1",
            "distributor case 6, distribution #3 with H.264 (icount), round 1",
            "distributor case 7, distribution #4 with H.264 (icount), round 1",
            "Table V trace, native (icount)",
            "Table V trace, under armhv (icount)",
            "microbenchmark paths, traced (icount)",
        ]
    );
    // The default leaves the workloads out.
    assert_eq!(plan(&Options::default().parts).len(), 9);
    let only = plan(&[Part::Wall, Part::Micro]);
    assert_eq!(only.len(), 5);
    assert_eq!(only[0].kind, Kind::Micro);
    assert!(plan(&[Part::Ablations]).iter().all(|s| s.features.len() == 1));
}

#[test]
fn options() {
    let o =
        Options::parse(["--quick", "--only", "micro,wall", "--timeout", "30"].map(String::from))
            .unwrap();
    assert!(o.quick);
    assert_eq!(o.parts, [Part::Micro, Part::Wall]);
    assert_eq!(o.timeout, Duration::from_secs(30));
    assert_eq!((o.machine.cpu.as_str(), o.machine.smp), ("cortex-a76", 2));
    assert!(Options::parse(["--only", "everything"].map(String::from)).is_err());
    assert!(Options::parse(["--only"].map(String::from)).is_err());
    assert!(Options::parse(["--quick", "--update-baseline"].map(String::from)).is_err());
    assert!(Options::parse(["--frobnicate"].map(String::from)).is_err());
    assert!(Options::parse(["--update-baseline", "--only", "wall"].map(String::from)).is_err());
    assert!(Options::parse(["--update-baseline", "--only", "ablations"].map(String::from)).is_ok());
}

#[test]
fn icount_command_line() {
    let m = MachineSpec { icount: true, ..MachineSpec::default() };
    let cmd = qemu::command(Path::new("x.img"), &m);
    let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let joined = args.join(" ");
    assert!(joined.contains("-M virt,virtualization=on,gic-version=3,dtb-randomness=off"));
    assert!(joined.contains("-icount shift=0,sleep=off -rtc base=2024-01-01T00:00:00,clock=vm"));
    // The report quotes the same command line.
    let md = report::markdown(&sample_results(), &report::Charts::default());
    assert!(md.contains("-icount shift=0,sleep=off -rtc base=2024-01-01T00:00:00,clock=vm"));
    // Without icount: as before.
    let plain = qemu::command(Path::new("x.img"), &MachineSpec::default());
    let plain: Vec<String> = plain.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    assert!(!plain.iter().any(|a| a.contains("icount") || a.contains("dtb-randomness")));
}

#[test]
fn runs_convert_ticks_and_keep_skips() {
    let r = sample_results();
    let micro = r.micro().unwrap();
    assert_eq!(micro.figures.len(), 9);
    let ipi = micro.figure("ipi").unwrap();
    assert_eq!((ipi.scale, ipi.median), (16.0, 704.0));
    assert_eq!(micro.overhead, Some(3.0));
    assert_eq!(r.breakdown().len(), 2);
    let m = r.medians();
    assert_eq!(m.keys().collect::<Vec<_>>(), ["all-lrs", "default", "eager-fp"]);
    assert_eq!(m["eager-fp"]["vmswitch"], 1200.0);
    // The breakdown and wall runs are not baseline material.
    assert!(!m.contains_key("ws-breakdown"));

    let skipping = "[bench] vmbench: boot cpus=2 clock=pmu freq=62500000 armhv=yes el=1\n\
                    [bench] vmbench: result hypercall unit=cycles n=10 min=1 median=1 mean=1.0 max=1\n\
                    [bench] vmbench: skip io-in: no virtio-rng device\n\
                    [bench] vmbench: done\n";
    let run = run_from_console(&step(Kind::Micro, "default", Mode::Icount), "bench", skipping, 1.0)
        .unwrap();
    assert_eq!(run.skip("io-in").unwrap().reason, "no virtio-rng device");
    assert!(
        run_from_console(&step(Kind::Micro, "default", Mode::Icount), "other", skipping, 1.0)
            .is_err()
    );
}

#[test]
fn report_has_the_studys_tables() {
    let mut r = sample_results();
    let base = Baseline::updated(None, &r.medians(), &r.meta);
    let mut now = r.medians();
    now.get_mut("default").unwrap().insert("gic-trap".into(), 260.0); // +21 %
    r.baseline = baseline::compare(&base, &now, &r.meta);
    let charts = report::Charts {
        micro: Some("s-micro.svg".into()),
        breakdown: Some("s-breakdown.svg".into()),
        ..report::Charts::default()
    };
    let md = report::markdown(&r, &charts);
    for needle in [
        "## Microbenchmarks (Table II layout)",
        "| Hypercall | **96** | 96 / 96.4 / 130 | 100,000 | – | ≤ 80 | ❌ FAIL | 6,500 | 376 |",
        "| Virtual IPI | **704** ±16 | 640 / 716.8 / 1,136 | 10,000 | – | ≤ 1,000 | ✅ pass |",
        "| Virtual IRQ Completion | **9** | 9 / 9 / 9 | 100,000 | 0.00 | 0 exits | ✅ pass | 71 | 71 |",
        "| Hypercall: PSCI_VERSION | **131** |",
        "Targets met: **2 of 8**.",
        "resolution",
        "## Against the baseline",
        "**1 regression(s), 0 improvement(s)**",
        "| default | Interrupt Controller Trap | 214 | 260 | +21.5 % | ❌ regression |",
        "## World-switch breakdown (Table III layout)",
        "| Register state | Hypercall | VM Switch |",
        "| GP Regs | 34 (42 %) | 68 (11 %) |",
        "| EL1 System Regs | 0 (0 %) | 180.5 (28 %) |",
        "| **Total** | **80** | **646.7** |",
        "| Events measured | 100,021 | 20,002 |",
        "## Design ablations",
        "| Microbenchmark | default | eager-fp | Δ | all-lrs | Δ |",
        "| VM Switch | 1,024 | 1,200 | +176 (+17.2 %) | 1,024 | ±0 |",
        "| Hypercall | 96 | 96 | ±0 | 104 | +8 (+8.3 %) |",
        "## Wall clock, without icount (noisy)",
        "| Hypercall | 2,412 | 2,412 / 96.4 / 130 | 100,000 |",
        "![Microbenchmarks](s-micro.svg)",
        "![World-switch breakdown](s-breakdown.svg)",
        "## How these were measured",
        "- **Counter-read overhead**: 3 instructions",
        "a tick of the virtual counter (62.5 MHz) 16 instructions",
        "(../README.md#how-the-microbenchmarks-are-measured)",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
    assert!(!md.contains("![Design ablations]"));
    assert_eq!(r.baseline.regressions().len(), 1);
    assert_eq!(r.baseline.regressions()[0].verdict, Verdict::Regression);
    let term = report::terminal(&r);
    assert!(term.contains("Hypercall"), "{term}");
    let line = term.lines().find(|l| l.trim_start().starts_with("Hypercall ")).unwrap();
    assert!(line.contains("96") && line.contains("≤ 80") && line.ends_with("FAIL"), "{term}");
}

#[test]
fn failed_targets_and_missing_rows() {
    let console = with_median(SAMPLE, "hypercall", 151)
        .replace("exits-per-op=0.00", "exits-per-op=1.00")
        .lines()
        .filter(|l| !l.contains("result io-in "))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n[bench] vmbench: skip io-in: no interrupt\n";
    let mut r = sample_results();
    r.runs[0] =
        run_from_console(&step(Kind::Micro, "default", Mode::Icount), "bench", &console, 1.0)
            .unwrap();
    r.baseline = Check::Missing { path: "bench/baseline.json".into() };
    let md = report::markdown(&r, &report::Charts::default());
    for needle in [
        "| Hypercall | **151** | 151 / 96.4 / 130 | 100,000 | – | ≤ 80 | ❌ FAIL |",
        "| Virtual IRQ Completion | **9** | 9 / 9 / 9 | 100,000 | 1.00 | 0 exits | ❌ FAIL |",
        "| I/O Latency In | skipped: no interrupt | | | | ≤ 600 | not measured |",
        "Targets met: **1 of 8**.",
        "No baseline (`bench/baseline.json`)",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
}

/// `results` with a GICv2 micro run beside its GICv3 one: other medians, and vmbench's `gic`
/// line as it prints it there.
fn with_gicv2(mut results: Results) -> Results {
    let console = with_median(SAMPLE, "hypercall", 100);
    let console = with_median(&console, "gic-trap", 300);
    let console = with_median(&console, "eoi", 2);
    let console = with_median(&console, "ipi", 50);
    let console = format!("[bench] vmbench: gic v2\n{console}");
    let step = Step { gic: catalog::GICV2, ..step(Kind::Micro, "default", Mode::Icount) };
    let run = run_from_console(&step, "bench", &console, 90.0).unwrap();
    results.runs.insert(1, run);
    // The probe builds: vmbench's `trap` figure, and the others (which the tables leave out).
    for (gic, trap) in [(catalog::GICV3, 6), (catalog::GICV2, 7)] {
        let trap = format!(
            "[bench] vmbench: result trap unit=cycles n=10 min={trap} median={trap} \
             mean={trap}.0 max={trap}\n[bench] vmbench: result hypercall "
        );
        let console = with_median(SAMPLE, "hypercall", 500).replacen(
            "[bench] vmbench: result hypercall ",
            &trap,
            1,
        );
        let console = format!("[bench] vmbench: gic v{gic}\n{console}");
        let probe = Step {
            gic,
            features: vec![catalog::TRAP_PROBE],
            ..self::step(Kind::Micro, catalog::TRAP_PROBE, Mode::Icount)
        };
        results.runs.insert(2, run_from_console(&probe, "bench", &console, 9.0).unwrap());
    }
    results
}

#[test]
fn the_micro_part_runs_on_both_gics() {
    for parts in [
        Options::default().parts,
        Options::parse(["--only", "micro"].map(String::from)).unwrap().parts,
    ] {
        let steps = plan(&parts);
        let micro: Vec<&Step> = steps.iter().filter(|s| s.kind == Kind::Micro).collect();
        assert_eq!(micro.iter().map(|s| s.gic).collect::<Vec<_>>(), [3, 2, 3, 2], "{steps:?}");
        // Only the interrupt controller differs.
        assert_eq!(Step { gic: 3, ..micro[1].clone() }, *micro[0]);
        assert_eq!((micro[0].slug(), micro[1].slug()), ("micro".into(), "micro-gicv2".into()));
        // Then the probe build for Table 3's Trap, on both.
        for probe in &micro[2..] {
            assert_eq!(probe.variant, catalog::TRAP_PROBE);
            assert_eq!(probe.features, [catalog::TRAP_PROBE]);
            assert_eq!(
                Step { variant: "default".into(), features: vec![], ..(*probe).clone() }.gic,
                probe.gic
            );
        }
        assert_eq!(
            (micro[2].slug(), micro[3].slug()),
            ("micro-trap-probe".into(), "micro-gicv2-trap-probe".into())
        );
    }
    let opts =
        Options::parse(["--only", "micro", "--cpu", "cortex-a57"].map(String::from)).unwrap();
    let steps = plan(&opts.parts);
    let m = micro::machine(&steps[1], &opts);
    assert_eq!((m.gic, m.cpu.as_str(), m.smp, m.icount), (2, "cortex-a57", 2, true));
    assert!(m.hyp_features.is_empty());
    assert_eq!(micro::machine(&steps[0], &opts).gic, 3);
    let cmd = qemu::command_line(&qemu::command(Path::new("x.img"), &m));
    assert!(cmd.contains("virtualization=on,gic-version=2"), "{cmd}");
    assert!(cmd.contains("-icount shift=0,sleep=off"), "{cmd}");
}

#[test]
fn the_gicv2_run_stays_out_of_the_baseline_and_is_recorded() {
    let r = with_gicv2(sample_results());
    let v2 = r.micro_on(catalog::GICV2).unwrap();
    assert_eq!((v2.gic, v2.label().as_str()), (2, "micro, GICv2 (icount)"));
    assert_eq!(v2.console.vm("bench").unwrap().gic.as_deref(), Some("v2"));
    // The suite's figures and baseline are GICv3's, as before.
    assert_eq!(r.micro().unwrap().gic, 3);
    assert_eq!(r.medians(), sample_results().medians());
    assert_eq!(r.medians()["default"]["hypercall"], 96.0);
    // Each run's GIC is in the JSON; results from before it were all GICv3.
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["runs"][1]["gic"], 2);
    let mut old = json.clone();
    for run in old["runs"].as_array_mut().unwrap() {
        run.as_object_mut().unwrap().remove("gic");
    }
    let old: Results = serde_json::from_value(old).unwrap();
    assert!(old.runs.iter().all(|run| run.gic == 3));
    let failed = micro::not_run(&plan(&[Part::Micro])[1], model::NotRun::Failed("boom".into()));
    let back: model::Run = serde_json::from_str(&serde_json::to_string(&failed).unwrap()).unwrap();
    assert_eq!(back, failed);
    // vmbench on the other GIC than the machine's would time the wrong interface.
    let v3_console = format!("[bench] vmbench: gic v3\n{SAMPLE}");
    let v2_step = Step { gic: catalog::GICV2, ..step(Kind::Micro, "default", Mode::Icount) };
    let err = run_from_console(&v2_step, "bench", &v3_console, 1.0).unwrap_err();
    assert!(err.to_string().contains("found GIC v3 on a gic-version=2 machine"), "{err}");
}

#[test]
fn report_puts_gicv3_and_gicv2_side_by_side_and_in_table_3() {
    let r = with_gicv2(sample_results());
    let md = report::markdown(&r, &report::Charts::default());
    for needle in [
        "| Machine | `virt`, `cortex-a76`, 2 CPUs, GICv3; the micro part on GICv2 too |",
        "micro, GICv2 (icount): 90 s",
        "## Microbenchmarks on GICv3 and GICv2",
        "| Microbenchmark | GICv3 | GICv2 | GICv2 − GICv3 | Exits/op (v3 / v2) |",
        "| Hypercall | 96 | 100 | +4 (+4.2 %) | – / – |",
        "| Interrupt Controller Trap | 214 | 300 | +86 (+40.2 %) | 1.00 / 1.00 |",
        "| Virtual IPI | 704 ±16 | 800 ±16 | +96 (+13.6 %) | – / – |",
        "| Virtual IRQ Completion | 9 | 2 | -7 (-77.8 %) | 0.00 / 0.00 |",
        "| VM Switch | 1,024 | 1,024 | ±0 | – / – |",
        "an MMIO load of GICC_IAR and a store to GICC_EOIR in the hardware's virtual CPU \
         interface (GICV), which armhv maps at the guest's GICC: neither trapped to armhv \
         (0.00 exits per operation). They cost 2 instructions, against 9 on GICv3 \
         (ICC_IAR1_EL1 and ICC_EOIR1_EL1, system registers): -7 (-77.8 %).",
        "**Virtual IRQ Completion (acknowledge + EOI).** On GICv2 the guest acknowledges",
        "## KVM/ARM Table 3 layout (armhv, GICv2)",
        "**instructions under icount**",
        "| Micro Test | armhv, GICv2 | armhv, GICv3 | What armhv measures |",
        "| Hypercall | 100 | 96 | Hypercall: ",
        "| Trap | 7 | 6 | The paper's bare switch",
        "| I/O Kernel | 300 | 214 | Interrupt Controller Trap: ",
        "| I/O User | n/a (armhv emulates devices at EL2; no user-space hop) | n/a (armhv \
         emulates devices at EL2; no user-space hop) | ",
        "| IPI | 800 ±16 | 704 ±16 | Virtual IPI: ",
        "| EOI | 2 | 9 | Virtual IRQ Completion: ",
        "- **GICv2.** The micro part's second run is the same command with `gic-version=2`",
        "(../README.md#gicv2-and-the-kvmarm-table-3-layout)",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
    // Table 3's rows in the paper's order.
    let rows: Vec<&str> = md
        .split("## KVM/ARM Table 3 layout")
        .nth(1)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("| ")?.split(" |").next())
        .skip(1)
        .filter(|c| !c.starts_with('-'))
        .take(6)
        .collect();
    assert_eq!(rows, ["Hypercall", "Trap", "I/O Kernel", "I/O User", "IPI", "EOI"]);
    assert!(!md.contains("not run"), "{md}");
    // The Table II section is GICv3's, as before.
    assert!(md.contains("| Hypercall | **96** | 96 / 96.4 / 130 |"));
    let term = report::terminal(&r);
    assert!(term.contains("GICv3 and GICv2, instructions under icount (cortex-a76):"), "{term}");
    let (_, side) = term.split_once("GICv3 and GICv2").unwrap();
    let line =
        side.lines().find(|l| l.trim_start().starts_with("Virtual IRQ Completion  ")).unwrap();
    assert!(
        line.contains(" 9 ") && line.contains(" 2 ") && line.ends_with("-7 (-77.8 %)"),
        "{term}"
    );
    assert!(
        side.contains(
            "EOI + ACK on GICv2: a GICC_IAR load and a GICC_EOIR store to the mapped GICV, \
             no trap (0.00 exits/op): 2 instructions; GICv3 (system registers): 9, -7 (-77.8 %)"
        ),
        "{term}"
    );
}

#[test]
fn a_missing_gicv2_run_is_not_run_with_its_reason() {
    // Results from before the GICv2 step.
    let r = sample_results();
    let md = report::markdown(&r, &report::Charts::default());
    for needle in [
        "| Hypercall | 96 | not run |  | – / – |",
        "| Virtual IRQ Completion | 9 | not run |  | 0.00 / – |",
        "GICv2: not run: these results have no GICv2 micro step.",
        "| Hypercall | not run | 96 | ",
        "| EOI | not run | 9 | ",
        "| Trap | not run | not run | ",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
    assert!(!md.contains("(acknowledge + EOI)"), "no EOI sentence without a GICv2 figure");
    let term = report::terminal(&r);
    assert!(term.contains("GICv2: not run: these results have no GICv2 micro step"), "{term}");
    // A step that failed, and one this machine cannot run: the reason, never a zero.
    let gicv2 = plan(&[Part::Micro])[1].clone();
    for (why, says) in [
        (
            model::NotRun::Failed("no `[bench] vmbench: done`: timed out after 600 s".into()),
            "GICv2: not run: failed: no `[bench] vmbench: done`: timed out after 600 s.",
        ),
        (
            model::NotRun::Unsupported("a GICv2 addresses at most 8 CPUs, this run has 16".into()),
            "GICv2: not run: a GICv2 addresses at most 8 CPUs, this run has 16.",
        ),
    ] {
        let mut r = sample_results();
        r.runs.insert(1, micro::not_run(&gicv2, why));
        let md = report::markdown(&r, &report::Charts::default());
        assert!(md.contains(says), "{says:?} missing from:\n{md}");
        assert!(md.contains("| Hypercall | 96 | not run |  | – / – |"), "{md}");
        assert!(md.contains("| IPI | not run | 704 ±16 | "), "{md}");
        assert!(!md.contains("| Hypercall | 96 | 0 |"), "{md}");
        assert!(report::terminal(&r).contains(&says[..says.len() - 1]));
        assert_eq!(r.medians(), sample_results().medians());
        // No GICv2 series without its figures.
        assert!(!labels(&charts::micro(&r).unwrap().unwrap()).contains(&"GICv2"));
    }
    // A benchmark the GICv2 run skipped says so in its cell.
    let mut r = with_gicv2(sample_results());
    let v2 = &mut r.runs[1];
    v2.figures.retain(|f| f.name != "io-in");
    v2.skips.push(crate::parse::Skip { name: "io-in".into(), reason: "no interrupt".into() });
    let md = report::markdown(&r, &report::Charts::default());
    assert!(md.contains("| I/O Latency In | 812 | skipped: no interrupt |  | – / – |"), "{md}");
}

#[test]
fn charts() {
    let r = sample_results();
    let micro = charts::micro(&r).unwrap().unwrap();
    let l = labels(&micro);
    assert!(l.contains(&"Interrupt Controller Trap") && l.contains(&"1,024"), "{l:?}");
    assert!(l.contains(&"target"), "the targets' legend: {l:?}");
    assert!(l.iter().any(|t| t.starts_with("instructions, log scale (under icount")), "{l:?}");
    assert!(l.contains(&"1,000"), "a power of ten on the log axis: {l:?}");
    let b = charts::breakdown(&r).unwrap().unwrap();
    let l = labels(&b);
    assert!(l.contains(&"GP Regs") && l.contains(&"VM Switch") && l.contains(&"646.7"), "{l:?}");
    assert!(l.contains(&"FP/SIMD Regs"), "{l:?}");
    // Classes that cost nothing on any path are left out of the legend.
    let mut no_fp = r.clone();
    for p in &mut no_fp.runs[1].console.breakdown {
        for (class, v) in &mut p.classes {
            if class == "fpsimd" {
                *v = 0.0;
            }
        }
    }
    assert!(!charts::breakdown(&no_fp).unwrap().unwrap().contains("FP/SIMD"));
    // Ablations: the difference from the default build.
    let a = charts::ablations(&r).unwrap().unwrap();
    let l = labels(&a);
    assert!(l.contains(&"eager-fp") && l.contains(&"all-lrs"), "{l:?}");
    assert!(l.contains(&"+176") && l.contains(&"+8"), "{l:?}");
    // Without the default run: the medians themselves.
    let mut no_default = r.clone();
    no_default.runs.retain(|run| run.kind != Kind::Micro);
    let a = charts::ablations(&no_default).unwrap().unwrap();
    let l = labels(&a);
    assert!(l.contains(&"1,200") && l.iter().any(|t| t.contains("log scale")), "{l:?}");
    // Without those runs there is no chart.
    let mut only_wall = r.clone();
    only_wall.runs.retain(|run| run.kind == Kind::Wall);
    assert!(charts::micro(&only_wall).unwrap().is_none());
    assert!(charts::breakdown(&only_wall).unwrap().is_none());
    assert!(charts::ablations(&only_wall).unwrap().is_none());
    // With a GICv2 run: a bar per GIC.
    let both = charts::micro(&with_gicv2(r.clone())).unwrap().unwrap();
    let l = labels(&both);
    assert!(l.contains(&"GICv3") && l.contains(&"GICv2") && l.contains(&"target (GICv3)"), "{l:?}");
    assert!(l.contains(&"96") && l.contains(&"100") && l.contains(&"2"), "{l:?}");
}

#[test]
fn outputs_are_written_and_reread() {
    let dir = std::env::temp_dir().join(format!("armhv-bench-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let r = sample_results();
    let written = write_outputs(&dir, &r).unwrap();
    let names: Vec<String> =
        written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for n in [
        "2024-01-01-120000.json",
        "2024-01-01-120000.md",
        "2024-01-01-120000-micro.svg",
        "2024-01-01-120000-breakdown.svg",
        "2024-01-01-120000-ablations.svg",
        "latest.md",
        "latest.json",
        "latest-micro.svg",
    ] {
        assert!(names.contains(&n.to_string()), "{n} not in {names:?}");
    }
    let latest = std::fs::read_to_string(dir.join("latest.md")).unwrap();
    assert!(latest.contains("(latest-micro.svg)"));
    let back: Results =
        serde_json::from_str(&std::fs::read_to_string(dir.join("latest.json")).unwrap()).unwrap();
    assert_eq!(back, r);
    // A later run without the breakdown leaves no stale latest chart behind.
    let mut fewer = r.clone();
    fewer.runs.retain(|run| run.kind != Kind::Breakdown);
    write_outputs(&dir, &fewer).unwrap();
    assert!(!dir.join("latest-breakdown.svg").exists());
    assert!(dir.join("2024-01-01-120000-micro.svg").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_bench_config_rewrites_and_still_validates() {
    let path = root().join("configs/bench/micro.toml");
    let Ok(text) = std::fs::read_to_string(&path) else { return };
    let out = rewrite_cmdline(&text, "bench", QUICK_WORDS).unwrap();
    let machine = Options::default().machine.as_config_machine();
    let cfg = vmconfig::parse(&out, &path, &machine).unwrap_or_else(|e| panic!("{e}"));
    let bench = cfg.vms.iter().find(|v| v.name == "bench").unwrap();
    assert!(bench.cmdline.ends_with(QUICK_WORDS), "{}", bench.cmdline);
}

#[test]
fn utc_timestamps() {
    assert_eq!(timestamps(0), ("1970-01-01T00:00:00Z".into(), "1970-01-01-000000".into()));
    assert_eq!(timestamps(1_704_110_400).1, "2024-01-01-120000");
    // 2024-02-29 (leap day) 23:59:59.
    assert_eq!(timestamps(1_709_251_199).0, "2024-02-29T23:59:59Z");
}

// --- The application workloads ---

/// A native run's console (untagged), as armhv-bench prints it.
pub(super) const NATIVE_CONSOLE: &str = "\
armhv-guest: up, 2 cpus, kernel 6.1.0-56-arm64
armhv-guest: running armhv-bench --local --reps 3
armhv-bench: workload hackbench: /usr/local/bin/hackbench -P -g 2 -f 10 -l 100 -s 100
armhv-bench: result hackbench rep=1 seconds=2.876
armhv-bench: result hackbench rep=2 seconds=2.704
armhv-bench: result hackbench rep=3 seconds=2.800
armhv-bench: workload blk-read: 4 x dd if=/dev/vda of=/dev/null bs=1M count=64 iflag=direct
armhv-bench: result blk-read rep=1 instr_mib=161000 mib=256
armhv-bench: result blk-read rep=2 instr_mib=160000 mib=256
armhv-bench: result blk-read rep=3 instr_mib=163000 mib=256
armhv-bench: workload tcp-rr: /usr/local/bin/sockperf ping-pong --tcp -i 127.0.0.1 -p 11111 -t 5 -m 64 --full-rtt
armhv-bench: result tcp-rr rep=1 usec=679.344 mean_usec=852.884 n=5837
armhv-bench: result tcp-rr rep=2 usec=497.616 mean_usec=1031.542 n=4833
armhv-bench: error tcp-rr rep=3: sockperf: connection refused
armhv-bench: done
armhv-guest: armhv-bench --local --reps 3 exited with status 0, powering off
";

/// An armhv run's console: lines tagged by VM, the server's among them.
pub(super) const ARMHV_CONSOLE: &str = "\
[   2.081892 armhv INFO  cpu0] CPU 0 entering the scheduler
[linux1] armhv-bench: serving (iperf3 on 5201, sockperf on 11111; stop: connect to 5999)
[linux1] armhv-bench: result hackbench rep=1 seconds=99
[linux0] armhv-bench: workload hackbench: /usr/local/bin/hackbench -P -g 2 -f 10 -l 100 -s 100
[linux0] armhv-bench: result hackbench rep=1 seconds=3.1
[linux0] armhv-bench: result hackbench rep=2 seconds=2.9
[linux0] armhv-bench: result hackbench rep=3 seconds=3.0
[linux0] armhv-bench: result blk-read rep=1 instr_mib=725000 mib=256
[linux0] armhv-bench: result blk-read rep=2 instr_mib=730000 mib=256
[linux0] armhv-bench: result blk-read rep=3 instr_mib=720000 mib=256
[linux0] armhv-bench: workload tcp-rr: /usr/local/bin/sockperf ping-pong --tcp -i 10.0.0.2 -p 11111 -t 5 -m 64 --full-rtt
[linux0] armhv-bench: result tcp-rr rep=1 usec=935.360 mean_usec=1867.762 n=2673
[linux0] armhv-bench: result tcp-rr rep=2 usec=900 mean_usec=1800 n=2600
[linux0] armhv-bench: result tcp-rr rep=3 usec=1000 mean_usec=1900 n=2500
[linux0] armhv-bench: done
[linux1] armhv-bench: stopped
";

pub(crate) fn workload_run(variant: &str, console: &str) -> model::Run {
    workload_run_round(variant, console, 1)
}

fn workload_run_round(variant: &str, console: &str, round: u32) -> model::Run {
    let tag = (variant == ARMHV).then_some(CLIENT_VM);
    let mut out = Output::parse(console, tag).unwrap();
    out.round = round;
    out.host_load = Some((1.5, 2.25));
    model::Run {
        kind: Kind::Workload,
        variant: variant.into(),
        features: vec![],
        mode: Mode::Cost,
        seconds: 60.0,
        figures: vec![],
        skips: vec![],
        overhead: None,
        console: Default::default(),
        qemu_command: format!("qemu-system-aarch64 {variant}"),
        workloads: Some(out),
        distributor: None,
        tablev: None,
        paths: None,
        gic: catalog::GICV3,
        not_run: None,
    }
}

pub(crate) fn workload_results() -> Results {
    let mut r = sample_results();
    r.meta.workloads_config = Some("configs/bench/workloads.toml".into());
    r.runs.push(workload_run(NATIVE, NATIVE_CONSOLE));
    r.runs.push(workload_run(ARMHV, ARMHV_CONSOLE));
    r.workloads = workloads::summarize(&r.runs);
    r
}

#[test]
fn workload_lines_parse() {
    let native = Output::parse(NATIVE_CONSOLE, None).unwrap();
    assert!(native.done);
    assert_eq!(native.samples.len(), 8);
    assert_eq!(native.values("hackbench"), [2.876, 2.704, 2.8]);
    let rr = native.samples.iter().find(|s| s.workload == "tcp-rr").unwrap();
    assert_eq!((rr.metric.as_str(), rr.value, rr.rep), ("usec", 679.344, 1));
    assert_eq!(rr.extra["mean_usec"], 852.884);
    assert_eq!(rr.extra["n"], 5837.0);
    assert_eq!(native.failures.len(), 1);
    assert_eq!(native.failures[0].rep, 3);
    assert_eq!(native.failures[0].message, "sockperf: connection refused");
    assert!(native.commands["hackbench"].starts_with("/usr/local/bin/hackbench -P"));
    // Under armhv only the client VM's lines count; natively only untagged ones.
    let armhv = Output::parse(ARMHV_CONSOLE, Some(CLIENT_VM)).unwrap();
    assert_eq!(armhv.values("hackbench"), [3.1, 2.9, 3.0]);
    assert!(armhv.done);
    assert!(Output::parse(ARMHV_CONSOLE, None).unwrap().samples.is_empty());
    let server = Output::parse(ARMHV_CONSOLE, Some(SERVER_VM)).unwrap();
    assert!(!server.done && server.samples.len() == 1);
    // Malformed result lines are errors that name the line.
    for bad in [
        "armhv-bench: result hackbench seconds=2",
        "armhv-bench: result hackbench rep=x seconds=2",
        "armhv-bench: result hackbench rep=1",
        "armhv-bench: result hackbench rep=1 seconds=fast",
        "armhv-bench: result hackbench rep=1 seconds=inf",
        "armhv-bench: result hackbench rep=1 usec=2",
        "armhv-bench: result hackbench rep=1 seconds",
    ] {
        let e = Output::parse(bad, None).unwrap_err();
        assert!(format!("{e:#}").contains("console line 1"), "{bad}: {e:#}");
    }
    // A workload the catalogue does not know is kept as printed.
    let other = Output::parse("armhv-bench: result fio rep=1 iops=1000", None).unwrap();
    assert_eq!(other.samples[0].metric, "iops");
}

#[test]
fn stats_and_normalization() {
    let s = Stats::of(&[3.0, 1.0, 2.0]).unwrap();
    assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
    assert_eq!(s.spread(), 1.0);
    assert_eq!(Stats::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
    assert!(Stats::of(&[]).is_none());
    // Time: armhv over native; throughput: native over armhv. 1.00 = no overhead.
    assert_eq!(workloads::normalized(false, 2.0, 3.0), Some(1.5));
    assert_eq!(workloads::normalized(true, 300.0, 100.0), Some(3.0));
    assert_eq!(workloads::normalized(true, 100.0, 100.0), Some(1.0));
    assert_eq!(workloads::normalized(true, 100.0, 0.0), None);
    assert_eq!(workloads::normalized(false, 0.0, 1.0), None);

    let r = workload_results();
    let names: Vec<&str> = r.workloads.iter().map(|s| s.workload.as_str()).collect();
    assert_eq!(names, ["hackbench", "blk-read", "tcp-rr"], "catalogue order");
    let hb = &r.workloads[0];
    assert_eq!(hb.native.unwrap().median, 2.8);
    assert_eq!(hb.armhv.unwrap().median, 3.0);
    assert!((hb.normalized.unwrap() - 3.0 / 2.8).abs() < 1e-12);
    // Best of n: the least time on each side.
    assert!((hb.normalized_best.unwrap() - 2.9 / 2.704).abs() < 1e-12);
    let blk = &r.workloads[1];
    assert!(!blk.higher_is_better, "a cost: instructions per MiB");
    assert!((blk.normalized.unwrap() - 725_000.0 / 161_000.0).abs() < 1e-12);
    // Best of n: the fewest instructions on each side.
    assert!((blk.normalized_best.unwrap() - 720_000.0 / 160_000.0).abs() < 1e-12);
    // The failed native repetition leaves two: their median is their mean.
    let rr = &r.workloads[2];
    assert_eq!(rr.native.unwrap().n, 2);
    assert_eq!(rr.native.unwrap().median, (679.344 + 497.616) / 2.0);
    // One side only: figures but no ratio.
    let mut one = r.clone();
    one.runs.retain(|run| run.variant != NATIVE);
    let rows = workloads::summarize(&one.runs);
    assert!(rows[0].armhv.is_some() && rows[0].native.is_none() && rows[0].normalized.is_none());
    assert!(workloads::summarize(&sample_results().runs).is_empty());

    // Rounds: every run of a variant counts.
    let mut rounds = r.clone();
    let second = NATIVE_CONSOLE.replace("seconds=2.876", "seconds=1.0");
    rounds.runs.push(workload_run_round(NATIVE, &second, 2));
    let rows = workloads::summarize(&rounds.runs);
    let n = rows[0].native.unwrap();
    assert_eq!((n.n, n.min, n.median), (6, 1.0, (2.704 + 2.8) / 2.0));
    assert_eq!(
        rounds.runs.last().unwrap().label(),
        "workloads, native (icount, instructions counted by QEMU), round 2"
    );
}

#[test]
fn workload_options_and_plan() {
    let o = Options::parse(["--with-workloads"].map(String::from)).unwrap();
    assert_eq!(o.parts.last(), Some(&Part::Workloads));
    assert_eq!(o.parts.len(), 5);
    let o = Options::parse(
        ["--only", "workloads", "--workloads", "hackbench,tcp-rr", "--reps", "5"].map(String::from),
    )
    .unwrap();
    assert_eq!(o.parts, [Part::Workloads]);
    assert_eq!(o.workloads, ["hackbench", "tcp-rr"]);
    assert_eq!(o.reps, 5);
    assert_eq!(Options::default().reps, 2);
    // The icount workloads first, then the costs; one run of each side, as the host's load
    // reaches neither figure.
    let steps = plan(&o.parts);
    let slugs: Vec<String> = steps.iter().map(Step::slug).collect();
    assert_eq!(
        slugs,
        [
            "workloads-icount-r1-native",
            "workloads-icount-r1-armhv",
            "workloads-cost-r1-native",
            "workloads-cost-r1-armhv",
        ]
    );
    assert_eq!(
        steps[3].label(),
        "workloads, under armhv (icount, instructions counted by QEMU), round 1"
    );
    assert!(steps[..2].iter().all(|s| s.mode == Mode::Icount));
    assert!(steps[2..].iter().all(|s| s.mode == Mode::Cost && s.features.is_empty()));
    // Only the clocks the chosen workloads need.
    let icount_only = plan_with(&o.parts, 3, &[], &catalog::clocks(&o.workloads));
    assert_eq!(icount_only.len(), 2, "hackbench and tcp-rr are both timed under icount");
    let cost = catalog::clocks(&["uplink-rr".to_owned()]);
    let cost_steps = plan_with(&o.parts, 3, &[], &cost);
    let rounds: Vec<_> = cost_steps.iter().map(|s| (s.round, s.variant.as_str())).collect();
    assert_eq!(
        rounds,
        [(1, NATIVE), (1, ARMHV), (2, NATIVE), (2, ARMHV), (3, NATIVE), (3, ARMHV)],
        "the cost runs boot each side `rounds` times, in turn"
    );
    // The other parts are not repeated, but for the distributor's cases.
    let all =
        plan_with(&Part::ALL, 2, &[1, 2, 3, 4, 5, 6, 7], &catalog::clocks(&catalog::all_names()));
    assert_eq!(all.len(), 9 + 2 + 2 * 2 + 2 * 7 + 2 + 1);
    let once = |s: &&Step| !matches!(s.kind, Kind::Workload | Kind::Distributor);
    assert!(all.iter().filter(once).all(|s| s.round == 0));
    assert_eq!(Options::parse(["--rounds", "5"].map(String::from)).unwrap().rounds, 5);
    assert!(Options::parse(["--rounds", "0"].map(String::from)).is_err());
    assert!(Options::parse(["--workloads", "kernel-build"].map(String::from)).is_err());
    assert!(Options::parse(["--reps", "0"].map(String::from)).is_err());
    assert!(
        Options::parse(["--update-baseline", "--only", "workloads"].map(String::from)).is_err()
    );
    assert_eq!(Options::default().workloads, catalog::all_names());
}

#[test]
fn workload_command_lines() {
    assert_eq!(
        workloads::run_parameter(
            Some("10.0.0.2"),
            3,
            None,
            &workloads::RealIo::default(),
            &["hackbench".into(), "tcp-rr".into()]
        ),
        "armhv.run=armhv-bench,--peer,10.0.0.2,--reps,3,hackbench,tcp-rr"
    );
    let io = workloads::RealIo::default();
    assert_eq!(
        workloads::run_parameter(None, 1, Some(2), &io, &[]),
        "armhv.run=armhv-bench,--local,--reps,1,--seconds,2"
    );
    let io = workloads::RealIo {
        mdisk: Some(128 << 20),
        uplink_mac: Some([0x52, 0x54, 0, 0xa5, 0xbe, 1]),
    };
    assert_eq!(
        workloads::run_parameter(None, 2, None, &io, &["uplink-rr".into()]),
        "armhv.run=armhv-bench,--local,--reps,2,--mdisk,128,--uplink,52:54:00:a5:be:01,uplink-rr"
    );
    assert_eq!(
        workloads::native_cmdline(
            "console=ttyAMA0 quiet armhv.ip=10.0.0.1/24 armhv.gw=10.0.0.254 armhv.run=x",
            "armhv.run=y"
        ),
        "console=ttyAMA0 quiet armhv.run=y"
    );
    assert_eq!(workloads::vm_address("console=ttyAMA0 armhv.ip=10.0.0.2/24"), Some("10.0.0.2"));
    assert_eq!(workloads::vm_address("console=ttyAMA0"), None);
    // The native machine mirrors the client VM: vCPUs, RAM, disk, entropy device.
    let dir = std::env::temp_dir().join(format!("armhv-bench-native-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Image"), [0u8; 4096]).unwrap();
    std::fs::write(dir.join("initrd"), [0u8; 16]).unwrap();
    let cfg = "[[vm]]\nname = \"linux0\"\nvcpus = 2\nmemory_size = \"256M\"\nkernel = \"Image\"\n\
               initrd = \"initrd\"\ncmdline = \"console=ttyAMA0 quiet armhv.ip=10.0.0.1/24\"\n\
               devices = [\"pl011\", \"virtio-rng\"]\n[[vm.disk]]\nsize = \"64M\"\n";
    let machine = workloads::armhv_machine(&Options::default()).as_config_machine();
    let cfg = vmconfig::parse(cfg, &dir.join("w.toml"), &machine).unwrap_or_else(|e| panic!("{e}"));
    let cmd = workloads::native_command(
        &workloads::armhv_machine(&Options::default()),
        &cfg.vms[0],
        "armhv.run=armhv-bench,--local",
        Some(Path::new("/tmp/d.img")),
        &workloads::NativeIo::default(),
    )
    .unwrap();
    let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let joined = args.join(" ");
    assert!(joined.starts_with(
        "-M virt,gic-version=3,dtb-randomness=off -cpu cortex-a76 -smp 4 -m 2048M -kernel "
    ));
    assert!(!joined.contains("virtualization") && !joined.contains("icount"));
    let cmdline = "console=ttyAMA0 quiet armhv.run=armhv-bench,--local maxcpus=2 mem=256M";
    assert!(args.contains(&cmdline.to_owned()), "{joined}");
    assert!(joined.contains("-global virtio-mmio.force-legacy=false"));
    assert!(joined.contains("if=none,id=d0,format=raw,cache=unsafe,file=/tmp/d.img"));
    assert!(joined.ends_with("-device virtio-rng-device"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_workloads_config_validates() {
    let config = StandInImages::new("configs/bench/workloads.toml");
    let machine = workloads::armhv_machine(&Options::default()).as_config_machine();
    let cfg = vmconfig::load(config.path(), &machine).unwrap_or_else(|e| panic!("{e}"));
    let client = cfg.vms.iter().find(|v| v.name == CLIENT_VM).unwrap();
    let server = cfg.vms.iter().find(|v| v.name == SERVER_VM).unwrap();
    assert_eq!(client.disks.len(), 2);
    // The real-I/O workloads' devices: a disk on a partition the guest tells from the RAM disk
    // by its size, and a NIC on the uplink's network.
    let io = workloads::RealIo::of(&cfg, CLIENT_VM).unwrap();
    assert_eq!(io.mdisk, Some(128 << 20));
    assert_eq!(io.uplink_mac.map(workloads::mac_text).as_deref(), Some("52:54:00:a5:be:01"));
    assert_eq!(cfg.uplink(), Some("wan"));
    assert_eq!(workloads::vm_address(&server.cmdline), Some("10.0.0.2"));
    assert!(server.cmdline.contains("armhv.run=armhv-bench,serve"));
}

#[test]
fn workload_report_and_chart() {
    let r = workload_results();
    let charts =
        report::Charts { workloads: Some("s-workloads.svg".into()), ..report::Charts::default() };
    let md = report::markdown(&r, &charts);
    for needle in [
        "## Application workloads (normalized to native)",
        "**1.00 = no overhead**",
        "| Workload | Clock | Unit | Native: median (range) | armhv: median (range) | Normalized | Best of n |",
        "| Hackbench | icount | s, lower is better | 2.80 (2.70–2.88) | 3.00 (2.90–3.10) | **1.07** | 1.07 |",
        "| Block read (virtio-blk) | cost | instructions per MiB, lower is better | 161,000 (160,000–163,000) | 725,000 (720,000–730,000) | **4.50** | 4.50 |",
        "| TCP request/response (sockperf) | icount | µs, lower is better | 588 (498–679) | 935 (900–1,000) |",
        "over **loopback**",
        "- workloads, native (icount, instructions counted by QEMU), round 1, `tcp-rr` (rep 3): sockperf: connection refused",
        "- **TCP request/response (sockperf)** (`tcp-rr`), under armhv: `/usr/local/bin/sockperf \
         ping-pong --tcp -i 10.0.0.2",
        "- **Native**: 1 run(s) of 3 repetition(s) of each workload (QEMU ran 60 s, host load 1.5 → 2.2): `qemu-system-aarch64 native`",
        "([how](../README.md#application-workloads))",
        "![Application workloads, normalized to native](s-workloads.svg)",
        "| Workloads | `configs/bench/workloads.toml` (VM `linux0`",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
    let term = report::terminal(&r);
    assert!(term.contains("Application workloads"), "{term}");
    let line = term.lines().find(|l| l.trim_start().starts_with("Hackbench")).unwrap();
    assert!(line.ends_with("2.80     3.00        1.07       1.07"), "{line:?}");
    assert!(term.contains("Instructions under icount"), "the micro table too: {term}");

    let svg = charts::workloads(&r).unwrap().unwrap();
    let l = labels(&svg);
    assert!(l.contains(&"1.07") && l.contains(&"4.50"), "{l:?}");
    assert!(l.contains(&"best of n") && l.contains(&"TCP request/response (sockperf) *"), "{l:?}");
    assert!(l.iter().any(|t| t.starts_with("native = 1.00")), "{l:?}");
    assert!(charts::workloads(&sample_results()).unwrap().is_none());

    // Workloads only: no microbenchmark sections or method.
    let mut only = r.clone();
    only.runs.retain(|run| run.kind == Kind::Workload);
    let md = report::markdown(&only, &charts);
    assert!(md.contains("## Application workloads") && !md.contains("## How these were measured"));
    assert!(!md.contains("| Config |"));
    let term = report::terminal(&only);
    assert!(term.contains("Hackbench") && !term.contains("no icount run"), "{term}");
}

#[test]
fn workload_outputs_round_trip() {
    let dir = std::env::temp_dir().join(format!("armhv-bench-wl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let r = workload_results();
    write_outputs(&dir, &r).unwrap();
    assert!(dir.join("2024-01-01-120000-workloads.svg").exists());
    let latest = std::fs::read_to_string(dir.join("latest.md")).unwrap();
    assert!(latest.contains("(latest-workloads.svg)"));
    let text = std::fs::read_to_string(dir.join("latest.json")).unwrap();
    assert!(text.contains("\"kind\": \"workload\"") && text.contains("\"normalized\""));
    let back: Results = serde_json::from_str(&text).unwrap();
    // The samples exactly; the derived ratios may differ in the last bit (serde_json's float
    // parsing), which is why `--from` derives them again.
    assert_eq!(back.runs, r.runs);
    assert_eq!(workloads::summarize(&back.runs), r.workloads);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The distributor's cases from recorded consoles.
fn distributor_results() -> Results {
    use distributor::tests::case_run;
    let mut meta = baseline::tests::meta();
    meta.distributor_config = Some("configs/bench/distributor.toml".into());
    Results {
        schema: model::SCHEMA,
        meta,
        runs: vec![case_run(1, 100.0, 0), case_run(2, 20.0, 0), case_run(3, 80.0, 1)],
        baseline: Check::NotRun,
        workloads: Vec::new(),
    }
}

#[test]
fn distributor_report_and_charts() {
    let r = distributor_results();
    let charts = report::Charts {
        distributor_bandwidth: Some("s-table1-bandwidth.svg".into()),
        distributor_ticks: Some("s-table1-ticks.svg".into()),
        ..report::Charts::default()
    };
    let md = report::markdown(&r, &charts);
    for needle in [
        "## Interrupt distributor (the multicore CE study's Table 1)",
        "| Distributor | `configs/bench/distributor.toml`",
        "| 2 only core0 | core0 | core0 | **20.0** | 0.20 | core0, 2.3 (0.15) | 80 % (rt 60, gp \
         20; 50 % of ticks saturated) | 0: 2.0 | 2/2, 0/2 | 0 | 1 |",
        "| 3 distribution #1 | core0 | core1 | **80.0** | 0.80 | core1, 13.4 (0.85) |",
        "- **Case 3**, 80.0 Mb/s (60 s): ",
        "6.00 s: gp/net0 redirected from core 0 to vCPU 1 on core 1",
        "profiler windows (interrupts per 100 ms, P = periodic): rt/timer 33 P 33 P; gp/net0 20 20",
        "- **Case 1**, 100.0 Mb/s (60 s): `rt` idle;",
        "![Interrupt distributor: interrupts per tick](s-table1-ticks.svg)",
    ] {
        assert!(md.contains(needle), "{needle:?} not in:\n{md}");
    }
    assert!(!md.contains("## How these were measured"), "no vmbench run: {md}");
    let t = report::terminal(&r);
    assert!(t.contains("3 distribution #1") && t.contains("core1"), "{t}");
    let bw = charts::distributor_bandwidth(&r.runs).unwrap().unwrap();
    let l = labels(&bw);
    assert!(l.contains(&"0.80") && l.contains(&"study (ARM11 MPCore)"), "{l:?}");
    let ticks = charts::distributor_ticks(&r.runs).unwrap().unwrap();
    // Per case the audio line and one network line, a step per tick over the last 150 ticks.
    let lines: Vec<&str> =
        ticks.split("<polyline").filter(|p| p.contains("stroke-width=\"2\"")).collect();
    assert_eq!(lines.len(), 6, "{ticks}");
    for line in lines {
        let points = line.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        assert_eq!(points.split_whitespace().count(), 2 * 150, "{line}");
    }
    let l = labels(&ticks);
    assert!(l.contains(&"Case 3: distribution #1, 80.0 Mb/s"), "{l:?}");
    assert!(l.contains(&"network (gp/net0), core 1"), "{l:?}");
    // The files, and a JSON that reads back.
    let dir = std::env::temp_dir().join(format!("armhv-table1-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    write_outputs(&dir, &r).unwrap();
    assert!(dir.join("latest-table1-ticks.svg").exists());
    assert!(dir.join("latest-table1-bandwidth.svg").exists());
    assert!(!dir.join("latest-micro.svg").exists());
    let back: Results =
        serde_json::from_str(&std::fs::read_to_string(dir.join("latest.json")).unwrap()).unwrap();
    assert_eq!(back, r);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn distributor_options_and_plan() {
    let o = Options::parse(["--only", "distributor", "--cases", "2,1"].map(String::from)).unwrap();
    assert_eq!(o.parts, [Part::Distributor]);
    assert_eq!(o.cases, [1, 2]);
    let slugs: Vec<String> = plan_with(&o.parts, 2, &o.cases, &[]).iter().map(Step::slug).collect();
    // Round after round, each under icount.
    assert_eq!(slugs, ["table1-case1-r1", "table1-case2-r1", "table1-case1-r2", "table1-case2-r2"]);
    assert!(plan_with(&o.parts, 2, &o.cases, &[]).iter().all(|s| s.mode == Mode::Icount));
    assert_eq!(Options::default().cases, [1, 2, 3, 4, 5, 6, 7]);
    assert!(!Options::default().parts.contains(&Part::Distributor));
    assert!(Options::parse(["--cases", "0"].map(String::from)).is_err());
}

#[test]
fn workloads_are_timed_where_icount_is_faithful() {
    let clock = |n: &str| catalog::workload(n).unwrap().clock;
    // Everything they time runs as the emulated machine's instructions.
    for n in ["hackbench", "cpu-job", "iperf3", "tcp-rr"] {
        assert_eq!(clock(n), Mode::Icount, "{n}");
    }
    // Natively QEMU's block layer or a host client does part of the work, outside them: their
    // figure is the machine's instructions per unit of work.
    for n in ["blk-write", "blk-read", "mdisk-write", "mdisk-read", "uplink-stream", "uplink-rr"] {
        let w = catalog::workload(n).unwrap();
        assert_eq!((w.clock, w.higher_is_better), (Mode::Cost, false), "{n}");
        assert!(w.metric.starts_with("instr_"), "{n}");
        // The guest marks the windows of those it drives; the host times the others.
        assert_eq!(w.marked.is_some(), w.reach == catalog::Reach::Local, "{n}");
    }
    assert_eq!(catalog::clocks(&catalog::all_names()), [Mode::Icount, Mode::Cost]);
    assert!(catalog::clocks(&[]).is_empty());
    let names = ["tcp-rr", "hackbench", "blk-read"].map(String::from);
    assert_eq!(catalog::on_clock(&names, Mode::Icount, 2), ["tcp-rr", "hackbench:40"]);
    assert_eq!(catalog::on_clock(&names, Mode::Cost, 2), ["blk-read"]);
}

fn summary(name: &str, native: &[f64], armhv: &[f64]) -> Summary {
    let higher = catalog::workload(name).is_some_and(|w| w.higher_is_better);
    let (n, a) = (Stats::of(native), Stats::of(armhv));
    Summary {
        workload: name.to_owned(),
        metric: String::new(),
        higher_is_better: higher,
        clock: catalog::workload(name).map(|w| w.clock),
        native: n,
        armhv: a,
        normalized: n.zip(a).and_then(|(n, a)| workloads::normalized(higher, n.median, a.median)),
        normalized_best: None,
    }
}

#[test]
fn two_runs_compared_row_by_row() {
    use crate::agreement::{self, Pair};
    assert_eq!(agreement::relative_difference(1.0, 1.04), Some(0.040000000000000036));
    assert_eq!(agreement::relative_difference(0.0, 1.0), None);
    assert_eq!(agreement::relative_difference(2.0, f64::NAN), None);
    let first = vec![
        summary("hackbench", &[0.10, 0.12, 0.11], &[0.11, 0.12, 0.13]),
        summary("blk-read", &[1000.0], &[2000.0]),
    ];
    let second = vec![
        summary("hackbench", &[0.10, 0.11, 0.12], &[0.12, 0.11, 0.12]),
        summary("blk-read", &[1000.0], &[2250.0]),
        summary("uplink-rr", &[100.0], &[130.0]),
    ];
    let pairs = agreement::pair(&first, &second);
    let names: Vec<&str> = pairs.iter().map(|p| p.workload.as_str()).collect();
    assert_eq!(names, ["hackbench", "blk-read", "uplink-rr"]);
    // hackbench: 0.12 / 0.11 both times.
    assert!(pairs[0].difference().unwrap().abs() < 1e-12 && pairs[0].agrees());
    // blk-read: normalized 2.00, then 2.25: 12.5 % apart.
    let d = pairs[1].difference().unwrap();
    assert!((d - 0.125).abs() < 1e-12 && !pairs[1].agrees());
    // Measured in one run only: no difference, no agreement.
    assert_eq!(pairs[2].difference(), None);
    assert!(!pairs[2].agrees());
    let exactly = Pair {
        workload: "cpu-job".into(),
        first: Some(summary("cpu-job", &[1.0], &[1.0])),
        second: Some(summary("cpu-job", &[1.0], &[1.05])),
    };
    assert!(exactly.difference().unwrap() <= agreement::AGREEMENT + 1e-12);
    let md = agreement::render("a.json", "b.json", &pairs);
    assert!(md.contains("| Hackbench | icount | 1.091 | 1.091 | +0.0 % | yes |"), "{md}");
    assert!(md.contains("| Block read (virtio-blk) | cost | 2.000 | 2.250 | +12.5 % | **no** |"));
    assert!(md.contains("| cost | not run | 1.300 | – | **no** |"), "{md}");
    assert!(md.contains("Not within 5 % (or not measured in both runs): blk-read, uplink-rr."));
    // Each side's spread: min–max and (max − min) / median.
    assert!(md.contains("0.10–0.12 (18.2 %)"), "{md}");
}
