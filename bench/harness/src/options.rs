//! What to run: the command line, the parts of the suite, and the plan of QEMU runs they make.

use crate::catalog::{
    self, ABLATIONS, ARMHV, BREAKDOWN_FEATURE, CASES, DEFAULT_VARIANT, GICV2, GICV3, NATIVE,
    TRAP_PROBE,
};
use crate::convert::Mode;
use crate::model::{self, Kind};
use anyhow::{Result, anyhow, bail};
use std::path::PathBuf;
use std::time::Duration;
use xtask::{MachineSpec, root};

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
    "  --only PARTS       comma-separated parts to run: micro (on GICv3, then GICv2),\n",
    "                     breakdown, ablations, wall, workloads, distributor, tablev\n",
    "                     (Table V: a TCP round trip traced and decomposed, a few\n",
    "                     minutes), paths (each microbenchmark's armhv path traced and\n",
    "                     decomposed, 1-2 minutes a row) (default: all but workloads,\n",
    "                     distributor, tablev and paths)\n",
    "  --with-workloads   the default parts and the application workloads (Linux guests,\n",
    "                     natively and under armhv; about 4 minutes more)\n",
    "  --workloads LIST   comma-separated workloads (default all: hackbench, cpu-job,\n",
    "                     blk-write, blk-read, mdisk-write, mdisk-read, iperf3, tcp-rr,\n",
    "                     uplink-stream, uplink-rr)\n",
    "  --rounds N         distributor: rounds of the cases, each case once a round;\n",
    "                     workloads: boots of each side for the rows counted by QEMU\n",
    "                     (default 3; --quick: 1)\n",
    "  --reps N           repetitions of each workload in each run (default 2; hackbench\n",
    "                     20 times as many)\n",
    "  --cases LIST       distributor: the cases of Table 1 to run (default 1,2,3,4,5,6,7)\n",
    "  --rows LIST        paths: the benchmarks to trace (default hypercall, gic-trap,\n",
    "                     pl011-write, ipi, vmswitch, io-out/io-in)\n",
    "  --quick            fewer iterations: \"n=1000 warmup=100\" appended to the bench VM's\n",
    "                     cmdline (through a copy of the config in build/bench); one\n",
    "                     round of the workloads\n",
    "  --update-baseline  write this run's icount medians to bench/baseline.json (accepts a\n",
    "                     regression; the variants not run keep their old entries)\n",
    "  --timeout SECS     per QEMU run (default 600)\n",
    "  --config FILE      another bench config (default configs/bench/micro.toml)\n",
    "  --from JSON        render the report and charts again from a results file; run nothing\n",
    "  --agreement A B    two results files' workloads side by side: normalized figures,\n",
    "                     their difference and each side's spread; fails if a row differs\n",
    "                     by more than 5 %; run nothing\n",
    "  --cpu MODEL        QEMU CPU model (default cortex-a76)\n",
    "  --smp N            CPUs of the micro parts (default 2; the workloads run on -smp 4\n",
    "                     under armhv and on the VM's 2 vCPUs natively, the distributor on\n",
    "                     -smp 4; GICv2 takes at most 8)",
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
    /// Table V: one TCP request/response traced and decomposed (`tablev`).
    TableV,
    /// Where each microbenchmark's instructions go: traced vmbench runs (`paths`).
    Paths,
}

impl Part {
    /// Every part, in the suite's order.
    pub const ALL: [Part; 8] = [
        Part::Micro,
        Part::Breakdown,
        Part::Ablations,
        Part::Wall,
        Part::Workloads,
        Part::Distributor,
        Part::TableV,
        Part::Paths,
    ];
    /// What runs without `--only`: all but the workloads and the distributor, which take
    /// minutes more.
    pub const DEFAULT: [Part; 4] = [Part::Micro, Part::Breakdown, Part::Ablations, Part::Wall];

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "micro" => Self::Micro,
            "breakdown" => Self::Breakdown,
            "ablations" => Self::Ablations,
            "wall" => Self::Wall,
            "workloads" => Self::Workloads,
            "distributor" => Self::Distributor,
            "tablev" => Self::TableV,
            "paths" => Self::Paths,
            _ => bail!(
                "unknown part {s:?} for --only; use micro, breakdown, ablations, wall, workloads, \
                 distributor, tablev or paths"
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
    /// Runs of each of the distributor's cases, round after round, and boots of each side for
    /// the workloads counted by QEMU (one with `quick`).
    pub rounds: u32,
    /// The interrupt-distributor experiment's template config.
    pub distributor_config: PathBuf,
    /// Its cases (Table 1's numbers) to run.
    pub cases: Vec<u32>,
    /// Two results files whose workloads to compare row by row; run nothing.
    pub agreement: Option<(PathBuf, PathBuf)>,
    /// The paths part's rows to run (`paths::ROWS` names).
    pub paths_rows: Vec<String>,
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
            workloads: catalog::all_names(),
            reps: 2,
            rounds: 3,
            distributor_config: root().join("configs/bench/distributor.toml"),
            cases: CASES.iter().map(|c| c.number).collect(),
            agreement: None,
            paths_rows: crate::catalog::PATH_ROWS.iter().map(|r| r.0.to_owned()).collect(),
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
                    if let Some(w) = o.workloads.iter().find(|w| catalog::workload(w).is_none()) {
                        bail!(
                            "unknown workload {w:?} for --workloads; use {}",
                            catalog::all_names().join(", ")
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
                "--cases" => o.cases = catalog::parse_cases(&value()?)?,
                "--rows" => {
                    let v = value()?;
                    o.paths_rows = v.split(',').map(str::to_owned).collect();
                    let known = |r: &String| crate::catalog::PATH_ROWS.iter().any(|x| x.0 == r);
                    if let Some(r) = o.paths_rows.iter().find(|r| !known(r)) {
                        let names: Vec<&str> =
                            crate::catalog::PATH_ROWS.iter().map(|x| x.0).collect();
                        bail!("unknown row {r:?} for --rows; use {}", names.join(", "));
                    }
                }
                "--config" => o.config = PathBuf::from(value()?),
                "--from" => o.from = Some(PathBuf::from(value()?)),
                "--agreement" => {
                    let a = PathBuf::from(value()?);
                    let b = args.next().ok_or_else(|| {
                        anyhow!("--agreement needs two results files: --agreement A.json B.json")
                    })?;
                    o.agreement = Some((a, PathBuf::from(b)));
                }
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
    /// Workloads and the distributor: which round (from 1); 0 for the other parts (the
    /// distributor's case is its variant, `caseN`).
    pub round: u32,
    /// The machine's interrupt controller (QEMU's `gic-version`): 3, or 2 for the micro part's
    /// second step.
    pub gic: u8,
}

impl Step {
    pub fn label(&self) -> String {
        let label = model::label(self.kind, &self.variant, self.mode, self.gic);
        if self.round > 0 { format!("{label}, round {}", self.round) } else { label }
    }

    /// For file names.
    pub fn slug(&self) -> String {
        match self.kind {
            Kind::Micro if self.variant == TRAP_PROBE && self.gic != GICV3 => {
                format!("micro-gicv{}-{TRAP_PROBE}", self.gic)
            }
            Kind::Micro if self.variant == TRAP_PROBE => format!("micro-{TRAP_PROBE}"),
            Kind::Micro if self.gic != GICV3 => format!("micro-gicv{}", self.gic),
            Kind::Micro => "micro".into(),
            Kind::Breakdown => "breakdown".into(),
            Kind::Ablation => format!("ablation-{}", self.variant),
            Kind::Wall => "wall".into(),
            Kind::Workload if self.mode == Mode::Icount => {
                format!("workloads-icount-r{}-{}", self.round, self.variant)
            }
            Kind::Workload if self.mode == Mode::Cost => {
                format!("workloads-cost-r{}-{}", self.round, self.variant)
            }
            Kind::Workload => format!("workloads-r{}-{}", self.round, self.variant),
            Kind::Distributor => format!("table1-{}-r{}", self.variant, self.round),
            Kind::TableV => format!("tablev-{}", self.variant),
            Kind::Paths => "paths".into(),
        }
    }
}

/// The runs for the parts asked for, in the suite's order, with every case of the distributor
/// and every workload.
pub fn plan(parts: &[Part]) -> Vec<Step> {
    let cases: Vec<u32> = CASES.iter().map(|c| c.number).collect();
    plan_with(parts, 1, &cases, &catalog::clocks(&catalog::all_names()))
}

/// The runs for the parts asked for, in the suite's order: the workloads as a native run then
/// an armhv run for each of the `clocks` the workloads asked for need (icount first); the
/// distributor's `cases`, `rounds` runs each.
pub fn plan_with(parts: &[Part], rounds: u32, cases: &[u32], clocks: &[Mode]) -> Vec<Step> {
    let step = |kind, variant: &str, features: Vec<&'static str>, mode| Step {
        kind,
        variant: variant.to_owned(),
        features,
        mode,
        round: 0,
        gic: GICV3,
    };
    let mut steps = Vec::new();
    for part in Part::ALL.iter().filter(|p| parts.contains(p)) {
        match part {
            // The same build and VMs on a GICv2 host, for the comparison; its figures stay out
            // of the baseline (`Results::medians`).
            Part::Micro => {
                let v3 = step(Kind::Micro, DEFAULT_VARIANT, vec![], Mode::Icount);
                let v2 = Step { gic: GICV2, ..v3.clone() };
                // Table 3's "Trap": the probe build, on both GICs, after the figures it would
                // disturb.
                let probe = step(Kind::Micro, TRAP_PROBE, vec![TRAP_PROBE], Mode::Icount);
                let probe_v2 = Step { gic: GICV2, ..probe.clone() };
                steps.extend([v3, v2, probe, probe_v2]);
            }
            Part::Breakdown => steps.push(step(
                Kind::Breakdown,
                BREAKDOWN_FEATURE,
                vec![BREAKDOWN_FEATURE],
                Mode::Icount,
            )),
            Part::Ablations => {
                for a in ABLATIONS {
                    steps.push(step(Kind::Ablation, a.feature, vec![a.feature], Mode::Icount));
                }
            }
            Part::Wall => steps.push(step(Kind::Wall, DEFAULT_VARIANT, vec![], Mode::WallClock)),
            Part::Workloads => {
                // The host's load does not reach the figures (instructions), and the
                // repetitions give the spread. But a guest's boot can shift the cost of its disk
                // reads as a whole, by up to 7 % (native's virtio-blk read: 169,000 instructions
                // per MiB in one boot, 177,000-182,000 in the next, its repetitions within 3 %
                // each time, with the same requests and interrupts): the cost runs boot `rounds`
                // times, native and armhv in turn, and the median takes every boot's.
                for &mode in clocks {
                    let boots = if mode == Mode::Cost { rounds.max(1) } else { 1 };
                    for round in 1..=boots {
                        for variant in [NATIVE, ARMHV] {
                            let s = step(Kind::Workload, variant, vec![], mode);
                            steps.push(Step { round, ..s });
                        }
                    }
                }
            }
            // Native first, as the workloads: the guest alone, then the same under armhv.
            Part::TableV => {
                for variant in [NATIVE, ARMHV] {
                    steps.push(step(Kind::TableV, variant, vec![], Mode::Icount));
                }
            }
            // Two traced runs per benchmark, all in one step.
            Part::Paths => steps.push(step(Kind::Paths, DEFAULT_VARIANT, vec![], Mode::Icount)),
            // Round after round of every case, so that the repetitions of a case spread over
            // the whole run. Under icount: each CPU's time is its own work (bench/README.md).
            Part::Distributor => {
                for round in 1..=rounds.max(1) {
                    for &case in cases {
                        let variant = catalog::variant(case);
                        let s = step(Kind::Distributor, &variant, vec![], Mode::Icount);
                        steps.push(Step { round, ..s });
                    }
                }
            }
        }
    }
    steps
}
