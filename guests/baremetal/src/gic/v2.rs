//! The GICv2 half of the driver: Group 0 in the distributor, each CPU's SGIs
//! and PPIs through the distributor's banked registers, SPIs routed by
//! GICD_ITARGETSR, SGIs sent by GICD_SGIR, and the memory-mapped CPU
//! interface (GICC_*; in a VM, the hardware's virtual CPU interface).
//!
//! Group 0 with GICC_CTLR.FIQEn = 0 is signalled as an IRQ, as Linux's GICv2
//! driver has it; a GIC without the Security Extensions (QEMU virt without
//! `secure=on`, a virtual GICv2) gives Group 0 to the guest.
//!
//! A CPU interface number is the CPU's MPIDR Aff0 (QEMU virt, armhv's vCPUs);
//! a GICv2 has at most 8 of them.

use super::{GICD, GICD_CTLR, GICD_ICENABLER, GICD_ICFGR, GICD_IGROUPR, GICD_IPRIORITYR};
use super::{GICD_ISENABLER, PRIORITY, level_ppis_enable, read, write};
use crate::console::Global;
use crate::cpu;

/// GICD_CTLR.EnableGrp0 (bit 1, EnableGrp1, stays off: nothing is Group 1).
const GICD_CTLR_ENABLE_GRP0: u32 = 1 << 0;
/// A byte per INTID: the CPU interfaces it goes to. ITARGETSR0..7 (SGIs and
/// PPIs) are read-only and name the reading CPU.
pub const GICD_ITARGETSR: u64 = 0x0800;
/// GICD_SGIR: TargetListFilter (25:24), CPUTargetList (23:16), SGIINTID (3:0).
pub const GICD_SGIR: u64 = 0x0f00;
/// Four words, a byte per SGI: the CPUs it is pending from (clear, set).
pub const GICD_CPENDSGIR: u64 = 0x0f10;
pub const GICD_SPENDSGIR: u64 = 0x0f20;
const SGIR_TARGET_LIST_SHIFT: u32 = 16;

// CPU interface, at the device tree's second `reg`.
pub const GICC_CTLR: u64 = 0x0000;
pub const GICC_PMR: u64 = 0x0004;
pub const GICC_BPR: u64 = 0x0008;
pub const GICC_IAR: u64 = 0x000c;
pub const GICC_EOIR: u64 = 0x0010;
pub const GICC_RPR: u64 = 0x0014;
pub const GICC_HPPIR: u64 = 0x0018;
/// The aliased (Group 1) binary point and end of interrupt.
pub const GICC_ABPR: u64 = 0x001c;
pub const GICC_AEOIR: u64 = 0x0024;
pub const GICC_APR0: u64 = 0x00d0;
pub const GICC_DIR: u64 = 0x1000;
/// GICC_CTLR.EnableGrp0; FIQEn (bit 3) and EOImode (bit 9) stay 0: Group 0
/// as an IRQ, and one GICC_EOIR write drops priority and deactivates.
const GICC_CTLR_ENABLE_GRP0: u32 = 1 << 0;

/// The CPU interface the device tree gave.
static GICC: Global<u64> = Global::new(0);

pub(super) fn configure(gicc: u64) {
    GICC.set(gicc);
}

pub(super) fn cpu_interface() -> u64 {
    GICC.get()
}

pub(super) fn init_distributor() {
    let ctlr = GICD.get() + GICD_CTLR;
    write(ctlr, 0);
    write(ctlr, GICD_CTLR_ENABLE_GRP0);
}

pub(super) fn init_cpu(level_ppis: &[u32]) {
    // The first word of each per-INTID register is banked per CPU: its SGIs
    // and PPIs. Disabled while they are configured.
    let d = GICD.get();
    write(d + GICD_ICENABLER, u32::MAX);
    write(d + GICD_IGROUPR, 0);
    for i in 0..8 {
        write(d + GICD_IPRIORITYR + 4 * i, PRIORITY * 0x0101_0101);
    }
    write(d + GICD_ISENABLER, level_ppis_enable(d + GICD_ICFGR + 4, level_ppis));

    let c = GICC.get();
    write(c + GICC_PMR, 0xff);
    // The smallest binary point an implementation has: every priority bit
    // is a group priority, as ICC_BPR1_EL1 = 0 makes it on a GICv3.
    write(c + GICC_BPR, 0);
    write(c + GICC_CTLR, GICC_CTLR_ENABLE_GRP0);
}

/// The calling CPU's bit among the CPU interfaces, as the distributor sees
/// it (the reading CPU's own ITARGETSR0), else (a uniprocessor GIC reads it
/// as zero) the bit of its Aff0.
fn own_target() -> u32 {
    let v = read(GICD.get() + GICD_ITARGETSR);
    let mask = (v | v >> 8 | v >> 16 | v >> 24) & 0xff;
    if mask != 0 { mask } else { 1 << (cpu::mpidr() & 7) }
}

/// Routes SPI `intid` to the calling CPU (its byte of GICD_ITARGETSR).
pub(super) fn route_here(intid: u32) {
    let targets = GICD.get() + GICD_ITARGETSR + u64::from(intid & !3);
    let shift = 8 * (intid % 4);
    write(targets, (read(targets) & !(0xff << shift)) | (own_target() << shift));
}

/// GICD_SGIR, TargetListFilter 0: the one CPU interface numbered by `mpidr`'s Aff0.
pub(super) fn send_sgi(intid: u32, mpidr: u64) {
    let aff0 = mpidr & 0xff;
    if aff0 >= 8 || mpidr & cpu::MPIDR_AFF_MASK & !0xff != 0 {
        panic!("GICv2 SGI to mpidr {mpidr:#x}: no CPU interface has that number");
    }
    // Our earlier stores must be visible to the CPU the interrupt wakes.
    cpu::dsb();
    let target = 1u32 << aff0;
    write(GICD.get() + GICD_SGIR, (target << SGIR_TARGET_LIST_SHIFT) | (intid & 0xf));
}

/// GICC_IAR.
pub(super) fn acknowledge() -> u64 {
    u64::from(read(GICC.get() + GICC_IAR))
}

/// GICC_EOIR, with the whole IAR value (an SGI's source CPU included).
pub(super) fn complete(iar: u64) {
    write(GICC.get() + GICC_EOIR, iar as u32);
}

/// GICC_HPPIR, whole.
pub(super) fn highest_pending() -> u64 {
    u64::from(read(GICC.get() + GICC_HPPIR))
}
