//! The physical GICv3, owned by armhv at EL2 (driver: the `arm-gic` crate): the memory-mapped
//! distributor and redistributors here, this CPU's interface (the ICC_* system registers) in
//! `arch::aarch64::gic_cpuif`.
//!
//! Every physical interrupt is Group 1 and taken at EL2 (HCR_EL2.IMO). armhv never unmasks
//! interrupts while it runs: they arrive as guest exits, or wake an idle CPU from WFI, and are
//! then acknowledged here by polling ICC_IAR1_EL1.
//!
//! EOImode is 1 (split): completing an interrupt is a priority drop (ICC_EOIR1_EL1) plus a
//! deactivation (ICC_DIR_EL1). armhv does both for its own interrupts; for a device's interrupt
//! forwarded to a guest it only drops the priority, and the guest's EOI of the hardware-linked
//! virtual interrupt deactivates the physical one.

use crate::arch::aarch64::gic_cpuif;
use crate::platform::Range;
use arm_gic::gicv3::{GicV3, Group};
use arm_gic::{IntId, Trigger, UniqueMmioPointer};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use vmm::sync::{Class, Lock};

/// The SGI armhv kicks other CPUs with and the PPIs it uses: the monitor's numbers.
pub use vmm::arch::{PPI_HYP_TIMER, PPI_MAINTENANCE, PPI_VIRT_TIMER, SGI_KICK};

/// Priority of every interrupt armhv enables (all equal: no nesting at EL2).
const PRIORITY: u8 = 0x80;
/// Each redistributor: RD_base and SGI_base frames.
const GICR_STRIDE: u64 = 0x2_0000;
const GICR_SGI_BASE: u64 = 0x1_0000;
const GICR_ISENABLER0: u64 = 0x100;
const GICR_ICENABLER0: u64 = 0x180;
const GICD_ICACTIVER: u64 = 0x380;

struct Gic(GicV3<'static>);
// SAFETY: the driver only holds MMIO pointers to the GIC, which are valid on every CPU; all use
// is serialized by the mutex below.
unsafe impl Send for Gic {}

static GIC: Lock<Option<Gic>> = Lock::new(Class::PhysGic, None);
static GICR_BASE: AtomicU64 = AtomicU64::new(0);
static GICD_BASE: AtomicU64 = AtomicU64::new(0);

/// Initializes the distributor and every redistributor (boot CPU, once).
///
/// # Safety
/// `dist` and `redist` are the GIC's register frames from the device tree, identity-mapped as
/// device memory, and nothing else drives the GIC.
pub unsafe fn init(dist: Range, redist: Range, cpus: usize) -> Result<(), &'static str> {
    let gicd = NonNull::new(dist.start as *mut _).ok_or("GIC distributor at address 0")?;
    let gicr = NonNull::new(redist.start as *mut _).ok_or("GIC redistributor at address 0")?;
    // SAFETY: forwarded from the caller (addresses from the device tree, mapped as device).
    let mut gic = unsafe { GicV3::new(UniqueMmioPointer::new(gicd), gicr, cpus) }
        .map_err(|_| "the GIC redistributor region does not look like a GICv3's")?;
    gic.setup(0);
    GICR_BASE.store(redist.start, Ordering::Release);
    GICD_BASE.store(dist.start, Ordering::Release);
    *GIC.lock() = Some(Gic(gic));
    Ok(())
}

/// Per-CPU setup: system-register interface, redistributor awake, armhv's PPIs and SGI enabled.
pub fn init_cpu(cpu: usize) {
    let mut guard = GIC.lock();
    let Some(Gic(gic)) = guard.as_mut() else { return };
    gic.init_cpu(cpu);
    gic_cpuif::enable_el2_access();
    for intid in [
        IntId::sgi(SGI_KICK),
        IntId::ppi(PPI_MAINTENANCE - 16),
        IntId::ppi(PPI_HYP_TIMER - 16),
        IntId::ppi(PPI_VIRT_TIMER - 16),
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
pub fn acknowledge() -> Option<u32> {
    gic_cpuif::acknowledge()
}

/// Completes an acknowledged interrupt of armhv's own: drops its priority and deactivates it.
pub fn end(intid: u32) {
    gic_cpuif::drop_priority(intid);
    gic_cpuif::deactivate(intid);
}

/// Drops the priority of an acknowledged interrupt (ICC_EOIR1_EL1) but leaves it active: for
/// one forwarded to a guest, which deactivates it.
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

/// Sends the kick SGI to physical CPUs whose bit is set in `cpus` (Aff0 = CPU index).
pub fn kick(cpus: u16) {
    if cpus != 0 {
        gic_cpuif::send_sgi(SGI_KICK, cpus);
    }
}

/// Enables or disables a PPI on this CPU's own redistributor, without the driver lock: used on
/// the virtual-timer path, which runs on every tick.
pub fn set_local_ppi(cpu: usize, ppi: u32, enable: bool) {
    let base = GICR_BASE.load(Ordering::Acquire);
    if base == 0 {
        return;
    }
    let reg = if enable { GICR_ISENABLER0 } else { GICR_ICENABLER0 };
    let addr = base + cpu as u64 * GICR_STRIDE + GICR_SGI_BASE + reg;
    // SAFETY: `addr` is a register of this CPU's own redistributor (mapped as device memory at
    // boot); ISENABLER0/ICENABLER0 are write-1-to-set/clear, so other bits are unaffected.
    unsafe { (addr as *mut u32).write_volatile(1 << ppi) };
}
