//! This CPU's GICv3 CPU interface, as armhv uses it at EL2: the ICC_* system registers (through
//! `arm-gic`'s `GicCpuInterface` where it has them). The memory-mapped distributor and
//! redistributors are `drivers::gic`'s; the virtual CPU interface (ICH_*) is `vgic_hw`'s.
//!
//! Every physical interrupt is Group 1. EOImode is 1 (split): completing an interrupt is a
//! priority drop ([`drop_priority`]) plus a deactivation ([`deactivate`]).

use arm_gic::gicv3::GicCpuInterface;
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

/// ICC_SGI1R_EL1's routing bits for the CPU of `mpidr`: Aff3, Aff2, Aff1, the range selector
/// (RS = Aff0 / 16) and the CPU's bit in the target list (Aff0 % 16). Written here, not with
/// `arm-gic`'s `SgiTarget`, which has no range selector (CPUs with Aff0 >= 16).
pub fn sgi_route(mpidr: u64) -> u64 {
    let aff0 = mpidr & 0xff;
    let aff1 = (mpidr >> 8) & 0xff;
    let aff2 = (mpidr >> 16) & 0xff;
    let aff3 = (mpidr >> 32) & 0xff;
    (aff3 << 48) | ((aff0 / 16) << 44) | (aff2 << 32) | (aff1 << 16) | (1 << (aff0 % 16))
}

/// Whether two CPUs' [`sgi_route`]s can share one SGI write (they differ only in the list).
pub fn same_sgi_group(a: u64, b: u64) -> bool {
    (a ^ b) & !0xffff == 0
}

/// Sends SGI `sgi` to the CPUs of `route`: [`sgi_route`]s of one group, or-ed together.
pub fn send_sgi(sgi: u32, route: u64) {
    let value = route | (u64::from(sgi & 0xf) << 24);
    // SAFETY: ICC_SGI1R_EL1 only generates a Group 1 SGI to the listed CPUs, which armhv's
    // kick handler expects at any time. The DSB first: a kick tells the other CPU to look at
    // what this one stored (a reschedule flag, a pending interrupt), and a system-register
    // write is not ordered after stores to memory without one.
    unsafe {
        core::arch::asm!(
            "dsb ishst",
            "msr icc_sgi1r_el1, {}",
            in(reg) value,
            options(nostack, preserves_flags)
        )
    };
}
