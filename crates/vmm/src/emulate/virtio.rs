//! virtio-mmio devices inside armhv (`crates/virtio`), one per slot of QEMU virt's virtio
//! window: the guest's queue notifications are served on the trapping CPU, directly on guest
//! memory (KVM's I/O model without a user-space hop).
//!
//! The slots themselves, and access to a slot's device from outside a trap, are
//! `virtio_slot`'s. Network frames go through `network`.

use super::control_channel;
use super::machine_disk;
use super::vgic::DeviceIrq;
use super::virtio_slot::{VirtioSlot, with_transport};
use crate::arch::console;
use crate::bench::IoStamps;
use crate::control_port::ControlPort;
use crate::memory::RamView;
use crate::nic::{NicPort, Outbox};
use crate::sync::{Class, Lock};
use crate::vm::Backlog;
use crate::vm::Vm;
use addr::{Ipa, IpaRange};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use guest_abi::map;
use vgic::VcpuSet;
use virtio::{Blk, Console, GuestBytes, Net, Rng, VirtioMmio, VirtioTransport};
use vmconfig::VirtioDevice;

/// virtio-console output is printed in lines of at most this many bytes.
const CONSOLE_LINE: usize = 256;

/// The slots of `spec`'s virtio devices, with their SPIs, for the bus and the device tree.
pub struct Built {
    pub slots: Vec<(IpaRange, u32, VirtioSlot)>,
    pub nics: Vec<NicPort>,
    pub control: Option<ControlPort>,
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
    backlog: &Arc<Backlog>,
    join_network: &mut JoinNetwork,
) -> Result<Built, String> {
    let mut built = Built { slots: Vec::new(), nics: Vec::new(), control: None };
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
                let name = String::from(spec.name);
                Box::new(VirtioMmio::new(Console::new(move |bytes: &[u8]| {
                    print_console_output(vm_id, &name, &mut line, bytes)
                })))
            }
            VirtioDevice::Rng => Box::new(VirtioMmio::new(Rng::new(entropy_source()))),
            VirtioDevice::Control => {
                let (channel, port) = control_channel::build(vm_id, spec.name, base);
                built.control = Some(port);
                Box::new(VirtioMmio::new(channel))
            }
        };
        built.slots.push((
            IpaRange::new(base, map::VIRTIO_SLOT_SIZE),
            map::virtio_spi(n),
            VirtioSlot::new(
                transport,
                memory.view(),
                spec.name.into(),
                DeviceIrq::new(map::spi_intid(map::virtio_spi(n))),
                stamps.clone(),
                backlog.clone(),
            ),
        ));
    }
    Ok(built)
}

/// The disk's contents, in RAM of its own: `capacity` bytes, the image at the start.
fn disk_backing(capacity: u64, image: &[u8]) -> Option<RamDisk> {
    let pages = capacity.div_ceil(addr::PAGE_SIZE) as usize;
    let mut frames = crate::frames::alloc(pages.next_power_of_two())?;
    frames.zero();
    let mut disk = RamDisk { frames, len: capacity as usize };
    disk.bytes()[..image.len()].copy_from_slice(image);
    Some(disk)
}

/// A disk in frames of its own, given back when its device is dropped: with its VM, when the
/// VM could not be built (a built VM lives as long as armhv).
struct RamDisk {
    frames: crate::frames::Frames,
    /// The disk's size, at most the frames' (a power of two of them).
    len: usize,
}

impl RamDisk {
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the frames are this disk's alone (allocated for it, owned by `self`, never
        // mapped into a guest: the device copies between the disk and guest RAM), identity
        // mapped at EL2 and at least `len` bytes long; the slice borrows `self` mutably, so it
        // is the only reference to them while it lives, and dies before the frames are freed.
        unsafe { core::slice::from_raw_parts_mut(self.frames.pa().0 as *mut u8, self.len) }
    }
}

impl virtio::BlockBackend for RamDisk {
    fn size(&self) -> u64 {
        self.len as u64
    }

    fn submit(
        &mut self,
        req: &virtio::Request<'_>,
        ram: &mut dyn virtio::GuestRam,
    ) -> virtio::Submit {
        self.bytes().submit(req, ram)
    }
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
fn print_console_output(vm_id: usize, name: &str, line: &mut Vec<u8>, bytes: &[u8]) {
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
