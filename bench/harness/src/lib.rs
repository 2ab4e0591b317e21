//! armhv's measurement suite (`make bench`, `make table1`; what it measures and how:
//! `bench/README.md`). Builds armhv and the guests with xtask, runs each step of the plan as its
//! own QEMU process with a timeout, parses the consoles, compares the icount medians with
//! `bench/baseline.json`, and writes `bench/results/<stamp>.{json,md}` and SVG charts.
//!
//! From the bottom up: `numbers`, `catalog` (what is measured), `parse`, `irqtrace` and
//! `convert` (the consoles), `model` (the results, serialized whole), `baseline`,
//! `configtext`, `runlog`, `options` (the plan); the runners `micro`, `workloads` and
//! `distributor`; `table1`, `gicv2`, `report` and `charts` render; this file ties them
//! together. `compare` is `make compare`: vmbench natively, under armhv, KVM and Xen (`xen`
//! boots Xen with vmbench as its only domain).

pub mod agreement;
pub mod baseline;
pub mod catalog;
pub mod charts;
pub mod compare;
pub mod configtext;
pub mod convert;
pub mod distributor;
pub mod gicv2;
pub mod hostio;
pub mod irqtrace;
pub mod micro;
pub mod model;
pub mod numbers;
pub mod options;
pub mod parse;
pub mod paths;
pub mod qmp;
pub mod report;
pub mod runlog;
pub mod table1;
pub mod tablev;
pub mod workloads;
pub mod xen;

pub use options::{Options, Part, Step};

use anyhow::{Context, Result, bail};
use model::{Kind, Meta, NotRun, Results};
use options::{QUICK_WORDS, USAGE};
use runlog::rel;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use xtask::root;

pub fn main(args: impl IntoIterator<Item = String>) -> Result<()> {
    let args: Vec<String> = args.into_iter().collect();
    // `make compare`: the systems side by side, its own options and outputs.
    if args.first().is_some_and(|a| a == "compare") {
        return compare::main(args[1..].to_vec());
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let opts = Options::parse(args)?;
    if let Some((a, b)) = &opts.agreement {
        return compare_files(a, b);
    }
    let mut results = match &opts.from {
        Some(path) => load(path)?,
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
    let failed: Vec<String> = results
        .runs
        .iter()
        .filter(|r| matches!(r.not_run, Some(NotRun::Failed(_))))
        .map(|r| r.label())
        .collect();
    if !failed.is_empty() {
        bail!("{} failed (see the report and its log)", failed.join(", "));
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

/// A results file, as `write_outputs` wrote it.
fn load(path: &Path) -> Result<Results> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let r: Results =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if r.schema != model::SCHEMA {
        bail!(
            "{}: results schema {} (this tool reads {}); run the bench again",
            path.display(),
            r.schema,
            model::SCHEMA
        );
    }
    Ok(r)
}

/// `--agreement`: prints the two runs' workloads side by side; fails if a row does not agree.
fn compare_files(a: &Path, b: &Path) -> Result<()> {
    let (ra, rb) = (load(a)?, load(b)?);
    let pairs = agreement::pair(&workloads::summarize(&ra.runs), &workloads::summarize(&rb.runs));
    if pairs.is_empty() {
        bail!("neither {} nor {} has workload results", rel(a), rel(b));
    }
    println!("{}", agreement::render(&rel(a), &rel(b), &pairs));
    let off = pairs.iter().filter(|p| !p.agrees()).count();
    if off > 0 {
        bail!(
            "{off} of {} workload row(s) differ by more than {:.0} % or were not measured in \
             both runs",
            pairs.len(),
            agreement::AGREEMENT * 100.0
        );
    }
    Ok(())
}

/// Builds and runs every step of the plan (the QEMU consoles go to `opts.out_dir`); compares
/// nothing and writes no report.
pub fn measure(opts: &Options) -> Result<Results> {
    xtask::setup::ensure_qemu()?;
    let rounds = if opts.quick { 1 } else { opts.rounds };
    let steps =
        options::plan_with(&opts.parts, rounds, &opts.cases, &catalog::clocks(&opts.workloads));
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
        Some(words) if micro_steps => {
            micro::quick_config(&opts.config, &opts.vm, words, &opts.machine)?
        }
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
        let gicv2 = step.gic == catalog::GICV2;
        let run = match step.kind {
            Kind::Workload => workloads::run(step, opts, &log),
            Kind::Distributor => distributor::run(step, opts, &log, &tag),
            Kind::TableV => tablev::run_step(step, opts, &log),
            Kind::Paths => paths::run_step(step, opts, &log),
            _ if gicv2 && opts.machine.smp > catalog::GICV2_MAX_CPUS => {
                Ok(micro::not_run(step, NotRun::Unsupported(gicv2_cpus(opts.machine.smp))))
            }
            _ => micro::run(step, opts, &config, &log),
        };
        // The GICv2 and probe steps are beside the suite's figures: when one fails, the rest is
        // still measured and compared, the report says why its cells are empty, and the bench
        // fails at the end.
        let beside = gicv2 || step.variant == catalog::TRAP_PROBE;
        let run = match run {
            Err(e) if beside => {
                eprintln!("{tag}: FAILED: {e:#}");
                let first = format!("{e:#}").lines().next().unwrap_or_default().to_owned();
                Ok(micro::not_run(step, NotRun::Failed(first)))
            }
            run => run,
        }
        .with_context(|| tag.clone())?;
        let counts = match (&run.workloads, &run.distributor) {
            _ if run.paths.is_some() => run.paths.as_ref().map_or(String::new(), |p| {
                format!("{} rows, {} failed", p.rows.len(), p.failed.len())
            }),
            _ if run.tablev.is_some() => run.tablev.as_ref().map_or(String::new(), |t| {
                format!("{} round trips traced in {:.0} s", t.transactions, t.trace_seconds)
            }),
            (Some(w), _) => format!("{} results, {} failed", w.samples.len(), w.failures.len()),
            (_, Some(d)) => format!(
                "{}{} Mb/s, {} redirect(s), network on {}",
                d.failure.as_ref().map_or(String::new(), |f| format!("FAILED ({f}): ")),
                d.mbit_s.map_or("no".to_owned(), |m| format!("{m:.1}")),
                d.events.iter().filter(|e| matches!(e, irqtrace::Event::Redirect { .. })).count(),
                table1::cores(&d.per_tick(catalog::NET_SOURCE))
            ),
            _ => match &run.not_run {
                Some(why) => why.describe(),
                None => format!("{} results, {} skipped", run.figures.len(), run.skips.len()),
            },
        };
        eprintln!(
            "{tag}: {counts}, QEMU {:.1} s (total {:.0} s)",
            run.seconds,
            total.elapsed().as_secs_f64()
        );
        runs.push(run);
    }
    let workloads = workloads::summarize(&runs);
    Ok(Results { schema: model::SCHEMA, meta, runs, baseline: model::Check::NotRun, workloads })
}

/// Why the GICv2 step cannot run on `smp` CPUs.
fn gicv2_cpus(smp: u32) -> String {
    format!("a GICv2 addresses at most {} CPUs, this run has {smp}", catalog::GICV2_MAX_CPUS)
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

fn compare_baseline(opts: &Options, results: &mut Results) -> Result<()> {
    let medians = results.medians();
    let old = baseline::load(&opts.baseline)?;
    let check = if medians.is_empty() {
        model::Check::NotRun
    } else {
        match &old {
            None => model::Check::Missing { path: rel(&opts.baseline) },
            Some(b) => baseline::compare(b, &medians, &results.meta),
        }
    };
    results.baseline = if opts.update_baseline {
        if medians.is_empty() {
            bail!("--update-baseline: no icount run of the default build or ablations to write");
        }
        if let model::Check::NotComparable { reason } = &check {
            eprintln!("bench: replacing a baseline for another machine ({reason})");
        }
        let old = old.filter(|b| b.cpu == results.meta.cpu && b.smp == results.meta.smp);
        baseline::save(&opts.baseline, &baseline::Baseline::updated(old, &medians, &results.meta))?;
        model::Check::Updated { previous: Box::new(check) }
    } else {
        check
    };
    Ok(())
}

fn summarize_baseline(results: &Results, opts: &Options) {
    use model::{Check, Verdict};
    let line = |c: &model::Comparison| {
        format!(
            "{} {}: {} -> {} ({})",
            c.variant,
            catalog::row(&c.bench),
            c.baseline.map(numbers::num).unwrap_or_default(),
            c.now.map(numbers::num).unwrap_or_default(),
            c.change().map(numbers::pct).unwrap_or_default()
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
        ("micro", charts::micro(r)?),
        ("breakdown", charts::breakdown(r)?),
        ("ablations", charts::ablations(r)?),
        ("workloads", charts::workloads(r)?),
        ("real-io", charts::real_io(r)?),
        ("table1-bandwidth", charts::distributor_bandwidth(&r.runs)?),
        ("table1-ticks", charts::distributor_ticks(&r.runs)?),
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
            real_io: get(4),
            distributor_bandwidth: get(5),
            distributor_ticks: get(6),
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

pub(crate) fn git_commit() -> String {
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

pub(crate) fn qemu_version() -> Result<String> {
    let out = Command::new("qemu-system-aarch64")
        .arg("--version")
        .output()
        .context("running qemu-system-aarch64 --version")?;
    Ok(String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("unknown").trim().to_owned())
}

#[cfg(test)]
mod real_io_tests;
#[cfg(test)]
pub(crate) mod tests;
