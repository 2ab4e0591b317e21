//! The machine disk's request queue: the driver side of a virtio-blk split virtqueue (virtio
//! 1.x §2.7, in the legacy layout of §2.7.2 that QEMU's virtio-mmio transports also require),
//! whose data buffers are named by bus address, so that a VM's request goes to the disk with the
//! guest's own buffers.
//!
//! Written here rather than taken from `virtio-drivers`, whose transport armhv does use to set
//! the device up: its block driver takes each request's data as one Rust slice, and armhv never
//! makes a Rust reference of guest memory (the guest writes it concurrently, see
//! `vmm::memory`); a guest's request is a list of up to hundreds of segments; and its flush
//! waits for the device, which no CPU at EL2 may do.
//!
//! Every request takes one slot: one ring descriptor, marked `VIRTQ_DESC_F_INDIRECT`, pointing
//! at the slot's own table of [`TABLE_ENTRIES`] descriptors: the 16-byte header, the data
//! segments, the status byte. So a request of any shape up to [`MAX_SEGMENTS`] segments fits
//! in whichever slot is free, and the ring's descriptors are never chained or reallocated.
//!
//! The device is the machine's and trusted to follow the protocol, but what it puts in the used
//! ring is still checked: a completion naming a slot not in flight is counted and dropped,
//! never completes another request twice.

use core::sync::atomic::{Ordering, fence};

/// Descriptors in one slot's indirect table: header, data, status.
pub const TABLE_ENTRIES: usize = 512;
/// Data segments one request may have.
pub const MAX_SEGMENTS: usize = TABLE_ENTRIES - 2;
/// The legacy layout's alignment of the used ring, and of the areas that follow it here.
const PAGE: usize = 4096;

const DESC_LEN: usize = 16;
const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const F_INDIRECT: u16 = 4;
/// A status byte the device has not written.
const STATUS_UNSET: u8 = 0xff;

/// Memory shared with the device: the rings, headers, status bytes and tables. Accessed only
/// through these calls (volatile on the machine: the device reads and writes it concurrently).
/// Offsets are in bytes from the start; values are little-endian, as the device sees them.
pub trait RingMemory {
    /// The device's address of byte 0.
    fn bus_address(&self) -> u64;
    fn size(&self) -> usize;
    fn read_u8(&self, offset: usize) -> u8;
    fn read_u16(&self, offset: usize) -> u16;
    fn read_u32(&self, offset: usize) -> u32;
    fn write_u8(&self, offset: usize, value: u8);
    fn write_u16(&self, offset: usize, value: u16);
    fn write_u32(&self, offset: usize, value: u32);
    fn write_u64(&self, offset: usize, value: u64);
}

/// What a request asks of the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Disk to the segments.
    Read,
    /// The segments to the disk.
    Write,
    /// Everything written so far made durable; no segments.
    Flush,
}

impl Kind {
    fn request_type(self) -> u32 {
        match self {
            Kind::Read => 0,
            Kind::Write => 1,
            Kind::Flush => 4,
        }
    }
}

/// One data buffer, by bus address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusSegment {
    pub addr: u64,
    pub len: u32,
}

/// Why a request was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// Every slot is in flight: try again after a completion.
    Full,
    /// More than [`MAX_SEGMENTS`] segments.
    TooManySegments,
}

/// The device failed a request (any status but `VIRTIO_BLK_S_OK`, or none written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceError {
    pub status: u8,
}

/// Where each part of the queue's memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    avail: usize,
    used: usize,
    headers: usize,
    statuses: usize,
    tables: usize,
    end: usize,
}

impl Layout {
    const fn new(size: u16) -> Self {
        let n = size as usize;
        let avail = n * DESC_LEN;
        let used = (avail + 6 + 2 * n).next_multiple_of(PAGE);
        let headers = (used + 6 + 8 * n).next_multiple_of(PAGE);
        let statuses = headers + 16 * n;
        let tables = (statuses + n).next_multiple_of(PAGE);
        Self { avail, used, headers, statuses, tables, end: tables + n * TABLE_ENTRIES * DESC_LEN }
    }
}

/// The driver side of the queue; each request carries a tag `T` of the caller's, handed back
/// with its completion.
pub struct RequestQueue<M, T = u64> {
    mem: M,
    size: u16,
    layout: Layout,
    /// Each slot's caller tag while it is in flight.
    tags: alloc::vec::Vec<Option<T>>,
    /// Free slots, a stack.
    free: alloc::vec::Vec<u16>,
    /// The next available-ring index to fill.
    next_avail: u16,
    /// The next used-ring index to read.
    next_used: u16,
    /// Used entries that named no slot in flight.
    bogus: u64,
}

impl<M: RingMemory, T: Copy> RequestQueue<M, T> {
    /// Bytes of shared memory a queue of `size` slots needs (page aligned at its start).
    pub const fn memory_size(size: u16) -> usize {
        Layout::new(size).end
    }

    /// A queue of `size` slots (a power of two, as the split ring wants) in `mem`, which must
    /// be zeroed, page aligned and at least [`Self::memory_size`] bytes.
    pub fn new(mem: M, size: u16) -> Option<Self> {
        let layout = Layout::new(size);
        if !size.is_power_of_two()
            || mem.size() < layout.end
            || !mem.bus_address().is_multiple_of(PAGE as u64)
        {
            return None;
        }
        let queue = Self {
            mem,
            size,
            layout,
            tags: alloc::vec![None; usize::from(size)],
            free: (0..size).rev().collect(),
            next_avail: 0,
            next_used: 0,
            bogus: 0,
        };
        // Each slot's ring descriptor points at its table for good; only the length changes.
        for slot in 0..usize::from(size) {
            let table = queue.mem.bus_address() + queue.table(slot) as u64;
            queue.write_desc(slot * DESC_LEN, table, 0, F_INDIRECT, 0);
        }
        Some(queue)
    }

    /// Bus addresses of the descriptor table, the available ring and the used ring.
    pub fn rings(&self) -> (u64, u64, u64) {
        let base = self.mem.bus_address();
        (base, base + self.layout.avail as u64, base + self.layout.used as u64)
    }

    pub fn size(&self) -> u16 {
        self.size
    }

    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Requests queued and not completed.
    pub fn in_flight(&self) -> usize {
        usize::from(self.size) - self.free.len()
    }

    /// The tags of the requests in flight.
    pub fn tags_in_flight(&self) -> impl Iterator<Item = T> + '_ {
        self.tags.iter().flatten().copied()
    }

    /// Used-ring entries that named no request in flight, since the queue was made.
    pub fn bogus_completions(&self) -> u64 {
        self.bogus
    }

    fn table(&self, slot: usize) -> usize {
        self.layout.tables + slot * TABLE_ENTRIES * DESC_LEN
    }

    fn write_desc(&self, at: usize, addr: u64, len: u32, flags: u16, next: u16) {
        self.mem.write_u64(at, addr);
        self.mem.write_u32(at + 8, len);
        self.mem.write_u16(at + 12, flags);
        self.mem.write_u16(at + 14, next);
    }

    /// Queues a request for the device, named `tag` when it completes; the caller then
    /// notifies the device. `sector` is in 512-byte units; `segments` are the data, in order.
    pub fn submit(
        &mut self,
        tag: T,
        kind: Kind,
        sector: u64,
        segments: &[BusSegment],
    ) -> Result<(), SubmitError> {
        if segments.len() > MAX_SEGMENTS {
            return Err(SubmitError::TooManySegments);
        }
        let slot = usize::from(self.free.pop().ok_or(SubmitError::Full)?);
        let base = self.mem.bus_address();
        let header = self.layout.headers + slot * 16;
        self.mem.write_u32(header, kind.request_type());
        self.mem.write_u32(header + 4, 0);
        self.mem.write_u64(header + 8, sector);
        let status = self.layout.statuses + slot;
        self.mem.write_u8(status, STATUS_UNSET);

        let table = self.table(slot);
        self.write_desc(table, base + header as u64, 16, F_NEXT, 1);
        let data_flags = F_NEXT | if kind == Kind::Read { F_WRITE } else { 0 };
        for (i, s) in segments.iter().enumerate() {
            let next = (i + 2) as u16;
            self.write_desc(table + (i + 1) * DESC_LEN, s.addr, s.len, data_flags, next);
        }
        let last = segments.len() + 1;
        self.write_desc(table + last * DESC_LEN, base + status as u64, 1, F_WRITE, 0);
        self.mem.write_u32(slot * DESC_LEN + 8, ((last + 1) * DESC_LEN) as u32);
        self.tags[slot] = Some(tag);

        let avail = self.layout.avail;
        let at = avail + 4 + 2 * usize::from(self.next_avail % self.size);
        self.mem.write_u16(at, slot as u16);
        self.next_avail = self.next_avail.wrapping_add(1);
        // The device must see the descriptors and the ring entry before the new index
        // (§2.7.13.3.1); the caller's notification comes after this index.
        fence(Ordering::SeqCst);
        self.mem.write_u16(avail + 2, self.next_avail);
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// The next completed request: its tag and result. `None` when the device has completed
    /// nothing more.
    pub fn pop_completion(&mut self) -> Option<(T, Result<(), DeviceError>)> {
        loop {
            let used = self.layout.used;
            if self.mem.read_u16(used + 2) == self.next_used {
                return None;
            }
            // The entry is read after the index that published it (§2.7.14).
            fence(Ordering::SeqCst);
            let at = used + 4 + 8 * usize::from(self.next_used % self.size);
            let id = self.mem.read_u32(at);
            self.next_used = self.next_used.wrapping_add(1);
            let Some(tag) = usize::try_from(id)
                .ok()
                .and_then(|slot| self.tags.get_mut(slot))
                .and_then(Option::take)
            else {
                self.bogus += 1;
                continue;
            };
            let status = self.mem.read_u8(self.layout.statuses + id as usize);
            self.free.push(id as u16);
            return Some((tag, if status == 0 { Ok(()) } else { Err(DeviceError { status }) }));
        }
    }
}
