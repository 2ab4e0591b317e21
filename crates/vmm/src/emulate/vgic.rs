//! A VM's virtual GIC: the portable model (crate `vgic`) behind the guest's distributor (and,
//! for a GICv3, redistributor) windows, list registers programmed from it on every entry and
//! read back on every exit, the trapped CPU-interface registers of a GICv3 (SGI generation,
//! ICC_SRE_EL1), and kicks to other CPUs.
//!
//! The guest acknowledges and completes virtual interrupts in the hardware's virtual CPU
//! interface without trapping: through ICC_IAR1_EL1/ICC_EOIR1_EL1 on a GICv3, through the
//! GICV frame mapped at its GICC address on a GICv2. A VM's GIC is the host's version.

use crate::arch::{cpu, vgic_hw};
use crate::vcpu::Vcpu;
use crate::vm::Vm;
use crate::{irqdist, stats};
use addr::Ipa;
use core::sync::atomic::{AtomicUsize, Ordering};
use guest_abi::map::{self, GicVersion};
use trap::exit::MmioAccess;
use vdev::{AccessWidth, MmioDevice, MmioError};
use vgic::{Frame, VcpuSet};

// The guest's GIC windows (guest_abi::map) are the model's frames, for as many vCPUs as it has.
const _: () = assert!(
    map::GICD_SIZE == vgic::regs::GICD_SIZE
        && map::GICR_STRIDE == vgic::regs::GICR_STRIDE
        && map::MAX_VCPUS <= vgic::MAX_VCPUS
);

/// List registers in use in the hardware, per physical CPU: slots beyond what the next vCPU
/// needs must be cleared, and only they.
static HW_LRS_USED: [AtomicUsize; cpu::MAX_CPUS] = [const { AtomicUsize::new(0) }; cpu::MAX_CPUS];
static LR_COUNT: AtomicUsize = AtomicUsize::new(0);
static HOST: spin::Once<HostGic> = spin::Once::new();

/// The host's GIC, which the VMs' virtual GICs follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostGic {
    pub version: GicVersion,
    /// A GICv2's virtual CPU interface (GICV), host physical: mapped as each VM's GICC.
    pub virtual_cpu_interface: Option<u64>,
}

/// Records the host's GIC and reads its list-register count once (every CPU has the same
/// GIC); before any VM is built.
pub fn init(host: HostGic) {
    LR_COUNT.store(vgic_hw::lr_count(), Ordering::Relaxed);
    HOST.call_once(|| host);
}

/// What [`init`] recorded (a GICv3 before it).
pub fn host() -> HostGic {
    HOST.get().copied().unwrap_or(HostGic { version: GicVersion::V3, virtual_cpu_interface: None })
}

/// The version of the virtual GIC a VM whose config asks for `wanted` gets: the host's, or an
/// error that says why not.
pub fn version_for(wanted: Option<GicVersion>) -> Result<GicVersion, alloc::string::String> {
    let host = host().version;
    let name = |v| if v == GicVersion::V2 { "GICv2" } else { "GICv3" };
    match wanted {
        Some(w) if w != host => Err(alloc::format!(
            "its config asks for a virtual {} (gic = \"{}\"), but this machine has a {}, whose \
             virtual CPU interface its guests use: remove the gic key, or run it on a machine \
             with a {}",
            name(w),
            if w == GicVersion::V2 { "v2" } else { "v3" },
            name(host),
            name(w),
        )),
        _ => Ok(host),
    }
}

/// An emulated device's interrupt output, as last reported to the virtual GIC: devices answer
/// `MmioDevice::irq_change` with it, so the vGIC lock is taken only when the level changes.
pub struct DeviceIrq {
    intid: u32,
    reported: bool,
}

impl DeviceIrq {
    pub const fn new(intid: u32) -> Self {
        Self { intid, reported: false }
    }

    pub const fn intid(&self) -> u32 {
        self.intid
    }

    /// `(INTID, level)` if `level` differs from what was last reported.
    pub fn change(&mut self, level: bool) -> Option<(u32, bool)> {
        (level != self.reported).then(|| {
            self.reported = level;
            (self.intid, level)
        })
    }
}

/// An emulated device's interrupt line (an SPI) changed level, if `change` says so (the
/// device's `irq_change`: INTID and new level). Returns the vCPUs to wake (once the device
/// lock is released).
///
/// The caller holds the VM's device lock, under which the device changed the level: two CPUs
/// that change one line (a frame delivered, the guest's InterruptACK) then reach the vGIC in
/// the device's order. Applied out of order, a line the device had lowered stayed high in the
/// vGIC, and for an edge-triggered SPI every later rising edge was lost: the guest's network
/// stopped for good.
pub fn set_device_irq(vm: &Vm, change: Option<(u32, bool)>) -> VcpuSet {
    let Some((intid, level)) = change else {
        return VcpuSet::EMPTY;
    };
    let kicks = {
        let mut gic = vm.vgic.lock();
        if level {
            irqdist::device_irq(vm, intid, &mut gic);
        }
        gic.set_level(intid, 0, level)
    };
    if level {
        stats::bump(&vm.stats.device_irqs);
    }
    kicks
}

/// Before entering `vcpu`: the highest-priority deliverable interrupts go into the LRs.
/// Returns the vCPUs that must look at theirs (an interrupt this one cannot take now).
pub fn flush(vm: &Vm, vcpu: &mut Vcpu) -> VcpuSet {
    let st = &mut vcpu.vgic;
    // Nothing changed for this vCPU since its last flush. A change racing with this check
    // kicks the vCPU out again: the vCPU is marked running (`VcpuSlot::set_running`) before
    // this load and the change clears the flag before it looks whether the vCPU runs, all
    // four SeqCst, so at least one of the two sees the other.
    let clean = !cfg!(feature = "all-lrs") && vm.vgic_clean.is_clean(vcpu.id);
    if clean && st.live {
        return VcpuSet::EMPTY; // and the hardware is right: it still holds that flush
    }
    let (used, more_pending, kick) = if clean && st.flushed {
        // Switched back in with nothing changed (a VM switch): that flush is in `st` (the
        // syncs since found the list registers as written, or the model would not be clean).
        (st.used, st.more_pending, VcpuSet::EMPTY)
    } else {
        let n = LR_COUNT.load(Ordering::Relaxed);
        let result = vm.vgic.lock().flush_lrs(vcpu.id, &mut st.lrs[..n]);
        (result.used, result.more_pending, result.kick)
    };
    let hw_used = &HW_LRS_USED[cpu::current()];
    // The `all-lrs` ablation writes every list register, as a hypervisor that does not track
    // which ones hold something must.
    let dirty = if cfg!(feature = "all-lrs") {
        LR_COUNT.load(Ordering::Relaxed)
    } else {
        hw_used.load(Ordering::Relaxed).max(used)
    };
    for i in 0..dirty {
        // Slots past `used` may still hold what the last exit read back (an invalid entry with
        // EOI set keeps the EOI maintenance interrupt asserted): clear them.
        vgic_hw::write_lr(i, if i < used { st.lrs[i] } else { 0 });
    }
    hw_used.store(used, Ordering::Relaxed);
    st.used = used;
    st.more_pending = more_pending;
    st.flushed = true;
    st.live = true;
    let hcr = vgic_hw::HCR_EN | if more_pending { vgic_hw::HCR_UIE } else { 0 };
    vgic_hw::write_hcr(hcr);
    kick
}

/// After an exit: what the guest did with its LRs goes back into the model. Returns the vCPUs
/// to wake (an EOI may let another vCPU's interrupt through).
pub fn sync(vm: &Vm, vcpu: &mut Vcpu) -> VcpuSet {
    let st = &mut vcpu.vgic;
    // The `all-lrs` ablation reads every list register back; the model takes the used ones.
    let read = if cfg!(feature = "all-lrs") { LR_COUNT.load(Ordering::Relaxed) } else { st.used };
    for i in 0..read {
        st.lrs[i] = vgic_hw::read_lr(i);
    }
    if st.used == 0 {
        return VcpuSet::EMPTY;
    }
    vm.vgic.lock().sync_lrs(vcpu.id, &st.lrs[..st.used])
}

pub fn load(vcpu: &Vcpu) {
    vgic_hw::write_vmcr(vcpu.vgic.vmcr);
    vgic_hw::write_ap1r0(vcpu.vgic.ap1r0);
}

pub fn put(vcpu: &mut Vcpu) {
    vcpu.vgic.live = false;
    vcpu.vgic.vmcr = vgic_hw::read_vmcr();
    vcpu.vgic.ap1r0 = vgic_hw::read_ap1r0();
}

/// Where `ipa` falls in the trapped GIC windows of `vm`: the frame and the offset in it. The
/// data-abort fast path asks this before, and instead of, the device bus. (A GICv2's CPU
/// interface is the hardware's, mapped: it never traps.)
#[inline]
pub fn frame_at(ipa: Ipa, vm: &Vm) -> Option<(Frame, u64)> {
    let dist = ipa.0.wrapping_sub(map::GICD_BASE.0);
    if dist < map::GICD_SIZE {
        return Some((Frame::Dist, dist));
    }
    let redist = ipa.0.wrapping_sub(map::GICR_BASE.0);
    (redist < vm.gicr_size).then_some((Frame::Redist, redist))
}

/// A guest load or store to a GIC frame (every one: the data-abort path asks [`frame_at`]
/// before the device bus): performed on the model directly, no bus lookup, no device trait
/// object. Returns the vCPUs to wake (a write may make interrupts deliverable elsewhere).
#[inline(always)]
pub fn mmio(
    vm: &Vm,
    vcpu: &mut Vcpu,
    frame: Frame,
    offset: u64,
    access: MmioAccess,
) -> Result<VcpuSet, MmioError> {
    if access.write {
        let value = access.store_value(vcpu.regs.get(access.reg));
        vm.vgic.lock().frame_write(frame, vcpu.id, offset, access.width, value)
    } else {
        let raw = vm.vgic.lock().frame_read(frame, vcpu.id, offset, access.width)?;
        vcpu.regs.set(access.reg, access.load_value(raw));
        Ok(VcpuSet::EMPTY)
    }
}

/// The guest's trapped GIC windows on the device bus: the distributor frame, or a GICv3's
/// redistributor frames (one pair per vCPU). The bus entry owns the range (overlap checks with
/// other devices, names in messages); the accesses themselves never reach it, they take
/// [`mmio`] first, which also returns the vCPUs a write wakes (a bus device could not).
pub struct GicWindow(pub Frame);

impl MmioDevice for GicWindow {
    fn read(&mut self, _offset: u64, _width: AccessWidth) -> Result<u64, MmioError> {
        Err(MmioError::Unmapped)
    }

    fn write(&mut self, _offset: u64, _width: AccessWidth, _value: u64) -> Result<(), MmioError> {
        Err(MmioError::Unmapped)
    }

    fn name(&self) -> &'static str {
        match self.0 {
            Frame::Dist => "gicd",
            Frame::Redist => "gicr",
        }
    }
}
