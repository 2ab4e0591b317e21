//! The Markdown report (tables in the ISCA-2016 study's layout) and the terminal summary.
//! Each section is one function of [`Results`]; a section whose runs were not made is left out.

use crate::baseline::THRESHOLD;
use crate::catalog::{
    self, ABLATIONS, ARMHV, BENCHES, CLIENT_VM, DEFAULT_VARIANT, NATIVE, SERVER_VM, STATE_CLASSES,
    Target, WORKLOADS,
};
use crate::convert::Figure;
use crate::model::{Check, Kind, Results, Run, Stats, Summary, Verdict};
use crate::numbers::{delta, figure, int, num, pct};
use crate::{gicv2, table1};
use std::fmt::Write;

/// Where `bench/README.md` explains the figures, from the report in `bench/results/`.
pub const METHOD_MICRO: &str = "../README.md#how-the-microbenchmarks-are-measured";
pub const METHOD_WORKLOADS: &str = "../README.md#application-workloads";
pub const METHOD_REAL_IO: &str = "../README.md#real-io-like-for-like";

/// Chart file names, relative to the report.
#[derive(Default)]
pub struct Charts {
    pub micro: Option<String>,
    pub breakdown: Option<String>,
    pub ablations: Option<String>,
    pub workloads: Option<String>,
    /// The real-I/O workloads against issue 15's targets.
    pub real_io: Option<String>,
    /// The distributor experiment: bandwidth per case, and interrupts per tick.
    pub distributor_bandwidth: Option<String>,
    pub distributor_ticks: Option<String>,
}

/// Whether a figure meets its benchmark's target: `Some(true)` pass, `Some(false)` fail,
/// `None` no target or cannot tell.
pub fn target_met(f: &Figure) -> Option<bool> {
    catalog::bench(&f.name)?.target?.met(f.median, f.exits_per_op)
}

fn verdict_cell(target: Option<Target>, f: Option<&Figure>) -> String {
    match (target, f) {
        (None, _) => String::new(),
        (Some(_), None) => "not measured".to_owned(),
        (Some(t), Some(f)) => match t.met(f.median, f.exits_per_op) {
            Some(true) => "✅ pass".to_owned(),
            Some(false) => "❌ FAIL".to_owned(),
            None => "? no exit count".to_owned(),
        },
    }
}

/// The figures a run has for each row: catalogue order first, then any name vmbench printed
/// that the catalogue does not know.
fn rows(run: &Run) -> Vec<String> {
    let mut names: Vec<String> = BENCHES
        .iter()
        .filter(|b| run.figure(b.name).is_some() || run.skip(b.name).is_some() || b.in_study)
        .map(|b| b.name.to_owned())
        .collect();
    for f in &run.figures {
        if catalog::bench(&f.name).is_none() {
            names.push(f.name.clone());
        }
    }
    names
}

pub fn markdown(r: &Results, charts: &Charts) -> String {
    let mut md = String::new();
    header(&mut md, r);
    micro(&mut md, r);
    gicv2::markdown(&mut md, r);
    baseline(&mut md, r);
    breakdown(&mut md, r);
    ablations(&mut md, r);
    wall(&mut md, r);
    application(&mut md, r);
    real_io(&mut md, r);
    table1::markdown(&mut md, r);
    crate::tablev::markdown(&mut md, &r.runs);
    crate::paths::markdown(&mut md, &r.runs);
    charts_section(&mut md, charts);
    method(&mut md, r);
    md
}

fn header(md: &mut String, r: &Results) {
    let m = &r.meta;
    let _ = writeln!(md, "# armhv measurement suite\n");
    let _ = writeln!(md, "| | |\n|---|---|");
    let _ = writeln!(md, "| When | {} |", m.timestamp);
    let _ = writeln!(md, "| armhv | `{}` |", m.commit);
    let _ = writeln!(md, "| QEMU | {} (TCG) |", m.qemu);
    if r.runs.iter().any(|run| run.kind.is_vmbench()) {
        let gic = if r.micro_on(catalog::GICV2).is_some() {
            "GICv3; the micro part on GICv2 too"
        } else {
            "GICv3"
        };
        let _ = writeln!(md, "| Machine | `virt`, `{}`, {} CPUs, {gic} |", m.cpu, m.smp);
        let _ = writeln!(md, "| Config | `{}` (results of VM `{}`) |", m.config, m.vm);
    }
    if let Some(c) = &m.workloads_config {
        let _ = writeln!(
            md,
            "| Workloads | `{c}` (VM `{}`; natively the same kernel and initramfs on plain QEMU) |",
            CLIENT_VM
        );
    }
    if let Some(c) = &m.distributor_config {
        let _ = writeln!(
            md,
            "| Distributor | `{c}` (one copy per case in `build/table1/`), `virt`, `{}`, 4 CPUs |",
            m.cpu
        );
    }
    let runs: Vec<String> =
        r.runs.iter().map(|run| format!("{}: {:.0} s", run.label(), run.seconds)).collect();
    let _ = writeln!(md, "| Runs | {} |", runs.join("; "));
    if let Some(q) = &m.quick {
        let micro = r.runs.iter().any(|run| run.kind.is_vmbench());
        let wl = r.runs.iter().any(|run| run.kind == Kind::Workload);
        let what = match (micro, wl) {
            (true, true) => {
                format!("`{q}` appended to the bench VM's cmdline; one round of the workloads")
            }
            (false, true) => "one round of the workloads".to_owned(),
            _ => format!("`{q}` appended to the bench VM's cmdline"),
        };
        let _ = writeln!(md, "| Quick | yes: {what} |");
    }
    md.push('\n');
}

fn micro(md: &mut String, r: &Results) {
    let Some(run) = r.micro() else { return };
    let _ = writeln!(md, "## Microbenchmarks (Table II layout)\n");
    let _ = writeln!(
        md,
        "Path length in **instructions** under icount (identical run to run), median over n \
         operations; the study's columns are KVM's and Xen's silicon cycles (ISCA 2016, Table \
         II), for scale only.\n"
    );
    let _ = writeln!(
        md,
        "| Microbenchmark | Median | Min / mean / max | n | Exits/op | Target | Result | \
         ISCA'16 KVM ARM | ISCA'16 Xen ARM |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---|---|---:|---:|");
    let (mut met, mut with_target) = (0, 0);
    for name in rows(run) {
        let b = catalog::bench(&name);
        let f = run.figure(&name);
        let target = b.and_then(|b| b.target);
        if let (Some(t), Some(f)) = (target, f) {
            with_target += 1;
            met += usize::from(t.met(f.median, f.exits_per_op) == Some(true));
        } else if target.is_some() {
            with_target += 1;
        }
        let (k, x) = b
            .and_then(|b| b.study_cycles)
            .map_or((String::new(), String::new()), |(k, x)| (int(k as f64), int(x as f64)));
        let label = catalog::row(&name);
        let t = target.map(|t| t.describe()).unwrap_or_default();
        let v = verdict_cell(target, f);
        match f {
            Some(f) => {
                let res =
                    if f.scale != 1.0 { format!(" ±{}", num(f.scale)) } else { String::new() };
                let _ = writeln!(
                    md,
                    "| {label} | **{}**{res} | {} / {} / {} | {} | {} | {t} | {v} | {k} | {x} |",
                    num(f.median),
                    num(f.min),
                    num(f.mean),
                    num(f.max),
                    int(f.n as f64),
                    f.exits_per_op.map(|e| format!("{e:.2}")).unwrap_or_else(|| "–".into()),
                );
            }
            None => {
                let why = run
                    .skip(&name)
                    .map_or("not reported".to_owned(), |s| format!("skipped: {}", s.reason));
                let _ = writeln!(md, "| {label} | {why} | | | | {t} | {v} | {k} | {x} |");
            }
        }
    }
    let _ = writeln!(md, "\nTargets met: **{met} of {with_target}**.");
    if run.figures.iter().any(|f| f.scale != 1.0) {
        let _ = writeln!(
            md,
            "Figures marked ± were timed with the virtual counter (one tick = {} instructions \
             under icount): that is their resolution.",
            num(run.figures.iter().find(|f| f.scale != 1.0).map_or(16.0, |f| f.scale))
        );
    }
    md.push('\n');
}

fn baseline(md: &mut String, r: &Results) {
    if r.runs.iter().all(|run| run.kind == Kind::Workload) {
        return; // the workloads have no baseline
    }
    let _ = writeln!(md, "## Against the baseline\n");
    let check = match &r.baseline {
        Check::Updated { previous } => {
            let _ = writeln!(
                md,
                "This run was written to `bench/baseline.json` (`--update-baseline`). The \
                 comparison it replaced:\n"
            );
            previous.as_ref()
        }
        c => c,
    };
    match check {
        Check::NotRun => {
            let _ = writeln!(
                md,
                "No icount run of the default build or ablations: nothing to compare.\n"
            );
        }
        Check::Missing { path } => {
            let _ = writeln!(
                md,
                "No baseline (`{path}`): nothing compared. Write one with `make bench \
                 ARGS=--update-baseline`.\n"
            );
        }
        Check::NotComparable { reason } => {
            let _ = writeln!(md, "Not compared: {reason}.\n");
        }
        Check::Compared { commit, qemu, notes, rows } => {
            let _ = writeln!(
                md,
                "Baseline: armhv `{commit}`, {qemu}. A median more than {:.0} % above it is a \
                 regression and fails `make bench`; accept an intended one with `make bench \
                 ARGS=--update-baseline`.\n",
                THRESHOLD * 100.0
            );
            for n in notes {
                let _ = writeln!(md, "- Note: {n}");
            }
            if !notes.is_empty() {
                md.push('\n');
            }
            let regressions = rows.iter().filter(|c| c.verdict == Verdict::Regression).count();
            let improvements = rows.iter().filter(|c| c.verdict == Verdict::Improvement).count();
            let _ = writeln!(
                md,
                "**{regressions} regression(s), {improvements} improvement(s)** over {} \
                 median(s).\n",
                rows.len()
            );
            let _ = writeln!(md, "| Variant | Microbenchmark | Baseline | Now | Change | |");
            let _ = writeln!(md, "|---|---|---:|---:|---:|---|");
            for c in rows {
                let opt = |v: Option<f64>| v.map(num).unwrap_or_else(|| "–".into());
                let change = c.change().map(pct).unwrap_or_default();
                let mark = match c.verdict {
                    Verdict::Regression => "❌ regression",
                    Verdict::Improvement => "✅ improvement",
                    Verdict::Changed => "changed (within 5 %)",
                    Verdict::Same => "same",
                    Verdict::New => "new",
                    Verdict::Missing => "not measured",
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {change} | {mark} |",
                    c.variant,
                    catalog::row(&c.bench),
                    opt(c.baseline),
                    opt(c.now)
                );
            }
            md.push('\n');
        }
        Check::Updated { .. } => {}
    }
}

fn breakdown(md: &mut String, r: &Results) {
    let paths = r.breakdown();
    if r.run(Kind::Breakdown).is_none() {
        return;
    }
    let _ = writeln!(md, "## World-switch breakdown (Table III layout)\n");
    if paths.is_empty() {
        let _ = writeln!(md, "The breakdown run printed no `ws-breakdown:` lines.\n");
        return;
    }
    let _ = writeln!(
        md,
        "Mean instructions per event, by the class of state saved and restored, from armhv \
         built with `{}` (under icount): an ARMHV_NOP hypercall, and a switch to another vCPU \
         by ARMHV_YIELD; *Other* is the rest of the round trip ([how]({METHOD_MICRO})).\n",
        catalog::BREAKDOWN_FEATURE
    );
    let _ = write!(md, "| Register state |");
    for p in paths {
        let _ = write!(md, " {} |", catalog::path_label(&p.path));
    }
    let _ = write!(md, "\n|---|");
    for _ in paths {
        md.push_str("---:|");
    }
    md.push('\n');
    // Known classes in Table III order, then any class armhv adds later.
    let mut classes: Vec<&str> = STATE_CLASSES.iter().map(|(c, _)| *c).collect();
    for p in paths {
        for (c, _) in &p.classes {
            if !classes.contains(&c.as_str()) {
                classes.push(c);
            }
        }
    }
    for class in classes {
        let _ = write!(md, "| {} |", catalog::class_label(class));
        for p in paths {
            match p.class(class) {
                Some(v) if p.total > 0.0 => {
                    let _ = write!(md, " {} ({:.0} %) |", num(v), v / p.total * 100.0);
                }
                Some(v) => {
                    let _ = write!(md, " {} |", num(v));
                }
                None => md.push_str(" – |"),
            }
        }
        md.push('\n');
    }
    let _ = write!(md, "| **Total** |");
    for p in paths {
        let _ = write!(md, " **{}** |", num(p.total));
    }
    let _ = write!(md, "\n| Events measured |");
    for p in paths {
        let _ = write!(md, " {} |", int(p.n as f64));
    }
    md.push_str("\n\n");
}

fn ablations(md: &mut String, r: &Results) {
    let runs: Vec<&Run> = r.ablations().collect();
    if runs.is_empty() {
        return;
    }
    let default = r.micro();
    let _ = writeln!(md, "## Design ablations\n");
    let _ = writeln!(
        md,
        "The same suite with armhv built with one design choice changed (a cargo feature), \
         median instructions under icount; Δ is against the default build, so a positive Δ is \
         what the default design saves.\n"
    );
    for run in &runs {
        let what = ABLATIONS.iter().find(|a| a.feature == run.variant).map_or("", |a| a.what);
        let _ = writeln!(md, "- `{}`: {what}.", run.variant);
    }
    md.push('\n');
    let _ = write!(md, "| Microbenchmark |");
    if default.is_some() {
        let _ = write!(md, " {DEFAULT_VARIANT} |");
    }
    for run in &runs {
        let _ = write!(md, " {} |", run.variant);
        if default.is_some() {
            md.push_str(" Δ |");
        }
    }
    let _ = write!(md, "\n|---|");
    let cols = runs.len() * if default.is_some() { 2 } else { 1 } + usize::from(default.is_some());
    for _ in 0..cols {
        md.push_str("---:|");
    }
    md.push('\n');
    let names = rows(default.unwrap_or(runs[0]));
    for name in names {
        let base = default.and_then(|d| d.figure(&name)).map(|f| f.median);
        let _ = write!(md, "| {} |", catalog::row(&name));
        if default.is_some() {
            let _ = write!(md, " {} |", base.map(num).unwrap_or_else(|| "–".into()));
        }
        for run in &runs {
            let v = run.figure(&name).map(|f| f.median);
            let _ = write!(md, " {} |", v.map(num).unwrap_or_else(|| "–".into()));
            if default.is_some() {
                let d = match (base, v) {
                    (Some(b), Some(v)) => delta(b, v),
                    _ => String::new(),
                };
                let _ = write!(md, " {d} |");
            }
        }
        md.push('\n');
    }
    md.push('\n');
}

fn wall(md: &mut String, r: &Results) {
    let Some(run) = r.run(Kind::Wall) else { return };
    let _ = writeln!(md, "## Wall clock, without icount (noisy)\n");
    let _ = writeln!(
        md,
        "⚠ **Noisy**: nanoseconds of QEMU's virtual clock paced by the host, from one run \
         on a shared machine; they vary run to run and say more about TCG's speed than about \
         armhv. Use the instruction counts above to compare designs.\n"
    );
    let _ = writeln!(md, "| Microbenchmark | Median (ns) | Min / mean / max (ns) | n |");
    let _ = writeln!(md, "|---|---:|---:|---:|");
    for name in rows(run) {
        let label = catalog::row(&name);
        match run.figure(&name) {
            Some(f) => {
                let _ = writeln!(
                    md,
                    "| {label} | {} | {} / {} / {} | {} |",
                    num(f.median),
                    num(f.min),
                    num(f.mean),
                    num(f.max),
                    int(f.n as f64)
                );
            }
            None => {
                let why = run
                    .skip(&name)
                    .map_or("not reported".to_owned(), |s| format!("skipped: {}", s.reason));
                let _ = writeln!(md, "| {label} | {why} | | |");
            }
        }
    }
    md.push('\n');
}

fn charts_section(md: &mut String, c: &Charts) {
    let charts: Vec<(&str, &String)> = [
        ("Microbenchmarks", &c.micro),
        ("World-switch breakdown", &c.breakdown),
        ("Design ablations", &c.ablations),
        ("Application workloads, normalized to native", &c.workloads),
        ("Real I/O against its targets", &c.real_io),
        ("Interrupt distributor: bandwidth relative to case 1", &c.distributor_bandwidth),
        ("Interrupt distributor: interrupts per tick", &c.distributor_ticks),
    ]
    .into_iter()
    .filter_map(|(t, f)| f.as_ref().map(|f| (t, f)))
    .collect();
    if charts.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Charts\n");
    for (title, file) in charts {
        let _ = writeln!(md, "![{title}]({file})\n");
    }
}

fn method(md: &mut String, r: &Results) {
    let m = &r.meta;
    if !r.runs.iter().any(|run| run.kind.is_vmbench()) {
        return; // the workloads' and distributor's sections link their own
    }
    let _ = writeln!(md, "## How these were measured\n");
    let _ = writeln!(
        md,
        "- **Machine.** `qemu-system-aarch64 -M virt,virtualization=on,gic-version=3,\
         dtb-randomness=off -cpu {} -smp {} -icount shift=0,sleep=off -rtc \
         base=2024-01-01T00:00:00,clock=vm` ({}), armhv at EL2 booting `{}`. The wall-clock run \
         drops `-icount` and the fixed clock.",
        m.cpu, m.smp, m.qemu, m.config
    );
    if r.micro_on(catalog::GICV2).is_some() {
        let _ = writeln!(
            md,
            "- **GICv2.** The micro part's second run is the same command with \
             `gic-version=2`: the VMs then get a virtual GICv2, whose CPU interface is the \
             hardware's GICV mapped in ([GICv2 and the KVM/ARM Table 3 layout]({})).",
            gicv2::METHOD
        );
    }
    if let Some(o) = r.micro().and_then(|run| run.overhead) {
        let _ = writeln!(
            md,
            "- **Counter-read overhead**: {} instructions, which vmbench subtracts from every \
             figure bracketed by two reads on one CPU.",
            num(o)
        );
    }
    let tick_freq = r
        .runs
        .iter()
        .find_map(|run| run.console.vm(&m.vm).and_then(|v| v.boot.as_ref()))
        .map_or(crate::parse::QEMU_VIRT_CNTFRQ, |b| b.tick_freq());
    let _ = writeln!(
        md,
        "- **Units**: a `cycles` count is one instruction, a tick of the virtual counter ({} MHz) \
         {} instructions. The instrument, the units, what TCG does not model and what each \
         microbenchmark times: [How the microbenchmarks are measured]({METHOD_MICRO}) in \
         `bench/README.md`.\n",
        num(tick_freq as f64 / 1e6),
        num(1e9 / tick_freq as f64)
    );
}

/// `2.70 (2.65–2.88)`: median and range of the repetitions.
fn stats_cell(s: Option<&Stats>) -> String {
    match s {
        None => "not measured".to_owned(),
        Some(s) if s.n == 1 => format!("{} (n = 1)", figure(s.median)),
        Some(s) => format!("{} ({}–{})", figure(s.median), figure(s.min), figure(s.max)),
    }
}

fn metric_label(row: &Summary) -> String {
    let unit = catalog::workload(&row.workload).map_or(row.metric.as_str(), |w| w.unit);
    let better = if row.higher_is_better { "higher is better" } else { "lower is better" };
    format!("{unit}, {better}")
}

fn application(md: &mut String, r: &Results) {
    let native: Vec<&Run> = r.workload_runs(NATIVE).collect();
    let armhv: Vec<&Run> = r.workload_runs(ARMHV).collect();
    if native.is_empty() && armhv.is_empty() {
        return;
    }
    let runs: Vec<&Run> = r.runs.iter().filter(|run| run.kind == Kind::Workload).collect();
    let _ = writeln!(md, "## Application workloads (normalized to native)\n");
    let _ = writeln!(
        md,
        "The study's application benchmarks (ISCA 2016, Figure 4 layout), natively on plain \
         QEMU and as VM `{CLIENT_VM}` under armhv: timed on the guest's clock under **icount** \
         (instructions, immune to the host's load) where everything timed runs in the emulated \
         machine; as a **cost**, the whole machine's instructions per MiB or per round trip \
         counted by QEMU, where QEMU's block layer or a client on the host does part of the work \
         (its time is no clock's to give reproducibly). **Normalized** is armhv's time or cost \
         over native's, or native's throughput over armhv's: **1.00 = no overhead**. Medians of \
         all repetitions (range in parentheses); *best of n* compares each side's best \
         repetition ([how]({METHOD_WORKLOADS})).\n"
    );
    let _ = writeln!(
        md,
        "| Workload | Clock | Unit | Native: median (range) | armhv: median (range) | \
         Normalized | Best of n |"
    );
    let _ = writeln!(md, "|---|---|---|---:|---:|---:|---:|");
    for row in &r.workloads {
        let name = catalog::workload(&row.workload).map_or(row.workload.as_str(), |w| w.row);
        let norm = row.normalized.map(|v| format!("**{v:.2}**")).unwrap_or_else(|| "–".into());
        let best = row.normalized_best.map(|v| format!("{v:.2}")).unwrap_or_else(|| "–".into());
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {norm} | {best} |",
            row.clock.map_or("?", |c| c.short_label()),
            metric_label(row),
            stats_cell(row.native.as_ref()),
            stats_cell(row.armhv.as_ref())
        );
    }
    md.push('\n');
    if WORKLOADS.iter().any(|w| {
        w.reach == catalog::Reach::Peer && r.workloads.iter().any(|s| s.workload == w.name)
    }) {
        let _ = writeln!(
            md,
            "⚠ The network rows are not like for like: natively two processes in one guest over \
             **loopback**, under armhv two VMs (`{CLIENT_VM}` to `{SERVER_VM}`) over virtio-net \
             and armhv's switch.\n"
        );
    }
    let failures: Vec<(String, &crate::parse::Failure)> = runs
        .iter()
        .flat_map(|run| {
            run.workloads.iter().flat_map(move |o| o.failures.iter().map(move |f| (run.label(), f)))
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(md, "Failed repetitions:\n");
        for (label, f) in failures {
            let rep = if f.rep == 0 { "not started".to_owned() } else { format!("rep {}", f.rep) };
            let _ = writeln!(md, "- {label}, `{}` ({rep}): {}", f.workload, f.message);
        }
        md.push('\n');
    }
    let _ = writeln!(md, "Commands:\n");
    let command = |runs: &[&Run], name: &str| {
        runs.iter().find_map(|r| r.workloads.as_ref().and_then(|o| o.commands.get(name)).cloned())
    };
    for row in &r.workloads {
        let name = &row.workload;
        let row = catalog::workload(name).map_or(name.as_str(), |w| w.row);
        if let Some(c) = command(&armhv, name).or_else(|| command(&native, name)) {
            let _ = writeln!(md, "- **{row}** (`{name}`), under armhv: `{c}`");
        }
    }
    md.push('\n');
    let _ = writeln!(md, "Runs:\n");
    for (variant, runs) in [("Native", &native), ("Under armhv", &armhv)] {
        let Some(first) = runs.first() else { continue };
        let reps = first
            .workloads
            .as_ref()
            .and_then(|o| o.samples.iter().map(|s| s.rep).max())
            .unwrap_or(0);
        let each: Vec<String> = runs
            .iter()
            .map(|run| {
                let load = run
                    .workloads
                    .as_ref()
                    .and_then(|o| o.host_load)
                    .map(|(a, b)| format!(", host load {a:.1} → {b:.1}"))
                    .unwrap_or_default();
                format!("{:.0} s{load}", run.seconds)
            })
            .collect();
        let _ = writeln!(
            md,
            "- **{variant}**: {} run(s) of {reps} repetition(s) of each workload (QEMU ran {}): \
             `{}`",
            runs.len(),
            each.join("; "),
            first.qemu_command
        );
    }
    md.push('\n');
}

/// A real-I/O row's verdict: armhv's median against native's, in the goal's terms, and whether
/// it meets the goal (`None`: a side was not measured).
pub fn real_io_verdict(row: &Summary) -> Option<(catalog::Goal, f64, bool)> {
    let goal = catalog::workload(&row.workload)?.goal?;
    let ratio = goal.ratio(row.higher_is_better, row.native?.median, row.armhv?.median)?;
    Some((goal, ratio, goal.met(ratio)))
}

/// The real-I/O workloads (issue 15) against their targets.
fn real_io(md: &mut String, r: &Results) {
    let rows: Vec<&Summary> = r
        .workloads
        .iter()
        .filter(|s| catalog::workload(&s.workload).is_some_and(|w| w.goal.is_some()))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Real I/O against its targets
"
    );
    let _ = writeln!(
        md,
        "The machine disk and the uplink (issue 15), like for like: under armhv a disk on a \
         partition of the machine disk and a NIC on the uplink's network; natively the same kernel \
         with an image file of the partition's size attached the same way (`cache=writeback`) \
         and QEMU's own NIC on the same user network. The network figures are a client on the \
         host's, through a `hostfwd` to a server in the guest. The figures are costs: the whole \
         machine's instructions per MiB or per round trip, so a throughput target is met when \
         native's cost is at least that share of armhv's (the throughput at a fixed instruction \
         rate). Medians of all repetitions; the target is judged on the medians, *best of n* \
         compares each side's best repetition ([how]({METHOD_REAL_IO})).\n"
    );
    let _ = writeln!(
        md,
        "| Workload | Unit | Native | armhv | armhv against native | Best of n | Target | |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---|---|");
    for row in rows {
        let name = catalog::workload(&row.workload).map_or(row.workload.as_str(), |w| w.row);
        let unit = catalog::workload(&row.workload).map_or(row.metric.as_str(), |w| w.unit);
        let med = |s: Option<&Stats>| s.map(|s| figure(s.median)).unwrap_or_else(|| "–".into());
        let (ratio, target, met) = match (real_io_verdict(row), catalog::workload(&row.workload)) {
            (Some((goal, ratio, met)), _) => (
                goal.show(ratio),
                goal.describe(),
                if met { "✅ met" } else { "❌ missed" }.to_owned(),
            ),
            (None, Some(w)) => (
                "–".into(),
                w.goal.map(|g| g.describe()).unwrap_or_default(),
                "not measured".into(),
            ),
            (None, None) => ("–".into(), String::new(), String::new()),
        };
        // Other load on the host only slows a repetition down: each side's best is its least
        // disturbed.
        let best =
            match (catalog::workload(&row.workload).and_then(|w| w.goal), row.native, row.armhv) {
                (Some(goal), Some(n), Some(a)) => goal
                    .ratio(
                        row.higher_is_better,
                        n.best(row.higher_is_better),
                        a.best(row.higher_is_better),
                    )
                    .map(|r| goal.show(r)),
                _ => None,
            };
        let _ = writeln!(
            md,
            "| {name} | {unit} | {} | {} | {ratio} | {} | {target} | {met} |",
            med(row.native.as_ref()),
            med(row.armhv.as_ref()),
            best.unwrap_or_else(|| "–".into())
        );
    }
    md.push('\n');
}

/// The main table, for the terminal.
pub fn terminal(r: &Results) -> String {
    let mut out = String::new();
    if !r.workloads.is_empty() {
        out.push_str(&terminal_workloads(r));
    }
    out.push_str(&table1::terminal(&r.runs));
    out.push_str(&crate::tablev::terminal(&r.runs));
    out.push_str(&crate::paths::terminal(&r.runs));
    let Some(run) = r.micro() else {
        out.push_str(&gicv2::terminal(r));
        if out.is_empty() {
            return "bench: no icount run of the default build (see --only)\n".to_owned();
        }
        return out;
    };
    let mut lines = vec![[
        "Microbenchmark".to_owned(),
        "median".to_owned(),
        "min".to_owned(),
        "max".to_owned(),
        "target".to_owned(),
        "".to_owned(),
    ]];
    for name in rows(run) {
        let target = catalog::bench(&name).and_then(|b| b.target);
        let t = target.map(|t| t.describe()).unwrap_or_default();
        let v = verdict_cell(target, run.figure(&name));
        let v = v.trim_start_matches(['✅', '❌', ' ']).to_owned();
        lines.push(match run.figure(&name) {
            Some(f) => {
                [catalog::row(&name).to_owned(), num(f.median), num(f.min), num(f.max), t, v]
            }
            None => [catalog::row(&name).to_owned(), "-".into(), "".into(), "".into(), t, v],
        });
    }
    let width: Vec<usize> =
        (0..6).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let _ = writeln!(
        out,
        "\nInstructions under icount, GICv3 ({} x{}, {}):",
        r.meta.cpu, r.meta.smp, r.meta.commit
    );
    for l in &lines {
        let mut s = format!("  {:<w$}", l[0], w = width[0]);
        for i in 1..4 {
            let _ = write!(s, "  {:>w$}", l[i], w = width[i]);
        }
        let _ = write!(s, "  {:<w$}  {}", l[4], l[5], w = width[4]);
        let _ = writeln!(out, "{}", s.trim_end());
    }
    out.push_str(&gicv2::terminal(r));
    out
}

/// The workloads' table, for the terminal.
fn terminal_workloads(r: &Results) -> String {
    let mut lines = vec![[
        "Workload".to_owned(),
        "unit".to_owned(),
        "native".to_owned(),
        "armhv".to_owned(),
        "normalized".to_owned(),
        "best of n".to_owned(),
    ]];
    for row in &r.workloads {
        let name = catalog::workload(&row.workload).map_or(row.workload.as_str(), |w| w.row);
        let unit = catalog::workload(&row.workload).map_or(row.metric.as_str(), |w| w.unit);
        let med = |s: Option<&Stats>| s.map(|s| figure(s.median)).unwrap_or_else(|| "-".into());
        lines.push([
            name.to_owned(),
            unit.to_owned(),
            med(row.native.as_ref()),
            med(row.armhv.as_ref()),
            row.normalized.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
            row.normalized_best.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
        ]);
    }
    let width: Vec<usize> =
        (0..6).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nApplication workloads, medians; hackbench, cpu-job, iperf3 and tcp-rr under icount, \
         the others as instructions per MiB or round trip (normalized: 1.00 = native, higher = \
         slower under armhv):"
    );
    for l in &lines {
        let mut s = format!("  {:<w0$}  {:<w1$}", l[0], l[1], w0 = width[0], w1 = width[1]);
        for i in 2..6 {
            let _ = write!(s, "  {:>w$}", l[i], w = width[i]);
        }
        let _ = writeln!(out, "{}", s.trim_end());
    }
    let verdicts: Vec<String> = r
        .workloads
        .iter()
        .filter_map(|row| {
            let (goal, ratio, met) = real_io_verdict(row)?;
            let name = catalog::workload(&row.workload).map_or(row.workload.as_str(), |w| w.row);
            let met = if met { "met" } else { "MISSED" };
            Some(format!("  {name}: {} ({}): {met}", goal.show(ratio), goal.describe()))
        })
        .collect();
    if !verdicts.is_empty() {
        let _ = writeln!(out, "\nReal I/O against its targets (armhv's median against native's):");
        for v in verdicts {
            let _ = writeln!(out, "{v}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
    fn anchor(heading: &str) -> String {
        let lower = heading.to_lowercase();
        let kept = lower.chars().filter(|c| c.is_alphanumeric() || " -_".contains(*c));
        kept.map(|c| if c == ' ' { '-' } else { c }).collect()
    }

    #[test]
    fn method_links_name_readme_headings() {
        let readme = std::fs::read_to_string(xtask::root().join("bench/README.md")).unwrap();
        let anchors: Vec<String> =
            readme.lines().filter_map(|l| l.strip_prefix("## ")).map(anchor).collect();
        for link in [
            METHOD_MICRO,
            METHOD_WORKLOADS,
            METHOD_REAL_IO,
            crate::table1::METHOD,
            crate::gicv2::METHOD,
        ] {
            let (file, to) = link.split_once('#').unwrap();
            assert_eq!(file, "../README.md", "bench/results/ to bench/README.md");
            assert!(anchors.iter().any(|a| a == to), "{link}: not a heading of {anchors:?}");
        }
    }
}
