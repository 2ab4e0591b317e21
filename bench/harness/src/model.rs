//! What one run of the suite produces: metadata, every run's parsed console and converted
//! figures, the workloads' and the distributor's records, and the baseline comparison.
//! Serialized whole to `bench/results/<stamp>.json`; the report and the charts are rendered
//! from it (`--from <json>` renders them again without running anything).

use crate::catalog::{self, NATIVE};
use crate::convert::{Figure, Mode};
use crate::irqtrace::{Event, Trace, Window};
use crate::parse::{Audio, BreakdownPath, Console, Output, Skip};
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
    /// Table V's trace of TCP round trips: variant `native` or `armhv`.
    TableV,
    /// Where each microbenchmark's instructions go: the traced pairs of vmbench runs, all rows
    /// in one record (`paths`).
    Paths,
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
    pub workloads: Option<Output>,
    /// A distributor case's results.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub distributor: Option<CaseRun>,
    /// A Table V trace's counts.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tablev: Option<TableV>,
    /// The microbenchmarks' paths, decomposed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub paths: Option<Paths>,
    /// The machine's interrupt controller, QEMU's `gic-version`: 3, or 2 for the micro part's
    /// GICv2 step.
    #[serde(default = "gic_before_v2")]
    pub gic: u8,
    /// Why the step has no figures, when it has none: the report says so in their place.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub not_run: Option<NotRun>,
}

/// Results from before the GICv2 step existed: every run was on GICv3.
fn gic_before_v2() -> u8 {
    catalog::GICV3
}

/// Why a planned step has no figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "kebab-case")]
pub enum NotRun {
    /// It ran and failed (the first line of the error; the log has the console).
    Failed(String),
    /// This machine cannot run it (GICv2 on more than 8 CPUs).
    Unsupported(String),
}

impl NotRun {
    pub fn describe(&self) -> String {
        match self {
            Self::Failed(why) => format!("not run: failed: {why}"),
            Self::Unsupported(why) => format!("not run: {why}"),
        }
    }
}

/// How a run is named in progress lines and the report: `ablation eager-fp (icount)`,
/// `micro, GICv2 (icount)`.
pub fn label(kind: Kind, variant: &str, mode: Mode, gic: u8) -> String {
    let what = match kind {
        Kind::Micro if variant == catalog::TRAP_PROBE && gic != catalog::GICV3 => {
            format!("micro, GICv{gic}, {variant} build")
        }
        Kind::Micro if variant == catalog::TRAP_PROBE => format!("micro, {variant} build"),
        Kind::Micro | Kind::Wall if gic != catalog::GICV3 => format!("micro, GICv{gic}"),
        Kind::Micro | Kind::Wall => "micro".to_owned(),
        Kind::Breakdown => format!("breakdown, {variant} build"),
        Kind::Ablation => format!("ablation {variant}"),
        Kind::Workload if variant == NATIVE => "workloads, native".to_owned(),
        Kind::Workload => format!("workloads, under {variant}"),
        Kind::TableV if variant == NATIVE => "Table V trace, native".to_owned(),
        Kind::TableV => format!("Table V trace, under {variant}"),
        Kind::Paths => "microbenchmark paths, traced".to_owned(),
        Kind::Distributor => match catalog::case_of_variant(variant) {
            Some(c) => format!("distributor case {}, {}", c.number, c.name),
            None => format!("distributor {variant}"),
        },
    };
    let mode = match mode {
        Mode::Icount => "icount",
        Mode::WallClock => "wall clock, no icount",
        Mode::Cost => "icount, instructions counted by QEMU",
    };
    format!("{what} ({mode})")
}

impl Run {
    pub fn label(&self) -> String {
        let label = label(self.kind, &self.variant, self.mode, self.gic);
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
    pub workloads: Vec<Summary>,
}

/// Medians by variant, then benchmark.
pub type Medians = BTreeMap<String, BTreeMap<String, f64>>;

impl Results {
    pub fn run(&self, kind: Kind) -> Option<&Run> {
        self.runs.iter().find(|r| r.kind == kind)
    }

    /// The default build under icount on GICv3: the suite's figures, and its baseline.
    pub fn micro(&self) -> Option<&Run> {
        self.micro_on(catalog::GICV3)
    }

    /// The default build under icount on the interrupt controller `gic` (3 or 2), also when it
    /// has no figures (`Run::not_run`).
    pub fn micro_on(&self, gic: u8) -> Option<&Run> {
        self.runs
            .iter()
            .find(|r| r.kind == Kind::Micro && r.gic == gic && r.variant != catalog::TRAP_PROBE)
    }

    /// The micro part's probe build on `gic` ([`catalog::TRAP_PROBE`]).
    pub fn trap_probe_on(&self, gic: u8) -> Option<&Run> {
        self.runs
            .iter()
            .find(|r| r.kind == Kind::Micro && r.gic == gic && r.variant == catalog::TRAP_PROBE)
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

    /// The icount medians the baseline keeps: the default build and each ablation, on GICv3
    /// (the GICv2 step is a comparison beside them, not a variant of the build).
    pub fn medians(&self) -> Medians {
        let mut m = Medians::new();
        let kept = |r: &&Run| {
            matches!(r.kind, Kind::Micro | Kind::Ablation)
                && r.gic == catalog::GICV3
                && r.variant != catalog::TRAP_PROBE
        };
        for r in self.runs.iter().filter(kept) {
            let v = m.entry(r.variant.clone()).or_default();
            for f in &r.figures {
                v.insert(f.name.clone(), f.median);
            }
        }
        m
    }
}

// --- the baseline comparison ---

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// More than the threshold (`baseline::THRESHOLD`) above the baseline.
    Regression,
    /// More than the threshold below.
    Improvement,
    /// Different, within the threshold.
    Changed,
    Same,
    /// Measured now, not in the baseline.
    New,
    /// In the baseline for a variant measured now, but not measured (skipped or failed).
    Missing,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub variant: String,
    pub bench: String,
    pub baseline: Option<f64>,
    pub now: Option<f64>,
    pub verdict: Verdict,
}

impl Comparison {
    /// The relative change, when both sides exist.
    pub fn change(&self) -> Option<f64> {
        match (self.baseline, self.now) {
            (Some(b), Some(n)) if b > 0.0 => Some(n / b - 1.0),
            _ => None,
        }
    }
}

/// The outcome of comparing with the baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Check {
    /// No icount runs of the default build or ablations were made.
    NotRun,
    /// No baseline file.
    Missing { path: String },
    /// A baseline for another machine.
    NotComparable { reason: String },
    Compared {
        /// The baseline's commit and QEMU, for the report.
        commit: String,
        qemu: String,
        /// Notes on differences that do not prevent the comparison (QEMU version, --quick).
        notes: Vec<String>,
        rows: Vec<Comparison>,
    },
    /// `--update-baseline`: the run became the baseline (the comparison it replaced is kept).
    Updated { previous: Box<Check> },
}

impl Check {
    pub fn rows(&self) -> &[Comparison] {
        match self {
            Self::Compared { rows, .. } => rows,
            Self::Updated { previous } => previous.rows(),
            _ => &[],
        }
    }

    /// Regressions that fail the run (not once accepted with `--update-baseline`).
    pub fn regressions(&self) -> Vec<&Comparison> {
        match self {
            Self::Compared { rows, .. } => {
                rows.iter().filter(|r| r.verdict == Verdict::Regression).collect()
            }
            _ => Vec::new(),
        }
    }
}

// --- the application workloads ---

/// Median and spread of the repetitions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Self { n, median, min: v[0], max: v[n - 1] })
    }

    /// The best repetition: the most throughput, or the least time.
    pub fn best(&self, higher_is_better: bool) -> f64 {
        if higher_is_better { self.max } else { self.min }
    }

    /// (max - min) / median: the spread of the repetitions, relative.
    pub fn spread(&self) -> f64 {
        if self.median == 0.0 { 0.0 } else { (self.max - self.min) / self.median }
    }
}

/// One row of the report: a workload's figures natively and under armhv.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub workload: String,
    pub metric: String,
    pub higher_is_better: bool,
    /// How the guest's clock ran for it (the catalogue's [`crate::catalog::Workload::clock`]);
    /// `None` for a workload the catalogue does not know.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub clock: Option<crate::convert::Mode>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub native: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub armhv: Option<Stats>,
    /// `workloads::normalized` of the medians.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub normalized: Option<f64>,
    /// `workloads::normalized` of each side's best repetition (least time, most throughput): other load
    /// on the host only ever slows a run down, so the best of n is the least disturbed.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub normalized_best: Option<f64>,
}

// --- the interrupt-distributor experiment ---

/// One case's run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseRun {
    pub case: u32,
    /// The generated config, relative to the repository.
    pub config: String,
    /// The real-time VM's cmdline in this case.
    pub rt_cmdline: String,
    /// iperf3's receiver throughput in the general-purpose VM.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mbit_s: Option<f64>,
    /// iperf3 failures, as armhv-bench reported them.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub errors: Vec<String>,
    /// The measured seconds' trace (`distributor::measured`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub trace: Option<Trace>,
    /// When the trace was dumped, in seconds after iperf3 started.
    pub dumps: Vec<f64>,
    /// The profiler's view at each dump.
    pub windows: Vec<Window>,
    pub events: Vec<Event>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub audio: Option<Audio>,
    /// The host's one-minute load average before and after the run: other work on the host
    /// slows QEMU's CPUs down, and here their timing is the experiment.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host_load: Option<(f64, f64)>,
    /// Why the case did not complete (a wait that timed out, no result), if it did not.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub failure: Option<String>,
}

impl CaseRun {
    /// In how many of the profiler's windows `source` was periodic, of how many.
    pub fn periodic(&self, source: &str) -> (usize, usize) {
        let n = self.windows.iter().filter(|w| w.source(source).is_some_and(|s| s.periodic));
        (n.count(), self.windows.len())
    }

    /// Mean interrupts per tick of `source` on each CPU, over the whole trace.
    pub fn per_tick(&self, source: &str) -> BTreeMap<usize, f64> {
        self.trace.as_ref().map(|t| t.per_tick(source)).unwrap_or_default()
    }
}

/// One side's measured window of a Table V trace (`tablev`), as the results keep it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableV {
    pub transactions: u64,
    /// Instructions per category name, in `tablev::Category::ALL`'s order.
    pub categories: Vec<(String, u64)>,
    pub by_cpu: Vec<u64>,
    /// The largest armhv functions: (category, function, instructions).
    pub top_functions: Vec<(String, String, u64)>,
    pub unparsed: u64,
    /// Exits from the guests to armhv in the window (entries into its lower-EL vectors).
    #[serde(default)]
    pub exits: u64,
    /// Instructions QEMU logged but did not start (taken back out of the counts).
    #[serde(default)]
    pub stopped: u64,
    /// The guest kernel's functions with the most instructions (both VMs' under armhv).
    #[serde(default)]
    pub kernel_functions: Vec<(String, u64)>,
    /// Wall seconds of the traced window.
    pub trace_seconds: f64,
    pub marker: String,
}

/// Where an armhv instruction of a microbenchmark's path goes (`paths`): the report's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Column {
    /// The Spectre-v2/BHB mitigation on the exit path (`spectre_exit_work`: the branch loop or
    /// the firmware call): the mitigation, not the trap.
    SpectreBhb,
    /// The exception vectors and the assembly around the guest: GP registers saved and
    /// restored, the fast hypercall path, `eret` (`el2_vectors`, `guest_sync_fast/slow`,
    /// `guest_exit_common`, `__guest_enter`).
    Assembly,
    /// The run loop around the guest entry and the decode and dispatch of each exit
    /// (`vmm::run::run`, `vmm::exits`, `trap::`), Table V's other "traps".
    RunLoop,
    /// State saved and restored beyond the GP registers, vCPU load and put (Table V's "world
    /// switch").
    WorldSwitch,
    /// What the exit is for: the device models, the vGIC and interrupt delivery, hypercall and
    /// system-register emulation.
    Handler,
    /// The scheduler, its per-CPU loop and idle work.
    Scheduler,
    /// armhv code none of the above names.
    Other,
}

/// One benchmark's path per operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerOp {
    pub columns: Vec<(Column, f64)>,
    pub total: f64,
    pub exits: f64,
    /// The largest functions: (column, deciding function, instructions per operation).
    pub functions: Vec<(Column, String, f64)>,
}

/// A row of the table: one benchmark (one pair of runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathRow {
    /// The row's name, `io-out/io-in` for the I/O pair.
    pub name: String,
    /// vmbench's words for it.
    pub words: String,
    pub n: (u64, u64),
    pub per_op: PerOp,
    /// vmbench's medians in the N2 run, in instructions: (result, median).
    pub medians: Vec<(String, f64)>,
    /// EL2 instructions of each run up to the end marker, and how many QEMU took back.
    pub totals: (u64, u64),
    pub stopped: (u64, u64),
    /// Wall seconds of the two traced runs.
    pub seconds: (f64, f64),
}

/// The whole part's record (one `Run` of kind `paths`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Paths {
    pub rows: Vec<PathRow>,
    /// Rows that failed, and why.
    pub failed: Vec<(String, String)>,
    pub seconds: f64,
}
