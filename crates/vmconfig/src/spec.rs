//! What the hypervisor needs to build one VM: every default resolved, every
//! image in hand. Borrowed, so the decoder can point into the package instead
//! of copying kernels around at boot.

use alloc::vec::Vec;
use core::fmt;

use addr::{Ipa, IpaRange};
use guest_abi::map::GicVersion;

use crate::{DeviceKind, MAX_VCPUS, fdt_area};

/// An image to copy into guest RAM before the VM starts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LoadImage<'a> {
    /// Guest-physical address of the first byte.
    pub load: Ipa,
    /// The bytes to copy.
    pub bytes: &'a [u8],
    /// Bytes of guest RAM the image owns from `load`, at least `bytes.len()`.
    /// An arm64 Linux Image's BSS lies beyond the file; counting it keeps the
    /// initrd from being placed where the kernel will zero its BSS.
    pub mem_size: u64,
}

impl LoadImage<'_> {
    /// The guest RAM the image owns.
    pub fn range(&self) -> IpaRange {
        IpaRange::new(self.load, self.mem_size)
    }

    /// The guest RAM its bytes land in (`/chosen/linux,initrd-end` for an initrd).
    pub fn data_range(&self) -> IpaRange {
        IpaRange::new(self.load, self.bytes.len() as u64)
    }
}

impl fmt::Debug for LoadImage<'_> {
    // The bytes are megabytes of kernel; show where they go instead.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadImage")
            .field("load", &self.load)
            .field("len", &self.bytes.len())
            .field("mem_size", &self.mem_size)
            .finish()
    }
}

/// A virtio block device. A RAM disk (`partition` is `None`) is held whole in
/// host RAM: armhv allocates `capacity` bytes, copies `image` to the start and
/// zeroes the rest. A disk on a partition lives on the machine disk.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DiskSpec<'a> {
    /// The disk's initial contents; empty for a blank disk and for a disk on a
    /// partition.
    pub image: &'a [u8],
    /// Bytes the guest sees: a multiple of [`DISK_SECTOR_SIZE`](crate::DISK_SECTOR_SIZE),
    /// at least `image.len()`, at most [`MAX_DISK_SIZE`](crate::MAX_DISK_SIZE) for a RAM
    /// disk and [`MAX_PARTITION_DISK_SIZE`](crate::MAX_PARTITION_DISK_SIZE) on a partition
    /// (the partition's size when the build tool created it; armhv should still check it
    /// against the partition it finds).
    pub capacity: u64,
    /// The guest may not write it (virtio-blk's `VIRTIO_BLK_F_RO`).
    pub read_only: bool,
    /// The GPT partition of the machine disk that holds it (persistent), by name; `None`: a
    /// RAM disk. A partition's image is written into it by the build tool when it creates the
    /// partition, so `image` is then empty.
    pub partition: Option<&'a str>,
}

impl fmt::Debug for DiskSpec<'_> {
    // The image may be a gigabyte; show its size instead.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskSpec")
            .field("image_len", &self.image.len())
            .field("capacity", &self.capacity)
            .field("read_only", &self.read_only)
            .field("partition", &self.partition)
            .finish()
    }
}

/// A virtio network device, plugged into a virtual network that connects the
/// NICs of every VM naming the same network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicSpec<'a> {
    /// The network's name (the same rules as VM names).
    pub network: &'a str,
    /// A unicast MAC address, unique across all VMs.
    pub mac: [u8; 6],
    /// The MTU the NIC announces (`VIRTIO_NET_F_MTU`), [`MIN_MTU`]..=[`MAX_MTU`]; `None`:
    /// none announced, and the guest assumes Ethernet's [`DEFAULT_MTU`]. Every NIC on one
    /// network has the same one.
    pub mtu: Option<u16>,
}

/// Ethernet's MTU, which a NIC without `mtu` has.
pub const DEFAULT_MTU: u16 = 1500;
/// The smallest MTU a NIC may announce: IPv4's minimum datagram (RFC 791), Linux's too.
pub const MIN_MTU: u16 = 68;
/// The largest: what the 16-bit `mtu` field of virtio-net holds.
pub const MAX_MTU: u16 = u16::MAX;

/// A device on one of a VM's virtio-mmio slots; see [`VmSpec::virtio_devices`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtioDevice<'s, 'a> {
    Net(&'s NicSpec<'a>),
    Block(&'s DiskSpec<'a>),
    Console,
    Rng,
    /// A control VM's channel to armhv (`control = true`): a virtio-console (device ID 3) to
    /// the guest, which tells it from a `virtio-console` in `devices` by its slot, the last.
    Control,
}

/// What a VM does on a guest power event or a crash (`on_poweroff`, `on_reboot`,
/// `on_crash`, as in Xen; Xen's `destroy` is `Stop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    Stop,
    Restart,
}

impl Policy {
    pub const ALL: [Self; 2] = [Self::Stop, Self::Restart];

    /// The name configs use.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Restart => "restart",
        }
    }

    /// The policy a config names (`"stop"` or `"restart"`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A VM's three restart policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policies {
    /// PSCI SYSTEM_OFF, or CPU_OFF of its last vCPU.
    pub on_poweroff: Policy,
    /// PSCI SYSTEM_RESET.
    pub on_reboot: Policy,
    /// armhv stopped it on a fault.
    pub on_crash: Policy,
}

impl Default for Policies {
    /// Xen's defaults, and what armhv did before it had policies: a power-off ends the VM,
    /// a reset restarts it, a crash ends it.
    fn default() -> Self {
        Self { on_poweroff: Policy::Stop, on_reboot: Policy::Restart, on_crash: Policy::Stop }
    }
}

/// One VM as the hypervisor builds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmSpec<'a> {
    pub name: &'a str,
    pub vcpus: u8,
    /// The physical CPU each vCPU runs on, or `None` to let the scheduler
    /// choose. Entries from `vcpus` on are always `None`.
    pub cpu_affinity: [Option<u32>; MAX_VCPUS as usize],
    pub memory: IpaRange,
    /// Where vCPU 0 starts (the others wait for PSCI `CPU_ON`).
    pub entry: Ipa,
    pub kernel: LoadImage<'a>,
    pub initrd: Option<LoadImage<'a>>,
    /// `/chosen/bootargs`.
    pub cmdline: &'a str,
    pub devices: Vec<DeviceKind>,
    /// In config order, at most [`MAX_DISKS`](crate::MAX_DISKS).
    pub disks: Vec<DiskSpec<'a>>,
    /// In config order, at most [`MAX_NICS`](crate::MAX_NICS).
    pub nics: Vec<NicSpec<'a>>,
    /// The physical devices assigned to the VM, at most
    /// [`MAX_PASSTHROUGH`](crate::MAX_PASSTHROUGH). Only their paths' syntax
    /// is checked here; the hypervisor resolves them against the host's tree
    /// and decides from it and their `dma` whether they may be assigned.
    pub passthrough: Vec<Passthrough<'a>>,
    /// The performance monitors the VM sees (`pmu`, default: its own virtual PMU).
    pub pmu: PmuMode,
    /// The interrupt controller the config pins (`gic`); `None`: the host's. Only the host's
    /// version can be given, since the guest drives the hardware's virtual CPU interface, so
    /// the hypervisor refuses the VM at creation when this names the other.
    pub gic: Option<GicVersion>,
    /// Its share of the CPUs under the credit scheduler.
    pub sched: VmSched,
    /// armhv starts it at boot (`autostart`, default true); otherwise it waits, holding no
    /// RAM, for a `start` command. Only these VMs must fit the machine's RAM together.
    pub autostart: bool,
    /// A control VM (`control`, default false): it has a channel to armhv,
    /// [`VirtioDevice::Control`], and may manage the other VMs through it.
    pub control: bool,
    /// What the guest's power-off, reset and crashes do (`on_poweroff`, `on_reboot`, `on_crash`).
    pub policies: Policies,
}

/// Default `weight`: Xen's, so shares read the same as there.
pub const DEFAULT_WEIGHT: u32 = 256;
/// Largest `weight`; 1..=65535 as in Xen.
pub const MAX_WEIGHT: u32 = 65_535;
/// Default `[scheduler] quantum_ms`.
pub const DEFAULT_QUANTUM_MS: u32 = 10;
/// Allowed `[scheduler] quantum_ms`.
pub const QUANTUM_MS: core::ops::RangeInclusive<u32> = 10..=50;
/// Allowed `[vm.realtime] period_us`: from 1 ms (below that the scheduler's own
/// overhead is a large part of the budget) to 1 s.
pub const REALTIME_PERIOD_US: core::ops::RangeInclusive<u32> = 1_000..=1_000_000;
/// Smallest `[vm.realtime] budget_us`: less cannot run even one interrupt handler.
pub const MIN_REALTIME_BUDGET_US: u32 = 100;

/// How the credit scheduler treats one VM (`weight`, `cap`, `[vm.realtime]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmSched {
    /// Relative share against the other VMs.
    pub weight: u32,
    /// Most CPU the VM may use, in percent of one CPU, even when CPUs idle.
    pub cap: Option<u32>,
    /// The VM's interrupts preempt other VMs' vCPUs, within a budget.
    pub realtime: Option<RealTimeSpec>,
}

impl Default for VmSched {
    fn default() -> Self {
        Self { weight: DEFAULT_WEIGHT, cap: None, realtime: None }
    }
}

/// A real-time VM's server: each vCPU runs at most `budget_us` ahead of the
/// others in any window of `period_us`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealTimeSpec {
    pub budget_us: u32,
    pub period_us: u32,
}

/// Machine-wide scheduling settings (the config's `[scheduler]` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedSpec {
    /// Longest a vCPU runs while another of its class waits, in ms.
    pub quantum_ms: u32,
    /// The `[irqdist]` table: profile interrupt streams and move them off saturated CPUs.
    pub irqdist: Option<IrqDistSpec>,
}

impl Default for SchedSpec {
    fn default() -> Self {
        Self { quantum_ms: DEFAULT_QUANTUM_MS, irqdist: None }
    }
}

/// The dynamic virtual interrupt distributor (the config's `[irqdist]` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqDistSpec {
    /// The policy moves streams (profiling runs either way; Ctrl-A d toggles it).
    pub enabled: bool,
    pub spread: Spread,
    /// Keep streams off a CPU where a real-time VM's vCPUs ran at least this percent
    /// (1..=100) of the profiling window; `None`: real-time jobs keep no CPU free of them.
    pub avoid_realtime_pct: Option<u8>,
}

impl Default for IrqDistSpec {
    fn default() -> Self {
        Self { enabled: true, spread: Spread::One, avoid_realtime_pct: None }
    }
}

/// Where a redirected stream goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// To the VM's vCPU on the least-utilized other CPU.
    One,
    /// In turn to the VM's vCPUs on every other CPU.
    All,
}

impl<'a> VmSpec<'a> {
    /// Where the hypervisor writes the device tree (its address goes in `x0`).
    pub fn fdt_area(&self) -> IpaRange {
        fdt_area(self.memory)
    }

    /// The affinity of the VM's vCPUs only.
    pub fn affinity(&self) -> &[Option<u32>] {
        let n = usize::from(self.vcpus).min(self.cpu_affinity.len());
        &self.cpu_affinity[..n]
    }

    /// The VM's virtio devices in slot order: the NICs, then the disks (each
    /// in config order), then virtio-console, then virtio-rng, whatever their
    /// order in `devices`, then a control VM's channel. Slot `n` is at IPA `guest_abi::map::virtio_slot(n)`
    /// with SPI `virtio_spi(n)` (docs/guest-abi.md); the checks keep `n` below
    /// [`MAX_VIRTIO_SLOTS`](crate::MAX_VIRTIO_SLOTS).
    ///
    /// One fixed order means a guest's `/dev/vda` or `eth0` does not move when
    /// an unrelated device is added to its config.
    pub fn virtio_devices(&self) -> impl Iterator<Item = VirtioDevice<'_, 'a>> {
        let has = |kind| self.devices.contains(&kind);
        let nets = self.nics.iter().map(VirtioDevice::Net);
        let blocks = self.disks.iter().map(VirtioDevice::Block);
        let console = has(DeviceKind::VirtioConsole).then_some(VirtioDevice::Console);
        let rng = has(DeviceKind::VirtioRng).then_some(VirtioDevice::Rng);
        let control = self.control.then_some(VirtioDevice::Control);
        nets.chain(blocks).chain(console).chain(rng).chain(control)
    }

    /// The device that receives what is typed on the VM's console: the
    /// virtio-console when the kernel's preferred console (the last
    /// `console=` of the command line, as Linux decides) is `hvc*`, else the
    /// PL011, else the virtio-console; `None` without either.
    pub fn input_console(&self) -> Option<DeviceKind> {
        let has = |kind| self.devices.contains(&kind).then_some(kind);
        let mut preferred =
            self.cmdline.split_whitespace().filter_map(|w| w.strip_prefix("console="));
        let wants_hvc = preferred.next_back().is_some_and(|c| c.starts_with("hvc"));
        let uart = has(DeviceKind::Pl011);
        let hvc = has(DeviceKind::VirtioConsole);
        if wants_hvc { hvc.or(uart) } else { uart.or(hvc) }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::vec;

    /// A minimal valid spec: 32 MiB at the default base, kernel at +512 KiB.
    pub(crate) fn spec<'a>(name: &'a str, kernel: &'a [u8]) -> VmSpec<'a> {
        VmSpec {
            name,
            vcpus: 1,
            cpu_affinity: [None; MAX_VCPUS as usize],
            memory: IpaRange::new(Ipa(0x4000_0000), 32 << 20),
            entry: Ipa(0x4008_0000),
            kernel: LoadImage {
                load: Ipa(0x4008_0000),
                bytes: kernel,
                mem_size: kernel.len() as u64,
            },
            initrd: None,
            cmdline: "",
            devices: vec![DeviceKind::Pl011],
            disks: Vec::new(),
            nics: Vec::new(),
            passthrough: Vec::new(),
            pmu: PmuMode::Virtual,
            gic: None,
            sched: VmSched::default(),
            autostart: true,
            control: false,
            policies: Policies::default(),
        }
    }

    #[test]
    fn accessors() {
        let k = [1u8; 16];
        let mut s = spec("a", &k);
        s.vcpus = 2;
        s.cpu_affinity[0] = Some(3);
        assert_eq!(s.affinity(), &[Some(3), None]);
        assert_eq!(s.fdt_area().start, Ipa(0x41e0_0000));
        s.kernel.mem_size = 64;
        assert_eq!(s.kernel.range().size, 64);
        assert_eq!(s.kernel.data_range().size, 16);
        assert!(alloc::format!("{:?}", s.kernel).contains("len: 16"));
    }

    #[test]
    fn virtio_slot_order() {
        let k = [1u8; 16];
        let mut s = spec("a", &k);
        assert_eq!(s.virtio_devices().count(), 0);
        s.devices = vec![DeviceKind::VirtioRng, DeviceKind::Pl011, DeviceKind::VirtioConsole];
        let disk = DiskSpec { image: &k, capacity: 512, read_only: true, partition: None };
        s.disks = vec![disk];
        let nic = |n| NicSpec { network: "lan0", mac: [0x52, 0x54, 0, 0, 0, n], mtu: None };
        s.nics = vec![nic(0), nic(1)];
        let slots: Vec<_> = s.virtio_devices().collect();
        assert_eq!(
            slots,
            [
                VirtioDevice::Net(&nic(0)),
                VirtioDevice::Net(&nic(1)),
                VirtioDevice::Block(&disk),
                VirtioDevice::Console,
                VirtioDevice::Rng,
            ]
        );
        // A control VM's channel comes after every other device.
        s.control = true;
        assert_eq!(s.virtio_devices().nth(5), Some(VirtioDevice::Control));
        assert_eq!(s.virtio_devices().count(), 6);
        s.devices.clear();
        s.disks.clear();
        s.nics.clear();
        assert_eq!(s.virtio_devices().collect::<Vec<_>>(), [VirtioDevice::Control]);
        assert_eq!(
            alloc::format!("{disk:?}"),
            "DiskSpec { image_len: 16, capacity: 512, read_only: true, partition: None }"
        );
    }

    #[test]
    fn policy_names_and_defaults() {
        let defaults = Policies::default();
        assert_eq!(
            (defaults.on_poweroff, defaults.on_reboot, defaults.on_crash),
            (Policy::Stop, Policy::Restart, Policy::Stop)
        );
        for p in Policy::ALL {
            assert_eq!(Policy::from_name(p.name()), Some(p));
        }
        // Xen's other names are not ours.
        for other in ["destroy", "reboot", "Stop", ""] {
            assert_eq!(Policy::from_name(other), None, "{other:?}");
        }
    }

    #[test]
    fn input_console_follows_the_preferred_console() {
        use DeviceKind::{Pl011, VirtioConsole};
        let k = [1u8; 16];
        let mut s = spec("a", &k);
        for (devices, cmdline, want) in [
            (vec![Pl011], "", Some(Pl011)),
            (vec![Pl011, VirtioConsole], "console=ttyAMA0", Some(Pl011)),
            (vec![Pl011, VirtioConsole], "console=hvc0", Some(VirtioConsole)),
            (vec![Pl011, VirtioConsole], "console=hvc0 console=ttyAMA0", Some(Pl011)),
            (vec![Pl011, VirtioConsole], "console=ttyAMA0 quiet console=hvc0", Some(VirtioConsole)),
            (vec![Pl011], "console=hvc0", Some(Pl011)),
            (vec![VirtioConsole], "console=ttyAMA0", Some(VirtioConsole)),
            (vec![DeviceKind::VirtioRng], "", None),
        ] {
            s.devices = devices;
            s.cmdline = cmdline;
            assert_eq!(s.input_console(), want, "{:?} {cmdline:?}", s.devices);
        }
    }
}

/// A physical device assigned to a VM: `passthrough = ["/path"]`, or the table
/// form `{ path = "/path", dma = "none" }` that also says what the device does
/// with DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passthrough<'a> {
    /// The device's node in the host's device tree.
    pub path: &'a str,
    pub dma: PassthroughDma,
}

/// A bare path: nothing said of DMA (the string form).
impl<'a> From<&'a str> for Passthrough<'a> {
    fn from(path: &'a str) -> Self {
        Passthrough { path, dma: PassthroughDma::Unstated }
    }
}

impl AsRef<str> for Passthrough<'_> {
    fn as_ref(&self) -> &str {
        self.path
    }
}

/// The performance monitors a VM sees (`pmu` in its config; `configs/README.md`, "PMU").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PmuMode {
    /// A PMU of each vCPU's own (`pmu = "virtual"`, the default): its counters and their
    /// configuration move with the vCPU, count only its guest's EL1 and EL0, and overflow
    /// into its PMU PPI.
    #[default]
    Virtual,
    /// The physical CPU's PMU, read and programmed without trapping and counting at EL2 too
    /// (`pmu = "raw"`, the benchmarks' path lengths); what else runs on that CPU counts in it.
    Raw,
    /// No PMU (`pmu = "off"`): its ID fields read 0 and its registers read 0 and ignore writes.
    Off,
}

/// What the config says of an assigned device's DMA. armhv has no IOMMU
/// support: a device that masters DMA, driven by the guest, reads and writes
/// any host memory (armhv's and every other VM's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PassthroughDma {
    /// Nothing (the string form): the device is assigned only if armhv knows
    /// its kind to do no DMA and its node shows none.
    #[default]
    Unstated,
    /// `dma = "none"`: the operator vouches that the device masters no DMA, for
    /// a kind armhv does not know. Still refused if its node shows DMA.
    None,
    /// `dma = "unprotected"`: assigned even if it can master DMA, accepting
    /// that the VM can then reach all host memory; armhv warns at every boot.
    Unprotected,
}

impl PassthroughDma {
    /// Every value, in package-code order.
    pub const ALL: [PassthroughDma; 3] =
        [PassthroughDma::Unstated, PassthroughDma::None, PassthroughDma::Unprotected];

    /// The config's word (`Unstated` has none: the key is left out).
    pub fn name(self) -> &'static str {
        match self {
            PassthroughDma::Unstated => "(unstated)",
            PassthroughDma::None => "none",
            PassthroughDma::Unprotected => "unprotected",
        }
    }

    /// Its byte in the package.
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }
}
