//! What the suite measures: the microbenchmarks in the ISCA-2016 study's Table II order with
//! their targets, the design ablations, the application workloads and the cases of the
//! interrupt-distributor experiment (Table 1). Adding one is one entry here; what each one does
//! is in `bench/README.md`.

use crate::numbers::int;
use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

/// A goal a benchmark's icount median must meet.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Median at most this many instructions.
    AtMost(f64),
    /// Median below this many instructions.
    Below(f64),
    /// No exit to armhv at all: `exits-per-op` must print as 0.00.
    NoExits,
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Self::AtMost(v) => format!("≤ {}", int(*v)),
            Self::Below(v) => format!("< {}", int(*v)),
            Self::NoExits => "0 exits".to_owned(),
        }
    }

    /// Whether the figures meet the target; `None` when they cannot tell (no exit count).
    pub fn met(&self, median: f64, exits_per_op: Option<f64>) -> Option<bool> {
        match self {
            Self::AtMost(v) => Some(median <= *v),
            Self::Below(v) => Some(median < *v),
            // Printed with two decimals: 0.00 means no exit in any operation measured.
            Self::NoExits => exits_per_op.map(|e| e < 0.005),
        }
    }
}

pub struct Bench {
    /// vmbench's name for it.
    pub name: &'static str,
    /// The study's row name (or ours, for the extra rows).
    pub row: &'static str,
    /// Whether the study has this row (Table II) or it is one of ours.
    pub in_study: bool,
    pub target: Option<Target>,
    /// ISCA-2016 Table II, ARM, silicon cycles: (KVM, Xen).
    pub study_cycles: Option<(u32, u32)>,
}

/// The targets are issue 20's ("Performance, round two"), in instructions under icount.
pub const BENCHES: &[Bench] = &[
    Bench {
        name: "hypercall",
        row: "Hypercall",
        in_study: true,
        target: Some(Target::AtMost(80.0)),
        study_cycles: Some((6_500, 376)),
    },
    Bench {
        name: "gic-trap",
        row: "Interrupt Controller Trap",
        in_study: true,
        target: Some(Target::AtMost(180.0)),
        study_cycles: Some((7_370, 1_356)),
    },
    Bench {
        name: "ipi",
        row: "Virtual IPI",
        in_study: true,
        target: Some(Target::AtMost(1_000.0)),
        study_cycles: Some((11_557, 5_978)),
    },
    Bench {
        name: "eoi",
        row: "Virtual IRQ Completion",
        in_study: true,
        target: Some(Target::NoExits),
        study_cycles: Some((71, 71)),
    },
    Bench {
        name: "vmswitch",
        row: "VM Switch",
        in_study: true,
        target: Some(Target::AtMost(1_000.0)),
        study_cycles: Some((10_387, 8_799)),
    },
    Bench {
        name: "io-out",
        row: "I/O Latency Out",
        in_study: true,
        target: Some(Target::AtMost(150.0)),
        study_cycles: Some((6_024, 16_491)),
    },
    Bench {
        name: "io-in",
        row: "I/O Latency In",
        in_study: true,
        target: Some(Target::AtMost(600.0)),
        study_cycles: Some((13_872, 15_650)),
    },
    Bench {
        name: "pl011-write",
        row: "Emulated Device Write (PL011 register)",
        in_study: false,
        // A trap to a simple device model should cost about what a hypercall costs.
        target: Some(Target::AtMost(250.0)),
        study_cycles: None,
    },
    Bench {
        name: "hypercall-psci-version",
        row: "Hypercall: PSCI_VERSION",
        in_study: false,
        target: Some(Target::AtMost(120.0)),
        study_cycles: None,
    },
    Bench {
        // Under Xen only: the hypervisor's own null call, which the study's Xen column timed.
        name: "hypercall-xen-version",
        row: "Hypercall: Xen xen_version",
        in_study: false,
        target: None,
        study_cycles: None,
    },
    Bench {
        name: "io-roundtrip",
        row: "I/O round trip",
        in_study: false,
        target: None,
        study_cycles: None,
    },
];

pub fn bench(name: &str) -> Option<&'static Bench> {
    BENCHES.iter().find(|b| b.name == name)
}

/// The row label of a benchmark name (its own name if the catalogue does not know it).
pub fn row(name: &str) -> &str {
    bench(name).map_or(name, |b| b.row)
}

/// The interrupt controllers the micro part runs on, QEMU's `gic-version`: GICv3, whose run
/// is the suite's figures and its baseline, and GICv2 beside it, where the guest's CPU
/// interface is MMIO (the hardware's GICV mapped in) instead of system registers.
pub const GICV3: u8 = 3;
pub const GICV2: u8 = 2;
/// GICD_ITARGETSR<n> has a bit per CPU: a GICv2 addresses at most 8.
pub const GICV2_MAX_CPUS: u32 = 8;

/// What armhv has for a row of the KVM/ARM paper's Table 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// A vmbench microbenchmark, by name.
    Bench(&'static str),
    /// A vmbench microbenchmark of the probe build ([`TRAP_PROBE`]), by name.
    Probe(&'static str),
    /// Nothing measures it; the cell says so.
    NotMeasured,
    /// The row has no counterpart in armhv; the cell's text.
    NotApplicable(&'static str),
}

/// A row of Table 3 ("Micro-architectural cycle counts", Dall and Nieh, "KVM/ARM: The Design
/// and Implementation of the Linux ARM Hypervisor", ASPLOS 2014) and armhv's nearest figure.
pub struct Table3Row {
    pub row: &'static str,
    pub measure: Measure,
    /// What armhv's figure spans, against what the paper's did.
    pub how: &'static str,
}

pub const TABLE3: &[Table3Row] = &[
    Table3Row {
        row: "Hypercall",
        measure: Measure::Bench("hypercall"),
        how: "Hypercall: an `hvc` round trip to armhv's no-op call, the whole exit and entry. \
              armhv answers at EL2; KVM/ARM's two world switches went to the host kernel",
    },
    Table3Row {
        row: "Trap",
        measure: Measure::Probe("trap"),
        how: "The paper's bare switch into Hyp mode and back, no state saved. armhv's exits all \
              save the guest's registers, so this is an armhv built with `trap-probe`, whose EL2 \
              vector returns from `hvc #0x7ea` at once: the `hvc`, the vector's check and the \
              `eret` (its own run beside the micro runs)",
    },
    Table3Row {
        row: "I/O Kernel",
        measure: Measure::Bench("gic-trap"),
        how: "Interrupt Controller Trap: an MMIO load of the virtual distributor's GICD_TYPER, \
              a Stage-2 fault emulated by armhv at EL2, and the return; the in-kernel device of \
              KVM/ARM's own test was the vGIC distributor too (`mmio_read_vgic`). The I/O \
              latencies time a virtio notification and an interrupt, not a load",
    },
    Table3Row {
        row: "I/O User",
        measure: Measure::NotApplicable("n/a (armhv emulates devices at EL2; no user-space hop)"),
        how: "The paper adds the trip to QEMU in the host's user space; armhv has no host \
              kernel or user space to go to",
    },
    Table3Row {
        row: "IPI",
        measure: Measure::Bench("ipi"),
        how: "Virtual IPI: from the sender's SGI (GICv2: a GICD_SGIR write, trapped; GICv3: \
              ICC_SGI1R_EL1) to the first instruction of the target vCPU's handler, each vCPU \
              on a CPU of its own; without the target's completion, as in the paper",
    },
    Table3Row {
        row: "EOI",
        measure: Measure::Bench("eoi"),
        how: "Virtual IRQ Completion: acknowledge and completion, as in the paper (GICv2: a \
              GICC_IAR load and a GICC_EOIR store to the GICV that armhv maps at the guest's \
              GICC; GICv3: ICC_IAR1_EL1 and ICC_EOIR1_EL1)",
    },
];

/// A design choice compared on the same suite: armhv built with one cargo feature.
pub struct Ablation {
    /// The variant's name in results and the baseline; also the hypervisor cargo feature.
    pub feature: &'static str,
    pub what: &'static str,
}

pub const ABLATIONS: &[Ablation] = &[
    Ablation {
        feature: "eager-fp",
        what: "FP/SIMD registers switched eagerly on every VM switch, instead of lazily on the \
               first FP/SIMD use (CPTR_EL2.TFP)",
    },
    Ablation {
        feature: "all-lrs",
        what: "every list register written on every entry and read back on every exit, \
               instead of only those in use (and none at all when the vCPU's virtual \
               interrupts did not change)",
    },
    Ablation {
        feature: "no-spectre-bhb",
        what: "no Spectre-BHB mitigation on guest exits (on cortex-a76, the loop of 24 taken \
               branches and its barriers before armhv's first indirect branch); guests are \
               then told WORKAROUND_3 is not supported",
    },
];

/// The variant name of the default build.
pub const DEFAULT_VARIANT: &str = "default";
/// The micro part's probe build: armhv with the `trap-probe` feature, vmbench with `trap`
/// named, for Table 3's "Trap" row. Its other figures carry the probe's check on every exit
/// and stay out of the tables and the baseline.
pub const TRAP_PROBE: &str = "trap-probe";

/// The hypervisor feature that prints the world-switch breakdown.
pub const BREAKDOWN_FEATURE: &str = "ws-breakdown";

/// World-switch state classes as armhv's `ws-breakdown` names them, with the study's Table III
/// row names.
pub const STATE_CLASSES: &[(&str, &str)] = &[
    ("gp", "GP Regs"),
    ("fpsimd", "FP/SIMD Regs"),
    ("el1", "EL1 System Regs"),
    ("vgic", "VGIC Regs"),
    ("timer", "Timer Regs"),
    ("el2", "EL2 Config Regs"),
    ("stage2", "EL2 Virtual Memory Regs (Stage-2)"),
    ("other", "Other"),
];

pub fn class_label(class: &str) -> &str {
    STATE_CLASSES.iter().find(|(c, _)| *c == class).map_or(class, |(_, l)| l)
}

pub fn path_label(path: &str) -> &str {
    match path {
        "hypercall" => "Hypercall",
        "vm-switch" => "VM Switch",
        other => other,
    }
}

// --- the application workloads ---

/// The VM that runs the workloads, and the one that serves the network tests.
pub const CLIENT_VM: &str = "linux0";
pub const SERVER_VM: &str = "linux1";
/// The variants of a workload run.
pub const NATIVE: &str = "native";
pub const ARMHV: &str = "armhv";

/// Where a workload's other end is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Nothing outside the guest: CPU, memory, its disks.
    Local,
    /// A server in another guest: natively on loopback within the one guest, under armhv in VM
    /// [`SERVER_VM`] over armhv's switch (not like for like).
    Peer,
    /// A client on the host, through QEMU's user network and a `hostfwd`: the same on both
    /// sides (like for like).
    Host,
}

/// What armhv must reach against native (issue 15's targets for the real-I/O paths).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// armhv's throughput at least this share of native's.
    ThroughputAtLeast(f64),
    /// armhv's latency at most this multiple of native's.
    LatencyAtMost(f64),
}

impl Goal {
    /// armhv's figure against native's: throughput as a share (0.93 = 93 % of native), latency
    /// as a multiple (1.10 = 1.1 times native). `higher_is_better`: the figure's direction; a
    /// throughput goal on a cost (instructions per MiB) takes its inverse, the throughput at a
    /// fixed instruction rate, and a latency goal a cost as it is (instructions per round trip).
    pub fn ratio(&self, higher_is_better: bool, native: f64, armhv: f64) -> Option<f64> {
        let (num, den) = match (self, higher_is_better) {
            (Self::ThroughputAtLeast(_), false) | (Self::LatencyAtMost(_), true) => (native, armhv),
            _ => (armhv, native),
        };
        (den > 0.0 && num.is_finite()).then(|| num / den)
    }

    pub fn met(&self, ratio: f64) -> bool {
        match *self {
            Self::ThroughputAtLeast(share) => ratio >= share,
            Self::LatencyAtMost(times) => ratio <= times,
        }
    }

    /// `≥ 90 % of native`, `≤ 1.20 × native`.
    pub fn describe(&self) -> String {
        match *self {
            Self::ThroughputAtLeast(share) => format!("≥ {:.0} % of native", share * 100.0),
            Self::LatencyAtMost(times) => format!("≤ {times:.2} × native"),
        }
    }

    /// A ratio as [`Goal::ratio`] gives it, in the goal's terms: `93 %`, `1.10 ×`.
    pub fn show(&self, ratio: f64) -> String {
        match self {
            Self::ThroughputAtLeast(_) => format!("{:.0} %", ratio * 100.0),
            Self::LatencyAtMost(_) => format!("{ratio:.2} ×"),
        }
    }

    /// The goal as the most overhead [`crate::workloads::normalized`] may show (the charts'
    /// marker): native / armhv for throughput, armhv / native for latency.
    pub fn max_normalized(&self) -> f64 {
        match *self {
            Self::ThroughputAtLeast(share) => 1.0 / share,
            Self::LatencyAtMost(times) => times,
        }
    }
}

pub struct Workload {
    /// armhv-bench's name for it.
    pub name: &'static str,
    /// The report's row name.
    pub row: &'static str,
    /// The key of its figure in the result line.
    pub metric: &'static str,
    /// The figure's unit, for the report.
    pub unit: &'static str,
    /// Throughput (more is better) rather than time or latency (less is better).
    pub higher_is_better: bool,
    pub reach: Reach,
    /// A target against native, for the real-I/O workloads (issue 15).
    pub goal: Option<Goal>,
    /// How it is measured: [`Mode::Icount`] where everything it times runs as instructions of
    /// the emulated machine (then the guest's clock counts instructions, immune to the host's
    /// load); [`Mode::Cost`] where part of it runs outside them (QEMU's own block layer, a
    /// client on the host), whose time no clock of the machine can give reproducibly: then
    /// the figure is the machine's instructions per unit of work, counted by QEMU.
    pub clock: Mode,
    /// For a cost the guest marks the windows of (`armhv-bench --marks`, the disks): the figure
    /// its own result line gives, on its clock, which the harness keeps beside the window's
    /// instructions per MiB ([`crate::workloads::apply_windows`]).
    pub marked: Option<&'static str>,
    /// Repetitions per run as a multiple of `--reps`: more for a short job whose schedule
    /// varies from one repetition to the next even under icount (hackbench's processes: 12-26 %
    /// over 20 repetitions, whose medians differed by 4.1 % between two runs, so 40), and
    /// for iperf3 between two VMs, one repetition of which in a few runs at half the others'
    /// rate (683 against 1,441-1,449 Mbit/s), so that the median settles.
    pub reps_scale: u32,
}

impl Workload {
    /// Whether it talks over a network.
    pub fn network(&self) -> bool {
        self.reach != Reach::Local
    }
}

/// The guest ports of the uplink workloads (`armhv-bench`'s `CTL_PORT`, `SINK_PORT` and
/// `ECHO_PORT`), which QEMU forwards from free ports on the host's 127.0.0.1.
pub const UPLINK_PORTS: [u16; 3] = [5300, 5301, 5302];

/// Issue 15's targets: the machine disk at least 90 % of native's throughput, a TCP stream
/// at least 80 %, request/response latency at most 1.2 times native's.
pub const DISK_GOAL: Goal = Goal::ThroughputAtLeast(0.9);
pub const STREAM_GOAL: Goal = Goal::ThroughputAtLeast(0.8);
pub const RR_GOAL: Goal = Goal::LatencyAtMost(1.2);

/// In the order armhv-bench runs them (the local ones first, while the server VM boots).
pub const WORKLOADS: &[Workload] = &[
    Workload {
        name: "hackbench",
        row: "Hackbench",
        metric: "seconds",
        unit: "s",
        higher_is_better: false,
        reach: Reach::Local,
        goal: None,
        clock: Mode::Icount,
        marked: None,
        reps_scale: 20,
    },
    Workload {
        name: "cpu-job",
        row: "CPU-bound job (xz)",
        metric: "seconds",
        unit: "s",
        higher_is_better: false,
        reach: Reach::Local,
        goal: None,
        clock: Mode::Icount,
        marked: None,
        reps_scale: 2,
    },
    Workload {
        name: "blk-write",
        row: "Block write (virtio-blk)",
        metric: "instr_mib",
        unit: "instructions per MiB",
        higher_is_better: false,
        reach: Reach::Local,
        goal: None,
        clock: Mode::Cost,
        marked: Some("mib_s"),
        reps_scale: 1,
    },
    Workload {
        name: "blk-read",
        row: "Block read (virtio-blk)",
        metric: "instr_mib",
        unit: "instructions per MiB",
        higher_is_better: false,
        reach: Reach::Local,
        goal: None,
        clock: Mode::Cost,
        marked: Some("mib_s"),
        reps_scale: 1,
    },
    Workload {
        name: "mdisk-write",
        row: "Block write (machine disk)",
        metric: "instr_mib",
        unit: "instructions per MiB",
        higher_is_better: false,
        reach: Reach::Local,
        goal: Some(DISK_GOAL),
        clock: Mode::Cost,
        marked: Some("mib_s"),
        reps_scale: 1,
    },
    Workload {
        name: "mdisk-read",
        row: "Block read (machine disk)",
        metric: "instr_mib",
        unit: "instructions per MiB",
        higher_is_better: false,
        reach: Reach::Local,
        goal: Some(DISK_GOAL),
        clock: Mode::Cost,
        marked: Some("mib_s"),
        reps_scale: 1,
    },
    Workload {
        name: "iperf3",
        row: "TCP stream (iperf3)",
        metric: "mbit_s",
        unit: "Mbit/s",
        higher_is_better: true,
        reach: Reach::Peer,
        goal: None,
        clock: Mode::Icount,
        marked: None,
        reps_scale: 3,
    },
    Workload {
        name: "tcp-rr",
        row: "TCP request/response (sockperf)",
        metric: "usec",
        unit: "µs",
        higher_is_better: false,
        reach: Reach::Peer,
        goal: None,
        clock: Mode::Icount,
        marked: None,
        reps_scale: 1,
    },
    Workload {
        name: "uplink-stream",
        row: "TCP stream, host to VM (uplink)",
        metric: "instr_mib",
        unit: "instructions per MiB",
        higher_is_better: false,
        reach: Reach::Host,
        goal: Some(STREAM_GOAL),
        clock: Mode::Cost,
        marked: None,
        reps_scale: 1,
    },
    Workload {
        name: "uplink-rr",
        row: "TCP request/response, host to VM (uplink)",
        metric: "instr_rt",
        unit: "instructions per round trip",
        higher_is_better: false,
        reach: Reach::Host,
        goal: Some(RR_GOAL),
        clock: Mode::Cost,
        marked: None,
        reps_scale: 1,
    },
];

pub fn workload(name: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.name == name)
}

/// The clocks `names` need, icount first: one set of runs per clock.
pub fn clocks(names: &[String]) -> Vec<Mode> {
    [Mode::Icount, Mode::Cost, Mode::WallClock]
        .into_iter()
        .filter(|m| names.iter().any(|n| workload(n).is_some_and(|w| w.clock == *m)))
        .collect()
}

/// Those of `names` timed on `clock`, as armhv-bench's words with `reps` repetitions each
/// (`NAME:N` where a workload takes more, [`Workload::reps_scale`]).
pub fn on_clock(names: &[String], clock: Mode, reps: u32) -> Vec<String> {
    names
        .iter()
        .filter_map(|n| workload(n).filter(|w| w.clock == clock))
        .map(|w| match w.reps_scale {
            1 => w.name.to_owned(),
            k => format!("{}:{}", w.name, reps * k),
        })
        .collect()
}

/// The guest's network tests' duration under icount, in virtual seconds: one is 10^9
/// instructions of all CPUs together, which takes QEMU's one thread several host seconds, and
/// the figures are deterministic enough that 2 s (after iperf3's omitted first) suffice.
pub const ICOUNT_NET_SECONDS: u32 = 2;

pub fn all_names() -> Vec<String> {
    WORKLOADS.iter().map(|w| w.name.to_owned()).collect()
}

// --- the interrupt-distributor experiment (Table 1) ---

/// The VMs of the template.
pub const RT_VM: &str = "rt";
pub const GP_VM: &str = "gp";
pub const PEER_VM: &str = "peer";
/// The audio stream (the real-time VM's virtual timer) and the network stream.
pub const AUDIO_SOURCE: &str = "rt/timer";
pub const NET_SOURCE: &str = "gp/net0";
/// The CPU the audio is delivered on (`rt`'s vCPU 0).
pub const AUDIO_CPU: usize = 0;

/// What the distributor does in a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// `[irqdist] enabled = false`: profiling and tracing only.
    Off,
    /// `spread = "one"`: to the VM's vCPU on the least-utilized other CPU.
    One,
    /// `spread = "all"`: rotated over the VM's vCPUs on every other CPU.
    All,
}

impl Spread {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::One => "one other core",
            Self::All => "all other cores",
        }
    }
}

/// One row of the study's Table 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Case {
    pub number: u32,
    /// The study's name for it.
    pub name: &'static str,
    pub audio: bool,
    /// The CPU-heavy job in the real-time VM (the study's H.264 decoder).
    pub hog: bool,
    pub spread: Spread,
    /// The study's figures (ARM11 MPCore, 4 x 250 MHz, Linux 2.6.21): bandwidth and where
    /// the network interrupts went.
    pub study_mbit: f64,
    pub study_network: &'static str,
}

pub const CASES: [Case; 7] = [
    Case {
        number: 1,
        name: "max bandwidth, no audio",
        audio: false,
        hog: false,
        spread: Spread::Off,
        study_mbit: 15.7,
        study_network: "core0",
    },
    Case {
        number: 2,
        name: "only core0",
        audio: true,
        hog: false,
        spread: Spread::Off,
        study_mbit: 2.30,
        study_network: "core0",
    },
    Case {
        number: 3,
        name: "distribution #1",
        audio: true,
        hog: false,
        spread: Spread::One,
        study_mbit: 13.4,
        study_network: "core1",
    },
    Case {
        number: 4,
        name: "distribution #2",
        audio: true,
        hog: false,
        spread: Spread::All,
        study_mbit: 13.0,
        study_network: "core1-3",
    },
    Case {
        number: 5,
        name: "only core0 with H.264",
        audio: true,
        hog: true,
        spread: Spread::Off,
        study_mbit: 2.21,
        study_network: "core0",
    },
    Case {
        number: 6,
        name: "distribution #3 with H.264",
        audio: true,
        hog: true,
        spread: Spread::One,
        study_mbit: 11.6,
        study_network: "core1",
    },
    Case {
        number: 7,
        name: "distribution #4 with H.264",
        audio: true,
        hog: true,
        spread: Spread::All,
        study_mbit: 11.5,
        study_network: "core1-3",
    },
];

pub fn case(number: u32) -> Option<&'static Case> {
    CASES.iter().find(|c| c.number == number)
}

/// The step variant naming a case: `case3`.
pub fn variant(number: u32) -> String {
    format!("case{number}")
}

pub fn case_of_variant(variant: &str) -> Option<&'static Case> {
    case(variant.strip_prefix("case")?.parse().ok()?)
}

/// `--cases 1,2,5`
pub fn parse_cases(list: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for w in list.split(',') {
        let n = w
            .trim()
            .parse()
            .ok()
            .filter(|n| case(*n).is_some())
            .ok_or_else(|| anyhow!("--cases: {w:?} is not a case of Table 1 (1 to 7)"))?;
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// How QEMU was run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// `-icount shift=0,sleep=off`: figures are instructions, deterministic.
    Icount,
    /// No icount: figures are nanoseconds of emulated time paced by the host, noisy.
    WallClock,
    /// `-icount shift=0,sleep=on` with QEMU's count of the whole machine's instructions read
    /// over QMP around each measured window: figures are instructions per unit of work. Idle
    /// time is on the host's clock and costs no instructions, so waiting for QEMU's block
    /// layer or a host peer is free, as a device's DMA is free to the CPU.
    Cost,
}

impl Mode {
    pub fn unit_label(self) -> &'static str {
        match self {
            Self::Icount | Self::Cost => "instructions",
            Self::WallClock => "ns",
        }
    }

    /// For the workloads' tables: how the guest's clock ran.
    pub fn short_label(self) -> &'static str {
        match self {
            Self::Icount => "icount",
            Self::WallClock => "wall",
            Self::Cost => "cost",
        }
    }
}

/// The `paths` part's rows, as (name, vmbench words, with the partner VM).
pub const PATH_ROWS: &[(&str, &str, bool)] = &[
    ("hypercall", "hypercall", false),
    ("gic-trap", "gic-trap", false),
    ("pl011-write", "pl011-write", false),
    ("ipi", "ipi", false),
    ("vmswitch", "vmswitch", true),
    ("io-out/io-in", "io-out io-in", false),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(Target::AtMost(150.0).met(150.0, None), Some(true));
        assert_eq!(Target::AtMost(150.0).met(151.0, None), Some(false));
        assert_eq!(Target::Below(1500.0).met(1500.0, None), Some(false));
        assert_eq!(Target::NoExits.met(9.0, Some(0.0)), Some(true));
        assert_eq!(Target::NoExits.met(9.0, Some(0.01)), Some(false));
        assert_eq!(Target::NoExits.met(9.0, None), None);
    }

    #[test]
    fn catalogue_is_consistent() {
        for name in [
            "hypercall",
            "hypercall-psci-version",
            "gic-trap",
            "ipi",
            "eoi",
            "io-out",
            "io-in",
            "io-roundtrip",
            "vmswitch",
        ] {
            assert!(bench(name).is_some(), "{name}");
        }
        assert_eq!(BENCHES.iter().filter(|b| b.in_study).count(), 7);
        assert!(ABLATIONS.iter().all(|a| a.feature != DEFAULT_VARIANT));
    }

    #[test]
    fn cases_and_options() {
        assert_eq!(CASES.len(), 7);
        assert!(CASES.iter().enumerate().all(|(i, c)| c.number == i as u32 + 1));
        assert_eq!(parse_cases("3,1,3").unwrap(), [1, 3]);
        assert!(parse_cases("8").is_err());
        assert!(parse_cases("x").is_err());
        assert_eq!(case_of_variant(&variant(5)).unwrap().number, 5);
        assert!(case_of_variant("case9").is_none());
    }
}
