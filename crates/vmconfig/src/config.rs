//! Reading `configs/*.toml` (host only).
//!
//! The schema is walked by hand over `toml`'s spanned document instead of
//! derived with serde, for the error messages: each names the file, the line,
//! the full key path (`vm[1].memory_size`) and the fix, and unknown keys list
//! the allowed ones. See `configs/README.md` for the format.

use std::borrow::ToOwned;
use std::fmt;
use std::format;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

use addr::{Ipa, IpaRange};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::image::{ARM64_HEADER_LEN, Arm64Header, ImageFacts, InitrdFacts, Placement, resolve};
use crate::rules::{
    RamClaim, Violation, check_affinity_len, check_cmdline, check_count, check_cpu, check_devices,
    check_disk, check_image_size, check_memory, check_name, check_network, check_nic,
    check_nics_across_vms, check_passthrough, check_sched, check_scheduler, check_table_count,
    check_total_memory, check_unique_names, check_unique_partitions, check_unique_passthrough,
    check_vcpus, check_virtio_slots, check_vm, unusable_mtu,
};
use crate::spec::{
    DiskSpec, IrqDistSpec, LoadImage, NicSpec, Passthrough, PassthroughDma, PmuMode, Policies,
    Policy, RealTimeSpec, SchedSpec, Spread, VmSched, VmSpec,
};
use crate::{
    DEFAULT_MEMORY_BASE, DISK_SECTOR_SIZE, DeviceKind, GicVersion, MAX_DISKS, MAX_NICS, MAX_VCPUS,
    Machine, parse_size,
};

/// Keys a `[[vm]]` table may have, in the order the docs list them.
const VM_KEYS: &[&str] = &[
    "name",
    "vcpus",
    "cpu_affinity",
    "memory_base",
    "memory_size",
    "kernel",
    "kernel_load",
    "entry",
    "initrd",
    "initrd_load",
    "cmdline",
    "devices",
    "disk",
    "nic",
    "passthrough",
    "pmu",
    "gic",
    "weight",
    "cap",
    "autostart",
    "control",
    "on_poweroff",
    "on_reboot",
    "on_crash",
    "realtime",
];
/// Keys the `[vm.realtime]` table may have.
const REALTIME_KEYS: &[&str] = &["budget_us", "period_us"];
/// Keys the top-level `[scheduler]` table may have.
const SCHEDULER_KEYS: &[&str] = &["quantum_ms"];
/// Keys the top-level `[irqdist]` table may have.
const IRQDIST_KEYS: &[&str] = &["enabled", "spread", "avoid_realtime_pct"];
/// Keys a `[[vm.disk]]` table may have.
const DISK_KEYS: &[&str] = &["image", "size", "read_only", "partition"];
/// Keys a `[[vm.nic]]` table may have.
const NIC_KEYS: &[&str] = &["network", "mac", "mtu"];
/// Keys a passthrough entry's table (`[[vm.passthrough]]` or an inline table) may have.
const PASSTHROUGH_KEYS: &[&str] = &["path", "dma"];
/// Keys a top-level `[[network]]` table may have.
const NETWORK_KEYS: &[&str] = &["name", "uplink"];

/// Names after `@` are crate names under `guests/`; keeping them to this
/// alphabet keeps them from being paths.
const MAX_GUEST_NAME_LEN: usize = 64;

/// Where an image comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageRef {
    /// `"@name"`: a guest this project builds (`guests/<name>`); the build
    /// tool builds it and supplies the bytes.
    Built(String),
    /// Any other string: a file, already resolved against the config file's
    /// directory, and known to exist when the config was loaded.
    Path(PathBuf),
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageRef::Built(name) => write!(f, "@{name}"),
            ImageRef::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

/// One `[[vm]]` table, with defaults that need no image filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmConfig {
    pub name: String,
    pub vcpus: u8,
    /// The physical CPU of each vCPU (`len == vcpus`), or `None` to let the
    /// scheduler place them.
    pub cpu_affinity: Option<Vec<u32>>,
    pub memory: IpaRange,
    pub kernel: ImageRef,
    /// `None`: RAM base + `text_offset` for an arm64 Linux Image, else RAM
    /// base + 0x80000 (decided in [`Config::spec`], once the bytes are known).
    pub kernel_load: Option<Ipa>,
    /// `None`: the kernel's load address.
    pub entry: Option<Ipa>,
    pub initrd: Option<ImageRef>,
    /// `None`: as high as the initrd fits below the device tree.
    pub initrd_load: Option<Ipa>,
    pub cmdline: String,
    pub devices: Vec<DeviceKind>,
    pub disks: Vec<DiskConfig>,
    pub nics: Vec<NicConfig>,
    /// Physical devices assigned to the VM.
    pub passthrough: Vec<PassthroughConfig>,
    /// The performance monitors the VM sees (`pmu`).
    pub pmu: PmuMode,
    /// The interrupt controller the VM needs (`gic`); `None`: the host's.
    pub gic: Option<GicVersion>,
    /// `weight`, `cap` and `[vm.realtime]`.
    pub sched: VmSched,
    /// Started at boot (`autostart`, default true).
    pub autostart: bool,
    /// A control VM (`control`, default false).
    pub control: bool,
    /// `on_poweroff`, `on_reboot`, `on_crash`.
    pub policies: Policies,
}

/// One `passthrough` entry: a host device-tree path, and what the config says
/// of the device's DMA (only the table form can say something).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassthroughConfig {
    pub path: String,
    pub dma: PassthroughDma,
}

impl AsRef<str> for PassthroughConfig {
    fn as_ref(&self) -> &str {
        &self.path
    }
}

/// One `[[vm.disk]]` table; at least one of `image` and `size` is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskConfig {
    /// The initial contents: a file, resolved against the config file's
    /// directory and known to exist (and not be empty) when it was loaded.
    /// For a disk on a partition, written into the partition once, when the
    /// build tool creates it.
    pub image: Option<PathBuf>,
    /// The capacity in bytes; `None`: the image's length rounded up to a
    /// 512-byte sector.
    pub size: Option<u64>,
    pub read_only: bool,
    /// The GPT partition of the machine disk that holds the disk (persistent);
    /// `None`: a RAM disk.
    pub partition: Option<String>,
}

/// A disk on a partition of the machine disk, as the build tool lays it out
/// ([`Config::partition_disks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionDisk<'a> {
    /// Its VM's index and its index among the VM's disks (`vm[vm].disk[disk]`).
    pub vm: usize,
    pub disk: usize,
    /// The GPT partition's name, unique across the config.
    pub name: &'a str,
    /// Bytes: the partition's size, a multiple of 512.
    pub capacity: u64,
    /// Written into the partition when the build tool creates it, never again.
    pub image: Option<&'a Path>,
    pub read_only: bool,
}

/// One `[[vm.nic]]` table, with the default MAC filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicConfig {
    pub network: String,
    pub mac: [u8; 6],
    pub mtu: Option<u16>,
}

/// A disk's capacity: `size` if given, else its image rounded up to a sector.
fn disk_capacity(size: Option<u64>, image_len: u64) -> u64 {
    size.unwrap_or_else(|| image_len.div_ceil(DISK_SECTOR_SIZE).saturating_mul(DISK_SECTOR_SIZE))
}

/// The MAC of a NIC that sets none: locally administered (0x52 has bit 1
/// set), unicast, and unique per (VM, NIC) because both indices are small.
fn default_mac(vm: usize, nic: usize) -> [u8; 6] {
    [0x52, 0x54, 0x00, 0x00, vm as u8, nic as u8]
}

/// `"52:54:00:12:34:56"`: six two-digit hex numbers (either case) joined by `:`.
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// One top-level `[[network]]` table: settings of a network the VMs' NICs name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkConfig {
    pub name: String,
    /// The machine's own NIC is the network's uplink: frames for addresses that are not the
    /// VMs' go out through it, and what arrives on it goes to the VMs.
    pub uplink: bool,
}

/// A validated config file.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file, as the caller named it (errors quote it).
    pub path: PathBuf,
    /// The machine it was validated for.
    pub machine: Machine,
    /// The `[scheduler]` table, defaults filled in.
    pub scheduler: SchedSpec,
    pub vms: Vec<VmConfig>,
    /// The `[[network]]` tables.
    pub networks: Vec<NetworkConfig>,
    /// Source lines of each VM's keys, for errors found after loading.
    lines: Vec<KeyLines>,
    /// Source lines of each `[[network]]` table's keys.
    network_lines: Vec<KeyLines>,
}

/// A config that cannot be used, and what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based line of the offending key (or table), when there is one.
    pub line: Option<usize>,
    /// The key path, e.g. `vm[1].memory_size`.
    pub key: Option<String>,
    /// What is wrong, then the fix.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Reads and validates a config file for `machine`.
pub fn load(path: &Path, machine: &Machine) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        path: path.to_owned(),
        line: None,
        key: None,
        message: format!("cannot read the config file: {e}"),
    })?;
    parse(&text, path, machine)
}

/// Validates config text as if read from `origin`: relative image paths are
/// resolved against `origin`'s directory and must exist.
pub fn parse(text: &str, origin: &Path, machine: &Machine) -> Result<Config, ConfigError> {
    let cx = Cx { text, path: origin, dir: origin.parent().unwrap_or(Path::new("")) };
    let doc = DeTable::parse(text).map_err(|e| ConfigError {
        path: origin.to_owned(),
        line: e.span().map(|s| cx.line(s.start)),
        key: None,
        message: format!("invalid TOML: {}", e.message()),
    })?;
    let doc = doc.get_ref();

    let mut top: Vec<_> = doc.iter().collect();
    top.sort_by_key(|(k, _)| k.span().start);
    let mut vm_value = None;
    let mut scheduler = SchedSpec::default();
    let (mut networks, mut network_lines) = (Vec::new(), Vec::new());
    for (key, value) in &top {
        match key.get_ref().as_ref() {
            "vm" => vm_value = Some(value),
            "network" => (networks, network_lines) = parse_networks(&cx, value)?,
            "scheduler" => scheduler.quantum_ms = parse_scheduler(&cx, value)?.quantum_ms,
            "irqdist" => scheduler.irqdist = Some(parse_irqdist(&cx, value)?),
            _ => {
                return Err(cx.err(
                    key.span().start,
                    key.get_ref().to_string(),
                    "unknown top-level key; allowed are [[vm]], [[network]], [scheduler] and \
                     [irqdist] (the machine's RAM and CPUs come from the build tool, not the file)"
                        .to_owned(),
                ));
            }
        }
    }

    let tables = match vm_value {
        None => Vec::new(),
        Some(value) => vm_tables(&cx, value)?,
    };
    check_count(tables.len()).map_err(|v| cx.violation(v, None))?;

    let mut vms = Vec::with_capacity(tables.len());
    let mut lines = Vec::with_capacity(tables.len());
    for (i, (span_start, table)) in tables.iter().enumerate() {
        let mut keys = KeyLines { table: cx.line(*span_start), keys: Vec::new() };
        vms.push(parse_vm(&cx, i, table, &mut keys)?);
        lines.push(keys);
    }

    let config = Config {
        path: origin.to_owned(),
        machine: *machine,
        scheduler,
        vms,
        networks,
        lines,
        network_lines,
    };
    config.check()?;
    Ok(config)
}

impl Config {
    /// The rules that need no image bytes; images named by path are probed
    /// for size and header.
    fn check(&self) -> Result<(), ConfigError> {
        let m = &self.machine;
        let mut disk_bytes = Vec::with_capacity(self.vms.len());
        for (i, vm) in self.vms.iter().enumerate() {
            let v = |r: Result<(), Violation>| r.map_err(|v| self.error(v));
            v(check_name(i, &vm.name))?;
            v(check_vcpus(i, u64::from(vm.vcpus)))?;
            if let Some(cpus) = &vm.cpu_affinity {
                v(check_affinity_len(i, cpus.len(), vm.vcpus))?;
                for &cpu in cpus {
                    v(check_cpu(i, u64::from(cpu), m))?;
                }
            }
            v(check_memory(i, vm.memory, m))?;
            v(check_cmdline(i, &vm.cmdline))?;
            v(check_devices(i, &vm.devices))?;
            v(check_table_count(i, "disk", vm.disks.len(), MAX_DISKS))?;
            let mut disks_total = 0u64;
            for (j, disk) in vm.disks.iter().enumerate() {
                let image_len = self.disk_image_len(i, j)?;
                let capacity = disk_capacity(disk.size, image_len);
                v(check_disk(i, j, image_len, capacity, disk.partition.as_deref()))?;
                // Only a RAM disk takes host RAM.
                if disk.partition.is_none() {
                    disks_total = disks_total.saturating_add(capacity);
                }
            }
            disk_bytes.push(disks_total);
            v(check_table_count(i, "nic", vm.nics.len(), MAX_NICS))?;
            for (j, nic) in vm.nics.iter().enumerate() {
                v(check_nic(i, j, &nic.network, nic.mac, nic.mtu))?;
            }
            v(check_passthrough(i, &vm.passthrough))?;
            v(check_sched(i, &vm.sched, m))?;
            v(check_virtio_slots(i, vm.nics.len(), vm.disks.len(), &vm.devices, vm.control))?;
            let kernel = self.probe(i, "kernel", &vm.kernel)?;
            let initrd = match &vm.initrd {
                None => InitrdFacts::None,
                Some(r) => match self.probe(i, "initrd", r)? {
                    Some(facts) => InitrdFacts::Len(facts.len),
                    None => InitrdFacts::Unknown,
                },
            };
            v(resolve(i, &placement(vm), kernel, initrd).map(|_| ()))?;
        }
        let v = |r: Result<(), Violation>| r.map_err(|v| self.error(v));
        let names: Vec<&str> = self.vms.iter().map(|vm| vm.name.as_str()).collect();
        v(check_unique_names(names.iter().copied()))?;
        let nics = self.vms.iter().enumerate().flat_map(|(i, vm)| {
            let nics = vm.nics.iter().enumerate();
            nics.map(move |(j, nic)| (i, j, nic.network.as_str(), nic.mac, nic.mtu))
        });
        v(check_nics_across_vms(&names, nics.clone()))?;
        let nics: Vec<_> = nics.map(|(i, j, network, _, mtu)| (i, j, network, mtu)).collect();
        for (k, net) in self.networks.iter().enumerate() {
            v(check_network(k, &net.name, net.uplink, &nics))?;
            let earlier = &self.networks[..k];
            if let Some(j) = earlier.iter().position(|n| n.name == net.name) {
                return Err(self.error(Violation::top(
                    "network",
                    k,
                    "name",
                    format!(
                        "network {:?} is declared by network[{j}] already; merge the two tables",
                        net.name
                    ),
                )));
            }
            if let Some(j) = earlier.iter().position(|n| n.uplink).filter(|_| net.uplink) {
                return Err(self.error(Violation::top(
                    "network",
                    k,
                    "uplink",
                    format!(
                        "network[{j}] ({:?}) has the uplink already, and the machine has one NIC \
                         to give; set uplink = true on one network only",
                        self.networks[j].name
                    ),
                )));
            }
        }
        let paths: Vec<_> = self
            .vms
            .iter()
            .enumerate()
            .flat_map(|(i, vm)| vm.passthrough.iter().map(move |p| (i, p.path.as_str())))
            .collect();
        v(check_unique_passthrough(&names, &paths))?;
        let partitions: Vec<_> = self
            .vms
            .iter()
            .enumerate()
            .flat_map(|(i, vm)| {
                let disks = vm.disks.iter().enumerate();
                disks.filter_map(move |(j, d)| d.partition.as_deref().map(|name| (i, j, name)))
            })
            .collect();
        v(check_unique_partitions(&names, &partitions))?;
        let claims: Vec<_> = self
            .vms
            .iter()
            .zip(disk_bytes)
            .map(|(vm, disks)| RamClaim { ram: vm.memory.size, disks, autostart: vm.autostart })
            .collect();
        v(check_total_memory(&names, &claims, &self.machine))
    }

    /// The length of disk `j` of VM `i`'s image file (0 without one), which
    /// must exist, be a regular file and not be empty.
    fn disk_image_len(&self, i: usize, j: usize) -> Result<u64, ConfigError> {
        match &self.vms[i].disks[j].image {
            None => Ok(0),
            Some(path) => self.file_len(
                |message| self.error(Violation::in_table(i, "disk", j, "image", message)),
                "image",
                path,
            ),
        }
    }

    /// The disks on partitions of the machine disk, in file order: what the
    /// build tool lays the machine disk out for. A capacity left to the image
    /// is the image file's length now, rounded up to a sector.
    pub fn partition_disks(&self) -> Result<Vec<PartitionDisk<'_>>, ConfigError> {
        let mut out = Vec::new();
        for (i, vm) in self.vms.iter().enumerate() {
            for (j, disk) in vm.disks.iter().enumerate() {
                let Some(name) = disk.partition.as_deref() else { continue };
                let image_len = self.disk_image_len(i, j)?;
                let capacity = disk_capacity(disk.size, image_len);
                check_disk(i, j, image_len, capacity, Some(name)).map_err(|v| self.error(v))?;
                out.push(PartitionDisk {
                    vm: i,
                    disk: j,
                    name,
                    capacity,
                    image: disk.image.as_deref(),
                    read_only: disk.read_only,
                });
            }
        }
        Ok(out)
    }

    /// An error about `key` of disk `disk` of VM `vm` (e.g. found while laying
    /// out the machine disk), naming this file and the key's line.
    pub fn disk_error(
        &self,
        vm: usize,
        disk: usize,
        key: &'static str,
        message: String,
    ) -> ConfigError {
        self.error(Violation::in_table(vm, "disk", disk, key, message))
    }

    /// The length of an image file, which must exist, be a regular file and
    /// not be empty; `fail` turns a message into an error at the right key.
    fn file_len(
        &self,
        fail: impl Fn(String) -> ConfigError,
        key: &str,
        path: &Path,
    ) -> Result<u64, ConfigError> {
        // `image` is a disk's, always a file; kernels and initrds may be built.
        let guest_hint = match key {
            "image" => "",
            _ => " or write \"@name\" for a guest built by this project",
        };
        let meta = std::fs::metadata(path).map_err(|e| {
            fail(format!(
                "image file {} cannot be opened ({e}); fix the path (relative paths are \
                 relative to the config file){guest_hint}",
                path.display()
            ))
        })?;
        if !meta.is_file() {
            return Err(fail(format!(
                "{} is not a regular file; point {key} at the image file",
                path.display()
            )));
        }
        if meta.len() == 0 {
            let fix = match key {
                "image" => "; for a blank disk, drop image and give size",
                _ => "",
            };
            return Err(fail(format!("image file {} is empty{fix}", path.display())));
        }
        Ok(meta.len())
    }

    /// What can be known of an image before the build: nothing for `@name`,
    /// size and arm64 header for a file (which must exist and not be empty).
    fn probe(
        &self,
        i: usize,
        key: &'static str,
        image: &ImageRef,
    ) -> Result<Option<ImageFacts>, ConfigError> {
        let ImageRef::Path(path) = image else {
            return Ok(None);
        };
        let fail = |message: String| self.error(Violation::new(i, key, message));
        let len = self.file_len(fail, key, path)?;
        let mut head = Vec::with_capacity(ARM64_HEADER_LEN);
        File::open(path)
            .and_then(|f| f.take(ARM64_HEADER_LEN as u64).read_to_end(&mut head))
            .map_err(|e| fail(format!("cannot read image file {}: {e}", path.display())))?;
        Ok(Some(ImageFacts { len, linux: Arm64Header::parse(&head) }))
    }

    /// Resolves VM `index` with its images' bytes into what the package
    /// carries: defaults filled in from the images (an arm64 Image header
    /// decides the load address and BSS), and every rule re-checked with the
    /// real sizes.
    ///
    /// `initrd` must be `Some` exactly when the config names an initrd, and
    /// `disks` must have one entry per `[[vm.disk]]`: `Some(bytes)` of its
    /// image, or `None` for a disk without one and for a disk on a partition
    /// (whose image the build tool writes into the partition, not the package).
    ///
    /// # Panics
    /// If `index` is not a VM of this config.
    pub fn spec<'a>(
        &'a self,
        index: usize,
        kernel: &'a [u8],
        initrd: Option<&'a [u8]>,
        disks: &[Option<&'a [u8]>],
    ) -> Result<VmSpec<'a>, ConfigError> {
        let vm = &self.vms[index];
        let v = |r: Result<(), Violation>| r.map_err(|v| self.error(v));
        v(check_image_size(index, "kernel", kernel.len(), kernel.len() as u64))?;
        let initrd_facts = match (&vm.initrd, initrd) {
            (None, None) => InitrdFacts::None,
            (Some(_), Some(bytes)) => {
                v(check_image_size(index, "initrd", bytes.len(), bytes.len() as u64))?;
                InitrdFacts::Len(bytes.len() as u64)
            }
            (Some(r), None) => {
                return Err(self.error(Violation::new(
                    index,
                    "initrd",
                    format!("the config names initrd {r}, but no initrd bytes were supplied"),
                )));
            }
            (None, Some(_)) => {
                return Err(self.error(Violation::new(
                    index,
                    "initrd",
                    "initrd bytes were supplied, but the config names no initrd".to_owned(),
                )));
            }
        };
        let r = resolve(index, &placement(vm), Some(ImageFacts::of(kernel)), initrd_facts)
            .map_err(|v| self.error(v))?;

        let disks = self.disk_specs(index, disks)?;

        let mut cpu_affinity = [None; MAX_VCPUS as usize];
        for (slot, &cpu) in vm.cpu_affinity.iter().flatten().enumerate() {
            if let Some(s) = cpu_affinity.get_mut(slot) {
                *s = Some(cpu);
            }
        }
        let spec = VmSpec {
            name: &vm.name,
            vcpus: vm.vcpus,
            cpu_affinity,
            memory: vm.memory,
            entry: r.entry,
            kernel: LoadImage { load: r.kernel.start, bytes: kernel, mem_size: r.kernel.size },
            initrd: r.initrd.zip(initrd).map(|(range, bytes)| LoadImage {
                load: range.start,
                bytes,
                mem_size: bytes.len() as u64,
            }),
            cmdline: &vm.cmdline,
            devices: vm.devices.clone(),
            disks,
            nics: vm
                .nics
                .iter()
                .map(|n| NicSpec { network: &n.network, mac: n.mac, mtu: n.mtu })
                .collect(),
            passthrough: vm
                .passthrough
                .iter()
                .map(|p| Passthrough { path: &p.path, dma: p.dma })
                .collect(),
            pmu: vm.pmu,
            gic: vm.gic,
            sched: vm.sched,
            autostart: vm.autostart,
            control: vm.control,
            policies: vm.policies,
        };
        check_vm(index, &spec, &self.machine).map_err(|v| self.error(v))?;
        Ok(spec)
    }

    /// Pairs VM `index`'s disks with the images the caller read.
    fn disk_specs<'a>(
        &'a self,
        index: usize,
        images: &[Option<&'a [u8]>],
    ) -> Result<Vec<DiskSpec<'a>>, ConfigError> {
        let vm = &self.vms[index];
        if images.len() != vm.disks.len() {
            return Err(self.error(Violation::new(
                index,
                "disk",
                format!(
                    "the config has {} disks, but {} disk images were supplied; pass one entry \
                     per [[vm.disk]], None for a disk without an image or on a partition",
                    vm.disks.len(),
                    images.len()
                ),
            )));
        }
        let mut disks = Vec::with_capacity(images.len());
        for (j, (disk, bytes)) in vm.disks.iter().zip(images).enumerate() {
            let fail =
                |message| self.error(Violation::in_table(index, "disk", j, "image", message));
            if let Some(name) = disk.partition.as_deref() {
                if bytes.is_some() {
                    return Err(fail(format!(
                        "image bytes were supplied for the disk on partition {name:?}, whose \
                         image goes into the partition, not the package; pass None"
                    )));
                }
                let capacity = disk_capacity(disk.size, self.disk_image_len(index, j)?);
                let (read_only, partition) = (disk.read_only, Some(name));
                disks.push(DiskSpec { image: &[], capacity, read_only, partition });
                continue;
            }
            let image = match (&disk.image, *bytes) {
                (None, None) => &[][..],
                (Some(_), Some(bytes)) if !bytes.is_empty() => bytes,
                (Some(path), _) => {
                    return Err(fail(format!(
                        "the config names image {}, but no bytes were supplied; read the file",
                        path.display()
                    )));
                }
                (None, Some(_)) => {
                    return Err(fail(
                        "image bytes were supplied, but the config names no image; pass None"
                            .to_owned(),
                    ));
                }
            };
            let capacity = disk_capacity(disk.size, image.len() as u64);
            disks.push(DiskSpec { image, capacity, read_only: disk.read_only, partition: None });
        }
        Ok(disks)
    }

    /// The network whose uplink the machine's NIC is, if any.
    pub fn uplink(&self) -> Option<&str> {
        self.networks.iter().find(|n| n.uplink).map(|n| n.name.as_str())
    }

    /// Turns a rule violation into an error that quotes this file and the
    /// line of the key (or of the VM's `[[vm]]` header if the key was
    /// defaulted; of a `[[network]]` table's key or header).
    fn error(&self, v: Violation) -> ConfigError {
        let line = match (v.vm, v.table) {
            (Some(i), _) => self.lines.get(i).map(|l| l.line_of(&v.key_path())),
            (None, Some(("network", k))) => self.network_lines.get(k).map(|l| l.line_of(v.key)),
            (None, _) => None,
        };
        ConfigError { path: self.path.clone(), line, key: Some(v.path()), message: v.message }
    }
}

fn placement(vm: &VmConfig) -> Placement {
    Placement {
        memory: vm.memory,
        kernel_load: vm.kernel_load,
        entry: vm.entry,
        initrd_load: vm.initrd_load,
    }
}

/// Where one VM's keys are in the file.
#[derive(Clone, Debug)]
struct KeyLines {
    /// The line of the `[[vm]]` header.
    table: usize,
    /// The line of each key read, by its path in the VM (`memory_size`,
    /// `disk[1].size`), and of each sub-table's header (`disk[1]`).
    keys: Vec<(String, usize)>,
}

impl KeyLines {
    /// The line of a key, else of its sub-table's header (a defaulted key of a
    /// `[[vm.disk]]`), else of the `[[vm]]` header.
    fn line_of(&self, path: &str) -> usize {
        let find = |p: &str| self.keys.iter().find(|(k, _)| k == p).map(|&(_, line)| line);
        let table = path.rsplit_once('.').map(|(table, _)| table);
        find(path).or_else(|| table.and_then(find)).unwrap_or(self.table)
    }

    fn record(&mut self, path: String, line: usize) {
        if !self.keys.iter().any(|(k, _)| *k == path) {
            self.keys.push((path, line));
        }
    }
}

/// What every parse error needs to say where it is.
struct Cx<'t> {
    text: &'t str,
    path: &'t Path,
    dir: &'t Path,
}

impl Cx<'_> {
    fn line(&self, offset: usize) -> usize {
        let upto = self.text.get(..offset).unwrap_or(self.text);
        upto.bytes().filter(|&b| b == b'\n').count() + 1
    }

    fn err(&self, offset: usize, key: String, message: String) -> ConfigError {
        ConfigError {
            path: self.path.to_owned(),
            line: Some(self.line(offset)),
            key: Some(key),
            message,
        }
    }

    fn violation(&self, v: Violation, offset: Option<usize>) -> ConfigError {
        ConfigError {
            path: self.path.to_owned(),
            line: offset.map(|o| self.line(o)),
            key: Some(v.path()),
            message: v.message,
        }
    }
}

type Table<'t> = DeTable<'t>;
type Value<'t> = Spanned<DeValue<'t>>;

/// The `[[vm]]` tables with the offset of each header.
fn vm_tables<'v, 't>(
    cx: &Cx<'_>,
    value: &'v Value<'t>,
) -> Result<Vec<(usize, &'v Table<'t>)>, ConfigError> {
    let not_tables = || {
        cx.err(
            value.span().start,
            "vm".to_owned(),
            "must be an array of tables; start each VM with a [[vm]] line (double brackets)"
                .to_owned(),
        )
    };
    let DeValue::Array(items) = value.get_ref() else {
        return Err(not_tables());
    };
    items
        .iter()
        .map(|item| match item.get_ref() {
            DeValue::Table(t) => Ok((item.span().start, t)),
            _ => Err(not_tables()),
        })
        .collect()
}

/// Typed access to one `[[vm]]` table, or one `[[vm.disk]]` or `[[vm.nic]]`
/// table inside it, recording the line of every key read.
struct VmTable<'a, 't> {
    cx: &'a Cx<'a>,
    i: usize,
    /// For a sub-table: its name and, in an array of tables, its index
    /// (`("disk", Some(1))`, `("realtime", None)`).
    sub: Option<(&'static str, Option<usize>)>,
    /// The line of the table's header.
    header: usize,
    table: &'a Table<'t>,
    lines: &'a mut KeyLines,
}

impl<'a, 't> VmTable<'a, 't> {
    /// A key's path inside the VM: `memory_size`, `disk[1].size`.
    fn local(&self, key: &str) -> String {
        match self.sub {
            Some((table, Some(j))) => format!("{table}[{j}].{key}"),
            Some((table, None)) => format!("{table}.{key}"),
            None => key.to_owned(),
        }
    }

    /// The table's own path: `vm[0]`, `vm[0].disk[1]`.
    fn table_path(&self) -> String {
        match self.sub {
            Some((table, Some(j))) => format!("vm[{}].{table}[{j}]", self.i),
            Some((table, None)) => format!("vm[{}].{table}", self.i),
            None => format!("vm[{}]", self.i),
        }
    }

    /// A key's full path: `vm[0].memory_size`, `vm[0].disk[1].size`.
    fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.table_path())
    }

    fn get(&mut self, key: &'static str) -> Option<&'a Value<'t>> {
        let (k, v) = self.table.iter().find(|(k, _)| k.get_ref() == key)?;
        let line = self.cx.line(k.span().start);
        self.lines.record(self.local(key), line);
        Some(v)
    }

    fn err(&self, value: &Value<'_>, key: &str, message: String) -> ConfigError {
        self.cx.err(value.span().start, self.path(key), message)
    }

    fn type_err(&self, value: &Value<'_>, key: &str, expected: &str, example: &str) -> ConfigError {
        self.err(
            value,
            key,
            format!(
                "expected {expected}, found {}; write e.g. {key} = {example}",
                value.get_ref().type_str()
            ),
        )
    }

    fn missing(&self, key: &str, example: &str) -> ConfigError {
        ConfigError {
            path: self.cx.path.to_owned(),
            line: Some(self.header),
            key: Some(self.path(key)),
            message: format!("missing required key; add e.g. {key} = {example}"),
        }
    }

    fn string(&mut self, key: &'static str, example: &str) -> Result<Option<&'a str>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.get_ref() {
            DeValue::String(s) => Ok(Some(s.as_ref())),
            _ => Err(self.type_err(v, key, "a string", example)),
        }
    }

    fn integer_of(&self, v: &Value<'_>, key: &str, example: &str) -> Result<u64, ConfigError> {
        let DeValue::Integer(n) = v.get_ref() else {
            return Err(self.type_err(v, key, "an integer", example));
        };
        if n.as_str().starts_with('-') {
            return Err(self.err(v, key, format!("{n} is negative; write e.g. {key} = {example}")));
        }
        u64::from_str_radix(n.as_str(), n.radix())
            .map_err(|_| self.err(v, key, format!("{n} is out of range")))
    }

    fn integer(&mut self, key: &'static str, example: &str) -> Result<Option<u64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => self.integer_of(v, key, example).map(Some),
        }
    }

    fn boolean(&mut self, key: &'static str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.get_ref() {
                DeValue::Boolean(b) => Ok(Some(*b)),
                _ => Err(self.type_err(v, key, "true or false", "true")),
            },
        }
    }

    /// A byte count: a size string (`"64M"`) or an integer.
    fn size(&mut self, key: &'static str, example: &str) -> Result<Option<u64>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.get_ref() {
            DeValue::String(s) => parse_size(s).map(Some).ok_or_else(|| {
                self.err(
                    v,
                    key,
                    format!(
                        "{s:?} is not a size; write e.g. \"512K\", \"64M\", \"1G\" or a byte count"
                    ),
                )
            }),
            DeValue::Integer(_) => self.integer_of(v, key, example).map(Some),
            _ => Err(self.type_err(v, key, "a size string or an integer", example)),
        }
    }

    /// The `[[vm.<key>]]` tables, with the offset of each, after checking
    /// that each has only `allowed` keys.
    fn tables(
        &mut self,
        key: &'static str,
        allowed: &[&str],
    ) -> Result<Vec<(usize, &'a Table<'t>)>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(Vec::new());
        };
        let not_tables = format!(
            "must be an array of tables; start each one with a [[vm.{key}]] line \
             (double brackets) after its VM's [[vm]] table"
        );
        let DeValue::Array(items) = v.get_ref() else {
            return Err(self.err(v, key, not_tables));
        };
        let mut tables = Vec::with_capacity(items.len());
        for (j, item) in items.iter().enumerate() {
            let DeValue::Table(table) = item.get_ref() else {
                return Err(self.err(v, key, not_tables));
            };
            let start = item.span().start;
            let path = format!("{}.{key}[{j}]", self.table_path());
            check_known_keys(self.cx, &path, table, allowed)?;
            self.lines.record(format!("{key}[{j}]"), self.cx.line(start));
            tables.push((start, table));
        }
        Ok(tables)
    }

    /// Typed access to the `j`th `[[vm.<key>]]` table (`None`: the single
    /// `[vm.<key>]` table), starting at `start`.
    fn sub<'b>(
        &'b mut self,
        key: &'static str,
        j: Option<usize>,
        start: usize,
        table: &'b Table<'t>,
    ) -> VmTable<'b, 't> {
        VmTable {
            cx: self.cx,
            i: self.i,
            sub: Some((key, j)),
            header: self.cx.line(start),
            table,
            lines: self.lines,
        }
    }

    fn array(
        &mut self,
        key: &'static str,
        example: &str,
    ) -> Result<Option<&'a [Value<'t>]>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.get_ref() {
            DeValue::Array(items) => Ok(Some(items)),
            _ => Err(self.type_err(v, key, "an array", example)),
        }
    }

    fn image(&mut self, key: &'static str) -> Result<Option<ImageRef>, ConfigError> {
        let example = "\"@testguest\" or \"path/to/Image\"";
        let Some(text) = self.string(key, example)? else {
            return Ok(None);
        };
        let v = self.get(key).expect("read just above");
        if let Some(name) = text.strip_prefix('@') {
            let ok = (1..=MAX_GUEST_NAME_LEN).contains(&name.len())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(self.err(
                    v,
                    key,
                    format!(
                        "{text:?}: '@' must be followed by the name of a guest under guests/, \
                         e.g. \"@testguest\""
                    ),
                ));
            }
            return Ok(Some(ImageRef::Built(name.to_owned())));
        }
        if text.is_empty() {
            return Err(self.err(v, key, format!("is empty; write e.g. {key} = {example}")));
        }
        Ok(Some(ImageRef::Path(self.cx.dir.join(text))))
    }
}

/// Refuses keys not in `allowed`, naming the nearest allowed one: a typo'd
/// optional key would otherwise be silently ignored, which is the worst kind
/// of config bug. `path` is the table's, e.g. `vm[0]` or `vm[0].disk[1]`.
fn check_known_keys(
    cx: &Cx<'_>,
    path: &str,
    table: &Table<'_>,
    allowed: &[&str],
) -> Result<(), ConfigError> {
    let mut unknown: Vec<_> =
        table.iter().filter(|(k, _)| !allowed.contains(&k.get_ref().as_ref())).collect();
    unknown.sort_by_key(|(k, _)| k.span().start);
    let Some((k, _)) = unknown.first() else {
        return Ok(());
    };
    let hint =
        closest(k.get_ref(), allowed).map(|c| format!("did you mean `{c}`? ")).unwrap_or_default();
    Err(cx.err(
        k.span().start,
        format!("{path}.{}", k.get_ref()),
        format!("unknown key; {hint}allowed keys are {}", allowed.join(", ")),
    ))
}

fn parse_vm(
    cx: &Cx<'_>,
    i: usize,
    table: &Table<'_>,
    lines: &mut KeyLines,
) -> Result<VmConfig, ConfigError> {
    check_known_keys(cx, &format!("vm[{i}]"), table, VM_KEYS)?;
    let header = lines.table;
    let mut t = VmTable { cx, i, sub: None, header, table, lines };

    let name = t.string("name", "\"vm0\"")?.ok_or_else(|| t.missing("name", "\"vm0\""))?.to_owned();

    let vcpus = t.integer("vcpus", "1")?.ok_or_else(|| t.missing("vcpus", "1"))?;
    if let Err(v) = check_vcpus(i, vcpus) {
        let value = t.get("vcpus").expect("read just above");
        return Err(t.err(value, "vcpus", v.message));
    }
    let vcpus = vcpus as u8; // in 1..=MAX_VCPUS

    let cpu_affinity = match t.array("cpu_affinity", "[0]")? {
        None => None,
        Some(items) => {
            let mut cpus = Vec::with_capacity(items.len());
            for item in items {
                let cpu = t.integer_of(item, "cpu_affinity", "[0]")?;
                // Out-of-range CPUs are reported by the machine check with
                // the real number; u32::MAX never names a real CPU.
                cpus.push(u32::try_from(cpu).unwrap_or(u32::MAX));
            }
            Some(cpus)
        }
    };

    let base = t.integer("memory_base", "0x4000_0000")?.map_or(DEFAULT_MEMORY_BASE, Ipa);
    let size =
        t.size("memory_size", "\"32M\"")?.ok_or_else(|| t.missing("memory_size", "\"32M\""))?;

    let kernel = t.image("kernel")?.ok_or_else(|| t.missing("kernel", "\"@testguest\""))?;
    let kernel_load = t.integer("kernel_load", "0x4008_0000")?.map(Ipa);
    let entry = t.integer("entry", "0x4008_0000")?.map(Ipa);
    let initrd = t.image("initrd")?;
    let initrd_load = t.integer("initrd_load", "0x4100_0000")?.map(Ipa);
    if initrd_load.is_some() && initrd.is_none() {
        let v = t.get("initrd_load").expect("read just above");
        return Err(t.err(
            v,
            "initrd_load",
            "is set but there is no initrd; add initrd = \"path\" or remove initrd_load".to_owned(),
        ));
    }
    let cmdline = t.string("cmdline", "\"console=ttyAMA0\"")?.unwrap_or("").to_owned();

    let devices = match t.array("devices", "[\"pl011\"]")? {
        None => vec![DeviceKind::Pl011],
        Some(items) => {
            let mut devices = Vec::with_capacity(items.len());
            for item in items {
                let DeValue::String(s) = item.get_ref() else {
                    return Err(t.type_err(item, "devices", "an array of strings", "[\"pl011\"]"));
                };
                let kind = DeviceKind::from_name(s).ok_or_else(|| {
                    let known: Vec<_> = DeviceKind::ALL.iter().map(|k| k.name()).collect();
                    let table = match s.as_ref() {
                        "virtio-net" => " (a NIC is a [[vm.nic]] table)",
                        "virtio-blk" => " (a disk is a [[vm.disk]] table)",
                        _ => "",
                    };
                    t.err(
                        item,
                        "devices",
                        format!(
                            "unknown device kind {s:?}{table}; known kinds: {}",
                            known.join(", ")
                        ),
                    )
                })?;
                devices.push(kind);
            }
            devices
        }
    };

    let mut disks = Vec::new();
    for (j, (start, table)) in t.tables("disk", DISK_KEYS)?.into_iter().enumerate() {
        disks.push(parse_disk(&mut t.sub("disk", Some(j), start, table))?);
    }
    let mut nics = Vec::new();
    for (j, (start, table)) in t.tables("nic", NIC_KEYS)?.into_iter().enumerate() {
        nics.push(parse_nic(&mut t.sub("nic", Some(j), start, table), default_mac(i, j))?);
    }

    let mut passthrough = Vec::new();
    for (j, item) in
        t.array("passthrough", PASSTHROUGH_EXAMPLE)?.unwrap_or_default().iter().enumerate()
    {
        passthrough.push(parse_passthrough(&mut t, j, item)?);
    }
    let pmu = parse_pmu(&mut t)?;
    let gic = parse_gic(&mut t)?;

    let mut sched = VmSched::default();
    if let Some(weight) = t.integer("weight", "256")? {
        sched.weight = u32::try_from(weight).unwrap_or(u32::MAX);
    }
    if let Some(cap) = t.integer("cap", "50")? {
        sched.cap = Some(u32::try_from(cap).unwrap_or(u32::MAX));
    }
    if let Some(v) = t.get("realtime") {
        let DeValue::Table(table) = v.get_ref() else {
            return Err(t.type_err(
                v,
                "realtime",
                "a table",
                "{ budget_us = 2000, period_us = 10000 }",
            ));
        };
        let path = format!("vm[{i}].realtime");
        check_known_keys(cx, &path, table, REALTIME_KEYS)?;
        let mut rt = t.sub("realtime", None, v.span().start, table);
        let mut field = |key: &'static str, example: &str| -> Result<u32, ConfigError> {
            let value = rt.integer(key, example)?.ok_or_else(|| rt.missing(key, example))?;
            Ok(u32::try_from(value).unwrap_or(u32::MAX))
        };
        let budget_us = field("budget_us", "2000")?;
        let period_us = field("period_us", "10000")?;
        sched.realtime = Some(RealTimeSpec { budget_us, period_us });
    }

    let autostart = t.boolean("autostart")?.unwrap_or(true);
    let control = t.boolean("control")?.unwrap_or(false);
    let defaults = Policies::default();
    let policies = Policies {
        on_poweroff: parse_policy(&mut t, "on_poweroff", defaults.on_poweroff)?,
        on_reboot: parse_policy(&mut t, "on_reboot", defaults.on_reboot)?,
        on_crash: parse_policy(&mut t, "on_crash", defaults.on_crash)?,
    };

    Ok(VmConfig {
        name,
        vcpus,
        cpu_affinity,
        memory: IpaRange::new(base, size),
        kernel,
        kernel_load,
        entry,
        initrd,
        initrd_load,
        cmdline,
        devices,
        disks,
        nics,
        passthrough,
        pmu,
        gic,
        sched,
        autostart,
        control,
        policies,
    })
}

/// `on_poweroff`, `on_reboot` or `on_crash`: `"stop"` or `"restart"`.
fn parse_policy(
    t: &mut VmTable<'_, '_>,
    key: &'static str,
    default: Policy,
) -> Result<Policy, ConfigError> {
    let Some(v) = t.get(key) else {
        return Ok(default);
    };
    let what = match v.get_ref() {
        DeValue::String(s) => match Policy::from_name(s) {
            Some(policy) => return Ok(policy),
            None => format!("{s:?}"),
        },
        other => format!("a {}", other.type_str()),
    };
    let event = match key {
        "on_poweroff" => "the guest powers off",
        "on_reboot" => "the guest resets itself",
        _ => "armhv stops the guest on a fault",
    };
    Err(t.err(
        v,
        key,
        format!(
            "{what} is not a policy; write {key} = \"stop\" or {key} = \"restart\" (what the \
             VM does when {event}; the default is \"{default}\")"
        ),
    ))
}

const PASSTHROUGH_EXAMPLE: &str =
    "[\"/pl031@9010000\"] or [{ path = \"/fw-cfg@9020000\", dma = \"unprotected\" }]";

/// `pmu = "virtual" | "raw" | "off"`; `true` and `false`, its spellings before the virtual
/// PMU, still mean the physical PMU and none.
fn parse_pmu(t: &mut VmTable<'_, '_>) -> Result<PmuMode, ConfigError> {
    let Some(v) = t.get("pmu") else {
        return Ok(PmuMode::Virtual);
    };
    match v.get_ref() {
        DeValue::Boolean(true) => Ok(PmuMode::Raw),
        DeValue::Boolean(false) => Ok(PmuMode::Off),
        DeValue::String(s) if s == "virtual" => Ok(PmuMode::Virtual),
        DeValue::String(s) if s == "raw" => Ok(PmuMode::Raw),
        DeValue::String(s) if s == "off" => Ok(PmuMode::Off),
        other => {
            let what = match other {
                DeValue::String(s) => format!("{s:?}"),
                _ => format!("a {}", other.type_str()),
            };
            Err(t.err(
                v,
                "pmu",
                format!(
                    "{what} is not a PMU setting; write pmu = \"virtual\" (the default: each \
                     vCPU its own counters, counting only its guest), \"raw\" (the physical \
                     PMU, counting armhv and whatever shares the CPU too: benchmarks' path \
                     lengths) or \"off\" (no PMU)"
                ),
            ))
        }
    }
}

/// `gic = "v2" | "v3"`; absent: `None`, the host's version.
fn parse_gic(t: &mut VmTable<'_, '_>) -> Result<Option<GicVersion>, ConfigError> {
    let Some(v) = t.get("gic") else {
        return Ok(None);
    };
    match v.get_ref() {
        DeValue::String(s) if s == "v2" => Ok(Some(GicVersion::V2)),
        DeValue::String(s) if s == "v3" => Ok(Some(GicVersion::V3)),
        other => {
            let what = match other {
                DeValue::String(s) => format!("{s:?}"),
                _ => format!("a TOML {}", other.type_str()),
            };
            Err(t.err(
                v,
                "gic",
                format!(
                    "{what} is not a GIC version; write gic = \"v2\" or gic = \"v3\", or leave \
                     gic out for the host's (a GICv3 host gives a virtual GICv3, a GICv2 host a \
                     virtual GICv2); a VM naming the version the host lacks is refused at start"
                ),
            ))
        }
    }
}

/// One passthrough entry: a path string (nothing said of DMA), or a table
/// `{ path, dma }` (`[[vm.passthrough]]` tables are the same array).
fn parse_passthrough<'t>(
    t: &mut VmTable<'_, 't>,
    j: usize,
    item: &Value<'t>,
) -> Result<PassthroughConfig, ConfigError> {
    let table = match item.get_ref() {
        DeValue::String(s) => {
            return Ok(PassthroughConfig { path: s.to_string(), dma: PassthroughDma::Unstated });
        }
        DeValue::Table(table) => table,
        _ => {
            return Err(t.type_err(
                item,
                "passthrough",
                "an array of paths or { path, dma } tables",
                PASSTHROUGH_EXAMPLE,
            ));
        }
    };
    let path = format!("{}.passthrough[{j}]", t.table_path());
    check_known_keys(t.cx, &path, table, PASSTHROUGH_KEYS)?;
    let mut p = t.sub("passthrough", Some(j), item.span().start, table);
    let path = p.string("path", "\"/pl031@9010000\"")?;
    let path = path.ok_or_else(|| p.missing("path", "\"/pl031@9010000\""))?.to_owned();
    let dma = match p.string("dma", "\"none\"")? {
        None => PassthroughDma::Unstated,
        Some("none") => PassthroughDma::None,
        Some("unprotected") => PassthroughDma::Unprotected,
        Some(other) => {
            let v = p.get("dma").expect("read just above");
            return Err(p.err(
                v,
                "dma",
                format!(
                    "{other:?} is not a DMA setting; write dma = \"none\" if the device masters \
                     no DMA (armhv refuses it if the host's device tree says it does), or dma = \
                     \"unprotected\" to assign a DMA-capable device knowing that, without an \
                     IOMMU, the VM can then read and write all host memory (configs/README.md, \
                     \"Passthrough\")"
                ),
            ));
        }
    };
    Ok(PassthroughConfig { path, dma })
}

/// The top-level `[[network]]` tables, with the lines of their keys.
fn parse_networks(
    cx: &Cx<'_>,
    value: &Value<'_>,
) -> Result<(Vec<NetworkConfig>, Vec<KeyLines>), ConfigError> {
    let not_tables = || {
        cx.err(
            value.span().start,
            "network".to_owned(),
            "must be an array of tables; start each network with a [[network]] line (double \
             brackets), e.g. [[network]] name = \"lan0\" uplink = true"
                .to_owned(),
        )
    };
    let DeValue::Array(items) = value.get_ref() else {
        return Err(not_tables());
    };
    let (mut networks, mut lines) = (Vec::new(), Vec::new());
    for (k, item) in items.iter().enumerate() {
        let DeValue::Table(table) = item.get_ref() else {
            return Err(not_tables());
        };
        let path = format!("network[{k}]");
        check_known_keys(cx, &path, table, NETWORK_KEYS)?;
        let mut keys = KeyLines { table: cx.line(item.span().start), keys: Vec::new() };
        let (mut name, mut uplink) = (None, false);
        for (key, v) in table.iter() {
            let line = cx.line(key.span().start);
            keys.record(key.get_ref().to_string(), line);
            let bad = |message: &str| {
                cx.err(key.span().start, format!("{path}.{}", key.get_ref()), message.to_owned())
            };
            match (key.get_ref().as_ref(), v.get_ref()) {
                ("name", DeValue::String(s)) => name = Some(s.to_string()),
                ("name", _) => return Err(bad("expected a string; write e.g. name = \"lan0\"")),
                ("uplink", DeValue::Boolean(b)) => uplink = *b,
                ("uplink", _) => return Err(bad("expected true or false; write uplink = true")),
                _ => {}
            }
        }
        let Some(name) = name else {
            return Err(ConfigError {
                path: cx.path.to_owned(),
                line: Some(keys.table),
                key: Some(format!("{path}.name")),
                message: "missing required key; add e.g. name = \"lan0\" (the network the \
                          VMs' [[vm.nic]] tables name)"
                    .to_owned(),
            });
        };
        networks.push(NetworkConfig { name, uplink });
        lines.push(keys);
    }
    Ok((networks, lines))
}

/// The top-level `[scheduler]` table.
fn parse_scheduler(cx: &Cx<'_>, value: &Value<'_>) -> Result<SchedSpec, ConfigError> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err(cx.err(
            value.span().start,
            "scheduler".to_owned(),
            "must be a table; write a [scheduler] line with quantum_ms = 10 under it".to_owned(),
        ));
    };
    check_known_keys(cx, "scheduler", table, SCHEDULER_KEYS)?;
    let mut spec = SchedSpec::default();
    if let Some((k, v)) = table.iter().find(|(k, _)| k.get_ref() == "quantum_ms") {
        let path = "scheduler.quantum_ms".to_owned();
        let bad = |message: String| cx.err(k.span().start, path.clone(), message);
        let DeValue::Integer(n) = v.get_ref() else {
            return Err(bad("expected an integer; write e.g. quantum_ms = 10".to_owned()));
        };
        spec.quantum_ms = u32::from_str_radix(n.as_str(), n.radix()).unwrap_or(u32::MAX);
        check_scheduler(&spec).map_err(|v| bad(v.message))?;
    }
    Ok(spec)
}

/// The top-level `[irqdist]` table.
fn parse_irqdist(cx: &Cx<'_>, value: &Value<'_>) -> Result<IrqDistSpec, ConfigError> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err(cx.err(
            value.span().start,
            "irqdist".to_owned(),
            "must be a table; write an [irqdist] line with enabled = true under it".to_owned(),
        ));
    };
    check_known_keys(cx, "irqdist", table, IRQDIST_KEYS)?;
    let mut spec = IrqDistSpec::default();
    for (k, v) in table.iter() {
        let path = format!("irqdist.{}", k.get_ref());
        let bad = |message: &str| cx.err(k.span().start, path.clone(), message.to_owned());
        match (k.get_ref().as_ref(), v.get_ref()) {
            ("enabled", DeValue::Boolean(b)) => spec.enabled = *b,
            ("enabled", _) => return Err(bad("expected a boolean; write enabled = true")),
            ("spread", DeValue::String(s)) if s == "one" => spec.spread = Spread::One,
            ("spread", DeValue::String(s)) if s == "all" => spec.spread = Spread::All,
            ("spread", _) => {
                return Err(bad(
                    "expected \"one\" or \"all\"; write spread = \"one\" (to the least-utilized \
                     other CPU) or \"all\" (to every other CPU in turn)",
                ));
            }
            ("avoid_realtime_pct", value) => {
                let pct = match value {
                    DeValue::Integer(n) => u8::from_str_radix(n.as_str(), n.radix()).ok(),
                    _ => None,
                };
                spec.avoid_realtime_pct = Some(pct.filter(|p| (1..=100).contains(p)).ok_or_else(
                    || bad("expected a percentage from 1 to 100; write e.g. avoid_realtime_pct = 10"),
                )?);
            }
            _ => {}
        }
    }
    Ok(spec)
}

fn parse_disk(t: &mut VmTable<'_, '_>) -> Result<DiskConfig, ConfigError> {
    let example = "\"disk.img\"";
    let image = match t.string("image", example)? {
        None => None,
        Some(text) => {
            let v = t.get("image").expect("read just above");
            if text.starts_with('@') {
                return Err(t.err(
                    v,
                    "image",
                    format!(
                        "{text:?}: a disk image is a file, relative to this config file; \
                         \"@name\" (a guest this project builds) is only for kernel and initrd"
                    ),
                ));
            }
            if text.is_empty() {
                return Err(t.err(v, "image", format!("is empty; write e.g. image = {example}")));
            }
            Some(t.cx.dir.join(text))
        }
    };
    let size = t.size("size", "\"16M\"")?;
    let read_only = t.boolean("read_only")?.unwrap_or(false);
    // Its name is checked with the other rules, which know the disk's place.
    let partition = t.string("partition", "\"linux0-data\"")?.map(str::to_owned);
    if image.is_none() && size.is_none() {
        return Err(ConfigError {
            path: t.cx.path.to_owned(),
            line: Some(t.header),
            key: Some(t.table_path()),
            message: format!(
                "has neither image nor size; add image = {example} for a disk with contents, \
                 size = \"16M\" for a blank one, or both"
            ),
        });
    }
    Ok(DiskConfig { image, size, read_only, partition })
}

fn parse_nic(t: &mut VmTable<'_, '_>, default_mac: [u8; 6]) -> Result<NicConfig, ConfigError> {
    let network =
        t.string("network", "\"lan0\"")?.ok_or_else(|| t.missing("network", "\"lan0\""))?;
    let example = "\"52:54:00:12:34:56\"";
    let mac = match t.string("mac", example)? {
        None => default_mac,
        Some(text) => match parse_mac(text) {
            Some(mac) => mac,
            None => {
                let v = t.get("mac").expect("read just above");
                return Err(t.err(
                    v,
                    "mac",
                    format!(
                        "{text:?} is not a MAC address; write six two-digit hex numbers joined \
                         by ':', e.g. mac = {example}"
                    ),
                ));
            }
        },
    };
    let mtu = match t.integer("mtu", "9000")? {
        None => None,
        Some(m) => match u16::try_from(m) {
            Ok(m) => Some(m),
            Err(_) => {
                let v = t.get("mtu").expect("read just above");
                return Err(t.err(v, "mtu", unusable_mtu(m)));
            }
        },
    };
    Ok(NicConfig { network: network.to_owned(), mac, mtu })
}

/// The allowed key nearest to a misspelt one, if it is near enough to be a
/// plausible typo (edit distance at most 2, or one is a prefix of the other).
fn closest<'k>(key: &str, allowed: &[&'k str]) -> Option<&'k str> {
    allowed
        .iter()
        .map(|&a| (edit_distance(key, a), a))
        .filter(|&(d, a)| d <= 2 || (key.len() >= 3 && (a.starts_with(key) || key.starts_with(a))))
        .min_by_key(|&(d, _)| d)
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Machine = Machine { ram_bytes: 1 << 30, cpus: 4 };

    fn origin() -> PathBuf {
        PathBuf::from("configs/test.toml")
    }

    fn ok(text: &str) -> Config {
        parse(text, &origin(), &M).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(text: &str) -> ConfigError {
        parse(text, &origin(), &M).expect_err("accepted a bad config")
    }

    const MIN: &str =
        "[[vm]]\nname = \"a\"\nvcpus = 1\nmemory_size = \"32M\"\nkernel = \"@testguest\"\n";

    /// MIN with extra lines appended to the VM table.
    fn with(extra: &str) -> String {
        format!("{MIN}{extra}\n")
    }

    #[test]
    fn pmu_settings() {
        assert_eq!(ok(MIN).vms[0].pmu, PmuMode::Virtual, "the default");
        for (value, mode) in [
            ("\"virtual\"", PmuMode::Virtual),
            ("\"raw\"", PmuMode::Raw),
            ("\"off\"", PmuMode::Off),
            ("true", PmuMode::Raw),
            ("false", PmuMode::Off),
        ] {
            assert_eq!(ok(&with(&format!("pmu = {value}"))).vms[0].pmu, mode, "pmu = {value}");
        }
        for bad in ["\"on\"", "1"] {
            let e = err(&with(&format!("pmu = {bad}")));
            assert_eq!(e.key.as_deref(), Some("vm[0].pmu"), "{e}");
            assert!(e.message.contains("pmu = \"virtual\""), "{e}");
        }
    }

    #[test]
    fn gic_settings() {
        assert_eq!(ok(MIN).vms[0].gic, None, "absent: the host's");
        for (value, gic) in [("\"v2\"", GicVersion::V2), ("\"v3\"", GicVersion::V3)] {
            assert_eq!(ok(&with(&format!("gic = {value}"))).vms[0].gic, Some(gic), "gic = {value}");
        }
        // A GICv2 has 8 CPU interfaces: as many vCPUs as any VM may have.
        let eight = with("gic = \"v2\"").replace("vcpus = 1", "vcpus = 8");
        let c = ok(&eight);
        let kernel = vec![1u8; 4096];
        let s = c.spec(0, &kernel, None, &[]).unwrap();
        assert_eq!((s.vcpus, s.gic), (8, Some(GicVersion::V2)));
        for bad in ["\"V2\"", "\"gicv3\"", "\"host\"", "2", "true"] {
            let e = err(&with(&format!("gic = {bad}")));
            assert_eq!(e.key.as_deref(), Some("vm[0].gic"), "{e}");
            assert!(e.message.contains("gic = \"v2\" or gic = \"v3\""), "{e}");
            assert!(e.message.contains("leave gic out for the host's"), "{e}");
        }
    }

    #[test]
    fn networks_and_the_uplink() {
        let nic = "[[vm.nic]]\nnetwork = \"lan0\"\n";
        let net = |body: &str| format!("{}[[network]]\n{body}\n", with(nic));
        let c = ok(&net("name = \"lan0\"\nuplink = true"));
        assert_eq!(c.networks, [NetworkConfig { name: "lan0".into(), uplink: true }]);
        assert_eq!(c.uplink(), Some("lan0"));
        let c = ok(&net("name = \"lan0\""));
        assert_eq!((c.networks.len(), c.uplink()), (1, None));
        assert_eq!(ok(&with(nic)).uplink(), None);

        // Line 9 is [[network]], 10 its first key.
        let cases = [
            ("uplink = true", "network[0].name", 9, "missing required key"),
            ("name = \"lan1\"\nuplink = true", "network[0].name", 10, "no VM has a NIC"),
            ("name = \"LAN\"", "network[0].name", 10, "not a valid network name"),
            ("name = 1", "network[0].name", 10, "expected a string"),
            ("name = \"lan0\"\nuplink = \"yes\"", "network[0].uplink", 11, "true or false"),
            ("name = \"lan0\"\nbridge = true", "network[0].bridge", 11, "allowed keys are name"),
        ];
        for (body, key, line, message) in cases {
            let e = err(&net(body));
            assert_eq!((e.key.as_deref(), e.line), (Some(key), Some(line)), "{body}: {e}");
            assert!(e.message.contains(message), "{body}: {e}");
        }
        let two = |second: &str| {
            format!(
                "{}{nic}[[vm.nic]]\nnetwork = \"lan1\"\n[[network]]\nname = \"lan0\"\nuplink = \
                 true\n[[network]]\n{second}\n",
                MIN
            )
        };
        let e = err(&two("name = \"lan1\"\nuplink = true"));
        assert_eq!((e.key.as_deref(), e.line), (Some("network[1].uplink"), Some(15)), "{e}");
        assert!(e.message.contains("set uplink = true on one network only"), "{e}");
        let e = err(&two("name = \"lan0\""));
        assert_eq!(e.key.as_deref(), Some("network[1].name"), "{e}");
        assert!(e.message.contains("merge the two tables"), "{e}");
        let e = err("[network]\nname = \"lan0\"\n");
        assert!(e.message.contains("[[network]] line (double brackets)"), "{e}");
        // Jumbo frames cannot go out of the machine's NIC.
        let e = err(&format!(
            "{}[[network]]\nname = \"lan0\"\nuplink = true\n",
            with("[[vm.nic]]\nnetwork = \"lan0\"\nmtu = 9000")
        ));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].nic[0].mtu"), Some(8)), "{e}");
        assert!(e.message.contains("set mtu to at most 1500"), "{e}");
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = ok(MIN);
        let vm = &c.vms[0];
        assert_eq!(vm.memory, IpaRange::new(Ipa(0x4000_0000), 32 << 20));
        assert_eq!(vm.kernel, ImageRef::Built("testguest".to_owned()));
        assert_eq!(vm.devices, [DeviceKind::Pl011]);
        assert_eq!(vm.cmdline, "");
        assert_eq!(vm.cpu_affinity, None);
        assert_eq!((vm.kernel_load, vm.entry, &vm.initrd), (None, None, &None));
        assert!(vm.disks.is_empty() && vm.nics.is_empty() && vm.passthrough.is_empty());
        assert!(vm.autostart && !vm.control);
        assert_eq!(vm.policies, Policies::default());
    }

    #[test]
    fn lifecycle_keys() {
        let c = ok(&with(
            "autostart = false\ncontrol = true\non_poweroff = \"restart\"\non_reboot = \
             \"stop\"\non_crash = \"restart\"",
        ));
        let vm = &c.vms[0];
        assert!(!vm.autostart && vm.control);
        let p = vm.policies;
        assert_eq!(
            (p.on_poweroff, p.on_reboot, p.on_crash),
            (Policy::Restart, Policy::Stop, Policy::Restart)
        );
        // Each policy alone; the others keep their defaults.
        let c = ok(&with("on_crash = \"restart\""));
        let want = Policies { on_crash: Policy::Restart, ..Policies::default() };
        assert_eq!(c.vms[0].policies, want);
        // The spec carries them.
        let kernel = [1u8; 64];
        let c = ok(&with("autostart = false\ncontrol = true"));
        let s = c.spec(0, &kernel, None, &[]).unwrap();
        assert!(!s.autostart && s.control);
        assert_eq!(s.virtio_devices().collect::<Vec<_>>(), [crate::VirtioDevice::Control]);
    }

    #[test]
    fn bad_lifecycle_values() {
        // Line 6 is the first key after MIN.
        let cases = [
            ("on_crash = \"reboot\"", "vm[0].on_crash", "\"reboot\" is not a policy"),
            ("on_reboot = \"destroy\"", "vm[0].on_reboot", "the default is \"restart\""),
            ("on_poweroff = true", "vm[0].on_poweroff", "a boolean is not a policy"),
            ("autostart = \"no\"", "vm[0].autostart", "expected true or false"),
            ("control = 1", "vm[0].control", "expected true or false"),
            ("on_crahs = \"stop\"", "vm[0].on_crahs", "did you mean `on_crash`?"),
        ];
        for (line, key, message) in cases {
            let e = err(&with(line));
            assert_eq!((e.key.as_deref(), e.line), (Some(key), Some(6)), "{line}: {e}");
            assert!(e.message.contains(message), "{line}: {e}");
        }
        let e = err(&with("on_crash = \"reboot\""));
        assert!(e.message.contains("write on_crash = \"stop\" or on_crash = \"restart\""), "{e}");
    }

    #[test]
    fn a_control_vm_needs_a_free_virtio_slot() {
        let nics: String = (0..4).map(|n| format!("[[vm.nic]]\nnetwork = \"lan{n}\"\n")).collect();
        let disks = "[[vm.disk]]\nsize = \"1M\"\n".repeat(3);
        let rng = "devices = [\"pl011\", \"virtio-rng\"]";
        // Seven devices and the channel, or eight devices: eight slots.
        assert!(ok(&with(&format!("control = true\n{nics}{disks}"))).vms[0].control);
        assert!(!ok(&with(&format!("{rng}\n{nics}{disks}"))).vms[0].control);
        // Eight devices and the channel: the error names control, on its line.
        let e = err(&with(&format!("{rng}\ncontrol = true\n{nics}{disks}")));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].control"), Some(7)), "{e}");
        assert!(e.message.contains("needs 9 virtio-mmio slots"), "{e}");
        assert!(e.message.contains("or set control = false"), "{e}");
    }

    #[test]
    fn all_keys() {
        let c = ok(r#"
[[vm]]
name = "linux"
vcpus = 2
cpu_affinity = [2, 3]
memory_base = 0x8000_0000
memory_size = 268435456
kernel = "@testguest"
kernel_load = 0x8020_0000
entry = 0x8020_0000
initrd = "@initramfs"
initrd_load = 0x8400_0000
cmdline = "console=ttyAMA0"
devices = []
"#);
        let vm = &c.vms[0];
        assert_eq!(vm.vcpus, 2);
        assert_eq!(vm.cpu_affinity, Some(vec![2, 3]));
        assert_eq!(vm.memory, IpaRange::new(Ipa(0x8000_0000), 256 << 20));
        assert_eq!(vm.kernel_load, Some(Ipa(0x8020_0000)));
        assert_eq!(vm.initrd, Some(ImageRef::Built("initramfs".to_owned())));
        assert_eq!(vm.initrd_load, Some(Ipa(0x8400_0000)));
        assert!(vm.devices.is_empty());
    }

    #[test]
    fn paths_are_relative_to_the_config_file() {
        let dir = std::env::temp_dir().join(format!("vmconfig-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k.bin"), [0u8; 100]).unwrap();
        let text = MIN.replace("@testguest", "k.bin");
        let c = parse(&text, &dir.join("x.toml"), &M).unwrap();
        assert_eq!(c.vms[0].kernel, ImageRef::Path(dir.join("k.bin")));
        // Not relative to the working directory.
        let e = parse(&text, Path::new("elsewhere/x.toml"), &M).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("vm[0].kernel"));
        assert!(e.message.contains("elsewhere/k.bin"), "{e}");
        // A directory is not an image.
        let e = parse(&MIN.replace("@testguest", "."), &dir.join("x.toml"), &M).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn error_names_file_line_key_and_fix() {
        let e = err(&with("cpu_affinity = [7]"));
        assert_eq!(
            e.to_string(),
            "configs/test.toml:6: vm[0].cpu_affinity: physical CPU 7 does not exist \
             (the machine has 4 CPUs); use 0..=3"
        );
        let e = err(&with("memroy_base = 0x4000_0000"));
        assert_eq!(e.key.as_deref(), Some("vm[0].memroy_base"));
        assert!(e.message.contains("did you mean `memory_base`?"), "{e}");
        assert!(e.message.contains("allowed keys are name, vcpus"), "{e}");
        // Syntax errors carry the line too.
        let e = err("[[vm]]\nname = \n");
        assert_eq!((e.line, e.key.as_deref()), (Some(2), None));
    }

    #[test]
    fn type_and_shape_errors() {
        let cases = [
            ("[vm]\nname = \"a\"", "vm"),
            ("vm = [1, 2]", "vm"),
            ("[machine]\ncpus = 4", "machine"),
            ("", "vm"),
            (&MIN.replace("vcpus = 1", "vcpus = \"one\""), "vm[0].vcpus"),
            (&MIN.replace("vcpus = 1", "vcpus = -1"), "vm[0].vcpus"),
            (&MIN.replace("vcpus = 1", "vcpus = 300"), "vm[0].vcpus"),
            (&MIN.replace("vcpus = 1\n", ""), "vm[0].vcpus"),
            (&MIN.replace("name = \"a\"\n", ""), "vm[0].name"),
            (&MIN.replace("\"32M\"", "\"32MB\""), "vm[0].memory_size"),
            (&MIN.replace("\"32M\"", "32.0"), "vm[0].memory_size"),
            (&MIN.replace("\"32M\"", "\"3M\""), "vm[0].memory_size"),
            (&MIN.replace("@testguest", "@../etc"), "vm[0].kernel"),
            (&MIN.replace("@testguest", ""), "vm[0].kernel"),
            (&with("cpu_affinity = 1"), "vm[0].cpu_affinity"),
            (&with("cpu_affinity = [\"0\"]"), "vm[0].cpu_affinity"),
            (&with("cpu_affinity = [0, 1]"), "vm[0].cpu_affinity"),
            (&with("cpu_affinity = [4294967296]"), "vm[0].cpu_affinity"),
            (&with("devices = [\"virtio-net\"]"), "vm[0].devices"),
            (&with("devices = [1]"), "vm[0].devices"),
            (&with("devices = [\"pl011\", \"pl011\"]"), "vm[0].devices"),
            (&with("cmdline = \"a\\u0000b\""), "vm[0].cmdline"),
            (&with("initrd_load = 0x4100_0000"), "vm[0].initrd_load"),
            (&with("entry = 0x4008_0002"), "vm[0].entry"),
            (&with("kernel_load = 0x41f0_0000"), "vm[0].kernel_load"),
            (&with("kernel_load = 0x5000_0000"), "vm[0].kernel_load"),
            (&with("memory_base = 0x0900_0000"), "vm[0].memory_base"),
            (&with("memory_base = 0x4010_0000"), "vm[0].memory_base"),
            (&format!("{MIN}{MIN}"), "vm[1].name"),
        ];
        for (text, key) in cases {
            let e = err(text);
            assert_eq!(e.key.as_deref(), Some(key), "{text}\n=> {e}");
        }
    }

    #[test]
    fn vm_count_limits() {
        let vm = |i: usize| MIN.replace("\"a\"", &format!("\"vm{i}\"")).replace("32M", "4M");
        let sixteen: String = (0..16).map(vm).collect();
        assert_eq!(ok(&sixteen).vms.len(), 16);
        let seventeen: String = (0..17).map(vm).collect();
        assert_eq!(err(&seventeen).key.as_deref(), Some("vm"));
    }

    #[test]
    fn total_memory_is_checked_across_vms() {
        let vm = |name: &str, extra: &str| {
            MIN.replace("\"a\"", &format!("\"{name}\"")).replace("32M", "512M") + extra + "\n"
        };
        let e = err(&(vm("a", "") + &vm("b", "")));
        assert_eq!(e.key.as_deref(), Some("vm[1].memory_size"));
        assert_eq!(e.line, Some(10));
        assert!(
            e.message.starts_with(
                "the VMs started at boot (vm[0] (\"a\"), vm[1] (\"b\")) need more than the 960 \
                 MiB the machine has for guests"
            ),
            "{e}"
        );
        assert!(e.message.contains("set autostart = false on some"), "{e}");
        assert!(e.message.contains("give QEMU more RAM with -m"), "{e}");

        // 1.5 GiB of VMs on a machine with 960 MiB for guests: only web starts at boot.
        let later = "autostart = false";
        let c = ok(&(vm("web", "") + &vm("db", later) + &vm("batch", later)));
        let at_boot: Vec<_> = c.vms.iter().map(|vm| vm.autostart).collect();
        assert_eq!(at_boot, [true, false, false]);
        // The VMs at boot are the ones summed and named.
        let e = err(&(vm("web", "") + &vm("db", later) + &vm("batch", "")));
        assert_eq!(e.key.as_deref(), Some("vm[2].memory_size"));
        assert!(e.message.contains("(vm[0] (\"web\"), vm[2] (\"batch\"))"), "{e}");
        // Each VM must still fit alone.
        let big = MIN.replace("32M", "1G") + later + "\n";
        let e = err(&(vm("web", "") + &big));
        assert_eq!(e.key.as_deref(), Some("vm[1].memory_size"));
    }

    #[test]
    fn spec_resolves_defaults_from_the_bytes() {
        let c = ok(&with("cpu_affinity = [3]\ninitrd = \"@rd\"\ncmdline = \"x\""));
        let kernel = vec![1u8; 5000];
        let rd = vec![2u8; 3 << 20];
        let s = c.spec(0, &kernel, Some(&rd), &[]).unwrap();
        assert_eq!(s.kernel.load, Ipa(0x4008_0000));
        assert_eq!(s.entry, Ipa(0x4008_0000));
        assert_eq!(s.initrd.unwrap().load, Ipa(0x41b0_0000));
        assert_eq!(s.cpu_affinity[0], Some(3));
        assert_eq!(s.cmdline, "x");

        // A kernel that grows into the device tree is caught now.
        let big = vec![1u8; 31 << 20];
        assert_eq!(
            c.spec(0, &big, Some(&rd), &[]).unwrap_err().key.as_deref(),
            Some("vm[0].kernel")
        );
        assert_eq!(c.spec(0, &kernel, None, &[]).unwrap_err().key.as_deref(), Some("vm[0].initrd"));
        assert_eq!(
            c.spec(0, &[], Some(&rd), &[]).unwrap_err().key.as_deref(),
            Some("vm[0].kernel")
        );
        // The error points at the line of the key, or of [[vm]] if defaulted.
        let e = c.spec(0, &big, Some(&rd), &[]).unwrap_err();
        assert_eq!(e.line, Some(5));
        let e = c.spec(0, &vec![1u8; 29 << 20], Some(&rd), &[]).unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].initrd"), Some(7)));
    }

    /// A scratch directory for image files, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("vmconfig-test-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn disks_nics_and_passthrough() {
        let dir = TempDir::new("extras");
        std::fs::write(dir.0.join("d.img"), [7u8; 1000]).unwrap();
        let text = with(
            r#"devices = ["pl011", "virtio-rng", "virtio-console"]
passthrough = ["/pl031@9010000", "/soc/gpio@0"]
pmu = "raw"

[[vm.disk]]
size = "16M"

[[vm.disk]]
image = "d.img"
read_only = true

[[vm.nic]]
network = "lan0"

[[vm.nic]]
network = "lan1"
mac = "02:AB:cd:00:00:01"
mtu = 9000
"#,
        );
        let c = parse(&text, &dir.0.join("x.toml"), &M).unwrap_or_else(|e| panic!("{e}"));
        let vm = &c.vms[0];
        let blank =
            DiskConfig { image: None, size: Some(16 << 20), read_only: false, partition: None };
        let file = DiskConfig {
            image: Some(dir.0.join("d.img")),
            size: None,
            read_only: true,
            partition: None,
        };
        assert_eq!(vm.disks, [blank, file]);
        assert_eq!(
            vm.nics,
            [
                NicConfig { network: "lan0".to_owned(), mac: [0x52, 0x54, 0, 0, 0, 0], mtu: None },
                NicConfig {
                    network: "lan1".to_owned(),
                    mac: [2, 0xab, 0xcd, 0, 0, 1],
                    mtu: Some(9000)
                },
            ]
        );
        let paths: Vec<_> = vm.passthrough.iter().map(|p| (p.path.as_str(), p.dma)).collect();
        assert_eq!(
            paths,
            [
                ("/pl031@9010000", PassthroughDma::Unstated),
                ("/soc/gpio@0", PassthroughDma::Unstated)
            ]
        );

        let kernel = vec![1u8; 4096];
        let image = std::fs::read(dir.0.join("d.img")).unwrap();
        let s = c.spec(0, &kernel, None, &[None, Some(&image)]).unwrap();
        // The default capacity is the image rounded up to a sector.
        let capacities: Vec<_> = s.disks.iter().map(|d| (d.capacity, d.read_only)).collect();
        assert_eq!(capacities, [(16 << 20, false), (1024, true)]);
        assert!(s.disks[0].image.is_empty());
        assert_eq!(s.disks[1].image, &image[..]);
        assert_eq!(
            s.nics[1],
            NicSpec { network: "lan1", mac: [2, 0xab, 0xcd, 0, 0, 1], mtu: Some(9000) }
        );
        assert_eq!(s.passthrough, [Passthrough::from("/pl031@9010000"), "/soc/gpio@0".into()]);
        assert_eq!(s.virtio_devices().count(), 6);
        assert_eq!((vm.pmu, s.pmu), (PmuMode::Raw, PmuMode::Raw));

        // The images supplied must match the config's disks.
        let key = |r: Result<VmSpec<'_>, ConfigError>| r.unwrap_err().key.unwrap();
        assert_eq!(key(c.spec(0, &kernel, None, &[])), "vm[0].disk");
        assert_eq!(key(c.spec(0, &kernel, None, &[None, None])), "vm[0].disk[1].image");
        assert_eq!(key(c.spec(0, &kernel, None, &[None, Some(&[])])), "vm[0].disk[1].image");
        assert_eq!(
            key(c.spec(0, &kernel, None, &[Some(&image), Some(&image)])),
            "vm[0].disk[0].image"
        );
        // A file that grew past its size since loading is caught.
        let sized =
            parse(&text.replace("read_only = true", "size = 1024"), &dir.0.join("x.toml"), &M)
                .unwrap();
        let grown = vec![7u8; 1100];
        assert_eq!(key(sized.spec(0, &kernel, None, &[None, Some(&grown)])), "vm[0].disk[1].size");

        // Files are probed at load: missing, empty, a directory, too big a default.
        let e = parse(&text.replace("d.img", "nope.img"), &dir.0.join("x.toml"), &M).unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].disk[1].image"), Some(14)));
        assert!(e.message.contains("nope.img") && !e.message.contains("@name"), "{e}");
        std::fs::write(dir.0.join("empty.img"), []).unwrap();
        let e = parse(&text.replace("d.img", "empty.img"), &dir.0.join("x.toml"), &M).unwrap_err();
        assert!(e.message.contains("is empty; for a blank disk"), "{e}");
        let e = parse(&text.replace("d.img", "."), &dir.0.join("x.toml"), &M).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
    }

    #[test]
    fn partition_disks() {
        let dir = TempDir::new("partition");
        std::fs::write(dir.0.join("seed.img"), [7u8; 1000]).unwrap();
        let origin = dir.0.join("x.toml");
        let vm = |name: &str, extra: &str| {
            MIN.replace("\"a\"", &format!("\"{name}\"")) + "\n" + extra + "\n"
        };
        let disks = "[[vm.disk]]\nsize = \"16M\"\n\
                     [[vm.disk]]\npartition = \"web-data\"\nsize = \"4G\"\nimage = \"seed.img\"\n\
                     [[vm.disk]]\npartition = \"web-seed\"\nimage = \"seed.img\"\nread_only = true\n";
        let text =
            vm("web", disks) + &vm("db", "[[vm.disk]]\npartition = \"db_0\"\nsize = \"900M\"");
        let c = parse(&text, &origin, &M).unwrap_or_else(|e| panic!("{e}"));
        let web = &c.vms[0];
        assert_eq!(web.disks[0].partition, None);
        assert_eq!(web.disks[1].partition.as_deref(), Some("web-data"));
        assert_eq!(web.disks[1].size, Some(4 << 30));

        // What the build tool lays out: every partition disk, in file order, with its
        // capacity (a default one from the image) and its image file.
        let seed = dir.0.join("seed.img");
        let parts = c.partition_disks().unwrap();
        let want = [
            PartitionDisk {
                vm: 0,
                disk: 1,
                name: "web-data",
                capacity: 4 << 30,
                image: Some(&seed),
                read_only: false,
            },
            PartitionDisk {
                vm: 0,
                disk: 2,
                name: "web-seed",
                capacity: 1024,
                image: Some(&seed),
                read_only: true,
            },
            PartitionDisk {
                vm: 1,
                disk: 0,
                name: "db_0",
                capacity: 900 << 20,
                image: None,
                read_only: false,
            },
        ];
        assert_eq!(parts, want);

        // The spec carries the name and no image bytes; the RAM disk is as before.
        let kernel = vec![1u8; 4096];
        let s = c.spec(0, &kernel, None, &[None, None, None]).unwrap();
        let got: Vec<_> =
            s.disks.iter().map(|d| (d.capacity, d.image.len(), d.read_only, d.partition)).collect();
        assert_eq!(
            got,
            [
                (16 << 20, 0, false, None),
                (4 << 30, 0, false, Some("web-data")),
                (1024, 0, true, Some("web-seed"))
            ]
        );
        // Bytes for a partition disk are refused: they would never reach it.
        let e = c.spec(0, &kernel, None, &[None, Some(&kernel), None]).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("vm[0].disk[1].image"));
        assert!(e.message.contains("pass None"), "{e}");
        // The package carries the names (and a 4 GiB disk that takes no RAM) and decodes.
        let specs = [s, c.spec(1, &kernel, None, &[None]).unwrap()];
        let package = crate::encode_package(&specs, &c.scheduler, None, &M).unwrap();
        let back = crate::decode_package(&package, &M).unwrap();
        assert_eq!(back.vms, specs);
        assert_eq!(back.vms[1].disks[0].partition, Some("db_0"));

        // The errors: each names the key and the fix.
        let bad = |text: &str| parse(text, &origin, &M).unwrap_err();
        let e = bad(&vm("web", "[[vm.disk]]\npartition = \"Web Data\"\nsize = \"1M\""));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].disk[0].partition"), Some(8)));
        assert!(e.message.contains("use 1 to 36 characters from a-z, 0-9, '_' and '-'"), "{e}");
        let long = format!("[[vm.disk]]\npartition = \"{}\"\nsize = \"1M\"", "p".repeat(37));
        assert_eq!(bad(&vm("web", &long)).key.as_deref(), Some("vm[0].disk[0].partition"));
        let e = bad(&vm("web", "[[vm.disk]]\npartition = \"\"\nsize = \"1M\""));
        assert_eq!(e.key.as_deref(), Some("vm[0].disk[0].partition"));
        let e = bad(&vm("web", "[[vm.disk]]\npartition = 1\nsize = \"1M\""));
        assert_eq!(e.key.as_deref(), Some("vm[0].disk[0].partition"));
        assert!(e.message.contains("expected a string"), "{e}");
        let e = bad(&vm("web", "[[vm.disk]]\npartition = \"p\""));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].disk[0]"), Some(7)));
        assert!(e.message.contains("has neither image nor size"), "{e}");
        let e = bad(&vm("web", "[[vm.disk]]\npartition = \"p\"\nsize = \"2T\""));
        assert_eq!(e.key.as_deref(), Some("vm[0].disk[0].size"));
        assert!(e.message.contains("more than the 1 TiB a disk may have"), "{e}");
        let e = bad(&vm("web", "[[vm.disk]]\npartition = \"p\"\nsize = 1000"));
        assert_eq!(e.key.as_deref(), Some("vm[0].disk[0].size"));
        let e = bad(&vm("web", "[[vm.disk]]\npartition = \"p\"\nimage = \"nope.img\""));
        assert_eq!(e.key.as_deref(), Some("vm[0].disk[0].image"));
        // One partition per disk, across VMs; the later disk is blamed.
        let p = "[[vm.disk]]\npartition = \"shared\"\nsize = \"1M\"";
        let e = bad(&(vm("web", p) + &vm("db", p)));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[1].disk[0].partition"), Some(17)));
        assert!(e.message.contains("already the partition of vm[0] (\"web\") disk[0]"), "{e}");
        let e = bad(&vm("web", &format!("{p}\n{p}")));
        assert_eq!(e.key.as_deref(), Some("vm[0].disk[1].partition"));
        // A RAM disk still counts against RAM and is capped at 1 GiB.
        let e = bad(&vm("web", "[[vm.disk]]\nsize = \"4G\""));
        assert!(e.message.contains("more than the 1 GiB"), "{e}");

        // A disk error found later (laying the machine disk out) names the key's line.
        let e = c.disk_error(0, 1, "partition", "too small; fix it".to_owned());
        assert_eq!(
            e.to_string(),
            format!("{}:10: vm[0].disk[1].partition: too small; fix it", origin.display())
        );
    }

    /// The passthrough forms: a path string (nothing said of DMA), an inline table and
    /// `[[vm.passthrough]]` tables with `dma`, mixed; and what is refused, with the fix.
    #[test]
    fn passthrough_forms_and_dma() {
        let c = ok(&with(
            "passthrough = [\"/pl031@9010000\", { path = \"/flash@0\", dma = \"none\" }, \
             { path = \"/fw-cfg@9020000\", dma = \"unprotected\" }, { path = \"/pl061@9030000\" }]",
        ));
        let got: Vec<_> = c.vms[0].passthrough.iter().map(|p| (p.path.as_str(), p.dma)).collect();
        assert_eq!(
            got,
            [
                ("/pl031@9010000", PassthroughDma::Unstated),
                ("/flash@0", PassthroughDma::None),
                ("/fw-cfg@9020000", PassthroughDma::Unprotected),
                ("/pl061@9030000", PassthroughDma::Unstated),
            ]
        );
        let s = c.spec(0, &[1u8; 4096], None, &[]).unwrap();
        assert_eq!(
            s.passthrough[2],
            Passthrough { path: "/fw-cfg@9020000", dma: PassthroughDma::Unprotected }
        );

        // The array-of-tables form is the same array.
        let c = ok(&with(
            "\n[[vm.passthrough]]\npath = \"/fw-cfg@9020000\"\ndma = \"unprotected\"\n\
             [[vm.passthrough]]\npath = \"/pl031@9010000\"",
        ));
        let got: Vec<_> = c.vms[0].passthrough.iter().map(|p| (p.path.as_str(), p.dma)).collect();
        assert_eq!(
            got,
            [
                ("/fw-cfg@9020000", PassthroughDma::Unprotected),
                ("/pl031@9010000", PassthroughDma::Unstated)
            ]
        );

        // Refused: a word that is not a DMA setting, a table without its path, an unknown key,
        // a bad path in a table, the same device twice in both forms.
        let e = err(&with("passthrough = [{ path = \"/x@0\", dma = \"yes\" }]"));
        assert_eq!(e.key.as_deref(), Some("vm[0].passthrough[0].dma"));
        assert!(
            e.message.contains("dma = \"none\"") && e.message.contains("\"unprotected\""),
            "{e}"
        );
        assert!(e.message.contains("all host memory"), "{e}");
        let e = err(&with("passthrough = [{ dma = \"none\" }]"));
        assert_eq!(e.key.as_deref(), Some("vm[0].passthrough[0].path"));
        let e = err(&with("passthrough = [{ path = \"/x@0\", iommu = true }]"));
        assert_eq!(e.key.as_deref(), Some("vm[0].passthrough[0].iommu"));
        assert!(e.message.contains("allowed keys are path, dma"), "{e}");
        let e = err(&with("passthrough = [{ path = \"x@0\", dma = \"none\" }]"));
        assert_eq!(e.key.as_deref(), Some("vm[0].passthrough"));
        let e = err(&with("passthrough = [\"/x@0\", { path = \"/x@0\", dma = \"none\" }]"));
        assert!(e.message.contains("listed twice"), "{e}");
        let e = err(&with("passthrough = [3]"));
        assert!(e.message.contains("{ path, dma }"), "{e}");
    }

    #[test]
    fn errors_in_sub_tables() {
        let disk = |body: &str| with(&format!("[[vm.disk]]\n{body}"));
        let nic = |body: &str| with(&format!("[[vm.nic]]\n{body}"));
        let nics = |n: usize| {
            (0..n).map(|j| format!("[[vm.nic]]\nnetwork = \"n{j}\"\n")).collect::<String>()
        };
        let disks = |n: usize| "[[vm.disk]]\nsize = \"1M\"\n".repeat(n);
        let cases = [
            (disk("size = \"1000\""), "vm[0].disk[0].size"),
            (disk("size = 1000"), "vm[0].disk[0].size"),
            (disk("size = \"16MB\""), "vm[0].disk[0].size"),
            (disk("size = \"2G\""), "vm[0].disk[0].size"),
            (disk("size = 0"), "vm[0].disk[0].size"),
            (disk("size = true"), "vm[0].disk[0].size"),
            (disk("size = \"1M\"\nread_only = \"yes\""), "vm[0].disk[0].read_only"),
            (disk("read_only = true"), "vm[0].disk[0]"),
            (disk(""), "vm[0].disk[0]"),
            (disk("image = \"@testguest\""), "vm[0].disk[0].image"),
            (disk("image = \"\""), "vm[0].disk[0].image"),
            (disk("image = 1"), "vm[0].disk[0].image"),
            (disk("image = \"nope.img\""), "vm[0].disk[0].image"),
            (with("[vm.disk]\nsize = \"1M\""), "vm[0].disk"),
            (with("disk = 1"), "vm[0].disk"),
            (with("disk = [1]"), "vm[0].disk"),
            (with(&disks(5)), "vm[0].disk"),
            (with(&format!("{}[[vm.disk]]\nsize = 1000", disks(1))), "vm[0].disk[1].size"),
            (nic("mac = \"52:54:00:12:34:56\""), "vm[0].nic[0].network"),
            (nic("network = \"LAN 0\""), "vm[0].nic[0].network"),
            (nic("network = 0"), "vm[0].nic[0].network"),
            (nic("network = \"a\"\nmac = \"52:54:00:12:34\""), "vm[0].nic[0].mac"),
            (nic("network = \"a\"\nmac = \"52-54-00-12-34-56\""), "vm[0].nic[0].mac"),
            (nic("network = \"a\"\nmac = \"52:54:00:12:34:5g\""), "vm[0].nic[0].mac"),
            (nic("network = \"a\"\nmac = \"52:54:00:12:34:567\""), "vm[0].nic[0].mac"),
            (nic("network = \"a\"\nmac = \"52:54:00:12:34:56:78\""), "vm[0].nic[0].mac"),
            (nic("network = \"a\"\nmac = \"01:00:5e:00:00:01\""), "vm[0].nic[0].mac"),
            (nic("network = \"a\"\nmac = \"00:00:00:00:00:00\""), "vm[0].nic[0].mac"),
            (nic("network = \"a\"\nmac = 5"), "vm[0].nic[0].mac"),
            (with("nic = {}"), "vm[0].nic"),
            (with(&nics(5)), "vm[0].nic"),
            (with("passthrough = \"/a\""), "vm[0].passthrough"),
            (with("passthrough = [1]"), "vm[0].passthrough"),
            (with("passthrough = [\"pl031@9010000\"]"), "vm[0].passthrough"),
            (with("passthrough = [\"/a/\"]"), "vm[0].passthrough"),
            (with("passthrough = [\"/a\", \"/a\"]"), "vm[0].passthrough"),
            (with("passthrough = [\"/a\", \"/b\", \"/c\", \"/d\", \"/e\"]"), "vm[0].passthrough"),
            (
                with(&format!("devices = [\"virtio-rng\"]\n{}{}", nics(4), disks(4))),
                "vm[0].devices",
            ),
            (with("devices = [\"virtio-rng\", \"virtio-rng\"]"), "vm[0].devices"),
        ];
        for (text, key) in &cases {
            let e = err(text);
            assert_eq!(e.key.as_deref(), Some(*key), "{text}\n=> {e}");
            assert!(e.message.contains("; "), "no fix offered: {e}");
        }
        // Every new key is accepted in its good form.
        let good =
            format!("devices = [\"virtio-rng\", \"virtio-console\"]\n{}{}", nics(3), disks(3));
        assert_eq!(ok(&with(&good)).vms[0].disks.len(), 3);
    }

    #[test]
    fn sub_table_errors_name_the_line() {
        // Lines: MIN is 1-5, then the disks.
        let text = with("[[vm.disk]]\nsize = \"16M\"\n[[vm.disk]]\nread_only = true\nsize = 1000");
        let e = err(&text);
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].disk[1].size"), Some(10)));
        // A missing key points at its table's header.
        let e = err(&with("[[vm.disk]]\nsize = \"16M\"\n[[vm.disk]]\nread_only = true"));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].disk[1]"), Some(8)));
        let e = err(&with("\n[[vm.nic]]\nmac = \"02:00:00:00:00:01\""));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].nic[0].network"), Some(7)));
        assert!(e.message.contains("add e.g. network = \"lan0\""), "{e}");
        // A rule checked after parsing names the key's line...
        let e = err(&with("[[vm.nic]]\nnetwork = \"a\"\nmac = \"03:00:00:00:00:01\""));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].nic[0].mac"), Some(8)));
        // ...or, for a defaulted key, the table's header: vm1's default MAC
        // is the one vm0 took.
        let vm0 = with("[[vm.nic]]\nnetwork = \"a\"\nmac = \"52:54:00:00:01:00\"");
        let vm1 = MIN.replace("\"a\"", "\"b\"") + "[[vm.nic]]\nnetwork = \"a\"\n";
        let e = err(&format!("{vm0}{vm1}"));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[1].nic[0].mac"), Some(14)));
        assert!(e.message.contains("already the MAC of vm[0] (\"a\") nic[0]"), "{e}");
        // Misspelt keys in a sub-table get a suggestion.
        let e = err(&with("[[vm.disk]]\nsise = \"16M\""));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].disk[0].sise"), Some(7)));
        assert!(
            e.message.contains(
                "did you mean `size`? allowed keys are image, size, read_only, partition"
            )
        );
        let e = err(&with("[[vm.nic]]\nnetwork = \"a\"\nmacaddr = \"02:00:00:00:00:01\""));
        assert!(e.message.contains("did you mean `mac`?"), "{e}");
        // An MTU out of range, and one a network's other NIC does not share.
        let e = err(&with("[[vm.nic]]\nnetwork = \"a\"\nmtu = 70000"));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].nic[0].mtu"), Some(8)));
        assert!(e.message.contains("70000 is not a usable MTU; use 68 to 65535"), "{e}");
        let e = err(&with("[[vm.nic]]\nnetwork = \"a\"\nmtu = 20"));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].nic[0].mtu"), Some(8)));
        let two = "[[vm.nic]]\nnetwork = \"a\"\nmtu = 9000\n[[vm.nic]]\nnetwork = \"a\"\n";
        let e = err(&with(two));
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].nic[1].mtu"), Some(9)));
        assert!(e.message.contains("MTU 1500 differs from the 9000 of vm[0]"), "{e}");
    }

    #[test]
    fn across_vms() {
        let vm =
            |name: &str, extra: &str| MIN.replace("\"a\"", &format!("\"{name}\"")) + extra + "\n";
        let pt = "passthrough = [\"/pl031@9010000\"]\n";
        let e = err(&(vm("web", pt) + &vm("db", pt)));
        assert_eq!(e.key.as_deref(), Some("vm[1].passthrough"));
        assert!(e.message.contains("already assigned to vm[0] (\"web\")"), "{e}");
        let mac = "[[vm.nic]]\nnetwork = \"lan0\"\nmac = \"02:00:00:00:00:01\"\n";
        let e = err(&(vm("web", mac) + &vm("db", mac)));
        assert_eq!(e.key.as_deref(), Some("vm[1].nic[0].mac"));
        // Default MACs differ per VM and NIC.
        let nic = "[[vm.nic]]\nnetwork = \"lan0\"\n[[vm.nic]]\nnetwork = \"lan0\"\n";
        let c = ok(&(vm("web", nic) + &vm("db", nic)));
        assert_eq!(c.vms[1].nics[1].mac, [0x52, 0x54, 0, 0, 1, 1]);
        // Disks count against the machine's RAM (960 MiB for guests here), for one VM...
        let e = err(&(vm("web", "") + &vm("db", "[[vm.disk]]\nsize = \"1G\"")));
        assert_eq!(e.key.as_deref(), Some("vm[1].memory_size"));
        assert!(e.message.starts_with("the VM's RAM and disks add up to 1056 MiB"), "{e}");
        // ...and for the VMs started at boot together.
        let disk = "[[vm.disk]]\nsize = \"512M\"";
        let e = err(&(vm("web", disk) + &vm("db", disk)));
        assert_eq!(e.key.as_deref(), Some("vm[1].memory_size"));
        assert!(e.message.contains("their RAM and disks add up to 1088 MiB"), "{e}");
    }

    #[test]
    fn device_kinds() {
        let c = ok(&with("devices = [\"virtio-console\", \"pl011\", \"virtio-rng\"]"));
        assert_eq!(
            c.vms[0].devices,
            [DeviceKind::VirtioConsole, DeviceKind::Pl011, DeviceKind::VirtioRng]
        );
        let e = err(&with("devices = [\"virtio-net\"]"));
        assert!(e.message.contains("(a NIC is a [[vm.nic]] table)"), "{e}");
        assert!(e.message.ends_with("known kinds: pl011, virtio-console, virtio-rng"), "{e}");
        let e = err(&with("devices = [\"virtio-blk\"]"));
        assert!(e.message.contains("[[vm.disk]]"), "{e}");
    }

    #[test]
    fn macs() {
        assert_eq!(parse_mac("52:54:00:12:34:56"), Some([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        assert_eq!(parse_mac("FF:ff:0A:0b:00:01"), Some([0xff, 0xff, 0x0a, 0x0b, 0, 1]));
        for bad in [
            "",
            "52:54:00:12:34",
            "52:54:00:12:34:56:",
            "5:54:00:12:34:56",
            "+5:54:00:12:34:56",
            "52:54:00:12:34:5g",
            " 52:54:00:12:34:56",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad:?}");
        }
        assert_eq!(default_mac(3, 1), [0x52, 0x54, 0, 0, 3, 1]);
        assert_eq!(disk_capacity(None, 1000), 1024);
        assert_eq!(disk_capacity(None, 1024), 1024);
        assert_eq!(disk_capacity(Some(4096), 1000), 4096);
        assert_eq!(disk_capacity(None, u64::MAX), u64::MAX);
    }

    #[test]
    fn suggestions() {
        assert_eq!(closest("sise", DISK_KEYS), Some("size"));
        assert_eq!(closest("readonly", DISK_KEYS), Some("read_only"));
        assert_eq!(closest("macaddr", NIC_KEYS), Some("mac"));
        assert_eq!(closest("disks", VM_KEYS), Some("disk"));
        assert_eq!(closest("memroy_size", VM_KEYS), Some("memory_size"));
        assert_eq!(closest("cpus", VM_KEYS), Some("vcpus"));
        assert_eq!(closest("initrd_addr", VM_KEYS), Some("initrd"));
        assert_eq!(closest("qwertyuiop", VM_KEYS), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
