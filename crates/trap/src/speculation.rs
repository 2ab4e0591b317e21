//! Spectre-v2 (CVE-2017-5715) and Spectre-BHB (CVE-2022-23960): what a physical CPU needs on
//! a guest's exit, and what guests are told through `SMCCC_ARCH_FEATURES`.
//!
//! The decision follows Linux (`arch/arm64/kernel/proton-pack.c`) and KVM's answers to its
//! guests (`arch/arm64/kvm/hypercalls.c`), so a guest sees under armhv what it would see
//! under KVM on the same core. Inputs are this CPU's identity (MIDR_EL1), three ID register
//! fields and what the firmware answered to `SMCCC_ARCH_FEATURES`; nothing here touches the
//! hardware, so every CPU model is checked on the host.
//!
//! - **Spectre-v2**: unaffected if `ID_AA64PFR0_EL1.CSV2` is non-zero or the core is on the
//!   list of cores without the flaw (in-order Cortex-A53/A35/A55); otherwise mitigated only if
//!   the firmware implements `SMCCC_ARCH_WORKAROUND_1` (the branch-predictor invalidation on
//!   Cortex-A57/A72 needs EL3's CPUACTLR_EL1), which armhv then calls on every guest exit;
//!   otherwise vulnerable.
//! - **Spectre-BHB**: unaffected with `CSV2` >= 3; otherwise affected if the core has
//!   `CLRBHB`, is on a branch-loop list, or the firmware implements `WORKAROUND_3`. An affected
//!   core is mitigated, in this order, by the hardware (`ID_AA64MMFR1_EL1.ECBHB`: an exception
//!   clears the history), `CLRBHB` on exit, the branch loop on exit with the core's iteration
//!   count, or the firmware's `WORKAROUND_3` on exit. Nothing is done for it while Spectre-v2
//!   is open, as Linux does: a guest that can train armhv's branch targets directly needs no
//!   branch history.

use core::fmt;

use crate::smccc::{NOT_REQUIRED, NOT_SUPPORTED, SUCCESS, UNAFFECTED};

/// The registers the decision reads, as this CPU reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuIds {
    pub midr: u64,
    /// ID_AA64PFR0_EL1: CSV2 in bits `[59:56]`.
    pub pfr0: u64,
    /// ID_AA64MMFR1_EL1: ECBHB in bits `[63:60]`.
    pub mmfr1: u64,
    /// ID_AA64ISAR2_EL1: CLRBHB in bits `[31:28]`.
    pub isar2: u64,
}

impl CpuIds {
    pub const fn csv2(&self) -> u8 {
        ((self.pfr0 >> 56) & 0xf) as u8
    }

    pub const fn ecbhb(&self) -> bool {
        (self.mmfr1 >> 60) & 0xf != 0
    }

    pub const fn clrbhb(&self) -> bool {
        (self.isar2 >> 28) & 0xf != 0
    }

    /// Implementer and part number, MIDR_EL1 bits `[31:24]` and `[15:4]`: the core type,
    /// whatever its variant and revision.
    pub const fn model(&self) -> u32 {
        (self.midr as u32) & 0xff00_fff0
    }
}

/// The firmware's answer to `SMCCC_ARCH_FEATURES(WORKAROUND_n)` on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwAnswer {
    /// 0: the workaround is implemented and this CPU needs it.
    Mitigates,
    /// 1: this CPU does not need it.
    Unaffected,
    /// Anything else, or never asked (no SMCCC 1.1 firmware): nothing to call.
    Absent,
}

impl FwAnswer {
    /// From the value `SMCCC_ARCH_FEATURES` returned in `w0`.
    pub const fn from_w0(w0: i32) -> Self {
        match w0 {
            0 => Self::Mitigates,
            1 => Self::Unaffected,
            _ => Self::Absent,
        }
    }
}

/// What the firmware offers this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Firmware {
    pub wa1: FwAnswer,
    pub wa3: FwAnswer,
}

impl Firmware {
    /// No SMCCC 1.1 firmware, as on QEMU's own PSCI emulation: nothing can be asked.
    pub const NONE: Self = Self { wa1: FwAnswer::Absent, wa3: FwAnswer::Absent };
}

/// Mitigation state, ordered from best to worst: a system is as bad as its worst CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum State {
    Unaffected = 0,
    Mitigated = 1,
    Vulnerable = 2,
}

impl State {
    pub const fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Unaffected,
            1 => Self::Mitigated,
            _ => Self::Vulnerable,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V2 {
    /// `CSV2` says so.
    UnaffectedCsv2,
    /// A core without the flaw (in-order, or otherwise known safe).
    UnaffectedCore,
    /// The firmware says this CPU does not need its workaround.
    UnaffectedFirmware,
    /// The firmware's `WORKAROUND_1` on every guest exit.
    Firmware,
    Vulnerable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bhb {
    /// `CSV2` >= 3, or none of the signs of an affected core.
    Unaffected,
    /// `ECBHB`: taking the exception clears the history; nothing to do.
    Hardware,
    /// `CLRBHB` on every guest exit.
    Clrbhb,
    /// The branch loop on every guest exit, this many taken branches.
    Loop(u8),
    /// The firmware's `WORKAROUND_3` on every guest exit.
    Firmware,
    /// Affected, but Spectre-v2 is open on this CPU: mitigating the history alone buys nothing.
    NotWithoutV2,
    /// Affected, and switched off in this build (the `no-spectre-bhb` ablation).
    Off,
    /// Affected and nothing can mitigate it (only firmware could, and it offers nothing).
    Vulnerable,
}

/// Build-time choices that weaken the policy (benchmarks only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Leave Spectre-BHB unmitigated (the ablation that measures the loop's cost).
    pub bhb_off: bool,
}

/// What one CPU needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub v2: V2,
    pub bhb: Bhb,
}

/// The work a CPU does on each exit from a guest, before armhv's first indirect branch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitWork {
    /// Taken branches of the history-clearing loop (0: none).
    pub loop_k: u8,
    /// Execute `CLRBHB`.
    pub clrbhb: bool,
    /// An `SMC` to this firmware function (`WORKAROUND_1` or `_3`), if any.
    pub firmware_call: Option<u32>,
}

impl ExitWork {
    /// The per-CPU word the exception vectors read (vectors.S): loop count in bits `[7:0]`,
    /// `CLRBHB` in bit 8, the firmware function ID in bits `[63:32]`. Zero: nothing to do.
    pub const fn encode(&self) -> u64 {
        let fid = match self.firmware_call {
            Some(f) => f as u64,
            None => 0,
        };
        (fid << 32) | ((self.clrbhb as u64) << 8) | self.loop_k as u64
    }
}

const ARM: u32 = 0x41;
const FUJITSU: u32 = 0x46;

const fn model(implementer: u32, part: u32) -> u32 {
    (implementer << 24) | (part << 4)
}

pub const CORTEX_A35: u32 = model(ARM, 0xd04);
pub const CORTEX_A53: u32 = model(ARM, 0xd03);
pub const CORTEX_A55: u32 = model(ARM, 0xd05);
pub const CORTEX_A57: u32 = model(ARM, 0xd07);
pub const CORTEX_A72: u32 = model(ARM, 0xd08);
pub const CORTEX_A73: u32 = model(ARM, 0xd09);
pub const CORTEX_A75: u32 = model(ARM, 0xd0a);
pub const CORTEX_A76: u32 = model(ARM, 0xd0b);
pub const NEOVERSE_N1: u32 = model(ARM, 0xd0c);
pub const CORTEX_A77: u32 = model(ARM, 0xd0d);
pub const NEOVERSE_V1: u32 = model(ARM, 0xd40);
pub const CORTEX_A78: u32 = model(ARM, 0xd41);
pub const CORTEX_A78AE: u32 = model(ARM, 0xd42);
pub const CORTEX_X1: u32 = model(ARM, 0xd44);
pub const CORTEX_A710: u32 = model(ARM, 0xd47);
pub const CORTEX_X2: u32 = model(ARM, 0xd48);
pub const NEOVERSE_N2: u32 = model(ARM, 0xd49);
pub const CORTEX_A78C: u32 = model(ARM, 0xd4b);
pub const A64FX: u32 = model(FUJITSU, 0x001);

/// Cores without Spectre-v2 that do not say so in `CSV2` (Linux's safe list, Arm's cores).
const V2_SAFE: [u32; 3] = [CORTEX_A35, CORTEX_A53, CORTEX_A55];

/// Taken branches that overwrite a core's whole branch history (Arm's Spectre-BHB guidance,
/// as Linux uses it).
const BHB_LOOP: [(u32, u8); 16] = [
    (CORTEX_A78, 32),
    (CORTEX_A78AE, 32),
    (CORTEX_A78C, 32),
    (CORTEX_X1, 32),
    (CORTEX_A710, 32),
    (CORTEX_X2, 32),
    (NEOVERSE_N2, 32),
    (NEOVERSE_V1, 32),
    (CORTEX_A76, 24),
    (CORTEX_A77, 24),
    (NEOVERSE_N1, 24),
    (CORTEX_A57, 8),
    (CORTEX_A72, 8),
    // Ampere-1 (implementer 0xc0, part 0xac3).
    (0xc000_0ac0, 11),
    (0, 0),
    (0, 0),
];

/// Cores whose branch history only the firmware can clear.
const BHB_FIRMWARE_ONLY: [u32; 2] = [CORTEX_A73, CORTEX_A75];

fn loop_k(model: u32) -> u8 {
    BHB_LOOP.iter().find(|&&(m, k)| m == model && k != 0).map_or(0, |&(_, k)| k)
}

impl Plan {
    pub fn decide(ids: CpuIds, fw: Firmware, options: Options) -> Self {
        let model = ids.model();
        let v2 = if ids.csv2() != 0 {
            V2::UnaffectedCsv2
        } else if V2_SAFE.contains(&model) {
            V2::UnaffectedCore
        } else {
            match fw.wa1 {
                FwAnswer::Mitigates => V2::Firmware,
                FwAnswer::Unaffected => V2::UnaffectedFirmware,
                FwAnswer::Absent => V2::Vulnerable,
            }
        };

        let k = loop_k(model);
        let fw_affected = BHB_FIRMWARE_ONLY.contains(&model) || fw.wa3 == FwAnswer::Mitigates;
        let affected = ids.csv2() < 3 && (ids.clrbhb() || k != 0 || fw_affected);
        let bhb = if !affected {
            Bhb::Unaffected
        } else if v2 == V2::Vulnerable {
            Bhb::NotWithoutV2
        } else if options.bhb_off {
            Bhb::Off
        } else if ids.ecbhb() {
            Bhb::Hardware
        } else if ids.clrbhb() {
            Bhb::Clrbhb
        } else if k != 0 {
            Bhb::Loop(k)
        } else if fw.wa3 == FwAnswer::Mitigates {
            Bhb::Firmware
        } else {
            Bhb::Vulnerable
        };
        Self { v2, bhb }
    }

    pub const fn v2_state(&self) -> State {
        match self.v2 {
            V2::UnaffectedCsv2 | V2::UnaffectedCore | V2::UnaffectedFirmware => State::Unaffected,
            V2::Firmware => State::Mitigated,
            V2::Vulnerable => State::Vulnerable,
        }
    }

    pub const fn bhb_state(&self) -> State {
        match self.bhb {
            Bhb::Unaffected => State::Unaffected,
            Bhb::Hardware | Bhb::Clrbhb | Bhb::Loop(_) | Bhb::Firmware => State::Mitigated,
            Bhb::NotWithoutV2 | Bhb::Off | Bhb::Vulnerable => State::Vulnerable,
        }
    }

    pub fn exit_work(&self) -> ExitWork {
        let mut work = ExitWork::default();
        match self.bhb {
            Bhb::Clrbhb => work.clrbhb = true,
            Bhb::Loop(k) => work.loop_k = k,
            _ => {}
        }
        // WORKAROUND_3 also does WORKAROUND_1's work (SMCCC), so one call covers both.
        work.firmware_call = if self.bhb == Bhb::Firmware {
            Some(crate::smccc::SMCCC_ARCH_WORKAROUND_3.0)
        } else if self.v2 == V2::Firmware {
            Some(crate::smccc::SMCCC_ARCH_WORKAROUND_1.0)
        } else {
            None
        };
        work
    }
}

/// What `SMCCC_ARCH_FEATURES(fid)` answers a guest about a workaround, given the worst state
/// over the CPUs its vCPUs may run on; `None` for other functions. KVM's values: `SUCCESS`
/// when armhv's exits already do the work (so the guest's call is cheap), `NOT_SUPPORTED`
/// when nothing does, and for an unaffected system `NOT_REQUIRED` (-2) for `WORKAROUND_1`
/// and 1 ("not affected", as SMCCC defines it) for `WORKAROUND_3`.
pub const fn features(fid: u32, v2: State, bhb: State) -> Option<i64> {
    let (state, unaffected) = match fid {
        0x8000_8000 => (v2, NOT_REQUIRED),
        0x8000_3fff => (bhb, UNAFFECTED),
        _ => return None,
    };
    Some(match state {
        State::Unaffected => unaffected,
        State::Mitigated => SUCCESS,
        State::Vulnerable => NOT_SUPPORTED,
    })
}

/// The core's name for the boot log.
pub fn core_name(midr: u64) -> Option<&'static str> {
    const NAMES: [(u32, &str); 20] = [
        (CORTEX_A35, "Cortex-A35"),
        (CORTEX_A53, "Cortex-A53"),
        (CORTEX_A55, "Cortex-A55"),
        (CORTEX_A57, "Cortex-A57"),
        (CORTEX_A72, "Cortex-A72"),
        (CORTEX_A73, "Cortex-A73"),
        (CORTEX_A75, "Cortex-A75"),
        (CORTEX_A76, "Cortex-A76"),
        (NEOVERSE_N1, "Neoverse-N1"),
        (CORTEX_A77, "Cortex-A77"),
        (NEOVERSE_V1, "Neoverse-V1"),
        (CORTEX_A78, "Cortex-A78"),
        (CORTEX_A78AE, "Cortex-A78AE"),
        (CORTEX_X1, "Cortex-X1"),
        (CORTEX_A710, "Cortex-A710"),
        (CORTEX_X2, "Cortex-X2"),
        (NEOVERSE_N2, "Neoverse-N2"),
        (CORTEX_A78C, "Cortex-A78C"),
        (A64FX, "A64FX"),
        // QEMU's `max` (implementer 0, part 0x051 'Q').
        (0x0000_0510, "QEMU max"),
    ];
    let model = (midr as u32) & 0xff00_fff0;
    NAMES.iter().find(|&&(m, _)| m == model).map(|&(_, n)| n)
}

impl fmt::Display for Plan {
    /// "Spectre-v2 unaffected (CSV2), Spectre-BHB: loop k=24 on exits".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Spectre-v2 ")?;
        f.write_str(match self.v2 {
            V2::UnaffectedCsv2 => "unaffected (CSV2)",
            V2::UnaffectedCore => "unaffected (core)",
            V2::UnaffectedFirmware => "unaffected (firmware says)",
            V2::Firmware => "mitigated: firmware WORKAROUND_1 on exits",
            V2::Vulnerable => "VULNERABLE: the firmware offers no WORKAROUND_1",
        })?;
        f.write_str(", Spectre-BHB: ")?;
        match self.bhb {
            Bhb::Unaffected => f.write_str("unaffected"),
            Bhb::Hardware => f.write_str("mitigated by the hardware (ECBHB)"),
            Bhb::Clrbhb => f.write_str("CLRBHB on exits"),
            Bhb::Loop(k) => write!(f, "loop k={k} on exits"),
            Bhb::Firmware => f.write_str("firmware WORKAROUND_3 on exits"),
            Bhb::NotWithoutV2 => f.write_str("not mitigated (pointless while Spectre-v2 is open)"),
            Bhb::Off => f.write_str("VULNERABLE: mitigation off in this build (no-spectre-bhb)"),
            Bhb::Vulnerable => f.write_str("VULNERABLE: the firmware offers no WORKAROUND_3"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    const ON: Options = Options { bhb_off: false };
    const WA1: Firmware = Firmware { wa1: FwAnswer::Mitigates, wa3: FwAnswer::Absent };
    const WA1_WA3: Firmware = Firmware { wa1: FwAnswer::Mitigates, wa3: FwAnswer::Mitigates };

    /// The ID registers of QEMU 7.2's CPU models with EL2, as armhv read them at EL2 on each
    /// (the boot log's "speculation:" debug line).
    fn qemu(name: &str) -> CpuIds {
        let (midr, pfr0, mmfr1, isar2) = match name {
            "cortex-a53" => (0x410f_d034, 0x0100_0222, 0, 0),
            "cortex-a57" => (0x411f_d070, 0x0100_0222, 0, 0),
            "cortex-a72" => (0x410f_d083, 0x0100_0222, 0, 0),
            "cortex-a76" => (0x414f_d0b1, 0x1100_0000_1111_0112, 0x1021_2122, 0),
            "neoverse-n1" => (0x414f_d0c1, 0x1100_0000_1111_0112, 0x1021_2122, 0),
            "a64fx" => (0x461f_0010, 0x0000_0001_0111_0111, 0x1121_2100, 0),
            "max" => (0x000f_0510, 0x1201_0011_2111_0222, 0x0110_1021_1122, 0),
            _ => unreachable!(),
        };
        CpuIds { midr, pfr0, mmfr1, isar2 }
    }

    fn guest(plan: Plan) -> (i64, i64) {
        let (v2, bhb) = (plan.v2_state(), plan.bhb_state());
        (features(0x8000_8000, v2, bhb).unwrap(), features(0x8000_3fff, v2, bhb).unwrap())
    }

    #[test]
    fn qemu_models_without_firmware() {
        // (model, plan, WORKAROUND_1 answer, WORKAROUND_3 answer, exit work)
        let cases = [
            ("cortex-a53", V2::UnaffectedCore, Bhb::Unaffected, (-2, 1), 0),
            ("cortex-a57", V2::Vulnerable, Bhb::NotWithoutV2, (-1, -1), 0),
            ("cortex-a72", V2::Vulnerable, Bhb::NotWithoutV2, (-1, -1), 0),
            ("cortex-a76", V2::UnaffectedCsv2, Bhb::Loop(24), (-2, 0), 24),
            ("neoverse-n1", V2::UnaffectedCsv2, Bhb::Loop(24), (-2, 0), 24),
            ("a64fx", V2::Vulnerable, Bhb::Unaffected, (-1, 1), 0),
            ("max", V2::UnaffectedCsv2, Bhb::Unaffected, (-2, 1), 0),
        ];
        for (name, v2, bhb, answers, work) in cases {
            let plan = Plan::decide(qemu(name), Firmware::NONE, ON);
            assert_eq!(plan, Plan { v2, bhb }, "{name}");
            assert_eq!(guest(plan), answers, "{name}");
            assert_eq!(plan.exit_work().encode(), work, "{name}");
        }
    }

    #[test]
    fn a57_and_a72_with_firmware() {
        for name in ["cortex-a57", "cortex-a72"] {
            // WORKAROUND_1 on exits, and the loop for the history.
            let plan = Plan::decide(qemu(name), WA1, ON);
            assert_eq!(plan, Plan { v2: V2::Firmware, bhb: Bhb::Loop(8) }, "{name}");
            assert_eq!(guest(plan), (0, 0));
            let work = plan.exit_work();
            assert_eq!(work.loop_k, 8);
            assert_eq!(work.firmware_call, Some(0x8000_8000));
            assert_eq!(work.encode(), 0x8000_8000_0000_0008);
            // Firmware with WORKAROUND_3 too: the loop still goes first (Linux's order).
            assert_eq!(Plan::decide(qemu(name), WA1_WA3, ON).bhb, Bhb::Loop(8));
            // Firmware that says this CPU needs nothing.
            let fw = Firmware { wa1: FwAnswer::Unaffected, wa3: FwAnswer::Absent };
            let plan = Plan::decide(qemu(name), fw, ON);
            assert_eq!(plan.v2, V2::UnaffectedFirmware);
            assert_eq!(plan.bhb, Bhb::Loop(8));
            assert_eq!(guest(plan), (-2, 0));
        }
    }

    #[test]
    fn firmware_only_cores() {
        let a75 = CpuIds { midr: 0x413f_d0a0, ..CpuIds::default() };
        assert_eq!(Plan::decide(a75, WA1_WA3, ON).bhb, Bhb::Firmware);
        let work = Plan::decide(a75, WA1_WA3, ON).exit_work();
        // One call: WORKAROUND_3 covers WORKAROUND_1's work.
        assert_eq!(work, ExitWork { loop_k: 0, clrbhb: false, firmware_call: Some(0x8000_3fff) });
        assert_eq!(Plan::decide(a75, WA1, ON).bhb, Bhb::Vulnerable);
        assert_eq!(guest(Plan::decide(a75, WA1, ON)), (0, -1));
        // An unlisted core whose firmware says it mitigates the history.
        let other = CpuIds { midr: 0x4100_0000, ..CpuIds::default() };
        assert_eq!(Plan::decide(other, WA1_WA3, ON).bhb, Bhb::Firmware);
        assert_eq!(Plan::decide(other, WA1, ON).bhb, Bhb::Unaffected);
    }

    #[test]
    fn id_register_fields() {
        let a76 = qemu("cortex-a76");
        // ECBHB: nothing to do on exits.
        let ecbhb = CpuIds { mmfr1: a76.mmfr1 | 1 << 60, ..a76 };
        assert_eq!(Plan::decide(ecbhb, Firmware::NONE, ON).bhb, Bhb::Hardware);
        assert_eq!(Plan::decide(ecbhb, Firmware::NONE, ON).exit_work(), ExitWork::default());
        assert_eq!(guest(Plan::decide(ecbhb, Firmware::NONE, ON)), (-2, 0));
        // CLRBHB beats the loop.
        let clrbhb = CpuIds { isar2: 1 << 28, ..a76 };
        assert_eq!(Plan::decide(clrbhb, Firmware::NONE, ON).bhb, Bhb::Clrbhb);
        assert_eq!(Plan::decide(clrbhb, Firmware::NONE, ON).exit_work().encode(), 0x100);
        // CSV2_3: unaffected by the history too.
        let csv2_3 = CpuIds { pfr0: 3 << 56, ..a76 };
        assert_eq!(Plan::decide(csv2_3, Firmware::NONE, ON).bhb, Bhb::Unaffected);
        // An unknown core with CLRBHB is affected, and CLRBHB fixes it.
        let new = CpuIds { midr: 0x4100_0000, pfr0: 2 << 56, isar2: 1 << 28, ..a76 };
        assert_eq!(Plan::decide(new, Firmware::NONE, ON).bhb, Bhb::Clrbhb);
    }

    #[test]
    fn ablation_turns_the_loop_off_and_tells_guests() {
        let plan = Plan::decide(qemu("cortex-a76"), Firmware::NONE, Options { bhb_off: true });
        assert_eq!(plan.bhb, Bhb::Off);
        assert_eq!(plan.exit_work(), ExitWork::default());
        assert_eq!(guest(plan), (-2, -1));
        // Nothing changes where there was nothing to do.
        let a53 = Plan::decide(qemu("cortex-a53"), Firmware::NONE, Options { bhb_off: true });
        assert_eq!(a53.bhb, Bhb::Unaffected);
    }

    #[test]
    fn system_state_is_the_worst_cpu() {
        assert!(State::Unaffected < State::Mitigated && State::Mitigated < State::Vulnerable);
        for s in [State::Unaffected, State::Mitigated, State::Vulnerable] {
            assert_eq!(State::from_u8(s as u8), s);
        }
        assert_eq!(features(0x8000_7fff, State::Vulnerable, State::Vulnerable), None);
        assert_eq!(features(0x8000_0000, State::Vulnerable, State::Vulnerable), None);
    }

    #[test]
    fn firmware_answers_and_log_lines() {
        assert_eq!(FwAnswer::from_w0(0), FwAnswer::Mitigates);
        assert_eq!(FwAnswer::from_w0(1), FwAnswer::Unaffected);
        assert_eq!(FwAnswer::from_w0(-1), FwAnswer::Absent);
        assert_eq!(FwAnswer::from_w0(-2), FwAnswer::Absent);
        let plan = Plan::decide(qemu("cortex-a76"), Firmware::NONE, ON);
        assert_eq!(
            format!("{plan}"),
            "Spectre-v2 unaffected (CSV2), Spectre-BHB: loop k=24 on exits"
        );
        assert_eq!(core_name(qemu("cortex-a76").midr), Some("Cortex-A76"));
        assert_eq!(core_name(qemu("neoverse-n1").midr), Some("Neoverse-N1"));
        assert_eq!(core_name(qemu("a64fx").midr), Some("A64FX"));
        assert_eq!(core_name(0x4100_0000), None);
    }
}
