//! Split virtqueues, device side (virtio 1.x §2.7).
//!
//! A [`Queue`] holds what the driver configured through the transport (size
//! and the three ring addresses) and the device's two cursors: the next
//! available-ring entry to consume and the next used-ring slot to fill. The
//! device-side indices live here and never in guest memory, so a driver that
//! scribbles over the used ring cannot make the device skip or repeat work.
//!
//! [`Queue::pop`] turns the next available entry into a [`DescChain`]: it
//! walks the chain once, copying each 16-byte descriptor out of guest memory
//! before looking at it, and checks every rule the device depends on (see
//! [`VirtioError`] for the list) before the device sees any of it. A chain
//! that passes is a list of in-RAM segments, device-readable first, whose
//! lengths add up to less than 4 GiB; the device then moves data with
//! [`DescChain::read_at`] / [`DescChain::write_at`], which copy between
//! guest buffers and the device's own memory, or hands windows on the
//! buffers ([`DescChain::for_each_readable`] / [`DescChain::for_each_writable`],
//! [`DescChain::readable_bytes`]) to a backend that copies directly to or
//! from its own storage: no intermediate buffer, and no Rust reference
//! into guest memory ([`crate::ram`]).
//!
//! # Ordering
//!
//! The driver runs on other CPUs. The barriers mirror the driver's in §2.7.13 / §2.7.14:
//! read `avail.idx`, then an acquire fence before the ring entry and the
//! descriptors it publishes; write a used element, then a release fence
//! before `used.idx`; a full fence between publishing `used.idx` (or
//! `avail_event`) and reading the driver's suppression field, so that the
//! device never decides "no interrupt needed" on a stale `used_event` while
//! the driver decides "the device will interrupt". On aarch64 these are
//! `dmb ishld`, `dmb ish` and `dmb ish`, the inner-shareable domain that
//! guest and hypervisor share.

use alloc::vec::Vec;
use core::sync::atomic::{Ordering, fence};

use addr::Ipa;

use crate::error::{Area, VirtioError};
use crate::features;
use crate::ram::{GuestRam, GuestSlice, GuestSliceMut, MemError};

/// `virtq_desc.flags`: the chain continues at `next`.
pub const VIRTQ_DESC_F_NEXT: u16 = 1;
/// `virtq_desc.flags`: the buffer is device-writable.
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
/// `virtq_desc.flags`: the buffer is a table of descriptors.
pub const VIRTQ_DESC_F_INDIRECT: u16 = 4;
/// `virtq_avail.flags`: the driver asks for no used-buffer interrupts
/// (only meaningful without `VIRTIO_F_EVENT_IDX`).
pub const VIRTQ_AVAIL_F_NO_INTERRUPT: u16 = 1;
/// Largest split-ring size (§2.7).
pub const MAX_QUEUE_SIZE: u16 = 32768;

/// Size of one `virtq_desc`.
const DESC_SIZE: u64 = 16;

/// What one processing round may cost a device, in units: a descriptor read,
/// or [`BYTES_PER_UNIT`] bytes of data moved ([`Queue::charge_bytes`]). A
/// full ring of two-descriptor chains fits in one round; a request of many
/// megabytes takes several, each a separate visit to EL2 between which the
/// CPU takes its interrupts and the scheduler may run another vCPU.
pub const ROUND_WORK: u32 = 512;
/// Bytes of data per work unit: copying a page costs about what reading
/// a descriptor and checking its buffer does.
pub const BYTES_PER_UNIT: u64 = 4096;

/// Whether a device that moved the used index from `old` to `new` must
/// notify a driver that asked, through `event`, to be woken once the index
/// passes it (§2.7.7, the `vring_need_event` rule): true iff
/// `event` lies in `[old, new)`, computed in wrapping 16-bit arithmetic.
/// The driver applies the same rule to `avail_event`.
pub fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// One buffer of a chain: `len` bytes of guest RAM at `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub addr: Ipa,
    pub len: u32,
}

/// A copy of one descriptor, taken once and then trusted.
#[derive(Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

/// A validated descriptor chain: device-readable segments, then
/// device-writable ones, all inside guest RAM.
///
/// Devices keep one as scratch and pass it to [`Queue::pop`] again and
/// again, so the segment list is allocated once.
#[derive(Clone, Debug, Default)]
pub struct DescChain {
    head: u16,
    segs: Vec<Segment>,
    first_writable: usize,
    readable_len: u32,
    writable_len: u32,
}

impl DescChain {
    pub const fn new() -> Self {
        Self { head: 0, segs: Vec::new(), first_writable: 0, readable_len: 0, writable_len: 0 }
    }

    fn clear(&mut self, head: u16) {
        self.head = head;
        self.segs.clear();
        self.first_writable = 0;
        self.readable_len = 0;
        self.writable_len = 0;
    }

    /// Appends a buffer after checking it is in RAM, keeps readable before
    /// writable and the total under 4 GiB.
    fn push(&mut self, ram: &dyn GuestRam, d: Desc) -> Result<(), VirtioError> {
        let addr = Ipa(d.addr);
        ram.check(addr, d.len.into())
            .map_err(|err| VirtioError::OutOfRam { area: Area::Buffer, err })?;
        let total = u64::from(self.readable_len) + u64::from(self.writable_len) + u64::from(d.len);
        if total > u64::from(u32::MAX) {
            return Err(VirtioError::ChainBytesOverflow);
        }
        if d.flags & VIRTQ_DESC_F_WRITE != 0 {
            self.writable_len += d.len;
        } else {
            if self.first_writable < self.segs.len() {
                return Err(VirtioError::ReadableAfterWritable);
            }
            self.readable_len += d.len;
            self.first_writable += 1;
        }
        self.segs.push(Segment { addr, len: d.len });
        Ok(())
    }

    /// Descriptor index of the chain's head: what goes into the used ring.
    pub fn head(&self) -> u16 {
        self.head
    }

    /// The device-readable buffers, in order.
    pub fn readable(&self) -> &[Segment] {
        &self.segs[..self.first_writable]
    }

    /// The device-writable buffers, in order.
    pub fn writable(&self) -> &[Segment] {
        &self.segs[self.first_writable..]
    }

    /// Total bytes of the device-readable buffers.
    pub fn readable_len(&self) -> u32 {
        self.readable_len
    }

    /// Total bytes of the device-writable buffers.
    pub fn writable_len(&self) -> u32 {
        self.writable_len
    }

    /// Calls `f(addr, len)` for the pieces of `segs` that make up the byte
    /// range `[offset, offset + len)` of their concatenation, clipped to its
    /// end. Returns the number of bytes covered.
    fn walk_range(
        segs: &[Segment],
        mut offset: u64,
        len: u64,
        mut f: impl FnMut(Ipa, u64) -> Result<(), MemError>,
    ) -> Result<u64, MemError> {
        let mut left = len;
        for s in segs {
            if left == 0 {
                break;
            }
            let slen = u64::from(s.len);
            if offset >= slen {
                offset -= slen;
                continue;
            }
            let n = (slen - offset).min(left);
            f(Ipa(s.addr.0 + offset), n)?;
            left -= n;
            offset = 0;
        }
        Ok(len - left)
    }

    /// Appends to `out` the guest-physical pieces of bytes
    /// `[offset, offset + len)` of the readable part (clipped to its end), in order: what a
    /// backend that moves the data itself (a physical disk's DMA) is handed.
    /// Returns the number of bytes covered.
    pub fn readable_segments(&self, offset: u64, len: u64, out: &mut Vec<Segment>) -> u64 {
        Self::segments_of(self.readable(), offset, len, out)
    }

    /// [`DescChain::readable_segments`] for the writable part.
    pub fn writable_segments(&self, offset: u64, len: u64, out: &mut Vec<Segment>) -> u64 {
        Self::segments_of(self.writable(), offset, len, out)
    }

    pub(crate) fn segments_of(
        segs: &[Segment],
        offset: u64,
        len: u64,
        out: &mut Vec<Segment>,
    ) -> u64 {
        // Pieces of a segment are no longer than it, so their lengths fit in a u32.
        let walked = Self::walk_range(segs, offset, len, |addr, n| {
            out.push(Segment { addr, len: n as u32 });
            Ok(())
        });
        walked.unwrap_or(0)
    }

    /// Guest-physical address of byte `offset` of the writable part.
    pub fn writable_addr(&self, offset: u64) -> Option<Ipa> {
        let mut at = None;
        let _ = Self::walk_range(self.writable(), offset, 1, |addr, _| {
            at = Some(addr);
            Ok(())
        });
        at
    }

    /// Calls `f` on each piece of bytes `[offset, offset + len)` of the
    /// readable part (clipped to its end), in order: one per buffer it
    /// touches, as a window on guest memory to copy out of. Returns the
    /// number of bytes visited.
    pub fn for_each_readable(
        &self,
        ram: &dyn GuestRam,
        offset: u64,
        len: u64,
        f: &mut dyn FnMut(GuestSlice<'_>),
    ) -> Result<u64, MemError> {
        Self::walk_range(self.readable(), offset, len, |a, n| {
            f(GuestSlice::new(ram, a, n as usize)?);
            Ok(())
        })
    }

    /// Calls `f` on each piece of bytes `[offset, offset + len)` of the
    /// writable part (clipped to its end), in order: one per buffer it
    /// touches, as a window on guest memory to copy into. Returns the
    /// number of bytes visited.
    pub fn for_each_writable(
        &self,
        ram: &mut dyn GuestRam,
        offset: u64,
        len: u64,
        f: &mut dyn FnMut(GuestSliceMut<'_>),
    ) -> Result<u64, MemError> {
        Self::walk_range(self.writable(), offset, len, |a, n| {
            f(GuestSliceMut::new(&mut *ram, a, n as usize)?);
            Ok(())
        })
    }

    /// Readable bytes `[offset, offset + len)` (clipped to the end of the
    /// readable part), left in guest memory for a consumer to copy where it
    /// wants them: a transmitted frame goes straight into the switch's
    /// queue.
    pub fn readable_bytes<'a>(
        &'a self,
        ram: &'a dyn GuestRam,
        offset: u64,
        len: u64,
    ) -> GuestBytes<'a> {
        let rest = u64::from(self.readable_len).saturating_sub(offset);
        GuestBytes { chain: self, ram, offset, len: len.min(rest) as usize }
    }

    /// Copies readable bytes from `offset` into `buf`; returns how many
    /// there were (fewer than `buf.len()` at the end of the readable part).
    pub fn read_at(
        &self,
        ram: &dyn GuestRam,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, MemError> {
        let mut at = 0;
        Self::walk_range(self.readable(), offset, buf.len() as u64, |a, n| {
            let n = n as usize;
            ram.read(a, &mut buf[at..at + n])?;
            at += n;
            Ok(())
        })?;
        Ok(at)
    }

    /// Copies `data` into the writable part at `offset`; returns how many
    /// bytes fitted.
    pub fn write_at(
        &self,
        ram: &mut dyn GuestRam,
        offset: u64,
        data: &[u8],
    ) -> Result<usize, MemError> {
        let mut at = 0;
        Self::walk_range(self.writable(), offset, data.len() as u64, |a, n| {
            let n = n as usize;
            ram.write(a, &data[at..at + n])?;
            at += n;
            Ok(())
        })?;
        Ok(at)
    }
}

/// Bytes of a chain's readable part, still in guest memory
/// ([`DescChain::readable_bytes`]): handed on instead of a `&[u8]`, which
/// must never point into guest memory (see [`crate::ram`]), and copied out
/// once by whoever keeps them.
#[derive(Clone, Copy)]
pub struct GuestBytes<'a> {
    chain: &'a DescChain,
    ram: &'a dyn GuestRam,
    offset: u64,
    len: usize,
}

impl GuestBytes<'_> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the first `buf.len()` bytes (at most [`Self::len`]) into
    /// `buf`; returns how many.
    pub fn copy_to(&self, buf: &mut [u8]) -> Result<usize, MemError> {
        let n = buf.len().min(self.len);
        self.chain.read_at(self.ram, self.offset, &mut buf[..n])
    }

    /// The bytes, copied into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, MemError> {
        let mut v = alloc::vec![0; self.len];
        self.copy_to(&mut v)?;
        Ok(v)
    }
}

/// One split virtqueue, device side.
#[derive(Clone, Debug)]
pub struct Queue {
    /// `QueueNumMax`: fixed by the device.
    max_size: u16,
    /// `QueueNum` as the driver wrote it (validated when enabled).
    size: u32,
    /// Descriptor Area (`QueueDescLow/High`).
    desc: u64,
    /// Driver Area: the available ring (`QueueDriverLow/High`).
    avail: u64,
    /// Device Area: the used ring (`QueueDeviceLow/High`).
    used: u64,
    ready: bool,
    event_idx: bool,
    indirect: bool,
    /// Next available-ring entry to consume (free-running).
    next_avail: u16,
    /// Next used-ring slot to fill, and the value of `used.idx` (free-running).
    next_used: u16,
    /// `used.idx` at the last notification decision (EVENT_IDX); `None`
    /// until the first one, which always notifies.
    signalled_used: Option<u16>,
    /// Used entries were added since the last notification decision.
    used_pending: bool,
    /// Chains [`Queue::pop`] may still return in this round.
    budget: u32,
    /// Work units ([`ROUND_WORK`]) this round may still cost.
    work: u32,
    /// What the last successful pop cost, for [`Queue::undo_pop`].
    last_pop_work: u32,
    /// A pop was refused because the budget ran out: work is left.
    exhausted: bool,
}

impl Queue {
    /// A disabled queue whose `QueueNumMax` is `max_size` (clamped to
    /// 1..=32768).
    pub fn new(max_size: u16) -> Self {
        Self {
            max_size: max_size.clamp(1, MAX_QUEUE_SIZE),
            size: 0,
            desc: 0,
            avail: 0,
            used: 0,
            ready: false,
            event_idx: false,
            indirect: false,
            next_avail: 0,
            next_used: 0,
            signalled_used: None,
            used_pending: false,
            budget: 0,
            work: 0,
            last_pop_work: 0,
            exhausted: false,
        }
    }

    /// Back to the state after [`Queue::new`] (device reset).
    pub fn reset(&mut self) {
        *self = Self::new(self.max_size);
    }

    pub fn max_size(&self) -> u16 {
        self.max_size
    }

    /// `QueueNum` as written by the driver.
    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn is_ready(&self) -> bool {
        self.ready
    }

    pub fn desc_addr(&self) -> u64 {
        self.desc
    }

    pub fn avail_addr(&self) -> u64 {
        self.avail
    }

    pub fn used_addr(&self) -> u64 {
        self.used
    }

    /// The used index the device has published.
    pub fn used_idx(&self) -> u16 {
        self.next_used
    }

    /// The available-ring position the device will consume next.
    pub fn next_avail(&self) -> u16 {
        self.next_avail
    }

    /// Sets `QueueNum`. Ignored while the queue is ready (§4.2.2.2: the
    /// driver must not change a live queue).
    pub fn set_size(&mut self, size: u32) {
        if !self.ready {
            self.size = size;
        }
    }

    /// Sets the descriptor table address (ignored while ready).
    pub fn set_desc_addr(&mut self, addr: u64) {
        if !self.ready {
            self.desc = addr;
        }
    }

    /// Sets the available ring address (ignored while ready).
    pub fn set_avail_addr(&mut self, addr: u64) {
        if !self.ready {
            self.avail = addr;
        }
    }

    /// Sets the used ring address (ignored while ready).
    pub fn set_used_addr(&mut self, addr: u64) {
        if !self.ready {
            self.used = addr;
        }
    }

    /// `QueueReady` = 1: checks size and alignment, takes the negotiated
    /// ring features, and starts both cursors at 0.
    pub fn enable(&mut self, features: u64) -> Result<(), VirtioError> {
        let size = self.size;
        if size == 0 || size > u32::from(self.max_size) || !size.is_power_of_two() {
            return Err(VirtioError::BadQueueSize { size, max: self.max_size });
        }
        let n = u64::from(size);
        // (area, address, alignment, bytes including the event field)
        let areas = [
            (Area::DescTable, self.desc, 16, DESC_SIZE * n),
            (Area::AvailRing, self.avail, 2, 6 + 2 * n),
            (Area::UsedRing, self.used, 4, 6 + 8 * n),
        ];
        for (area, addr, align, len) in areas {
            if addr % align != 0 {
                return Err(VirtioError::Misaligned { area, addr });
            }
            // No ring may wrap the address space: afterwards every field
            // address computed from it is free of overflow.
            if addr.checked_add(len).is_none() {
                let err = MemError { ipa: Ipa(addr), len };
                return Err(VirtioError::OutOfRam { area, err });
            }
        }
        self.set_ring_features(features);
        self.restart();
        self.ready = true;
        Ok(())
    }

    /// Takes the final ring features at `DRIVER_OK`, for a driver that
    /// enabled the queue before it finished negotiating.
    pub(crate) fn set_ring_features(&mut self, features: u64) {
        self.event_idx = features & features::EVENT_IDX != 0;
        self.indirect = features & features::INDIRECT_DESC != 0;
    }

    /// `QueueReady` = 0: the device stops using the queue. The configuration
    /// stays; enabling it again starts from index 0.
    pub fn disable(&mut self) {
        self.ready = false;
        self.restart();
    }

    fn restart(&mut self) {
        self.next_avail = 0;
        self.next_used = 0;
        self.signalled_used = None;
        self.used_pending = false;
        self.start_round();
    }

    /// Starts a processing round: [`Queue::pop`] hands out at most one
    /// queue's worth of chains, and the round costs at most [`ROUND_WORK`]
    /// units, before the transport gets control back. So neither a driver
    /// that keeps refilling the ring nor one whose chains name gigabytes can
    /// hold the CPU at EL2: what is left waits for the next round, in the
    /// VM's own time. The transport starts one before every call into the
    /// device.
    pub fn start_round(&mut self) {
        self.budget = self.size;
        self.work = ROUND_WORK;
        self.exhausted = false;
    }

    /// Whether the last round stopped with work possibly left.
    pub fn round_exhausted(&self) -> bool {
        self.exhausted
    }

    /// Counts `bytes` of data the device moved against this round's work.
    pub fn charge_bytes(&mut self, bytes: u64) {
        let units = bytes.div_ceil(BYTES_PER_UNIT).min(u64::from(u32::MAX)) as u32;
        self.work = self.work.saturating_sub(units);
    }

    /// Work units this round may still cost.
    pub fn work_left(&self) -> u32 {
        self.work
    }

    /// The device stops this round with work of its own unfinished (a request
    /// it serves in pieces): the transport calls it again next round.
    pub fn defer(&mut self) {
        self.exhausted = true;
    }

    fn mask(&self) -> u16 {
        // size is a power of two in 1..=32768 once ready
        (self.size - 1) as u16
    }

    fn avail_idx_addr(&self) -> Ipa {
        Ipa(self.avail + 2)
    }

    fn avail_entry_addr(&self, slot: u16) -> Ipa {
        Ipa(self.avail + 4 + 2 * u64::from(slot))
    }

    /// `used_event`, after the available ring.
    fn used_event_addr(&self) -> Ipa {
        Ipa(self.avail + 4 + 2 * u64::from(self.size))
    }

    fn used_idx_addr(&self) -> Ipa {
        Ipa(self.used + 2)
    }

    fn used_elem_addr(&self, slot: u16) -> Ipa {
        Ipa(self.used + 4 + 8 * u64::from(slot))
    }

    /// `avail_event`, after the used ring.
    fn avail_event_addr(&self) -> Ipa {
        Ipa(self.used + 4 + 8 * u64::from(self.size))
    }

    fn ring_err(area: Area) -> impl Fn(MemError) -> VirtioError {
        move |err| VirtioError::OutOfRam { area, err }
    }

    fn load_avail_idx(&self, ram: &dyn GuestRam) -> Result<u16, VirtioError> {
        ram.load_u16(self.avail_idx_addr()).map_err(Self::ring_err(Area::AvailRing))
    }

    /// Takes the next available chain into `chain`. `Ok(false)` when there is
    /// none (or the queue is not ready, or this round's budget is spent);
    /// `Err` when the driver broke a ring rule — the device must then stop.
    ///
    /// With `VIRTIO_F_EVENT_IDX`, finding the ring empty also writes
    /// `avail_event` so that the driver notifies at its next addition, and
    /// looks once more to close the race with an addition made meanwhile.
    pub fn pop(
        &mut self,
        ram: &mut dyn GuestRam,
        chain: &mut DescChain,
    ) -> Result<bool, VirtioError> {
        if !self.ready {
            return Ok(false);
        }
        if self.budget == 0 || self.work == 0 {
            self.exhausted = true;
            return Ok(false);
        }
        let mut avail_idx = self.load_avail_idx(ram)?;
        if avail_idx == self.next_avail {
            if !self.event_idx {
                return Ok(false);
            }
            ram.store_u16(self.avail_event_addr(), self.next_avail)
                .map_err(Self::ring_err(Area::UsedRing))?;
            fence(Ordering::SeqCst);
            avail_idx = self.load_avail_idx(ram)?;
            if avail_idx == self.next_avail {
                return Ok(false);
            }
        }
        let size = self.size as u16; // <= 32768 once ready
        if avail_idx.wrapping_sub(self.next_avail) > size {
            return Err(VirtioError::AvailIndexJump {
                avail_idx,
                last_seen: self.next_avail,
                size,
            });
        }
        // The entry and the descriptors it names were written before the
        // index that published them.
        fence(Ordering::Acquire);
        let slot = self.next_avail & self.mask();
        let head =
            ram.load_u16(self.avail_entry_addr(slot)).map_err(Self::ring_err(Area::AvailRing))?;
        if u32::from(head) >= self.size {
            return Err(VirtioError::HeadOutOfRange { head, size });
        }
        let descriptors = self.walk(ram, head, chain)?;
        self.next_avail = self.next_avail.wrapping_add(1);
        self.budget -= 1;
        self.last_pop_work = self.work.min(descriptors);
        self.work -= self.last_pop_work;
        Ok(true)
    }

    /// Gives back the chain the last successful [`Queue::pop`] returned,
    /// unused: the next pop returns it again. For a receive path that finds
    /// the buffer too small for what it has to deliver.
    pub fn undo_pop(&mut self) {
        self.next_avail = self.next_avail.wrapping_sub(1);
        self.budget += 1;
        self.work += self.last_pop_work;
    }

    /// Copies descriptor `idx` of the table at `table` out of guest memory.
    fn read_desc(
        ram: &dyn GuestRam,
        table: u64,
        idx: u32,
        area: Area,
    ) -> Result<Desc, VirtioError> {
        let mut b = [0u8; DESC_SIZE as usize];
        // `table + 16 * idx` cannot overflow: idx is below the table length
        // and the whole table was checked not to wrap.
        ram.read(Ipa(table + DESC_SIZE * u64::from(idx)), &mut b)
            .map_err(|err| VirtioError::OutOfRam { area, err })?;
        let [a0, a1, a2, a3, a4, a5, a6, a7, l0, l1, l2, l3, f0, f1, n0, n1] = b;
        Ok(Desc {
            addr: u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
            len: u32::from_le_bytes([l0, l1, l2, l3]),
            flags: u16::from_le_bytes([f0, f1]),
            next: u16::from_le_bytes([n0, n1]),
        })
    }

    /// Follows the chain from `head`, validating as it goes (§2.7.5).
    ///
    /// Each table (the queue's, then at most one indirect table) is walked
    /// with a visit counter: visiting more entries than the table holds can
    /// only mean a loop. Independently, the chain may hold at most
    /// queue-size buffers (§2.7.5.3.1), which bounds the work whatever the
    /// indirect table's length says.
    ///
    /// Returns how many descriptors it read: the work the chain cost.
    fn walk(
        &self,
        ram: &dyn GuestRam,
        head: u16,
        chain: &mut DescChain,
    ) -> Result<u32, VirtioError> {
        chain.clear(head);
        let mut table = self.desc;
        let mut table_len = self.size;
        let mut area = Area::DescTable;
        let mut idx = u32::from(head);
        let mut visited = 0u32;
        let mut buffers = 0u32;
        let mut read = 0u32;
        loop {
            visited += 1;
            read += 1;
            if visited > table_len {
                return Err(VirtioError::DescriptorLoop { table_len });
            }
            let d = Self::read_desc(ram, table, idx, area)?;
            if d.flags & VIRTQ_DESC_F_INDIRECT != 0 {
                if area == Area::IndirectTable {
                    return Err(VirtioError::NestedIndirect);
                }
                if !self.indirect {
                    return Err(VirtioError::IndirectNotNegotiated);
                }
                if d.flags & VIRTQ_DESC_F_NEXT != 0 {
                    return Err(VirtioError::IndirectWithNext);
                }
                if d.len == 0 || d.len % DESC_SIZE as u32 != 0 {
                    return Err(VirtioError::BadIndirectLength { len: d.len });
                }
                // The whole table in RAM also means it does not wrap.
                ram.check(Ipa(d.addr), d.len.into())
                    .map_err(|err| VirtioError::OutOfRam { area: Area::IndirectTable, err })?;
                // The WRITE flag of this descriptor means nothing (§2.7.5.3.2).
                table = d.addr;
                table_len = d.len / DESC_SIZE as u32;
                area = Area::IndirectTable;
                idx = 0;
                visited = 0;
                continue;
            }
            buffers += 1;
            if buffers > self.size {
                return Err(VirtioError::ChainTooLong { max: self.size as u16 });
            }
            chain.push(ram, d)?;
            if d.flags & VIRTQ_DESC_F_NEXT == 0 {
                return Ok(read);
            }
            if u32::from(d.next) >= table_len {
                return Err(VirtioError::NextOutOfRange { next: d.next, table_len });
            }
            idx = u32::from(d.next);
        }
    }

    /// Returns chain `head` to the driver with `len` bytes written into its
    /// writable part: fills the next used element, then publishes it by
    /// advancing `used.idx`.
    pub fn add_used(
        &mut self,
        ram: &mut dyn GuestRam,
        head: u16,
        len: u32,
    ) -> Result<(), VirtioError> {
        if !self.ready {
            return Ok(());
        }
        let slot = self.next_used & self.mask();
        let mut elem = [0u8; 8];
        elem[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        elem[4..].copy_from_slice(&len.to_le_bytes());
        ram.write(self.used_elem_addr(slot), &elem).map_err(Self::ring_err(Area::UsedRing))?;
        // The element before the index that publishes it.
        fence(Ordering::Release);
        let new = self.next_used.wrapping_add(1);
        ram.store_u16(self.used_idx_addr(), new).map_err(Self::ring_err(Area::UsedRing))?;
        self.next_used = new;
        self.used_pending = true;
        Ok(())
    }

    /// Whether the driver wants a used-buffer interrupt for the entries
    /// added since the last call (§2.7.7): with `VIRTIO_F_EVENT_IDX`, iff
    /// the used index passed `used_event`; without, unless the driver set
    /// `VIRTQ_AVAIL_F_NO_INTERRUPT`. `false` if nothing was added.
    pub fn needs_notification(&mut self, ram: &dyn GuestRam) -> Result<bool, VirtioError> {
        if !self.ready || !self.used_pending {
            return Ok(false);
        }
        self.used_pending = false;
        // `used.idx` must be visible before the suppression field is read
        // (see the module documentation).
        fence(Ordering::SeqCst);
        let new = self.next_used;
        if self.event_idx {
            let event =
                ram.load_u16(self.used_event_addr()).map_err(Self::ring_err(Area::AvailRing))?;
            Ok(match self.signalled_used.replace(new) {
                Some(old) => need_event(event, new, old),
                None => true,
            })
        } else {
            let flags = ram.load_u16(Ipa(self.avail)).map_err(Self::ring_err(Area::AvailRing))?;
            Ok(flags & VIRTQ_AVAIL_F_NO_INTERRUPT == 0)
        }
    }
}
