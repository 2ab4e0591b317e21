//! A small GICv3 driver: the distributor (affinity routing, Group 1 on), each
//! CPU's redistributor (SGIs and the PPIs a guest asks for), SPIs routed to one
//! CPU, and the CPU interface through the ICC_* system registers. The IRQ
//! handler itself is the guest's (`entry!`); it uses `acknowledge` and `complete`.
//!
//! IRQs stay masked (PSTATE.I) except where a guest unmasks them (`wait_for`,
//! `cpu::irqs_on`), so an interrupt lands only where one is awaited.
//!
//! Every MMIO access is 32 bits wide (the 64-bit GICR_TYPER is read as two
//! halves), which GICv3 allows for every register and emulators all accept.

use core::arch::asm;

use crate::console::Global;
use crate::cpu;
use crate::time;

/// INTIDs 1020..1023 are special (1023: spurious): nothing to complete.
pub const INTID_SPECIAL: u32 = 1020;
/// Priority of every interrupt: anything below ICC_PMR_EL1 (0xff) is signalled.
const PRIORITY: u32 = 0xa0;

// Distributor.
const GICD_CTLR: u64 = 0x0000;
const GICD_CTLR_RWP: u32 = 1 << 31;
/// Affinity routing (ARE_NS, or ARE with a single security state).
const GICD_CTLR_ARE: u32 = 1 << 4;
/// Group 1 enables: bits 1 and 0 are EnableGrp1A and EnableGrp1NS in the
/// Non-secure view of a GIC with two security states, EnableGrp1 and
/// EnableGrp0 with one (QEMU virt without `secure=on`). Setting both covers
/// both layouts; all our interrupts are Group 1, Group 0 stays empty.
const GICD_CTLR_ENABLE_GRP1: u32 = (1 << 1) | (1 << 0);
/// GICD_TYPER: ITLinesNumber, SecurityExtn, ... (read-only).
pub const GICD_TYPER: u64 = 0x0004;
// SPI configuration: one bit (two for ICFGR, a byte for priority) per INTID.
const GICD_IGROUPR: u64 = 0x0080;
const GICD_ISENABLER: u64 = 0x0100;
const GICD_ICENABLER: u64 = 0x0180;
const GICD_IPRIORITYR: u64 = 0x0400;
const GICD_ICFGR: u64 = 0x0c00;
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

/// Where the device tree says the GIC is (0: no GICv3).
static GICD: Global<u64> = Global::new(0);
static GICR: Global<u64> = Global::new(0);
static GICR_SIZE: Global<u64> = Global::new(0);

fn read(addr: u64) -> u32 {
    // SAFETY: `addr` is a register of the GIC frames the device tree gave;
    // the registers read here have no read side effects.
    unsafe { (addr as *const u32).read_volatile() }
}

fn write(addr: u64, value: u32) {
    // SAFETY: `addr` is a GIC register; writing it configures only the
    // interrupt controller, no memory Rust knows about.
    unsafe { (addr as *mut u32).write_volatile(value) }
}

/// Records the GICv3 frames from the device tree: the distributor and the
/// first redistributor region.
pub fn configure(gicd: u64, gicr: u64, gicr_size: u64) {
    GICD.set(gicd);
    GICR.set(gicr);
    GICR_SIZE.set(gicr_size);
}

/// True if the device tree named a GICv3 (distributor and redistributors).
pub fn present() -> bool {
    GICD.get() != 0 && GICR_SIZE.get() != 0
}

/// The distributor's base address (0 without a GICv3).
pub fn distributor() -> u64 {
    GICD.get()
}

/// Turns on affinity routing and Group 1 in the distributor (once, on one CPU).
pub fn init_distributor() {
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

/// Sets up the calling CPU's redistributor and CPU interface: every SGI and
/// the level-sensitive PPIs `level_ppis` (INTIDs 16..31; others are ignored)
/// enabled in Group 1, then Group 1 signalled to this CPU, in EOImode 0.
/// Each CPU calls it for itself (secondaries every time they start).
pub fn init_cpu(level_ppis: &[u32]) {
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
    let mut enable = 0xffff; // SGIs 0..15
    for &intid in level_ppis.iter().filter(|i| (16..32).contains(*i)) {
        // A level: clear the PPI's "edge" bit (Int_config[1]).
        let edge_bit = 1 << (2 * (intid - 16) + 1);
        write(rd + GICR_ICFGR1, read(rd + GICR_ICFGR1) & !edge_bit);
        enable |= 1 << intid;
    }
    write(rd + GICR_ISENABLER0, enable);

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

/// Routes SPI `intid` to the calling CPU in Group 1 and enables it;
/// `level`-sensitive or edge-triggered.
pub fn enable_spi(intid: u32, level: bool) {
    let d = GICD.get();
    let (word, bit) = (u64::from(intid / 32) * 4, 1 << (intid % 32));
    write(d + GICD_IGROUPR + word, read(d + GICD_IGROUPR + word) | bit);
    let prio = d + GICD_IPRIORITYR + u64::from(intid & !3);
    let shift = 8 * (intid % 4);
    write(prio, (read(prio) & !(0xff << shift)) | (PRIORITY << shift));
    let cfg = d + GICD_ICFGR + u64::from(intid / 16) * 4;
    let edge_bit = 1 << (2 * (intid % 16) + 1);
    let old = read(cfg);
    write(cfg, if level { old & !edge_bit } else { old | edge_bit });
    let aff = cpu::affinity();
    let route = d + GICD_IROUTER + 8 * u64::from(intid);
    write(route, aff as u32 & 0x00ff_ffff);
    write(route + 4, (aff >> 32) as u32);
    write(d + GICD_ISENABLER + word, bit);
}

/// Disables SPI `intid` in the distributor.
pub fn disable_spi(intid: u32) {
    let (word, bit) = (u64::from(intid / 32) * 4, 1 << (intid % 32));
    write(GICD.get() + GICD_ICENABLER + word, bit);
}

/// Sends SGI `intid` to the CPU with affinity `mpidr` (ICC_SGI1R_EL1: Aff3,
/// Aff2, Aff1, Aff0's range selector and its bit in the target list).
pub fn send_sgi(intid: u32, mpidr: u64) {
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

/// Acknowledges the highest-priority pending interrupt: ICC_IAR1_EL1, whose
/// INTID (`intid_of`) may be special (>= INTID_SPECIAL: nothing to complete).
pub fn acknowledge() -> u64 {
    let iar: u64;
    // SAFETY: acknowledging only changes the GIC's state for that interrupt
    // (pending -> active).
    unsafe { asm!("mrs {v}, icc_iar1_el1", v = out(reg) iar, options(nomem, nostack)) };
    iar
}

/// Completes an interrupt `acknowledge` returned (EOImode 0: priority drop
/// and deactivation in one write to ICC_EOIR1_EL1).
pub fn complete(iar: u64) {
    // SAFETY: completes an interrupt this CPU acknowledged.
    unsafe { asm!("msr icc_eoir1_el1, {v}", v = in(reg) iar, options(nomem, nostack)) };
}

/// The INTID field of an ICC_IAR1_EL1 or ICC_HPPIR1_EL1 value.
pub fn intid_of(value: u64) -> u32 {
    (value & 0xff_ffff) as u32
}

/// The highest-priority pending Group 1 interrupt (ICC_HPPIR1_EL1's INTID;
/// 1023 if none), without acknowledging it.
pub fn highest_pending() -> u32 {
    let v: u64;
    // SAFETY: reading ICC_HPPIR1_EL1 has no side effects.
    unsafe { asm!("mrs {v}, icc_hppir1_el1", v = out(reg) v, options(nomem, nostack)) };
    intid_of(v)
}

/// Takes the interrupts pending now: unmasks IRQs for one instruction
/// boundary (`isb`) and masks them again.
pub fn take_pending() {
    // SAFETY: the IRQ vector saves and restores everything it touches; the
    // handler may change globals, hence no `nomem`.
    unsafe { asm!("msr daifclr, #2", "isb", "msr daifset, #2", options(nostack)) };
}

fn wfi() {
    // SAFETY: `wfi` only waits for an interrupt.
    unsafe { asm!("wfi", options(nomem, nostack)) };
}

/// Takes interrupts and sleeps in `wfi` until `done()`, or until the counter
/// passes `deadline` (false). The check runs with IRQs masked: an interrupt
/// arriving between it and `wfi` stays pending, and a pending interrupt wakes
/// `wfi` even while masked, so no wake-up is lost. Only a wake-up (an
/// interrupt) rechecks the deadline: arm a timer for it.
pub fn wait_for(deadline: Option<u64>, done: impl Fn() -> bool) -> bool {
    loop {
        take_pending();
        if done() {
            return true;
        }
        if deadline.is_some_and(time::passed) {
            return false;
        }
        wfi();
    }
}
