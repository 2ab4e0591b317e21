//! armhv's accesses to a VM's RAM, kept coherent with a guest that runs with its caches off
//! (docs/design.md, "Guests with caches off").
//!
//! A vCPU with its stage-1 MMU off (every bare-metal guest, every Linux at entry) or its data
//! cache off (SCTLR_EL1.M or .C clear) reads and writes RAM uncached, while armhv reaches the
//! same RAM through its own cacheable mapping. Where the CPUs have FEAT_S2FWB, Stage-2 forces
//! the guest's accesses to Write-Back too (`stage2::Fwb::On`) and nothing is left to do.
//! Elsewhere, while any vCPU of the VM runs with caches off, each access armhv makes to its
//! RAM is "maintained":
//!
//! - before a read, DC CIVAC over the bytes, so that the read misses and fetches what the
//!   guest wrote to memory behind the cache (a clean line is dropped; a dirty one, armhv's or a
//!   caches-on vCPU's, is written back rather than lost as DC IVAC would lose it);
//! - before a write, the same: a stale line that the write only partly covers would otherwise
//!   merge the guest's newer bytes away when it is written back;
//! - after a write, DC CVAC, so that the guest's uncached reads find the bytes in memory.
//!
//! Whether a vCPU runs with caches off is read from its live SCTLR_EL1
//! ([`Coherency::observe_live`]: one system-register read, no trap) at its exits that lead to
//! device work or come regularly: accesses to the MMIO bus's devices, interrupts, WFI/WFE; not
//! hypercalls or vGIC accesses, whose paths are kept short and which touch no guest RAM. Every buffer a guest hands a device
//! comes with an MMIO exit (its notification), observed before the device looks at the
//! buffer, and a guest that switches its caches is seen at its next tick at the latest. A
//! vCPU that turns its caches off runs unobserved until then; I/O in flight across that
//! switch is the guest's to avoid, as on hardware.

use crate::arch::El1State;
use crate::arch::cache;
use core::sync::atomic::{AtomicU32, Ordering};

/// SCTLR_EL1.M (bit 0): the stage-1 MMU is on.
pub const SCTLR_M: u64 = 1 << 0;
/// SCTLR_EL1.C (bit 2): data accesses are cacheable (with M).
pub const SCTLR_C: u64 = 1 << 2;

/// A vCPU's record of its SCTLR_EL1.M and .C before armhv has seen them: after its reset.
pub const UNSEEN: u64 = u64::MAX;

/// Whether a vCPU with this SCTLR_EL1 reads and writes RAM uncached.
pub fn caches_off(sctlr: u64) -> bool {
    sctlr & (SCTLR_M | SCTLR_C) != SCTLR_M | SCTLR_C
}

/// One VM's RAM as armhv's caches see it.
pub struct Coherency {
    /// Stage-2 forces the RAM Write-Back (FWB): the guest's accesses are cached like armhv's.
    fwb: bool,
    /// Bit n: vCPU n was last seen running with its MMU or data cache off.
    caches_off: AtomicU32,
}

const _: () = assert!(guest_abi::map::MAX_VCPUS <= 32);

impl Coherency {
    /// For RAM mapped with (`fwb`) or without FEAT_S2FWB's forced Write-Back. Nothing runs yet.
    pub fn new(fwb: bool) -> Self {
        Self { fwb, caches_off: AtomicU32::new(0) }
    }

    /// Whether the RAM is mapped with FWB.
    pub fn fwb(&self) -> bool {
        self.fwb
    }

    /// Whether armhv's accesses to the RAM need cache maintenance now: no FWB, and some vCPU
    /// runs with its caches off.
    #[inline]
    pub fn maintained(&self) -> bool {
        // Relaxed: a vCPU's state is published by its own exit, before the device work that
        // exit leads to on the same CPU; work on other CPUs reaches the device through its
        // lock, which orders it after.
        !self.fwb && self.caches_off.load(Ordering::Relaxed) != 0
    }

    /// Records how vCPU `vcpu` runs, from its SCTLR_EL1.
    #[cold]
    pub fn observe(&self, vcpu: usize, sctlr: u64) {
        if self.fwb {
            return;
        }
        let bit = 1u32 << vcpu;
        if caches_off(sctlr) {
            self.caches_off.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.caches_off.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// [`observe`](Self::observe) with the loaded vCPU's live SCTLR_EL1, if its M or C bit
    /// changed since `seen` (the vCPU's own record, [`UNSEEN`] after a reset). The common case,
    /// no change, is a register read and a compare: it is on the path of every MMIO exit.
    #[inline(always)]
    pub fn observe_live(&self, vcpu: usize, seen: &mut u64) {
        let bits = El1State::live_sctlr() & (SCTLR_M | SCTLR_C);
        if bits != *seen {
            *seen = bits;
            self.observe(vcpu, bits);
        }
    }

    /// The VM (re)starts: vCPU 0 alone runs, with its caches off (the boot protocol's state).
    pub fn restart(&self) {
        self.caches_off.store(if self.fwb { 0 } else { 1 }, Ordering::Relaxed);
    }

    /// Before armhv reads `len` bytes of the RAM at host address `pa`, in the mode `maintained`
    /// (one [`maintained`](Self::maintained) answer for a whole access).
    #[inline]
    pub fn before_read(maintained: bool, pa: u64, len: usize) {
        if maintained {
            cache::clean_invalidate_to_poc(pa, len as u64);
        }
    }

    /// Before armhv writes `len` bytes at `pa`.
    #[inline]
    pub fn before_write(maintained: bool, pa: u64, len: usize) {
        if maintained {
            cache::clean_invalidate_to_poc(pa, len as u64);
        }
    }

    /// After armhv wrote `len` bytes at `pa`.
    #[inline]
    pub fn after_write(maintained: bool, pa: u64, len: usize) {
        if maintained {
            cache::clean_data_to_poc(pa, len as u64);
        }
    }
}
