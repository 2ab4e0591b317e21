//! The committed baseline (`bench/baseline.json`): icount medians by variant and benchmark, and
//! the comparison of a run against it. Under icount a median is a path length and identical run
//! to run, so any change is real; more than 5 % up is a regression.

use crate::model::{Check, Comparison, Medians, Meta, Verdict};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A median more than this fraction above the baseline is a regression (and that much below,
/// an improvement).
pub const THRESHOLD: f64 = 0.05;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub note: String,
    /// When and from what it was measured.
    pub timestamp: String,
    pub commit: String,
    pub qemu: String,
    pub cpu: String,
    pub smp: u32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub quick: Option<String>,
    /// Median instructions by variant (`default`, then each ablation) and benchmark.
    pub medians: Medians,
}

impl Baseline {
    /// The baseline after accepting `now`: the variants measured now replace their old
    /// entries, the others are kept.
    pub fn updated(old: Option<Baseline>, now: &Medians, meta: &Meta) -> Baseline {
        let mut medians = old.map(|b| b.medians).unwrap_or_default();
        for (variant, m) in now {
            medians.insert(variant.clone(), m.clone());
        }
        Baseline {
            note: "icount medians in instructions; written by `make bench \
                   ARGS=--update-baseline`, compared by every `make bench`"
                .to_owned(),
            timestamp: meta.timestamp.clone(),
            commit: meta.commit.clone(),
            qemu: meta.qemu.clone(),
            cpu: meta.cpu.clone(),
            smp: meta.smp,
            quick: meta.quick.clone(),
            medians,
        }
    }
}

pub fn load(path: &Path) -> Result<Option<Baseline>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

pub fn save(path: &Path, b: &Baseline) -> Result<()> {
    let text = serde_json::to_string_pretty(b)? + "\n";
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Compares the medians measured now with the baseline, for the variants measured now.
pub fn compare(base: &Baseline, now: &Medians, meta: &Meta) -> Check {
    if base.cpu != meta.cpu || base.smp != meta.smp {
        return Check::NotComparable {
            reason: format!(
                "the baseline is for {} x{}, this run is {} x{}",
                base.cpu, base.smp, meta.cpu, meta.smp
            ),
        };
    }
    let mut notes = Vec::new();
    if base.qemu != meta.qemu {
        notes.push(format!(
            "the baseline was measured with {}, this run with {}",
            base.qemu, meta.qemu
        ));
    }
    if base.quick != meta.quick {
        let q = |x: &Option<String>| x.clone().unwrap_or_else(|| "the config's iterations".into());
        notes.push(format!(
            "iterations differ (baseline: {}, now: {}): medians may differ slightly",
            q(&base.quick),
            q(&meta.quick)
        ));
    }
    let mut rows = Vec::new();
    for (variant, medians) in now {
        let old = base.medians.get(variant);
        for (bench, &value) in medians {
            let b = old.and_then(|o| o.get(bench)).copied();
            let verdict = match b {
                None => Verdict::New,
                Some(b) if value > b * (1.0 + THRESHOLD) => Verdict::Regression,
                Some(b) if value < b * (1.0 - THRESHOLD) => Verdict::Improvement,
                Some(b) if value != b => Verdict::Changed,
                Some(_) => Verdict::Same,
            };
            rows.push(Comparison {
                variant: variant.clone(),
                bench: bench.clone(),
                baseline: b,
                now: Some(value),
                verdict,
            });
        }
        for (bench, &b) in old.into_iter().flatten() {
            if !medians.contains_key(bench) {
                rows.push(Comparison {
                    variant: variant.clone(),
                    bench: bench.clone(),
                    baseline: Some(b),
                    now: None,
                    verdict: Verdict::Missing,
                });
            }
        }
    }
    Check::Compared { commit: base.commit.clone(), qemu: base.qemu.clone(), notes, rows }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn meta() -> Meta {
        Meta {
            timestamp: "2024-01-01T12:00:00Z".into(),
            stamp: "2024-01-01-120000".into(),
            commit: "abc1234".into(),
            qemu: "QEMU emulator version 7.2.22".into(),
            cpu: "cortex-a76".into(),
            smp: 2,
            config: "configs/bench/micro.toml".into(),
            vm: "bench".into(),
            workloads_config: None,
            distributor_config: None,
            quick: None,
        }
    }

    fn medians(v: &[(&str, &str, f64)]) -> Medians {
        let mut m = Medians::new();
        for (variant, bench, x) in v {
            m.entry(variant.to_string()).or_default().insert(bench.to_string(), *x);
        }
        m
    }

    fn verdicts(c: &Check) -> Vec<(String, String, Verdict)> {
        c.rows().iter().map(|r| (r.variant.clone(), r.bench.clone(), r.verdict)).collect()
    }

    #[test]
    fn flags_more_than_five_percent() {
        let base = Baseline::updated(
            None,
            &medians(&[
                ("default", "hypercall", 100.0),
                ("default", "gic-trap", 200.0),
                ("default", "io-out", 200.0),
                ("default", "io-in", 1000.0),
                ("default", "eoi", 9.0),
                ("eager-fp", "vmswitch", 1000.0),
            ]),
            &meta(),
        );
        let now = medians(&[
            ("default", "hypercall", 105.0), // exactly +5 %: allowed
            ("default", "gic-trap", 211.0),  // +5.5 %: regression
            ("default", "io-out", 189.0),    // -5.5 %: improvement
            ("default", "io-in", 1001.0),    // within
            ("default", "ipi", 700.0),       // new
        ]);
        let c = compare(&base, &now, &meta());
        let v = verdicts(&c);
        let d = |b: &str, x| ("default".to_string(), b.to_string(), x);
        assert!(v.contains(&d("hypercall", Verdict::Changed)), "{v:?}");
        assert!(v.contains(&d("gic-trap", Verdict::Regression)));
        assert!(v.contains(&d("io-out", Verdict::Improvement)));
        assert!(v.contains(&d("io-in", Verdict::Changed)));
        assert!(v.contains(&d("ipi", Verdict::New)));
        assert!(v.contains(&d("eoi", Verdict::Missing)));
        // eager-fp was not measured now: not compared.
        assert!(v.iter().all(|(variant, ..)| variant == "default"));
        let r = c.regressions();
        assert_eq!(r.len(), 1);
        assert!((r[0].change().unwrap() - 0.055).abs() < 1e-9);
        // Identical: the determinism case.
        let same = compare(&base, &base.medians, &meta());
        assert!(same.regressions().is_empty());
        assert!(same.rows().iter().all(|r| r.verdict == Verdict::Same));
    }

    #[test]
    fn another_machine_is_not_compared() {
        let base = Baseline::updated(None, &medians(&[("default", "hypercall", 1.0)]), &meta());
        let mut m = meta();
        m.cpu = "cortex-a57".into();
        let c = compare(&base, &medians(&[("default", "hypercall", 99.0)]), &m);
        assert!(matches!(c, Check::NotComparable { .. }));
        assert!(c.regressions().is_empty());
        let mut q = meta();
        q.qemu = "QEMU emulator version 8.2.0".into();
        q.quick = Some("n=1000 warmup=100".into());
        let Check::Compared { notes, .. } =
            compare(&base, &medians(&[("default", "hypercall", 1.0)]), &q)
        else {
            panic!()
        };
        assert_eq!(notes.len(), 2);
    }

    #[test]
    fn update_merges_variants_and_round_trips() {
        let old = Baseline::updated(
            None,
            &medians(&[("default", "a", 1.0), ("all-lrs", "a", 2.0)]),
            &meta(),
        );
        let new = Baseline::updated(Some(old), &medians(&[("default", "a", 3.0)]), &meta());
        assert_eq!(new.medians["default"]["a"], 3.0);
        assert_eq!(new.medians["all-lrs"]["a"], 2.0);
        let dir = std::env::temp_dir().join(format!("armhv-baseline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("baseline.json");
        assert_eq!(load(&path).unwrap(), None);
        save(&path, &new).unwrap();
        assert_eq!(load(&path).unwrap(), Some(new));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
