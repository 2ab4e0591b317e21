//! How devices reach guest memory: [`GuestRam`].
//!
//! A VM's RAM is one contiguous guest-physical range, but the host memory
//! behind it is a list of 2 MiB chunks that need not be adjacent, so a
//! buffer the guest hands to a device can straddle a chunk boundary.
//! [`ChunkMap`] holds the bounds checks and the splitting of a range at
//! chunk boundaries, written once for every implementation.
//!
//! Every access is checked in full before anything is read or written: a
//! range that leaves RAM at any point is a [`MemError`] and nothing of it is
//! touched. Nothing in this module panics on guest-chosen input.
//!
//! # Copies, never references
//!
//! Guest RAM belongs to the guest, and its vCPUs run on other physical CPUs
//! while a device works: any byte of it may change at any moment. A Rust
//! reference (`&[u8]`, `&mut [u8]`) to such memory would be undefined
//! behaviour, whatever the code then does with it: the compiler may assume
//! that the bytes behind a `&[u8]` do not change while it lives (and read
//! them twice, or once for two uses), and that nothing else reads or writes
//! those behind a `&mut [u8]`. So this interface never hands one out.
//! Guest memory is reached only by copies between it and host memory the
//! caller owns ([`GuestRam::read`], [`GuestRam::write`], [`GuestRam::fill`],
//! and [`GuestSlice`] / [`GuestSliceMut`] for a device's backend), made by
//! the implementation with raw-pointer `memcpy`s; the bytes a device works
//! on are then its own. A copy that races with a vCPU's store reads or
//! leaves some mix of old and new bytes, as DMA by a real device would:
//! that race is on memory the guest owns and is the accepted hardware-level
//! behaviour (the guest broke the virtio rules it agreed to), never a way
//! into the hypervisor's own state, because
//!
//! * nothing read from guest memory is trusted or read twice: a descriptor
//!   is copied out once and the copy is validated and used (no
//!   time-of-check to time-of-use gap);
//! * bulk copies are plain `memcpy`s, not per-byte volatile loops, to keep
//!   the block and network data paths fast: what they move is payload the
//!   device does not interpret (Rust has no atomic `memcpy` yet, which
//!   would make even this race defined);
//! * ring indices and event fields, which the driver and the device update
//!   while the other side reads them, go through [`GuestRam::load_u16`] /
//!   [`GuestRam::store_u16`]: one aligned 16-bit access each (`ldrh` /
//!   `strh`, single-copy atomic), so that neither side ever sees half an
//!   update. Byte copies there once tore `used.idx` (Linux then found
//!   garbage in the used ring and marked the queue broken) and
//!   `used_event` (an interrupt lost).
//!
//! [`VecRam`], the test and fuzzing implementation, owns its memory and
//! shares it with no one, so it copies with slices.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use addr::Ipa;

/// An access to guest memory that is not entirely inside RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemError {
    /// Start of the refused access.
    pub ipa: Ipa,
    /// Its length in bytes.
    pub len: u64,
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{:#x} is not inside guest RAM", self.ipa, self.len)
    }
}

/// Guest RAM as seen by a device: copies in and out, by guest-physical
/// address, and the ring fields' atomic accesses (see the module
/// documentation for why nothing here returns a reference).
///
/// Reading takes `&self` and writing `&mut self`, so a device holding a
/// `&mut dyn GuestRam` for the length of one request has the only path to
/// writing guest memory from the hypervisor side. Every method checks the
/// whole range first and touches nothing if any of it is not RAM;
/// [`ChunkMap`] does that for an implementation.
pub trait GuestRam {
    /// Whether `[ipa, ipa + len)` is entirely RAM. An empty range always is
    /// (it touches nothing).
    fn check(&self, ipa: Ipa, len: u64) -> Result<(), MemError>;

    /// Copies guest memory at `ipa` into `buf`.
    fn read(&self, ipa: Ipa, buf: &mut [u8]) -> Result<(), MemError>;

    /// Copies `data` into guest memory at `ipa`.
    fn write(&mut self, ipa: Ipa, data: &[u8]) -> Result<(), MemError>;

    /// Sets `len` bytes at `ipa` to `byte`.
    fn fill(&mut self, ipa: Ipa, len: u64, byte: u8) -> Result<(), MemError>;

    /// The little-endian `u16` at `ipa`, which must be 2-byte aligned (as
    /// the rings' fields are: a misaligned one is the driver's error), read
    /// as one single-copy-atomic access. Used for the ring indices and
    /// event fields the driver updates concurrently.
    fn load_u16(&self, ipa: Ipa) -> Result<u16, MemError>;

    /// Stores a little-endian `u16` at the 2-byte aligned `ipa` as one
    /// single-copy-atomic access (used ring index, avail event).
    fn store_u16(&mut self, ipa: Ipa, value: u16) -> Result<(), MemError>;

    /// Little-endian `u32` at `ipa` (a copy: not for concurrently updated
    /// fields).
    fn load_u32(&self, ipa: Ipa) -> Result<u32, MemError> {
        let mut b = [0; 4];
        self.read(ipa, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Stores a little-endian `u32` at `ipa`.
    fn store_u32(&mut self, ipa: Ipa, value: u32) -> Result<(), MemError> {
        self.write(ipa, &value.to_le_bytes())
    }

    /// Little-endian `u64` at `ipa` (a copy).
    fn load_u64(&self, ipa: Ipa) -> Result<u64, MemError> {
        let mut b = [0; 8];
        self.read(ipa, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Stores a little-endian `u64` at `ipa`.
    fn store_u64(&mut self, ipa: Ipa, value: u64) -> Result<(), MemError> {
        self.write(ipa, &value.to_le_bytes())
    }
}

/// Where the bytes of a guest-physical range lie in RAM made of equal host
/// chunks: `size` bytes at `base`, chunk `i` holding
/// `[base + i * chunk, base + (i + 1) * chunk)`. The bounds checks and the
/// splitting at chunk boundaries of every [`GuestRam`] implementation.
///
/// Chunks are a power of two in size, so that finding one is a shift (this
/// is on the path of every ring access).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkMap {
    base: u64,
    size: u64,
    /// log2 of the chunk size.
    shift: u32,
}

/// One host-contiguous piece of an access (see [`ChunkMap::for_each_piece`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Index of the chunk holding it.
    pub chunk: usize,
    /// Its offset in that chunk.
    pub offset: usize,
    /// Its bytes in the access: `at..at + len` of the caller's buffer.
    pub at: usize,
    pub len: usize,
}

impl Piece {
    /// The piece's bytes in the caller's buffer.
    pub fn in_buf(&self) -> Range<usize> {
        self.at..self.at + self.len
    }
}

impl ChunkMap {
    /// `size` bytes of RAM at `base` in chunks of `chunk` bytes, rounded up
    /// to a power of two (the last chunk may be shorter; a chunk size of 0
    /// counts as 1). `base + size` must not wrap; it is clamped if it would.
    pub fn new(base: Ipa, size: u64, chunk: u64) -> Self {
        let shift = chunk.max(1).checked_next_power_of_two().map_or(63, u64::trailing_zeros);
        Self { base: base.0, size: size.min(u64::MAX - base.0), shift }
    }

    /// Size of a chunk in bytes.
    pub fn chunk_size(&self) -> u64 {
        1 << self.shift
    }

    /// First guest-physical address of the RAM.
    pub fn base(&self) -> Ipa {
        Ipa(self.base)
    }

    /// Size of the RAM in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// How many chunks the RAM spans.
    pub fn chunks(&self) -> usize {
        self.size.div_ceil(self.chunk_size()) as usize
    }

    /// Offset of `[ipa, ipa + len)` from the base, if all of it is RAM.
    #[inline]
    fn offset(&self, ipa: Ipa, len: u64) -> Result<u64, MemError> {
        let err = MemError { ipa, len };
        let off = ipa.0.checked_sub(self.base).ok_or(err)?;
        let end = off.checked_add(len).ok_or(err)?;
        if end > self.size {
            return Err(err);
        }
        Ok(off)
    }

    /// Whether `[ipa, ipa + len)` is entirely RAM. An empty range always is.
    #[inline]
    pub fn check(&self, ipa: Ipa, len: u64) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        self.offset(ipa, len).map(|_| ())
    }

    /// Calls `f` on each host-contiguous piece of `[ipa, ipa + len)`, in
    /// order. The whole range is checked first; on error `f` is never
    /// called.
    pub fn for_each_piece(
        &self,
        ipa: Ipa,
        len: u64,
        mut f: impl FnMut(Piece),
    ) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        let mut off = self.offset(ipa, len)?;
        let end = off + len; // no overflow: `offset` checked
        let mut at = 0;
        while off < end {
            let within = off & (self.chunk_size() - 1);
            let n = (self.chunk_size() - within).min(end - off);
            let piece = Piece {
                chunk: (off >> self.shift) as usize,
                offset: within as usize,
                at,
                len: n as usize,
            };
            f(piece);
            at += n as usize;
            off += n;
        }
        Ok(())
    }

    /// (chunk index, offset in chunk) of a field of `width` bytes (a power
    /// of two) at `ipa`, which must lie in RAM and be aligned to `width`, so
    /// it never straddles a chunk (unless chunks are smaller than the field:
    /// then it is refused).
    #[inline]
    pub fn aligned(&self, ipa: Ipa, width: u64) -> Result<(usize, usize), MemError> {
        let err = MemError { ipa, len: width };
        let off = self.offset(ipa, width)?;
        let within = off & (self.chunk_size() - 1);
        if ipa.0 & width.wrapping_sub(1) != 0 || within + width > self.chunk_size() {
            return Err(err);
        }
        Ok(((off >> self.shift) as usize, within as usize))
    }
}

/// `len` bytes of guest RAM at `ipa`, checked to lie in RAM, lent to a
/// consumer that takes bytes from guest buffers (a disk write): a bounded
/// window that can only be copied out of, not a `&[u8]` (see the module
/// documentation).
#[derive(Clone, Copy)]
pub struct GuestSlice<'r> {
    ram: &'r dyn GuestRam,
    ipa: Ipa,
    len: usize,
}

impl<'r> GuestSlice<'r> {
    /// `[ipa, ipa + len)` of `ram`, if it is all RAM.
    pub fn new(ram: &'r dyn GuestRam, ipa: Ipa, len: usize) -> Result<Self, MemError> {
        ram.check(ipa, len as u64)?;
        Ok(Self { ram, ipa, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies bytes `[at, at + buf.len())` of the slice into `buf`; an error
    /// (nothing copied) if that reaches past its end.
    pub fn read(&self, at: usize, buf: &mut [u8]) -> Result<(), MemError> {
        let ipa = sub(self.ipa, self.len, at, buf.len())?;
        self.ram.read(ipa, buf)
    }
}

/// `len` bytes of guest RAM at `ipa`, checked to lie in RAM, lent to a
/// producer that fills guest buffers (a disk read): a bounded window that
/// can only be copied into, not a `&mut [u8]` (see the module
/// documentation).
pub struct GuestSliceMut<'r> {
    ram: &'r mut dyn GuestRam,
    ipa: Ipa,
    len: usize,
}

impl<'r> GuestSliceMut<'r> {
    /// `[ipa, ipa + len)` of `ram`, if it is all RAM.
    pub fn new(ram: &'r mut dyn GuestRam, ipa: Ipa, len: usize) -> Result<Self, MemError> {
        ram.check(ipa, len as u64)?;
        Ok(Self { ram, ipa, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `data` into the slice from byte `at`; an error (nothing
    /// written) if it reaches past its end.
    pub fn write(&mut self, at: usize, data: &[u8]) -> Result<(), MemError> {
        let ipa = sub(self.ipa, self.len, at, data.len())?;
        self.ram.write(ipa, data)
    }
}

/// Address of bytes `[at, at + n)` of a slice of `len` bytes at `ipa`, if
/// they are inside it.
fn sub(ipa: Ipa, len: usize, at: usize, n: usize) -> Result<Ipa, MemError> {
    match at.checked_add(n) {
        Some(end) if end <= len => Ok(Ipa(ipa.0 + at as u64)),
        _ => Err(MemError { ipa: Ipa(ipa.0.wrapping_add(at as u64)), len: n as u64 }),
    }
}

/// A little-endian integer field in guest memory (`le16`, `le32`, `le64` in
/// the virtio spec): what [`GuestRamExt::read_obj`] and
/// [`GuestRamExt::write_obj`] move.
pub trait LeField: Copy + Sized {
    fn load(ram: &(impl GuestRam + ?Sized), ipa: Ipa) -> Result<Self, MemError>;
    fn store(self, ram: &mut (impl GuestRam + ?Sized), ipa: Ipa) -> Result<(), MemError>;
}

macro_rules! le_field {
    ($t:ty, $load:ident, $store:ident) => {
        impl LeField for $t {
            fn load(ram: &(impl GuestRam + ?Sized), ipa: Ipa) -> Result<Self, MemError> {
                ram.$load(ipa)
            }
            fn store(self, ram: &mut (impl GuestRam + ?Sized), ipa: Ipa) -> Result<(), MemError> {
                ram.$store(ipa, self)
            }
        }
    };
}

le_field!(u16, load_u16, store_u16);
le_field!(u32, load_u32, store_u32);
le_field!(u64, load_u64, store_u64);

impl LeField for u8 {
    fn load(ram: &(impl GuestRam + ?Sized), ipa: Ipa) -> Result<Self, MemError> {
        let mut b = [0];
        ram.read(ipa, &mut b)?;
        Ok(b[0])
    }
    fn store(self, ram: &mut (impl GuestRam + ?Sized), ipa: Ipa) -> Result<(), MemError> {
        ram.write(ipa, &[self])
    }
}

/// Typed field access on any [`GuestRam`], including `dyn GuestRam`
/// (generic methods cannot live on the object-safe trait itself).
pub trait GuestRamExt: GuestRam {
    /// Reads a little-endian field: `ram.read_obj::<u16>(ipa)`.
    fn read_obj<T: LeField>(&self, ipa: Ipa) -> Result<T, MemError> {
        T::load(self, ipa)
    }
    /// Writes a little-endian field.
    fn write_obj<T: LeField>(&mut self, ipa: Ipa, value: T) -> Result<(), MemError> {
        value.store(self, ipa)
    }
}

impl<R: GuestRam + ?Sized> GuestRamExt for R {}

/// Guest RAM in host `Vec`s, for tests and fuzzing: `size` bytes at `base`
/// in separately allocated chunks of `chunk_size` bytes, so buffers that
/// straddle a chunk boundary really are split in host memory as they are in
/// the hypervisor. No one else sees this memory, so it is reached through
/// slices.
pub struct VecRam {
    map: ChunkMap,
    chunks: Vec<Box<[u8]>>,
}

impl VecRam {
    /// The hypervisor's chunk size (one Stage-2 block).
    pub const DEFAULT_CHUNK: usize = 2 << 20;

    /// Zeroed RAM of `size` bytes at `base`, in 2 MiB chunks.
    pub fn new(base: Ipa, size: usize) -> Self {
        Self::with_chunk_size(base, size, Self::DEFAULT_CHUNK)
    }

    /// Zeroed RAM of `size` bytes at `base` in chunks of `chunk_size` bytes
    /// rounded up to a power of two (the last one may be shorter; a size of 0
    /// counts as 1). `base + size` must not wrap; it is clamped if it would.
    pub fn with_chunk_size(base: Ipa, size: usize, chunk_size: usize) -> Self {
        let map = ChunkMap::new(base, size as u64, chunk_size as u64);
        let chunk_size = map.chunk_size();
        let chunks = (0..map.chunks() as u64)
            .map(|i| {
                let n = (map.size() - i * chunk_size).min(chunk_size);
                vec![0u8; n as usize].into_boxed_slice()
            })
            .collect();
        Self { map, chunks }
    }

    /// First guest-physical address of the RAM.
    pub fn base(&self) -> Ipa {
        self.map.base()
    }

    /// Size of the RAM in bytes.
    pub fn size(&self) -> u64 {
        self.map.size()
    }

    /// The bytes of `piece` in their chunk.
    fn bytes(&self, p: &Piece) -> &[u8] {
        &self.chunks[p.chunk][p.offset..p.offset + p.len]
    }

    fn bytes_mut(&mut self, p: &Piece) -> &mut [u8] {
        &mut self.chunks[p.chunk][p.offset..p.offset + p.len]
    }
}

impl GuestRam for VecRam {
    fn check(&self, ipa: Ipa, len: u64) -> Result<(), MemError> {
        self.map.check(ipa, len)
    }

    fn read(&self, ipa: Ipa, buf: &mut [u8]) -> Result<(), MemError> {
        self.map.for_each_piece(ipa, buf.len() as u64, |p| {
            buf[p.in_buf()].copy_from_slice(self.bytes(&p));
        })
    }

    fn write(&mut self, ipa: Ipa, data: &[u8]) -> Result<(), MemError> {
        let map = self.map;
        map.for_each_piece(ipa, data.len() as u64, |p| {
            self.bytes_mut(&p).copy_from_slice(&data[p.in_buf()]);
        })
    }

    fn fill(&mut self, ipa: Ipa, len: u64, byte: u8) -> Result<(), MemError> {
        let map = self.map;
        map.for_each_piece(ipa, len, |p| self.bytes_mut(&p).fill(byte))
    }

    // Nothing runs concurrently on this memory: a plain copy of an aligned
    // field is as good as one access here, and the alignment check is the
    // hypervisor's.
    fn load_u16(&self, ipa: Ipa) -> Result<u16, MemError> {
        let (chunk, at) = self.map.aligned(ipa, 2)?;
        let b = &self.chunks[chunk][at..at + 2];
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn store_u16(&mut self, ipa: Ipa, value: u16) -> Result<(), MemError> {
        let (chunk, at) = self.map.aligned(ipa, 2)?;
        self.chunks[chunk][at..at + 2].copy_from_slice(&value.to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn ram() -> VecRam {
        VecRam::with_chunk_size(Ipa(0x1000), 100, 16)
    }

    #[test]
    fn check_bounds() {
        let r = ram();
        assert!(r.check(Ipa(0x1000), 100).is_ok());
        assert!(r.check(Ipa(0x1000 + 99), 1).is_ok());
        assert!(r.check(Ipa(0x1000 + 99), 2).is_err());
        assert!(r.check(Ipa(0xfff), 1).is_err());
        assert!(r.check(Ipa(0xfff), 0).is_ok(), "empty ranges touch nothing");
        assert!(r.check(Ipa(u64::MAX), 2).is_err(), "wrapping range");
        assert!(r.check(Ipa(0x1000), u64::MAX).is_err());
    }

    #[test]
    fn pieces_split_at_chunks() {
        let mut r = ram();
        let mut pieces = Vec::new();
        r.map
            .for_each_piece(Ipa(0x100c), 30, |p| pieces.push((p.chunk, p.offset, p.at, p.len)))
            .unwrap();
        assert_eq!(pieces, [(0, 12, 0, 4), (1, 0, 4, 16), (2, 0, 20, 10)]);
        let data: Vec<u8> = (0..30).collect();
        r.write(Ipa(0x100c), &data).unwrap();
        let mut back = [0u8; 30];
        r.read(Ipa(0x100c), &mut back).unwrap();
        assert_eq!(&back[..], &data[..]);
        // The last chunk is short: 100 = 6 * 16 + 4.
        assert_eq!(r.map.chunks(), 7);
        r.fill(Ipa(0x1000 + 90), 10, 7).unwrap();
        let mut end = [0u8; 10];
        r.read(Ipa(0x1000 + 90), &mut end).unwrap();
        assert_eq!(end, [7; 10]);
    }

    #[test]
    fn refused_access_touches_nothing() {
        let mut r = ram();
        let mut called = false;
        assert!(r.map.for_each_piece(Ipa(0x1050), 40, |_| called = true).is_err());
        assert!(!called);
        assert!(r.write(Ipa(0x1060), &[1; 8]).is_err());
        assert!(r.fill(Ipa(0x1060), 8, 1).is_err());
        let mut b = [0xff; 4];
        r.read(Ipa(0x1060), &mut b).unwrap();
        assert_eq!(b, [0; 4]);
    }

    #[test]
    fn typed_fields_are_little_endian() {
        let mut r = ram();
        r.write_obj(Ipa(0x100e), 0x1122_3344_5566_7788u64).unwrap(); // straddles a chunk
        assert_eq!(r.read_obj::<u64>(Ipa(0x100e)).unwrap(), 0x1122_3344_5566_7788);
        assert_eq!(r.read_obj::<u16>(Ipa(0x100e)).unwrap(), 0x7788);
        assert_eq!(r.read_obj::<u32>(Ipa(0x1012)).unwrap(), 0x1122_3344);
        assert_eq!(r.read_obj::<u8>(Ipa(0x1015)).unwrap(), 0x11);
        let dynr: &dyn GuestRam = &r;
        assert!(dynr.read_obj::<u32>(Ipa(0x1000 + 98)).is_err());
    }

    #[test]
    fn ring_fields_must_be_aligned() {
        let mut r = ram();
        assert!(r.store_u16(Ipa(0x1001), 1).is_err());
        assert!(r.load_u16(Ipa(0x1001)).is_err());
        assert!(r.load_u16(Ipa(0x1000 + 99)).is_err(), "half outside RAM");
        r.store_u16(Ipa(0x100e), 0xbeef).unwrap();
        assert_eq!(r.load_u16(Ipa(0x100e)), Ok(0xbeef));
        // Chunks smaller than a field would split it: refused.
        let tiny = VecRam::with_chunk_size(Ipa(0x1000), 100, 1);
        assert!(tiny.load_u16(Ipa(0x1002)).is_err());
        assert_eq!(VecRam::with_chunk_size(Ipa(0x1000), 100, 3).map.chunk_size(), 4);
    }

    #[test]
    fn guest_slices_are_bounded_windows() {
        let mut r = ram();
        let mut w = GuestSliceMut::new(&mut r, Ipa(0x100c), 8).unwrap();
        assert_eq!(w.len(), 8);
        w.write(2, &[1, 2, 3]).unwrap();
        assert!(w.write(6, &[0; 3]).is_err(), "past its end");
        assert!(GuestSliceMut::new(&mut r, Ipa(0x1060), 8).is_err());
        let s = GuestSlice::new(&r, Ipa(0x100c), 8).unwrap();
        let mut b = [0u8; 5];
        s.read(1, &mut b).unwrap();
        assert_eq!(b, [0, 1, 2, 3, 0]);
        assert!(s.read(4, &mut b).is_err());
        assert!(s.read(usize::MAX, &mut b).is_err());
    }
}
