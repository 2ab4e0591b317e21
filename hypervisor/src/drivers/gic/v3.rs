//! A GICv3 (driver: the `arm-gic` crate): the memory-mapped distributor and redistributors
//! here, this CPU's interface (the ICC_* system registers) in `arch::aarch64::gic_cpuif`.
//!
//! Every physical interrupt is Group 1, acknowledged by polling ICC_IAR1_EL1.

use super::{Error, PPI_HYP_TIMER, PPI_MAINTENANCE, PPI_PMU, PPI_VIRT_TIMER, PRIORITY, SGI_KICK};
use crate::arch::aarch64::cpu::MAX_CPUS;
use crate::arch::aarch64::gic_cpuif;
use crate::platform::Range;
use arm_gic::gicv3::{GicV3, Group};
use arm_gic::{IntId, Trigger, UniqueMmioPointer};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use credit::CpuSet;
use vmm::sync::{Class, Lock};

/// A redistributor's frames are 64 KiB each: RD_base and SGI_base, then VLPI_base and a
/// reserved one where GICR_TYPER.VLPIS says so (GICv4).
const GICR_FRAME: u64 = 0x1_0000;
const GICR_TYPER: u64 = 0x8;
const GICR_TYPER_VLPIS: u64 = 1 << 1;
const GICR_TYPER_LAST: u64 = 1 << 4;
const GICR_SGI_BASE: u64 = GICR_FRAME;
const GICR_ISENABLER0: u64 = 0x100;
const GICR_ICENABLER0: u64 = 0x180;
const GICD_ISPENDR: u64 = 0x200;
const GICD_ICACTIVER: u64 = 0x380;

struct Gic(GicV3<'static>);
// SAFETY: the driver only holds MMIO pointers to the GIC, which are valid on every CPU; all use
// is serialized by the mutex below.
unsafe impl Send for Gic {}

static GIC: Lock<Option<Gic>> = Lock::new(Class::PhysGic, None);
static GICD_BASE: AtomicU64 = AtomicU64::new(0);

/// Per logical CPU: its redistributor's position in the redistributor region, the one whose
/// GICR_TYPER names the CPU's MPIDR (set at boot, read-only after).
static REDISTRIBUTOR: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
/// Per logical CPU: its redistributor's SGI_base frame, for the PPI fast path.
static SGI_FRAME: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// Per logical CPU: its ICC_SGI1R_EL1 routing bits (affinity, range selector, target bit).
static SGI_ROUTE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Initializes the distributor and every redistributor (boot CPU, once). `cpus` are the MPIDR
/// affinities of the logical CPUs, `boot` the index of this one.
///
/// # Safety
/// `dist` and `redist` are the GIC's register frames from the device tree, identity-mapped as
/// device memory, and nothing else drives the GIC.
pub unsafe fn init(dist: Range, redist: Range, cpus: &[u64], boot: usize) -> Result<(), Error> {
    let gicd = NonNull::new(dist.start as *mut _).ok_or(Error::Zero)?;
    let gicr = NonNull::new(redist.start as *mut _).ok_or(Error::Zero)?;
    // SAFETY: the caller's promise: `redist` is the mapped redistributor region.
    let count = unsafe { match_redistributors(redist, cpus) }?;
    // SAFETY: forwarded from the caller (addresses from the device tree, mapped as device).
    let mut gic = unsafe { GicV3::new(UniqueMmioPointer::new(gicd), gicr, count) }
        .map_err(|_| Error::NotGicV3)?;
    gic.setup(REDISTRIBUTOR[boot].load(Ordering::Relaxed));
    GICD_BASE.store(dist.start, Ordering::Release);
    *GIC.lock() = Some(Gic(gic));
    Ok(())
}

/// Walks the redistributor region up to GICR_TYPER.Last, and records for each CPU in `cpus`
/// the redistributor whose affinity is the CPU's MPIDR: the device tree's CPU order and the
/// redistributors' need not agree. Returns how many redistributors the region holds.
///
/// # Safety
/// `region` is the redistributor region, identity-mapped as device memory.
unsafe fn match_redistributors(region: Range, cpus: &[u64]) -> Result<usize, Error> {
    let mut found = CpuSet::EMPTY;
    let mut offset = 0;
    let mut count = 0;
    while offset + 2 * GICR_FRAME <= region.size {
        let frame = region.start + offset;
        // SAFETY: GICR_TYPER of a redistributor inside the mapped region (the caller's
        // promise); a read has no side effect.
        let typer = unsafe { ((frame + GICR_TYPER) as *const u64).read_volatile() };
        let affinity = typer >> 32;
        // GICR_TYPER holds Aff3.Aff2.Aff1.Aff0 in 32 bits; MPIDR has Aff3 at bit 32.
        let mpidr = (affinity & 0xff_ffff) | ((affinity >> 24) << 32);
        if let Some(cpu) = cpus.iter().position(|&m| m == mpidr) {
            REDISTRIBUTOR[cpu].store(count, Ordering::Relaxed);
            SGI_FRAME[cpu].store(frame + GICR_SGI_BASE, Ordering::Relaxed);
            SGI_ROUTE[cpu].store(gic_cpuif::sgi_route(mpidr), Ordering::Relaxed);
            found.insert(cpu);
        }
        count += 1;
        if typer & GICR_TYPER_LAST != 0 {
            break;
        }
        offset += if typer & GICR_TYPER_VLPIS != 0 { 4 } else { 2 } * GICR_FRAME;
    }
    match (0..cpus.len()).find(|&cpu| !found.contains(cpu)) {
        Some(missing) => Err(Error::NoRedistributor(cpus[missing])),
        None => Ok(count),
    }
}

/// Per-CPU setup: system-register interface, redistributor awake, armhv's PPIs and SGI enabled.
pub fn init_cpu(cpu: usize) {
    let mut guard = GIC.lock();
    let Some(Gic(gic)) = guard.as_mut() else { return };
    let cpu = REDISTRIBUTOR[cpu].load(Ordering::Relaxed);
    gic.init_cpu(cpu);
    gic_cpuif::enable_el2_access();
    for intid in [
        IntId::sgi(SGI_KICK),
        IntId::ppi(PPI_MAINTENANCE - 16),
        IntId::ppi(PPI_HYP_TIMER - 16),
        IntId::ppi(PPI_VIRT_TIMER - 16),
        IntId::ppi(PPI_PMU - 16),
    ] {
        let _ = gic.set_group(intid, Some(cpu), Group::Group1NS);
        let _ = gic.set_interrupt_priority(intid, Some(cpu), PRIORITY);
        if intid.is_ppi() {
            let _ = gic.set_trigger(intid, Some(cpu), Trigger::Level);
        }
        let _ = gic.enable_interrupt(intid, Some(cpu), true);
    }
    gic_cpuif::enable();
}

/// The next pending physical interrupt, acknowledged (ICC_IAR1_EL1), if any.
#[inline]
pub fn acknowledge() -> Option<u32> {
    gic_cpuif::acknowledge()
}

/// Completes an acknowledged interrupt of armhv's own: drops its priority and deactivates it.
#[inline]
pub fn end(intid: u32) {
    gic_cpuif::drop_priority(intid);
    gic_cpuif::deactivate(intid);
}

/// Drops the priority of an acknowledged interrupt (ICC_EOIR1_EL1) but leaves it active: for
/// one forwarded to a guest, which deactivates it.
#[inline]
pub fn drop_priority(intid: u32) {
    gic_cpuif::drop_priority(intid);
}

/// Deactivates an SPI at the distributor, from any CPU: for one left active by a guest that
/// stopped or reset before completing it.
pub fn deactivate_spi(intid: u32) {
    let base = GICD_BASE.load(Ordering::Acquire);
    if base == 0 || !(32..1020).contains(&intid) {
        return;
    }
    let addr = base + GICD_ICACTIVER + u64::from(intid / 32) * 4;
    // SAFETY: `addr` is a distributor register (mapped as device memory at boot); ICACTIVER is
    // write-1-to-clear, so other interrupts are unaffected.
    unsafe { (addr as *mut u32).write_volatile(1 << (intid % 32)) };
}

/// Whether SPI `intid` is pending at the distributor: for a level-sensitive one, whether its
/// line is high, whether or not it is active.
pub fn spi_pending(intid: u32) -> bool {
    let base = GICD_BASE.load(Ordering::Acquire);
    if base == 0 || !(32..1020).contains(&intid) {
        return false;
    }
    let addr = base + GICD_ISPENDR + u64::from(intid / 32) * 4;
    // SAFETY: `addr` is a distributor register (mapped as device memory at boot); reading
    // ISPENDR has no side effect.
    unsafe { (addr as *const u32).read_volatile() & (1 << (intid % 32)) != 0 }
}

/// Routes SPI `intid` to the CPU with affinity `mpidr` as a Group 1 interrupt of the given
/// trigger, and enables it.
pub fn route_spi(intid: u32, mpidr: u64, level: bool) -> Result<(), &'static str> {
    let mut guard = GIC.lock();
    let Some(Gic(gic)) = guard.as_mut() else { return Err("no GIC") };
    let id = IntId::try_from(intid).map_err(|_| "not an interrupt ID")?;
    if !id.is_spi() {
        return Err("not an SPI");
    }
    let trigger = if level { Trigger::Level } else { Trigger::Edge };
    let ok = gic.set_group(id, None, Group::Group1NS).is_ok()
        && gic.set_interrupt_priority(id, None, PRIORITY).is_ok()
        && gic.set_trigger(id, None, trigger).is_ok()
        && gic.distributor().set_routing(id, Some(mpidr)).is_ok()
        && gic.enable_interrupt(id, None, true).is_ok();
    if ok { Ok(()) } else { Err("the GIC does not implement this SPI") }
}

/// Disables SPI `intid` at the distributor.
pub fn disable_spi(intid: u32) {
    let mut guard = GIC.lock();
    if let (Some(Gic(gic)), Ok(id)) = (guard.as_mut(), IntId::try_from(intid)) {
        let _ = gic.enable_interrupt(id, None, false);
    }
}

/// Sends the kick SGI to the physical CPUs in `cpus`: one ICC_SGI1R_EL1 write per run of CPUs
/// (in logical order) that share their affinity above Aff0, a cluster; usually one write.
#[inline]
pub fn kick(cpus: CpuSet) {
    let mut gathered = 0u64;
    for route in cpus.iter().filter_map(|cpu| SGI_ROUTE.get(cpu)) {
        let route = route.load(Ordering::Relaxed);
        if gathered != 0 && !gic_cpuif::same_sgi_group(gathered, route) {
            gic_cpuif::send_sgi(SGI_KICK, gathered);
            gathered = 0;
        }
        gathered |= route;
    }
    if gathered != 0 {
        gic_cpuif::send_sgi(SGI_KICK, gathered);
    }
}

/// Enables or disables a PPI on this CPU's own redistributor, without the driver lock: used on
/// the virtual-timer path, which runs on every tick.
#[inline]
pub fn set_local_ppi(cpu: usize, ppi: u32, enable: bool) {
    let base = SGI_FRAME[cpu].load(Ordering::Relaxed);
    if base == 0 {
        return;
    }
    let reg = if enable { GICR_ISENABLER0 } else { GICR_ICENABLER0 };
    let addr = base + reg;
    // SAFETY: `addr` is a register of this CPU's own redistributor (mapped as device memory at
    // boot); ISENABLER0/ICENABLER0 are write-1-to-set/clear, so other bits are unaffected.
    unsafe { (addr as *mut u32).write_volatile(1 << ppi) };
}
