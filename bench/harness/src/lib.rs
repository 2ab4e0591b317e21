//! `make bench`: the measurement suite. Builds armhv and `vmbench`, runs
//! `configs/bench/micro.toml` on QEMU once per part of the suite (each run its own QEMU process
//! with a timeout), parses the consoles, converts the counts to instructions, compares with
//! `bench/baseline.json`, and writes `bench/results/<stamp>.{json,md}` and SVG charts.
//!
//! The parts, in order:
//! 1. `micro`: the default build under icount: the suite's figures, targets and baseline;
//! 2. `breakdown`: built with `ws-breakdown`, for the world-switch breakdown (Table III);
//! 3. `ablations`: one icount run per entry of [`catalog::ABLATIONS`], each with one hypervisor
//!    feature;
//! 4. `wall`: the default build without icount (noisy wall-clock figures);
//! 5. `workloads` (opt-in: `--with-workloads` or `--only workloads`, about 4 minutes): the
//!    application workloads in a Linux guest, natively and under armhv
//!    (`configs/bench/workloads.toml`), normalized to native; see [`workloads`].
//! 6. `distributor` (opt-in: `--only distributor`, `make table1`, about 10 minutes): the
//!    interrupt-distributor experiment, the multicore CE study's Table 1 and Figures 9 and 10
//!    (`configs/bench/distributor.toml`); see [`distributor`].

pub mod baseline;
pub mod catalog;
pub mod convert;
pub mod distributor;
pub mod irqtrace;
pub mod parse;
pub mod report;
pub mod results;
pub mod svg;
pub mod workloads;

use anyhow::{Context, Result, anyhow, bail};
use convert::Mode;
use results::{Kind, Meta, Results, Run};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use xtask::{MachineSpec, image, qemu, root};

/// The words `--quick` appends to the bench VM's cmdline (vmbench's iteration counts).
pub const QUICK_WORDS: &str = "n=1000 warmup=100";

pub const USAGE: &str = concat!(
    "usage: make bench ARGS=\"[options]\", or cargo run -q -p bench-harness -- [options]\n",
    "\n",
    "The measurement suite (bench/README.md): build and run configs/bench/micro.toml on QEMU\n",
    "(icount, cortex-a76 x2), write bench/results/<stamp>.{json,md} and SVG charts (also as\n",
    "bench/results/latest.*), compare with bench/baseline.json; fails on a median more than\n",
    "5 % above it.\n",
    "\n",
    "options:\n",
    "  --only PARTS       comma-separated parts to run: micro, breakdown, ablations, wall,\n",
    "                     workloads, distributor (default: all but workloads and\n",
    "                     distributor)\n",
    "  --with-workloads   the default parts and the application workloads (Linux guests,\n",
    "                     natively and under armhv; about 4 minutes more)\n",
    "  --workloads LIST   comma-separated workloads (default all: hackbench, cpu-job,\n",
    "                     blk-write, blk-read, iperf3, tcp-rr)\n",
    "  --rounds N         workload rounds, each a native run then an armhv run (default 3;\n",
    "                     --quick: 1)\n",
    "  --reps N           repetitions of each workload in each run (default 1)\n",
    "  --cases LIST       distributor: the cases of Table 1 to run (default 1,2,3,4,5,6,7)\n",
    "  --quick            fewer iterations: \"n=1000 warmup=100\" appended to the bench VM's\n",
    "                     cmdline (through a copy of the config in build/bench); one\n",
    "                     round of the workloads\n",
    "  --update-baseline  write this run's icount medians to bench/baseline.json (accepts a\n",
    "                     regression; the variants not run keep their old entries)\n",
    "  --timeout SECS     per QEMU run (default 600)\n",
    "  --config FILE      another bench config (default configs/bench/micro.toml)\n",
    "  --from JSON        render the report and charts again from a results file; run nothing\n",
    "  --cpu MODEL        QEMU CPU model (default cortex-a76)\n",
    "  --smp N            CPUs of the micro parts (default 2; the workloads run on -smp 4\n",
    "                     under armhv and on the VM's 2 vCPUs natively, the distributor on\n",
    "                     -smp 4)",
);

/// A part of the suite, as `--only` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Micro,
    Breakdown,
    Ablations,
    Wall,
    Workloads,
    Distributor,
}

impl Part {
    /// Every part, in the suite's order.
    const ALL: [Part; 6] = [
        Part::Micro,
        Part::Breakdown,
        Part::Ablations,
        Part::Wall,
        Part::Workloads,
        Part::Distributor,
    ];
    /// What runs without `--only`: all but the workloads and the distributor, which take
    /// minutes more.
    const DEFAULT: [Part; 4] = [Part::Micro, Part::Breakdown, Part::Ablations, Part::Wall];

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "micro" => Self::Micro,
            "breakdown" => Self::Breakdown,
            "ablations" => Self::Ablations,
            "wall" => Self::Wall,
            "workloads" => Self::Workloads,
            "distributor" => Self::Distributor,
            _ => bail!(
                "unknown part {s:?} for --only; use micro, breakdown, ablations, wall, workloads \
                 or distributor"
            ),
        })
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub config: PathBuf,
    /// The VM whose vmbench results are the suite's.
    pub vm: String,
    pub machine: MachineSpec,
    pub parts: Vec<Part>,
    pub quick: bool,
    pub update_baseline: bool,
    pub timeout: Duration,
    pub from: Option<PathBuf>,
    pub out_dir: PathBuf,
    pub baseline: PathBuf,
    /// The application workloads' VMs.
    pub workloads_config: PathBuf,
    /// The workloads to run (armhv-bench's names).
    pub workloads: Vec<String>,
    /// Repetitions of each workload per boot (one with `quick`).
    pub reps: u32,
    /// Pairs of workload runs, native then armhv (one with `quick`).
    pub rounds: u32,
    /// The interrupt-distributor experiment's template config.
    pub distributor_config: PathBuf,
    /// Its cases (Table 1's numbers) to run.
    pub cases: Vec<u32>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            config: root().join("configs/bench/micro.toml"),
            vm: "bench".into(),
            machine: MachineSpec { cpu: "cortex-a76".into(), smp: 2, ..MachineSpec::default() },
            parts: Part::DEFAULT.to_vec(),
            quick: false,
            update_baseline: false,
            timeout: Duration::from_secs(600),
            from: None,
            out_dir: root().join("bench/results"),
            baseline: root().join("bench/baseline.json"),
            workloads_config: root().join("configs/bench/workloads.toml"),
            workloads: workloads::all_names(),
            reps: 1,
            rounds: 3,
            distributor_config: root().join("configs/bench/distributor.toml"),
            cases: distributor::CASES.iter().map(|c| c.number).collect(),
        }
    }
}

impl Options {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self> {
        let mut o = Self::default();
        let mut with_workloads = false;
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or_else(|| anyhow!("{a} needs a value"));
            match a.as_str() {
                "--quick" => o.quick = true,
                "--update-baseline" => o.update_baseline = true,
                "--only" => {
                    o.parts = value()?.split(',').map(Part::parse).collect::<Result<_>>()?
                }
                "--with-workloads" => with_workloads = true,
                "--workloads" => {
                    let v = value()?;
                    o.workloads = v.split(',').map(str::to_owned).collect();
                    if let Some(w) = o.workloads.iter().find(|w| workloads::workload(w).is_none()) {
                        bail!(
                            "unknown workload {w:?} for --workloads; use {}",
                            workloads::all_names().join(", ")
                        );
                    }
                }
                "--rounds" => {
                    let v = value()?;
                    o.rounds = v
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| anyhow!("--rounds {v}: a positive number of rounds"))?;
                }
                "--reps" => {
                    let v = value()?;
                    o.reps =
                        v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                            anyhow!("--reps {v}: a positive number of repetitions")
                        })?;
                }
                "--timeout" => {
                    let v = value()?;
                    let s: u64 = v.parse().map_err(|_| anyhow!("--timeout {v}: seconds"))?;
                    o.timeout = Duration::from_secs(s);
                }
                "--cases" => o.cases = distributor::parse_cases(&value()?)?,
                "--config" => o.config = PathBuf::from(value()?),
                "--from" => o.from = Some(PathBuf::from(value()?)),
                "--cpu" => o.machine.cpu = value()?,
                "--smp" => {
                    let v = value()?;
                    o.machine.smp = v.parse().map_err(|_| anyhow!("--smp {v}: a number"))?;
                }
                _ => bail!("unknown bench option {a}"),
            }
        }
        if with_workloads && !o.parts.contains(&Part::Workloads) {
            o.parts.push(Part::Workloads);
        }
        if o.update_baseline && o.quick {
            bail!("--update-baseline takes a full run: drop --quick");
        }
        if o.update_baseline && !o.parts.iter().any(|p| matches!(p, Part::Micro | Part::Ablations))
        {
            bail!("--update-baseline needs the micro or ablations part (the icount medians)");
        }
        Ok(o)
    }
}

/// One QEMU run of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub kind: Kind,
    pub variant: String,
    pub features: Vec<&'static str>,
    pub mode: Mode,
    /// Workloads: which round (from 1); 0 for the other parts (the distributor's case is its
    /// variant, `caseN`).
    pub round: u32,
}

impl Step {
    pub fn label(&self) -> String {
        let label = results::label(self.kind, &self.variant, self.mode);
        if self.round > 0 { format!("{label}, round {}", self.round) } else { label }
    }

    /// For file names.
    fn slug(&self) -> String {
        match self.kind {
            Kind::Micro => "micro".into(),
            Kind::Breakdown => "breakdown".into(),
            Kind::Ablation => format!("ablation-{}", self.variant),
            Kind::Wall => "wall".into(),
            Kind::Workload => format!("workloads-r{}-{}", self.round, self.variant),
            Kind::Distributor => format!("table1-{}", self.variant),
        }
    }
}

/// The runs for the parts asked for, in the suite's order, with one round of workloads and
/// every case of the distributor.
pub fn plan(parts: &[Part]) -> Vec<Step> {
    plan_rounds(parts, 1)
}

/// [`plan_with`] every case of the distributor.
pub fn plan_rounds(parts: &[Part], rounds: u32) -> Vec<Step> {
    let cases: Vec<u32> = distributor::CASES.iter().map(|c| c.number).collect();
    plan_with(parts, rounds, &cases)
}

/// The runs for the parts asked for, in the suite's order: the workloads as `rounds` pairs of
/// runs, native then armhv, so that a slow spell of the host falls on both sides alike; the
/// distributor's `cases`, one run each.
pub fn plan_with(parts: &[Part], rounds: u32, cases: &[u32]) -> Vec<Step> {
    let step = |kind, variant: &str, features: Vec<&'static str>, mode| Step {
        kind,
        variant: variant.to_owned(),
        features,
        mode,
        round: 0,
    };
    let mut steps = Vec::new();
    for part in Part::ALL.iter().filter(|p| parts.contains(p)) {
        match part {
            Part::Micro => {
                steps.push(step(Kind::Micro, catalog::DEFAULT_VARIANT, vec![], Mode::Icount))
            }
            Part::Breakdown => steps.push(step(
                Kind::Breakdown,
                catalog::BREAKDOWN_FEATURE,
                vec![catalog::BREAKDOWN_FEATURE],
                Mode::Icount,
            )),
            Part::Ablations => {
                for a in catalog::ABLATIONS {
                    steps.push(step(Kind::Ablation, a.feature, vec![a.feature], Mode::Icount));
                }
            }
            Part::Wall => {
                steps.push(step(Kind::Wall, catalog::DEFAULT_VARIANT, vec![], Mode::WallClock))
            }
            Part::Workloads => {
                for round in 1..=rounds.max(1) {
                    for variant in [workloads::NATIVE, workloads::ARMHV] {
                        let s = step(Kind::Workload, variant, vec![], Mode::WallClock);
                        steps.push(Step { round, ..s });
                    }
                }
            }
            Part::Distributor => {
                for &case in cases {
                    let variant = distributor::variant(case);
                    steps.push(step(Kind::Distributor, &variant, vec![], Mode::WallClock));
                }
            }
        }
    }
    steps
}

pub fn main(args: impl IntoIterator<Item = String>) -> Result<()> {
    let args: Vec<String> = args.into_iter().collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let opts = Options::parse(args)?;
    let mut results = match &opts.from {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let r: Results = serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            if r.schema != results::SCHEMA {
                bail!(
                    "{}: results schema {} (this tool reads {})",
                    path.display(),
                    r.schema,
                    results::SCHEMA
                );
            }
            r
        }
        None => measure(&opts)?,
    };
    results.workloads = workloads::summarize(&results.runs);
    if opts.from.is_none() {
        compare_baseline(&opts, &mut results)?;
    }
    let written = write_outputs(&opts.out_dir, &results)?;
    println!("{}", report::terminal(&results));
    summarize_baseline(&results, &opts);
    for p in &written {
        println!("bench: wrote {}", rel(p));
    }
    let failed: Vec<u32> = results
        .runs
        .iter()
        .filter_map(|r| r.distributor.as_ref())
        .filter(|d| d.failure.is_some())
        .map(|d| d.case)
        .collect();
    if !failed.is_empty() {
        bail!("distributor case(s) {failed:?} did not complete (see the report and their logs)");
    }
    let regressions = results.baseline.regressions();
    if !regressions.is_empty() {
        bail!(
            "{} median(s) more than {:.0} % above {}; if intended, accept with `make bench \
             ARGS=--update-baseline`",
            regressions.len(),
            baseline::THRESHOLD * 100.0,
            rel(&opts.baseline)
        );
    }
    Ok(())
}

/// Builds and runs every step of the plan (the QEMU consoles go to `opts.out_dir`); compares
/// nothing and writes no report.
pub fn measure(opts: &Options) -> Result<Results> {
    xtask::setup::ensure_qemu()?;
    let steps = plan_with(&opts.parts, if opts.quick { 1 } else { opts.rounds }, &opts.cases);
    if steps.is_empty() {
        bail!("nothing to run");
    }
    check_features(&steps)?;
    let with_workloads = steps.iter().any(|s| s.kind == Kind::Workload);
    let with_distributor = steps.iter().any(|s| s.kind == Kind::Distributor);
    if with_workloads || with_distributor {
        workloads::ensure_assets()?;
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (timestamp, stamp) = timestamps(now);
    let quick = opts.quick.then(|| QUICK_WORDS.to_owned());
    let meta = Meta {
        timestamp,
        stamp,
        commit: git_commit(),
        qemu: qemu_version()?,
        cpu: opts.machine.cpu.clone(),
        smp: opts.machine.smp,
        config: rel(&opts.config),
        vm: opts.vm.clone(),
        workloads_config: with_workloads.then(|| rel(&opts.workloads_config)),
        distributor_config: with_distributor.then(|| rel(&opts.distributor_config)),
        quick: quick.clone(),
    };
    let micro_steps = steps.iter().any(|s| s.kind.is_vmbench());
    let config = match &quick {
        Some(words) if micro_steps => quick_config(&opts.config, &opts.vm, words, &opts.machine)?,
        _ => opts.config.clone(),
    };
    std::fs::create_dir_all(&opts.out_dir)
        .with_context(|| format!("creating {}", opts.out_dir.display()))?;
    let mut runs = Vec::new();
    let total = Instant::now();
    for (i, step) in steps.iter().enumerate() {
        let tag = format!("bench: [{}/{}] {}", i + 1, steps.len(), step.label());
        eprintln!("{tag} ...");
        let log = opts.out_dir.join(format!("{}-{}.log", meta.stamp, step.slug()));
        let run = match step.kind {
            Kind::Workload => workloads::run(step, opts, &log),
            Kind::Distributor => distributor::run(step, opts, &log, &tag),
            _ => run_step(step, opts, &config, &log),
        }
        .with_context(|| tag.clone())?;
        let counts = match (&run.workloads, &run.distributor) {
            (Some(w), _) => format!("{} results, {} failed", w.samples.len(), w.failures.len()),
            (_, Some(d)) => format!(
                "{}{} Mb/s, {} redirect(s), network on {}",
                d.failure.as_ref().map_or(String::new(), |f| format!("FAILED ({f}): ")),
                d.mbit_s.map_or("no".to_owned(), |m| format!("{m:.1}")),
                d.events.iter().filter(|e| matches!(e, irqtrace::Event::Redirect { .. })).count(),
                distributor::cores(&d.per_tick(distributor::NET_SOURCE))
            ),
            _ => format!("{} results, {} skipped", run.figures.len(), run.skips.len()),
        };
        eprintln!(
            "{tag}: {counts}, QEMU {:.1} s (total {:.0} s)",
            run.seconds,
            total.elapsed().as_secs_f64()
        );
        runs.push(run);
    }
    let workloads = workloads::summarize(&runs);
    Ok(Results {
        schema: results::SCHEMA,
        meta,
        runs,
        baseline: baseline::Check::NotRun,
        workloads,
    })
}

/// Fails early, before any build, when the hypervisor lacks a feature the plan needs.
fn check_features(steps: &[Step]) -> Result<()> {
    let manifest = std::fs::read_to_string(root().join("hypervisor/Cargo.toml"))?;
    let declared = |f: &str| {
        manifest.lines().any(|l| {
            l.trim_start().starts_with(&format!("{f} ="))
                || l.trim_start().starts_with(&format!("{f}="))
        })
    };
    let missing: Vec<&str> =
        steps.iter().flat_map(|s| s.features.iter().copied()).filter(|f| !declared(f)).collect();
    if !missing.is_empty() {
        bail!(
            "hypervisor/Cargo.toml has no feature {}: the plan needs it (leave its part out \
             with --only)",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Lines of console kept in an error.
const TAIL: usize = 40;

/// The end of a run's console for an error message, and where the whole of it is.
pub(crate) fn console_tail(console: &str, log: &Path) -> String {
    let lines: Vec<&str> = console.lines().collect();
    let from = lines.len().saturating_sub(TAIL);
    format!(
        "--- last {} lines of the console (all of it: {}) ---\n{}",
        lines.len() - from,
        rel(log),
        lines[from..].join("\n")
    )
}

/// A `qemu::Run` wait's error without the whole console it appends.
pub(crate) fn run_error(e: &anyhow::Error) -> String {
    let msg = e.to_string();
    let first = msg.lines().next().unwrap_or_default();
    first.split("; console").next().unwrap_or_default().trim_end_matches(':').to_owned()
}
/// How long QEMU may take to power off after `vmbench: done` (the other VMs end, armhv prints
/// its breakdown).
const GRACE: Duration = Duration::from_secs(120);

fn run_step(step: &Step, opts: &Options, config: &Path, log: &Path) -> Result<Run> {
    let machine = MachineSpec {
        hyp_features: step.features.clone(),
        icount: step.mode == Mode::Icount,
        ..opts.machine.clone()
    };
    let img = image::build(config, &machine)?;
    let qemu_command = qemu::command_line(&qemu::command(&img, &machine));
    let start = Instant::now();
    let mut q = qemu::Run::start(&img, &machine)?;
    let done = format!("[{}] vmbench: done", opts.vm);
    let waited = q.expect(&done, opts.timeout);
    let exited = if waited.is_ok() { q.wait_exit(GRACE).map(|_| ()) } else { Ok(()) };
    let seconds = start.elapsed().as_secs_f64();
    let console = q.output();
    drop(q); // stops QEMU if it is still running
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    let tail = || console_tail(&console, log);
    if let Err(e) = waited {
        bail!("no `{done}`: {}\n{}", run_error(&e), tail());
    }
    let mut run = run_from_console(step, &opts.vm, &console, seconds).with_context(tail)?;
    run.qemu_command = qemu_command;
    if step.kind == Kind::Breakdown && run.console.breakdown.is_empty() {
        let why = match exited {
            Err(_) => format!("QEMU did not power off within {GRACE:?} after vmbench finished"),
            Ok(()) => "armhv printed none".to_owned(),
        };
        bail!("no `ws-breakdown:` lines: {why}\n{}", tail());
    }
    Ok(run)
}

/// A step's record from its console: the bench VM's results converted to the step's unit.
pub fn run_from_console(step: &Step, vm: &str, console: &str, seconds: f64) -> Result<Run> {
    let parsed = parse::parse_console(console)?;
    let out = parsed.vm(vm).ok_or_else(|| anyhow!("no vmbench output from VM {vm}"))?;
    // `cycles` need no rate; `ticks` are always the virtual counter's.
    let freq = out.boot.as_ref().map(parse::Boot::tick_freq);
    let figures = out
        .results
        .iter()
        .map(|r| convert::convert(r, freq, step.mode))
        .collect::<Result<Vec<_>>>()?;
    let overhead = match out.overhead {
        Some((unit, v)) => Some(v as f64 * convert::scale(unit, freq)?),
        None => None,
    };
    let skips = out.skips.clone();
    Ok(Run {
        kind: step.kind,
        variant: step.variant.clone(),
        features: step.features.iter().map(|f| f.to_string()).collect(),
        mode: step.mode,
        seconds,
        figures,
        skips,
        overhead,
        console: parsed,
        qemu_command: String::new(),
        workloads: None,
        distributor: None,
    })
}

fn compare_baseline(opts: &Options, results: &mut Results) -> Result<()> {
    let medians = results.medians();
    let old = baseline::load(&opts.baseline)?;
    let check = if medians.is_empty() {
        baseline::Check::NotRun
    } else {
        match &old {
            None => baseline::Check::Missing { path: rel(&opts.baseline) },
            Some(b) => baseline::compare(b, &medians, &results.meta),
        }
    };
    results.baseline = if opts.update_baseline {
        if medians.is_empty() {
            bail!("--update-baseline: no icount run of the default build or ablations to write");
        }
        if let baseline::Check::NotComparable { reason } = &check {
            eprintln!("bench: replacing a baseline for another machine ({reason})");
        }
        let old = old.filter(|b| b.cpu == results.meta.cpu && b.smp == results.meta.smp);
        baseline::save(&opts.baseline, &baseline::Baseline::updated(old, &medians, &results.meta))?;
        baseline::Check::Updated { previous: Box::new(check) }
    } else {
        check
    };
    Ok(())
}

fn summarize_baseline(results: &Results, opts: &Options) {
    use baseline::{Check, Verdict};
    let line = |c: &baseline::Comparison| {
        format!(
            "{} {}: {} -> {} ({})",
            c.variant,
            catalog::row(&c.bench),
            c.baseline.map(report::num).unwrap_or_default(),
            c.now.map(report::num).unwrap_or_default(),
            c.change().map(report::pct).unwrap_or_default()
        )
    };
    match &results.baseline {
        Check::NotRun => {}
        Check::Missing { path } => println!(
            "bench: no baseline ({path}): nothing compared; write one with --update-baseline"
        ),
        Check::NotComparable { reason } => println!("bench: baseline not compared: {reason}"),
        Check::Updated { .. } => println!("bench: wrote the baseline {}", rel(&opts.baseline)),
        Check::Compared { rows, notes, .. } => {
            for n in notes {
                println!("bench: note: {n}");
            }
            let count = |v| rows.iter().filter(|c| c.verdict == v).count();
            println!(
                "bench: against the baseline: {} regression(s), {} improvement(s), {} within \
                 5 %, {} same, {} new, {} not measured",
                count(Verdict::Regression),
                count(Verdict::Improvement),
                count(Verdict::Changed),
                count(Verdict::Same),
                count(Verdict::New),
                count(Verdict::Missing)
            );
            for c in rows {
                match c.verdict {
                    Verdict::Regression => println!("  REGRESSION  {}", line(c)),
                    Verdict::Improvement => println!("  improvement {}", line(c)),
                    _ => {}
                }
            }
        }
    }
}

/// Writes `<stamp>.json`, `<stamp>.md`, the charts, and their `latest` copies.
pub fn write_outputs(dir: &Path, r: &Results) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let charts = [
        ("micro", svg::micro(r)),
        ("breakdown", svg::breakdown(r)),
        ("ablations", svg::ablations(r)),
        ("workloads", svg::workloads(r)),
        ("table1-bandwidth", svg::distributor_bandwidth(&r.runs)),
        ("table1-ticks", svg::distributor_ticks(&r.runs)),
    ];
    let mut written = Vec::new();
    for stem in [r.meta.stamp.as_str(), "latest"] {
        let name = |chart: &str| format!("{stem}-{chart}.svg");
        for (chart, svg) in &charts {
            let path = dir.join(name(chart));
            match svg {
                Some(svg) => {
                    std::fs::write(&path, svg)?;
                    written.push(path);
                }
                // A stale latest chart from an earlier run would not match latest.md.
                None => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let get = |i: usize| charts[i].1.as_ref().map(|_| name(charts[i].0));
        let links = report::Charts {
            micro: get(0),
            breakdown: get(1),
            ablations: get(2),
            workloads: get(3),
            distributor_bandwidth: get(4),
            distributor_ticks: get(5),
        };
        let md = dir.join(format!("{stem}.md"));
        std::fs::write(&md, report::markdown(r, &links))?;
        let json = dir.join(format!("{stem}.json"));
        std::fs::write(&json, serde_json::to_string_pretty(r)? + "\n")?;
        written.push(md);
        written.push(json);
    }
    Ok(written)
}

/// A copy of `config` in build/bench with `words` appended to `vm`'s cmdline (replacing any
/// `n=`/`warmup=` words there). Only for configs whose images are all `@guest`s: the copy lives
/// elsewhere, so relative file paths would not resolve.
fn quick_config(config: &Path, vm: &str, words: &str, machine: &MachineSpec) -> Result<PathBuf> {
    let cfg = vmconfig::load(config, &machine.as_config_machine()).map_err(|e| anyhow!("{e}"))?;
    let by_path = cfg.vms.iter().any(|v| {
        matches!(v.kernel, vmconfig::ImageRef::Path(_))
            || matches!(v.initrd, Some(vmconfig::ImageRef::Path(_)))
            || v.disks.iter().any(|d| d.image.is_some())
    });
    if by_path {
        bail!(
            "--quick needs a config whose images are all \"@guest\" builds ({})",
            config.display()
        );
    }
    let text = std::fs::read_to_string(config)?;
    let quick = rewrite_cmdline(&text, vm, words)
        .with_context(|| format!("{}: --quick", config.display()))?;
    let dir = xtask::build_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let stem = config.file_stem().and_then(|s| s.to_str()).unwrap_or("bench");
    let out = dir.join(format!("{stem}-quick.toml"));
    std::fs::write(&out, quick)?;
    Ok(out)
}

/// The value of a `key = "value"` line (a basic string without escapes), if the line is one.
pub(crate) fn string_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.trim_start().strip_prefix(key)?.trim_start().strip_prefix('=')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(&rest[..end])
}

/// Per `[[vm]]` table of a config text: its header line, its name and its cmdline line.
fn vm_tables(lines: &[&str]) -> Vec<(usize, Option<String>, Option<usize>)> {
    let mut tables: Vec<(usize, Option<String>, Option<usize>)> = Vec::new();
    let mut in_vm = false;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            in_vm = t.replace(' ', "") == "[[vm]]";
            if in_vm {
                tables.push((i, None, None));
            }
            continue;
        }
        let Some(table) = tables.last_mut().filter(|_| in_vm) else { continue };
        if let Some(name) = string_value(line, "name") {
            table.1 = Some(name.to_owned());
        } else if t.starts_with("cmdline") {
            table.2 = Some(i);
        }
    }
    tables
}

/// The `[[vm]]` named `vm`: its header line and cmdline line.
fn vm_table(lines: &[&str], vm: &str) -> Result<(usize, Option<usize>)> {
    vm_tables(lines)
        .into_iter()
        .find(|(_, name, _)| name.as_deref() == Some(vm))
        .map(|(header, _, cmdline)| (header, cmdline))
        .ok_or_else(|| anyhow!("no [[vm]] named {vm:?}"))
}

fn plain_cmdline<'a>(lines: &[&'a str], i: usize) -> Result<&'a str> {
    string_value(lines[i], "cmdline")
        .filter(|v| !v.contains('\\'))
        .ok_or_else(|| anyhow!("line {}: cmdline is not a plain \"...\" string", i + 1))
}

/// The cmdline of the `[[vm]]` named `vm` in a config text (`None`: it has none).
pub fn cmdline_of(text: &str, vm: &str) -> Result<Option<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let (_, cmdline) = vm_table(&lines, vm)?;
    cmdline.map(|i| plain_cmdline(&lines, i).map(str::to_owned)).transpose()
}

/// Config text with the cmdline of the `[[vm]]` named `vm` replaced by `edit(old)` (old is ""
/// when it has none).
pub fn edit_cmdline(text: &str, vm: &str, edit: impl Fn(&str) -> String) -> Result<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (header, cmdline) = vm_table(&lines, vm)?;
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    match cmdline {
        Some(i) => out[i] = format!("cmdline = \"{}\"", edit(plain_cmdline(&lines, i)?)),
        None => out.insert(header + 1, format!("cmdline = \"{}\"", edit(""))),
    }
    Ok(out.join("\n") + "\n")
}

/// Config text with `words` in the cmdline of the `[[vm]]` named `vm` (replacing the words
/// with the same `key=`).
pub fn rewrite_cmdline(text: &str, vm: &str, words: &str) -> Result<String> {
    let keys: Vec<&str> =
        words.split_whitespace().filter_map(|w| w.split_once('=')).map(|(k, _)| k).collect();
    edit_cmdline(text, vm, |old| {
        let mut kept: Vec<&str> = old
            .split_whitespace()
            .filter(|w| !w.split_once('=').is_some_and(|(k, _)| keys.contains(&k)))
            .collect();
        kept.extend(words.split_whitespace());
        kept.join(" ")
    })
}

/// (`2024-01-01T12:00:00Z`, `2024-01-01-120000`) for seconds since the epoch, in UTC.
pub fn timestamps(secs: u64) -> (String, String) {
    let days = (secs / 86_400) as i64;
    let (h, m, s) = ((secs % 86_400) / 3600, (secs % 3600) / 60, secs % 60);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z"),
        format!("{y:04}-{mo:02}-{d:02}-{h:02}{m:02}{s:02}"),
    )
}

fn git_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}-dirty") } else { head }
}

fn qemu_version() -> Result<String> {
    let out = Command::new("qemu-system-aarch64")
        .arg("--version")
        .output()
        .context("running qemu-system-aarch64 --version")?;
    Ok(String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("unknown").trim().to_owned())
}

/// A path relative to the repository, for messages and the report.
pub(crate) fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

#[cfg(test)]
pub(crate) mod tests;
