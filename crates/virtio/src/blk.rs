//! virtio-blk (virtio 1.x §5.2) over a caller-provided [`BlockBackend`].
//!
//! One request queue. A request is a 16-byte device-readable header (`type`,
//! reserved, `sector`), data (device-readable for a write, device-writable
//! for a read), and one device-writable status byte at the very end. The
//! framing is independent of the descriptor boundaries (§2.7.4): the device
//! looks at byte offsets in the readable and writable parts, never at how
//! many descriptors carry them.
//!
//! Data moves directly between guest buffers and the backend: a read hands
//! the backend each of the guest's buffers to fill, a write each buffer to
//! store, as windows on guest memory it copies to or from. There is no
//! bounce buffer.
//!
//! Supported: `VIRTIO_BLK_T_IN`, `T_OUT`, `T_FLUSH` (`VIRTIO_BLK_F_FLUSH`),
//! `T_GET_ID`; anything else completes with `VIRTIO_BLK_S_UNSUPP`. A request
//! outside the disk, or with data that is not whole sectors, completes with
//! `VIRTIO_BLK_S_IOERR`. Only a request with no status byte at all is a
//! driver error that stops the device, since it cannot be completed.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::device::{DeviceStats, VirtioDevice, copy_config, device_id};
use crate::error::VirtioError;
use crate::queue::{DescChain, Queue};
use crate::ram::{GuestRam, GuestSlice, GuestSliceMut};

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

/// A disk. Offsets are in bytes; the device only asks for ranges inside
/// `size()` rounded down to whole sectors.
///
/// Data moves straight between the disk and the guest's buffers: the device
/// lends the backend each buffer as a window on guest memory
/// ([`GuestSliceMut`] to fill, [`GuestSlice`] to store), never as a Rust
/// reference (see [`crate::ram`]).
///
/// (`size` rather than `len`: with the trait implemented for `&mut [u8]`,
/// a `len` method would shadow the slice's own `len` wherever the trait is
/// in scope.)
pub trait BlockBackend: Send {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Copies `to.len()` bytes of the disk from `offset` into `to`.
    fn read_at(&mut self, offset: u64, to: GuestSliceMut<'_>) -> Result<(), BlockError>;
    /// Stores the bytes of `from` on the disk at `offset`.
    fn write_at(&mut self, offset: u64, from: GuestSlice<'_>) -> Result<(), BlockError>;
    /// Makes completed writes durable.
    fn flush(&mut self) -> Result<(), BlockError> {
        Ok(())
    }
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

/// A disk image in a RAM region the hypervisor owns.
impl BlockBackend for &'static mut [u8] {
    fn size(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read_at(&mut self, offset: u64, to: GuestSliceMut<'_>) -> Result<(), BlockError> {
        read_from(self, offset, to)
    }
    fn write_at(&mut self, offset: u64, from: GuestSlice<'_>) -> Result<(), BlockError> {
        write_to(self, offset, from)
    }
}

/// A disk image on the heap (tests, small scratch disks).
impl BlockBackend for Vec<u8> {
    fn size(&self) -> u64 {
        Vec::len(self) as u64
    }
    fn read_at(&mut self, offset: u64, to: GuestSliceMut<'_>) -> Result<(), BlockError> {
        read_from(self, offset, to)
    }
    fn write_at(&mut self, offset: u64, from: GuestSlice<'_>) -> Result<(), BlockError> {
        write_to(self, offset, from)
    }
}

/// The in-memory backends' reads and writes, bounds-checked: one copy
/// between the disk and guest memory. A guest slice that refuses the copy
/// (never, for one the device lent) fails the request.
fn read_from(disk: &[u8], offset: u64, mut to: GuestSliceMut<'_>) -> Result<(), BlockError> {
    let r = range(disk.len(), offset, to.len())?;
    to.write(0, &disk[r]).map_err(|_| BlockError)
}

fn write_to(disk: &mut [u8], offset: u64, from: GuestSlice<'_>) -> Result<(), BlockError> {
    let r = range(disk.len(), offset, from.len())?;
    from.read(0, &mut disk[r]).map_err(|_| BlockError)
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

/// The block device.
pub struct Blk {
    backend: Box<dyn BlockBackend>,
    read_only: bool,
    id: [u8; ID_BYTES],
    chain: DescChain,
    stats: DeviceStats,
}

impl Blk {
    /// `QueueNumMax` of the request queue.
    pub const QUEUE_SIZE: u16 = 256;
    /// The data segments a request may have: `seg_max`.
    pub const SEG_MAX: u32 = Self::QUEUE_SIZE as u32 - 2;

    /// A writable disk on `backend` with an empty ID.
    pub fn new(backend: impl BlockBackend + 'static) -> Self {
        Self {
            backend: Box::new(backend),
            read_only: false,
            id: [0; ID_BYTES],
            chain: DescChain::new(),
            stats: DeviceStats::default(),
        }
    }

    /// Offers `VIRTIO_BLK_F_RO` and fails every write.
    pub fn read_only(mut self, ro: bool) -> Self {
        self.read_only = ro;
        self
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

    /// Carries out one request on the popped chain. Returns the status and
    /// how many bytes at the start of the writable part it wrote.
    fn execute(
        &mut self,
        ram: &mut dyn GuestRam,
        kind: u32,
        sector: u64,
        data_len: u64,
    ) -> Result<(u8, u64), VirtioError> {
        let capacity = self.capacity();
        let chain = &self.chain;
        let backend = &mut self.backend;
        Ok(match kind {
            T_IN => {
                let Some(mut pos) = disk_range(capacity, sector, data_len) else {
                    return Ok((S_IOERR, 0));
                };
                let mut res = Ok(());
                chain.for_each_writable(ram, 0, data_len, &mut |s| {
                    let n = s.len() as u64;
                    if res.is_ok() {
                        res = backend.read_at(pos, s);
                    }
                    pos += n;
                })?;
                if res.is_err() {
                    return Ok((S_IOERR, 0));
                }
                self.stats.bytes_to_guest += data_len;
                (S_OK, data_len)
            }
            T_OUT => {
                let len = u64::from(chain.readable_len()).saturating_sub(HEADER_LEN);
                let Some(mut pos) = disk_range(capacity, sector, len).filter(|_| !self.read_only)
                else {
                    return Ok((S_IOERR, 0));
                };
                let mut res = Ok(());
                chain.for_each_readable(ram, HEADER_LEN, len, &mut |s| {
                    if res.is_ok() {
                        res = backend.write_at(pos, s);
                    }
                    pos += s.len() as u64;
                })?;
                if res.is_err() {
                    return Ok((S_IOERR, 0));
                }
                self.stats.bytes_from_guest += len;
                (S_OK, 0)
            }
            T_FLUSH => (if backend.flush().is_ok() { S_OK } else { S_IOERR }, 0),
            T_GET_ID => {
                let n = data_len.min(ID_BYTES as u64) as usize;
                chain.write_at(ram, 0, &self.id[..n])?;
                (S_OK, n as u64)
            }
            _ => (S_UNSUPP, 0),
        })
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
        F_SEG_MAX | F_FLUSH | if self.read_only { F_RO } else { 0 }
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[Self::QUEUE_SIZE]
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // struct virtio_blk_config: `capacity` (le64 at 0) and `seg_max` (le32
        // at 12) are backed by offered features; the other fields read as 0.
        // A chain holds at most queue-size buffers (§2.7.5.3.1), two of them
        // the header and the status byte.
        let mut config = [0u8; 16];
        config[..8].copy_from_slice(&self.capacity().to_le_bytes());
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
        while q.pop(ram, &mut self.chain)? {
            let writable = u64::from(self.chain.writable_len());
            let Some(status_at) = writable.checked_sub(1) else {
                return Err(VirtioError::Malformed("block request without a status byte"));
            };
            // Everything writable before the status byte is the data area.
            let data_len = status_at;
            let mut header = [0u8; HEADER_LEN as usize];
            let (status, written) = if self.chain.read_at(ram, 0, &mut header)? < header.len() {
                (S_IOERR, 0)
            } else {
                let kind = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
                let mut sector = [0u8; 8];
                sector.copy_from_slice(&header[8..]);
                self.execute(ram, kind, u64::from_le_bytes(sector), data_len)?
            };
            // The used length covers the whole writable part, so all of it
            // must have been written (§2.7.8.2): zero what the request did
            // not fill rather than leave the driver's old bytes "returned".
            self.chain.fill_writable(ram, written, data_len - written, 0)?;
            self.chain.write_at(ram, status_at, &[status])?;
            q.add_used(ram, self.chain.head(), self.chain.writable_len())?;
            self.stats.requests += 1;
            if status != S_OK {
                self.stats.errors += 1;
            }
        }
        Ok(())
    }

    fn reset(&mut self) {
        // The scratch chain grows to the longest chain seen: released with the driver.
        self.chain = DescChain::new();
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
