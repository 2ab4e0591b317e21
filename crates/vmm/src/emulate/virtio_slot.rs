//! A virtio-mmio slot on a VM's MMIO bus: the transport of one device (`emulate::virtio` builds
//! them), its guest's RAM and its interrupt line; and access to a slot's device from outside
//! the guest's traps (a frame delivered, a disk request completed, console input), under the
//! VM's device lock.
//!
//! # Bounded work
//!
//! One access serves a device for one round (`virtio::queue::ROUND_WORK`). Work left over from
//! a guest's `QueueNotify` store is done by repeating the store: the vCPU re-executes it, traps
//! again, and the device goes on, a round per trap, so a notification that names gigabytes
//! costs its own VM's time and every round ends at EL2 within a bounded time. Work left over
//! from elsewhere (another register write, a disk completion, a delivered frame) is the VM's
//! [`Backlog`]: one of its vCPUs serves it, a round at a time, before it next enters its guest
//! (`run::run`), and a vCPU waiting in WFI is woken for it.

use super::vgic::DeviceIrq;
use crate::bench::IoStamps;
use crate::memory::RamView;
use crate::vm::{Backlog, Vm};
use addr::Ipa;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use guest_abi::map;
use vdev::{AccessWidth, MmioDevice, MmioError};
use vgic::VcpuSet;
use virtio::VirtioTransport;

// QEMU virt's virtio-mmio window (guest_abi::map): slot n at map::virtio_slot(n), SPI
// map::virtio_spi(n). The transport's registers must fit in a slot.
const _: () = assert!(virtio::REGION_SIZE <= map::VIRTIO_SLOT_SIZE);

/// One slot on the VM's MMIO bus.
pub struct VirtioSlot {
    transport: Box<dyn VirtioTransport>,
    ram: RamView,
    vm_name: String,
    irq: DeviceIrq,
    stamps: Arc<IoStamps>,
    backlog: Arc<Backlog>,
    /// The last write was a notification whose work is not done: the guest repeats it.
    notify_unfinished: bool,
}

impl VirtioSlot {
    pub fn new(
        transport: Box<dyn VirtioTransport>,
        ram: RamView,
        vm_name: String,
        irq: DeviceIrq,
        stamps: Arc<IoStamps>,
        backlog: Arc<Backlog>,
    ) -> Self {
        Self { transport, ram, vm_name, irq, stamps, backlog, notify_unfinished: false }
    }

    /// Serves the device for one round; whether work is left over.
    fn service(&mut self) -> bool {
        if self.transport.has_pending() {
            self.transport.poll(&mut self.ram);
        }
        self.report_error();
        self.transport.has_leftover()
    }

    /// Logs why the device just entered DEVICE_NEEDS_RESET, if it did (once per error).
    fn report_error(&mut self) {
        if let Some(e) = self.transport.take_error() {
            log::warn!("{}: {} needs a reset: {e}", self.vm_name, self.transport.name());
        }
    }

    pub fn stats(&self) -> virtio::Stats {
        self.transport.stats()
    }

    /// Where the device is, for a stalled guest's diagnosis: its line, its interrupt's state in
    /// the vGIC, each queue's next available entry and used index.
    pub fn progress(&self, gic: &vgic::Vgic) -> String {
        use core::fmt::Write;
        let intid = self.irq.intid();
        let mut line =
            alloc::format!("line {}", if self.transport.irq_level() { "high" } else { "low" });
        if let Some(st) = gic.irq_state(intid, 0) {
            let _ = write!(
                line,
                ", SPI {intid} {}{}{}",
                if st.pending { "pending" } else { "not pending" },
                if st.active { " active" } else { "" },
                if st.enabled { "" } else { " disabled" },
            );
            if let Some(owner) = st.owner {
                let _ = write!(line, " for vCPU {owner}");
            }
            if let Some((vcpu, slot)) = st.lr {
                let _ = write!(line, " in LR {slot} of vCPU {vcpu}");
            }
        }
        for q in (0..).map_while(|i| self.transport.queue_progress(i).map(|p| (i, p))) {
            let (i, (avail, used)) = q;
            let _ = write!(line, "; queue {i}: next avail {avail}, used {used}");
        }
        line
    }

    /// Back to the state after power-on (a VM reset): no features, no queues, line low. A disk
    /// keeps its contents.
    fn reset(&mut self) {
        self.transport.reset();
        self.irq = DeviceIrq::new(self.irq.intid());
    }
}

/// Resets every virtio device on a VM's bus (see `VirtioSlot::reset`).
pub fn reset_all(bus: &mut vdev::MmioBus) {
    for slot in bus.devices_mut().filter_map(|d| d.downcast_mut::<VirtioSlot>()) {
        slot.reset();
    }
}

/// Serves `vm`'s [`Backlog`], a round per device, if it has one: called by its vCPUs before
/// they enter the guest. Returns the vCPUs whose interrupts changed.
pub fn serve_backlog(vm: &Vm) -> VcpuSet {
    if !vm.device_backlog.take() {
        return VcpuSet::EMPTY;
    }
    let mut bus = vm.devices.lock();
    if vm.is_stopped() || vm.is_resetting() {
        return VcpuSet::EMPTY;
    }
    let mut woken = VcpuSet::EMPTY;
    let mut left = false;
    for slot in bus.devices_mut().filter_map(|d| d.downcast_mut::<VirtioSlot>()) {
        left |= slot.service();
        let w = super::vgic::set_device_irq(vm, slot.irq_change());
        woken = VcpuSet(woken.0 | w.0);
    }
    if left {
        vm.device_backlog.set();
    }
    woken
}

impl MmioDevice for VirtioSlot {
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.transport.read(offset, width)
    }

    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        if offset == virtio::mmio::regs::QUEUE_NOTIFY {
            self.stamps.notified();
        }
        self.transport.write(offset, width, value)?;
        let left = self.service();
        self.notify_unfinished = left && offset == virtio::mmio::regs::QUEUE_NOTIFY;
        if left && !self.notify_unfinished {
            self.backlog.set();
        }
        Ok(())
    }

    fn write_unfinished(&self) -> bool {
        self.notify_unfinished
    }

    fn name(&self) -> &'static str {
        self.transport.name()
    }

    fn irq_change(&mut self) -> Option<(u32, bool)> {
        let change = self.irq.change(self.transport.irq_level());
        if let Some((_, true)) = change {
            self.stamps.raised();
        }
        change
    }
}

/// Runs `f` on the device at `vm`'s virtio slot `slot` if it is a `T`, then passes a change of
/// its interrupt line to the vGIC (under the device lock); returns `f`'s result and the vCPUs
/// to wake.
pub fn with_transport<T: VirtioTransport, R>(
    vm: &Vm,
    slot: Ipa,
    f: impl FnOnce(&mut T, &mut RamView) -> R,
) -> (Option<R>, VcpuSet) {
    let mut bus = vm.devices.lock();
    if vm.is_held() {
        // Its RAM is being zeroed, or about to be (`scrub`); or it is paused, and takes nothing.
        return (None, VcpuSet::EMPTY);
    }
    let Some(slot) = bus.device_at_mut::<VirtioSlot>(slot) else {
        return (None, VcpuSet::EMPTY);
    };
    let VirtioSlot { transport, ram, .. } = slot;
    let result = transport.downcast_mut::<T>().map(|t| f(t, ram));
    // A receive chain the guest broke: said now, not at its next register access (after
    // which a driver's reset would have cleared it unsaid).
    slot.report_error();
    let mut wake = super::vgic::set_device_irq(vm, slot.irq_change());
    if slot.transport.has_leftover() {
        // Left for the VM's own time: any of its vCPUs serves it (`serve_backlog`).
        vm.device_backlog.set();
        wake = VcpuSet::all(vm.vcpus.len());
    }
    (result, wake)
}
