//! A VM's RAM: 2 MiB chunks of host memory behind one contiguous guest-physical range.
//!
//! Chunks need not be contiguous in host memory (no large contiguous allocation is needed and
//! nothing is wasted), and each maps with one Stage-2 block descriptor. armhv reaches guest
//! memory directly through these chunks (identity-mapped at EL2): no copies.

use crate::mm::frames;
use addr::{BLOCK_2M, Ipa, IpaRange, PAGE_SIZE, PhysAddr};
use alloc::vec::Vec;

const CHUNK: u64 = BLOCK_2M;
const CHUNK_FRAMES: usize = (CHUNK / PAGE_SIZE) as usize;
/// What [`GuestMemory::zero_piece`] zeroes at a time: small enough that the CPU doing it can
/// look at its interrupts and its clock often (about 0.1 ms under QEMU TCG on an idle host).
pub const PIECE: u64 = 256 << 10;
const PIECES_PER_CHUNK: usize = (CHUNK / PIECE) as usize;

pub struct GuestMemory {
    pub range: IpaRange,
    chunks: Vec<PhysAddr>,
}

#[derive(Debug)]
pub struct OutOfMemory;

impl GuestMemory {
    /// Allocates and zeroes `range.size` bytes (a multiple of 2 MiB) of RAM, the zeros cleaned
    /// to the point of coherency (a guest starts with its caches off).
    pub fn allocate(range: IpaRange) -> Result<Self, OutOfMemory> {
        let count = (range.size / CHUNK) as usize;
        let mut chunks = Vec::with_capacity(count);
        for _ in 0..count {
            match frames::alloc(CHUNK_FRAMES) {
                Some(pa) => {
                    frames::zero(pa, CHUNK_FRAMES);
                    crate::arch::aarch64::cache::clean_data_to_poc(pa.0, CHUNK);
                    chunks.push(pa);
                }
                None => {
                    let mem = Self { range, chunks };
                    drop(mem);
                    return Err(OutOfMemory);
                }
            }
        }
        Ok(Self { range, chunks })
    }

    /// (IPA, PA) of every chunk, for building the Stage-2 map.
    pub fn chunks(&self) -> impl Iterator<Item = (Ipa, PhysAddr)> + '_ {
        self.chunks.iter().enumerate().map(|(i, &pa)| (self.range.start + i as u64 * CHUNK, pa))
    }

    pub fn contains(&self, ipa: Ipa) -> bool {
        self.range.contains(ipa)
    }

    /// Copies `bytes` into guest memory at `ipa`; false if any of it falls outside the RAM.
    pub fn write(&self, ipa: Ipa, bytes: &[u8]) -> bool {
        if !self.range.contains_span(ipa, bytes.len() as u64) {
            return false;
        }
        let mut off = ipa.offset_from(self.range.start).unwrap_or(0);
        let mut rest = bytes;
        while !rest.is_empty() {
            let chunk = self.chunks[(off / CHUNK) as usize];
            let within = off % CHUNK;
            let n = rest.len().min((CHUNK - within) as usize);
            // SAFETY: `chunk` is a 2 MiB RAM block owned by this VM, identity-mapped at EL2, and
            // `within + n <= CHUNK`.
            unsafe {
                core::ptr::copy_nonoverlapping(rest.as_ptr(), (chunk.0 + within) as *mut u8, n)
            };
            rest = &rest[n..];
            off += n as u64;
        }
        true
    }

    /// A view of the RAM for devices that work on guest memory directly (virtio).
    pub fn view(&self) -> RamView {
        RamView { range: self.range, chunks: self.chunks.clone() }
    }

    /// Makes what was written at `[ipa, ipa + len)` visible to a guest running with caches off
    /// (its part inside the RAM).
    pub fn clean_to_poc(&self, ipa: Ipa, len: u64) {
        let Some(mut off) = ipa.offset_from(self.range.start) else { return };
        let end = off.saturating_add(len).min(self.range.size);
        while off < end {
            let within = off % CHUNK;
            let n = (CHUNK - within).min(end - off);
            let chunk = self.chunks[(off / CHUNK) as usize];
            crate::arch::aarch64::cache::clean_to_poc(chunk.0 + within, n);
            off += n;
        }
    }

    /// How many pieces of [`PIECE`] bytes the RAM is zeroed in.
    pub fn pieces(&self) -> usize {
        self.chunks.len() * PIECES_PER_CHUNK
    }

    /// Zeroes piece `index` of the RAM (of [`Self::pieces`]; beyond it, nothing) and cleans it
    /// to the point of coherency: a guest that starts with its caches off reads zeros, not
    /// what memory held under dirty cache lines.
    pub fn zero_piece(&self, index: usize) {
        let Some(&chunk) = self.chunks.get(index / PIECES_PER_CHUNK) else { return };
        let start = chunk.0 + (index % PIECES_PER_CHUNK) as u64 * PIECE;
        // SAFETY: `start..start + PIECE` lies in a 2 MiB chunk of RAM this VM owns,
        // identity-mapped at EL2; the VM's vCPUs and devices are kept off it while it is zeroed
        // (`vmm::scrub`).
        unsafe { core::ptr::write_bytes(start as *mut u8, 0, PIECE as usize) };
        crate::arch::aarch64::cache::clean_data_to_poc(start, PIECE);
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        for &pa in &self.chunks {
            frames::zero(pa, CHUNK_FRAMES);
            frames::free(pa, CHUNK_FRAMES);
        }
    }
}

/// The VM's RAM as virtio devices see it: the chunk list, so a device can reach guest buffers
/// in place (zero-copy) for as long as the VM exists (its devices die with it).
pub struct RamView {
    range: IpaRange,
    chunks: Vec<PhysAddr>,
}

impl RamView {
    /// Host address of `ipa` and the bytes left in its chunk.
    fn locate(&self, ipa: addr::Ipa) -> Option<(u64, usize)> {
        let off = ipa.offset_from(self.range.start)?;
        if off >= self.range.size {
            return None;
        }
        let chunk = self.chunks.get((off / CHUNK) as usize)?;
        let within = off % CHUNK;
        Some((chunk.0 + within, (CHUNK - within) as usize))
    }
}

// Guest memory is shared with the guest's running vCPUs, which may change it at any time, as
// with real DMA: devices treat everything they read as untrusted, and the virtio crate reads
// each descriptor and ring index once before validating it.
impl virtio::GuestRam for RamView {
    fn chunk(&self, ipa: addr::Ipa) -> Option<&[u8]> {
        let (host, len) = self.locate(ipa)?;
        // SAFETY: `host..host + len` lies in one 2 MiB chunk of this VM's RAM, identity-mapped
        // at EL2 and allocated for as long as the VM (which outlives its devices) exists.
        Some(unsafe { core::slice::from_raw_parts(host as *const u8, len) })
    }

    fn chunk_mut(&mut self, ipa: addr::Ipa) -> Option<&mut [u8]> {
        let (host, len) = self.locate(ipa)?;
        // SAFETY: as in `chunk`; `&mut self` keeps this view from handing out overlapping
        // mutable slices.
        Some(unsafe { core::slice::from_raw_parts_mut(host as *mut u8, len) })
    }

    // Ring indices and event fields change under a running vCPU's hands: each is read and
    // written as one aligned 16-bit access (single-copy atomic), never as the byte copy of the
    // defaults. A torn `used.idx` made Linux find garbage in the used ring, mark the queue
    // broken, and lose its network for good; a torn `used_event` lost an interrupt.
    fn load_u16(&self, ipa: Ipa) -> Result<u16, virtio::MemError> {
        let host = self.aligned_u16(ipa)?;
        // SAFETY: `aligned_u16` checked that the two bytes lie in this VM's RAM, identity-mapped
        // at EL2, and are 2-byte aligned; a volatile load may race with the guest by design.
        Ok(u16::from_le(unsafe { (host as *const u16).read_volatile() }))
    }

    fn store_u16(&mut self, ipa: Ipa, value: u16) -> Result<(), virtio::MemError> {
        let host = self.aligned_u16(ipa)?;
        // SAFETY: as in `load_u16`.
        unsafe { (host as *mut u16).write_volatile(value.to_le()) };
        Ok(())
    }
}

impl RamView {
    /// The host address of the 16-bit field at `ipa`, which must lie in RAM and be aligned (as
    /// the virtio rings' fields are; a misaligned ring is the guest's error).
    fn aligned_u16(&self, ipa: Ipa) -> Result<u64, virtio::MemError> {
        match self.locate(ipa) {
            Some((host, len)) if len >= 2 && ipa.0.is_multiple_of(2) => Ok(host),
            _ => Err(virtio::MemError { ipa, len: 2 }),
        }
    }
}
