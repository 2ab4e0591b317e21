//! Software model of a virtual GIC for one VM: a distributor, the
//! per-vCPU interrupt state (GICv3's redistributors), and the choice of what
//! goes into each vCPU's list registers. It serves both GIC versions a guest
//! can be given ([`GicVersion`]).
//!
//! **GICv3** (the default), as on QEMU `virt` (IHI 0069 names throughout):
//!
//! * **Affinity routing only** (`GICD_CTLR.ARE` RAO/WI) and **one security
//!   state** (`GICD_CTLR.DS` RAO/WI, `GICD_TYPER.SecurityExtn` = 0). Groups 0
//!   and 1 both exist, gated by `GICD_CTLR.EnableGrp0` / `EnableGrp1`; Linux
//!   puts every interrupt in Group 1.
//! * **SGIs and PPIs** (INTIDs 0..32) are banked per redistributor, **SPIs**
//!   (INTIDs 32..32+N, N configurable, default 64) live in the distributor.
//!   No LPIs (`GICD_TYPER.LPIS` = 0, `GICR_TYPER.PLPIS` = 0), no extended
//!   SPI/PPI ranges, no message-based SPIs.
//! * **vCPU i has affinity 0.0.0.i**: `GICR_TYPER.Affinity_Value` = i and
//!   `Processor_Number` = i, and the hypervisor gives the vCPU
//!   `MPIDR_EL1.Aff0` = i to match.
//! * **Priorities** keep 5 bits (the low 3 bits of every `IPRIORITYR` byte
//!   are RAZ/WI), as QEMU and as `ICH_VTR_EL2.PRIbits` = 4 on the QEMU CPUs.
//!
//! **GICv2** (IHI 0048B), for guests of a GICv2 host (GIC-400, QEMU
//! `gic-version=2`): the model is the distributor only, at the guest's GICD
//! address, a GIC-400 without the Security Extensions; the guest's CPU
//! interface is the hardware's GICV frame, which the hypervisor maps. What
//! differs from GICv3, and only that:
//!
//! * **One distributor, banked per accessing vCPU**: its registers for INTIDs
//!   0..32 are the accessing vCPU's SGIs and PPIs (the same state a GICv3
//!   redistributor holds), hence the `vcpu` of
//!   [`Vgic::frame_read`] / [`Vgic::frame_write`]. No redistributors.
//! * **Routing by CPU mask** (`GICD_ITARGETSR`): an SPI goes to the
//!   lowest-numbered vCPU its byte names, and to nobody (it stays pending)
//!   when it names none.
//! * **Every interrupt resets to Group 0**, the group Linux's GICv2 driver
//!   enables.
//! * **SGIs from `GICD_SGIR`, pending per source**: each SGI of each vCPU
//!   keeps one pending request per source CPU (`GICD_[CS]PENDSGIR`), and a
//!   list register carries one request with its source's CPU ID, which the
//!   guest's `GICV_IAR` reports. The GICv3 ways of raising an SGI
//!   ([`Vgic::send_sgi`], [`Vgic::trigger_edge`]) do nothing.
//! * **List registers** are `GICH_LR<n>` on the host: the model keeps
//!   speaking the `ICH_LR<n>_EL2` encoding and [`lr::v2`] translates.
//!
//! Everything else is common: pending, active and enable state, priorities,
//! levels and edges, hardware links, the choice of list registers, the dirty
//! tracking and the hot set below.
//!
//! # How the hypervisor drives the model
//!
//! ```text
//!  device / timer / IPI  ──set_level / trigger_edge / send_sgi──┐
//!  guest GICD/GICR MMIO  ──frame_write──────────────────────────┤──> VcpuSet to kick
//!                                                               v
//!  vCPU exit:  read ICH_LR0..used  ──sync_lrs──>  model  ──flush_lrs──> write ICH_LRs, ICH_HCR_EL2.UIE
//!                                                                       ──> enter the vCPU
//! ```
//!
//! * Every injection and every MMIO write returns a [`VcpuSet`]: the vCPUs
//!   that now have a deliverable interrupt they did not have, or whose list
//!   registers hold something that is no longer right. The hypervisor kicks
//!   those that are running (an IPI makes them exit, sync and flush) and wakes
//!   those waiting in WFI.
//! * After every exit of vCPU *v* the hypervisor reads back the list
//!   registers the last flush used and calls [`Vgic::sync_lrs`]; before every
//!   entry it calls [`Vgic::flush_lrs`] and writes the result. When nothing
//!   changed (the common case: a hypercall, an MMIO access to another
//!   device) sync compares a few words and flush copies the previous values:
//!   the per-vCPU `dirty` flag below is what makes that safe. When an IPI or
//!   an edge arrives, or the guest finished an entry, the flush revisits
//!   just those interrupts (`lrs.rs`).
//!
//! # Who owns an interrupt
//!
//! An SGI or PPI belongs to its redistributor's (GICv2: its bank's) vCPU. An
//! SPI belongs to the vCPU whose list register holds it, or that holds it
//! active (an active interrupt is never taken away from the vCPU that
//! acknowledged it, so it can be deactivated there); otherwise to the vCPU
//! named by its `GICD_IROUTER` (GICv2: `GICD_ITARGETSR`). So a routing change
//! takes effect when the interrupt next leaves the old vCPU's list registers,
//! like KVM's `vgic_prune_ap_list`.
//!
//! # Locking
//!
//! Every method takes `&mut self` or `&self`: the hypervisor keeps a VM's
//! `Vgic` behind one lock, taken for one call at a time and never held while
//! a vCPU runs.
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::{BitOr, BitOrAssign};
use core::sync::atomic::{AtomicBool, Ordering};

pub mod lr;
mod lrs;
mod mmio;
mod mmio_v2;
pub use mmio::Frame;
pub mod regs;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_v2;

pub use vdev::{AccessWidth, MmioError};

/// Most vCPUs a VM can have: `VcpuSet` is a `u8`, and with Aff0 = vCPU index
/// every vCPU is reachable through `ICC_SGI1R_EL1.TargetList` with `RS` = 0.
pub const MAX_VCPUS: usize = 8;
/// Most list registers the architecture defines (`ICH_VTR_EL2.ListRegs` + 1
/// ≤ 16). QEMU's CPUs have 4.
pub const MAX_LRS: usize = 16;
/// SGIs are INTIDs 0..16.
pub const SGI_COUNT: u32 = 16;
/// SGIs and PPIs: INTIDs 0..32, banked per redistributor.
pub const PRIVATE_COUNT: u32 = 32;
/// SPIs a VM has unless configured otherwise: INTIDs 32..96, enough for QEMU
/// `virt`'s UART (SPI 1) and 32 virtio-mmio slots (SPIs 16..48).
pub const DEFAULT_SPIS: u32 = 64;
/// Most SPIs: `GICD_TYPER.ITLinesNumber` counts in blocks of 32 and INTIDs
/// 1020..1023 are special, so 30 blocks (INTIDs 32..991) is the largest
/// configuration whose every INTID is a real SPI.
pub const MAX_SPIS: u32 = 960;
/// Priority bits kept: 5 (`ICH_VTR_EL2.PRIbits` = 4 on QEMU's CPUs; QEMU's
/// GIC model does the same). The low 3 bits of a priority byte are RAZ/WI.
pub const PRIORITY_MASK: u8 = 0xf8;

const NO_VCPU: u8 = u8::MAX;
const NO_SLOT: u8 = u8::MAX;
const NO_INTID: u16 = u16::MAX;

/// A set of vCPU indices, one bit each: the vCPUs that need attention (a
/// kick if running, a wake-up if in WFI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VcpuSet(pub u8);

impl VcpuSet {
    pub const EMPTY: Self = Self(0);

    /// `{vcpu}`; empty if `vcpu` ≥ [`MAX_VCPUS`].
    pub const fn single(vcpu: usize) -> Self {
        if vcpu < MAX_VCPUS { Self(1 << vcpu) } else { Self::EMPTY }
    }

    /// `{0, .., n-1}` (n capped at [`MAX_VCPUS`]).
    pub const fn all(n: usize) -> Self {
        if n >= MAX_VCPUS { Self(u8::MAX) } else { Self(((1u16 << n) - 1) as u8) }
    }

    pub const fn contains(self, vcpu: usize) -> bool {
        vcpu < MAX_VCPUS && self.0 & (1 << vcpu) != 0
    }

    pub fn insert(&mut self, vcpu: usize) {
        *self |= Self::single(vcpu);
    }

    pub fn remove(&mut self, vcpu: usize) {
        self.0 &= !Self::single(vcpu).0;
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The members, lowest index first.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        Bits(u64::from(self.0))
    }
}

impl BitOr for VcpuSet {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl BitOrAssign for VcpuSet {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

/// The GIC architecture the guest sees (crate docs): part of the guest ABI, defined there.
pub use guest_abi::map::GicVersion;

/// The shape of one VM's virtual GIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VgicConfig {
    /// vCPUs, 1..=[`MAX_VCPUS`]; one redistributor each (GICv3), one CPU interface each
    /// (GICv2, whose `GICD_TYPER.CPUNumber` counts up to 8).
    pub vcpus: usize,
    /// SPIs, a multiple of 32 up to [`MAX_SPIS`] (`GICD_TYPER.ITLinesNumber`
    /// granularity, in either version).
    pub spis: u32,
    pub version: GicVersion,
}

impl Default for VgicConfig {
    fn default() -> Self {
        Self { vcpus: 1, spis: DEFAULT_SPIS, version: GicVersion::V3 }
    }
}

/// Why a [`VgicConfig`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `vcpus` is 0 or more than [`MAX_VCPUS`].
    VcpuCount(usize),
    /// `spis` is not a multiple of 32 or is more than [`MAX_SPIS`].
    SpiCount(u32),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::VcpuCount(n) => write!(f, "vGIC: {n} vCPUs (1..={MAX_VCPUS} supported)"),
            Self::SpiCount(n) => {
                write!(f, "vGIC: {n} SPIs (a multiple of 32 up to {MAX_SPIS} supported)")
            }
        }
    }
}

/// What [`Vgic::flush_lrs`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushResult {
    /// List registers 0..used hold interrupts; the rest of the slice was
    /// zeroed. After the next exit only these need reading back. Entries the
    /// guest finished may stay among them as zeroes (free, invalid): the
    /// incremental flush refills them rather than moving the others down.
    /// `lrs[used - 1]` is always valid.
    pub used: usize,
    /// Interrupts for this vCPU did not fit. Set `ICH_HCR_EL2.UIE` (underflow
    /// maintenance interrupt: at most one valid entry left) so the vCPU exits
    /// once the guest has consumed most entries and the rest can come in.
    /// `NPIE` (no pending entries) also works unless every entry is active,
    /// where it would fire at once on every entry; UIE never livelocks when
    /// there are at least 2 list registers, because `more_pending` implies
    /// they are all in use.
    pub more_pending: bool,
    /// Other vCPUs to kick: SPIs this vCPU let go of (their `GICD_IROUTER`
    /// changed while they sat in its list registers) that are deliverable
    /// at their new target.
    pub kick: VcpuSet,
}

/// Snapshot of one interrupt, for diagnostics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqState {
    /// `IGROUPR` bit: Group 1 (else Group 0).
    pub group1: bool,
    pub enabled: bool,
    /// The pending state as `ISPENDR` reads it: for level-sensitive
    /// interrupts the software latch OR the line; for edge-triggered ones
    /// the latch OR a pending state handed to a list register (a GICv2 SGI:
    /// the request of any source).
    pub pending: bool,
    pub active: bool,
    /// `ICFGR` `Int_config[1]`: edge-triggered (else level-sensitive).
    pub edge: bool,
    /// The input line as last set by [`Vgic::set_level`].
    pub line: bool,
    pub priority: u8,
    /// The vCPU this interrupt is delivered to now (see the crate docs on
    /// ownership); `None` for an SPI routed to an affinity no vCPU has (GICv2:
    /// whose `GICD_ITARGETSR` names no vCPU).
    pub owner: Option<usize>,
    /// `(vcpu, list register)` if a list register holds it.
    pub lr: Option<(usize, usize)>,
    /// The linked physical INTID, if any.
    pub hw: Option<u32>,
}

/// One interrupt's state. Private interrupts exist once per vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Irq {
    group1: bool,
    enabled: bool,
    /// The pending latch: set by an edge, by `ISPENDR`, by an SGI; cleared by
    /// `ICPENDR` and, for level-sensitive interrupts, by the guest's
    /// acknowledge. For an edge-triggered interrupt in a list register the
    /// pending state moves into the list register (see `lr_pending`) and the
    /// latch only records edges that arrived since.
    latch: bool,
    /// Input line level (level-sensitive sources; for edge-triggered ones
    /// only its rising edges matter).
    line: bool,
    active: bool,
    edge: bool,
    priority: u8,
    /// Where an SPI goes, as a `GICD_IROUTER` value masked to its implemented fields: what the
    /// guest wrote (GICv3), or the vCPU its `targets` name (GICv2, see `v2_route`).
    route: u64,
    /// `GICD_ITARGETSR` byte of an SPI (GICv2 only), masked to the vCPUs that exist.
    targets: u8,
    /// Linked physical INTID (`ICH_LR.HW` = 1).
    hw: Option<u16>,
    /// vCPU whose list register holds it, or that holds it active;
    /// `NO_VCPU` otherwise.
    home: u8,
    /// List register of `home` holding it, or `NO_SLOT`.
    slot: u8,
    /// The hypervisor's override of `route` (SPIs only): the vCPU it is delivered to
    /// whatever the guest wrote, or `NO_VCPU`.
    redirect: u8,
    /// `ICPENDR` cleared the pending state while a list register of a
    /// running vCPU still says pending: ignore that list register's pending
    /// bit when it is folded back.
    lr_pending_cancelled: bool,
}

impl Irq {
    /// Reset state. The group is the one the guest's driver enables, rather
    /// than the architecture's UNKNOWN: GICv3, Group 1, the group Linux
    /// assigns anyway and the one a bare-metal guest that never writes
    /// `IGROUPR` expects on QEMU `virt` (which resets to non-secure Group 1
    /// when booting a kernel directly); GICv2, Group 0, the only one Linux's
    /// GICv2 driver enables (`GICD_CTLR` and `GICC_CTLR` bit 0; with
    /// `GICV_CTLR.FIQEn` = 0 it is signalled as a virtual IRQ).
    const fn reset(version: GicVersion, edge: bool) -> Self {
        Self {
            group1: matches!(version, GicVersion::V3),
            enabled: false,
            latch: false,
            line: false,
            active: false,
            edge,
            priority: 0,
            route: 0,
            targets: regs::v2::ITARGETSR_RESET,
            hw: None,
            home: NO_VCPU,
            slot: NO_SLOT,
            redirect: NO_VCPU,
            lr_pending_cancelled: false,
        }
    }
}

/// Per-vCPU redistributor and list-register bookkeeping.
#[derive(Clone, Debug)]
struct CpuIf {
    /// `GICR_WAKER.ProcessorSleep` (`ChildrenAsleep` follows it at once);
    /// GICv3 only, and it matters only to `IRM` routing, which GICv2 lacks.
    asleep: bool,
    /// INTID in each list register written by the last flush, `NO_INTID`
    /// for an entry that has since become invalid.
    lr_intid: [u16; MAX_LRS],
    /// The value of each list register as last written (flush) or read
    /// back (sync): what the hardware holds, as far as the model knows.
    lr_value: [u64; MAX_LRS],
    /// Entries 0..used were written by the last flush.
    used: usize,
    /// `lrs.len()` of the last flush.
    capacity: usize,
    more_pending: bool,
    /// Something that can change this vCPU's list registers changed since
    /// the last flush; when clear, flush re-emits `lr_value[..used]`.
    dirty: bool,
    /// A change since the last flush that only a full choice handles (see
    /// `lrs.rs`); when clear, a dirty vCPU's flush revisits just `fresh`.
    rechoose: bool,
    /// Interrupts (indices into `irqs`) whose entry, or lack of one, must be
    /// looked at again: their pending latch rose, or the guest left their
    /// entry in a state the model would not write.
    fresh: [u16; FRESH_MAX],
    n_fresh: u8,
    /// GICv2 only: per SGI, the vCPUs whose request is pending here and not
    /// in a list register (GICv2 keeps one pending state per source, and
    /// the guest's `GICV_IAR` names the source). The SGI's pending latch is
    /// set exactly while this is non-zero.
    sgi_sources: [u8; SGI_COUNT as usize],
    /// GICv2 only: per SGI, the source of the request the guest acknowledged
    /// (meaningful while the SGI is active): its list-register entry must
    /// name it for the guest's `GICV_EOIR` / `GICV_DIR` to find it.
    sgi_active_source: [u8; SGI_COUNT as usize],
}

/// Most interrupts a vCPU's next flush revisits one by one; more make it a full choice.
pub(crate) const FRESH_MAX: usize = 4;

impl CpuIf {
    const fn new() -> Self {
        Self {
            // GICR_WAKER resets with ProcessorSleep = 1: the guest's driver
            // wakes its redistributor before using it.
            asleep: true,
            lr_intid: [NO_INTID; MAX_LRS],
            lr_value: [0; MAX_LRS],
            used: 0,
            capacity: 0,
            more_pending: false,
            dirty: true,
            rechoose: true,
            fresh: [0; FRESH_MAX],
            n_fresh: 0,
            sgi_sources: [0; SGI_COUNT as usize],
            sgi_active_source: [0; SGI_COUNT as usize],
        }
    }
}

/// The virtual GIC of one VM.
#[derive(Clone, Debug)]
pub struct Vgic {
    version: GicVersion,
    vcpus: usize,
    spis: u32,
    /// `GICD_CTLR.EnableGrp0` / `EnableGrp1`; the other bits are constant.
    ctlr: u32,
    /// `vcpus * 32` private interrupts (vCPU-major), then the SPIs.
    irqs: Vec<Irq>,
    /// One bit per entry of `irqs`: set for every interrupt that is pending, active or in a
    /// list register (and possibly for some that no longer are, cleared by the next full
    /// flush). Choosing list registers or finding a pending interrupt walks these bits instead
    /// of every interrupt: a flush costs what is pending, not what exists.
    hot: Vec<u64>,
    cpus: Vec<CpuIf>,
    /// `!cpus[v].dirty` for every vCPU, readable without the model's lock ([`Vgic::clean_flags`]).
    clean: CleanHandle,
    unknown_accesses: u64,
}

/// Whether each vCPU's last flush still stands (nothing changed since that could change its
/// list registers), readable by a hypervisor without taking the model's lock: the common exit
/// then costs one load before the next entry. A flag is cleared, under the lock, before the
/// change that dirtied the vCPU returns the kick that makes it exit and look again, so a
/// vCPU that read a stale "clean" is kicked right after.
#[derive(Debug)]
pub struct CleanFlags([AtomicBool; MAX_VCPUS]);

impl CleanFlags {
    pub fn new() -> Self {
        Self([const { AtomicBool::new(false) }; MAX_VCPUS])
    }

    /// The last flush of `vcpu` still stands.
    pub fn is_clean(&self, vcpu: usize) -> bool {
        // SeqCst, as the clearing store: a hypervisor that marks a vCPU running (SeqCst) and
        // then finds it clean here, against a change that clears the flag and then looks
        // whether the vCPU runs (SeqCst), needs one total order of the four. (On AArch64 these
        // are the same LDAR and STLR as acquire and release.)
        self.0.get(vcpu).is_some_and(|f| f.load(Ordering::SeqCst))
    }

    fn set(&self, vcpu: usize, clean: bool) {
        self.0[vcpu].store(clean, Ordering::SeqCst);
    }
}

impl Default for CleanFlags {
    fn default() -> Self {
        Self::new()
    }
}

/// The model's reference to its flags. A clone of the model gets flags of its own (a copy),
/// so that flushing the clone cannot mark the original's vCPUs clean.
#[derive(Debug)]
struct CleanHandle(Arc<CleanFlags>);

impl Clone for CleanHandle {
    fn clone(&self) -> Self {
        let copy = CleanFlags::new();
        for v in 0..MAX_VCPUS {
            copy.set(v, self.0.is_clean(v));
        }
        Self(Arc::new(copy))
    }
}

impl core::ops::Deref for CleanHandle {
    type Target = CleanFlags;
    fn deref(&self) -> &CleanFlags {
        &self.0
    }
}

impl Vgic {
    /// A distributor with every interrupt reset: disabled, inactive, not
    /// pending, Group 1 (GICv3) or Group 0 (GICv2), priority 0, SGIs
    /// edge-triggered, PPIs and SPIs level-sensitive, SPIs routed to vCPU 0;
    /// every redistributor asleep.
    pub fn new(config: VgicConfig) -> Result<Self, ConfigError> {
        if config.vcpus == 0 || config.vcpus > MAX_VCPUS {
            return Err(ConfigError::VcpuCount(config.vcpus));
        }
        if !config.spis.is_multiple_of(32) || config.spis > MAX_SPIS {
            return Err(ConfigError::SpiCount(config.spis));
        }
        let mut irqs = Vec::with_capacity(config.vcpus * 32 + config.spis as usize);
        for _ in 0..config.vcpus {
            // SGIs are always edge-triggered (ICFGR0 is read-only).
            irqs.extend((0..PRIVATE_COUNT).map(|i| Irq::reset(config.version, i < SGI_COUNT)));
        }
        irqs.extend((0..config.spis).map(|_| Irq::reset(config.version, false)));
        let cpus = (0..config.vcpus).map(|_| CpuIf::new()).collect();
        let hot = alloc::vec![0; irqs.len().div_ceil(64)];
        let clean = CleanHandle(Arc::new(CleanFlags::new()));
        Ok(Self {
            version: config.version,
            vcpus: config.vcpus,
            spis: config.spis,
            ctlr: 0,
            irqs,
            hot,
            cpus,
            clean,
            unknown_accesses: 0,
        })
    }

    /// Like [`Vgic::new`], publishing the vCPUs' clean state in `clean` (all dirty from now):
    /// a hypervisor keeps one `CleanFlags` per VM across resets of its model.
    pub fn with_clean_flags(
        config: VgicConfig,
        clean: Arc<CleanFlags>,
    ) -> Result<Self, ConfigError> {
        let mut g = Self::new(config)?;
        for v in 0..MAX_VCPUS {
            clean.set(v, false);
        }
        g.clean = CleanHandle(clean);
        Ok(g)
    }

    /// The vCPUs' clean flags, to check without the lock.
    pub fn clean_flags(&self) -> Arc<CleanFlags> {
        self.clean.0.clone()
    }

    pub fn version(&self) -> GicVersion {
        self.version
    }

    /// The configuration the model was made with (for a fresh one at a reset).
    pub fn config(&self) -> VgicConfig {
        VgicConfig { vcpus: self.vcpus, spis: self.spis, version: self.version }
    }

    pub fn vcpus(&self) -> usize {
        self.vcpus
    }

    pub fn spis(&self) -> u32 {
        self.spis
    }

    /// One past the highest implemented INTID (32 + SPIs).
    pub fn intid_limit(&self) -> u32 {
        PRIVATE_COUNT + self.spis
    }

    /// Size of the redistributor region: 128 KiB per vCPU.
    pub fn redist_region_size(&self) -> u64 {
        self.vcpus as u64 * regs::GICR_STRIDE
    }

    /// Guest accesses to offsets that are no register of this model (read
    /// as zero, writes ignored). A non-zero count while a guest boots points
    /// at a register the model should implement.
    pub fn unknown_accesses(&self) -> u64 {
        self.unknown_accesses
    }

    // --- Injection -------------------------------------------------------

    /// Sets the input line of a level-sensitive source: the virtual timer
    /// (PPI 27, `vcpu` says whose), a device's SPI (`vcpu` ignored). While
    /// the line is high the interrupt is pending; lowering it withdraws a
    /// pending state the guest has not acknowledged yet. If the guest
    /// configured the INTID edge-triggered, a rising line is an edge.
    /// Unknown INTIDs and vCPUs are ignored, and so are the SGIs of a GICv2
    /// model (a GICv2 SGI is pending per source CPU; only the guest's
    /// `GICD_SGIR` and `GICD_SPENDSGIR` name one). Returns the vCPUs to kick.
    pub fn set_level(&mut self, intid: u32, vcpu: usize, level: bool) -> VcpuSet {
        if self.is_v2_sgi(intid) {
            return VcpuSet::EMPTY;
        }
        let Some(idx) = self.index(vcpu, intid) else { return VcpuSet::EMPTY };
        self.update(idx, |irq| {
            if irq.edge && level && !irq.line {
                irq.latch = true;
            }
            irq.line = level;
        })
    }

    /// Makes an interrupt pending once, as an edge would (or `ISPENDR`):
    /// for a level-sensitive INTID this sets the pending latch, which the
    /// guest's acknowledge clears. Edges arriving while the interrupt is
    /// already pending merge into one. Unknown INTIDs and vCPUs are
    /// ignored, and so are the SGIs of a GICv2 model (see
    /// [`set_level`](Self::set_level)). Returns the vCPUs to kick.
    pub fn trigger_edge(&mut self, intid: u32, vcpu: usize) -> VcpuSet {
        if self.is_v2_sgi(intid) {
            return VcpuSet::EMPTY;
        }
        let Some(idx) = self.index(vcpu, intid) else { return VcpuSet::EMPTY };
        self.raise_latch(idx)
    }

    /// Emulates a guest write of `value` to `ICC_SGI1R_EL1` on vCPU
    /// `sender` (the write traps to EL2 because `HCR_EL2.IMO` is set).
    ///
    /// `INTID[27:24]` names the SGI. With `IRM[40]` = 1 every vCPU but the
    /// sender is targeted. Otherwise the targets are the vCPUs whose
    /// affinity is `Aff3.Aff2.Aff1.(RS * 16 + n)` for each set bit n of
    /// `TargetList[15:0]`: since vCPU i has affinity 0.0.0.i, a non-zero
    /// `Aff1`, `Aff2`, `Aff3` hits nobody, and bits naming vCPUs that do not
    /// exist are ignored. An SGI from `ICC_SGI1R_EL1` is delivered whatever
    /// the target's `IGROUPR0` bit says (single security state: a Group 1
    /// SGI request may generate a Group 0 SGI). Returns the vCPUs to kick.
    /// A GICv2 model ignores it: its guests have no `ICC_SGI1R_EL1` and
    /// write `GICD_SGIR` instead.
    pub fn send_sgi(&mut self, sender: usize, value: u64) -> VcpuSet {
        if self.version != GicVersion::V3 {
            return VcpuSet::EMPTY;
        }
        let intid = ((value >> regs::SGI1R_INTID_SHIFT) & 0xf) as u32;
        let targets = if value & regs::SGI1R_IRM != 0 {
            let mut t = VcpuSet::all(self.vcpus);
            t.remove(sender);
            t
        } else {
            let upper = ((value >> regs::SGI1R_AFF1_SHIFT) & 0xff)
                | ((value >> regs::SGI1R_AFF2_SHIFT) & 0xff)
                | ((value >> regs::SGI1R_AFF3_SHIFT) & 0xff);
            let rs = (value >> regs::SGI1R_RS_SHIFT) & 0xf;
            let list = value & regs::SGI1R_TARGET_LIST_MASK;
            // Aff0 = RS * 16 + bit: with at most MAX_VCPUS (< 16) vCPUs only RS = 0 names any.
            const _: () = assert!(MAX_VCPUS <= 16);
            if upper == 0 && rs == 0 {
                VcpuSet((list & u64::from(VcpuSet::all(self.vcpus).0)) as u8)
            } else {
                VcpuSet::EMPTY
            }
        };
        let mut kick = VcpuSet::EMPTY;
        for target in targets.iter() {
            kick |= self.raise_latch(target * PRIVATE_COUNT as usize + intid as usize);
        }
        kick
    }

    /// Withdraws the pending state of a level-sensitive interrupt the guest has not
    /// acknowledged, because its source's line dropped: a hardware-linked SPI of an assigned
    /// device, whose line the hypervisor samples at the guest's exits. On the machine a level
    /// interrupt is pending only while its line is high, so a handler that completes the
    /// interrupt before clearing the device does not take it twice. Only where no other vCPU's
    /// list register holds it (`vcpu` is the caller's, whose list registers were just synced).
    /// Returns the vCPUs to kick if it withdrew something, `None` if there was nothing to
    /// withdraw (not pending, active, edge-triggered, or in another vCPU's list register).
    pub fn withdraw_pending(&mut self, intid: u32, vcpu: usize) -> Option<VcpuSet> {
        let idx = self.index(vcpu, intid)?;
        let irq = self.irqs[idx];
        let elsewhere = irq.slot != NO_SLOT && usize::from(irq.home) != vcpu;
        if irq.edge || irq.active || !irq.latch || irq.line || elsewhere {
            return None;
        }
        Some(self.update(idx, |irq| irq.latch = false))
    }

    /// Links (or, with `None`, unlinks) a virtual interrupt to a physical
    /// INTID: its list-register entries then carry `HW` = 1 and `pINTID`, so
    /// the guest's deactivation deactivates the physical interrupt and no
    /// `EOI` maintenance is requested. A linked level-sensitive interrupt's
    /// line must be kept current by the hypervisor (e.g. sample the timer
    /// before `flush_lrs`). Returns the vCPUs to kick, or `None` (nothing
    /// changed) for an unknown INTID/vCPU, a physical INTID that `pINTID`
    /// cannot name (SGIs, 1020 and above), or a virtual SGI of a GICv2 model
    /// (`GICH_LR.PhysicalID` holds either the physical INTID or the SGI's
    /// source).
    pub fn set_hw_link(&mut self, intid: u32, vcpu: usize, pintid: Option<u32>) -> Option<VcpuSet> {
        if self.is_v2_sgi(intid) {
            return None;
        }
        let idx = self.index(vcpu, intid)?;
        let hw = match pintid {
            None => None,
            Some(p) if (SGI_COUNT..1020).contains(&p) => Some(p as u16),
            Some(_) => return None,
        };
        Some(self.update(idx, |irq| irq.hw = hw))
    }

    /// Delivers SPI `intid` to `vcpu` whatever its `GICD_IROUTER` (GICv2: `GICD_ITARGETSR`)
    /// says, or, with `None`, as
    /// the guest routed it again (the interrupt distributor's mechanism; the guest still reads
    /// back what it wrote). Like a routing change, it takes effect once the interrupt has left
    /// the list registers of the vCPU that holds it. Returns the vCPUs to kick, or `None`
    /// (nothing changed) for an INTID that is not an SPI or a vCPU that does not exist.
    pub fn redirect_spi(&mut self, intid: u32, vcpu: Option<usize>) -> Option<VcpuSet> {
        if intid < PRIVATE_COUNT || vcpu.is_some_and(|v| v >= self.vcpus) {
            return None;
        }
        let idx = self.index(0, intid)?;
        let to = vcpu.map_or(NO_VCPU, |v| v as u8);
        Some(self.update(idx, |irq| irq.redirect = to))
    }

    /// The vCPU the guest's own routing names for SPI `intid` (`GICD_IROUTER`, or GICv2's
    /// `GICD_ITARGETSR`; ignoring any [`redirect_spi`](Self::redirect_spi)); `None` for other
    /// INTIDs or a route naming no vCPU.
    pub fn routed_vcpu(&self, intid: u32) -> Option<usize> {
        if intid < PRIVATE_COUNT {
            return None;
        }
        let idx = self.index(0, intid)?;
        self.route_target(self.irqs[idx].route)
    }

    // --- Guest MMIO ------------------------------------------------------

    /// A guest read of `frame` at `offset` by vCPU `vcpu`, zero-extended to 64 bits. GICv3:
    /// the distributor or the redistributor region (`vcpu` plays no part: each
    /// redistributor has its own frames). GICv2: the distributor, whose registers for INTIDs
    /// 0..32 are those of `vcpu`'s bank; there are no redistributors
    /// ([`MmioError::Unmapped`]). Access rules: `mmio.rs`, `mmio_v2.rs`.
    pub fn frame_read(
        &mut self,
        frame: Frame,
        vcpu: usize,
        offset: u64,
        width: AccessWidth,
    ) -> Result<u64, MmioError> {
        let outcome = match (self.version, frame) {
            (GicVersion::V3, Frame::Dist) => self.dist_access(offset, width, None),
            (GicVersion::V3, Frame::Redist) => self.redist_access(offset, width, None),
            (GicVersion::V2, Frame::Dist) => self.dist_v2_access(vcpu, offset, width, None),
            (GicVersion::V2, Frame::Redist) => Err(MmioError::Unmapped),
        };
        outcome.map(|(v, _)| width.truncate(v))
    }

    /// A guest write to `frame` at `offset` by vCPU `vcpu` (see
    /// [`frame_read`](Self::frame_read)). Returns the vCPUs to kick.
    pub fn frame_write(
        &mut self,
        frame: Frame,
        vcpu: usize,
        offset: u64,
        width: AccessWidth,
        value: u64,
    ) -> Result<VcpuSet, MmioError> {
        let value = Some(width.truncate(value));
        let outcome = match (self.version, frame) {
            (GicVersion::V3, Frame::Dist) => self.dist_access(offset, width, value),
            (GicVersion::V3, Frame::Redist) => self.redist_access(offset, width, value),
            (GicVersion::V2, Frame::Dist) => self.dist_v2_access(vcpu, offset, width, value),
            (GicVersion::V2, Frame::Redist) => Err(MmioError::Unmapped),
        };
        outcome.map(|(_, kick)| kick)
    }

    // --- Queries ---------------------------------------------------------

    /// Whether `vcpu` has an interrupt it could take now: pending, not
    /// active, enabled, its group enabled in `GICD_CTLR`. For a WFI exit,
    /// after [`sync_lrs`](Self::sync_lrs). The CPU interface's own masks
    /// (`ICH_VMCR_EL2.VPMR`, `VENG1`, running priority) are the
    /// hypervisor's to compare against [`highest_pending`](Self::highest_pending).
    ///
    /// # Panics
    /// If `vcpu` ≥ [`vcpus`](Self::vcpus).
    pub fn pending_for(&self, vcpu: usize) -> bool {
        self.highest_pending(vcpu).is_some()
    }

    /// The deliverable interrupt of `vcpu` with the highest priority (lowest
    /// value; ties to the lower INTID), as `(INTID, priority)`.
    ///
    /// # Panics
    /// If `vcpu` ≥ [`vcpus`](Self::vcpus).
    pub fn highest_pending(&self, vcpu: usize) -> Option<(u32, u8)> {
        assert!(vcpu < self.vcpus, "vGIC: no vCPU {vcpu}");
        self.hot_owned_by(vcpu)
            .filter(|&idx| self.deliverable(idx))
            .map(|idx| (self.irqs[idx].priority, self.intid_of(idx)))
            .min()
            .map(|(prio, intid)| (intid, prio))
    }

    /// The state of INTID `intid` (`vcpu` selects the redistributor for
    /// SGIs and PPIs), or `None` if it does not exist.
    pub fn irq_state(&self, intid: u32, vcpu: usize) -> Option<IrqState> {
        let idx = self.index(vcpu, intid)?;
        let irq = &self.irqs[idx];
        Some(IrqState {
            group1: irq.group1,
            enabled: irq.enabled,
            pending: self.is_pending(idx),
            active: irq.active,
            edge: irq.edge,
            line: irq.line,
            priority: irq.priority,
            owner: self.owner(idx),
            lr: (irq.slot != NO_SLOT).then_some((irq.home as usize, irq.slot as usize)),
            hw: irq.hw.map(u32::from),
        })
    }

    /// The INTID the last flush put in list register `slot` of `vcpu`, if
    /// that entry is still valid as far as the model knows.
    pub fn lr_intid(&self, vcpu: usize, slot: usize) -> Option<u32> {
        let cpu = self.cpus.get(vcpu)?;
        if slot >= cpu.used || cpu.lr_intid[slot] == NO_INTID {
            return None;
        }
        Some(u32::from(cpu.lr_intid[slot]))
    }

    // --- Internals -------------------------------------------------------

    /// Index into `irqs` of INTID `intid` as seen by `vcpu`.
    fn index(&self, vcpu: usize, intid: u32) -> Option<usize> {
        if intid < PRIVATE_COUNT {
            (vcpu < self.vcpus).then_some(vcpu * PRIVATE_COUNT as usize + intid as usize)
        } else if intid < self.intid_limit() {
            Some(self.spi_base() + (intid - PRIVATE_COUNT) as usize)
        } else {
            None
        }
    }

    /// Index of the first SPI in `irqs`.
    fn spi_base(&self) -> usize {
        self.vcpus * PRIVATE_COUNT as usize
    }

    fn intid_of(&self, idx: usize) -> u32 {
        let base = self.spi_base();
        if idx < base {
            (idx % PRIVATE_COUNT as usize) as u32
        } else {
            PRIVATE_COUNT + (idx - base) as u32
        }
    }

    /// The vCPU a `GICD_IROUTER` value names.
    ///
    /// `Interrupt_Routing_Mode` = 1 ("any participating PE"): the
    /// lowest-numbered vCPU whose redistributor is awake
    /// (`GICR_WAKER.ProcessorSleep` = 0), vCPU 0 if none is. Deterministic
    /// and never a vCPU that has not brought its redistributor up yet; a
    /// load-balancing choice would need run-queue knowledge the model lacks.
    ///
    /// `Interrupt_Routing_Mode` = 0: the vCPU with affinity
    /// `Aff3.Aff2.Aff1.Aff0`, i.e. vCPU Aff0 when Aff1..3 are 0. Any other
    /// affinity names no vCPU: the interrupt is forwarded to nobody and
    /// stays pending in the distributor until `GICD_IROUTER` names a vCPU
    /// (the GIC forwards an SPI only to the PE its routing names).
    ///
    /// A GICv2 model keeps in `route` what its `GICD_ITARGETSR` byte means
    /// in these terms ([`v2_route`]), so the routing of both versions is
    /// resolved here alike.
    fn route_target(&self, route: u64) -> Option<usize> {
        if route & regs::IROUTER_IRM != 0 {
            return Some(self.any_target());
        }
        if route & !0xff != 0 {
            return None;
        }
        let aff0 = (route & 0xff) as usize;
        (aff0 < self.vcpus).then_some(aff0)
    }

    /// An SGI of a GICv2 model: pending per source CPU (`CpuIf::sgi_sources`).
    #[inline(always)]
    fn is_v2_sgi(&self, intid: u32) -> bool {
        self.version == GicVersion::V2 && intid < SGI_COUNT
    }

    fn any_target(&self) -> usize {
        self.cpus.iter().position(|c| !c.asleep).unwrap_or(0)
    }

    /// The vCPU an interrupt is delivered to now (crate docs, "Who owns an
    /// interrupt").
    fn owner(&self, idx: usize) -> Option<usize> {
        if idx < self.spi_base() {
            return Some(idx / PRIVATE_COUNT as usize);
        }
        let irq = &self.irqs[idx];
        if irq.home != NO_VCPU {
            return Some(irq.home as usize);
        }
        if irq.redirect != NO_VCPU {
            return Some(irq.redirect as usize);
        }
        self.route_target(irq.route)
    }

    /// The interrupts `vcpu` owns that may be pending or active (the `hot` bits), in index
    /// order.
    fn hot_owned_by(&self, vcpu: usize) -> impl Iterator<Item = usize> + '_ {
        self.hot
            .iter()
            .enumerate()
            .flat_map(|(w, &word)| Bits(word).map(move |b| w * 64 + b))
            .filter(move |&i| self.owner(i) == Some(vcpu))
    }

    /// Keeps `hot` a superset of the interrupts that matter to a flush.
    fn note_hot(&mut self, idx: usize) {
        let irq = &self.irqs[idx];
        if irq.latch || irq.line || irq.active || irq.slot != NO_SLOT {
            self.hot[idx / 64] |= 1 << (idx % 64);
        }
    }

    /// Drops `idx` from `hot` if nothing about it can reach a list register.
    fn cool(&mut self, idx: usize) {
        let irq = &self.irqs[idx];
        if !(irq.latch || irq.line || irq.active || irq.slot != NO_SLOT) {
            self.hot[idx / 64] &= !(1 << (idx % 64));
        }
    }

    fn group_enabled(&self, irq: &Irq) -> bool {
        let bit =
            if irq.group1 { regs::GICD_CTLR_ENABLE_GRP1 } else { regs::GICD_CTLR_ENABLE_GRP0 };
        self.ctlr & bit != 0
    }

    /// Whether the list register holding an edge-triggered interrupt has it
    /// pending (and `ICPENDR` has not since cleared that).
    fn lr_pending(&self, irq: &Irq) -> bool {
        irq.slot != NO_SLOT
            && !irq.lr_pending_cancelled
            && self.cpus[irq.home as usize].lr_value[irq.slot as usize] & lr::PENDING != 0
    }

    /// The pending state (`ISPENDR`'s view). Level-sensitive: the latch OR
    /// the line (IHI 0069 "Level-sensitive interrupts"). Edge-triggered: the
    /// latch OR a pending state moved into a list register.
    fn is_pending(&self, idx: usize) -> bool {
        let irq = &self.irqs[idx];
        if irq.edge { irq.latch || self.lr_pending(irq) } else { irq.latch || irq.line }
    }

    /// Pending, not active, enabled and its group enabled: the distributor
    /// would forward it to the CPU interface.
    fn deliverable(&self, idx: usize) -> bool {
        let irq = &self.irqs[idx];
        !irq.active && irq.enabled && self.group_enabled(irq) && self.is_pending(idx)
    }

    /// The list-register value this interrupt should have now, or 0 if it
    /// should not be in a list register at all.
    ///
    /// * `State`: active if active; pending if pending, enabled and its
    ///   group enabled — except that a level-sensitive or hardware-linked
    ///   interrupt is never written pending+active. For level-sensitive
    ///   ones the line is re-examined when the guest deactivates (the `EOI`
    ///   maintenance below), which avoids a spurious second interrupt when
    ///   the guest's handler lowered the line; for hardware-linked ones the
    ///   pending state lives in the physical distributor.
    /// * `EOI`: for a level-sensitive interrupt (without `HW`) whose line or
    ///   latch is still up, so that its deactivation causes a maintenance
    ///   exit and the model re-pends it. When the line drops first (the
    ///   guest serviced an emulated device, which traps anyway) the bit is
    ///   not needed and the guest completes the interrupt without an exit.
    fn lr_value_for(&self, idx: usize) -> u64 {
        if self.version == GicVersion::V2 && self.intid_of(idx) < SGI_COUNT {
            return self.v2_sgi_lr_value(idx);
        }
        let irq = &self.irqs[idx];
        let may_pend_while_active = irq.edge && irq.hw.is_none();
        let pending = self.is_pending(idx)
            && irq.enabled
            && self.group_enabled(irq)
            && (!irq.active || may_pend_while_active);
        if !pending && !irq.active {
            return 0;
        }
        let mut v = u64::from(self.intid_of(idx)) | u64::from(irq.priority) << lr::PRIORITY_SHIFT;
        if irq.group1 {
            v |= lr::GROUP;
        }
        if pending {
            v |= lr::PENDING;
        }
        if irq.active {
            v |= lr::ACTIVE;
        }
        match irq.hw {
            Some(p) => v |= lr::HW | u64::from(p) << lr::PINTID_SHIFT,
            None if !irq.edge && (irq.latch || irq.line) => v |= lr::EOI,
            None => {}
        }
        v
    }

    /// The sources of GICv2 SGI `idx` whose request is pending: those
    /// waiting in the distributor and the one a list register holds pending.
    fn v2_sgi_requests(&self, idx: usize) -> u8 {
        let irq = &self.irqs[idx];
        let waiting =
            self.cpus[idx / PRIVATE_COUNT as usize].sgi_sources[idx % PRIVATE_COUNT as usize];
        waiting | self.lr_pending_source(irq).map_or(0, |s| 1 << s)
    }

    /// The source of the request a list register holds pending, for a GICv2 SGI.
    fn lr_pending_source(&self, irq: &Irq) -> Option<usize> {
        self.lr_pending(irq)
            .then(|| lr::sgi_source(self.cpus[irq.home as usize].lr_value[irq.slot as usize]))
    }

    /// [`lr_value_for`](Self::lr_value_for) of a GICv2 SGI: one request,
    /// one source, per list register, as `GICC_IAR` hands them out one at a
    /// time.
    ///
    /// * Pending: the source already in the list register, else the
    ///   lowest-numbered one.
    /// * Active: the source the guest acknowledged, which its `GICV_EOIR`
    ///   names. Pending as well only if that same source asked again: the
    ///   entry has one `CPUID`.
    /// * `EOI` while other sources wait, so that the guest's deactivation
    ///   exits and the next request follows (as KVM's vgic-v2 does).
    fn v2_sgi_lr_value(&self, idx: usize) -> u64 {
        let irq = &self.irqs[idx];
        let (target, sgi) = (idx / PRIVATE_COUNT as usize, idx % PRIVATE_COUNT as usize);
        let requests = self.v2_sgi_requests(idx);
        let offered = irq.enabled && self.group_enabled(irq) && requests != 0;
        let active_source = usize::from(self.cpus[target].sgi_active_source[sgi]);
        let pending_source = match (offered, irq.active) {
            (false, _) => None,
            (true, true) => (requests & 1 << active_source != 0).then_some(active_source),
            (true, false) => {
                Some(self.lr_pending_source(irq).unwrap_or(requests.trailing_zeros() as usize))
            }
        };
        let source = match (irq.active, pending_source) {
            (true, _) => active_source,
            (false, Some(s)) => s,
            (false, None) => return 0,
        };
        let mut v = sgi as u64
            | u64::from(irq.priority) << lr::PRIORITY_SHIFT
            | (source as u64) << lr::SGI_SOURCE_SHIFT;
        if irq.group1 {
            v |= lr::GROUP;
        }
        if pending_source.is_some() {
            v |= lr::PENDING;
        }
        if irq.active {
            v |= lr::ACTIVE;
        }
        if offered && requests & !pending_source.map_or(0, |s| 1 << s) != 0 {
            v |= lr::EOI;
        }
        v
    }

    fn mark_dirty(&mut self, vcpu: Option<usize>) {
        if let Some(v) = vcpu {
            self.set_dirty(v);
        }
    }

    /// Something changed that can change `vcpu`'s list registers: its next
    /// flush chooses afresh.
    fn set_dirty(&mut self, vcpu: usize) {
        let cpu = &mut self.cpus[vcpu];
        cpu.dirty = true;
        cpu.rechoose = true;
        self.clean.set(vcpu, false);
    }

    /// Interrupt `idx` may now need a list register of `vcpu`, or a new
    /// value in the one it has: the next flush of `vcpu` revisits it (or
    /// chooses afresh, if too many wait).
    fn set_fresh(&mut self, vcpu: usize, idx: usize) {
        let cpu = &mut self.cpus[vcpu];
        cpu.dirty = true;
        self.clean.set(vcpu, false);
        let n = usize::from(cpu.n_fresh);
        if cpu.fresh[..n].contains(&(idx as u16)) {
            return;
        }
        if n == FRESH_MAX {
            cpu.rechoose = true;
        } else {
            cpu.fresh[n] = idx as u16;
            cpu.n_fresh += 1;
        }
    }

    /// Applies `f` to one interrupt and works out who must hear about it.
    ///
    /// Every change to an interrupt goes through here, which keeps the
    /// per-vCPU `dirty` flags exact. A vCPU is kicked when
    /// * a list register of it holds the interrupt and no longer says what
    ///   the model would write now, or the pending latch rose (a new edge
    ///   may follow an acknowledge the model has not seen: the running vCPU
    ///   must exit so it is not left in the latch until some later exit);
    /// * otherwise, when the interrupt became deliverable to it (or was
    ///   deliverable and moved to it).
    fn update(&mut self, idx: usize, f: impl FnOnce(&mut Irq)) -> VcpuSet {
        let before = self.irqs[idx];
        let owner_before = self.owner(idx);
        let deliverable_before = self.deliverable(idx);
        let irq = &mut self.irqs[idx];
        f(irq);
        if irq.slot == NO_SLOT {
            irq.lr_pending_cancelled = false;
            if !irq.active {
                // Held active outside a list register, now deactivated.
                irq.home = NO_VCPU;
            }
        }
        let after = *irq;
        if after == before {
            return VcpuSet::EMPTY;
        }
        self.note_hot(idx);
        let owner_after = self.owner(idx);
        match owner_after {
            // Outside the list registers throughout, and the same owner: at most this
            // interrupt's place in them changes (its next flush revisits it).
            Some(o)
                if owner_before == owner_after
                    && before.slot == NO_SLOT
                    && after.slot == NO_SLOT =>
            {
                self.set_fresh(o, idx)
            }
            _ => {
                self.mark_dirty(owner_before);
                self.mark_dirty(owner_after);
            }
        }
        let mut kick = VcpuSet::EMPTY;
        if after.slot != NO_SLOT {
            let home = after.home as usize;
            let held = self.cpus[home].lr_value[after.slot as usize];
            if self.lr_value_for(idx) != held || (after.latch && !before.latch) {
                kick.insert(home);
            }
        } else if let Some(o) = owner_after
            && self.deliverable(idx)
            && (!deliverable_before || owner_before != owner_after)
        {
            kick.insert(o);
        }
        kick
    }

    /// `update(idx, |irq| irq.latch = true)` without the general bookkeeping, for the paths
    /// every IPI and edge takes: only the pending latch changes, so the owner stays and the
    /// list-register entry, if any, must be looked at again (a kick for its vCPU, as
    /// [`update`](Self::update) decides for a rising latch). The owner's next flush revisits
    /// just this interrupt. The states `update` normalizes
    /// (an interrupt outside the list registers has no cancelled pending state and no home
    /// unless it is active) already hold.
    fn raise_latch(&mut self, idx: usize) -> VcpuSet {
        let irq = &self.irqs[idx];
        if irq.latch {
            return VcpuSet::EMPTY;
        }
        let in_lr = irq.slot != NO_SLOT;
        let deliverable_before = !in_lr && self.deliverable(idx);
        self.irqs[idx].latch = true;
        self.hot[idx / 64] |= 1 << (idx % 64);
        let owner = self.owner(idx);
        // The owner's list registers gain this interrupt or a new value for its entry; that
        // is all that changed for them.
        if let Some(o) = owner {
            self.set_fresh(o, idx);
        }
        if in_lr {
            return VcpuSet::single(self.irqs[idx].home as usize);
        }
        match owner {
            Some(o) if !deliverable_before && self.deliverable(idx) => VcpuSet::single(o),
            _ => VcpuSet::EMPTY,
        }
    }

    /// After a change that affects every interrupt (`GICD_CTLR` group
    /// enables, the "any" routing target): every vCPU re-flushes, and those
    /// with something deliverable or something in their list registers are
    /// kicked.
    fn global_change(&mut self) -> VcpuSet {
        let mut kick = VcpuSet::EMPTY;
        for v in 0..self.vcpus {
            self.set_dirty(v);
            if self.cpus[v].used > 0 || self.pending_for(v) {
                kick.insert(v);
            }
        }
        kick
    }
}

/// The `route` of a GICv2 SPI whose `GICD_ITARGETSR` byte is `targets` (vCPUs that exist):
/// the lowest-numbered vCPU it names, a deterministic choice where the architecture lets any
/// one of them take the interrupt (the 1-of-N model); none, an affinity no vCPU has, and the
/// SPI stays pending until the guest names one.
fn v2_route(targets: u8) -> u64 {
    const NOBODY: u64 = 0xff << 8; // Aff1 = 255: vCPU i has affinity 0.0.0.i
    if targets == 0 { NOBODY } else { u64::from(targets.trailing_zeros()) }
}

/// The set bits of a word, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        (self.0 != 0).then(|| {
            let b = self.0.trailing_zeros() as usize;
            self.0 &= self.0 - 1;
            b
        })
    }
}
