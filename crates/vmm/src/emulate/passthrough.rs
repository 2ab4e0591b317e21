//! Physical devices assigned to a VM (`passthrough = ["/pl031@9010000"]` in its config).
//!
//! The device's register window is mapped into the VM's Stage-2 at its host address, as
//! Device-nGnRE memory, so the guest drives it without traps. Each of its SPIs is routed to the
//! physical CPU of the VM's vCPU 0 and becomes the virtual SPI with the same INTID, linked to
//! the physical one in the list registers (`ICH_LR.HW`): armhv acknowledges the physical
//! interrupt and only drops its priority, the guest's EOI of the virtual interrupt deactivates
//! it. So a device interrupt costs one exit, and a still-asserted level interrupt cannot fire
//! again before the guest has handled it.
//!
//! Only devices that need no host-side setup (clocks, resets, DMA behind an IOMMU) can be
//! assigned this way: a DMA-capable device could reach any host memory.

use crate::arch::gic;
use crate::vm::{AssignedDevice, Vm};
use crate::wakeups::Wakeups;
use crate::{irqdist, registry, stats};
use addr::{IpaRange, PAGE_SIZE, PhysAddr};
use alloc::format;
use alloc::string::String;
use core::sync::atomic::{AtomicU8, Ordering};
use stage2::{MemAttr, S2Perms, Stage2Table};

/// Highest INTID an SPI can have, plus one.
const INTID_LIMIT: usize = 1020;
/// Per physical INTID: the owning VM's id + 1, or 0.
static OWNER: [AtomicU8; INTID_LIMIT] = [const { AtomicU8::new(0) }; INTID_LIMIT];

/// What a VM's guest-physical map already holds, which an assigned device must not overlap.
pub struct Occupied<'a> {
    pub regions: &'a [IpaRange],
    pub intids: &'a [u32],
    /// SPIs the VM's virtual GIC implements: INTIDs 32..spi_limit.
    pub spi_limit: u32,
}

/// Maps `dev`, the host device at `path`, into `s2` for VM `vm_id`, at its host address.
/// Refuses a device that overlaps the VM's RAM, its emulated devices or another VM's
/// assignment (VMs are built one after another, and `connect` claims the interrupts of each);
/// the caller has checked that it is none of armhv's own.
pub fn assign(
    vm_id: usize,
    path: &str,
    dev: AssignedDevice,
    occupied: &Occupied,
    s2: &mut Stage2Table<crate::frames::TablePages>,
) -> Result<AssignedDevice, String> {
    let why = |what: &str| format!("passthrough {path}: {what}");
    let reg = dev.reg;
    if !reg.start.0.is_multiple_of(PAGE_SIZE) || reg.size == 0 {
        return Err(why("its register window is not page aligned, so it cannot be mapped alone"));
    }
    let window = IpaRange::new(reg.start, reg.size.div_ceil(PAGE_SIZE) * PAGE_SIZE);
    if occupied.regions.iter().any(|r| r.overlaps(&window)) {
        return Err(why("it overlaps the VM's RAM or one of its emulated devices"));
    }
    for &(intid, _) in &dev.interrupts {
        if !(32..occupied.spi_limit).contains(&intid) {
            return Err(why(&format!(
                "its interrupt {intid} is beyond the virtual GIC's SPIs (< {})",
                occupied.spi_limit
            )));
        }
        if occupied.intids.contains(&intid) {
            return Err(why(&format!("its interrupt {intid} is used by an emulated device")));
        }
        let owner = OWNER[intid as usize].load(Ordering::Acquire);
        if owner != 0 && owner as usize != vm_id + 1 {
            return Err(why(&format!("its interrupt {intid} is already assigned to another VM")));
        }
    }
    s2.map(window.start, PhysAddr(window.start.0), window.size, S2Perms::RW, MemAttr::Device)
        .map_err(|e| why(&format!("Stage-2 map: {e}")))?;
    Ok(dev)
}

/// Links the VM's assigned interrupts in its virtual GIC and routes them to the physical CPU of
/// vCPU 0 (at creation, and again after a reset rebuilt the virtual GIC).
pub fn connect(vm: &Vm) {
    for dev in &vm.assigned {
        for &(intid, flags) in &dev.interrupts {
            OWNER[intid as usize].store((vm.id + 1) as u8, Ordering::Release);
            // Device-tree flags 4 and 8: level high / low.
            let level = flags & 0xc != 0;
            vm.vgic.lock().set_hw_link(intid, 0, Some(intid));
            // A guest that reset mid-interrupt never deactivated it.
            gic::deactivate_spi(intid);
            if let Err(e) = gic::route_spi(intid, vm.assigned_route, level) {
                log::error!("{}: interrupt {intid} of {}: {e}", vm.name, dev.node_name);
            }
        }
    }
}

/// A physical interrupt that no armhv driver owns: if it belongs to a device assigned to a VM,
/// make the virtual SPI pending (its deactivation is the guest's), record the vCPUs to wake in
/// `wake` and say so.
pub fn forward(intid: u32, wake: &mut Wakeups) -> bool {
    let Some(owner) = OWNER.get(intid as usize).map(|o| o.load(Ordering::Acquire)) else {
        return false;
    };
    if owner == 0 {
        return false;
    }
    gic::drop_priority(intid);
    match registry::get(owner as usize - 1) {
        Some(vm) if !vm.is_stopped() => {
            let woken = vm.vgic.lock().trigger_edge(intid, 0);
            irqdist::passthrough_irq(vm, intid);
            wake.interrupts(vm.id, woken);
            stats::bump(&vm.stats.passthrough_irqs);
        }
        // The VM is not running (yet, or any more): nobody will complete it.
        _ => gic::deactivate_spi(intid),
    }
    true
}

/// The VM stopped: its devices' interrupts go quiet and become free.
pub fn release(vm: &Vm) {
    for dev in &vm.assigned {
        for &(intid, _) in &dev.interrupts {
            gic::disable_spi(intid);
            gic::deactivate_spi(intid);
            OWNER[intid as usize].store(0, Ordering::Release);
        }
    }
}
