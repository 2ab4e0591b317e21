//! The physical GICv3, owned by armhv at EL2 (driver: the `arm-gic` crate).
//!
//! Every physical interrupt is Group 1 and taken at EL2 (HCR_EL2.IMO). armhv never unmasks
//! interrupts while it runs: they arrive as guest exits, or wake an idle CPU from WFI, and are
//! then acknowledged here by polling ICC_IAR1_EL1.

use crate::platform::Range;
use arm_gic::gicv3::{GicCpuInterface, GicV3, Group, SgiTarget, SgiTargetGroup};
use arm_gic::{IntId, InterruptGroup, Trigger, UniqueMmioPointer};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use spin::Mutex;

/// SGI armhv sends to make another CPU look at its vCPUs again.
pub const SGI_KICK: u32 = 0;
/// PPIs (architected): the GIC maintenance interrupt, the EL2 physical timer (CNTHP) and the
/// EL1 virtual timer (CNTV).
pub const PPI_MAINTENANCE: u32 = 25;
pub const PPI_HYP_TIMER: u32 = 26;
pub const PPI_VIRT_TIMER: u32 = 27;

/// Priority of every interrupt armhv enables (all equal: no nesting at EL2).
const PRIORITY: u8 = 0x80;
/// Each redistributor: RD_base and SGI_base frames.
const GICR_STRIDE: u64 = 0x2_0000;
const GICR_SGI_BASE: u64 = 0x1_0000;
const GICR_ISENABLER0: u64 = 0x100;
const GICR_ICENABLER0: u64 = 0x180;

struct Gic(GicV3<'static>);
// SAFETY: the driver only holds MMIO pointers to the GIC, which are valid on every CPU; all use
// is serialized by the mutex below.
unsafe impl Send for Gic {}

static GIC: Mutex<Option<Gic>> = Mutex::new(None);
static GICR_BASE: AtomicU64 = AtomicU64::new(0);

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
    *GIC.lock() = Some(Gic(gic));
    Ok(())
}

/// Per-CPU setup: system-register interface, redistributor awake, armhv's PPIs and SGI enabled.
pub fn init_cpu(cpu: usize) {
    let mut guard = GIC.lock();
    let Some(Gic(gic)) = guard.as_mut() else { return };
    gic.init_cpu(cpu);
    // EL1 accesses to ICC_SRE_EL1 trap to EL2 (Enable = 0): the guest's view is emulated.
    GicCpuInterface::enable_system_register_el2(false);
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
    GicCpuInterface::set_priority_mask(0xff);
    GicCpuInterface::enable_group1(true);
}

/// The next pending physical interrupt, acknowledged (ICC_IAR1_EL1), if any.
pub fn acknowledge() -> Option<u32> {
    GicCpuInterface::get_and_acknowledge_interrupt(InterruptGroup::Group1).map(|i| i.raw_value())
}

/// Completes an acknowledged interrupt (ICC_EOIR1_EL1; EOImode 0: drop priority and deactivate).
pub fn end(intid: u32) {
    if let Ok(id) = IntId::try_from(intid) {
        GicCpuInterface::end_interrupt(id, InterruptGroup::Group1);
    }
}

/// Sends the kick SGI to physical CPUs whose bit is set in `cpus` (Aff0 = CPU index).
pub fn kick(cpus: u16) {
    if cpus != 0 {
        let target =
            SgiTarget::List { affinity3: 0, affinity2: 0, affinity1: 0, target_list: cpus };
        let _ =
            GicCpuInterface::send_sgi(IntId::sgi(SGI_KICK), target, SgiTargetGroup::CurrentGroup1);
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
