//! virtio-mmio devices inside armhv (`crates/virtio`), one per slot of QEMU virt's virtio
//! window: the guest's queue notifications are served on the trapping CPU, directly on guest
//! memory (KVM's I/O model without a user-space hop).
//!
//! Network frames go through `network`.

use super::machine_disk;
use super::vgic::DeviceIrq;
use crate::arch::console;
use crate::bench::IoStamps;
use crate::memory::RamView;
use crate::nic::{NicPort, Outbox};
use crate::registry;
use crate::sync::{Class, Lock};
use crate::vm::Vm;
use addr::{Ipa, IpaRange};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use guest_abi::map;
use vdev::{AccessWidth, MmioDevice, MmioError};
use vgic::VcpuSet;
use virtio::{Blk, Console, GuestBytes, Net, Rng, VirtioMmio, VirtioTransport};
use vmconfig::VirtioDevice;

// QEMU virt's virtio-mmio window (guest_abi::map): slot n at map::virtio_slot(n), SPI
// map::virtio_spi(n). The transport's registers must fit in a slot.
const _: () = assert!(virtio::REGION_SIZE <= map::VIRTIO_SLOT_SIZE);
/// Polls per notification before the rest waits for the next access (bounds time at EL2).
const MAX_POLLS: usize = 64;
/// virtio-console output is printed in lines of at most this many bytes.
const CONSOLE_LINE: usize = 256;

/// One slot on the VM's MMIO bus.
pub struct VirtioSlot {
    transport: Box<dyn VirtioTransport>,
    ram: RamView,
    vm_name: String,
    irq: DeviceIrq,
    stamps: Arc<IoStamps>,
}

impl VirtioSlot {
    fn service(&mut self) {
        for _ in 0..MAX_POLLS {
            if !self.transport.has_pending() {
                break;
            }
            self.transport.poll(&mut self.ram);
        }
        self.report_error();
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
    let slots: Vec<Ipa> = bus.ranges().map(|(r, _)| r.start).collect();
    for ipa in slots {
        if let Some(slot) = bus.device_at_mut::<VirtioSlot>(ipa) {
            slot.reset();
        }
    }
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
        self.service();
        Ok(())
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

/// The slots of `spec`'s virtio devices, with their SPIs, for the bus and the device tree.
pub struct Built {
    pub slots: Vec<(IpaRange, u32, VirtioSlot)>,
    pub nics: Vec<NicPort>,
}

/// Gives a NIC at a virtio slot, with its MAC, a port on the network of that name: (network
/// index, port).
pub type JoinNetwork<'a> = dyn FnMut(&str, Ipa, [u8; 6]) -> Result<(usize, usize), String> + 'a;

/// Creates the VM's virtio devices in the slot order the config defines. A NIC gets its port
/// from `join_network(network name, slot, MAC)`: (network index, port).
pub fn build(
    vm_id: usize,
    spec: &vmconfig::VmSpec<'static>,
    memory: &crate::memory::GuestMemory,
    stamps: &Arc<IoStamps>,
    join_network: &mut JoinNetwork,
) -> Result<Built, String> {
    let mut built = Built { slots: Vec::new(), nics: Vec::new() };
    for (n, dev) in spec.virtio_devices().enumerate() {
        let base = map::virtio_slot(n);
        let transport: Box<dyn VirtioTransport> = match dev {
            VirtioDevice::Net(nic) => {
                let outbox = Arc::new(Lock::new(Class::Outbox, Outbox::default()));
                let sink = outbox.clone();
                let net = Net::new(nic.mac, move |frame: GuestBytes<'_>, csum| {
                    sink.lock().push(frame, csum)
                })
                .with_mtu(nic.mtu);
                let (network, port) = join_network(nic.network, base, nic.mac)?;
                built.nics.push(NicPort { network, port, outbox });
                Box::new(VirtioMmio::new(net))
            }
            VirtioDevice::Block(disk) => {
                let id = alloc::format!("{}-disk{n}", spec.name);
                let blk = match disk.partition {
                    Some(name) => {
                        let ram = memory.view();
                        Blk::new(machine_disk::open(
                            vm_id,
                            base,
                            name,
                            disk.capacity,
                            disk.read_only,
                            ram,
                        )?)
                    }
                    None => Blk::new(disk_backing(disk.capacity, disk.image).ok_or_else(|| {
                        alloc::format!(
                            "not enough free RAM for its {} KiB disk",
                            disk.capacity >> 10
                        )
                    })?),
                };
                Box::new(VirtioMmio::new(blk.with_id(id.as_bytes()).read_only(disk.read_only)))
            }
            VirtioDevice::Console => {
                // Never longer than a line: allocated once, not grown by the guest's output.
                let mut line: Vec<u8> = Vec::with_capacity(CONSOLE_LINE);
                Box::new(VirtioMmio::new(Console::new(move |bytes: &[u8]| {
                    print_console_output(vm_id, &mut line, bytes)
                })))
            }
            VirtioDevice::Rng => Box::new(VirtioMmio::new(Rng::new(entropy_source()))),
        };
        built.slots.push((
            IpaRange::new(base, map::VIRTIO_SLOT_SIZE),
            map::virtio_spi(n),
            VirtioSlot {
                transport,
                ram: memory.view(),
                vm_name: spec.name.into(),
                irq: DeviceIrq::new(map::spi_intid(map::virtio_spi(n))),
                stamps: stamps.clone(),
            },
        ));
    }
    Ok(built)
}

/// The disk's contents, in RAM of its own: `capacity` bytes, the image at the start.
fn disk_backing(capacity: u64, image: &[u8]) -> Option<&'static mut [u8]> {
    let pages = capacity.div_ceil(addr::PAGE_SIZE) as usize;
    let mut frames = crate::frames::alloc(pages)?;
    frames.zero();
    let pa = frames.leak();
    // SAFETY: the frames were just allocated for this disk alone and are never freed (a disk
    // lives as long as its VM, which lives as long as armhv), so this is the only access to
    // them for good; identity-mapped at EL2, `capacity` bytes of them; never mapped into a
    // guest (the device copies between the disk and guest RAM).
    let disk = unsafe { core::slice::from_raw_parts_mut(pa.0 as *mut u8, capacity as usize) };
    disk[..image.len()].copy_from_slice(image);
    Some(disk)
}

/// Not cryptographic: a per-device xorshift seeded from the counter. (None of QEMU's CPU models
/// used here implement FEAT_RNG, and armhv has no entropy source of its own.)
fn entropy_source() -> impl FnMut(&mut [u8]) + Send {
    let mut state = crate::arch::timer::now() | 1;
    move |buf: &mut [u8]| {
        for b in buf {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
    }
}

/// virtio-console output: whole lines tagged with the VM's name, as the UART's.
fn print_console_output(vm_id: usize, line: &mut Vec<u8>, bytes: &[u8]) {
    let name = registry::get(vm_id).map_or("?", |vm| vm.name.as_str());
    for &b in bytes {
        if b != b'\n' {
            line.push(b);
        }
        if b == b'\n' || line.len() >= CONSOLE_LINE {
            console::print_vm_line(vm_id, name, line);
            line.clear();
        }
    }
}

/// A byte typed for `vm`, whose console is the virtio-console at `slot`: whether it was taken,
/// and the vCPUs to wake.
pub fn console_input(vm: &Vm, slot: Ipa, byte: u8) -> (bool, VcpuSet) {
    let push =
        |console: &mut VirtioMmio<Console>, ram: &mut RamView| console.push_input(&[byte], ram);
    let (taken, wake) = with_transport(vm, slot, push);
    (taken == Some(1), wake)
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
    if vm.is_stopped() || vm.is_resetting() {
        return (None, VcpuSet::EMPTY); // its RAM is being zeroed, or about to be (`scrub`)
    }
    let Some(slot) = bus.device_at_mut::<VirtioSlot>(slot) else {
        return (None, VcpuSet::EMPTY);
    };
    let VirtioSlot { transport, ram, .. } = slot;
    let result = transport.downcast_mut::<T>().map(|t| f(t, ram));
    // A receive chain the guest broke: said now, not at its next register access (after
    // which a driver's reset would have cleared it unsaid).
    slot.report_error();
    let wake = super::vgic::set_device_irq(vm, slot.irq_change());
    (result, wake)
}
