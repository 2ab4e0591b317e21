//! A small GIC driver for GICv3 (`v3`) and GICv2 (`v2`): the distributor, each
//! CPU's SGIs and PPIs, SPIs routed to one CPU, acknowledge and completion. The
//! device tree names the version (`machine::discover` calls `configure_v3` or
//! `configure_v2`); every function here picks its half from it, so guests call
//! one API on either. The IRQ handler itself is the guest's (`entry!`); it uses
//! `acknowledge` and `complete`.
//!
//! Every interrupt goes to the group a guest is expected to use: Group 1 on a
//! GICv3 (the ICC_*1_EL1 registers), Group 0 on a GICv2 (what Linux's GICv2
//! driver uses, and what a virtual GICv2 resets to), signalled as an IRQ either
//! way. Both run in EOImode 0: `complete` drops the priority and deactivates.
//!
//! IRQs stay masked (PSTATE.I) except where a guest unmasks them (`wait_for`,
//! `cpu::irqs_on`), so an interrupt lands only where one is awaited.
//!
//! Every MMIO access is 32 bits wide (the 64-bit GICR_TYPER and GICD_IROUTER
//! are accessed as two halves, byte-wide fields by read-modify-write), which
//! both versions allow for every register and emulators all accept.

use core::arch::asm;
use core::fmt;

use crate::console::Global;
use crate::time;

pub mod v2;
pub mod v3;

/// INTIDs 1020..1023 are special (1023: spurious): nothing to complete.
pub const INTID_SPECIAL: u32 = 1020;
/// Priority of every interrupt: anything below the priority mask (0xff) is
/// signalled, and a GICv2 with as few as 5 priority bits keeps it as it is.
const PRIORITY: u32 = 0xa0;

// Distributor registers at the same offsets in both versions.
const GICD_CTLR: u64 = 0x0000;
/// GICD_TYPER: ITLinesNumber, SecurityExtn, ... (read-only).
pub const GICD_TYPER: u64 = 0x0004;
// One bit (two for ICFGR, a byte for priority) per INTID.
const GICD_IGROUPR: u64 = 0x0080;
const GICD_ISENABLER: u64 = 0x0100;
const GICD_ICENABLER: u64 = 0x0180;
const GICD_IPRIORITYR: u64 = 0x0400;
const GICD_ICFGR: u64 = 0x0c00;

/// The GIC architecture the device tree named.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Version {
    V2,
    V3,
}

impl Version {
    /// `v2` or `v3`, as the guests print it.
    pub fn name(self) -> &'static str {
        match self {
            Version::V2 => "v2",
            Version::V3 => "v3",
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Set once by `configure_*`, from the device tree, before any other CPU runs.
static VERSION: Global<Option<Version>> = Global::new(None);
/// The distributor's base (0: no GIC).
static GICD: Global<u64> = Global::new(0);

fn read(addr: u64) -> u32 {
    // SAFETY: `addr` is a register of the GIC frames the device tree gave;
    // the registers read here have no read side effects (but GICC_IAR, whose
    // effect on the interrupt is the point of reading it).
    unsafe { (addr as *const u32).read_volatile() }
}

fn write(addr: u64, value: u32) {
    // SAFETY: `addr` is a GIC register; writing it configures only the
    // interrupt controller, no memory Rust knows about.
    unsafe { (addr as *mut u32).write_volatile(value) }
}

/// Records a GICv3: the distributor and the first redistributor region.
pub fn configure_v3(gicd: u64, gicr: u64, gicr_size: u64) {
    v3::configure(gicr, gicr_size);
    GICD.set(gicd);
    VERSION.set(Some(Version::V3));
}

/// Records a GICv2: the distributor and the CPU interface.
pub fn configure_v2(gicd: u64, gicc: u64) {
    v2::configure(gicc);
    GICD.set(gicd);
    VERSION.set(Some(Version::V2));
}

/// The GIC the device tree named, if it named one this driver knows.
pub fn version() -> Option<Version> {
    VERSION.get()
}

fn is_v2() -> bool {
    VERSION.get() == Some(Version::V2)
}

/// True if the device tree named a GIC (GICv3: distributor and
/// redistributors; GICv2: distributor and CPU interface).
pub fn present() -> bool {
    VERSION.get().is_some() && GICD.get() != 0
}

/// The distributor's base address (0 without a GIC).
pub fn distributor() -> u64 {
    GICD.get()
}

/// The GICv2 CPU interface's base address (0 on a GICv3, whose CPU interface
/// is the ICC_* system registers).
pub fn cpu_interface() -> u64 {
    if is_v2() { v2::cpu_interface() } else { 0 }
}

/// Turns the distributor on (once, on one CPU): GICv3 affinity routing and
/// Group 1, or GICv2 Group 0.
pub fn init_distributor() {
    if is_v2() { v2::init_distributor() } else { v3::init_distributor() }
}

/// Sets up the calling CPU's SGIs and PPIs and its CPU interface: every SGI
/// and the level-sensitive PPIs `level_ppis` (INTIDs 16..31; others are
/// ignored) enabled, then signalled to this CPU, in EOImode 0. Each CPU calls
/// it for itself (secondaries every time they start).
pub fn init_cpu(level_ppis: &[u32]) {
    if is_v2() { v2::init_cpu(level_ppis) } else { v3::init_cpu(level_ppis) }
}

/// The enable bits of the SGIs and of the PPIs in `level_ppis` (one word, bit
/// = INTID), after making those PPIs level-sensitive in the ICFGR1 at `icfgr1`
/// (GICR_ICFGR1 or the banked GICD_ICFGR1).
fn level_ppis_enable(icfgr1: u64, level_ppis: &[u32]) -> u32 {
    let mut enable = 0xffff; // SGIs 0..15
    for &intid in level_ppis.iter().filter(|i| (16..32).contains(*i)) {
        // A level: clear the PPI's "edge" bit (Int_config[1]). A GICv2 may
        // hold PPI configuration read-only; the write is then ignored.
        let edge_bit = 1 << (2 * (intid - 16) + 1);
        write(icfgr1, read(icfgr1) & !edge_bit);
        enable |= 1 << intid;
    }
    enable
}

/// Routes SPI `intid` to the calling CPU and enables it; `level`-sensitive
/// or edge-triggered.
pub fn enable_spi(intid: u32, level: bool) {
    let d = GICD.get();
    let (word, bit) = (u64::from(intid / 32) * 4, 1 << (intid % 32));
    let group = d + GICD_IGROUPR + word;
    write(group, if is_v2() { read(group) & !bit } else { read(group) | bit });
    let prio = d + GICD_IPRIORITYR + u64::from(intid & !3);
    let shift = 8 * (intid % 4);
    write(prio, (read(prio) & !(0xff << shift)) | (PRIORITY << shift));
    let cfg = d + GICD_ICFGR + u64::from(intid / 16) * 4;
    let edge_bit = 1 << (2 * (intid % 16) + 1);
    let old = read(cfg);
    write(cfg, if level { old & !edge_bit } else { old | edge_bit });
    if is_v2() {
        v2::route_here(intid)
    } else {
        v3::route_here(intid)
    }
    write(d + GICD_ISENABLER + word, bit);
}

/// Disables SPI `intid` in the distributor.
pub fn disable_spi(intid: u32) {
    let (word, bit) = (u64::from(intid / 32) * 4, 1 << (intid % 32));
    write(GICD.get() + GICD_ICENABLER + word, bit);
}

/// Sends SGI `intid` to the CPU with affinity `mpidr` (GICv3: ICC_SGI1R_EL1;
/// GICv2: GICD_SGIR to the CPU interface numbered by its Aff0).
pub fn send_sgi(intid: u32, mpidr: u64) {
    if is_v2() { v2::send_sgi(intid, mpidr) } else { v3::send_sgi(intid, mpidr) }
}

/// Acknowledges the highest-priority pending interrupt: the whole IAR value
/// (ICC_IAR1_EL1, or GICC_IAR with an SGI's source CPU in bits 12:10), for
/// `complete`. Its INTID (`intid_of`) may be special (>= INTID_SPECIAL:
/// nothing to complete).
pub fn acknowledge() -> u64 {
    if is_v2() { v2::acknowledge() } else { v3::acknowledge() }
}

/// Completes an interrupt `acknowledge` returned, given the whole IAR value
/// (EOImode 0: priority drop and deactivation in one write of the EOIR).
pub fn complete(iar: u64) {
    if is_v2() { v2::complete(iar) } else { v3::complete(iar) }
}

/// The INTID field of an IAR or HPPIR value (GICv2: without the source CPU).
pub fn intid_of(value: u64) -> u32 {
    if is_v2() { (value & 0x3ff) as u32 } else { (value & 0xff_ffff) as u32 }
}

/// The highest-priority pending interrupt's INTID (1023 if none), without
/// acknowledging it.
pub fn highest_pending() -> u32 {
    intid_of(if is_v2() { v2::highest_pending() } else { v3::highest_pending() })
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
