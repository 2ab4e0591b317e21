//! The physical GIC, owned by armhv at EL2: a GICv3 ([`v3`]) or a GICv2 with the
//! virtualization extensions ([`v2`]), whichever the device tree describes. The rest of armhv
//! calls the functions here, which pick the version's driver; [`vif`] does the same for the
//! virtual CPU interface's control registers (list registers and friends).
//!
//! Every physical interrupt is taken at EL2 (HCR_EL2.IMO). armhv never unmasks interrupts while
//! it runs: they arrive as guest exits, or wake an idle CPU from WFI, and are then acknowledged
//! here by polling the CPU interface.
//!
//! Completion is split (EOImode 1): a priority drop plus a deactivation. armhv does both for
//! its own interrupts; for a device's interrupt forwarded to a guest it only drops the
//! priority, and the guest's completion of the hardware-linked virtual interrupt deactivates
//! the physical one.

pub mod v2;
mod v3;
pub mod vif;

use crate::platform::{GicFrames, Range};
use core::sync::atomic::{AtomicBool, Ordering};
use credit::CpuSet;
use guest_abi::map::GicVersion;

/// The SGI armhv kicks other CPUs with and the PPIs it uses: the monitor's numbers.
pub use vmm::arch::{PPI_HYP_TIMER, PPI_MAINTENANCE, PPI_PMU, PPI_VIRT_TIMER, SGI_KICK};

/// Priority of every interrupt armhv enables (all equal: no nesting at EL2).
const PRIORITY: u8 = 0x80;

/// The GIC is a GICv2: set once at boot, before any other CPU starts, and read on every call.
static IS_V2: AtomicBool = AtomicBool::new(false);

#[inline(always)]
fn is_v2() -> bool {
    IS_V2.load(Ordering::Relaxed)
}

/// The host's GIC version, for the VMs' virtual GICs (which follow it).
pub fn version() -> GicVersion {
    if is_v2() { GicVersion::V2 } else { GicVersion::V3 }
}

/// Initializes the GIC the device tree describes (boot CPU, once, before the others start).
/// `cpus` are the MPIDR affinities of the logical CPUs, `boot` the index of this one.
///
/// # Safety
/// Every frame in `frames` is the GIC's, from the device tree, identity-mapped as device
/// memory, and nothing else drives the GIC.
pub unsafe fn init(frames: GicFrames, cpus: &[u64], boot: usize) -> Result<(), Error> {
    match frames {
        // SAFETY: forwarded from the caller.
        GicFrames::V3 { dist, redist } => unsafe { v3::init(dist, redist, cpus, boot) },
        GicFrames::V2 { dist, cpu, hyp, vcpu } => {
            let (Some(hyp), Some(_)) = (hyp, vcpu) else {
                return Err(Error::NoVirtualizationExtensions);
            };
            // SAFETY: forwarded from the caller.
            unsafe { v2::init(dist, cpu, hyp, cpus) }?;
            IS_V2.store(true, Ordering::Release);
            Ok(())
        }
    }
}

/// The virtual CPU interface the VMs' GICC window maps (GICv2 only): GICV's frame.
pub fn virtual_cpu_interface(frames: &GicFrames) -> Option<Range> {
    match *frames {
        GicFrames::V2 { vcpu, .. } => vcpu,
        GicFrames::V3 { .. } => None,
    }
}

/// What the VMs' virtual GICs are built on.
pub fn host(frames: &GicFrames) -> vmm::emulate::vgic::HostGic {
    vmm::emulate::vgic::HostGic {
        version: version(),
        virtual_cpu_interface: virtual_cpu_interface(frames).map(|r| r.start),
    }
}

/// Why the GIC could not be set up.
#[derive(Debug)]
pub enum Error {
    Zero,
    NotGicV3,
    /// A CPU (its MPIDR) without a redistributor in the region.
    NoRedistributor(u64),
    /// A GICv2 without GICH and GICV in its `reg`.
    NoVirtualizationExtensions,
    /// A GICv2 with more CPUs than its 8-bit target lists can name.
    TooManyCpus(usize),
    /// A GICv2 CPU interface frame too small to hold GICC_DIR.
    SmallCpuInterface(u64),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Zero => f.write_str("the device tree puts the GIC at address 0"),
            Self::NotGicV3 => {
                f.write_str("the GIC redistributor region does not look like a GICv3's")
            }
            Self::NoRedistributor(mpidr) => write!(
                f,
                "no redistributor in the device tree's GICR region names CPU {mpidr:#x} \
                 (GICR_TYPER affinity): armhv supports one redistributor region; check the \
                 GIC node's reg and #redistributor-regions"
            ),
            Self::NoVirtualizationExtensions => f.write_str(
                "the GICv2 in the device tree has no virtualization extensions (its reg lists \
                 no GICH and GICV frames): armhv needs them; on QEMU use virtualization=on",
            ),
            Self::TooManyCpus(n) => write!(
                f,
                "{n} CPUs with a GICv2, which can name at most 8: start QEMU with -smp 8 or \
                 fewer, or use gic-version=3"
            ),
            Self::SmallCpuInterface(size) => write!(
                f,
                "the GICv2 CPU interface frame is {size:#x} bytes, too small for GICC_DIR at \
                 0x1000: check the GIC node's second reg entry"
            ),
        }
    }
}

/// Per-CPU setup, on the CPU itself: its CPU interface on, armhv's SGI and PPIs enabled.
pub fn init_cpu(cpu: usize) {
    if is_v2() { v2::init_cpu(cpu) } else { v3::init_cpu(cpu) }
}

/// The next pending physical interrupt, acknowledged, if any: its INTID.
#[inline]
pub fn acknowledge() -> Option<u32> {
    if is_v2() { v2::acknowledge() } else { v3::acknowledge() }
}

/// Completes an acknowledged interrupt of armhv's own: drops its priority and deactivates it.
#[inline]
pub fn end(intid: u32) {
    if is_v2() { v2::end(intid) } else { v3::end(intid) }
}

/// Drops the priority of an acknowledged interrupt but leaves it active: for one forwarded to
/// a guest, which deactivates it.
pub fn drop_priority(intid: u32) {
    if is_v2() { v2::drop_priority(intid) } else { v3::drop_priority(intid) }
}

/// Deactivates an SPI at the distributor, from any CPU: for one left active by a guest that
/// stopped or reset before completing it.
pub fn deactivate_spi(intid: u32) {
    if is_v2() { v2::deactivate_spi(intid) } else { v3::deactivate_spi(intid) }
}

/// Whether SPI `intid` is pending at the distributor: for a level-sensitive one, whether its
/// line is high, whether or not it is active.
pub fn spi_pending(intid: u32) -> bool {
    if is_v2() { v2::spi_pending(intid) } else { v3::spi_pending(intid) }
}

/// Routes SPI `intid` to the CPU with affinity `mpidr`, level- or edge-triggered, and enables
/// it.
pub fn route_spi(intid: u32, mpidr: u64, level: bool) -> Result<(), &'static str> {
    if is_v2() { v2::route_spi(intid, mpidr, level) } else { v3::route_spi(intid, mpidr, level) }
}

/// Disables SPI `intid` at the distributor.
pub fn disable_spi(intid: u32) {
    if is_v2() { v2::disable_spi(intid) } else { v3::disable_spi(intid) }
}

/// Sends the kick SGI to the physical CPUs in `cpus`.
#[inline]
pub fn kick(cpus: CpuSet) {
    if is_v2() { v2::kick(cpus) } else { v3::kick(cpus) }
}

/// Enables or disables PPI `ppi` (an INTID) of CPU `cpu`, which is the calling CPU (a GICv2
/// banks a CPU's PPIs at the distributor, where only that CPU reaches them).
#[inline]
pub fn set_local_ppi(cpu: usize, ppi: u32, enable: bool) {
    if is_v2() { v2::set_local_ppi(ppi, enable) } else { v3::set_local_ppi(cpu, ppi, enable) }
}
