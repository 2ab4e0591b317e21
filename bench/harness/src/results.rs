//! What one run of the suite produces: metadata, every run's parsed console and converted
//! figures, and the baseline comparison. Serialized whole to `bench/results/<stamp>.json`;
//! the report and the charts are rendered from it (`--from <json>` renders
//! them again without running anything).

use crate::baseline::Check;
use crate::convert::{Figure, Mode};
use crate::parse::{BreakdownPath, Console, Skip};
use crate::{distributor, workloads};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// UTC, RFC 3339: `2024-01-01T12:00:00Z`.
    pub timestamp: String,
    /// The file-name stem: `2024-01-01-120000` (UTC).
    pub stamp: String,
    /// `git rev-parse --short HEAD`, `-dirty` when the tree has changes.
    pub commit: String,
    /// First line of `qemu-system-aarch64 --version`.
    pub qemu: String,
    pub cpu: String,
    pub smp: u32,
    /// The config, relative to the repository.
    pub config: String,
    /// The VM whose vmbench results are the suite's.
    pub vm: String,
    /// The application workloads' config, relative to the repository, when they ran.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub workloads_config: Option<String>,
    /// The interrupt-distributor experiment's template, relative to the repository, when it ran.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub distributor_config: Option<String>,
    /// `--quick`: fewer iterations (the words appended to the bench VM's cmdline).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub quick: Option<String>,
}

/// Which part of the suite a run belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The default build under icount: the suite's main figures.
    Micro,
    /// Built with the world-switch breakdown instrumentation.
    Breakdown,
    /// A design ablation: one hypervisor feature, under icount.
    Ablation,
    /// The default build without icount.
    Wall,
    /// The application workloads in a Linux guest: variant `native` (plain QEMU, no armhv) or
    /// `armhv`.
    Workload,
    /// A case of the interrupt-distributor experiment (Table 1): variant `caseN`.
    Distributor,
}

impl Kind {
    /// Whether the run is of the bench VM (vmbench), rather than of Linux guests.
    pub fn is_vmbench(self) -> bool {
        matches!(self, Self::Micro | Self::Breakdown | Self::Ablation | Self::Wall)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub kind: Kind,
    /// `default` or the ablation's feature.
    pub variant: String,
    pub features: Vec<String>,
    pub mode: Mode,
    /// Wall time of the QEMU run (not the build).
    pub seconds: f64,
    /// The bench VM's figures, converted, in vmbench's order.
    pub figures: Vec<Figure>,
    pub skips: Vec<Skip>,
    /// vmbench's counter-read overhead, converted.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub overhead: Option<f64>,
    /// Everything parsed from the console (all VMs' raw lines and any breakdown).
    pub console: Console,
    /// How QEMU was started (the image path is the build's).
    #[serde(default)]
    pub qemu_command: String,
    /// A workload run's results (armhv-bench's lines).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub workloads: Option<workloads::Output>,
    /// A distributor case's results.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub distributor: Option<distributor::CaseRun>,
}

/// How a run is named in progress lines and the report: `ablation eager-fp (icount)`.
pub fn label(kind: Kind, variant: &str, mode: Mode) -> String {
    let what = match kind {
        Kind::Micro | Kind::Wall => "micro".to_owned(),
        Kind::Breakdown => format!("breakdown, {variant} build"),
        Kind::Ablation => format!("ablation {variant}"),
        Kind::Workload if variant == workloads::NATIVE => "workloads, native".to_owned(),
        Kind::Workload => format!("workloads, under {variant}"),
        Kind::Distributor => match distributor::case_of_variant(variant) {
            Some(c) => format!("distributor case {}, {}", c.number, c.name),
            None => format!("distributor {variant}"),
        },
    };
    let mode = match mode {
        Mode::Icount => "icount",
        Mode::WallClock => "wall clock, no icount",
    };
    format!("{what} ({mode})")
}

impl Run {
    pub fn label(&self) -> String {
        let label = label(self.kind, &self.variant, self.mode);
        match &self.workloads {
            Some(w) if w.round > 0 => format!("{label}, round {}", w.round),
            _ => label,
        }
    }

    pub fn figure(&self, name: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.name == name)
    }

    pub fn skip(&self, name: &str) -> Option<&Skip> {
        self.skips.iter().find(|s| s.name == name)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub schema: u32,
    pub meta: Meta,
    pub runs: Vec<Run>,
    pub baseline: Check,
    /// The application workloads, native and under armhv, normalized (from the workload runs).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub workloads: Vec<workloads::Summary>,
}

/// Medians by variant, then benchmark.
pub type Medians = BTreeMap<String, BTreeMap<String, f64>>;

impl Results {
    pub fn run(&self, kind: Kind) -> Option<&Run> {
        self.runs.iter().find(|r| r.kind == kind)
    }

    /// The default build under icount.
    pub fn micro(&self) -> Option<&Run> {
        self.run(Kind::Micro)
    }

    pub fn ablations(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| r.kind == Kind::Ablation)
    }

    /// The workload runs of a variant (`native` or `armhv`), one per round.
    pub fn workload_runs<'a>(&'a self, variant: &'a str) -> impl Iterator<Item = &'a Run> {
        self.runs.iter().filter(move |r| r.kind == Kind::Workload && r.variant == variant)
    }

    pub fn breakdown(&self) -> &[BreakdownPath] {
        self.run(Kind::Breakdown).map_or(&[], |r| &r.console.breakdown)
    }

    /// The icount medians the baseline keeps: the default build and each ablation.
    pub fn medians(&self) -> Medians {
        let mut m = Medians::new();
        for r in self.runs.iter().filter(|r| matches!(r.kind, Kind::Micro | Kind::Ablation)) {
            let v = m.entry(r.variant.clone()).or_default();
            for f in &r.figures {
                v.insert(f.name.clone(), f.median);
            }
        }
        m
    }
}
