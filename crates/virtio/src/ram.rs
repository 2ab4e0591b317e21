//! How devices reach guest memory: [`GuestRam`].
//!
//! A VM's RAM is one contiguous guest-physical range, but the host memory
//! behind it is a list of 2 MiB chunks that need not be adjacent. A buffer the
//! guest hands to a device can therefore straddle a chunk boundary, and a
//! device that wants to work in place (no bounce buffer) has to see a buffer
//! as a short sequence of host slices. That is the one thing an
//! implementation provides: [`GuestRam::chunk`] / [`GuestRam::chunk_mut`],
//! "the host memory from this IPA to the end of its chunk". Everything else —
//! bounds checks, visiting a range slice by slice, little-endian fields — is
//! written once here on top of those two, so every implementation gets the
//! same checks.
//!
//! Every access is checked in full before anything is read or written: a
//! range that leaves RAM at any point is a [`MemError`] and nothing of it is
//! touched. Nothing in this module panics on guest-chosen input.
//!
//! # Memory shared with running vCPUs
//!
//! The guest may change its memory while a device looks at it (another vCPU
//! is running). Two consequences, both handled by the callers in this crate:
//!
//! * Nothing read from guest memory is trusted or read twice: a descriptor is
//!   copied out once and the copy is validated and used (no time-of-check to
//!   time-of-use gap).
//! * Ring indices are 16-bit fields the driver and device update while the
//!   other side reads them. [`GuestRam::load_u16`] / [`GuestRam::store_u16`]
//!   are the accessors used for them; the default implementations copy bytes,
//!   which is fine for [`VecRam`], and an implementation over memory a
//!   running vCPU can see should override them with single-copy-atomic
//!   accesses (an aligned `ldrh`/`strh`, e.g. `read_volatile` on an aligned
//!   pointer) so that the other side never sees half an update.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

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

/// Guest RAM as seen by a device: host slices behind guest-physical
/// addresses.
///
/// Implementors provide [`chunk`](GuestRam::chunk) and
/// [`chunk_mut`](GuestRam::chunk_mut); the other methods are built on them.
/// Reading takes `&self` and writing `&mut self`, so a device holding a
/// `&mut dyn GuestRam` for the length of one request has the only path to
/// writing guest memory from the hypervisor side. The hypervisor can
/// implement the trait on a small borrowed view of its VM memory (`struct
/// RamView<'a>(&'a GuestMemory)`) created for each call.
pub trait GuestRam {
    /// The host memory from `ipa` to the end of the host-contiguous chunk
    /// holding it; `None` (or an empty slice) if `ipa` is not RAM.
    fn chunk(&self, ipa: Ipa) -> Option<&[u8]>;

    /// Mutable twin of [`chunk`](GuestRam::chunk).
    fn chunk_mut(&mut self, ipa: Ipa) -> Option<&mut [u8]>;

    /// Whether `[ipa, ipa + len)` is entirely RAM. An empty range always is
    /// (it touches nothing).
    fn check(&self, ipa: Ipa, len: u64) -> Result<(), MemError> {
        let err = MemError { ipa, len };
        let end = ipa.0.checked_add(len).ok_or(err)?;
        let mut at = ipa.0;
        while at < end {
            match self.chunk(Ipa(at)) {
                Some(c) if !c.is_empty() => at = at.saturating_add(c.len() as u64),
                _ => return Err(err),
            }
        }
        Ok(())
    }

    /// Calls `f` on each host slice making up `[ipa, ipa + len)`, in order.
    /// The whole range is checked first; on error `f` is never called.
    fn with_slices(&self, ipa: Ipa, len: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), MemError> {
        self.check(ipa, len)?;
        let err = MemError { ipa, len };
        let end = ipa.0 + len; // no overflow: `check` passed
        let mut at = ipa.0;
        while at < end {
            let c = self.chunk(Ipa(at)).filter(|c| !c.is_empty()).ok_or(err)?;
            let n = c.len().min(usize::try_from(end - at).unwrap_or(usize::MAX));
            f(&c[..n]);
            at += n as u64;
        }
        Ok(())
    }

    /// Calls `f` on each host slice making up `[ipa, ipa + len)`, in order,
    /// for writing. The whole range is checked first; on error `f` is never
    /// called.
    fn with_slices_mut(
        &mut self,
        ipa: Ipa,
        len: u64,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), MemError> {
        self.check(ipa, len)?;
        let err = MemError { ipa, len };
        let end = ipa.0 + len;
        let mut at = ipa.0;
        while at < end {
            let c = self.chunk_mut(Ipa(at)).filter(|c| !c.is_empty()).ok_or(err)?;
            let n = c.len().min(usize::try_from(end - at).unwrap_or(usize::MAX));
            f(&mut c[..n]);
            at += n as u64;
        }
        Ok(())
    }

    /// `[ipa, ipa + len)` as one host slice, if it lies in RAM within one
    /// chunk: the zero-copy fast path for handing a whole buffer to a sink.
    fn contiguous(&self, ipa: Ipa, len: u64) -> Option<&[u8]> {
        let c = self.chunk(ipa)?;
        let len = usize::try_from(len).ok()?;
        c.get(..len)
    }

    /// Copies guest memory at `ipa` into `buf`.
    fn read(&self, ipa: Ipa, buf: &mut [u8]) -> Result<(), MemError> {
        let mut off = 0;
        self.with_slices(ipa, buf.len() as u64, &mut |s| {
            buf[off..off + s.len()].copy_from_slice(s);
            off += s.len();
        })
    }

    /// Copies `data` into guest memory at `ipa`.
    fn write(&mut self, ipa: Ipa, data: &[u8]) -> Result<(), MemError> {
        let mut off = 0;
        self.with_slices_mut(ipa, data.len() as u64, &mut |s| {
            s.copy_from_slice(&data[off..off + s.len()]);
            off += s.len();
        })
    }

    /// Sets `len` bytes at `ipa` to `byte`.
    fn fill(&mut self, ipa: Ipa, len: u64, byte: u8) -> Result<(), MemError> {
        self.with_slices_mut(ipa, len, &mut |s| s.fill(byte))
    }

    /// Little-endian `u16` at `ipa`. Used for the ring indices and event
    /// fields that the driver updates concurrently: see the module
    /// documentation for when to override.
    fn load_u16(&self, ipa: Ipa) -> Result<u16, MemError> {
        let mut b = [0; 2];
        self.read(ipa, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Stores a little-endian `u16` at `ipa` (used ring index, avail event).
    fn store_u16(&mut self, ipa: Ipa, value: u16) -> Result<(), MemError> {
        self.write(ipa, &value.to_le_bytes())
    }

    /// Little-endian `u32` at `ipa`.
    fn load_u32(&self, ipa: Ipa) -> Result<u32, MemError> {
        let mut b = [0; 4];
        self.read(ipa, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Stores a little-endian `u32` at `ipa`.
    fn store_u32(&mut self, ipa: Ipa, value: u32) -> Result<(), MemError> {
        self.write(ipa, &value.to_le_bytes())
    }

    /// Little-endian `u64` at `ipa`.
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
/// the hypervisor.
pub struct VecRam {
    base: u64,
    size: u64,
    chunk_size: usize,
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
    /// (the last one may be shorter; a size of 0 counts as 1). `base + size`
    /// must not wrap; it is clamped if it would.
    pub fn with_chunk_size(base: Ipa, size: usize, chunk_size: usize) -> Self {
        let chunk_size = chunk_size.max(1);
        let size = (size as u64).min(u64::MAX - base.0);
        let mut chunks = Vec::new();
        let mut left = size;
        while left > 0 {
            let n = left.min(chunk_size as u64) as usize;
            chunks.push(vec![0u8; n].into_boxed_slice());
            left -= n as u64;
        }
        Self { base: base.0, size, chunk_size, chunks }
    }

    /// First guest-physical address of the RAM.
    pub fn base(&self) -> Ipa {
        Ipa(self.base)
    }

    /// Size of the RAM in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// (chunk index, offset in chunk) of `ipa`, if it is RAM.
    fn locate(&self, ipa: Ipa) -> Option<(usize, usize)> {
        let off = ipa.0.checked_sub(self.base)?;
        if off >= self.size {
            return None;
        }
        let cs = self.chunk_size as u64;
        Some(((off / cs) as usize, (off % cs) as usize))
    }
}

impl GuestRam for VecRam {
    fn chunk(&self, ipa: Ipa) -> Option<&[u8]> {
        let (i, o) = self.locate(ipa)?;
        self.chunks.get(i)?.get(o..)
    }

    fn chunk_mut(&mut self, ipa: Ipa) -> Option<&mut [u8]> {
        let (i, o) = self.locate(ipa)?;
        self.chunks.get_mut(i)?.get_mut(o..)
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
    fn slices_split_at_chunks() {
        let mut r = ram();
        let mut lens = Vec::new();
        r.with_slices(Ipa(0x100c), 30, &mut |s| lens.push(s.len())).unwrap();
        assert_eq!(lens, [4, 16, 10]);
        let data: Vec<u8> = (0..30).collect();
        r.write(Ipa(0x100c), &data).unwrap();
        let mut back = [0u8; 30];
        r.read(Ipa(0x100c), &mut back).unwrap();
        assert_eq!(&back[..], &data[..]);
        assert!(r.contiguous(Ipa(0x100c), 4).is_some());
        assert!(r.contiguous(Ipa(0x100c), 5).is_none());
    }

    #[test]
    fn refused_access_touches_nothing() {
        let mut r = ram();
        let mut called = false;
        assert!(r.with_slices_mut(Ipa(0x1050), 40, &mut |_| called = true).is_err());
        assert!(!called);
        assert!(r.write(Ipa(0x1060), &[1; 8]).is_err());
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
}
