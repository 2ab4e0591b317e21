//! The microbenchmarks, in the ISCA-2016 study's Table II order, with their targets, and the
//! design ablations. Adding a benchmark or an ablation is one entry here.

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
            Self::AtMost(v) => format!("≤ {}", crate::report::int(*v)),
            Self::Below(v) => format!("< {}", crate::report::int(*v)),
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
    /// What is measured, from where to where.
    pub what: &'static str,
}

pub const BENCHES: &[Bench] = &[
    Bench {
        name: "hypercall",
        row: "Hypercall",
        in_study: true,
        target: Some(Target::AtMost(150.0)),
        study_cycles: Some((6_500, 376)),
        what: "an `hvc #0` round trip with armhv's no-op call (ARMHV_NOP): the `hvc`, armhv's \
               trap entry, dispatch and return, and the `eret` back",
    },
    Bench {
        name: "gic-trap",
        row: "Interrupt Controller Trap",
        in_study: true,
        target: Some(Target::AtMost(300.0)),
        study_cycles: Some((7_370, 1_356)),
        what: "a 32-bit read of the emulated GIC distributor's GICD_TYPER: the Stage-2 data \
               abort, its decoding, the vGIC register emulation and the return",
    },
    Bench {
        name: "ipi",
        row: "Virtual IPI",
        in_study: true,
        target: Some(Target::Below(1_500.0)),
        study_cycles: Some((11_557, 5_978)),
        what: "CPU 0 stamps and writes ICC_SGI1R_EL1 for CPU 1, which is running guest code \
               (spinning with IRQs unmasked); CPU 1's interrupt handler stamps first thing. \
               Timed with the virtual counter, shared by both CPUs",
    },
    Bench {
        name: "eoi",
        row: "Virtual IRQ Completion",
        in_study: true,
        target: Some(Target::NoExits),
        study_cycles: Some((71, 71)),
        what: "with a self-SGI pending and IRQs masked, a read of ICC_IAR1_EL1 and a write of \
               ICC_EOIR1_EL1; with GICv3 list registers neither traps, so this is the guest's \
               own instructions, and armhv's exit counter must show no exit",
    },
    Bench {
        name: "vmswitch",
        row: "VM Switch",
        in_study: true,
        target: Some(Target::Below(1_500.0)),
        study_cycles: Some((10_387, 8_799)),
        what: "an ARMHV_YIELD round trip to VM `partner` on the same physical CPU, which \
               yields straight back, halved (two switches per round trip): armhv's scheduler \
               and the full world switch",
    },
    Bench {
        name: "io-out",
        row: "I/O Latency Out",
        in_study: true,
        target: Some(Target::AtMost(300.0)),
        study_cycles: Some((6_024, 16_491)),
        what: "from just before the guest's write to the virtio-rng QueueNotify register until \
               armhv's device model stamps the notification",
    },
    Bench {
        name: "io-in",
        row: "I/O Latency In",
        in_study: true,
        target: Some(Target::Below(1_500.0)),
        study_cycles: Some((13_872, 15_650)),
        what: "from armhv's device model stamping as it raises the virtio-rng interrupt until \
               the guest's interrupt handler stamps",
    },
    Bench {
        name: "hypercall-psci-version",
        row: "Hypercall: PSCI_VERSION",
        in_study: false,
        target: None,
        study_cycles: None,
        what: "an `hvc` PSCI_VERSION call, answered by armhv's PSCI emulation (a hypercall \
               that does a little work)",
    },
    Bench {
        name: "io-roundtrip",
        row: "I/O round trip",
        in_study: false,
        target: None,
        study_cycles: None,
        what: "a virtio-rng request end to end: from before the notify until the guest's \
               interrupt handler runs for its completion",
    },
];

pub fn bench(name: &str) -> Option<&'static Bench> {
    BENCHES.iter().find(|b| b.name == name)
}

/// The row label of a benchmark name (its own name if the catalogue does not know it).
pub fn row(name: &str) -> &str {
    bench(name).map_or(name, |b| b.row)
}

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
];

/// The variant name of the default build.
pub const DEFAULT_VARIANT: &str = "default";

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
}
