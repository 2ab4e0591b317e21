//! The guest's virtual timer: programmed by the guest directly (CNTV_*), its expiry turned into
//! virtual PPI 27 by armhv.
//!
//! While the vCPU runs, the physical timer interrupt (PPI 27) fires at EL2; armhv asserts the
//! virtual line and silences the physical PPI until the guest has dealt with the timer (it
//! re-armed, disabled or masked it), checked on every entry. A vCPU that is not loaded (blocked
//! in WFI, or waiting for its CPU) is woken by armhv's own timer at its deadline instead.

use crate::arch::gic;
use crate::arch::{cpu, timer};
use crate::irqdist;
use crate::vcpu::Vcpu;
use crate::vm::Vm;
use vgic::VcpuSet;

/// The guest sees its virtual timer on the architected PPI, the same INTID as the physical one.
const VTIMER_INTID: u32 = guest_abi::map::VTIMER_INTID;
const _: () = assert!(VTIMER_INTID == gic::PPI_VIRT_TIMER);

/// The virtual timer fired: assert the virtual line, silence the physical one. Returns the
/// vCPUs to wake.
pub fn fired(vm: &Vm, vcpu: &mut Vcpu) -> VcpuSet {
    vcpu.vtimer_asserted = true;
    vcpu.vtimer_compare = timer::vtimer_compare();
    gic::set_local_ppi(cpu::current(), gic::PPI_VIRT_TIMER, false);
    let woken = vm.vgic.lock().set_level(VTIMER_INTID, vcpu.id, true);
    irqdist::timer_irq(vm, vcpu.id);
    woken
}

/// Before entry: once the guest has stopped the timer asserting, drop the virtual line and let
/// the physical interrupt through again.
///
/// A guest that falls behind re-arms its timer for a deadline already past: the line never
/// drops, and the vGIC presents the interrupt again after the guest's EOI, with no physical
/// edge. The interrupt distributor still has to count that expiry, or a saturated CPU's
/// periodic stream would look sporadic exactly when it matters.
pub fn sync(vm: &Vm, vcpu: &mut Vcpu) {
    if !vcpu.vtimer_asserted {
        return;
    }
    if !timer::vtimer_asserted() {
        vcpu.vtimer_asserted = false;
        vm.vgic.lock().set_level(VTIMER_INTID, vcpu.id, false);
        gic::set_local_ppi(cpu::current(), gic::PPI_VIRT_TIMER, true);
    } else {
        let compare = timer::vtimer_compare();
        if compare != vcpu.vtimer_compare {
            vcpu.vtimer_compare = compare;
            irqdist::timer_irq(vm, vcpu.id);
        }
    }
}

/// The vCPU's registers were just loaded: the physical PPI follows its virtual line.
pub fn on_load(vcpu: &Vcpu) {
    gic::set_local_ppi(cpu::current(), gic::PPI_VIRT_TIMER, !vcpu.vtimer_asserted);
}

/// When the virtual timer of a vCPU that is not loaded fires, in physical counter ticks.
pub fn saved_deadline(vm: &Vm, vcpu: &Vcpu) -> Option<u64> {
    use gtimer::{CTL_ENABLE, CTL_IMASK};
    (vcpu.el1.cntv_ctl_el0 & (CTL_ENABLE | CTL_IMASK) == CTL_ENABLE)
        .then(|| vcpu.el1.cntv_cval_el0.wrapping_add(vm.cntvoff))
}

/// For a vCPU that is not loaded: if its deadline has passed, assert its virtual timer line.
pub fn check_saved(vm: &Vm, vcpu: &mut Vcpu) -> bool {
    match saved_deadline(vm, vcpu) {
        Some(deadline) if deadline <= timer::now() && !vcpu.vtimer_asserted => {
            vcpu.vtimer_asserted = true;
            vcpu.vtimer_compare = vcpu.el1.cntv_cval_el0;
            vm.vgic.lock().set_level(VTIMER_INTID, vcpu.id, true);
            irqdist::timer_irq(vm, vcpu.id);
            true
        }
        _ => false,
    }
}
