//! The micro part on GICv3 and on GICv2, side by side, and the same figures in the layout of
//! the KVM/ARM paper's Table 3: for the report and the terminal.

use crate::catalog::{self, BENCHES, GICV2, GICV3, Measure, TABLE3};
use crate::convert::Figure;
use crate::model::{Kind, Results, Run};
use crate::numbers::{delta, num};
use std::fmt::Write;

/// Where `bench/README.md` explains these tables, from the report in `bench/results/`.
pub const METHOD: &str = "../README.md#gicv2-and-the-kvmarm-table-3-layout";

/// What a column shows when its run has no figures at all.
pub fn missing(r: &Results, gic: u8) -> Option<String> {
    match r.micro_on(gic) {
        None => Some(format!("not run: these results have no GICv{gic} micro step")),
        Some(run) => run.not_run.as_ref().map(|n| n.describe()),
    }
}

/// A benchmark's cell: its median, or why there is none. `None` when the run as a whole has no
/// figures (see [`missing`]).
fn cell(run: Option<&Run>, name: &str) -> Option<String> {
    let run = run.filter(|run| run.not_run.is_none())?;
    Some(match run.figure(name) {
        Some(f) if f.scale != 1.0 => format!("{} ±{}", num(f.median), num(f.scale)),
        Some(f) => num(f.median),
        None => {
            run.skip(name).map_or("not reported".to_owned(), |s| format!("skipped: {}", s.reason))
        }
    })
}

fn figure<'a>(run: Option<&'a Run>, name: &str) -> Option<&'a Figure> {
    run.and_then(|run| run.figure(name))
}

/// The rows of the side-by-side table: the catalogue's benchmarks either run has (and the
/// study's, measured or not), then any name vmbench printed that the catalogue does not know.
fn names(runs: &[Option<&Run>]) -> Vec<String> {
    let has = |name: &str| {
        runs.iter().flatten().any(|run| run.figure(name).is_some() || run.skip(name).is_some())
    };
    let mut names: Vec<String> =
        BENCHES.iter().filter(|b| b.in_study || has(b.name)).map(|b| b.name.to_owned()).collect();
    for f in runs.iter().flatten().flat_map(|run| &run.figures) {
        if !names.contains(&f.name) {
            names.push(f.name.clone());
        }
    }
    names
}

fn exits(f: Option<&Figure>) -> String {
    f.and_then(|f| f.exits_per_op).map_or("–".to_owned(), |e| format!("{e:.2}"))
}

/// The acknowledge-and-complete cost on GICv2, against GICv3's: one sentence from the runs.
fn eoi_sentence(v3: Option<&Run>, v2: Option<&Run>) -> Option<String> {
    let f2 = figure(v2, "eoi")?;
    // Printed with two decimals: 0.00 means no exit in any operation measured.
    let trapped = match f2.exits_per_op {
        Some(e) if e < 0.005 => "neither trapped to armhv (0.00 exits per operation)".to_owned(),
        Some(e) => format!("⚠ they trapped to armhv ({e:.2} exits per operation)"),
        None => "armhv's exits were not counted".to_owned(),
    };
    let against = match figure(v3, "eoi") {
        Some(f3) => format!(
            ", against {} on GICv3 (ICC_IAR1_EL1 and ICC_EOIR1_EL1, system registers): {}",
            num(f3.median),
            delta(f3.median, f2.median)
        ),
        None => String::new(),
    };
    Some(format!(
        "On GICv2 the guest acknowledges and completes an interrupt with an MMIO load of \
         GICC_IAR and a store to GICC_EOIR in the hardware's virtual CPU interface (GICV), which \
         armhv maps at the guest's GICC: {trapped}. They cost {} instructions{against}.",
        num(f2.median)
    ))
}

/// The side-by-side table and Table 3, when the micro part ran.
pub fn markdown(md: &mut String, r: &Results) {
    if !r.runs.iter().any(|run| run.kind == Kind::Micro) {
        return;
    }
    side_by_side(md, r);
    table3(md, r);
}

fn side_by_side(md: &mut String, r: &Results) {
    let (v3, v2) = (r.micro_on(GICV3), r.micro_on(GICV2));
    let _ = writeln!(md, "## Microbenchmarks on GICv3 and GICv2\n");
    let _ = writeln!(
        md,
        "The same build and VMs on `gic-version=3` and on `gic-version=2` (same CPU model, \
         icount): median **instructions**; GICv3's are the table above. Figures marked ± were \
         timed with the virtual counter, whose tick is their resolution ([how]({METHOD})).\n"
    );
    let _ = writeln!(md, "| Microbenchmark | GICv3 | GICv2 | GICv2 − GICv3 | Exits/op (v3 / v2) |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    for name in names(&[v3, v2]) {
        let c3 = cell(v3, &name).unwrap_or_else(|| "not run".into());
        let c2 = cell(v2, &name).unwrap_or_else(|| "not run".into());
        let (f3, f2) = (figure(v3, &name), figure(v2, &name));
        let d = match (f3, f2) {
            (Some(a), Some(b)) => delta(a.median, b.median),
            _ => String::new(),
        };
        let _ = writeln!(
            md,
            "| {} | {c3} | {c2} | {d} | {} / {} |",
            catalog::row(&name),
            exits(f3),
            exits(f2)
        );
    }
    md.push('\n');
    for gic in [GICV3, GICV2] {
        if let Some(why) = missing(r, gic) {
            let _ = writeln!(md, "GICv{gic}: {why}.\n");
        }
    }
    if let Some(s) = eoi_sentence(v3, v2) {
        let _ = writeln!(md, "**Virtual IRQ Completion (acknowledge + EOI).** {s}\n");
    }
}

fn table3(md: &mut String, r: &Results) {
    let (v3, v2) = (r.micro_on(GICV3), r.micro_on(GICV2));
    let _ = writeln!(md, "## KVM/ARM Table 3 layout (armhv, GICv2)\n");
    let _ = writeln!(
        md,
        "The rows of Table 3 (\"Micro-architectural cycle counts\") of Dall and Nieh, \
         \"KVM/ARM: The Design and Implementation of the Linux ARM Hypervisor\" (ASPLOS 2014), \
         measured on armhv on a GICv2 host, with the GICv3 run beside it. Units: \
         **instructions under icount** (QEMU's cycle counter counts one per instruction), not \
         the paper's silicon cycles: path lengths, not comparable with its figures. Each row is \
         mapped to the armhv microbenchmark that measures the same operation, or says why none \
         does ([how]({METHOD})).\n"
    );
    let _ = writeln!(md, "| Micro Test | armhv, GICv2 | armhv, GICv3 | What armhv measures |");
    let _ = writeln!(md, "|---|---:|---:|---|");
    for row in TABLE3 {
        let (c2, c3) = match row.measure {
            Measure::Bench(name) => (
                cell(v2, name).unwrap_or_else(|| "not run".into()),
                cell(v3, name).unwrap_or_else(|| "not run".into()),
            ),
            Measure::Probe(name) => (
                cell(r.trap_probe_on(GICV2), name).unwrap_or_else(|| "not run".into()),
                cell(r.trap_probe_on(GICV3), name).unwrap_or_else(|| "not run".into()),
            ),
            Measure::NotMeasured => ("not measured".to_owned(), "not measured".to_owned()),
            Measure::NotApplicable(text) => (text.to_owned(), text.to_owned()),
        };
        let _ = writeln!(md, "| {} | {c2} | {c3} | {} |", row.row, row.how);
    }
    md.push('\n');
    for gic in [GICV2, GICV3] {
        if let Some(why) = missing(r, gic) {
            let _ = writeln!(md, "GICv{gic}: {why}.\n");
        }
    }
}

/// The side-by-side table and the EOI line, for the terminal.
pub fn terminal(r: &Results) -> String {
    let (v3, v2) = (r.micro_on(GICV3), r.micro_on(GICV2));
    if v3.is_none() && v2.is_none() {
        return String::new();
    }
    let mut lines = vec![[
        "Microbenchmark".to_owned(),
        "GICv3".to_owned(),
        "GICv2".to_owned(),
        "GICv2 - GICv3".to_owned(),
    ]];
    for name in names(&[v3, v2]) {
        let d = match (figure(v3, &name), figure(v2, &name)) {
            (Some(a), Some(b)) => delta(a.median, b.median),
            _ => String::new(),
        };
        lines.push([
            catalog::row(&name).to_owned(),
            cell(v3, &name).unwrap_or_else(|| "not run".into()),
            cell(v2, &name).unwrap_or_else(|| "not run".into()),
            d,
        ]);
    }
    let width: Vec<usize> =
        (0..4).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    let _ = writeln!(out, "\nGICv3 and GICv2, instructions under icount ({}):", r.meta.cpu);
    for l in &lines {
        let mut s = format!("  {:<w$}", l[0], w = width[0]);
        for i in 1..3 {
            let _ = write!(s, "  {:>w$}", l[i], w = width[i]);
        }
        let _ = write!(s, "  {}", l[3]);
        let _ = writeln!(out, "{}", s.trim_end());
    }
    for gic in [GICV3, GICV2] {
        if let Some(why) = missing(r, gic) {
            let _ = writeln!(out, "  GICv{gic}: {why}");
        }
    }
    if let Some(f2) = figure(v2, "eoi") {
        let trapped = match f2.exits_per_op {
            Some(e) if e < 0.005 => "no trap (0.00 exits/op)".to_owned(),
            Some(e) => format!("TRAPPED ({e:.2} exits/op)"),
            None => "exits not counted".to_owned(),
        };
        let against = figure(v3, "eoi").map_or(String::new(), |f3| {
            format!(
                "; GICv3 (system registers): {}, {}",
                num(f3.median),
                delta(f3.median, f2.median)
            )
        });
        let _ = writeln!(
            out,
            "  EOI + ACK on GICv2: a GICC_IAR load and a GICC_EOIR store to the mapped GICV, \
             {trapped}: {} instructions{against}",
            num(f2.median)
        );
    }
    out
}
