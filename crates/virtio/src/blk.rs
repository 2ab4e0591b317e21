//! virtio-blk (virtio 1.x §5.2) over a caller-provided [`BlockBackend`].
//!
//! One request queue. A request is a 16-byte device-readable header (`type`,
//! reserved, `sector`), data (device-readable for a write, device-writable
//! for a read), and one device-writable status byte at the very end. The
//! framing is independent of the descriptor boundaries (§2.7.4): the device
//! looks at byte offsets in the readable and writable parts, never at how
//! many descriptors carry them.
//!
//! Supported: `VIRTIO_BLK_T_IN`, `T_OUT`, `T_FLUSH` (`VIRTIO_BLK_F_FLUSH`),
//! `T_GET_ID`; anything else completes with `VIRTIO_BLK_S_UNSUPP`. A request
//! outside the disk, with data that is not whole sectors, or a write to a
//! read-only disk completes with `VIRTIO_BLK_S_IOERR`. Only a request with
//! no status byte at all is a driver error that stops the device, since it
//! cannot be completed.
//!
//! # Submission and completion
//!
//! The device checks a chain, then *submits* a [`Request`] to the backend:
//! the operation, the byte offset on the disk, and the data as the guest's
//! own buffers, guest-physical [`Segment`]s already checked to lie in RAM
//! (no bounce buffer), with a [`Token`]. The backend completes it during the
//! call ([`Submit::Done`]: the RAM disk copies between its memory and the
//! buffers) or later ([`Submit::Pending`]: a physical disk's DMA); then the
//! hypervisor calls [`VirtioMmio::complete`](crate::VirtioMmio::complete)
//! with the token, from the physical device's interrupt, and no CPU waits
//! meanwhile. Requests reach the used ring in the order they complete
//! (§2.7.8 lets a device return buffers in any order); the interrupt is the
//! transport's decision, as for any used buffer. `T_GET_ID` never reaches
//! the backend: the serial is the VM's device's, from its configuration.
//!
//! The used length is the whole writable part, as QEMU reports it. Only a
//! successful read fills the data area: a failed or refused request writes
//! its status byte and nothing else, so what it costs never depends on how
//! much writable memory its chain names (a driver reads only the status of
//! a failed request).
//!
//! # Bounded work
//!
//! A request over what the device offers (`seg_max` data segments of at
//! most `size_max` bytes) fails at once with `VIRTIO_BLK_S_IOERR`. A
//! backend that copies during the call ([`BlockBackend::copies`]: the RAM
//! disks) is handed a large request in pieces of at most [`Blk::PIECE`]
//! bytes, as many per round as the queue's work budget allows
//! ([`crate::queue::ROUND_WORK`]); the rest waits for the next round, in the
//! VM's own time, and no later request starts before it is done.
//!
//! What the device keeps of a request in flight (chain head, the status
//! byte's address, the used length) is one slot of a table of
//! [`Blk::QUEUE_SIZE`] allocated with the device: while as many requests as
//! the queue's size are in flight, the device leaves chains in the
//! available ring and takes them when a completion frees a slot. A driver,
//! however it floods the ring, cannot make the device hold more, nor
//! allocate per request.
//!
//! # Flush ordering
//!
//! A `T_FLUSH` makes durable what was written before it. The rule: a flush
//! is handed to the backend only once every write submitted before it has
//! completed, and completes when the backend's flush does. Reads and later
//! writes are not held behind it (a driver that needs a later write ordered
//! after the flush waits for the flush's completion, as Linux does).
//!
//! # Reset
//!
//! A device reset (the driver's, or the VM's) forgets every request in
//! flight. Each submission's token carries a serial that is never reused,
//! so a completion that arrives after the reset matches no slot and is
//! dropped: it writes neither the status byte nor the used ring of the
//! reset device. (The backend must still not let its DMA into the VM's RAM
//! outlive the VM's use of that RAM: that is the physical backend's rule.)

use alloc::boxed::Box;
use alloc::vec::Vec;

use addr::Ipa;

use crate::device::{DeviceStats, VirtioDevice, copy_config, device_id};
use crate::error::VirtioError;
use crate::queue::{DescChain, Queue, Segment};
use crate::ram::GuestRam;

/// `VIRTIO_BLK_F_SIZE_MAX`: `size_max` bounds each data segment. A physical
/// backend maps every segment onto guest RAM's 2 MiB chunks; bounded, a
/// segment spans at most two, so any request fits one request of the
/// physical disk (`machine_disk::queue::MAX_SEGMENTS`).
pub const F_SIZE_MAX: u64 = 1 << 1;
/// `VIRTIO_BLK_F_SEG_MAX`: `seg_max` says how many data segments a request
/// may have. Without it Linux sends one segment per request: a 1 MiB direct
/// read became some 60 requests of a few pages each.
pub const F_SEG_MAX: u64 = 1 << 2;
/// `VIRTIO_BLK_F_RO`: the disk is read-only.
pub const F_RO: u64 = 1 << 5;
/// `VIRTIO_BLK_F_FLUSH`: cache flush requests exist.
pub const F_FLUSH: u64 = 1 << 9;

/// Request types.
pub const T_IN: u32 = 0;
pub const T_OUT: u32 = 1;
pub const T_FLUSH: u32 = 4;
pub const T_GET_ID: u32 = 8;

/// Status values.
pub const S_OK: u8 = 0;
pub const S_IOERR: u8 = 1;
pub const S_UNSUPP: u8 = 2;

/// Sector size of `sector` and `capacity`, whatever the backend's.
pub const SECTOR_SIZE: u64 = 512;
/// Length of the `T_GET_ID` answer.
pub const ID_BYTES: usize = 20;

/// Length of the request header.
const HEADER_LEN: u64 = 16;

/// The backend failed an access; the request completes with
/// `VIRTIO_BLK_S_IOERR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockError;

/// What a request asks of the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Disk to the segments (device-writable guest buffers).
    Read,
    /// The segments (device-readable guest buffers) to the disk.
    Write,
    /// Make every completed write durable; no segments.
    Flush,
}

/// Names a submitted request when it completes: a slot of the device's
/// table and a serial never reused, so that a late or repeated completion
/// cannot complete another request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub(crate) slot: u16,
    pub(crate) serial: u64,
}

impl Token {
    /// For requests the tests submit to a backend directly.
    #[cfg(test)]
    pub(crate) const TEST: Self = Self { slot: u16::MAX, serial: u64::MAX };

    /// A token no device issued, for driving a backend without a device (a backend's own
    /// tests): a device completes only the tokens it issued, so this one completes nothing.
    pub const fn detached(serial: u64) -> Self {
        Self { slot: u16::MAX, serial }
    }
}

/// One request handed to a [`BlockBackend`].
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub token: Token,
    pub op: Op,
    /// Byte offset on the backend's disk.
    pub offset: u64,
    /// The guest's buffers, in order, each inside guest RAM; the disk range
    /// is `offset..offset + self.len()`.
    pub segments: &'a [Segment],
}

impl Request<'_> {
    /// Bytes of data: the segments' lengths added up.
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| u64::from(s.len)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.iter().all(|s| s.len == 0)
    }
}

/// What [`BlockBackend::submit`] did with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Submit {
    /// Finished during the call.
    Done(Result<(), BlockError>),
    /// Under way: the hypervisor passes its completion to
    /// [`VirtioMmio::complete`](crate::VirtioMmio::complete) with the token.
    Pending,
    /// Not taken: the backend's own device has no room now (a physical
    /// disk's queue, shared with other VMs). The device gives the chain back
    /// to the available ring and takes nothing more until the backend has
    /// room again and says so
    /// ([`VirtioMmio::backend_ready`](crate::VirtioMmio::backend_ready)).
    Busy,
}

/// A disk, of whatever kind: memory of the hypervisor's, a partition of a
/// physical disk, a driver VM. Offsets are in bytes; the device only submits
/// ranges inside `size()` rounded down to whole sectors.
///
/// The data moves between the disk and the guest's own buffers, named by
/// guest-physical address: a synchronous backend copies through the
/// [`GuestRam`] it is lent (never holding a Rust reference into guest
/// memory, see [`crate::ram`]), an asynchronous one has the buffers'
/// host-physical addresses written into its device's descriptors.
///
/// (`size` rather than `len`: with the trait implemented for `&mut [u8]`,
/// a `len` method would shadow the slice's own `len` wherever the trait is
/// in scope.)
pub trait BlockBackend: Send {
    /// Size in bytes.
    fn size(&self) -> u64;

    /// Whether every write fails (the device then offers `VIRTIO_BLK_F_RO`).
    fn read_only(&self) -> bool {
        false
    }

    /// Whether [`BlockBackend::submit`] moves the data itself, during the
    /// call (a memory-backed disk): its cost then grows with the request,
    /// and the device hands it large requests in pieces. A backend whose
    /// device moves the data (DMA) answers `false`.
    fn copies(&self) -> bool {
        false
    }

    /// Starts `req`. `ram` is the VM's memory, for a backend that copies;
    /// it is lent for this call only.
    fn submit(&mut self, req: &Request<'_>, ram: &mut dyn GuestRam) -> Submit;
}

/// `offset..offset + n` of `disk`, if it is inside.
fn range(disk_len: usize, offset: u64, n: usize) -> Result<core::ops::Range<usize>, BlockError> {
    let start = usize::try_from(offset).map_err(|_| BlockError)?;
    let end = start.checked_add(n).ok_or(BlockError)?;
    if end > disk_len {
        return Err(BlockError);
    }
    Ok(start..end)
}

/// The in-memory backends: one copy per segment between the disk and guest
/// memory, bounds-checked, completed at once.
fn serve_in_memory(disk: &mut [u8], req: &Request<'_>, ram: &mut dyn GuestRam) -> Submit {
    let mut pos = req.offset;
    for s in req.segments {
        let r = match range(disk.len(), pos, s.len as usize) {
            Ok(r) => r,
            Err(e) => return Submit::Done(Err(e)),
        };
        let copied = match req.op {
            Op::Read => ram.write(s.addr, &disk[r]),
            Op::Write => ram.read(s.addr, &mut disk[r]),
            Op::Flush => Ok(()),
        };
        if copied.is_err() {
            return Submit::Done(Err(BlockError));
        }
        pos += u64::from(s.len);
    }
    Submit::Done(Ok(()))
}

/// A disk image in a RAM region the hypervisor owns.
impl BlockBackend for &mut [u8] {
    fn size(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn copies(&self) -> bool {
        true
    }
    fn submit(&mut self, req: &Request<'_>, ram: &mut dyn GuestRam) -> Submit {
        serve_in_memory(self, req, ram)
    }
}

/// A disk image on the heap (tests, small scratch disks).
impl BlockBackend for Vec<u8> {
    fn size(&self) -> u64 {
        Vec::len(self) as u64
    }
    fn copies(&self) -> bool {
        true
    }
    fn submit(&mut self, req: &Request<'_>, ram: &mut dyn GuestRam) -> Submit {
        serve_in_memory(self, req, ram)
    }
}

/// A window `[start, start + len)` of a parent backend, seen as a whole disk
/// from offset 0: a partition of a physical disk given to one VM.
///
/// Checked here, whatever the device above already checked, since the
/// parent may hold other VMs' data: a request reaching outside the window
/// completes with an I/O error and the parent never sees it; so does a
/// write when the partition is read-only.
pub struct Partition<B> {
    parent: B,
    start: u64,
    len: u64,
    read_only: bool,
}

impl<B: BlockBackend> Partition<B> {
    /// The window, if it lies inside `parent`.
    pub fn new(parent: B, start: u64, len: u64) -> Option<Self> {
        let end = start.checked_add(len)?;
        (end <= parent.size()).then_some(Self { parent, start, len, read_only: false })
    }

    /// Refuses every write.
    pub fn read_only(mut self, ro: bool) -> Self {
        self.read_only = ro;
        self
    }

    pub fn parent_mut(&mut self) -> &mut B {
        &mut self.parent
    }
}

impl<B: BlockBackend> BlockBackend for Partition<B> {
    fn size(&self) -> u64 {
        self.len
    }

    fn read_only(&self) -> bool {
        self.read_only || self.parent.read_only()
    }

    fn copies(&self) -> bool {
        self.parent.copies()
    }

    fn submit(&mut self, req: &Request<'_>, ram: &mut dyn GuestRam) -> Submit {
        match req.op {
            // A flush concerns the whole parent: it may make other
            // partitions' writes durable early, which is harmless.
            Op::Flush => return self.parent.submit(req, ram),
            Op::Write if BlockBackend::read_only(self) => return Submit::Done(Err(BlockError)),
            Op::Read | Op::Write => {}
        }
        if req.offset.checked_add(req.len()).is_none_or(|end| end > self.len) {
            return Submit::Done(Err(BlockError));
        }
        // No overflow: the window lies inside the parent.
        let moved = Request { offset: self.start + req.offset, ..*req };
        self.parent.submit(&moved, ram)
    }
}

/// Byte offset of `sector` if `len` bytes from there are whole sectors
/// inside a disk of `capacity` sectors.
fn disk_range(capacity: u64, sector: u64, len: u64) -> Option<u64> {
    if !len.is_multiple_of(SECTOR_SIZE) {
        return None;
    }
    let start = sector.checked_mul(SECTOR_SIZE)?;
    let end = start.checked_add(len)?;
    (end <= capacity * SECTOR_SIZE).then_some(start)
}

/// What the device keeps of a request between submission and completion.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    serial: u64,
    head: u16,
    /// Where the status byte goes: the last writable byte of the chain.
    status_at: Ipa,
    /// The used element's length: the whole writable part.
    used_len: u32,
    op: Op,
    /// Data bytes, for the statistics.
    bytes: u32,
    /// A flush not yet handed to the backend (see the module documentation).
    held: bool,
}

/// A request a copying backend is being handed in pieces.
#[derive(Clone, Copy, Debug)]
struct Partial {
    slot: u16,
    /// Disk byte offset of the request's first byte.
    offset: u64,
    /// Data bytes handed over so far.
    done: u64,
}

/// What to do with a request once its chain is parsed.
enum Action {
    /// Complete at once with this status.
    Finish(u8),
    /// Submit to the backend: the operation and the disk offset (the data
    /// segments are in `Blk::segs`).
    Submit(Op, u64),
}

/// The block device.
pub struct Blk {
    backend: Box<dyn BlockBackend>,
    read_only: bool,
    id: [u8; ID_BYTES],
    chain: DescChain,
    /// The data segments of the request being submitted, or of the
    /// [`Partial`] one (scratch, allocated once: a chain has at most
    /// `QUEUE_SIZE` buffers).
    segs: Vec<Segment>,
    /// The segments of one piece of `partial` (scratch, allocated once).
    piece: Vec<Segment>,
    /// The request being handed to a copying backend in pieces; no other
    /// starts before it is done.
    partial: Option<Partial>,
    /// Requests in flight, by slot; `QUEUE_SIZE` of them, allocated once.
    slots: Vec<Option<InFlight>>,
    /// Free slots (a stack, allocated once).
    free: Vec<u16>,
    /// At most this many requests in flight: the driver's queue size.
    limit: usize,
    /// Chains were left in the available ring because `limit` were in flight.
    stalled: bool,
    /// The next request's serial; never reused, not even across resets.
    next_serial: u64,
    /// Writes submitted and not completed.
    writes_in_flight: u32,
    /// Flushes waiting for earlier writes, or for a busy backend.
    held_flushes: u32,
    /// The backend answered [`Submit::Busy`]: nothing more is submitted
    /// until the next poll.
    backend_busy: bool,
    stats: DeviceStats,
}

impl Blk {
    /// `QueueNumMax` of the request queue.
    pub const QUEUE_SIZE: u16 = 256;
    /// The data segments a request may have: `seg_max`.
    pub const SEG_MAX: u32 = Self::QUEUE_SIZE as u32 - 2;
    /// The longest data segment: `size_max`. A request with a longer one
    /// fails with `VIRTIO_BLK_S_IOERR` before it reaches the backend.
    pub const SIZE_MAX: u32 = 1 << 20;
    /// Most bytes a copying backend is handed at once (one piece of a
    /// larger request).
    pub const PIECE: u64 = 256 << 10;

    /// A writable disk on `backend` (unless the backend is read-only) with an
    /// empty ID.
    pub fn new(backend: impl BlockBackend + 'static) -> Self {
        let n = usize::from(Self::QUEUE_SIZE);
        let mut blk = Self {
            backend: Box::new(backend),
            read_only: false,
            id: [0; ID_BYTES],
            chain: DescChain::new(),
            segs: Vec::with_capacity(n),
            piece: Vec::with_capacity(n),
            partial: None,
            slots: alloc::vec![None; n],
            free: Vec::with_capacity(n),
            limit: n,
            stalled: false,
            next_serial: 0,
            writes_in_flight: 0,
            held_flushes: 0,
            backend_busy: false,
            stats: DeviceStats::default(),
        };
        blk.forget_in_flight();
        blk
    }

    /// Offers `VIRTIO_BLK_F_RO` and fails every write (a read-only backend
    /// is read-only whatever this says).
    pub fn read_only(mut self, ro: bool) -> Self {
        self.read_only = ro;
        self
    }

    fn is_read_only(&self) -> bool {
        self.read_only || self.backend.read_only()
    }

    /// The serial returned by `T_GET_ID`: up to 20 bytes, NUL-padded (no
    /// terminator when all 20 are used, as §5.2.6 says).
    pub fn with_id(mut self, id: &[u8]) -> Self {
        let n = id.len().min(ID_BYTES);
        self.id = [0; ID_BYTES];
        self.id[..n].copy_from_slice(&id[..n]);
        self
    }

    /// Capacity in 512-byte sectors (a partial last sector is not exposed).
    pub fn capacity(&self) -> u64 {
        self.backend.size() / SECTOR_SIZE
    }

    /// The backend, e.g. to inspect the disk after a run.
    pub fn backend_mut(&mut self) -> &mut dyn BlockBackend {
        self.backend.as_mut()
    }

    /// Requests submitted (or held) and not completed.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn forget_in_flight(&mut self) {
        self.slots.fill(None);
        self.free.clear();
        // Popped from the end: slot 0 first.
        self.free.extend((0..Self::QUEUE_SIZE).rev());
        self.stalled = false;
        self.writes_in_flight = 0;
        self.held_flushes = 0;
        self.backend_busy = false;
        self.partial = None;
    }

    /// What the request on the popped chain asks for. Writes what the
    /// device itself answers (`T_GET_ID`) and fills `segs` for a submission.
    fn parse(&mut self, ram: &mut dyn GuestRam, data_len: u64) -> Result<Action, VirtioError> {
        let mut header = [0u8; HEADER_LEN as usize];
        if self.chain.read_at(ram, 0, &mut header)? < header.len() {
            return Ok(Action::Finish(S_IOERR));
        }
        let [k0, k1, k2, k3, _, _, _, _, s @ ..] = header;
        let kind = u32::from_le_bytes([k0, k1, k2, k3]);
        let sector = u64::from_le_bytes(s);
        let capacity = self.capacity();
        self.segs.clear();
        Ok(match kind {
            T_IN => match disk_range(capacity, sector, data_len) {
                Some(offset) => {
                    self.chain.writable_segments(0, data_len, &mut self.segs);
                    Action::Submit(Op::Read, offset)
                }
                None => Action::Finish(S_IOERR),
            },
            T_OUT => {
                let len = u64::from(self.chain.readable_len()).saturating_sub(HEADER_LEN);
                match disk_range(capacity, sector, len).filter(|_| !self.is_read_only()) {
                    Some(offset) => {
                        self.chain.readable_segments(HEADER_LEN, len, &mut self.segs);
                        Action::Submit(Op::Write, offset)
                    }
                    None => Action::Finish(S_IOERR),
                }
            }
            T_FLUSH => Action::Submit(Op::Flush, 0),
            T_GET_ID => {
                let n = data_len.min(ID_BYTES as u64) as usize;
                self.chain.write_at(ram, 0, &self.id[..n])?;
                Action::Finish(S_OK)
            }
            _ => Action::Finish(S_UNSUPP),
        })
    }

    /// Serves the chain just popped from `q`.
    fn start(&mut self, q: &mut Queue, ram: &mut dyn GuestRam) -> Result<(), VirtioError> {
        let writable = self.chain.writable_len();
        let Some(status_off) = writable.checked_sub(1) else {
            return Err(VirtioError::Malformed("block request without a status byte"));
        };
        // Everything writable before the status byte is the data area.
        let data_len = u64::from(status_off);
        let status_at = self
            .chain
            .writable_addr(data_len)
            .ok_or(VirtioError::Malformed("block request without a status byte"))?;
        let head = self.chain.head();
        let (op, offset) = match self.parse(ram, data_len)? {
            Action::Finish(status) => {
                return self.finish_now(q, ram, head, status_at, writable, status);
            }
            Action::Submit(op, offset) => (op, offset),
        };
        if self.segs.len() > Self::SEG_MAX as usize
            || self.segs.iter().any(|seg| seg.len > Self::SIZE_MAX)
        {
            // Beyond what the device offered: refused at once, nothing moved.
            return self.finish_now(q, ram, head, status_at, writable, S_IOERR);
        }
        let Some(slot) = self.free.pop() else {
            // `process` pops only with a free slot.
            return Err(VirtioError::Malformed("block request without a free slot"));
        };
        let serial = self.next_serial;
        self.next_serial += 1;
        // At most SEG_MAX segments of at most SIZE_MAX bytes: well under 4 GiB.
        let bytes = self.segs.iter().map(|s| s.len).sum();
        let held = op == Op::Flush && self.writes_in_flight > 0;
        self.slots[usize::from(slot)] =
            Some(InFlight { serial, head, status_at, used_len: writable, op, bytes, held });
        if held {
            self.held_flushes += 1;
            return Ok(());
        }
        if op == Op::Write {
            self.writes_in_flight += 1;
        }
        if op != Op::Flush && self.backend.copies() {
            self.partial = Some(Partial { slot, offset, done: 0 });
            return self.continue_partial(q, ram);
        }
        let token = Token { slot, serial };
        let req = Request { token, op, offset, segments: &self.segs };
        match self.backend.submit(&req, ram) {
            Submit::Pending => Ok(()),
            Submit::Busy => {
                // As if the chain had not been taken: the next poll parses it again.
                self.release(slot);
                q.undo_pop();
                self.backend_busy = true;
                Ok(())
            }
            Submit::Done(result) => self.finish(slot, result, q, ram),
        }
    }

    /// Hands a copying backend the next pieces of the [`Partial`] request
    /// while the round's work lasts; completes it after the last one (or the
    /// first that fails).
    fn continue_partial(
        &mut self,
        q: &mut Queue,
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        let Some(mut p) = self.partial.take() else {
            return Ok(());
        };
        let Some(Some(f)) = self.slots.get(usize::from(p.slot)).copied() else {
            return Ok(());
        };
        let token = Token { slot: p.slot, serial: f.serial };
        let total = u64::from(f.bytes);
        while p.done < total {
            if q.work_left() == 0 {
                self.partial = Some(p);
                q.defer();
                return Ok(());
            }
            let n = (total - p.done).min(Self::PIECE);
            self.piece.clear();
            DescChain::segments_of(&self.segs, p.done, n, &mut self.piece);
            let req = Request { token, op: f.op, offset: p.offset + p.done, segments: &self.piece };
            let result = match self.backend.submit(&req, ram) {
                Submit::Done(result) => result,
                // A copying backend finishes during the call; anything else is its failure.
                Submit::Pending | Submit::Busy => Err(BlockError),
            };
            q.charge_bytes(n);
            p.done += n;
            if result.is_err() {
                return self.finish(p.slot, result, q, ram);
            }
        }
        self.finish(p.slot, Ok(()), q, ram)
    }

    /// Completes a request that never had a slot.
    fn finish_now(
        &mut self,
        q: &mut Queue,
        ram: &mut dyn GuestRam,
        head: u16,
        status_at: Ipa,
        used_len: u32,
        status: u8,
    ) -> Result<(), VirtioError> {
        ram.write(status_at, &[status])?;
        q.add_used(ram, head, used_len)?;
        self.stats.requests += 1;
        if status != S_OK {
            self.stats.errors += 1;
        }
        Ok(())
    }

    /// Completes the request in `slot`: status byte, used ring, and the
    /// flushes its completion lets go.
    fn finish(
        &mut self,
        slot: u16,
        result: Result<(), BlockError>,
        q: &mut Queue,
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        let Some(f) = self.release(slot) else {
            return Ok(());
        };
        let status = if result.is_ok() { S_OK } else { S_IOERR };
        if status == S_OK {
            match f.op {
                Op::Read => self.stats.bytes_to_guest += u64::from(f.bytes),
                Op::Write => self.stats.bytes_from_guest += u64::from(f.bytes),
                Op::Flush => {}
            }
        }
        self.finish_now(q, ram, f.head, f.status_at, f.used_len, status)?;
        if f.op == Op::Write && self.held_flushes > 0 {
            self.release_flushes(q, ram)?;
        }
        Ok(())
    }

    /// Frees `slot`, keeping the counters right; what it held.
    fn release(&mut self, slot: u16) -> Option<InFlight> {
        let f = self.slots.get_mut(usize::from(slot))?.take()?;
        self.free.push(slot);
        if f.op == Op::Write {
            self.writes_in_flight -= 1;
        }
        if f.held {
            self.held_flushes -= 1;
        }
        Some(f)
    }

    /// A held flush was handed to the backend.
    fn mark_submitted(&mut self, slot: u16) {
        if let Some(Some(f)) = self.slots.get_mut(usize::from(slot)) {
            f.held = false;
            self.held_flushes -= 1;
        }
    }

    /// Hands the backend every held flush that no earlier write holds back.
    fn release_flushes(
        &mut self,
        q: &mut Queue,
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        let oldest_write =
            self.slots.iter().flatten().filter(|f| f.op == Op::Write).map(|f| f.serial).min();
        for i in 0..self.slots.len() {
            let Some(f) = &mut self.slots[i] else {
                continue;
            };
            if !f.held || oldest_write.is_some_and(|w| w < f.serial) {
                continue;
            }
            let slot = i as u16; // < QUEUE_SIZE
            let token = Token { slot, serial: f.serial };
            let req = Request { token, op: Op::Flush, offset: 0, segments: &[] };
            match self.backend.submit(&req, ram) {
                Submit::Pending => {}
                // Still held, until the backend has room (`backend_ready`).
                Submit::Busy => {
                    self.backend_busy = true;
                    return Ok(());
                }
                Submit::Done(result) => {
                    self.mark_submitted(slot);
                    self.finish(slot, result, q, ram)?;
                    continue;
                }
            }
            self.mark_submitted(slot);
        }
        Ok(())
    }

    /// The backend finished the request of `token` with `result`: status
    /// byte and used ring, now. `Ok(false)` if the token names no request in
    /// flight (one from before a reset, or completed already): nothing is
    /// touched. Use [`VirtioMmio::complete`](crate::VirtioMmio::complete),
    /// which also raises the interrupt.
    pub fn complete(
        &mut self,
        token: Token,
        result: Result<(), BlockError>,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<bool, VirtioError> {
        if !self.is_current(token) {
            return Ok(false);
        }
        let Some(q) = queues.first_mut() else {
            return Ok(false);
        };
        self.finish(token.slot, result, q, ram)?;
        Ok(true)
    }

    /// A completion for a device that may not touch its queues
    /// (`DEVICE_NEEDS_RESET`): frees the slot, touches no guest memory.
    pub fn discard(&mut self, token: Token) -> bool {
        self.is_current(token) && self.release(token.slot).is_some()
    }

    /// Whether `token` names a request handed to the backend and not
    /// completed (a held flush was never handed over).
    fn is_current(&self, token: Token) -> bool {
        matches!(self.slots.get(usize::from(token.slot)),
            Some(Some(f)) if f.serial == token.serial && !f.held)
    }
}

impl VirtioDevice for Blk {
    fn device_id(&self) -> u32 {
        device_id::BLOCK
    }

    fn name(&self) -> &'static str {
        "virtio-blk"
    }

    fn features(&self) -> u64 {
        F_SIZE_MAX | F_SEG_MAX | F_FLUSH | if self.is_read_only() { F_RO } else { 0 }
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[Self::QUEUE_SIZE]
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // struct virtio_blk_config: `capacity` (le64 at 0), `size_max` (le32
        // at 8) and `seg_max` (le32 at 12) are backed by offered features; the
        // other fields read as 0.
        // A chain holds at most queue-size buffers (§2.7.5.3.1), two of them
        // the header and the status byte.
        let mut config = [0u8; 16];
        config[..8].copy_from_slice(&self.capacity().to_le_bytes());
        config[8..12].copy_from_slice(&Self::SIZE_MAX.to_le_bytes());
        config[12..].copy_from_slice(&Self::SEG_MAX.to_le_bytes());
        copy_config(&config, offset, data);
    }

    fn process(
        &mut self,
        queue: usize,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        let Some(q) = queues.get_mut(queue) else {
            return Ok(());
        };
        self.limit = (q.size() as usize).min(self.slots.len());
        self.stalled = false;
        self.backend_busy = false;
        if self.held_flushes > 0 {
            // Some may have waited for a busy backend rather than for a write.
            self.release_flushes(q, ram)?;
        }
        if self.partial.is_some() {
            self.continue_partial(q, ram)?;
            if self.partial.is_some() {
                return Ok(());
            }
        }
        loop {
            if self.in_flight() >= self.limit || self.backend_busy {
                self.stalled = true;
                return Ok(());
            }
            if !q.pop(ram, &mut self.chain)? {
                return Ok(());
            }
            self.start(q, ram)?;
        }
    }

    fn has_pending_work(&self) -> bool {
        // A busy backend says when it has room (`VirtioMmio::backend_ready`).
        self.stalled && !self.backend_busy && self.in_flight() < self.limit
    }

    fn poll(&mut self, queues: &mut [Queue], ram: &mut dyn GuestRam) -> Result<(), VirtioError> {
        self.process(0, queues, ram)
    }

    fn reset(&mut self) {
        // The scratch chain grows to the longest chain seen: released with the driver.
        self.chain = DescChain::new();
        self.forget_in_flight();
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
