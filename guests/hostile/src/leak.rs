//! Register and memory state must never pass from one VM to another.
//!
//! `marker=MS` (the victim): fills its RAM, x1-x30, SP, v0-v31, NZCV, FPCR,
//! FPSR, its EL1/EL0 system registers, its virtual timers and its GIC CPU
//! interface (an SGI left active, another pending, so its list registers are
//! busy) with marker values, then yields (ARMHV_YIELD) in a loop for MS ms
//! without touching any of it, and powers off.
//!
//! `leak-scan=N` (on the same physical CPU): first checks that the RAM it
//! never wrote is zero; then N rounds of: load its own values into every
//! register, yield, dump every register and compare; then starts its second
//! vCPU (placed on the same CPU) N/4 times at an entry that dumps all its
//! registers before touching any (a fresh vCPU's state must not be the last
//! VM's either), and checks the dumps. A marker value anywhere is a leak.
//!
//! Lines: `hostile: marker <ms>ms -> absorbed <n> yields` (the victim);
//! `hostile: leak-scan <what> -> absorbed ...` per check (never-written-ram,
//! registers-after-yield, fresh-vcpu), one line per leak found
//! (`hostile: leak-scan yield|fresh <register> -> marker value <hex>`,
//! `... -> changed <hex> (was <hex>)`, `... -> not idle <hex>`), and
//! `hostile: leak-scan <n> reads, <k> marker values found`. Registers whose
//! marker and own values read back the same (RAZ/WI, absent) cannot show a
//! leak; `hostile: leak-scan not distinguishable: ...` names them.
//!
//! On a GICv2 the GIC CPU interface is memory-mapped: the scanner reads its
//! state through GICC_* (`... -> not idle` names GICC_HPPIR, GICC_RPR,
//! GICC_APR for GICC_APR0..3, GICC_IAR) and a fresh vCPU dumps GICC_* in the
//! ICC_* slots; the ICC_* system registers do not exist there, which
//! `hostile: leak-scan ICC_* skipped: GICv2, no ICC system registers` says.

use core::arch::global_asm;

use baremetal::console::Global;
use baremetal::cpu::{self, dsb_sev};
use baremetal::gic::{self, Version, v2};
use baremetal::psci;
use baremetal::{println, time};
use guest_abi::hypercall::ARMHV_YIELD;

use crate::report;
use crate::trap::{self, SysReg, Width, sysreg};
use crate::{Vm, image_end};

/// Marker values: "MARK" in the upper 32 bits.
const MARK: u64 = 0x4d41_524b_0000_0000;
/// The scanner's own values: "SCAN".
const SCAN: u64 = 0x5343_414e_0000_0000;

fn is_marker(v: u64) -> bool {
    v >> 32 == MARK >> 32
}

// Register table / dump layout (bytes), shared with the assembly below.
const T_Q: usize = 256;
const T_NZCV: usize = 768;
const T_FPCR: usize = 776;
const T_FPSR: usize = 784;
const T_FID: usize = 792;
const T_DEADLINE: usize = 800;
const T_SP: usize = 808;
const T_WORDS: usize = 104;
/// Fresh-vCPU dump: system registers from here (words), a done flag before.
const F_SYS: usize = 128;
const F_DONE: usize = 127;

#[repr(C, align(16))]
struct Table([u64; T_WORDS]);

global_asm!(
    r#"
    .section .text.hostile_leak, "ax"

    /* hostile_marker_loop(table): everything from the table, then
     * ARMHV_YIELD until CNTVCT_EL0 passes table.deadline. */
    .global hostile_marker_loop
hostile_marker_loop:
    sub     sp, sp, #192
    stp     x18, x19, [sp, #0]
    stp     x20, x21, [sp, #16]
    stp     x22, x23, [sp, #32]
    stp     x24, x25, [sp, #48]
    stp     x26, x27, [sp, #64]
    stp     x28, x29, [sp, #80]
    str     x30, [sp, #96]
    stp     d8, d9, [sp, #112]
    stp     d10, d11, [sp, #128]
    stp     d12, d13, [sp, #144]
    stp     d14, d15, [sp, #160]
    adrp    x1, {save}
    add     x1, x1, :lo12:{save}
    mov     x2, sp
    stp     x0, x2, [x1]
    mov     x3, #0
    str     x3, [x1, #16]           /* yields */
    ldr     x2, [x0, #776]
    msr     fpcr, x2
    ldr     x2, [x0, #784]
    msr     fpsr, x2
    ldp     q0, q1, [x0, #256]
    ldp     q2, q3, [x0, #288]
    ldp     q4, q5, [x0, #320]
    ldp     q6, q7, [x0, #352]
    ldp     q8, q9, [x0, #384]
    ldp     q10, q11, [x0, #416]
    ldp     q12, q13, [x0, #448]
    ldp     q14, q15, [x0, #480]
    ldp     q16, q17, [x0, #512]
    ldp     q18, q19, [x0, #544]
    ldp     q20, q21, [x0, #576]
    ldp     q22, q23, [x0, #608]
    ldp     q24, q25, [x0, #640]
    ldp     q26, q27, [x0, #672]
    ldp     q28, q29, [x0, #704]
    ldp     q30, q31, [x0, #736]
    ldr     x2, [x0, #808]
    mov     sp, x2
    ldp     x4, x5, [x0, #32]
    ldp     x6, x7, [x0, #48]
    ldp     x8, x9, [x0, #64]
    ldp     x10, x11, [x0, #80]
    ldp     x12, x13, [x0, #96]
    ldp     x14, x15, [x0, #112]
    ldp     x16, x17, [x0, #128]
    ldp     x18, x19, [x0, #144]
    ldp     x20, x21, [x0, #160]
    ldp     x22, x23, [x0, #176]
    ldp     x24, x25, [x0, #192]
    ldp     x26, x27, [x0, #208]
    ldp     x28, x29, [x0, #224]
    ldr     x30, [x0, #240]
2:  adrp    x1, {save}
    add     x1, x1, :lo12:{save}
    ldr     x2, [x1, #16]
    add     x2, x2, #1
    str     x2, [x1, #16]
    ldr     x1, [x1]
    ldr     x2, [x1, #800]
    isb
    mrs     x3, cntvct_el0
    cmp     x3, x2
    b.hs    3f
    ldr     x2, [x1, #768]
    msr     nzcv, x2
    ldr     x0, [x1, #792]
    ldp     x2, x3, [x1, #16]
    ldr     x1, [x1, #8]
    hvc     #0
    b       2b
3:  adrp    x1, {save}
    add     x1, x1, :lo12:{save}
    ldr     x2, [x1, #8]
    mov     sp, x2
    ldp     x18, x19, [sp, #0]
    ldp     x20, x21, [sp, #16]
    ldp     x22, x23, [sp, #32]
    ldp     x24, x25, [sp, #48]
    ldp     x26, x27, [sp, #64]
    ldp     x28, x29, [sp, #80]
    ldr     x30, [sp, #96]
    ldp     d8, d9, [sp, #112]
    ldp     d10, d11, [sp, #128]
    ldp     d12, d13, [sp, #144]
    ldp     d14, d15, [sp, #160]
    add     sp, sp, #192
    ret

    /* hostile_scan_round(table, out): our own values from the table into
     * x1-x30, v0-v31, NZCV, FPCR, FPSR; the call in table.fid; then every
     * register as the call left it into out (same layout). */
    .global hostile_scan_round
hostile_scan_round:
    sub     sp, sp, #192
    stp     x18, x19, [sp, #0]
    stp     x20, x21, [sp, #16]
    stp     x22, x23, [sp, #32]
    stp     x24, x25, [sp, #48]
    stp     x26, x27, [sp, #64]
    stp     x28, x29, [sp, #80]
    str     x30, [sp, #96]
    stp     d8, d9, [sp, #112]
    stp     d10, d11, [sp, #128]
    stp     d12, d13, [sp, #144]
    stp     d14, d15, [sp, #160]
    str     x1, [sp, #176]
    sub     sp, sp, #832
    ldr     x1, [x0, #776]
    msr     fpcr, x1
    ldr     x1, [x0, #784]
    msr     fpsr, x1
    ldp     q0, q1, [x0, #256]
    ldp     q2, q3, [x0, #288]
    ldp     q4, q5, [x0, #320]
    ldp     q6, q7, [x0, #352]
    ldp     q8, q9, [x0, #384]
    ldp     q10, q11, [x0, #416]
    ldp     q12, q13, [x0, #448]
    ldp     q14, q15, [x0, #480]
    ldp     q16, q17, [x0, #512]
    ldp     q18, q19, [x0, #544]
    ldp     q20, q21, [x0, #576]
    ldp     q22, q23, [x0, #608]
    ldp     q24, q25, [x0, #640]
    ldp     q26, q27, [x0, #672]
    ldp     q28, q29, [x0, #704]
    ldp     q30, q31, [x0, #736]
    ldp     x2, x3, [x0, #16]
    ldp     x4, x5, [x0, #32]
    ldp     x6, x7, [x0, #48]
    ldp     x8, x9, [x0, #64]
    ldp     x10, x11, [x0, #80]
    ldp     x12, x13, [x0, #96]
    ldp     x14, x15, [x0, #112]
    ldp     x16, x17, [x0, #128]
    ldp     x18, x19, [x0, #144]
    ldp     x20, x21, [x0, #160]
    ldp     x22, x23, [x0, #176]
    ldp     x24, x25, [x0, #192]
    ldp     x26, x27, [x0, #208]
    ldp     x28, x29, [x0, #224]
    ldr     x30, [x0, #240]
    ldr     x1, [x0, #768]
    msr     nzcv, x1
    ldr     x1, [x0, #8]
    ldr     x0, [x0, #792]
    hvc     #0
    stp     x0, x1, [sp, #0]
    mrs     x0, nzcv
    str     x0, [sp, #768]
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x19, [sp, #144]
    stp     x20, x21, [sp, #160]
    stp     x22, x23, [sp, #176]
    stp     x24, x25, [sp, #192]
    stp     x26, x27, [sp, #208]
    stp     x28, x29, [sp, #224]
    str     x30, [sp, #240]
    mrs     x0, fpcr
    str     x0, [sp, #776]
    mrs     x0, fpsr
    str     x0, [sp, #784]
    stp     q0, q1, [sp, #256]
    stp     q2, q3, [sp, #288]
    stp     q4, q5, [sp, #320]
    stp     q6, q7, [sp, #352]
    stp     q8, q9, [sp, #384]
    stp     q10, q11, [sp, #416]
    stp     q12, q13, [sp, #448]
    stp     q14, q15, [sp, #480]
    stp     q16, q17, [sp, #512]
    stp     q18, q19, [sp, #544]
    stp     q20, q21, [sp, #576]
    stp     q22, q23, [sp, #608]
    stp     q24, q25, [sp, #640]
    stp     q26, q27, [sp, #672]
    stp     q28, q29, [sp, #704]
    stp     q30, q31, [sp, #736]
    ldr     x1, [sp, #(832 + 176)]
    mov     x2, #0
4:  ldr     x3, [sp, x2]
    str     x3, [x1, x2]
    add     x2, x2, #8
    cmp     x2, #792
    b.lo    4b
    add     sp, sp, #832
    ldp     x18, x19, [sp, #0]
    ldp     x20, x21, [sp, #16]
    ldp     x22, x23, [sp, #32]
    ldp     x24, x25, [sp, #48]
    ldp     x26, x27, [sp, #64]
    ldp     x28, x29, [sp, #80]
    ldr     x30, [sp, #96]
    ldp     d8, d9, [sp, #112]
    ldp     d10, d11, [sp, #128]
    ldp     d12, d13, [sp, #144]
    ldp     d14, d15, [sp, #160]
    add     sp, sp, #192
    ret

    /* PSCI CPU_ON entry of a fresh vCPU, x0 = dump buffer: every register as
     * armhv handed it over, before anything changes one; then CPU_OFF. */
    .balign 4
    .global hostile_fresh_entry
hostile_fresh_entry:
    stp     x0, x1, [x0, #0]
    stp     x2, x3, [x0, #16]
    stp     x4, x5, [x0, #32]
    stp     x6, x7, [x0, #48]
    stp     x8, x9, [x0, #64]
    stp     x10, x11, [x0, #80]
    stp     x12, x13, [x0, #96]
    stp     x14, x15, [x0, #112]
    stp     x16, x17, [x0, #128]
    stp     x18, x19, [x0, #144]
    stp     x20, x21, [x0, #160]
    stp     x22, x23, [x0, #176]
    stp     x24, x25, [x0, #192]
    stp     x26, x27, [x0, #208]
    stp     x28, x29, [x0, #224]
    str     x30, [x0, #240]
    mrs     x1, nzcv
    str     x1, [x0, #768]
    mov     x1, sp
    str     x1, [x0, #808]
    mrs     x1, tpidr_el0
    str     x1, [x0, #1024]
    mrs     x1, tpidrro_el0
    str     x1, [x0, #1032]
    mrs     x1, tpidr_el1
    str     x1, [x0, #1040]
    mrs     x1, contextidr_el1
    str     x1, [x0, #1048]
    mrs     x1, par_el1
    str     x1, [x0, #1056]
    mrs     x1, far_el1
    str     x1, [x0, #1064]
    mrs     x1, esr_el1
    str     x1, [x0, #1072]
    mrs     x1, afsr0_el1
    str     x1, [x0, #1080]
    mrs     x1, afsr1_el1
    str     x1, [x0, #1088]
    mrs     x1, elr_el1
    str     x1, [x0, #1096]
    mrs     x1, spsr_el1
    str     x1, [x0, #1104]
    mrs     x1, sp_el0
    str     x1, [x0, #1112]
    mrs     x1, mair_el1
    str     x1, [x0, #1120]
    mrs     x1, amair_el1
    str     x1, [x0, #1128]
    mrs     x1, tcr_el1
    str     x1, [x0, #1136]
    mrs     x1, ttbr0_el1
    str     x1, [x0, #1144]
    mrs     x1, ttbr1_el1
    str     x1, [x0, #1152]
    mrs     x1, csselr_el1
    str     x1, [x0, #1160]
    mrs     x1, cntv_cval_el0
    str     x1, [x0, #1168]
    mrs     x1, cntv_ctl_el0
    str     x1, [x0, #1176]
    mrs     x1, cntkctl_el1
    str     x1, [x0, #1184]
    mrs     x1, vbar_el1
    str     x1, [x0, #1192]
    /* The GIC CPU interface: ICC_* on a GICv3, GICC_* at the address in
     * FRESH_GICC on a GICv2 (where ICC_* are UNDEFINED), in the same slots;
     * GICC_ABPR takes ICC_IGRPEN1_EL1's, GICC_APR0..3 OR-ed ICC_AP1R0_EL1's. */
    adrp    x2, {gicc}
    add     x2, x2, :lo12:{gicc}
    ldr     x2, [x2]
    cbnz    x2, 7f
    mrs     x1, icc_pmr_el1
    str     x1, [x0, #1200]
    mrs     x1, icc_bpr1_el1
    str     x1, [x0, #1208]
    mrs     x1, icc_ctlr_el1
    str     x1, [x0, #1216]
    mrs     x1, icc_igrpen1_el1
    str     x1, [x0, #1224]
    mrs     x1, icc_hppir1_el1
    str     x1, [x0, #1232]
    mrs     x1, icc_rpr_el1
    str     x1, [x0, #1240]
    mrs     x1, icc_ap1r0_el1
    str     x1, [x0, #1248]
    b       8f
7:  ldr     w1, [x2, #{gicc_pmr}]
    str     x1, [x0, #1200]
    ldr     w1, [x2, #{gicc_bpr}]
    str     x1, [x0, #1208]
    ldr     w1, [x2, #{gicc_ctlr}]
    str     x1, [x0, #1216]
    ldr     w1, [x2, #{gicc_abpr}]
    str     x1, [x0, #1224]
    ldr     w1, [x2, #{gicc_hppir}]
    str     x1, [x0, #1232]
    ldr     w1, [x2, #{gicc_rpr}]
    str     x1, [x0, #1240]
    ldr     w1, [x2, #{gicc_apr0}]
    ldr     w3, [x2, #({gicc_apr0} + 4)]
    orr     w1, w1, w3
    ldr     w3, [x2, #({gicc_apr0} + 8)]
    orr     w1, w1, w3
    ldr     w3, [x2, #({gicc_apr0} + 12)]
    orr     w1, w1, w3
    str     x1, [x0, #1248]
8:  mrs     x1, cntp_cval_el0
    str     x1, [x0, #1256]
    mrs     x1, cntp_ctl_el0
    str     x1, [x0, #1264]
    mrs     x1, sctlr_el1
    str     x1, [x0, #1272]
    mrs     x1, cpacr_el1
    str     x1, [x0, #1280]
    mrs     x1, mdscr_el1
    str     x1, [x0, #1288]
    mrs     x1, cpacr_el1
    orr     x1, x1, #(3 << 20)
    msr     cpacr_el1, x1
    isb
    stp     q0, q1, [x0, #256]
    stp     q2, q3, [x0, #288]
    stp     q4, q5, [x0, #320]
    stp     q6, q7, [x0, #352]
    stp     q8, q9, [x0, #384]
    stp     q10, q11, [x0, #416]
    stp     q12, q13, [x0, #448]
    stp     q14, q15, [x0, #480]
    stp     q16, q17, [x0, #512]
    stp     q18, q19, [x0, #544]
    stp     q20, q21, [x0, #576]
    stp     q22, q23, [x0, #608]
    stp     q24, q25, [x0, #640]
    stp     q26, q27, [x0, #672]
    stp     q28, q29, [x0, #704]
    stp     q30, q31, [x0, #736]
    mrs     x1, fpcr
    str     x1, [x0, #776]
    mrs     x1, fpsr
    str     x1, [x0, #784]
    dsb     sy
    mov     x1, #1
    str     x1, [x0, #1016]
    dsb     sy
    sev
    movz    x0, #0x8400, lsl #16
    orr     x0, x0, #2
    hvc     #0
5:  wfe
    b       5b
"#,
    save = sym MARKER_SAVE,
    gicc = sym FRESH_GICC,
    gicc_pmr = const v2::GICC_PMR,
    gicc_bpr = const v2::GICC_BPR,
    gicc_ctlr = const v2::GICC_CTLR,
    gicc_abpr = const v2::GICC_ABPR,
    gicc_hppir = const v2::GICC_HPPIR,
    gicc_rpr = const v2::GICC_RPR,
    gicc_apr0 = const v2::GICC_APR0,
);

unsafe extern "C" {
    fn hostile_marker_loop(table: *const Table);
    fn hostile_scan_round(table: *const Table, out: *mut Table);
    fn hostile_fresh_entry();
}

/// The marker loop's table pointer, real SP and yield count (only its asm uses it).
static mut MARKER_SAVE: [u64; 3] = [0; 3];

/// The GICv2 CPU interface a fresh vCPU dumps (0: a GICv3, dump ICC_*).
static FRESH_GICC: Global<u64> = Global::new(0);
/// Where the GIC CPU interface starts in FRESH_REGS (and the dump, at F_SYS).
const FRESH_GIC: usize = 22;
/// What a fresh vCPU dumps in those slots on a GICv2, in the same order.
const FRESH_GIC_V2: [&str; 7] =
    ["GICC_PMR", "GICC_BPR", "GICC_CTLR", "GICC_ABPR", "GICC_HPPIR", "GICC_RPR", "GICC_APR"];

/// The name of a fresh vCPU's dump slot `k`.
fn fresh_name(k: usize, gicv2: bool) -> &'static str {
    match k.checked_sub(FRESH_GIC) {
        Some(i) if gicv2 && i < FRESH_GIC_V2.len() => FRESH_GIC_V2[i],
        _ => FRESH_REGS[k],
    }
}

fn gicv2() -> bool {
    gic::version() == Some(Version::V2)
}

/// The fresh vCPU's system registers, in the order of the assembly above.
const FRESH_REGS: [&str; 34] = [
    "TPIDR_EL0",
    "TPIDRRO_EL0",
    "TPIDR_EL1",
    "CONTEXTIDR_EL1",
    "PAR_EL1",
    "FAR_EL1",
    "ESR_EL1",
    "AFSR0_EL1",
    "AFSR1_EL1",
    "ELR_EL1",
    "SPSR_EL1",
    "SP_EL0",
    "MAIR_EL1",
    "AMAIR_EL1",
    "TCR_EL1",
    "TTBR0_EL1",
    "TTBR1_EL1",
    "CSSELR_EL1",
    "CNTV_CVAL_EL0",
    "CNTV_CTL_EL0",
    "CNTKCTL_EL1",
    "VBAR_EL1",
    "ICC_PMR_EL1",
    "ICC_BPR1_EL1",
    "ICC_CTLR_EL1",
    "ICC_IGRPEN1_EL1",
    "ICC_HPPIR1_EL1",
    "ICC_RPR_EL1",
    "ICC_AP1R0_EL1",
    "CNTP_CVAL_EL0",
    "CNTP_CTL_EL0",
    "SCTLR_EL1",
    "CPACR_EL1",
    "MDSCR_EL1",
];

/// A system register both sides set: the scanner's own value and the marker's.
struct Reg {
    name: &'static str,
    reg: SysReg,
    own: u64,
    mark: u64,
}

const fn r(name: &'static str, reg: SysReg, own: u64, mark: u64) -> Reg {
    Reg { name, reg, own, mark }
}

const REGS: [Reg; 35] = [
    r("TPIDR_EL0", sysreg(3, 3, 13, 0, 2), SCAN | 0x500, MARK | 0x500),
    r("TPIDRRO_EL0", sysreg(3, 3, 13, 0, 3), SCAN | 0x501, MARK | 0x501),
    r("TPIDR_EL1", sysreg(3, 0, 13, 0, 4), SCAN | 0x502, MARK | 0x502),
    r("CONTEXTIDR_EL1", sysreg(3, 0, 13, 0, 1), 0x5343_4103, 0x4d41_5203),
    r("PAR_EL1", sysreg(3, 0, 7, 4, 0), 0x0000_5343_414e_0000, 0x0000_4d41_524b_0000),
    r("FAR_EL1", sysreg(3, 0, 6, 0, 0), SCAN | 0x505, MARK | 0x505),
    r("ESR_EL1", sysreg(3, 0, 5, 2, 0), 0x5343_4106, 0x4d41_5206),
    r("AFSR0_EL1", sysreg(3, 0, 5, 1, 0), SCAN | 0x507, MARK | 0x507),
    r("AFSR1_EL1", sysreg(3, 0, 5, 1, 1), SCAN | 0x508, MARK | 0x508),
    r("ELR_EL1", sysreg(3, 0, 4, 0, 1), SCAN | 0x509, MARK | 0x509),
    r("SPSR_EL1", sysreg(3, 0, 4, 0, 0), 0x6000_03c5, 0x9000_0385),
    r("SP_EL0", sysreg(3, 0, 4, 1, 0), SCAN | 0x510, MARK | 0x510),
    r("MAIR_EL1", sysreg(3, 0, 10, 2, 0), 0x4400_ff04_0c44_ff00, 0xff44_0408_ff04_440c),
    r("AMAIR_EL1", sysreg(3, 0, 10, 3, 0), SCAN | 0x513, MARK | 0x513),
    r("TCR_EL1", sysreg(3, 0, 2, 0, 2), 0x0000_0001_b510_3510, 0x0000_0005_a520_2520),
    r("TTBR0_EL1", sysreg(3, 0, 2, 0, 0), 0x5343_0000_4001_0000, 0x4d41_0000_4002_0000),
    r("TTBR1_EL1", sysreg(3, 0, 2, 0, 1), 0x5343_0000_4003_0000, 0x4d41_0000_4004_0000),
    r("CSSELR_EL1", sysreg(3, 2, 0, 0, 0), 0, 2),
    r("CNTV_CVAL_EL0", sysreg(3, 3, 14, 3, 2), SCAN | 0x518, MARK | 0x518),
    r("CNTV_CTL_EL0", sysreg(3, 3, 14, 3, 1), 2, 3),
    r("CNTP_CVAL_EL0", sysreg(3, 3, 14, 2, 2), SCAN | 0x51a, MARK | 0x51a),
    r("CNTP_CTL_EL0", sysreg(3, 3, 14, 2, 1), 2, 3),
    r("CNTKCTL_EL1", sysreg(3, 0, 14, 1, 0), 0, 0x2f7),
    r("VBAR_EL1", sysreg(3, 0, 12, 0, 0), 0, MARK | 0x800),
    r("ICC_PMR_EL1", sysreg(3, 0, 4, 6, 0), 0xf0, 0x58),
    r("ICC_BPR1_EL1", sysreg(3, 0, 12, 12, 3), 3, 6),
    r("ICC_CTLR_EL1", sysreg(3, 0, 12, 12, 4), 0, 2),
    r("ICC_IGRPEN1_EL1", sysreg(3, 0, 12, 12, 7), 0, 1),
    r("MDSCR_EL1", sysreg(2, 0, 0, 2, 2), 0, 0x8000),
    // Architecturally optional (RAS, LOR, CSV2_2): used where present.
    r("DISR_EL1", sysreg(3, 0, 12, 1, 1), 0x8000_0000, 0x8000_0abc),
    r("LORSA_EL1", sysreg(3, 0, 10, 4, 0), 0x5343_0000, 0x4d41_0000),
    r("LOREA_EL1", sysreg(3, 0, 10, 4, 1), 0x5343_0000, 0x4d41_0000),
    r("LORN_EL1", sysreg(3, 0, 10, 4, 2), 1, 2),
    r("SCXTNUM_EL0", sysreg(3, 3, 13, 0, 7), SCAN | 0x520, MARK | 0x520),
    r("SCXTNUM_EL1", sysreg(3, 0, 13, 0, 7), SCAN | 0x521, MARK | 0x521),
];
const VBAR: usize = 23;

/// What each register reads back as after our write of `own`, of `mark`
/// (the hardware keeps only the bits it implements), and its original value.
#[derive(Clone, Copy, Default)]
struct Fingerprint {
    present: bool,
    orig: u64,
    own_rb: u64,
    mark_rb: u64,
}

fn fingerprint(reg: &Reg, own: u64) -> Fingerprint {
    let Ok(orig) = trap::read_sysreg(reg.reg) else { return Fingerprint::default() };
    if trap::write_sysreg(reg.reg, reg.mark).is_err() {
        return Fingerprint::default();
    }
    let mark_rb = trap::read_sysreg(reg.reg).unwrap_or(orig);
    let _ = trap::write_sysreg(reg.reg, own);
    let own_rb = trap::read_sysreg(reg.reg).unwrap_or(orig);
    let _ = trap::write_sysreg(reg.reg, orig);
    Fingerprint { present: true, orig, own_rb, mark_rb }
}

fn fill(table: &mut Table, base: u64, fid: u32) {
    for i in 1..31 {
        table.0[i] = base | 0x100 | i as u64;
    }
    for i in 0..32 {
        table.0[T_Q / 8 + 2 * i] = base | 0x200 | i as u64;
        table.0[T_Q / 8 + 2 * i + 1] = base | 0x300 | i as u64;
    }
    table.0[T_FID / 8] = u64::from(fid);
}

/// Its free RAM, as (start, end) ranges: above the image, around the device tree.
fn free_ram(vm: &Vm) -> [(u64, u64); 2] {
    let dt_end = (vm.dt_addr + vm.dt_size + 0xfff) & !0xfff;
    [((image_end() + 0xfff) & !0xfff, vm.dt_addr & !0xfff), (dt_end, vm.ram_end)]
}

fn self_sgi(intid: u32) {
    gic::send_sgi(intid, cpu::affinity());
}

/// The victim: marker values everywhere, then yields until `ms` have passed.
pub fn marker(vm: &Vm, ms: u64) {
    for (from, to) in free_ram(vm) {
        let mut a = from;
        while a < to {
            // SAFETY: free RAM of ours: no Rust object lives above the image.
            unsafe { (a as *mut u64).write_volatile(MARK | (a & 0xffff_ffff)) };
            a += 8;
        }
    }
    // Its virtual GIC busy: SGI 13 acknowledged and left active, SGI 14 pending.
    if gic::present() {
        gic::init_distributor();
        gic::init_cpu(&[]);
        self_sgi(13);
        spin(1);
        let iar = gic::acknowledge();
        self_sgi(14);
        spin(1);
        println!(
            "hostile: marker gic active={} pending={}",
            gic::intid_of(iar),
            gic::highest_pending()
        );
    }
    let mut table = Table([0; T_WORDS]);
    fill(&mut table, MARK, ARMHV_YIELD);
    table.0[T_NZCV / 8] = 0x9000_0000;
    table.0[T_FPCR / 8] = (1 << 26) | (1 << 24) | (1 << 22);
    table.0[T_FPSR / 8] = 0x0800_001c;
    table.0[T_SP / 8] = MARK | 0x400;
    let end = time::counter() + time::ms_to_ticks(ms);
    let mut yields = 0;
    // In slices of 20 ms, each starting with the system registers written again (a VM
    // that overwrote a register armhv does not switch then sees ours once more).
    while !time::passed(end) {
        let mut orig = [None; REGS.len()];
        // VBAR_EL1 last: from then on no exception may happen.
        for (i, reg) in
            REGS.iter().enumerate().filter(|&(i, _)| i != VBAR).chain([(VBAR, &REGS[VBAR])])
        {
            if let Ok(v) = trap::read_sysreg(reg.reg)
                && trap::write_sysreg(reg.reg, reg.mark).is_ok()
            {
                orig[i] = Some(v);
            }
        }
        table.0[T_DEADLINE / 8] = (time::counter() + time::ms_to_ticks(20)).min(end);
        // SAFETY: the loop restores every callee-saved register and SP before it
        // returns; in between it only makes hypercalls (no exception can reach
        // the VBAR it marked: every interrupt is masked).
        unsafe { hostile_marker_loop(&table) };
        for (i, reg) in [(VBAR, &REGS[VBAR])].into_iter().chain(REGS.iter().enumerate()) {
            if let Some(v) = orig[i] {
                let _ = trap::write_sysreg(reg.reg, v);
            }
        }
        // SAFETY: written by the loop, read once it is over.
        yields += unsafe { (&raw const MARKER_SAVE[2]).read_volatile() };
    }
    // The victim's side: what it measured, judged by the scanner's attempts.
    report::sweep("marker", format_args!("{ms}ms"), format_args!("absorbed {yields} yields"));
}

fn spin(ms: u64) {
    crate::spin_ms(ms)
}

/// Fresh-vCPU dumps.
#[repr(C, align(4096))]
struct FreshDump([Global<u64>; 256]);

static FRESH: FreshDump = FreshDump([const { Global::new(0) }; 256]);

struct Scan {
    reads: u64,
    found: u64,
}

impl Scan {
    /// One register value seen: a marker value is a leak, printed once.
    fn check(&mut self, what: &str, name: &str, v: u64, fingerprint: Option<u64>) {
        self.reads += 1;
        if is_marker(v) || fingerprint.is_some_and(|f| f == v) {
            self.found += 1;
            report::leaked(8);
            println!("hostile: leak-scan {what} {name} -> marker value {v:#x}");
        }
    }
}

pub fn scan(vm: &Vm, rounds: u64) {
    let mut s = Scan { reads: 0, found: 0 };
    scan_ram(vm, &mut s);

    let mut prints = [Fingerprint::default(); REGS.len()];
    for (i, reg) in REGS.iter().enumerate() {
        let own = if i == VBAR { trap::read_sysreg(reg.reg).unwrap_or(0) } else { reg.own };
        prints[i] = fingerprint(reg, own);
        if i == VBAR {
            prints[i].own_rb = own;
        }
    }
    let testable = |p: &Fingerprint| p.present && p.mark_rb != p.own_rb;
    println!(
        "hostile: leak-scan {} of {} system registers distinguishable",
        prints.iter().filter(|p| testable(p)).count(),
        REGS.len()
    );
    let mut line = crate::Line::new();
    for (reg, p) in REGS.iter().zip(&prints) {
        use core::fmt::Write;
        if !testable(p) {
            let why = if p.present { "ignores writes" } else { "absent" };
            let _ = write!(line, " {}({why})", reg.name);
        }
    }
    println!("hostile: leak-scan not distinguishable:{}", line.as_str());
    if gicv2() {
        // The GIC's state is still scanned, through GICC (`gic_state_v2`).
        println!("hostile: leak-scan ICC_* skipped: GICv2, no ICC system registers");
    }

    let mut table = Table([0; T_WORDS]);
    fill(&mut table, SCAN, ARMHV_YIELD);
    table.0[T_NZCV / 8] = 0x6000_0000;
    table.0[T_FPCR / 8] = (1 << 25) | (2 << 22);
    table.0[T_FPSR / 8] = 0x3;
    let mut out = Table([0; T_WORDS]);
    let (mut switched, mut changed) = (0u64, 0u64);
    let found_before = s.found;
    let mut clean_rounds = 0u64;
    for _ in 0..rounds {
        let (found_then, changed_then) = (s.found, changed);
        for (i, reg) in REGS.iter().enumerate() {
            if testable(&prints[i]) && i != VBAR {
                let _ = trap::write_sysreg(reg.reg, reg.own);
            }
        }
        // SAFETY: the round restores every callee-saved register; `out` is ours.
        unsafe { hostile_scan_round(&table, &mut out) };
        switched += u64::from(out.0[1] == 1);
        for i in 2..31 {
            s.check("yield", "x", out.0[i], None);
            changed += u64::from(out.0[i] != table.0[i]);
        }
        for i in T_Q / 8..T_Q / 8 + 64 {
            s.check("yield", "v", out.0[i], None);
            changed += u64::from(out.0[i] != table.0[i]);
        }
        for (i, name) in [(T_NZCV / 8, "NZCV"), (T_FPCR / 8, "FPCR"), (T_FPSR / 8, "FPSR")] {
            let mark = match name {
                "NZCV" => 0x9000_0000,
                "FPCR" => (1 << 26) | (1 << 24) | (1 << 22),
                _ => 0x0800_001c,
            };
            s.check("yield", name, out.0[i], Some(mark));
            changed += u64::from(out.0[i] != table.0[i]);
        }
        for (i, reg) in REGS.iter().enumerate() {
            let p = prints[i];
            if !testable(&p) {
                continue;
            }
            let v = trap::read_sysreg(reg.reg).unwrap_or(p.own_rb);
            s.check("yield", reg.name, v, Some(p.mark_rb));
            if v != p.own_rb
                && v != p.mark_rb
                && reg.name != "CNTV_CTL_EL0"
                && reg.name != "CNTP_CTL_EL0"
            {
                changed += 1;
                println!(
                    "hostile: leak-scan yield {} -> changed {v:#x} (was {:#x})",
                    reg.name, p.own_rb
                );
            }
        }
        for (i, reg) in REGS.iter().enumerate() {
            if prints[i].present && i != VBAR {
                let _ = trap::write_sysreg(reg.reg, prints[i].orig);
            }
        }
        gic_state(&mut s, "yield");
        clean_rounds += u64::from(s.found == found_then && changed == changed_then);
    }
    let leaks = s.found - found_before;
    println!(
        "hostile: leak-scan registers-after-yield -> absorbed {rounds} rounds, {switched} switched, \
         {leaks} marker values, {changed} changed"
    );
    // One attempt per round, confined if nothing of the marker's showed.
    report::count(rounds, clean_rounds);

    fresh_vcpus(vm, &mut s, &prints, rounds / 4);
    println!("hostile: leak-scan {} reads, {} marker values found", s.reads, s.found);
}

/// The virtual GIC as seen from here: nothing pending, nothing active. The
/// marker VM keeps SGI 13 active and SGI 14 pending in its list registers.
fn gic_state(s: &mut Scan, what: &str) {
    if gicv2() {
        return gic_state_v2(s, what);
    }
    for (name, reg, idle) in [
        ("ICC_HPPIR1_EL1", sysreg(3, 0, 12, 12, 2), 1023),
        ("ICC_RPR_EL1", sysreg(3, 0, 12, 11, 3), 0xff),
        ("ICC_AP1R0_EL1", sysreg(3, 0, 12, 9, 0), 0),
        ("ICC_IAR1_EL1", sysreg(3, 0, 12, 12, 0), 1023),
    ] {
        let v = trap::read_sysreg(reg).unwrap_or(idle);
        s.reads += 1;
        let v = if name == "ICC_RPR_EL1" { v & 0xff } else { v & 0xff_ffff };
        if v != idle {
            s.found += 1;
            report::leaked(8);
            println!("hostile: leak-scan {what} {name} -> not idle {v:#x}");
            if name == "ICC_IAR1_EL1" {
                gic::complete(v);
            }
        }
    }
}

/// `gic_state` through a GICv2's CPU interface (in a VM the virtual one,
/// whose state is the list registers too).
fn gic_state_v2(s: &mut Scan, what: &str) {
    let c = gic::cpu_interface();
    let word = |off: u64, idle: u64| trap::load(c + off, Width::W).unwrap_or(idle);
    for (name, off, idle) in [
        ("GICC_HPPIR", v2::GICC_HPPIR, 1023),
        ("GICC_RPR", v2::GICC_RPR, 0xff),
        ("GICC_APR", v2::GICC_APR0, 0),
        ("GICC_IAR", v2::GICC_IAR, 1023),
    ] {
        let raw = match name {
            // Which of GICC_APR0..3 holds a priority's bit depends on the
            // implemented priority bits and the binary point: all of them.
            "GICC_APR" => (0..4).fold(0, |acc, i| acc | word(off + 4 * i, 0)),
            _ => word(off, idle),
        };
        s.reads += 1;
        let v = match name {
            "GICC_RPR" => raw & 0xff,
            "GICC_APR" => raw,
            // Without an SGI's source CPU (bits 12:10).
            _ => raw & 0x3ff,
        };
        if v != idle {
            s.found += 1;
            report::leaked(8);
            println!("hostile: leak-scan {what} {name} -> not idle {raw:#x}");
            if name == "GICC_IAR" {
                gic::complete(raw);
            }
        }
    }
}

/// RAM it has never written: all zero, no marker word.
fn scan_ram(vm: &Vm, s: &mut Scan) {
    let (mut bytes, mut nonzero, mut marks) = (0u64, 0u64, 0u64);
    for (from, to) in free_ram(vm) {
        let mut a = from;
        while a < to {
            // SAFETY: our own RAM, read only.
            let v = unsafe { (a as *const u64).read_volatile() };
            if v != 0 {
                nonzero += (0..8).filter(|i| (v >> (8 * i)) & 0xff != 0).count() as u64;
                marks += u64::from(is_marker(v));
            }
            a += 8;
        }
        bytes += to.saturating_sub(from);
    }
    s.reads += bytes / 8;
    s.found += marks;
    report::leaked(nonzero);
    report::attempt(
        "leak-scan",
        "never-written-ram",
        format_args!("absorbed {bytes} bytes, {nonzero} nonzero bytes, {marks} marker words"),
        nonzero == 0,
    );
}

/// Starts the second vCPU `n` times at `hostile_fresh_entry` and checks what
/// it found in its registers.
fn fresh_vcpus(vm: &Vm, s: &mut Scan, prints: &[Fingerprint; REGS.len()], n: u64) {
    let me = cpu::affinity();
    let Some(&target) = vm.cpus[..vm.ncpus].iter().find(|&&c| c != me) else {
        println!("hostile: leak-scan fresh-vcpu needs 2 vCPUs");
        return;
    };
    let found_before = s.found;
    let (mut started, mut dumped, mut clean) = (0u64, 0u64, 0u64);
    let buf = FRESH.0.as_ptr() as u64;
    let gicv2 = gicv2();
    FRESH_GICC.set(if gicv2 { gic::cpu_interface() } else { 0 });
    for _ in 0..n {
        for w in &FRESH.0 {
            w.set(0);
        }
        dsb_sev();
        if psci::wait_off(target, 1000) != psci::AFFINITY_OFF {
            break;
        }
        let entry = hostile_fresh_entry as *const () as u64;
        if psci::call(psci::PSCI_CPU_ON, target, entry, buf)[0] != 0 {
            break;
        }
        started += 1;
        let deadline = time::counter() + time::ms_to_ticks(2000);
        while FRESH.0[F_DONE].get() == 0 && !time::passed(deadline) {
            psci::call(ARMHV_YIELD, 0, 0, 0);
        }
        if FRESH.0[F_DONE].get() == 0 {
            continue;
        }
        dumped += 1;
        let found_then = s.found;
        let w = |i: usize| FRESH.0[i].get();
        if w(0) != buf {
            s.check("fresh", "x0", w(0), None);
        }
        for i in 1..31 {
            s.check("fresh", "x", w(i), None);
        }
        for i in T_Q / 8..T_Q / 8 + 64 {
            s.check("fresh", "v", w(i), None);
        }
        s.check("fresh", "NZCV", w(T_NZCV / 8), Some(0x9000_0000));
        s.check("fresh", "FPCR", w(T_FPCR / 8), Some((1 << 26) | (1 << 24) | (1 << 22)));
        s.check("fresh", "FPSR", w(T_FPSR / 8), Some(0x0800_001c));
        s.check("fresh", "SP", w(T_SP / 8), None);
        for k in 0..FRESH_REGS.len() {
            let name = fresh_name(k, gicv2);
            let print = REGS
                .iter()
                .zip(prints.iter())
                .find(|(r, p)| r.name == name && p.present && p.mark_rb != p.own_rb)
                .map(|(_, p)| p.mark_rb);
            let v = w(F_SYS + k);
            match name {
                "ICC_HPPIR1_EL1" if v & 0xff_ffff != 1023 => s.check("fresh", name, MARK, None),
                "GICC_HPPIR" if v & 0x3ff != 1023 => s.check("fresh", name, MARK, None),
                "ICC_AP1R0_EL1" | "GICC_APR" if v != 0 => s.check("fresh", name, MARK, None),
                _ => s.check("fresh", name, v, print),
            }
        }
        clean += u64::from(s.found == found_then);
    }
    let _ = psci::wait_off(target, 1000);
    let leaks = s.found - found_before;
    println!(
        "hostile: leak-scan fresh-vcpu -> absorbed {started} starts, {dumped} dumps, {leaks} marker values"
    );
    // One attempt per start, confined if its registers held nothing of the marker's.
    report::count(n, clean);
}
