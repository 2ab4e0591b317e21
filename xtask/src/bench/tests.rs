//! The suite's host side end to end on recorded consoles: parsing, conversion, the baseline
//! check, the report and the charts. No QEMU.

use super::baseline::{self, Baseline, Check, Verdict};
use super::parse::tests::SAMPLE;
use super::results::{Kind, Results};
use super::*;

fn step(kind: Kind, variant: &str, mode: Mode) -> Step {
    let features = match kind {
        Kind::Micro | Kind::Wall => vec![],
        Kind::Breakdown => vec![catalog::BREAKDOWN_FEATURE],
        Kind::Ablation => {
            vec![catalog::ABLATIONS.iter().find(|a| a.feature == variant).unwrap().feature]
        }
    };
    Step { kind, variant: variant.into(), features, mode }
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
fn sample_results() -> Results {
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
        schema: results::SCHEMA,
        meta: baseline::tests::meta(),
        runs: runs.into_iter().collect::<Result<_>>().unwrap(),
        baseline: Check::NotRun,
    }
}

#[test]
fn plan_follows_the_parts() {
    let labels: Vec<String> = plan(&Part::ALL).iter().map(Step::label).collect();
    assert_eq!(
        labels,
        [
            "micro (icount)",
            "breakdown, ws-breakdown build (icount)",
            "ablation eager-fp (icount)",
            "ablation all-lrs (icount)",
            "micro (wall clock, no icount)",
        ]
    );
    let only = plan(&[Part::Wall, Part::Micro]);
    assert_eq!(only.len(), 2);
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
    let md = report::markdown(
        &sample_results(),
        &report::Charts { micro: None, breakdown: None, ablations: None },
    );
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
        ablations: None,
    };
    let md = report::markdown(&r, &charts);
    for needle in [
        "## Microbenchmarks (Table II layout)",
        "| Hypercall | **96** | 96 / 96.4 / 130 | 100,000 | – | ≤ 150 | ✅ pass | 6,500 | 376 |",
        "| Virtual IPI | **704** ±16 | 640 / 716.8 / 1,136 | 10,000 | – | < 1,500 | ✅ pass |",
        "| Virtual IRQ Completion | **9** | 9 / 9 / 9 | 100,000 | 0.00 | 0 exits | ✅ pass | 71 | 71 |",
        "| Hypercall: PSCI_VERSION | **131** |",
        "Targets met: **7 of 7**.",
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
        "What TCG does not model",
        "one unit per instruction",
        "Counter-read overhead",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
    assert!(!md.contains("![Design ablations]"));
    assert_eq!(r.baseline.regressions().len(), 1);
    assert_eq!(r.baseline.regressions()[0].verdict, Verdict::Regression);
    let term = report::terminal(&r);
    assert!(term.contains("Hypercall"), "{term}");
    let line = term.lines().find(|l| l.trim_start().starts_with("Hypercall ")).unwrap();
    assert!(line.contains("96") && line.contains("≤ 150") && line.ends_with("pass"), "{term}");
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
    let md =
        report::markdown(&r, &report::Charts { micro: None, breakdown: None, ablations: None });
    for needle in [
        "| Hypercall | **151** | 151 / 96.4 / 130 | 100,000 | – | ≤ 150 | ❌ FAIL |",
        "| Virtual IRQ Completion | **9** | 9 / 9 / 9 | 100,000 | 1.00 | 0 exits | ❌ FAIL |",
        "| I/O Latency In | skipped: no interrupt | | | | < 1,500 | not measured |",
        "Targets met: **4 of 7**.",
        "No baseline (`bench/baseline.json`)",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
}

#[test]
fn charts() {
    let r = sample_results();
    let micro = svg::micro(&r).unwrap();
    assert!(micro.contains("Interrupt Controller Trap"));
    assert!(micro.contains("target: at most 150"));
    assert!(micro.contains("instructions, log scale (under icount"));
    let b = svg::breakdown(&r).unwrap();
    assert!(b.contains("GP Regs") && b.contains("VM Switch") && b.contains(">646.7</text>"));
    assert!(b.contains(">FP/SIMD Regs</text>"));
    // Classes that cost nothing on any path are left out of the legend.
    let mut no_fp = r.clone();
    for p in &mut no_fp.runs[1].console.breakdown {
        for (class, v) in &mut p.classes {
            if class == "fpsimd" {
                *v = 0.0;
            }
        }
    }
    assert!(!svg::breakdown(&no_fp).unwrap().contains("FP/SIMD"));
    // Ablations: the difference from the default build.
    let a = svg::ablations(&r).unwrap();
    assert!(a.contains(">eager-fp</text>") && a.contains(">all-lrs</text>"), "{a}");
    assert!(a.contains(">+176</text>") && a.contains(">+8</text>"), "{a}");
    // Without the default run: the medians themselves.
    let mut no_default = r.clone();
    no_default.runs.retain(|run| run.kind != Kind::Micro);
    let a = svg::ablations(&no_default).unwrap();
    assert!(a.contains(">1,200</text>") && a.contains("log scale"), "{a}");
    // Without those runs there is no chart.
    let mut only_wall = r.clone();
    only_wall.runs.retain(|run| run.kind == Kind::Wall);
    assert!(svg::micro(&only_wall).is_none());
    assert!(svg::breakdown(&only_wall).is_none());
    assert!(svg::ablations(&only_wall).is_none());
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
fn quick_rewrites_the_bench_cmdline_only() {
    let text = "# comment\n[[vm]]\nname = \"bench\"\nvcpus = 2\ncmdline = \"vmswitch hypercall n=5\"\n\
                devices = [\"pl011\"]\n\n[[vm]]\nname = \"partner\"\ncmdline = \"vmswitch-partner\"\n";
    let out = rewrite_cmdline(text, "bench", QUICK_WORDS).unwrap();
    assert!(out.contains("cmdline = \"vmswitch hypercall n=1000 warmup=100\"\n"), "{out}");
    assert!(out.contains("cmdline = \"vmswitch-partner\"\n"));
    assert!(out.starts_with("# comment\n[[vm]]\n"));
    // No cmdline yet: one is added under the table header; the name may come after it.
    let text = "[[vm]]\nvcpus = 1\nname = \"bench\"\n[[vm.disk]]\nname = \"x\"\n";
    let out = rewrite_cmdline(text, "bench", QUICK_WORDS).unwrap();
    assert_eq!(
        out,
        "[[vm]]\ncmdline = \"n=1000 warmup=100\"\nvcpus = 1\nname = \"bench\"\n[[vm.disk]]\nname = \"x\"\n"
    );
    assert!(rewrite_cmdline(text, "nobody", QUICK_WORDS).is_err());
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
