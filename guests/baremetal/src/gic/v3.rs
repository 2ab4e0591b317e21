//! The GICv3 half of the driver: affinity routing and Group 1 in the
//! distributor, each CPU's redistributor (found by its affinity), SPIs routed
//! by GICD_IROUTER, and the CPU interface through the ICC_* system registers.

use core::arch::asm;

use super::{GICD, GICD_CTLR, PRIORITY, level_ppis_enable, read, write};
use crate::console::Global;
use crate::cpu;

const GICD_CTLR_RWP: u32 = 1 << 31;
/// Affinity routing (ARE_NS, or ARE with a single security state).
const GICD_CTLR_ARE: u32 = 1 << 4;
/// Group 1 enables: bits 1 and 0 are EnableGrp1A and EnableGrp1NS in the
/// Non-secure view of a GIC with two security states, EnableGrp1 and
/// EnableGrp0 with one (QEMU virt without `secure=on`). Setting both covers
/// both layouts; all our interrupts are Group 1, Group 0 stays empty.
const GICD_CTLR_ENABLE_GRP1: u32 = (1 << 1) | (1 << 0);
/// 64 bits per SPI, indexed by INTID.
const GICD_IROUTER: u64 = 0x6000;

// Redistributor, RD_base frame.
const GICR_CTLR: u64 = 0x0000;
const GICR_CTLR_RWP: u32 = 1 << 3;
const GICR_TYPER_LO: u64 = 0x0008;
/// Bits 63:32 of GICR_TYPER: the affinity Aff3.Aff2.Aff1.Aff0 it serves.
const GICR_TYPER_HI: u64 = 0x000c;
const GICR_TYPER_VLPIS: u32 = 1 << 1;
const GICR_TYPER_LAST: u32 = 1 << 4;
const GICR_WAKER: u64 = 0x0014;
const GICR_WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
const GICR_WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;
/// RD_base + SGI_base: 128 KiB per CPU (GICv4 adds two frames: 256 KiB).
const GICR_FRAMES_V3: u64 = 0x2_0000;
const GICR_FRAMES_V4: u64 = 0x4_0000;

// Redistributor, SGI_base frame (64 KiB after RD_base): SGI and PPI configuration.
const SGI_BASE: u64 = 0x1_0000;
const GICR_IGROUPR0: u64 = SGI_BASE + 0x0080;
const GICR_ISENABLER0: u64 = SGI_BASE + 0x0100;
const GICR_ICENABLER0: u64 = SGI_BASE + 0x0180;
const GICR_IPRIORITYR: u64 = SGI_BASE + 0x0400;
const GICR_ICFGR1: u64 = SGI_BASE + 0x0c04;

// CPU interface bits.
const ICC_SRE_SRE: u64 = 1 << 0;
const ICC_CTLR_EOIMODE: u64 = 1 << 1;

/// The first redistributor region the device tree gave.
static GICR: Global<u64> = Global::new(0);
static GICR_SIZE: Global<u64> = Global::new(0);

pub(super) fn configure(gicr: u64, gicr_size: u64) {
    GICR.set(gicr);
    GICR_SIZE.set(gicr_size);
}

pub(super) fn init_distributor() {
    let ctlr = GICD.get() + GICD_CTLR;
    // Groups off before affinity routing changes, then both on.
    for value in [0, GICD_CTLR_ARE, GICD_CTLR_ARE | GICD_CTLR_ENABLE_GRP1] {
        write(ctlr, value);
        while read(ctlr) & GICD_CTLR_RWP != 0 {
            core::hint::spin_loop();
        }
    }
}

/// Finds this CPU's redistributor: the frame whose GICR_TYPER affinity is
/// our MPIDR's, walking the region until the frame marked Last.
fn redistributor() -> u64 {
    let mpidr = cpu::mpidr();
    let affinity = ((mpidr >> 8) & 0xff00_0000) | (mpidr & 0xff_ffff);
    let (base, size) = (GICR.get(), GICR_SIZE.get());
    let mut offset = 0;
    while offset + GICR_FRAMES_V3 <= size {
        let rd = base + offset;
        let typer = read(rd + GICR_TYPER_LO);
        if u64::from(read(rd + GICR_TYPER_HI)) == affinity {
            return rd;
        }
        if typer & GICR_TYPER_LAST != 0 {
            break;
        }
        offset += if typer & GICR_TYPER_VLPIS != 0 { GICR_FRAMES_V4 } else { GICR_FRAMES_V3 };
    }
    panic!("no GICv3 redistributor for mpidr {mpidr:#x} in {base:#x}+{size:#x}");
}

pub(super) fn init_cpu(level_ppis: &[u32]) {
    let rd = redistributor();
    // Wake the redistributor: it forwards nothing to a "sleeping" CPU.
    write(rd + GICR_WAKER, read(rd + GICR_WAKER) & !GICR_WAKER_PROCESSOR_SLEEP);
    while read(rd + GICR_WAKER) & GICR_WAKER_CHILDREN_ASLEEP != 0 {
        core::hint::spin_loop();
    }

    // Disable all SGIs/PPIs while configuring them.
    write(rd + GICR_ICENABLER0, u32::MAX);
    while read(rd + GICR_CTLR) & GICR_CTLR_RWP != 0 {
        core::hint::spin_loop();
    }
    write(rd + GICR_IGROUPR0, u32::MAX);
    for i in 0..8 {
        write(rd + GICR_IPRIORITYR + 4 * i, PRIORITY * 0x0101_0101);
    }
    write(rd + GICR_ISENABLER0, level_ppis_enable(rd + GICR_ICFGR1, level_ppis));

    // SAFETY: the ICC_* registers only configure this CPU's interrupt
    // delivery; IRQs stay masked in PSTATE until the guest unmasks them.
    unsafe {
        let mut sre: u64;
        asm!("mrs {v}, icc_sre_el1", v = out(reg) sre, options(nomem, nostack));
        asm!("msr icc_sre_el1, {v}", "isb", v = in(reg) sre | ICC_SRE_SRE, options(nomem, nostack));
        asm!("mrs {v}, icc_sre_el1", v = out(reg) sre, options(nomem, nostack));
        if sre & ICC_SRE_SRE == 0 {
            panic!("GICv3 system register interface unavailable (ICC_SRE_EL1 = {sre:#x})");
        }
        asm!("msr icc_pmr_el1, {v}", v = in(reg) 0xffu64, options(nomem, nostack));
        asm!("msr icc_bpr1_el1, xzr", options(nomem, nostack));
        // EOImode 0: one ICC_EOIR1_EL1 write both drops priority and deactivates.
        let mut ctlr: u64;
        asm!("mrs {v}, icc_ctlr_el1", v = out(reg) ctlr, options(nomem, nostack));
        ctlr &= !ICC_CTLR_EOIMODE;
        asm!("msr icc_ctlr_el1, {v}", v = in(reg) ctlr, options(nomem, nostack));
        asm!("msr icc_igrpen1_el1, {v}", "isb", v = in(reg) 1u64, options(nomem, nostack));
    }
}

/// Routes SPI `intid` to the calling CPU (GICD_IROUTER: its affinity).
pub(super) fn route_here(intid: u32) {
    let aff = cpu::affinity();
    let route = GICD.get() + GICD_IROUTER + 8 * u64::from(intid);
    write(route, aff as u32 & 0x00ff_ffff);
    write(route + 4, (aff >> 32) as u32);
}

/// ICC_SGI1R_EL1: Aff3, Aff2, Aff1, Aff0's range selector and its bit in the
/// target list.
pub(super) fn send_sgi(intid: u32, mpidr: u64) {
    let aff = |shift: u32| (mpidr >> shift) & 0xff;
    let aff0 = aff(0);
    let value = (aff(32) << 48)
        | ((aff0 >> 4) << 44)
        | (aff(16) << 32)
        | (u64::from(intid & 0xf) << 24)
        | (aff(8) << 16)
        | (1 << (aff0 & 0xf));
    // SAFETY: generating an SGI has no memory effect for this CPU; `dsb`
    // makes our earlier stores visible to the CPU the interrupt wakes.
    unsafe { asm!("dsb sy", "msr icc_sgi1r_el1, {v}", "isb", v = in(reg) value, options(nostack)) };
}

/// ICC_IAR1_EL1.
pub(super) fn acknowledge() -> u64 {
    let iar: u64;
    // SAFETY: acknowledging only changes the GIC's state for that interrupt
    // (pending -> active).
    unsafe { asm!("mrs {v}, icc_iar1_el1", v = out(reg) iar, options(nomem, nostack)) };
    iar
}

/// ICC_EOIR1_EL1.
pub(super) fn complete(iar: u64) {
    // SAFETY: completes an interrupt this CPU acknowledged.
    unsafe { asm!("msr icc_eoir1_el1, {v}", v = in(reg) iar, options(nomem, nostack)) };
}

/// ICC_HPPIR1_EL1, whole.
pub(super) fn highest_pending() -> u64 {
    let v: u64;
    // SAFETY: reading ICC_HPPIR1_EL1 has no side effects.
    unsafe { asm!("mrs {v}, icc_hppir1_el1", v = out(reg) v, options(nomem, nostack)) };
    v
}
