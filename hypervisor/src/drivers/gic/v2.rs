//! A GICv2 with the virtualization extensions (GIC-400; QEMU `virt` with `gic-version=2`): the
//! distributor (GICD), this CPU's interface (GICC) and its virtual interface control (GICH),
//! all memory-mapped (ARM IHI 0048B). The GICC and GICH frames are banked: each CPU sees its
//! own at the same address.
//!
//! Written here rather than with `arm-gic`'s `GicV2`, which lacks what a hypervisor needs: the
//! SPI targets (GICD_ITARGETSR), split completion (GICC_CTLR.EOImode, GICC_DIR) and the GICH
//! frame; and its priority write replaces the three neighbouring interrupts' priorities.
//!
//! The functions the monitor's hot paths reach are `#[cold]`: `super` picks this driver or
//! the GICv3's at every call, and the hint keeps the GICv3's path straight (VM Switch on a
//! GICv3, cortex-a76: 1,507 instructions without it, 1,464 with it, 1,457 with the choice
//! compiled out).

use super::{Error, PPI_HYP_TIMER, PPI_MAINTENANCE, PPI_PMU, PPI_VIRT_TIMER, PRIORITY, SGI_KICK};
use crate::arch::aarch64::cpu::{self, MAX_CPUS};
use crate::platform::Range;
use aarch64_cpu::asm::barrier;
use core::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use credit::CpuSet;
use vgic::lr::v2 as lr_v2;
use vmm::sync::{Class, Lock};

// Distributor.
const GICD_CTLR: u64 = 0x000;
const GICD_CTLR_ENABLE: u32 = 1 << 0;
const GICD_TYPER: u64 = 0x004;
const GICD_IGROUPR: u64 = 0x080;
const GICD_ISENABLER: u64 = 0x100;
const GICD_ICENABLER: u64 = 0x180;
const GICD_ISPENDR: u64 = 0x200;
const GICD_ICPENDR: u64 = 0x280;
const GICD_ICACTIVER: u64 = 0x380;
const GICD_IPRIORITYR: u64 = 0x400;
const GICD_ITARGETSR: u64 = 0x800;
const GICD_ICFGR: u64 = 0xc00;
const GICD_SGIR: u64 = 0xf00;
const GICD_SGIR_TARGETS_SHIFT: u32 = 16;

// CPU interface.
const GICC_CTLR: u64 = 0x00;
/// EnableGrp0 (without the Security Extensions), EnableGrp1 (their non-secure view).
const GICC_CTLR_ENABLE: u32 = 1 << 0;
/// EOImode (without the Security Extensions), EOImodeNS (their non-secure view): GICC_EOIR
/// only drops the priority, GICC_DIR deactivates.
const GICC_CTLR_EOIMODE: u32 = 1 << 9;
const GICC_PMR: u64 = 0x04;
const GICC_BPR: u64 = 0x08;
const GICC_IAR: u64 = 0x0c;
const GICC_EOIR: u64 = 0x10;
const GICC_DIR: u64 = 0x1000;
/// GICC_IAR: InterruptID; above it, for an SGI, the CPUID of its sender.
const IAR_INTID: u32 = 0x3ff;
/// INTIDs from here are special (1023: none pending).
const INTID_SPECIAL: u32 = 1020;

// Virtual interface control.
const GICH_HCR: u64 = 0x000;
pub const GICH_HCR_EN: u32 = 1 << 0;
pub const GICH_HCR_UIE: u32 = 1 << 1;
const GICH_VTR: u64 = 0x004;
const GICH_VTR_LIST_REGS: u32 = 0x3f;
const GICH_VMCR: u64 = 0x008;
const GICH_APR: u64 = 0x0f0;
const GICH_LR0: u64 = 0x100;

/// The frames' base addresses, stored by [`init`] before `super` selects this driver (with a
/// release that its acquire pairs with), so every other function here finds them set.
static GICD: AtomicU64 = AtomicU64::new(0);
static GICC: AtomicU64 = AtomicU64::new(0);
static GICH: AtomicU64 = AtomicU64::new(0);

/// Per logical CPU: its MPIDR (to route SPIs by affinity) and its CPU interface's bit in the
/// target lists (GICD_ITARGETSR0 as it reads on that CPU), 0 until the CPU is up.
static MPIDR: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(u64::MAX) }; MAX_CPUS];
static TARGET: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(0) }; MAX_CPUS];
/// Per logical CPU: the GICC_IAR value of the SGI it acknowledged last, which its completion
/// must write back whole (the sender's CPUID included).
static ACKED_SGI: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Serializes the distributor's read-modify-write registers (ICFGR).
static DIST_LOCK: Lock<()> = Lock::new(Class::PhysGic, ());

fn read(frame: &AtomicU64, offset: u64) -> u32 {
    let addr = frame.load(Ordering::Relaxed) + offset;
    // SAFETY: `frame` is one of the GIC's frames, set by `init` from the device tree and
    // identity-mapped as device memory (its caller's promise) before anything here runs, and
    // `offset` is a register inside it. Reads of these registers have no side effect but
    // GICC_IAR's acknowledge, which is this CPU's own.
    unsafe { (addr as *const u32).read_volatile() }
}

fn write(frame: &AtomicU64, offset: u64, value: u32) {
    let addr = frame.load(Ordering::Relaxed) + offset;
    // SAFETY: as in `read`. The distributor's registers written here are write-1-to-set/clear,
    // per-interrupt bytes or serialized by `DIST_LOCK`; GICC and GICH are this CPU's banks.
    unsafe { (addr as *mut u32).write_volatile(value) }
}

fn write_byte(frame: &AtomicU64, offset: u64, value: u8) {
    let addr = frame.load(Ordering::Relaxed) + offset;
    // SAFETY: as in `write`; GICD_IPRIORITYR and GICD_ITARGETSR take byte accesses, which touch
    // one interrupt's field only.
    unsafe { (addr as *mut u8).write_volatile(value) }
}

/// One bit per interrupt: the word of `intid` in the register array at `base`, and its bit.
fn bit_reg(base: u64, intid: u32) -> (u64, u32) {
    (base + u64::from(intid / 32) * 4, 1 << (intid % 32))
}

/// Sets up the distributor (boot CPU, once): every SPI disabled, inactive, Group 0, armhv's
/// priority; then enabled.
///
/// # Safety
/// `dist`, `cpu` and `hyp` are the GIC's frames from the device tree, identity-mapped as device
/// memory, and nothing else drives the GIC.
pub unsafe fn init(dist: Range, cpu: Range, hyp: Range, cpus: &[u64]) -> Result<(), Error> {
    if dist.start == 0 || cpu.start == 0 || hyp.start == 0 {
        return Err(Error::Zero);
    }
    if cpus.len() > 8 {
        return Err(Error::TooManyCpus(cpus.len()));
    }
    if cpu.size < GICC_DIR + 4 {
        return Err(Error::SmallCpuInterface(cpu.size));
    }
    GICD.store(dist.start, Ordering::Relaxed);
    GICC.store(cpu.start, Ordering::Relaxed);
    GICH.store(hyp.start, Ordering::Relaxed);
    for (slot, &mpidr) in MPIDR.iter().zip(cpus) {
        slot.store(mpidr, Ordering::Relaxed);
    }
    write(&GICD, GICD_CTLR, 0);
    let lines = 32 * ((read(&GICD, GICD_TYPER) & 0x1f) + 1);
    for intid in (32..lines).step_by(32) {
        let (reg, _) = bit_reg(0, intid);
        write(&GICD, GICD_ICENABLER + reg, u32::MAX);
        write(&GICD, GICD_ICPENDR + reg, u32::MAX);
        write(&GICD, GICD_ICACTIVER + reg, u32::MAX);
        write(&GICD, GICD_IGROUPR + reg, 0);
    }
    for intid in 32..lines {
        write_byte(&GICD, GICD_IPRIORITYR + u64::from(intid), PRIORITY);
    }
    write(&GICD, GICD_CTLR, GICD_CTLR_ENABLE);
    Ok(())
}

/// Per-CPU setup, on the CPU itself: learns its target-list bit, enables armhv's SGI and PPIs
/// in its bank of the distributor, opens its CPU interface with split completion, and leaves
/// its virtual interface off until a vCPU is loaded.
pub fn init_cpu(index: usize) {
    // ITARGETSR0..7 are read-only: each byte reads as the accessing CPU's own bit.
    let own = read(&GICD, GICD_ITARGETSR) as u8;
    if let Some(slot) = TARGET.get(index) {
        slot.store(own, Ordering::Release);
    }
    write(&GICD, GICD_ICENABLER, u32::MAX);
    write(&GICD, GICD_IGROUPR, 0);
    for intid in [SGI_KICK, PPI_MAINTENANCE, PPI_HYP_TIMER, PPI_VIRT_TIMER, PPI_PMU] {
        write_byte(&GICD, GICD_IPRIORITYR + u64::from(intid), PRIORITY);
        let (reg, bit) = bit_reg(GICD_ISENABLER, intid);
        write(&GICD, reg, bit);
    }
    write(&GICH, GICH_HCR, 0);
    write(&GICC, GICC_PMR, 0xff);
    write(&GICC, GICC_BPR, 0);
    write(&GICC, GICC_CTLR, GICC_CTLR_ENABLE | GICC_CTLR_EOIMODE);
}

/// The next pending interrupt, acknowledged (GICC_IAR), if any.
#[cold]
pub fn acknowledge() -> Option<u32> {
    let iar = read(&GICC, GICC_IAR);
    let intid = iar & IAR_INTID;
    if intid >= INTID_SPECIAL {
        return None;
    }
    if intid < 16 {
        ACKED_SGI[cpu::current()].store(iar, Ordering::Relaxed);
    }
    Some(intid)
}

/// What GICC_EOIR and GICC_DIR take for `intid`: an SGI's whole GICC_IAR value.
fn completion_value(intid: u32) -> u32 {
    if intid < 16 { ACKED_SGI[cpu::current()].load(Ordering::Relaxed) } else { intid }
}

/// Drops the priority and deactivates an interrupt this CPU acknowledged.
#[cold]
pub fn end(intid: u32) {
    let value = completion_value(intid);
    write(&GICC, GICC_EOIR, value);
    write(&GICC, GICC_DIR, value);
}

/// Drops the priority of an interrupt this CPU acknowledged, leaving it active.
#[cold]
pub fn drop_priority(intid: u32) {
    write(&GICC, GICC_EOIR, completion_value(intid));
}

fn is_spi(intid: u32) -> bool {
    (32..INTID_SPECIAL).contains(&intid)
}

pub fn deactivate_spi(intid: u32) {
    if is_spi(intid) {
        let (reg, bit) = bit_reg(GICD_ICACTIVER, intid);
        write(&GICD, reg, bit);
    }
}

pub fn spi_pending(intid: u32) -> bool {
    if !is_spi(intid) {
        return false;
    }
    let (reg, bit) = bit_reg(GICD_ISPENDR, intid);
    read(&GICD, reg) & bit != 0
}

/// Targets SPI `intid` at the CPU of `mpidr`, which must be up, sets its trigger and enables
/// it.
pub fn route_spi(intid: u32, mpidr: u64, level: bool) -> Result<(), &'static str> {
    if !is_spi(intid) {
        return Err("not an SPI");
    }
    let cpu = MPIDR
        .iter()
        .position(|m| m.load(Ordering::Relaxed) == mpidr)
        .ok_or("no CPU has that MPIDR")?;
    let target = TARGET[cpu].load(Ordering::Acquire);
    if target == 0 {
        return Err("that CPU has not started");
    }
    {
        let _serialized = DIST_LOCK.lock();
        // ICFGR: two bits per interrupt, the upper one set for edge-triggered.
        let reg = GICD_ICFGR + u64::from(intid / 16) * 4;
        let bit = 2 << ((intid % 16) * 2);
        let cfg = read(&GICD, reg);
        write(&GICD, reg, if level { cfg & !bit } else { cfg | bit });
    }
    write_byte(&GICD, GICD_IPRIORITYR + u64::from(intid), PRIORITY);
    write_byte(&GICD, GICD_ITARGETSR + u64::from(intid), target);
    let (reg, bit) = bit_reg(GICD_ISENABLER, intid);
    write(&GICD, reg, bit);
    if read(&GICD, reg) & bit == 0 {
        return Err("the GIC does not implement this SPI");
    }
    Ok(())
}

pub fn disable_spi(intid: u32) {
    if is_spi(intid) {
        let (reg, bit) = bit_reg(GICD_ICENABLER, intid);
        write(&GICD, reg, bit);
    }
}

/// Sends the kick SGI to the CPUs in `cpus`: one GICD_SGIR write with their target bits.
#[cold]
pub fn kick(cpus: CpuSet) {
    let targets = cpus
        .iter()
        .filter_map(|c| TARGET.get(c))
        .fold(0u32, |acc, t| acc | u32::from(t.load(Ordering::Relaxed)));
    if targets == 0 {
        return;
    }
    // A kick tells the other CPU to look at what this one stored (a reschedule flag, a pending
    // interrupt): those stores are observed before the SGI.
    barrier::dmb(barrier::ISHST);
    write(&GICD, GICD_SGIR, (targets << GICD_SGIR_TARGETS_SHIFT) | SGI_KICK);
}

/// Enables or disables PPI `ppi` (an INTID) of the calling CPU: its bank of GICD_I[SC]ENABLER0.
#[cold]
pub fn set_local_ppi(ppi: u32, enable: bool) {
    let (reg, bit) = bit_reg(if enable { GICD_ISENABLER } else { GICD_ICENABLER }, ppi);
    write(&GICD, reg, bit);
}

// The virtual interface control (GICH), this CPU's bank. List registers are given and returned
// in the model's (ICH_LR<n>_EL2) format, translated here.

pub fn lr_count() -> usize {
    let n = (read(&GICH, GICH_VTR) & GICH_VTR_LIST_REGS) as usize + 1;
    n.min(vmm::arch::MAX_LRS)
}

#[cold]
pub fn read_lr(n: usize) -> u64 {
    lr_v2::from_gich(read(&GICH, GICH_LR0 + 4 * n as u64))
}

#[cold]
pub fn write_lr(n: usize, value: u64) {
    write(&GICH, GICH_LR0 + 4 * n as u64, lr_v2::to_gich(value))
}

#[cold]
pub fn write_hcr(value: u32) {
    write(&GICH, GICH_HCR, value)
}

#[cold]
pub fn read_vmcr() -> u32 {
    read(&GICH, GICH_VMCR)
}

#[cold]
pub fn write_vmcr(value: u32) {
    write(&GICH, GICH_VMCR, value)
}

#[cold]
pub fn read_apr() -> u32 {
    read(&GICH, GICH_APR)
}

#[cold]
pub fn write_apr(value: u32) {
    write(&GICH, GICH_APR, value)
}
