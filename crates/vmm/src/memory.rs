//! A VM's RAM: 2 MiB chunks of host memory behind one contiguous guest-physical range.
//!
//! Chunks need not be contiguous in host memory (no large contiguous allocation is needed and
//! nothing is wasted), and each maps with one Stage-2 block descriptor. armhv reaches guest
//! memory directly through these chunks (identity-mapped at EL2), always through raw pointers:
//! the guest's vCPUs may write it at any time, so no Rust reference to it may exist.

use crate::coherency::Coherency;
use crate::frames;
use addr::{BLOCK_2M, Ipa, IpaRange, PAGE_SIZE, PhysAddr};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

const CHUNK: u64 = BLOCK_2M;
const CHUNK_FRAMES: usize = (CHUNK / PAGE_SIZE) as usize;
/// What [`GuestMemory::zero_piece`] zeroes at a time: small enough that the CPU doing it can
/// look at its interrupts and its clock often (about 0.1 ms under QEMU TCG on an idle host).
pub const PIECE: u64 = 256 << 10;
const PIECES_PER_CHUNK: usize = (CHUNK / PIECE) as usize;

pub struct GuestMemory {
    pub range: IpaRange,
    chunks: Vec<frames::Frames>,
    /// Whether armhv's accesses need cache maintenance: shared with every view.
    coherency: Arc<Coherency>,
    /// All of it is zero (a stop's `scrub` is done): dropping it need not zero it again.
    zeroed: AtomicBool,
}

#[derive(Debug)]
pub struct OutOfMemory;

impl GuestMemory {
    /// Allocates and zeroes `range.size` bytes (a multiple of 2 MiB) of RAM, the zeros cleaned
    /// to the point of coherency (a guest starts with its caches off), for a Stage-2 map that
    /// forces it Write-Back (`fwb`, FEAT_S2FWB) or not.
    pub fn allocate(range: IpaRange, fwb: bool) -> Result<Self, OutOfMemory> {
        let coherency = Arc::new(Coherency::new(fwb));
        let count = (range.size / CHUNK) as usize;
        let mut chunks = Vec::with_capacity(count);
        for _ in 0..count {
            match frames::alloc(CHUNK_FRAMES) {
                Some(mut chunk) => {
                    chunk.zero();
                    crate::arch::cache::clean_data_to_poc(chunk.pa().0, CHUNK);
                    chunks.push(chunk);
                }
                None => {
                    drop(Self { range, chunks, coherency, zeroed: AtomicBool::new(true) });
                    return Err(OutOfMemory);
                }
            }
        }
        Ok(Self { range, chunks, coherency, zeroed: AtomicBool::new(false) })
    }

    /// How armhv's accesses to this RAM stay coherent with the guest's.
    pub fn coherency(&self) -> &Coherency {
        &self.coherency
    }

    /// (IPA, PA) of every chunk, for building the Stage-2 map.
    pub fn chunks(&self) -> impl Iterator<Item = (Ipa, PhysAddr)> + '_ {
        self.chunks.iter().enumerate().map(|(i, c)| (self.range.start + i as u64 * CHUNK, c.pa()))
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
            let chunk = self.chunks[(off / CHUNK) as usize].pa();
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
        RamView {
            map: virtio::ChunkMap::new(self.range.start, self.range.size, CHUNK),
            chunks: self.chunks.iter().map(|c| c.pa()).collect(),
            coherency: self.coherency.clone(),
        }
    }

    /// Makes what was written at `[ipa, ipa + len)` visible to a guest running with caches off
    /// (its part inside the RAM).
    pub fn clean_to_poc(&self, ipa: Ipa, len: u64) {
        let Some(mut off) = ipa.offset_from(self.range.start) else { return };
        let end = off.saturating_add(len).min(self.range.size);
        while off < end {
            let within = off % CHUNK;
            let n = (CHUNK - within).min(end - off);
            let chunk = self.chunks[(off / CHUNK) as usize].pa();
            crate::arch::cache::clean_to_poc(chunk.0 + within, n);
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
        let Some(chunk) = self.chunks.get(index / PIECES_PER_CHUNK) else { return };
        let start = chunk.pa().0 + (index % PIECES_PER_CHUNK) as u64 * PIECE;
        // SAFETY: `start..start + PIECE` lies in a 2 MiB chunk of RAM this VM owns,
        // identity-mapped at EL2; the VM's vCPUs and devices are kept off it while it is zeroed
        // (`vmm::scrub`).
        unsafe { core::ptr::write_bytes(start as *mut u8, 0, PIECE as usize) };
        crate::arch::cache::clean_data_to_poc(start, PIECE);
    }
}

impl GuestMemory {
    /// Every piece has been zeroed (`scrub`), and nothing writes it any more.
    pub(crate) fn zeroed(&self) {
        self.zeroed.store(true, Ordering::Release);
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        // The chunks go back to the pool (dropped with the vector) holding no trace of the VM.
        if !self.zeroed.load(Ordering::Acquire) {
            for chunk in &mut self.chunks {
                chunk.zero();
            }
        }
    }
}

/// The VM's RAM as virtio devices see it: the chunk list, so a device can copy straight between
/// guest buffers and its own memory for as long as the VM exists (its devices die with it).
///
/// Every access is a raw-pointer copy or a volatile access, never a Rust reference: the guest's
/// running vCPUs may write this memory at any time (`virtio::ram` explains why and what a race
/// means). Every access is also kept coherent with vCPUs that run with their caches off
/// ([`Coherency`]).
pub struct RamView {
    map: virtio::ChunkMap,
    chunks: Vec<PhysAddr>,
    coherency: Arc<Coherency>,
}

impl RamView {
    /// Host address of byte `offset` of chunk `chunk`.
    fn host(&self, chunk: usize, offset: usize) -> *mut u8 {
        (self.chunks[chunk].0 + offset as u64) as *mut u8
    }

    /// The host-physical pieces of the `len` bytes at `ipa`, one per chunk they span, in
    /// order: what a device that reaches guest RAM by DMA is given.
    pub fn host_pieces(
        &self,
        ipa: Ipa,
        len: u64,
        mut f: impl FnMut(PhysAddr, usize),
    ) -> Result<(), virtio::MemError> {
        self.map.for_each_piece(ipa, len, |p| f(self.chunks[p.chunk] + p.offset as u64, p.len))
    }
}

// SAFETY (for every `unsafe` block below): `ChunkMap` hands out only pieces that lie inside one
// chunk (`piece.offset + piece.len <= CHUNK`, and `aligned` fields likewise), and `chunks` holds
// the VM's 2 MiB chunks of RAM: identity-mapped at EL2, Normal memory, allocated for as long as
// the VM (which outlives its devices) exists, and never part of any Rust object, so no
// reference anywhere covers them. The guest may write them concurrently: each copy works on raw
// pointers only and yields or leaves whatever bytes the race gives, which the devices treat as
// untrusted (`virtio::ram`); the host buffer on the other side is the caller's own, so never
// overlaps guest RAM.
impl virtio::GuestRam for RamView {
    fn check(&self, ipa: Ipa, len: u64) -> Result<(), virtio::MemError> {
        self.map.check(ipa, len)
    }

    fn read(&self, ipa: Ipa, buf: &mut [u8]) -> Result<(), virtio::MemError> {
        let maintained = self.coherency.maintained();
        self.map.for_each_piece(ipa, buf.len() as u64, |p| {
            let dst = &mut buf[p.in_buf()];
            Coherency::before_read(maintained, self.host(p.chunk, p.offset) as u64, p.len);
            // SAFETY: see above; `dst` is `p.len` bytes.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    self.host(p.chunk, p.offset),
                    dst.as_mut_ptr(),
                    p.len,
                )
            };
        })
    }

    fn write(&mut self, ipa: Ipa, data: &[u8]) -> Result<(), virtio::MemError> {
        let maintained = self.coherency.maintained();
        self.map.for_each_piece(ipa, data.len() as u64, |p| {
            let src = &data[p.in_buf()];
            let dst = self.host(p.chunk, p.offset);
            Coherency::before_write(maintained, dst as u64, p.len);
            // SAFETY: see above; `src` is `p.len` bytes.
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, p.len) };
            Coherency::after_write(maintained, dst as u64, p.len);
        })
    }

    fn fill(&mut self, ipa: Ipa, len: u64, byte: u8) -> Result<(), virtio::MemError> {
        let maintained = self.coherency.maintained();
        self.map.for_each_piece(ipa, len, |p| {
            let dst = self.host(p.chunk, p.offset);
            Coherency::before_write(maintained, dst as u64, p.len);
            // SAFETY: see above.
            unsafe { core::ptr::write_bytes(dst, byte, p.len) };
            Coherency::after_write(maintained, dst as u64, p.len);
        })
    }

    // Ring indices and event fields change under a running vCPU's hands: each is read and
    // written as one aligned 16-bit access (single-copy atomic), never as a byte copy. A torn
    // `used.idx` made Linux find garbage in the used ring, mark the queue broken, and lose its
    // network for good; a torn `used_event` lost an interrupt.
    fn load_u16(&self, ipa: Ipa) -> Result<u16, virtio::MemError> {
        let (chunk, offset) = self.map.aligned(ipa, 2)?;
        let src = self.host(chunk, offset);
        Coherency::before_read(self.coherency.maintained(), src as u64, 2);
        // SAFETY: see above; `aligned` checked the two bytes are 2-byte aligned, so the volatile
        // load is one `ldrh`.
        Ok(u16::from_le(unsafe { (src as *const u16).read_volatile() }))
    }

    fn store_u16(&mut self, ipa: Ipa, value: u16) -> Result<(), virtio::MemError> {
        let (chunk, offset) = self.map.aligned(ipa, 2)?;
        let dst = self.host(chunk, offset);
        let maintained = self.coherency.maintained();
        Coherency::before_write(maintained, dst as u64, 2);
        // SAFETY: as in `load_u16`: one `strh`.
        unsafe { (dst as *mut u16).write_volatile(value.to_le()) };
        Coherency::after_write(maintained, dst as u64, 2);
        Ok(())
    }
}
