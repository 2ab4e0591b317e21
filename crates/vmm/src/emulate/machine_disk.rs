//! VM disks on partitions of the machine disk (`[[vm.disk]] partition = "..."`): the backend of
//! such a disk's virtio-blk device.
//!
//! A guest request goes to the machine disk with the guest's own buffers, no copy: the device
//! has checked the chain, [`PartitionDisk`] checks the range against the partition, turns each
//! guest-physical buffer into host-physical pieces (guest RAM is 2 MiB chunks, and `size_max`
//! keeps a buffer within two) and queues one request on the machine disk's virtqueue
//! (`machine_disk::queue`). No CPU waits: the disk's interrupt ([`on_interrupt`]) takes the
//! completions and completes each guest request in its VM's device.
//!
//! The VMs share the disk's queue. When it is full, a VM's device hears `Busy`, gives the chain
//! back to its ring and is remembered; the next completion lets it go on.
//!
//! A request in flight writes into its VM's RAM until it completes, whatever the VM does. So a
//! VM that resets or stops has its RAM zeroed only once none of its requests is in flight
//! ([`in_flight_for`], checked by `lifecycle`); no new one starts meanwhile, since its devices
//! take nothing while it resets or stops (`virtio_slot::with_transport`). A device reset by its
//! driver forgets its requests (`virtio::blk`): what they write lands in the VM's own RAM, as
//! on a real disk whose driver resets it mid-request.

use super::virtio_slot::with_transport;
use crate::frames::{self, Frames};
use crate::memory::RamView;
use crate::registry;
use crate::sync::{Class, Lock};
use crate::wakeups::Wakeups;
use addr::{Ipa, PAGE_SIZE};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use machine_disk::Partition;
use machine_disk::queue::{BusSegment, Kind, MAX_SEGMENTS, RequestQueue, RingMemory, SubmitError};
use spin::Once;
use virtio::blk::{BlockError, Op, Request, Submit, Token};
use virtio::{Blk, BlockBackend, GuestRam, VirtioMmio};

/// Requests the machine disk has in flight at once, for all VMs together.
pub const QUEUE_SLOTS: u16 = 64;
/// Completions taken per pass of the interrupt handler (one pass holds the disk's lock).
const BATCH: usize = 16;
/// VM disks that can wait for room at once: every disk of every VM.
const MAX_WAITING: usize = vmconfig::MAX_VMS * vmconfig::MAX_DISKS;
const SECTOR: u64 = 512;

/// The machine disk's device, as the EL2 binary drives it.
pub trait Doorbell: Send {
    /// Gives the device its request queue and starts it (`DRIVER_OK`).
    fn attach_queue(&mut self, queue: QueueAddresses) -> Result<(), String>;
    /// The available ring has new requests.
    fn notify(&mut self);
    /// Acknowledges the device's interrupt (before the used ring is read, so that a completion
    /// after the read raises it again).
    fn acknowledge(&mut self);
}

/// Whom a request in flight belongs to.
#[derive(Clone, Copy)]
struct Owner {
    vm: usize,
    slot: Ipa,
    token: Token,
}

struct Disk {
    queue: RequestQueue<DmaArea, Owner>,
    doorbell: Box<dyn Doorbell>,
    /// VM disks told `Busy`: (VM id, virtio slot), each once.
    waiting: Vec<(usize, Ipa)>,
    errors: u64,
}

/// The machine disk's partitions, or why VMs cannot use it; set once at boot.
static TABLE: Once<Result<Vec<Partition>, String>> = Once::new();
static DISK: Once<Lock<Disk>> = Once::new();

/// Memory shared with the machine disk: frames of the pool, owned for good.
struct DmaArea(Frames);

// SAFETY (for every access below): the frames are identity-mapped RAM that this value owns
// (`frames::alloc`), never covered by a Rust reference; the device reads and writes them
// concurrently, so every access is a volatile one of the field's own width at an offset the
// queue computed inside its layout and `at` checks against the size; all of them are naturally
// aligned (the queue's fields are), so each is single-copy atomic. The queue is used only under
// the disk's lock.
impl DmaArea {
    fn at<T>(&self, offset: usize) -> *mut T {
        assert!(offset + size_of::<T>() <= self.0.bytes() as usize, "outside the queue's memory");
        (self.0.pa().0 + offset as u64) as *mut T
    }
}

impl RingMemory for DmaArea {
    fn bus_address(&self) -> u64 {
        self.0.pa().0
    }
    fn size(&self) -> usize {
        self.0.bytes() as usize
    }
    fn read_u8(&self, offset: usize) -> u8 {
        // SAFETY: see above.
        unsafe { self.at::<u8>(offset).read_volatile() }
    }
    fn read_u16(&self, offset: usize) -> u16 {
        // SAFETY: see above.
        u16::from_le(unsafe { self.at::<u16>(offset).read_volatile() })
    }
    fn read_u32(&self, offset: usize) -> u32 {
        // SAFETY: see above.
        u32::from_le(unsafe { self.at::<u32>(offset).read_volatile() })
    }
    fn write_u8(&self, offset: usize, value: u8) {
        // SAFETY: see above.
        unsafe { self.at::<u8>(offset).write_volatile(value) }
    }
    fn write_u16(&self, offset: usize, value: u16) {
        // SAFETY: see above.
        unsafe { self.at::<u16>(offset).write_volatile(value.to_le()) }
    }
    fn write_u32(&self, offset: usize, value: u32) {
        // SAFETY: see above.
        unsafe { self.at::<u32>(offset).write_volatile(value.to_le()) }
    }
    fn write_u64(&self, offset: usize, value: u64) {
        // SAFETY: see above.
        unsafe { self.at::<u64>(offset).write_volatile(value.to_le()) }
    }
}

/// The machine disk's queue as the device is given it: its size and the bus addresses of the
/// descriptors, the available ring and the used ring (in the legacy layout, contiguous).
#[derive(Clone, Copy, Debug)]
pub struct QueueAddresses {
    pub size: u16,
    pub descriptors: u64,
    pub available: u64,
    pub used: u64,
}

/// The machine disk is usable: its partitions, and the device behind `doorbell`, whose queue
/// holds at most `max_size` requests. Its interrupt goes to [`on_interrupt`]. On an error
/// (which says what failed) the disk is unusable for VMs.
pub fn install(
    partitions: Vec<Partition>,
    mut doorbell: Box<dyn Doorbell>,
    max_size: u16,
) -> Result<(), String> {
    let size = QUEUE_SLOTS.min(max_size);
    if !size.is_power_of_two() {
        return Err(format!("its queue holds {max_size} requests, not a power of two"));
    }
    let bytes = RequestQueue::<DmaArea, Owner>::memory_size(size) as u64;
    let frames = bytes.div_ceil(PAGE_SIZE).next_power_of_two() as usize;
    let mut area = frames::alloc(frames).ok_or("no free memory for its queue")?;
    area.zero();
    let queue = RequestQueue::new(DmaArea(area), size).ok_or("its queue memory is unusable")?;
    let (descriptors, available, used) = queue.rings();
    doorbell.attach_queue(QueueAddresses { size, descriptors, available, used })?;
    let disk = Disk { queue, doorbell, waiting: Vec::with_capacity(MAX_WAITING), errors: 0 };
    DISK.call_once(|| Lock::new(Class::MachineDisk, disk));
    TABLE.call_once(|| Ok(partitions));
    Ok(())
}

/// The machine disk cannot be used, for the reason given (which names the fix): VMs with
/// partition disks are not started, the others are.
pub fn unusable(why: String) {
    TABLE.call_once(|| Err(why));
}

/// The backend of VM `vm`'s virtio-blk device at `slot`: partition `name`, of which the VM sees
/// the first `capacity` bytes.
pub fn open(
    vm: usize,
    slot: Ipa,
    name: &str,
    capacity: u64,
    read_only: bool,
    ram: RamView,
) -> Result<PartitionDisk, String> {
    let partitions = match TABLE.get() {
        None => {
            return Err(format!(
                "its disk is partition {name} of the machine disk, and the machine has no disk: \
                 attach the image the build tool lays out (cargo xtask run does)"
            ));
        }
        Some(Err(why)) => {
            return Err(format!("its disk is partition {name} of the machine disk, but {why}"));
        }
        Some(Ok(p)) => p,
    };
    let Some(part) = partitions.iter().find(|p| p.name == name) else {
        let names: Vec<&str> = partitions.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "the machine disk has no partition {name} (it has: {}); the build tool adds it when \
             it lays out the disk for this config (cargo xtask build or run)",
            if names.is_empty() { String::from("none") } else { names.join(", ") }
        ));
    };
    if capacity > part.size() {
        return Err(format!(
            "partition {name} of the machine disk holds {} KiB, the config wants {} KiB: a \
             partition is never resized; give the disk its old size, or a new partition name",
            part.size() >> 10,
            capacity >> 10
        ));
    }
    Ok(PartitionDisk {
        vm,
        slot,
        first_sector: part.offset() / SECTOR,
        bytes: capacity,
        read_only,
        ram,
        segments: Vec::with_capacity(MAX_SEGMENTS),
    })
}

/// A VM disk on a partition of the machine disk: the first `bytes` of it.
pub struct PartitionDisk {
    vm: usize,
    slot: Ipa,
    first_sector: u64,
    bytes: u64,
    read_only: bool,
    ram: RamView,
    /// The request being queued, host-physical (allocated once).
    segments: Vec<BusSegment>,
}

impl BlockBackend for PartitionDisk {
    fn size(&self) -> u64 {
        self.bytes
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn submit(&mut self, req: &Request<'_>, _ram: &mut dyn GuestRam) -> Submit {
        let kind = match req.op {
            Op::Read => Kind::Read,
            Op::Write if self.read_only => return Submit::Done(Err(BlockError)),
            Op::Write => Kind::Write,
            Op::Flush => Kind::Flush,
        };
        // Checked here whatever the device checked: the disk holds other VMs' partitions.
        let inside = req.offset.is_multiple_of(SECTOR)
            && req.offset.checked_add(req.len()).is_some_and(|end| end <= self.bytes);
        if kind != Kind::Flush && !inside {
            return Submit::Done(Err(BlockError));
        }
        let Self { ram, segments, .. } = self;
        segments.clear();
        for s in req.segments {
            let mapped = ram.host_pieces(s.addr, u64::from(s.len), |pa, len| {
                // A piece lies in one 2 MiB chunk.
                segments.push(BusSegment { addr: pa.0, len: len as u32 });
            });
            if mapped.is_err() || segments.len() > MAX_SEGMENTS {
                return Submit::Done(Err(BlockError));
            }
        }
        let Some(disk) = DISK.get() else {
            return Submit::Done(Err(BlockError));
        };
        let owner = Owner { vm: self.vm, slot: self.slot, token: req.token };
        let mut disk = disk.lock();
        // A flush names no sector (virtio 1.x §5.2.6: the field is ignored).
        let sector = if kind == Kind::Flush { 0 } else { self.first_sector + req.offset / SECTOR };
        match disk.queue.submit(owner, kind, sector, &self.segments) {
            Ok(()) => {
                disk.doorbell.notify();
                Submit::Pending
            }
            Err(SubmitError::Full) => {
                let me = (self.vm, self.slot);
                if !disk.waiting.contains(&me) {
                    disk.waiting.push(me);
                }
                Submit::Busy
            }
            Err(SubmitError::TooManySegments) => Submit::Done(Err(BlockError)),
        }
    }
}

/// Whether VM `vm` has requests in flight on the machine disk (whose DMA may still write its
/// RAM).
pub fn in_flight_for(vm: usize) -> bool {
    DISK.get().is_some_and(|disk| disk.lock().queue.tags_in_flight().any(|o| o.vm == vm))
}

/// Requests the machine disk failed, since boot.
pub fn errors() -> u64 {
    DISK.get().map_or(0, |disk| disk.lock().errors)
}

/// The machine disk's interrupt: completes the guest requests it finished, then lets the VM
/// disks that waited for room go on. The vCPUs to interrupt go into `wake`.
pub fn on_interrupt(wake: &mut Wakeups) {
    let Some(disk) = DISK.get() else { return };
    disk.lock().doorbell.acknowledge();
    loop {
        let mut done = [None; BATCH];
        let mut n = 0;
        {
            let mut d = disk.lock();
            while n < BATCH {
                let Some((owner, result)) = d.queue.pop_completion() else { break };
                if let Err(e) = result {
                    d.errors += 1;
                    let vm = registry::get(owner.vm);
                    let name = vm.as_ref().map_or("?", |vm| vm.name.as_str());
                    log::warn!("{name}: the machine disk failed a request (status {})", e.status);
                }
                done[n] = Some((owner, result.map_err(|_| BlockError)));
                n += 1;
            }
        }
        // The VMs' device locks are taken with the disk's released: a completion may queue
        // the VM's next request (`Devices` before `MachineDisk`).
        for (owner, result) in done.into_iter().flatten() {
            if let Some(vm) = registry::get(owner.vm) {
                let complete = |blk: &mut VirtioMmio<Blk>, ram: &mut RamView| {
                    blk.complete(owner.token, result, ram)
                };
                let (_, woken) = with_transport(&vm, owner.slot, complete);
                wake.interrupts(vm.id, woken);
            }
        }
        if n < BATCH {
            break;
        }
    }
    resume_waiting(wake);
}

/// The VM disks told `Busy` try again, while the queue has room.
fn resume_waiting(wake: &mut Wakeups) {
    let Some(disk) = DISK.get() else { return };
    loop {
        let next = {
            let mut d = disk.lock();
            if d.queue.free_slots() == 0 || d.waiting.is_empty() {
                return;
            }
            d.waiting.remove(0)
        };
        let (vm_id, slot) = next;
        if let Some(vm) = registry::get(vm_id) {
            let resume = |blk: &mut VirtioMmio<Blk>, ram: &mut RamView| blk.backend_ready(ram);
            let (_, woken) = with_transport(&vm, slot, resume);
            wake.interrupts(vm.id, woken);
        }
    }
}
