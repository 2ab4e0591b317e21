//! `sysregs`: system registers and instructions a guest must not reach, or
//! must reach only virtually; `sysreg-sweep`: every op0=2/3 encoding read once;
//! `aarch32`: AArch32 EL0 coprocessor accesses that trap to EL2.
//!
//! Lines: `hostile: sysreg-read|sysreg-write <name> -> <outcome>`,
//! `hostile: sys-op <name> <operand> -> <outcome>`, `hostile: el0 <what> -> <outcome>`,
//! `hostile: sysreg-sweep op0=<n> op1=<n> -> absorbed <t> tried: <u> undef, <r> read, <z> zero`.
//!
//! Expected (confined): EL2/EL3 registers and operations UNDEFINED; PMU
//! registers, the OS double lock and DBGPRCR_EL1 read as zero whatever was
//! written (they would observe or program the physical CPU); the breakpoints,
//! watchpoints and MDSCR_EL1 are the guest's own, and aimed at armhv (matching
//! at EL2, over its memory) never stop it (`hostile: debug-el2 ...`); the GIC
//! CPU interface is the VM's virtual one (a GICv2's has no system registers:
//! `hostile: sysregs ICC_* skipped: GICv2, no ICC system registers`, and the
//! same for `el0 icc_sgi1r_el1`); the physical timer is armhv's emulation;
//! set/way operations complete (armhv performs them as clean+invalidate); cache
//! maintenance by address outside RAM aborts or does nothing.

use core::arch::global_asm;

use baremetal::println;

use crate::report::{self, Outcome};
use crate::trap::{self, SysReg, sysreg};
use crate::{Vm, spin_ms};

/// EL2 and EL3 registers, the GICv3 hypervisor interface and the VHE
/// aliases: UNDEFINED at EL1, for reads and writes.
const PRIVILEGED: [(&str, SysReg); 48] = [
    ("HCR_EL2", sysreg(3, 4, 1, 1, 0)),
    ("VTTBR_EL2", sysreg(3, 4, 2, 1, 0)),
    ("VTCR_EL2", sysreg(3, 4, 2, 1, 2)),
    ("SCTLR_EL2", sysreg(3, 4, 1, 0, 0)),
    ("ACTLR_EL2", sysreg(3, 4, 1, 0, 1)),
    ("MDCR_EL2", sysreg(3, 4, 1, 1, 1)),
    ("CPTR_EL2", sysreg(3, 4, 1, 1, 2)),
    ("HSTR_EL2", sysreg(3, 4, 1, 1, 3)),
    ("TTBR0_EL2", sysreg(3, 4, 2, 0, 0)),
    ("TCR_EL2", sysreg(3, 4, 2, 0, 2)),
    ("SPSR_EL2", sysreg(3, 4, 4, 0, 0)),
    ("ELR_EL2", sysreg(3, 4, 4, 0, 1)),
    ("SP_EL1", sysreg(3, 4, 4, 1, 0)),
    ("ESR_EL2", sysreg(3, 4, 5, 2, 0)),
    ("FAR_EL2", sysreg(3, 4, 6, 0, 0)),
    ("HPFAR_EL2", sysreg(3, 4, 6, 0, 4)),
    ("MAIR_EL2", sysreg(3, 4, 10, 2, 0)),
    ("VBAR_EL2", sysreg(3, 4, 12, 0, 0)),
    ("CONTEXTIDR_EL2", sysreg(3, 4, 13, 0, 1)),
    ("TPIDR_EL2", sysreg(3, 4, 13, 0, 2)),
    ("VPIDR_EL2", sysreg(3, 4, 0, 0, 0)),
    ("VMPIDR_EL2", sysreg(3, 4, 0, 0, 5)),
    ("CNTHCTL_EL2", sysreg(3, 4, 14, 1, 0)),
    ("CNTVOFF_EL2", sysreg(3, 4, 14, 0, 3)),
    ("CNTHP_CTL_EL2", sysreg(3, 4, 14, 2, 1)),
    ("CNTHP_CVAL_EL2", sysreg(3, 4, 14, 2, 2)),
    ("ICH_AP0R0_EL2", sysreg(3, 4, 12, 8, 0)),
    ("ICH_AP1R0_EL2", sysreg(3, 4, 12, 9, 0)),
    ("ICC_SRE_EL2", sysreg(3, 4, 12, 9, 5)),
    ("ICH_HCR_EL2", sysreg(3, 4, 12, 11, 0)),
    ("ICH_VTR_EL2", sysreg(3, 4, 12, 11, 1)),
    ("ICH_MISR_EL2", sysreg(3, 4, 12, 11, 2)),
    ("ICH_EISR_EL2", sysreg(3, 4, 12, 11, 3)),
    ("ICH_ELRSR_EL2", sysreg(3, 4, 12, 11, 5)),
    ("ICH_VMCR_EL2", sysreg(3, 4, 12, 11, 7)),
    ("ICH_LR0_EL2", sysreg(3, 4, 12, 12, 0)),
    ("ICH_LR1_EL2", sysreg(3, 4, 12, 12, 1)),
    ("ICH_LR2_EL2", sysreg(3, 4, 12, 12, 2)),
    ("ICH_LR3_EL2", sysreg(3, 4, 12, 12, 3)),
    ("SCTLR_EL12", sysreg(3, 5, 1, 0, 0)),
    ("VBAR_EL12", sysreg(3, 5, 12, 0, 0)),
    ("CNTV_CTL_EL02", sysreg(3, 5, 14, 3, 1)),
    ("SCR_EL3", sysreg(3, 6, 1, 1, 0)),
    ("SCTLR_EL3", sysreg(3, 6, 1, 0, 0)),
    ("MDCR_EL3", sysreg(3, 6, 1, 3, 1)),
    ("VBAR_EL3", sysreg(3, 6, 12, 0, 0)),
    ("ICC_SRE_EL3", sysreg(3, 6, 12, 12, 5)),
    ("CNTPS_CTL_EL1", sysreg(3, 7, 14, 2, 1)),
];

/// PMU and debug power registers: armhv traps them (MDCR_EL2); they must read
/// as zero after the write (which would otherwise count EL2 cycles, reset the
/// physical counters, lock the physical CPU's debug or ask for its power-down).
const RAZ_WI: [(&str, SysReg, u64); 10] = [
    ("OSDLR_EL1", sysreg(2, 0, 1, 3, 4), 1),
    ("DBGPRCR_EL1", sysreg(2, 0, 1, 4, 4), 1),
    ("PMCR_EL0", sysreg(3, 3, 9, 12, 0), 0x47), // E, P, C, LC
    ("PMCNTENSET_EL0", sysreg(3, 3, 9, 12, 1), 0x8000_00ff),
    ("PMCCFILTR_EL0", sysreg(3, 3, 14, 15, 7), 1 << 27), // NSH: count at EL2
    ("PMEVTYPER0_EL0", sysreg(3, 3, 14, 12, 0), (1 << 27) | 0x11),
    ("PMINTENSET_EL1", sysreg(3, 0, 9, 14, 1), 0x8000_00ff),
    ("PMUSERENR_EL0", sysreg(3, 3, 9, 14, 0), 0xf),
    ("PMCCNTR_EL0", sysreg(3, 3, 9, 13, 0), 0x4d41_524b),
    ("PMEVCNTR0_EL0", sysreg(3, 3, 14, 8, 0), 0x4d41_524b),
];

/// The guest's own debug registers (armhv switches them per vCPU), aimed at armhv: a
/// breakpoint on armhv's entry (0x4008_0000 on QEMU) and a watchpoint on loads and stores
/// anywhere in the low 2 GiB (MASK = 31: armhv's image, stacks and heap on QEMU), both
/// matching at EL2 too (HMC, SSC), with MDSCR_EL1.MDE and KDE set.
const AIMED_AT_ARMHV: [(&str, SysReg, u64); 5] = [
    ("DBGBVR0_EL1", sysreg(2, 0, 0, 0, 4), 0x4008_0000),
    ("DBGBCR0_EL1", sysreg(2, 0, 0, 0, 5), (1 << 13) | (3 << 14) | (0xf << 5) | 7), // HMC, SSC, BAS, PMC, E
    ("DBGWVR0_EL1", sysreg(2, 0, 0, 0, 6), 0),
    ("DBGWCR0_EL1", sysreg(2, 0, 0, 0, 7), (31 << 24) | (1 << 13) | (0xff << 5) | (3 << 3) | 7),
    ("MDSCR_EL1", sysreg(2, 0, 0, 2, 2), (1 << 15) | (1 << 13)), // MDE, KDE
];

/// Arms [`AIMED_AT_ARMHV`], then makes armhv work (hypercalls, an emulated register):
/// a debug exception taken at EL2 would be armhv's fatal report; none may come. This
/// guest's own accesses do not fire them: it runs with debug exceptions masked (PSTATE.D).
fn debug_aimed_at_armhv() {
    for (name, reg, value) in AIMED_AT_ARMHV {
        let o = outcome_done(trap::write_sysreg(reg, value));
        report::attempt("sysreg-write", name, o, o == Outcome::Ok || o == Outcome::Undef);
        // The guest's own register: whatever it reads back is not armhv's.
        report::sweep("debug-own", name, outcome_read(trap::read_sysreg(reg)));
    }
    let mut answered = 0;
    for _ in 0..100 {
        answered +=
            u32::from(baremetal::psci::call(guest_abi::hypercall::ARMHV_NOP, 0, 0, 0)[0] == 0);
        let _ = trap::read_sysreg(CNTP_CTL);
    }
    let outcome = format_args!("absorbed {answered} calls");
    report::attempt("debug-el2", "watch-2GiB+break-0x40080000", outcome, answered == 100);
    for (_, reg, _) in AIMED_AT_ARMHV.iter().rev() {
        let _ = trap::write_sysreg(*reg, 0);
    }
}

/// The RAS error records (FEAT_RAS): the physical CPU's, with every error it saw. A guest
/// that could read them would see other VMs' errors; one that could write them would clear
/// them (ERXSTATUS_EL1 is write-one-to-clear) or turn error reporting off (ERXCTLR_EL1).
/// armhv traps them (HCR_EL2.TERR) and they are UNDEFINED, as ID_AA64PFR0_EL1.RAS = 0 says.
/// Written with what an attacker would write, then read.
const RAS_RECORDS: [(&str, SysReg, u64); 9] = [
    ("ERRIDR_EL1", sysreg(3, 0, 5, 3, 0), 0),
    ("ERRSELR_EL1", sysreg(3, 0, 5, 3, 1), 1),
    ("ERXFR_EL1", sysreg(3, 0, 5, 4, 0), 0),
    ("ERXCTLR_EL1", sysreg(3, 0, 5, 4, 1), 0), // ED = 0: error detection off
    ("ERXSTATUS_EL1", sysreg(3, 0, 5, 4, 2), u64::MAX), // W1C: clear the record
    ("ERXADDR_EL1", sysreg(3, 0, 5, 4, 3), 0),
    ("ERXMISC0_EL1", sysreg(3, 0, 5, 5, 0), 0),
    ("ERXMISC1_EL1", sysreg(3, 0, 5, 5, 1), 0),
    ("ERXPFGCTL_EL1", sysreg(3, 0, 5, 4, 5), 1), // inject a fault (RASv1p1)
];

/// System instructions with their operand. `true`: an EL2/EL3 operation,
/// UNDEFINED at EL1; `false`: EL1's own, it must complete or abort.
fn sys_ops(vm: &Vm) -> [(&'static str, SysReg, u64, bool); 22] {
    let far = vm.ram_end;
    [
        ("DC_ISW", sysreg(1, 0, 7, 6, 2), 0, false),
        ("DC_ISW", sysreg(1, 0, 7, 6, 2), u64::MAX, false),
        ("DC_CSW", sysreg(1, 0, 7, 10, 2), 0x8000_0002, false),
        ("DC_CISW", sysreg(1, 0, 7, 14, 2), u64::MAX, false),
        ("DC_IVAC", sysreg(1, 0, 7, 6, 1), far, false),
        ("DC_IVAC", sysreg(1, 0, 7, 6, 1), 0x0800_0000, false),
        ("DC_CIVAC", sysreg(1, 3, 7, 14, 1), far, false),
        ("DC_CVAC", sysreg(1, 3, 7, 10, 1), 0x8000_0000, false),
        ("IC_IALLUIS", sysreg(1, 0, 7, 1, 0), 0, false),
        ("IC_IVAU", sysreg(1, 3, 7, 5, 1), far, false),
        ("TLBI_VMALLE1IS", sysreg(1, 0, 8, 3, 0), 0, false),
        ("TLBI_VAE1IS", sysreg(1, 0, 8, 3, 1), u64::MAX, false),
        ("AT_S1E1R", sysreg(1, 0, 7, 8, 0), far, false),
        ("TLBI_ALLE2", sysreg(1, 4, 8, 7, 0), 0, true),
        ("TLBI_ALLE1IS", sysreg(1, 4, 8, 3, 4), 0, true),
        ("TLBI_VMALLS12E1IS", sysreg(1, 4, 8, 3, 6), 0, true),
        ("TLBI_IPAS2E1IS", sysreg(1, 4, 8, 0, 1), far >> 12, true),
        ("TLBI_ALLE3", sysreg(1, 6, 8, 7, 0), 0, true),
        ("AT_S12E1R", sysreg(1, 4, 7, 8, 4), far, true),
        ("AT_S1E2R", sysreg(1, 4, 7, 8, 0), 0x4008_0000, true),
        ("AT_S12E0W", sysreg(1, 4, 7, 8, 7), far, true),
        ("AT_S1E3R", sysreg(1, 6, 7, 8, 0), 0, true),
    ]
}

fn outcome_read(r: Result<u64, trap::Fault>) -> Outcome {
    match r {
        Ok(v) => Outcome::Read(v),
        Err(f) => Outcome::from_esr(f.esr),
    }
}

fn outcome_done(r: Result<(), trap::Fault>) -> Outcome {
    match r {
        Ok(()) => Outcome::Ok,
        Err(f) => Outcome::from_esr(f.esr),
    }
}

const CNTP_CTL: SysReg = sysreg(3, 3, 14, 2, 1);
const CNTP_CVAL: SysReg = sysreg(3, 3, 14, 2, 2);
const CNTP_TVAL: SysReg = sysreg(3, 3, 14, 2, 0);
const CNTKCTL_EL1: SysReg = sysreg(3, 0, 14, 1, 0);

pub fn step(vm: &Vm) {
    for (name, reg) in PRIVILEGED {
        let r = trap::read_sysreg(reg);
        if let Ok(v) = r
            && v != 0
        {
            report::leaked(8);
        }
        let o = outcome_read(r);
        report::attempt("sysreg-read", name, o, o == Outcome::Undef);
        let o = outcome_done(trap::write_sysreg(reg, 0));
        report::attempt("sysreg-write", name, o, o == Outcome::Undef);
    }

    for (name, reg, value) in RAZ_WI {
        let o = outcome_done(trap::write_sysreg(reg, value));
        report::attempt("sysreg-write", name, o, o == Outcome::Ok || o == Outcome::Undef);
        let r = trap::read_sysreg(reg);
        let o = outcome_read(r);
        report::attempt("sysreg-read", name, o, matches!(o, Outcome::Read(0) | Outcome::Undef));
    }
    debug_aimed_at_armhv();
    // The cycle counter must not be counting for us (nor for anyone, through us).
    spin_ms(2);
    let o = outcome_read(trap::read_sysreg(sysreg(3, 3, 9, 13, 0)));
    report::attempt("sysreg-read", "PMCCNTR_EL0-later", o, matches!(o, Outcome::Read(0)));

    for (name, reg, value) in RAS_RECORDS {
        let o = outcome_done(trap::write_sysreg(reg, value));
        report::attempt("sysreg-write", name, o, o == Outcome::Undef);
        let r = trap::read_sysreg(reg);
        if let Ok(v) = r
            && v != 0
        {
            report::leaked(8);
        }
        let o = outcome_read(r);
        report::attempt("sysreg-read", name, o, o == Outcome::Undef);
    }
    identity();

    gic_interface();
    physical_timer();

    for (name, reg, operand, privileged) in sys_ops(vm) {
        let o = outcome_done(trap::sys(reg, operand));
        let confined =
            if privileged { o == Outcome::Undef } else { o == Outcome::Ok || o.refused() };
        report::attempt("sys-op", format_args!("{name} {operand:#x}"), o, confined);
    }
    el0();
}

/// MIDR_EL1 and MPIDR_EL1 as this vCPU reads them (VPIDR_EL2, VMPIDR_EL2): the CPU model, and
/// the vCPU's own affinity (the device tree's `reg` of its cpu node), not those of the
/// physical CPU it happens to run on. Read, not attacked: the test compares them.
fn identity() {
    for (name, reg) in [("MIDR_EL1", sysreg(3, 0, 0, 0, 0)), ("MPIDR_EL1", sysreg(3, 0, 0, 0, 5))] {
        let o = outcome_read(trap::read_sysreg(reg));
        report::attempt("identity", name, o, matches!(o, Outcome::Read(_)));
    }
}

/// True (and says so) if the VM's GIC is a GICv2: its CPU interface is
/// memory-mapped (GICC, attacked by `mmio`), and the ICC_* encodings are
/// UNDEFINED whatever armhv does, so probing `what` would prove nothing.
fn skip_icc(what: core::fmt::Arguments) -> bool {
    let v2 = baremetal::gic::version() == Some(baremetal::gic::Version::V2);
    if v2 {
        println!("hostile: {what} skipped: GICv2, no ICC system registers");
    }
    v2
}

/// The GIC CPU interface: the VM's own virtual one (ICV_* behind ICC_*).
fn gic_interface() {
    if skip_icc(format_args!("sysregs ICC_*")) {
        return;
    }
    let own_reads = [
        ("ICC_SRE_EL1", sysreg(3, 0, 12, 12, 5)),
        ("ICC_IAR0_EL1", sysreg(3, 0, 12, 8, 0)),
        ("ICC_IAR1_EL1", sysreg(3, 0, 12, 12, 0)),
        ("ICC_HPPIR0_EL1", sysreg(3, 0, 12, 8, 2)),
        ("ICC_HPPIR1_EL1", sysreg(3, 0, 12, 12, 2)),
        ("ICC_RPR_EL1", sysreg(3, 0, 12, 11, 3)),
        ("ICC_AP0R0_EL1", sysreg(3, 0, 12, 8, 4)),
        ("ICC_AP1R0_EL1", sysreg(3, 0, 12, 9, 0)),
        ("ICC_CTLR_EL1", sysreg(3, 0, 12, 12, 4)),
        ("ICC_IGRPEN0_EL1", sysreg(3, 0, 12, 12, 6)),
    ];
    for (name, reg) in own_reads {
        let o = outcome_read(trap::read_sysreg(reg));
        report::attempt("sysreg-read", name, o, matches!(o, Outcome::Read(_) | Outcome::Undef));
    }
    // Writes that must stay inside the VM: SRE off (armhv keeps it on), Group 0
    // SGIs (none exist for guests), SGIs to nobody, an EOI and a deactivation
    // of interrupts that are not active.
    let writes = [
        ("ICC_SRE_EL1", sysreg(3, 0, 12, 12, 5), 0),
        ("ICC_SGI0R_EL1", sysreg(3, 0, 12, 11, 7), 1 << 40),
        (
            "ICC_SGI1R_EL1",
            sysreg(3, 0, 12, 11, 5),
            (0xff << 48) | (0xff << 32) | (0xff << 16) | 0xffff,
        ),
        ("ICC_ASGI1R_EL1", sysreg(3, 0, 12, 11, 6), (1 << 40) | (5 << 24)),
        ("ICC_EOIR1_EL1", sysreg(3, 0, 12, 12, 1), 27),
        ("ICC_DIR_EL1", sysreg(3, 0, 12, 11, 1), 1020),
        ("ICC_EOIR0_EL1", sysreg(3, 0, 12, 8, 1), 5),
    ];
    for (name, reg, value) in writes {
        let o = outcome_done(trap::write_sysreg(reg, value));
        report::attempt("sysreg-write", name, o, o == Outcome::Ok || o == Outcome::Undef);
    }
    let o = outcome_read(trap::read_sysreg(sysreg(3, 0, 12, 12, 5)));
    report::attempt(
        "sysreg-read",
        "ICC_SRE_EL1-after",
        o,
        matches!(o, Outcome::Read(v) if v & 1 == 1),
    );
}

/// CNTP_*: emulated by armhv. Extreme values, an expired timer left enabled
/// with interrupts masked (it must not become an exit storm), then off.
fn physical_timer() {
    let writes = [
        ("CNTP_CVAL_EL0", CNTP_CVAL, u64::MAX),
        ("CNTP_TVAL_EL0", CNTP_TVAL, 0x8000_0000),
        ("CNTP_CTL_EL0", CNTP_CTL, u64::MAX),
        ("CNTP_CVAL_EL0", CNTP_CVAL, 0),
        ("CNTP_CTL_EL0", CNTP_CTL, 1),
    ];
    for (name, reg, value) in writes {
        let o = outcome_done(trap::write_sysreg(reg, value));
        report::attempt("sysreg-write", format_args!("{name}={value:#x}"), o, o == Outcome::Ok);
    }
    let o = outcome_read(trap::read_sysreg(CNTP_CTL));
    // Enabled and expired: ISTATUS (bit 2) set.
    report::attempt("sysreg-read", "CNTP_CTL_EL0", o, matches!(o, Outcome::Read(v) if v & 5 == 5));
    let before = baremetal::psci::vm_exits().unwrap_or(0);
    spin_ms(100);
    let exits = baremetal::psci::vm_exits().unwrap_or(0) - before;
    report::attempt(
        "cntp-expired-masked",
        "100ms",
        format_args!("absorbed {exits} exits"),
        exits < 1000,
    );
    let _ = trap::write_sysreg(CNTP_CTL, 0);
    for (name, reg) in [
        ("CNTFRQ_EL0", sysreg(3, 3, 14, 0, 0)),
        ("CNTPCT_EL0", sysreg(3, 3, 14, 0, 1)),
        ("CNTVOFF_EL2", sysreg(3, 4, 14, 0, 3)),
    ] {
        let o = outcome_done(trap::write_sysreg(reg, 0));
        // CNTFRQ_EL0 is writable only at the highest EL; the counters never.
        report::attempt("sysreg-write", name, o, o == Outcome::Undef);
    }
}

// EL0 code: one instruction, then SVC back to EL1 (AArch64), or A32 words.
global_asm!(
    r#"
    .section .text.hostile_el0, "ax"
    .balign 8
    .global hostile_el0_cntp
hostile_el0_cntp:
    mrs     x0, cntp_ctl_el0
    svc     #0
    .global hostile_el0_hvc
hostile_el0_hvc:
    hvc     #0
    svc     #0
    .global hostile_el0_smc
hostile_el0_smc:
    smc     #0
    svc     #0
    .global hostile_el0_pmccntr
hostile_el0_pmccntr:
    mrs     x0, pmccntr_el0
    svc     #0
    .global hostile_el0_sctlr
hostile_el0_sctlr:
    mrs     x0, sctlr_el1
    svc     #0
    .global hostile_el0_dc_cisw
hostile_el0_dc_cisw:
    dc      cisw, x0
    svc     #0
    .global hostile_el0_sgi
hostile_el0_sgi:
    msr     icc_sgi1r_el1, x0
    svc     #0
    .global hostile_el0_cntvct
hostile_el0_cntvct:
    mrs     x0, cntvct_el0
    svc     #0
    .balign 8
    /* A32: mrc p15, 0, r0, c14, c2, 1 (CNTP_CTL); svc #0 */
    .global hostile_a32_cntp_ctl
hostile_a32_cntp_ctl:
    .word   0xee1e0f32
    .word   0xef000000
    /* A32: mrrc p15, 2, r0, r1, c14 (CNTP_CVAL); svc #0 */
    .global hostile_a32_cntp_cval
hostile_a32_cntp_cval:
    .word   0xec510f2e
    .word   0xef000000
    /* A32: mrc p14, 0, r0, c0, c1, 0 (DBGDSCRint); svc #0 */
    .global hostile_a32_dbgdscr
hostile_a32_dbgdscr:
    .word   0xee100e11
    .word   0xef000000
    /* A32: mrc p15, 0, r0, c0, c0, 0 (MIDR, EL0: UNDEFINED); svc #0 */
    .global hostile_a32_midr
hostile_a32_midr:
    .word   0xee100f10
    .word   0xef000000
"#
);

unsafe extern "C" {
    fn hostile_el0_cntp();
    fn hostile_el0_hvc();
    fn hostile_el0_smc();
    fn hostile_el0_pmccntr();
    fn hostile_el0_sctlr();
    fn hostile_el0_dc_cisw();
    fn hostile_el0_sgi();
    fn hostile_el0_cntvct();
    fn hostile_a32_cntp_ctl();
    fn hostile_a32_cntp_cval();
    fn hostile_a32_dbgdscr();
    fn hostile_a32_midr();
}

const EC_SVC64: u64 = 0x15;
const EC_SVC32: u64 = 0x11;

/// EL0 (AArch64) tries: with the timer's EL0 access enabled by EL1
/// (CNTKCTL_EL1.EL0PTEN), CNTP_CTL_EL0 traps to armhv from EL0; the rest are
/// refused to EL0 by the architecture.
fn el0() {
    let old = trap::read_sysreg(CNTKCTL_EL1).unwrap_or(0);
    let _ = trap::write_sysreg(CNTKCTL_EL1, old | (1 << 9) | 3); // EL0PTEN, EL0VCTEN, EL0PCTEN
    let tries: [(&str, unsafe extern "C" fn(), bool); 8] = [
        ("cntp_ctl_el0", hostile_el0_cntp, true),
        ("cntvct_el0", hostile_el0_cntvct, true),
        ("hvc", hostile_el0_hvc, false),
        ("smc", hostile_el0_smc, false),
        ("pmccntr_el0", hostile_el0_pmccntr, false),
        ("sctlr_el1", hostile_el0_sctlr, false),
        ("dc_cisw", hostile_el0_dc_cisw, false),
        ("icc_sgi1r_el1", hostile_el0_sgi, false),
    ];
    for (name, code, may_complete) in tries {
        if name.starts_with("icc_") && skip_icc(format_args!("el0 {name}")) {
            continue;
        }
        let exit = trap::run_el0(code as usize as u64, 0, trap::SPSR_EL0T);
        let (o, confined) = if report::ec(exit.esr) == EC_SVC64 {
            (Outcome::Read(exit.x0), may_complete)
        } else {
            let o = Outcome::from_esr(exit.esr);
            (o, o.refused() || report::ec(exit.esr) == 0x18)
        };
        report::attempt("el0", name, o, confined);
    }
    let _ = trap::write_sysreg(CNTKCTL_EL1, old);
}

/// `aarch32`: AArch32 EL0 code (the VM's own 32-bit user space) reaching
/// registers that trap to EL2 as CP14/CP15 accesses (ESR classes 0x03-0x06,
/// which an AArch64-only hypervisor may not expect). A VM stopped by armhv
/// here is a defined result, but it means any 32-bit process can kill its VM.
pub fn aarch32() {
    let old = trap::read_sysreg(CNTKCTL_EL1).unwrap_or(0);
    let _ = trap::write_sysreg(CNTKCTL_EL1, old | (1 << 9) | 3);
    let tries: [(&str, unsafe extern "C" fn(), bool); 4] = [
        ("a32-midr", hostile_a32_midr, false),
        ("a32-cntp-ctl", hostile_a32_cntp_ctl, true),
        ("a32-cntp-cval", hostile_a32_cntp_cval, true),
        ("a32-dbgdscrint", hostile_a32_dbgdscr, true),
    ];
    for (name, code, traps_to_el2) in tries {
        if traps_to_el2 {
            // If armhv stops the VM on this one, this line is the last.
            println!("hostile: el0 {name} trying");
        }
        let exit = trap::run_el0(code as usize as u64, 0, trap::SPSR_USR32);
        let o = if report::ec(exit.esr) == EC_SVC32 {
            Outcome::Read(exit.x0 & 0xffff_ffff)
        } else {
            Outcome::from_esr(exit.esr)
        };
        // Whatever the access got, the guest cannot judge it: a sweep (the host test checks
        // that the VM outlived every one).
        report::sweep("el0", name, o);
    }
    let _ = trap::write_sysreg(CNTKCTL_EL1, old);
}

/// `sysreg-sweep`: reads every encoding with op0 = 2 or 3. EL2/EL3 encodings
/// (op1 4..7) must all be UNDEFINED or read as zero; one that returns data is
/// printed on a line of its own and counts as leaked: those are attempts. An
/// EL1/EL0 encoding (op1 0..3) may legitimately read anything, so its reads
/// can never fail: they are counted as swept, not as attempts.
pub fn sweep() {
    for op0 in 2..=3u8 {
        for op1 in 0..8u8 {
            let (mut tried, mut undef, mut read, mut zero, mut other) =
                (0u64, 0u64, 0u64, 0u64, 0u64);
            let mut bad = 0u64;
            for crn in 0..16u8 {
                for crm in 0..16u8 {
                    for op2 in 0..8u8 {
                        let reg = sysreg(op0, op1, crn, crm, op2);
                        tried += 1;
                        match trap::read_sysreg(reg) {
                            Ok(v) => {
                                read += 1;
                                if v == 0 {
                                    zero += 1;
                                } else if op1 >= 4 {
                                    bad += 1;
                                    report::leaked(8);
                                    report::attempt("sysreg-read", reg, Outcome::Read(v), false);
                                }
                            }
                            Err(f) if report::ec(f.esr) == 0 => undef += 1,
                            Err(f) => {
                                other += 1;
                                let o = Outcome::from_esr(f.esr);
                                if op1 >= 4 {
                                    report::attempt("sysreg-read", reg, o, true);
                                } else {
                                    report::sweep("sysreg-read", reg, o);
                                }
                            }
                        }
                    }
                }
            }
            println!(
                "hostile: sysreg-sweep op0={op0} op1={op1} -> absorbed {tried} tried: {undef} undef, {read} read, {zero} zero"
            );
            // Lines printed above counted themselves.
            let counted = bad + other;
            if op1 >= 4 {
                report::count(tried - counted, tried - counted);
            } else {
                report::swept(tried - counted);
            }
        }
    }
}
