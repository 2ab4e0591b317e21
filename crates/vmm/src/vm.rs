//! A virtual machine: its RAM and Stage-2 table, its devices, its vCPUs and the flags of its
//! life cycle (which `lifecycle` drives).

use super::bench::IoStamps;
use super::memory::GuestMemory;
use super::nic::NicPort;
use super::scrub::Scrub;
use super::stats::VmStats;
use super::vcpu::{Power, Vcpu, VcpuSlot};
use crate::frames::TablePages;
use crate::sync::{Lock, TicketLock};
use addr::{Ipa, IpaRange};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use stage2::Stage2Table;
use vdev::MmioBus;
use vmconfig::VmSpec;

/// A VM's device work left over from a round that no guest store will repeat
/// (`emulate::virtio_slot`).
#[derive(Default)]
pub struct Backlog(AtomicBool);

impl Backlog {
    pub fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Read on every guest entry and scheduling decision, so without a lock.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn take(&self) -> bool {
        self.0.swap(false, Ordering::Acquire)
    }
}

pub struct Vm {
    pub id: usize,
    pub name: String,
    /// What the VM was built from (images point into the boot package): used again on reset.
    pub(crate) spec: VmSpec<'static>,
    pub(crate) device_tree: Vec<u8>,
    pub memory: GuestMemory,
    /// Kept alive for as long as the VM: VTTBR_EL2 points at its root.
    pub(crate) _stage2: Stage2Table<TablePages>,
    pub vttbr: u64,
    /// CNTVOFF_EL2: the VM's virtual counter starts near zero when it boots.
    pub cntvoff: u64,
    /// MDCR_EL2 while it runs: whether it has the PMU (`el2_regs::mdcr`).
    pub mdcr: u64,
    /// When armhv last saw its virtio notifications and raised its virtio interrupts.
    pub io_stamps: Arc<IoStamps>,
    /// Device work left for the VM's vCPUs to do.
    pub device_backlog: Arc<Backlog>,
    /// A ticket lock, first come first served: other VMs deliver frames into this VM's
    /// devices under it, and with a plain spinlock a VM flooding frames can re-take it before
    /// this VM's own vCPUs, spinning for their UART, get a turn. (The hostile suite's healthy
    /// VM, ~40 heartbeats in 2 s unflooded: 21-28 during a flood with a spinlock, 26-33 with
    /// this, two QEMUs sharing the host's 2 cores; once 6, which failed the suite.)
    pub devices: TicketLock<MmioBus>,
    /// The virtual GIC model; also reached through its MMIO frames on `devices`.
    pub vgic: Lock<vgic::Vgic>,
    /// Which vCPUs' last list-register flush still stands, readable without the vGIC lock.
    pub vgic_clean: Arc<vgic::CleanFlags>,
    /// The size of its GICv3 redistributor window; 0 for a VM with a GICv2, which has none.
    pub gicr_size: u64,
    pub vcpus: Vec<VcpuSlot>,
    /// The physical CPU each vCPU is pinned to; `None`: the scheduler places it.
    pub affinity: Vec<Option<usize>>,
    /// Its weight, cap and real-time server.
    pub sched: vmconfig::VmSched,
    /// Physical devices assigned to the VM, and the MPIDR of the CPU their interrupts go to.
    pub assigned: Vec<AssignedDevice>,
    pub assigned_route: u64,
    /// Where typed console input goes (`None`: the VM has no console device).
    pub console_input: Option<ConsoleInput>,
    /// The VM's network interfaces (virtio-net slots) as their networks see them.
    pub nics: Vec<NicPort>,
    /// A control VM's channel to armhv (`emulate::control_channel`).
    pub control: Option<crate::control_port::ControlPort>,
    pub stats: VmStats,
    /// Zeroing its RAM after a reset or its end, a piece at a time.
    pub scrub: Scrub,
    /// [`STOPPED`], [`RESETTING`] (while SYSTEM_RESET rebuilds the VM: its vCPUs must not be
    /// entered), [`PAUSED`] (its vCPUs stay out of their guests and its devices take nothing
    /// in). One word, so that an exit reads all three at once.
    pub(crate) flags: AtomicU8,
    /// Bumped by every reset, and unique to this life ([`first_generation`]): state a CPU
    /// still holds in its registers is stale once it differs.
    pub(crate) generation: AtomicUsize,
}

/// The generation a new life starts at: far from every earlier life's, so that state a CPU
/// kept from a life that ended is never taken for the new one's, however often either reset.
pub(crate) fn first_generation() -> usize {
    static LIVES: AtomicUsize = AtomicUsize::new(0);
    LIVES.fetch_add(1, Ordering::Relaxed) << 32
}

/// `Vm` values in existence (counted at creation and at drop).
static ALIVE: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn vm_created() {
    ALIVE.fetch_add(1, Ordering::AcqRel);
}

/// `Vm` values not yet dropped.
pub(crate) fn alive() -> usize {
    ALIVE.load(Ordering::Acquire)
}

impl Drop for Vm {
    fn drop(&mut self) {
        ALIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

/// [`Vm::flags`]: the VM has stopped (set once).
pub const STOPPED: u8 = 1;
/// [`Vm::flags`]: a reset is under way.
pub const RESETTING: u8 = 2;
/// [`Vm::flags`]: paused.
pub const PAUSED: u8 = 4;

impl Vm {
    /// Where the VM's Stage-2 sends `ipa`, if anywhere: what a guest access there reaches.
    pub fn stage2_lookup(&self, ipa: Ipa) -> Option<stage2::Translation> {
        self._stage2.lookup(ipa)
    }

    // SeqCst: a vCPU about to enter its guest publishes that it runs and then checks these; a
    // reset, pause or stop sets them and then checks which vCPUs run (`leave_guests`).
    /// [`STOPPED`], [`RESETTING`] and [`PAUSED`], read at once.
    pub fn flags(&self) -> u8 {
        self.flags.load(Ordering::SeqCst)
    }

    /// Sets `flag`; returns whether it was set already.
    pub(crate) fn set(&self, flag: u8) -> bool {
        self.flags.fetch_or(flag, Ordering::SeqCst) & flag != 0
    }

    pub(crate) fn clear(&self, flag: u8) {
        self.flags.fetch_and(!flag, Ordering::SeqCst);
    }

    pub fn is_stopped(&self) -> bool {
        self.flags() & STOPPED != 0
    }

    pub fn is_resetting(&self) -> bool {
        self.flags() & RESETTING != 0
    }

    pub fn is_paused(&self) -> bool {
        self.flags() & PAUSED != 0
    }

    /// Whether its vCPUs may not enter their guests and its devices take nothing in: stopped,
    /// resetting (its RAM is being zeroed) or paused.
    pub fn is_held(&self) -> bool {
        self.flags() != 0
    }

    pub fn generation(&self) -> usize {
        self.generation.load(Ordering::Acquire)
    }

    /// Copies the images and the device tree into RAM (at creation and at every reset).
    pub(crate) fn load_guest(&self) -> Result<(), String> {
        for image in core::iter::once(&self.spec.kernel).chain(self.spec.initrd.as_ref()) {
            if !self.memory.write(image.load, image.bytes) {
                return Err(format!("image at {} does not fit in its RAM", image.load));
            }
        }
        let dt_area = self.spec.fdt_area();
        if self.device_tree.len() as u64 > dt_area.size
            || !self.memory.write(dt_area.start, &self.device_tree)
        {
            return Err(format!(
                "its device tree ({} bytes) does not fit at {}",
                self.device_tree.len(),
                dt_area.start
            ));
        }
        // What was written must reach a guest that starts with its caches off (the zeroed RAM
        // around it already has: `GuestMemory::zero_piece`, `GuestMemory::allocate`).
        for image in core::iter::once(&self.spec.kernel).chain(self.spec.initrd.as_ref()) {
            self.memory.clean_to_poc(image.load, image.bytes.len() as u64);
        }
        self.memory.clean_to_poc(dt_area.start, self.device_tree.len() as u64);
        Ok(())
    }

    /// Puts vCPU 0 at the kernel entry with x0 = the device tree, as the boot protocol requires.
    pub(crate) fn boot_vcpu0(&self, vcpu: &mut Vcpu) {
        vcpu.reset(self.spec.entry.raw(), self.fdt_ipa().raw());
        self.memory.coherency().restart();
        self.vcpus[0].set_power(Power::On);
    }

    /// Where its kernel starts (vCPU 0 after boot and every reset).
    pub fn entry(&self) -> Ipa {
        self.spec.entry
    }

    fn fdt_ipa(&self) -> Ipa {
        self.spec.fdt_area().start
    }
}

/// Where a VM's console input goes.
#[derive(Clone, Copy, Debug)]
pub enum ConsoleInput {
    Uart,
    /// The virtio-console at this slot.
    Virtio(Ipa),
}

/// Why a device may be assigned, as `emulate::passthrough::check_dma` decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaVerdict {
    /// A kind on `passthrough::DMA_FREE`, its node showing no DMA.
    Free,
    /// Not a kind armhv knows, no DMA in its node, and the config says `dma = "none"`.
    Vouched,
    /// The config says `dma = "unprotected"`: the VM may reach all host memory through it.
    Unprotected,
}

/// A physical device assigned to a VM (`emulate::passthrough`), as its device tree describes
/// it.
#[derive(Clone)]
pub struct AssignedDevice {
    pub node_name: &'static str,
    pub compatible: &'static [u8],
    /// Its register window, mapped into the VM at its host address.
    pub reg: IpaRange,
    /// (INTID, device-tree flags) of each of its SPIs.
    pub interrupts: Vec<(u32, u32)>,
    /// The names of its node's properties: what shows whether it masters DMA.
    pub properties: Vec<&'static str>,
    /// Why it may be assigned, as `passthrough::check_dma` found at creation.
    pub dma: DmaVerdict,
}

impl AssignedDevice {
    /// (SPI number, flags) pairs for the guest's device tree.
    pub fn dt_interrupts(&self) -> Vec<(u32, u32)> {
        self.interrupts.iter().map(|&(intid, flags)| (intid - 32, flags)).collect()
    }
}
