//! Two bench runs' application workloads side by side (`--agreement A.json B.json`): whether the
//! method gives the same normalized figures twice, row by row (issue 20: two consecutive runs
//! must agree within [`AGREEMENT`]).

use crate::catalog;
use crate::model::{Stats, Summary};
use std::fmt::Write;

/// How far two runs' normalized figures may lie apart and still agree: 5 % of the first.
pub const AGREEMENT: f64 = 0.05;

/// One workload in both runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    pub workload: String,
    pub first: Option<Summary>,
    pub second: Option<Summary>,
}

impl Pair {
    /// The second run's normalized figure against the first's, relative: (b - a) / a.
    pub fn difference(&self) -> Option<f64> {
        let a = self.first.as_ref()?.normalized?;
        let b = self.second.as_ref()?.normalized?;
        relative_difference(a, b)
    }

    /// Whether both runs measured the row and their figures agree.
    pub fn agrees(&self) -> bool {
        self.difference().is_some_and(|d| d.abs() <= AGREEMENT)
    }
}

/// (b - a) / a, or `None` when `a` is not a positive figure.
pub fn relative_difference(a: f64, b: f64) -> Option<f64> {
    (a > 0.0 && a.is_finite() && b.is_finite()).then(|| (b - a) / a)
}

/// The rows of either run, in the first run's order, then the second's others.
pub fn pair(first: &[Summary], second: &[Summary]) -> Vec<Pair> {
    let mut names: Vec<&str> = first.iter().map(|s| s.workload.as_str()).collect();
    for s in second {
        if !names.contains(&s.workload.as_str()) {
            names.push(&s.workload);
        }
    }
    let find = |rows: &[Summary], name: &str| rows.iter().find(|s| s.workload == name).cloned();
    names
        .into_iter()
        .map(|name| Pair {
            workload: name.to_owned(),
            first: find(first, name),
            second: find(second, name),
        })
        .collect()
}

/// A side's spread over its repetitions: "min–max, ±x %" of the median.
fn spread(s: Option<&Stats>) -> String {
    match s {
        None => "–".to_owned(),
        Some(s) => format!(
            "{}–{} ({:.1} %)",
            crate::numbers::figure(s.min),
            crate::numbers::figure(s.max),
            s.spread() * 100.0
        ),
    }
}

fn normalized(s: Option<&Summary>) -> String {
    match s.and_then(|s| s.normalized) {
        Some(v) => format!("{v:.3}"),
        None => "not run".to_owned(),
    }
}

/// The comparison as a Markdown table, with each run's spread and a verdict per row.
pub fn render(first_name: &str, second_name: &str, pairs: &[Pair]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Normalized to native (1.00 = no overhead, higher = slower under armhv), run 1 = \
         `{first_name}`, run 2 = `{second_name}`; the difference is run 2's against run 1's; \
         agreement means within {:.0} %. Spread: each side's min–max over all repetitions of \
         the run, and (max − min) / median.\n",
        AGREEMENT * 100.0
    );
    let _ = writeln!(
        md,
        "| Workload | Clock | Run 1 | Run 2 | Difference | Agree | Run 1 native spread | Run 1 \
         armhv spread | Run 2 native spread | Run 2 armhv spread |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---|---:|---:|---:|---:|");
    for p in pairs {
        let w = catalog::workload(&p.workload);
        let row = w.map_or(p.workload.as_str(), |w| w.row);
        let clock = w.map_or("?", |w| w.clock.short_label());
        let diff = p.difference().map_or("–".to_owned(), |d| format!("{:+.1} %", d * 100.0));
        let agree = if p.agrees() { "yes" } else { "**no**" };
        let side = |s: &Option<Summary>, native: bool| {
            spread(
                s.as_ref().and_then(|s| if native { s.native.as_ref() } else { s.armhv.as_ref() }),
            )
        };
        let _ = writeln!(
            md,
            "| {row} | {clock} | {} | {} | {diff} | {agree} | {} | {} | {} | {} |",
            normalized(p.first.as_ref()),
            normalized(p.second.as_ref()),
            side(&p.first, true),
            side(&p.first, false),
            side(&p.second, true),
            side(&p.second, false),
        );
    }
    let off: Vec<&str> =
        pairs.iter().filter(|p| !p.agrees()).map(|p| p.workload.as_str()).collect();
    if off.is_empty() {
        let _ = writeln!(md, "\nEvery row agrees within {:.0} %.", AGREEMENT * 100.0);
    } else {
        let _ = writeln!(
            md,
            "\nNot within {:.0} % (or not measured in both runs): {}.",
            AGREEMENT * 100.0,
            off.join(", ")
        );
    }
    md
}
