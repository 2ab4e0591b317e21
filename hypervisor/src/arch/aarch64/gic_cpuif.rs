//! This CPU's GICv3 CPU interface, as armhv uses it at EL2: the ICC_* system registers (through
//! `arm-gic`'s `GicCpuInterface` where it has them). The memory-mapped distributor and
//! redistributors are `drivers::gic`'s; the virtual CPU interface (ICH_*) is `vgic_hw`'s.
//!
//! Every physical interrupt is Group 1. EOImode is 1 (split): completing an interrupt is a
//! priority drop ([`drop_priority`]) plus a deactivation ([`deactivate`]).

use arm_gic::gicv3::{GicCpuInterface, SgiTarget, SgiTargetGroup};
use arm_gic::{IntId, InterruptGroup};

/// ICC_CTLR_EL1.EOImode
const ICC_CTLR_EOIMODE: u64 = 1 << 1;

/// ICC_SRE_EL2: the system-register interface at EL2, with EL1 accesses to ICC_SRE_EL1 trapping
/// (Enable = 0): the guest's view of it is emulated.
pub fn enable_el2_access() {
    GicCpuInterface::enable_system_register_el2(false);
}

/// Opens the priority mask, splits completion in two (EOImode 1) and enables Group 1: from here
/// on interrupts this CPU's redistributor forwards are pending for [`acknowledge`].
pub fn enable() {
    GicCpuInterface::set_priority_mask(0xff);
    // SAFETY: ICC_CTLR_EL1 (at EL2: the non-secure CPU interface's control) only changes how
    // this CPU completes interrupts; nothing is in flight during setup.
    unsafe {
        core::arch::asm!(
            "mrs {t}, icc_ctlr_el1",
            "orr {t}, {t}, {mode}",
            "msr icc_ctlr_el1, {t}",
            "isb",
            t = out(reg) _,
            mode = const ICC_CTLR_EOIMODE,
            options(nomem, nostack)
        );
    }
    GicCpuInterface::enable_group1(true);
}

/// The next pending interrupt, acknowledged (ICC_IAR1_EL1), if any.
#[inline]
pub fn acknowledge() -> Option<u32> {
    GicCpuInterface::get_and_acknowledge_interrupt(InterruptGroup::Group1).map(|i| i.raw_value())
}

/// Drops the priority of an acknowledged interrupt (ICC_EOIR1_EL1) but leaves it active.
#[inline]
pub fn drop_priority(intid: u32) {
    if let Ok(id) = IntId::try_from(intid) {
        GicCpuInterface::end_interrupt(id, InterruptGroup::Group1);
    }
}

/// Deactivates an interrupt this CPU acknowledged (ICC_DIR_EL1).
#[inline]
pub fn deactivate(intid: u32) {
    // SAFETY: deactivates the interrupt this CPU acknowledged and has just finished with.
    unsafe {
        core::arch::asm!("msr icc_dir_el1, {}", in(reg) u64::from(intid), options(nomem, nostack))
    };
}

/// Sends SGI `sgi` to the physical CPUs whose bit is set in `cpus` (Aff0 = CPU index;
/// ICC_SGI1R_EL1).
pub fn send_sgi(sgi: u32, cpus: u16) {
    let target = SgiTarget::List { affinity3: 0, affinity2: 0, affinity1: 0, target_list: cpus };
    let _ = GicCpuInterface::send_sgi(IntId::sgi(sgi), target, SgiTargetGroup::CurrentGroup1);
}
