//! virtio-mmio devices inside armhv (`crates/virtio`), one per slot of QEMU virt's virtio
//! window: the guest's queue notifications are served on the trapping CPU, directly on guest
//! memory (KVM's I/O model without a user-space hop).
//!
//! Network frames a VM sends wait in its NIC's outbox until the trap's device lock is released;
//! then the network's switch forwards them to the other NICs, locking one VM's devices at a
//! time, so two VMs sending to each other cannot deadlock.

use super::bench::IoStamps;
use super::memory::RamView;
use super::vgic::DeviceIrq;
use super::vm::Vm;
use super::{sched, stats};
use crate::console;
use addr::{Ipa, IpaRange};
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use spin::Mutex;
use vdev::{AccessWidth, MmioDevice, MmioError};
use virtio::{
    Blk, Console, GuestBytes, Net, PartialCsum, Rng, Switch, VirtioMmio, VirtioTransport,
};
use vmconfig::VirtioDevice;

/// QEMU virt's virtio-mmio window: slot n at BASE + n * SIZE, SPI FIRST_SPI + n.
pub const BASE: Ipa = Ipa(0x0A00_0000);
pub const SIZE: u64 = virtio::REGION_SIZE;
pub const FIRST_SPI: u32 = 16;
/// Polls per notification before the rest waits for the next access (bounds time at EL2).
const MAX_POLLS: usize = 64;
/// Frames a NIC may have waiting for the switch, and their bytes: a guest sends frames of up to
/// 64 KiB, and a ring's worth of them (256) would be 16 MiB, the whole heap. Beyond either
/// bound frames are dropped, as by a switch port whose buffer is full.
const OUTBOX_FRAMES: usize = 256;
const OUTBOX_BYTES: usize = 256 << 10;
/// MAC addresses each network's switch remembers.
const SWITCH_TABLE: usize = 256;
/// virtio-console output is printed in lines of at most this many bytes.
const CONSOLE_LINE: usize = 256;

type Outbox = Arc<Mutex<Frames>>;

/// A NIC's frames waiting for the switch, each with the checksum its sender left to the
/// device (completed, if at all, by the receiving NIC).
#[derive(Default)]
struct Frames {
    queue: VecDeque<(Vec<u8>, Option<PartialCsum>)>,
    bytes: usize,
    /// Frames dropped because the outbox was full.
    dropped: u64,
}

impl Frames {
    /// Copies a sent frame out of the guest's buffers (the one copy on its way to the switch).
    fn push(&mut self, frame: GuestBytes<'_>, csum: Option<PartialCsum>) {
        if self.queue.len() >= OUTBOX_FRAMES || self.bytes + frame.len() > OUTBOX_BYTES {
            self.dropped += 1;
            return;
        }
        // Never fails: the device checked the chain's buffers lie in RAM.
        let Ok(frame) = frame.to_vec() else {
            self.dropped += 1;
            return;
        };
        self.bytes += frame.len();
        self.queue.push_back((frame, csum));
    }

    fn pop(&mut self) -> Option<(Vec<u8>, Option<PartialCsum>)> {
        let (frame, csum) = self.queue.pop_front()?;
        self.bytes -= frame.len();
        Some((frame, csum))
    }
}

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

/// A VM's NIC as its network sees it.
pub struct NicPort {
    pub network: usize,
    pub port: usize,
    outbox: Outbox,
}

impl NicPort {
    /// Frames dropped because its outbox was full.
    pub fn outbox_dropped(&self) -> u64 {
        self.outbox.lock().dropped
    }

    /// Back to the state of a NIC just plugged in (its VM reset or stopped): frames not yet
    /// forwarded are dropped (with the outbox's memory), and its network forgets the addresses
    /// learned on its port (the next kernel may use others; frames for them are flooded until
    /// it sends).
    pub fn reset(&self) {
        let mut outbox = self.outbox.lock();
        let dropped = outbox.dropped;
        *outbox = Frames { dropped, ..Frames::default() };
        drop(outbox);
        if let Some(net) = NETWORKS.lock().get_mut(self.network) {
            net.switch.forget_port(self.port);
        }
    }
}

/// A network shared by the NICs that name it: a learning switch, and where each port is.
struct Network {
    name: String,
    switch: Switch,
    /// (VM id, slot IPA) of each port.
    ports: Vec<(usize, Ipa)>,
}

static NETWORKS: Mutex<Vec<Network>> = Mutex::new(Vec::new());

/// The slots of `spec`'s virtio devices, with their SPIs, for the bus and the device tree.
pub struct Built {
    pub slots: Vec<(IpaRange, u32, VirtioSlot)>,
    pub nics: Vec<NicPort>,
}

/// Creates the VM's virtio devices in the slot order the config defines.
pub fn build(
    vm_id: usize,
    spec: &vmconfig::VmSpec<'static>,
    memory: &super::memory::GuestMemory,
    stamps: &Arc<IoStamps>,
) -> Result<Built, String> {
    let mut built = Built { slots: Vec::new(), nics: Vec::new() };
    for (n, dev) in spec.virtio_devices().enumerate() {
        let base = BASE + n as u64 * SIZE;
        let transport: Box<dyn VirtioTransport> = match dev {
            VirtioDevice::Net(nic) => {
                let outbox: Outbox = Arc::new(Mutex::new(Frames::default()));
                let sink = outbox.clone();
                let net = Net::new(nic.mac, move |frame: GuestBytes<'_>, csum| {
                    sink.lock().push(frame, csum)
                })
                .with_mtu(nic.mtu);
                let (network, port) = join_network(nic.network, vm_id, base)?;
                built.nics.push(NicPort { network, port, outbox });
                Box::new(VirtioMmio::new(net))
            }
            VirtioDevice::Block(disk) => {
                let backing = disk_backing(disk.capacity, disk.image).ok_or_else(|| {
                    alloc::format!("not enough free RAM for its {} KiB disk", disk.capacity >> 10)
                })?;
                let id = alloc::format!("{}-disk{n}", spec.name);
                Box::new(VirtioMmio::new(
                    Blk::new(backing).with_id(id.as_bytes()).read_only(disk.read_only),
                ))
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
            IpaRange::new(base, SIZE),
            FIRST_SPI + n as u32,
            VirtioSlot {
                transport,
                ram: memory.view(),
                vm_name: spec.name.into(),
                irq: DeviceIrq::new(32 + FIRST_SPI + n as u32),
                stamps: stamps.clone(),
            },
        ));
    }
    Ok(built)
}

fn join_network(name: &str, vm_id: usize, slot: Ipa) -> Result<(usize, usize), String> {
    let mut nets = NETWORKS.lock();
    let index = match nets.iter().position(|n| n.name == name) {
        Some(i) => i,
        None => {
            nets.push(Network {
                name: name.into(),
                switch: Switch::new(64, SWITCH_TABLE),
                ports: Vec::new(),
            });
            nets.len() - 1
        }
    };
    let net = &mut nets[index];
    if net.ports.len() >= net.switch.ports() {
        return Err(alloc::format!("network {name} has no free port"));
    }
    net.ports.push((vm_id, slot));
    Ok((index, net.ports.len() - 1))
}

/// The disk's contents, in RAM of its own: `capacity` bytes, the image at the start.
fn disk_backing(capacity: u64, image: &[u8]) -> Option<&'static mut [u8]> {
    let pages = capacity.div_ceil(addr::PAGE_SIZE) as usize;
    let mut frames = crate::mm::frames::alloc(pages)?;
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
    let mut state = crate::arch::aarch64::timer::now() | 1;
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
    let name = sched::vms().get(vm_id).map_or("?", |vm| vm.name.as_str());
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

/// After a trap on `vm`'s devices: its NICs' sent frames go through their switches.
pub fn forward_frames(vm: &Vm) {
    for nic in &vm.nics {
        loop {
            let Some((frame, csum)) = nic.outbox.lock().pop() else { break };
            let destinations: Vec<(usize, Ipa)> = {
                let mut nets = NETWORKS.lock();
                let net = &mut nets[nic.network];
                let to = net.switch.forward(nic.port, &frame);
                to.iter().filter_map(|p| net.ports.get(p).copied()).collect()
            };
            for (vm_id, slot) in destinations {
                if let Some(dest) = sched::vms().get(vm_id) {
                    deliver(dest, slot, &frame, csum);
                }
            }
        }
    }
}

fn deliver(vm: &Vm, slot: Ipa, frame: &[u8], csum: Option<PartialCsum>) {
    if vm.is_stopped() {
        return;
    }
    with_transport(vm, slot, |net: &mut VirtioMmio<Net>, ram| net.deliver(frame, csum, ram));
    stats::bump(&vm.stats.frames_in);
}

/// A byte typed for `vm`, whose console is the virtio-console at `slot`; false if dropped.
pub fn console_input(vm: &Vm, slot: Ipa, byte: u8) -> bool {
    let push =
        |console: &mut VirtioMmio<Console>, ram: &mut RamView| console.push_input(&[byte], ram);
    with_transport(vm, slot, push) == Some(1)
}

/// Runs `f` on the device at `vm`'s virtio slot `slot` if it is a `T`, then passes on a change
/// of its interrupt line (to the vGIC under the device lock, the kicks after it).
fn with_transport<T: VirtioTransport, R>(
    vm: &Vm,
    slot: Ipa,
    f: impl FnOnce(&mut T, &mut RamView) -> R,
) -> Option<R> {
    let mut bus = vm.devices.lock();
    if vm.is_stopped() || vm.is_resetting() {
        return None; // its RAM is being zeroed, or about to be (`vmm::scrub`)
    }
    let slot = bus.device_at_mut::<VirtioSlot>(slot)?;
    let VirtioSlot { transport, ram, .. } = slot;
    let result = transport.downcast_mut::<T>().map(|t| f(t, ram));
    // A receive chain the guest broke: said now, not at its next register access (after
    // which a driver's reset would have cleared it unsaid).
    slot.report_error();
    let kicks = super::vgic::set_device_irq(vm, slot.irq_change());
    drop(bus);
    super::sched::notify(vm.id, kicks);
    result
}
