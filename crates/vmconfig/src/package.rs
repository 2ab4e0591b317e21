//! The package: the VMs and their images, appended to the hypervisor's image.
//!
//! A small hand-written little-endian format rather than a serde encoding:
//! the images must sit at 4 KiB-aligned offsets so the hypervisor can copy them
//! page by page (or map them), and the decoder must be auditable line by line
//! because it parses untrusted bytes at EL2.
//!
//! ```text
//! offset  size  field (all integers little-endian)
//! header (PACKAGE_HEADER_LEN = 56 bytes)
//!      0     8  magic "ARMHVPKG"
//!      8     4  version (PACKAGE_VERSION = 11)
//!     12     4  vm_count, 1..=MAX_VMS
//!     16     8  total_len: bytes from the magic to the end of the last image,
//!               a multiple of 4 KiB
//!     24     8  blobs_off: where the image area starts, a multiple of 4 KiB
//!     32     8  strings_off: where the string area starts
//!     40     4  scheduler quantum in ms
//!     44     4  interrupt distributor: bit 0 = configured, bit 1 = enabled,
//!               bit 2 = spread over every other CPU; other bits zero
//!     48     4  uplink_off \ the network whose uplink the machine's NIC
//!     52     4  uplink_len / is, a string as for a name; both zero: none
//! vm_count records of RECORD_LEN = 184 bytes, from offset 56:
//!      0     4  name_off     \ UTF-8 strings, inside the string area
//!      4     4  name_len     | [strings_off, blobs_off)
//!      8     4  cmdline_off  |
//!     12     4  cmdline_len  /
//!     16     1  vcpus
//!     17     1  device_count, <= MAX_DEVICES
//!     18     1  flags: bit 0 = has an initrd, bit 1 = the physical PMU
//!               (`pmu = "raw"`), bit 2 = no PMU (`pmu = "off"`);
//!               neither: a virtual PMU; bit 3 = `gic = "v2"`, bit 4 =
//!               `gic = "v3"`, neither: the host's GIC; bits 1 and 2
//!               not both, bits 3 and 4 not both; other bits zero
//!     19     1  lifecycle: bit 0 = started at boot (`autostart`), bit 1 =
//!               a control VM, bits 2, 3 and 4 = restart (else stop) on
//!               power-off, on reboot and on a crash; other bits zero
//!     20    32  cpu_affinity: u32 per vCPU slot, u32::MAX = not pinned
//!     52     8  device codes, device_count used, the rest zero
//!     60     4  zero
//!     64     8  memory start (IPA)
//!     72     8  memory size
//!     80     8  entry (IPA)
//!     88     8  zero
//!     96    32  kernel: load IPA, mem_size, data_off, data_len
//!    128    32  initrd: same; all zero without an initrd
//!    160     4  extras_off: the VM's extras, inside the extras area
//!               [end of the records, strings_off)
//!    164     1  disk_count, <= MAX_DISKS
//!    165     1  nic_count, <= MAX_NICS
//!    166     1  passthrough_count, <= MAX_PASSTHROUGH
//!    167     1  zero
//!    168     4  weight
//!    172     4  cap in percent of one CPU, 0 = none
//!    176     4  real-time budget in µs  \ both 0: not real-time
//!    180     4  real-time period in µs  /
//! the extras area: at each VM's extras_off, its disk entries, then its NIC
//! entries, then its passthrough entries, as many as the record counts:
//!   disk, DISK_ENTRY_LEN = 40 bytes
//!      0     8  capacity in bytes
//!      8     8  image_off \ in the image area, as for a kernel;
//!     16     8  image_len / both zero for a blank disk and for a disk
//!                           on a partition (its image is in the partition)
//!     24     1  flags: bit 0 = read-only; other bits zero
//!     25     7  zero
//!     32     4  partition_off \ a string, as for the name: the machine
//!     36     4  partition_len / disk's GPT partition that holds the disk;
//!                               both zero for a RAM disk
//!   NIC, NIC_ENTRY_LEN = 16 bytes
//!      0     6  MAC address
//!      6     2  mtu (0: none announced)
//!      8     4  network_off \ a string, as for the name
//!     12     4  network_len /
//!   passthrough, PATH_ENTRY_LEN = 12 bytes
//!      0     4  path_off \ a string: a host device-tree path
//!      4     4  path_len /
//!      8     1  dma: 0 unstated, 1 "none", 2 "unprotected"
//!      9     3  zero
//! then the string area, zero padding to blobs_off, and the images (kernels,
//! initrds, disk images), each at a 4 KiB-aligned offset and zero-padded to
//! the next 4 KiB.
//! ```
//!
//! Version 2 added `strings_off`, the record's bytes 160..168 and the extras
//! area, so a VM's variable-length lists never change the record's size.
//! Version 3 added the PMU flag. Version 4 added the scheduler's quantum and
//! the record's bytes 168..184 (weight, cap, real-time server). Version 5 added the
//! interrupt distributor's word. Version 7 added the disk entry's partition
//! name (bytes 32..40) and the uplink (header bytes 48..56). Version 8 added
//! the passthrough entry's `dma` (bytes 8..12). Version 9 made a virtual PMU
//! the default (flag bit 2 for none). Version 10 added the lifecycle byte
//! (record byte 19: autostart, control, the restart policies). Version 11
//! added the GIC version a VM pins (flag bits 3 and 4).
//!
//! Reserved fields must be zero so that a package from a different format
//! revision with the same version number is refused instead of misread. Two
//! VMs with identical images (the default config's two test guests) share one
//! copy, as do identical disk images; apart from that, images must not
//! overlap.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use addr::Ipa;
use addr::IpaRange;

use crate::rules::{Violation, check_count, check_network, check_scheduler, check_vms};
use crate::spec::{
    DiskSpec, IrqDistSpec, LoadImage, NicSpec, Passthrough, PassthroughDma, PmuMode, Policies,
    Policy, RealTimeSpec, SchedSpec, Spread, VmSched, VmSpec,
};
use crate::{
    DeviceKind, GicVersion, MAX_DEVICES, MAX_DISKS, MAX_NICS, MAX_PASSTHROUGH, MAX_VCPUS, Machine,
};

/// The first bytes of every package.
pub const PACKAGE_MAGIC: [u8; 8] = *b"ARMHVPKG";
/// Bumped on every format change; the hypervisor and its package are built
/// together, so the decoder accepts exactly one version.
pub const PACKAGE_VERSION: u32 = 11;
/// Alignment of every image inside the package and of the package's length.
/// The build tool must also place the package itself at a 4 KiB-aligned
/// address for the images to be page aligned in memory.
pub const PACKAGE_ALIGN: u64 = addr::PAGE_SIZE;
/// Bytes of the fixed header; [`package_len`] needs this many.
pub const PACKAGE_HEADER_LEN: usize = 56;

const RECORD_LEN: usize = 184;
const DISK_ENTRY_LEN: usize = 40;
const NIC_ENTRY_LEN: usize = 16;
const PATH_ENTRY_LEN: usize = 12;
const FLAG_INITRD: u8 = 1;
const FLAG_PMU_RAW: u8 = 2;
const FLAG_PMU_OFF: u8 = 4;
const FLAG_GIC_V2: u8 = 8;
const FLAG_GIC_V3: u8 = 16;
const DISK_READ_ONLY: u8 = 1;
const LIFE_AUTOSTART: u8 = 1;
const LIFE_CONTROL: u8 = 2;
const LIFE_RESTART_ON_POWEROFF: u8 = 4;
const LIFE_RESTART_ON_REBOOT: u8 = 8;
const LIFE_RESTART_ON_CRASH: u8 = 16;
const LIFE_BITS: u8 = LIFE_AUTOSTART
    | LIFE_CONTROL
    | LIFE_RESTART_ON_POWEROFF
    | LIFE_RESTART_ON_REBOOT
    | LIFE_RESTART_ON_CRASH;
const UNPINNED: u32 = u32::MAX;

/// Why a package was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackageError {
    /// Fewer bytes were given than the package needs.
    Truncated { need: u64, have: u64 },
    /// No package here (or not the start of one).
    BadMagic,
    /// Built by a different version of the build tool; rebuild both together.
    UnsupportedVersion { found: u32 },
    /// A structural field is out of range: a corrupt package. `vm` is the
    /// record it is in.
    Malformed { vm: Option<usize>, what: &'static str },
    /// Well formed, but a VM breaks a rule (for instance it needs more RAM
    /// than this machine has).
    Invalid(Violation),
}

impl fmt::Display for PackageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackageError::Truncated { need, have } => write!(
                f,
                "VM package truncated: needs {need} bytes, only {have} present; rebuild the image"
            ),
            PackageError::BadMagic => {
                write!(f, "no VM package found (bad magic); rebuild the image with xtask")
            }
            PackageError::UnsupportedVersion { found } => write!(
                f,
                "VM package has format version {found}, this hypervisor reads \
                 {PACKAGE_VERSION}; rebuild the image"
            ),
            PackageError::Malformed { vm: Some(i), what } => {
                write!(f, "VM package corrupt: vm[{i}]: {what}")
            }
            PackageError::Malformed { vm: None, what } => write!(f, "VM package corrupt: {what}"),
            PackageError::Invalid(v) => write!(f, "VM package rejected: {v}"),
        }
    }
}

impl core::error::Error for PackageError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            PackageError::Invalid(v) => Some(v),
            _ => None,
        }
    }
}

impl From<Violation> for PackageError {
    fn from(v: Violation) -> Self {
        PackageError::Invalid(v)
    }
}

/// A decoded package; every VM in it has passed [`check_vms`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package<'a> {
    /// The package's bytes (`total_len` of them), so the hypervisor knows
    /// which memory to keep until the images are copied.
    pub bytes: &'a [u8],
    pub scheduler: SchedSpec,
    pub vms: Vec<VmSpec<'a>>,
    /// The network whose uplink the machine's NIC is (`[[network]]` `uplink = true`).
    pub uplink: Option<&'a str>,
}

/// A string's (offset, length) in the package.
type StrRef = (u32, u32);

/// Where one VM's variable-length parts went.
struct VmRefs {
    name: StrRef,
    cmdline: StrRef,
    networks: Vec<StrRef>,
    paths: Vec<StrRef>,
    /// Per disk, its partition's name; `None` for a RAM disk.
    partitions: Vec<Option<StrRef>>,
    extras_off: usize,
    kernel_off: usize,
    initrd_off: Option<usize>,
    /// Per disk, its image's offset; `None` for a blank disk.
    disk_offs: Vec<Option<usize>>,
}

/// (VM, NIC, network, MTU) of every NIC, for the uplink's rule.
fn nic_networks<'s>(vms: &'s [VmSpec<'_>]) -> Vec<(usize, usize, &'s str, Option<u16>)> {
    let nics = vms.iter().enumerate().flat_map(|(i, vm)| {
        vm.nics.iter().enumerate().map(move |(j, nic)| (i, j, nic.network, nic.mtu))
    });
    nics.collect()
}

fn extras_len(vm: &VmSpec<'_>) -> usize {
    vm.disks.len() * DISK_ENTRY_LEN
        + vm.nics.len() * NIC_ENTRY_LEN
        + vm.passthrough.len() * PATH_ENTRY_LEN
}

/// Encodes VMs into a package, with the network that has the machine's NIC
/// as its `uplink`, after checking them against `machine` so the build fails
/// rather than the boot.
pub fn encode_package(
    vms: &[VmSpec<'_>],
    scheduler: &SchedSpec,
    uplink: Option<&str>,
    machine: &Machine,
) -> Result<Vec<u8>, Violation> {
    // Besides the build-time errors, this bounds every count and string, so
    // the `as u8`/`as u32` casts below cannot truncate.
    check_vms(vms, machine)?;
    check_scheduler(scheduler)?;
    if let Some(name) = uplink {
        check_network(0, name, true, &nic_networks(vms))?;
    }

    // The metadata areas, in order: records, extras, strings.
    let records_end = PACKAGE_HEADER_LEN + vms.len() * RECORD_LEN;
    let strings_off = records_end + vms.iter().map(extras_len).sum::<usize>();
    let mut strings: Vec<u8> = Vec::new();
    let mut add_string = |s: &str| {
        let off = strings_off + strings.len();
        strings.extend_from_slice(s.as_bytes());
        (off as u32, s.len() as u32)
    };
    let mut extras_off = records_end;
    let mut refs: Vec<VmRefs> = vms
        .iter()
        .map(|vm| {
            let r = VmRefs {
                name: add_string(vm.name),
                cmdline: add_string(vm.cmdline),
                networks: vm.nics.iter().map(|nic| add_string(nic.network)).collect(),
                paths: vm.passthrough.iter().map(|p| add_string(p.path)).collect(),
                partitions: vm.disks.iter().map(|d| d.partition.map(&mut add_string)).collect(),
                extras_off,
                kernel_off: 0,
                initrd_off: None,
                disk_offs: Vec::new(),
            };
            extras_off += extras_len(vm);
            r
        })
        .collect();
    let uplink_ref = uplink.map(&mut add_string);
    let blobs_off = align_up(strings_off + strings.len());

    // Lay out the images, sharing identical ones.
    let mut blobs: Vec<(&[u8], usize)> = Vec::new();
    let mut cursor = blobs_off;
    for (vm, r) in vms.iter().zip(&mut refs) {
        r.kernel_off = place(&mut blobs, &mut cursor, vm.kernel.bytes);
        r.initrd_off = vm.initrd.map(|i| place(&mut blobs, &mut cursor, i.bytes));
        r.disk_offs = vm
            .disks
            .iter()
            .map(|d| (!d.image.is_empty()).then(|| place(&mut blobs, &mut cursor, d.image)))
            .collect();
    }
    let total_len = cursor;

    let mut out = vec![0u8; total_len];
    out[0..8].copy_from_slice(&PACKAGE_MAGIC);
    put(&mut out, 8, &PACKAGE_VERSION.to_le_bytes());
    put(&mut out, 12, &(vms.len() as u32).to_le_bytes());
    put(&mut out, 16, &(total_len as u64).to_le_bytes());
    put(&mut out, 24, &(blobs_off as u64).to_le_bytes());
    put(&mut out, 32, &(strings_off as u64).to_le_bytes());
    put(&mut out, 40, &scheduler.quantum_ms.to_le_bytes());
    put(&mut out, 44, &irqdist_word(scheduler.irqdist).to_le_bytes());
    if let Some(uplink) = uplink_ref {
        put_str(&mut out, 48, uplink);
    }

    for (n, (vm, refs)) in vms.iter().zip(&refs).enumerate() {
        let r = PACKAGE_HEADER_LEN + n * RECORD_LEN;
        put_str(&mut out, r, refs.name);
        put_str(&mut out, r + 8, refs.cmdline);
        out[r + 16] = vm.vcpus;
        out[r + 17] = vm.devices.len() as u8;
        let pmu = match vm.pmu {
            PmuMode::Virtual => 0,
            PmuMode::Raw => FLAG_PMU_RAW,
            PmuMode::Off => FLAG_PMU_OFF,
        };
        let gic = match vm.gic {
            None => 0,
            Some(GicVersion::V2) => FLAG_GIC_V2,
            Some(GicVersion::V3) => FLAG_GIC_V3,
        };
        out[r + 18] = if vm.initrd.is_some() { FLAG_INITRD } else { 0 } | pmu | gic;
        out[r + 19] = lifecycle_byte(vm);
        for (slot, cpu) in vm.cpu_affinity.iter().enumerate() {
            put(&mut out, r + 20 + 4 * slot, &cpu.unwrap_or(UNPINNED).to_le_bytes());
        }
        for (slot, dev) in vm.devices.iter().enumerate() {
            out[r + 52 + slot] = dev.code();
        }
        put(&mut out, r + 64, &vm.memory.start.0.to_le_bytes());
        put(&mut out, r + 72, &vm.memory.size.to_le_bytes());
        put(&mut out, r + 80, &vm.entry.0.to_le_bytes());
        put_image(&mut out, r + 96, &vm.kernel, refs.kernel_off);
        if let (Some(initrd), Some(off)) = (&vm.initrd, refs.initrd_off) {
            put_image(&mut out, r + 128, initrd, off);
        }
        put(&mut out, r + 160, &(refs.extras_off as u32).to_le_bytes());
        out[r + 164] = vm.disks.len() as u8;
        out[r + 165] = vm.nics.len() as u8;
        out[r + 166] = vm.passthrough.len() as u8;
        put(&mut out, r + 168, &vm.sched.weight.to_le_bytes());
        put(&mut out, r + 172, &vm.sched.cap.unwrap_or(0).to_le_bytes());
        if let Some(rt) = vm.sched.realtime {
            put(&mut out, r + 176, &rt.budget_us.to_le_bytes());
            put(&mut out, r + 180, &rt.period_us.to_le_bytes());
        }

        let mut e = refs.extras_off;
        for ((disk, off), partition) in vm.disks.iter().zip(&refs.disk_offs).zip(&refs.partitions) {
            put(&mut out, e, &disk.capacity.to_le_bytes());
            if let Some(off) = off {
                put(&mut out, e + 8, &(*off as u64).to_le_bytes());
                put(&mut out, e + 16, &(disk.image.len() as u64).to_le_bytes());
            }
            out[e + 24] = if disk.read_only { DISK_READ_ONLY } else { 0 };
            if let Some(name) = partition {
                put_str(&mut out, e + 32, *name);
            }
            e += DISK_ENTRY_LEN;
        }
        for (nic, &network) in vm.nics.iter().zip(&refs.networks) {
            put(&mut out, e, &nic.mac);
            put(&mut out, e + 6, &nic.mtu.unwrap_or(0).to_le_bytes());
            put_str(&mut out, e + 8, network);
            e += NIC_ENTRY_LEN;
        }
        for (&path, p) in refs.paths.iter().zip(&vm.passthrough) {
            put_str(&mut out, e, path);
            out[e + 8] = p.dma.code();
            e += PATH_ENTRY_LEN;
        }
    }
    out[strings_off..strings_off + strings.len()].copy_from_slice(&strings);
    for (bytes, off) in blobs {
        out[off..off + bytes.len()].copy_from_slice(bytes);
    }
    Ok(out)
}

/// Returns the offset of `bytes` in the image area, appending them at the
/// next 4 KiB boundary unless an identical image is already there.
fn place<'a>(blobs: &mut Vec<(&'a [u8], usize)>, cursor: &mut usize, bytes: &'a [u8]) -> usize {
    if let Some(&(_, off)) = blobs.iter().find(|(b, _)| *b == bytes) {
        return off;
    }
    let off = *cursor;
    *cursor = align_up(off + bytes.len());
    blobs.push((bytes, off));
    off
}

fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    out[at..at + bytes.len()].copy_from_slice(bytes);
}

fn put_str(out: &mut [u8], at: usize, (off, len): StrRef) {
    put(out, at, &off.to_le_bytes());
    put(out, at + 4, &len.to_le_bytes());
}

fn put_image(out: &mut [u8], at: usize, image: &LoadImage<'_>, off: usize) {
    put(out, at, &image.load.0.to_le_bytes());
    put(out, at + 8, &image.mem_size.to_le_bytes());
    put(out, at + 16, &(off as u64).to_le_bytes());
    put(out, at + 24, &(image.bytes.len() as u64).to_le_bytes());
}

fn lifecycle_byte(vm: &VmSpec<'_>) -> u8 {
    let bit = |set: bool, bit: u8| if set { bit } else { 0 };
    let restart = |policy: Policy, b: u8| bit(policy == Policy::Restart, b);
    let p = vm.policies;
    bit(vm.autostart, LIFE_AUTOSTART)
        | bit(vm.control, LIFE_CONTROL)
        | restart(p.on_poweroff, LIFE_RESTART_ON_POWEROFF)
        | restart(p.on_reboot, LIFE_RESTART_ON_REBOOT)
        | restart(p.on_crash, LIFE_RESTART_ON_CRASH)
}

fn align_up(n: usize) -> usize {
    let a = PACKAGE_ALIGN as usize;
    n.div_ceil(a) * a
}

/// Reads `N` bytes at `at`, or `None` if they are not all there. Every read of
/// untrusted bytes goes through here, which is what keeps the decoder from
/// panicking.
fn field<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    field(b, at).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    field(b, at).map(u64::from_le_bytes)
}

const IRQDIST_CONFIGURED: u32 = 1 << 0;
const IRQDIST_ENABLED: u32 = 1 << 1;
const IRQDIST_SPREAD_ALL: u32 = 1 << 2;
/// Bits 8..16: `avoid_realtime_pct`, 0 for none.
const IRQDIST_AVOID_RT_SHIFT: u32 = 8;
const IRQDIST_AVOID_RT: u32 = 0xff << IRQDIST_AVOID_RT_SHIFT;

fn irqdist_word(spec: Option<IrqDistSpec>) -> u32 {
    spec.map_or(0, |d| {
        IRQDIST_CONFIGURED
            | if d.enabled { IRQDIST_ENABLED } else { 0 }
            | if d.spread == Spread::All { IRQDIST_SPREAD_ALL } else { 0 }
            | u32::from(d.avoid_realtime_pct.unwrap_or(0)) << IRQDIST_AVOID_RT_SHIFT
    })
}

fn irqdist_from_word(word: u32) -> Result<Option<IrqDistSpec>, PackageError> {
    let known = IRQDIST_CONFIGURED | IRQDIST_ENABLED | IRQDIST_SPREAD_ALL | IRQDIST_AVOID_RT;
    if word & !known != 0 || word != 0 && word & IRQDIST_CONFIGURED == 0 {
        return Err(malformed(None, "interrupt distributor word has unknown bits"));
    }
    let avoid_realtime_pct = ((word & IRQDIST_AVOID_RT) >> IRQDIST_AVOID_RT_SHIFT) as u8;
    if avoid_realtime_pct > 100 {
        return Err(malformed(None, "interrupt distributor's real-time percentage above 100"));
    }
    Ok((word != 0).then_some(IrqDistSpec {
        enabled: word & IRQDIST_ENABLED != 0,
        spread: if word & IRQDIST_SPREAD_ALL != 0 { Spread::All } else { Spread::One },
        avoid_realtime_pct: (avoid_realtime_pct != 0).then_some(avoid_realtime_pct),
    }))
}

struct Header {
    /// The uplink's string, (0, 0) for none.
    uplink: StrRef,
    quantum_ms: u32,
    irqdist: Option<IrqDistSpec>,
    vm_count: u32,
    total_len: u64,
    blobs_off: u64,
    strings_off: u64,
}

fn malformed(vm: Option<usize>, what: &'static str) -> PackageError {
    PackageError::Malformed { vm, what }
}

fn read_header(bytes: &[u8]) -> Result<Header, PackageError> {
    let truncated =
        PackageError::Truncated { need: PACKAGE_HEADER_LEN as u64, have: bytes.len() as u64 };
    let magic: [u8; 8] = field(bytes, 0).ok_or(truncated.clone())?;
    if magic != PACKAGE_MAGIC {
        return Err(PackageError::BadMagic);
    }
    // The version first: an older package may be shorter than this header.
    let version = u32_at(bytes, 8).ok_or(truncated.clone())?;
    if version != PACKAGE_VERSION {
        return Err(PackageError::UnsupportedVersion { found: version });
    }
    let (Some(vm_count), Some(total_len), Some(blobs_off), Some(strings_off)) =
        (u32_at(bytes, 12), u64_at(bytes, 16), u64_at(bytes, 24), u64_at(bytes, 32))
    else {
        return Err(truncated);
    };
    let (Some(quantum_ms), Some(irqdist)) = (u32_at(bytes, 40), u32_at(bytes, 44)) else {
        return Err(truncated);
    };
    let irqdist = irqdist_from_word(irqdist)?;
    let (Some(uplink_off), Some(uplink_len)) = (u32_at(bytes, 48), u32_at(bytes, 52)) else {
        return Err(truncated);
    };
    if !total_len.is_multiple_of(PACKAGE_ALIGN) || total_len < PACKAGE_HEADER_LEN as u64 {
        return Err(malformed(None, "total length is not a positive multiple of 4 KiB"));
    }
    Ok(Header {
        uplink: (uplink_off, uplink_len),
        quantum_ms,
        irqdist,
        vm_count,
        total_len,
        blobs_off,
        strings_off,
    })
}

/// The package's total length, from its header alone.
///
/// The hypervisor calls this on the bytes after its image to learn how much
/// memory the package occupies (and keep its allocator away from it) before
/// it forms the slice it passes to [`decode_package`].
pub fn package_len(header: &[u8]) -> Result<u64, PackageError> {
    read_header(header).map(|h| h.total_len)
}

/// Decodes and checks a package without copying the images.
///
/// `bytes` may extend past the package (the hypervisor can pass everything
/// up to the end of RAM); only the first `total_len` bytes are used. Every
/// offset and length is bounds-checked, counts are capped before anything is
/// allocated, images may not overlap, and every VM must pass [`check_vms`]
/// for `machine`. Never panics.
pub fn decode_package<'a>(bytes: &'a [u8], machine: &Machine) -> Result<Package<'a>, PackageError> {
    let h = read_header(bytes)?;
    let have = bytes.len() as u64;
    let total = usize::try_from(h.total_len)
        .ok()
        .and_then(|t| bytes.get(..t))
        .ok_or(PackageError::Truncated { need: h.total_len, have })?;

    let count = usize::try_from(h.vm_count).unwrap_or(usize::MAX);
    check_count(count)?;
    // count <= MAX_VMS now, so this cannot overflow.
    let records_end = (PACKAGE_HEADER_LEN + count * RECORD_LEN) as u64;
    if !h.blobs_off.is_multiple_of(PACKAGE_ALIGN)
        || h.blobs_off < records_end
        || h.blobs_off > h.total_len
    {
        return Err(malformed(None, "image area offset out of bounds"));
    }
    if h.strings_off < records_end || h.strings_off > h.blobs_off {
        return Err(malformed(None, "string area offset out of bounds"));
    }
    // All three lie inside `total`, whose length fits a usize.
    let areas = Areas {
        extras: records_end..h.strings_off,
        strings: h.strings_off..h.blobs_off,
        blobs: h.blobs_off..h.total_len,
    };

    let mut vms = Vec::with_capacity(count);
    let mut extents: Vec<(u64, u64)> = Vec::with_capacity((2 + MAX_DISKS) * count);
    for n in 0..count {
        let at = PACKAGE_HEADER_LEN + n * RECORD_LEN;
        let rec = total
            .get(at..at + RECORD_LEN)
            .ok_or(malformed(Some(n), "record past the end of the package"))?;
        vms.push(decode_record(n, rec, total, &areas, &mut extents)?);
    }
    check_extents(&mut extents)?;
    check_vms(&vms, machine)?;
    let scheduler = SchedSpec { quantum_ms: h.quantum_ms, irqdist: h.irqdist };
    check_scheduler(&scheduler)?;
    let uplink = match h.uplink {
        (0, 0) => None,
        (off, len) => {
            let name = areas
                .string(total, off, len)
                .ok_or(malformed(None, "uplink network name out of bounds or not UTF-8"))?;
            check_network(0, name, true, &nic_networks(&vms))?;
            Some(name)
        }
    };
    Ok(Package { bytes: total, scheduler, vms, uplink })
}

/// The package's areas after the records, as byte ranges of it.
struct Areas {
    extras: Range<u64>,
    strings: Range<u64>,
    blobs: Range<u64>,
}

impl Areas {
    /// `len` bytes at `off`, if they lie inside `area` (and so inside `pkg`).
    fn get<'a>(pkg: &'a [u8], area: &Range<u64>, off: u64, len: u64) -> Option<&'a [u8]> {
        let end = off.checked_add(len)?;
        if off < area.start || end > area.end {
            return None;
        }
        pkg.get(usize::try_from(off).ok()?..usize::try_from(end).ok()?)
    }

    /// A UTF-8 string in the string area.
    fn string<'a>(&self, pkg: &'a [u8], off: u32, len: u32) -> Option<&'a str> {
        let raw = Self::get(pkg, &self.strings, u64::from(off), u64::from(len))?;
        core::str::from_utf8(raw).ok()
    }

    /// An image in the image area, at a page-aligned offset; its extent is
    /// recorded for the overlap check.
    fn image<'a>(
        &self,
        pkg: &'a [u8],
        off: u64,
        len: u64,
        extents: &mut Vec<(u64, u64)>,
    ) -> Option<&'a [u8]> {
        if !off.is_multiple_of(PACKAGE_ALIGN) {
            return None;
        }
        let bytes = Self::get(pkg, &self.blobs, off, len)?;
        extents.push((off, len));
        Some(bytes)
    }
}

fn decode_record<'a>(
    n: usize,
    rec: &[u8],
    pkg: &'a [u8],
    areas: &Areas,
    extents: &mut Vec<(u64, u64)>,
) -> Result<VmSpec<'a>, PackageError> {
    let bad = |what| malformed(Some(n), what);
    let short = || bad("record too short");
    let u32f = |at| u32_at(rec, at).ok_or_else(short);
    let u64f = |at| u64_at(rec, at).ok_or_else(short);
    let u8f = |at: usize| rec.get(at).copied().ok_or_else(short);

    let string = |off, len, what| areas.string(pkg, off, len).ok_or(bad(what));
    let name = string(u32f(0)?, u32f(4)?, "name out of bounds or not UTF-8")?;
    let cmdline = string(u32f(8)?, u32f(12)?, "cmdline out of bounds or not UTF-8")?;

    let vcpus = u8f(16)?;
    let device_count = usize::from(u8f(17)?);
    let flags = u8f(18)?;
    let life = u8f(19)?;
    if life & !LIFE_BITS != 0
        || u32f(60)? != 0
        || u64f(88)? != 0
        || flags & !(FLAG_INITRD | FLAG_PMU_RAW | FLAG_PMU_OFF | FLAG_GIC_V2 | FLAG_GIC_V3) != 0
        || flags & (FLAG_PMU_RAW | FLAG_PMU_OFF) == FLAG_PMU_RAW | FLAG_PMU_OFF
        || flags & (FLAG_GIC_V2 | FLAG_GIC_V3) == FLAG_GIC_V2 | FLAG_GIC_V3
    {
        return Err(bad("reserved field is not zero"));
    }

    let mut cpu_affinity = [None; MAX_VCPUS as usize];
    for (slot, cpu) in cpu_affinity.iter_mut().enumerate() {
        let raw = u32f(20 + 4 * slot)?;
        *cpu = (raw != UNPINNED).then_some(raw);
    }

    if device_count > MAX_DEVICES {
        return Err(bad("too many devices"));
    }
    let mut devices = Vec::with_capacity(device_count);
    for slot in 0..MAX_DEVICES {
        let code = u8f(52 + slot)?;
        if slot < device_count {
            devices.push(DeviceKind::from_code(code).ok_or(bad("unknown device code"))?);
        } else if code != 0 {
            return Err(bad("reserved field is not zero"));
        }
    }

    let memory = IpaRange::new(Ipa(u64f(64)?), u64f(72)?);
    let entry = Ipa(u64f(80)?);

    let mut image = |at: usize, what| -> Result<LoadImage<'a>, PackageError> {
        let load = Ipa(u64f(at)?);
        let mem_size = u64f(at + 8)?;
        let bytes = areas.image(pkg, u64f(at + 16)?, u64f(at + 24)?, extents).ok_or(bad(what))?;
        Ok(LoadImage { load, bytes, mem_size })
    };
    let kernel = image(96, "kernel image out of bounds")?;
    let initrd = if flags & FLAG_INITRD != 0 {
        Some(image(128, "initrd image out of bounds")?)
    } else {
        if (128..160).step_by(8).any(|at| u64_at(rec, at) != Some(0)) {
            return Err(bad("initrd fields set without the initrd flag"));
        }
        None
    };

    let realtime = match (u32f(176)?, u32f(180)?) {
        (0, 0) => None,
        (budget_us, period_us) => Some(RealTimeSpec { budget_us, period_us }),
    };
    let cap = Some(u32f(172)?).filter(|&c| c != 0);
    let sched = VmSched { weight: u32f(168)?, cap, realtime };

    let policy = |restart_bit: u8| match life & restart_bit {
        0 => Policy::Stop,
        _ => Policy::Restart,
    };
    let policies = Policies {
        on_poweroff: policy(LIFE_RESTART_ON_POWEROFF),
        on_reboot: policy(LIFE_RESTART_ON_REBOOT),
        on_crash: policy(LIFE_RESTART_ON_CRASH),
    };

    let Extras { disks, nics, passthrough } = decode_extras(n, rec, pkg, areas, extents)?;
    Ok(VmSpec {
        name,
        vcpus,
        cpu_affinity,
        memory,
        entry,
        kernel,
        initrd,
        cmdline,
        devices,
        disks,
        nics,
        passthrough,
        pmu: match flags & (FLAG_PMU_RAW | FLAG_PMU_OFF) {
            FLAG_PMU_RAW => PmuMode::Raw,
            FLAG_PMU_OFF => PmuMode::Off,
            _ => PmuMode::Virtual,
        },
        gic: match flags & (FLAG_GIC_V2 | FLAG_GIC_V3) {
            FLAG_GIC_V2 => Some(GicVersion::V2),
            FLAG_GIC_V3 => Some(GicVersion::V3),
            _ => None,
        },
        sched,
        autostart: life & LIFE_AUTOSTART != 0,
        control: life & LIFE_CONTROL != 0,
        policies,
    })
}

struct Extras<'a> {
    disks: Vec<DiskSpec<'a>>,
    nics: Vec<NicSpec<'a>>,
    passthrough: Vec<Passthrough<'a>>,
}

/// A record's bytes 160..168 and the extras entries they point at.
fn decode_extras<'a>(
    n: usize,
    rec: &[u8],
    pkg: &'a [u8],
    areas: &Areas,
    extents: &mut Vec<(u64, u64)>,
) -> Result<Extras<'a>, PackageError> {
    let bad = |what| malformed(Some(n), what);
    let off = u32_at(rec, 160).ok_or(bad("record too short"))?;
    let [disk_count, nic_count, path_count, zero] =
        field(rec, 164).ok_or(bad("record too short"))?;
    if zero != 0 {
        return Err(bad("reserved field is not zero"));
    }
    let (disk_count, nic_count, path_count) =
        (usize::from(disk_count), usize::from(nic_count), usize::from(path_count));
    // Capped before the lengths below are computed or anything is allocated.
    if disk_count > MAX_DISKS {
        return Err(bad("too many disks"));
    }
    if nic_count > MAX_NICS {
        return Err(bad("too many NICs"));
    }
    if path_count > MAX_PASSTHROUGH {
        return Err(bad("too many passthrough paths"));
    }
    let len = disk_count * DISK_ENTRY_LEN + nic_count * NIC_ENTRY_LEN + path_count * PATH_ENTRY_LEN;
    let table = Areas::get(pkg, &areas.extras, u64::from(off), len as u64)
        .ok_or(bad("extras table out of bounds"))?;
    // `table` has exactly `len` bytes, so these reads only fail on a bug;
    // they still return an error rather than panic.
    let u32e = |at| u32_at(table, at).ok_or(bad("extras table out of bounds"));
    let u64e = |at| u64_at(table, at).ok_or(bad("extras table out of bounds"));

    let mut disks = Vec::with_capacity(disk_count);
    for k in 0..disk_count {
        let at = k * DISK_ENTRY_LEN;
        let (capacity, image_off, image_len) = (u64e(at)?, u64e(at + 8)?, u64e(at + 16)?);
        let flags = u64e(at + 24)?; // the flags byte and seven zero bytes
        if flags & !u64::from(DISK_READ_ONLY) != 0 {
            return Err(bad("reserved field is not zero"));
        }
        let partition = match (u32e(at + 32)?, u32e(at + 36)?) {
            (0, 0) => None,
            (_, 0) => return Err(bad("partition name offset set without a name")),
            (off, len) => Some(
                areas
                    .string(pkg, off, len)
                    .ok_or(bad("partition name out of bounds or not UTF-8"))?,
            ),
        };
        let image = match (image_off, image_len) {
            (0, 0) => &[][..],
            _ if partition.is_some() => return Err(bad("a disk on a partition carries an image")),
            (off, len) => areas
                .image(pkg, off, len, extents)
                .filter(|bytes| !bytes.is_empty())
                .ok_or(bad("disk image out of bounds"))?,
        };
        disks.push(DiskSpec { image, capacity, read_only: flags != 0, partition });
    }

    let mut nics = Vec::with_capacity(nic_count);
    for k in 0..nic_count {
        let at = disk_count * DISK_ENTRY_LEN + k * NIC_ENTRY_LEN;
        let mac: [u8; 6] = field(table, at).ok_or(bad("extras table out of bounds"))?;
        let mtu = field::<2>(table, at + 6).ok_or(bad("extras table out of bounds"))?;
        let mtu = Some(u16::from_le_bytes(mtu)).filter(|&m| m != 0);
        let network = areas
            .string(pkg, u32e(at + 8)?, u32e(at + 12)?)
            .ok_or(bad("NIC network name out of bounds or not UTF-8"))?;
        nics.push(NicSpec { network, mac, mtu });
    }

    let mut passthrough = Vec::with_capacity(path_count);
    for k in 0..path_count {
        let at = disk_count * DISK_ENTRY_LEN + nic_count * NIC_ENTRY_LEN + k * PATH_ENTRY_LEN;
        let path = areas
            .string(pkg, u32e(at)?, u32e(at + 4)?)
            .ok_or(bad("passthrough path out of bounds or not UTF-8"))?;
        let [dma, z0, z1, z2] = field(table, at + 8).ok_or(bad("extras table out of bounds"))?;
        if [z0, z1, z2] != [0; 3] {
            return Err(bad("reserved field is not zero"));
        }
        let dma = PassthroughDma::from_code(dma).ok_or(bad("unknown passthrough dma code"))?;
        passthrough.push(Passthrough { path, dma });
    }
    Ok(Extras { disks, nics, passthrough })
}

/// Images may be shared (same offset and length) but must not otherwise
/// overlap: a crafted package could otherwise make one VM's kernel another's
/// initrd tail, which no build tool produces.
fn check_extents(extents: &mut [(u64, u64)]) -> Result<(), PackageError> {
    extents.sort_unstable();
    let mut reach = 0u64;
    let mut last: Option<(u64, u64)> = None;
    for &(off, len) in extents.iter() {
        if Some((off, len)) == last {
            continue;
        }
        if off < reach {
            return Err(malformed(None, "images overlap"));
        }
        reach = off + len; // checked when the extent was read
        last = Some((off, len));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tests::spec;
    use alloc::string::ToString;

    const M: Machine = Machine { ram_bytes: 1 << 30, cpus: 4 };

    struct Images {
        k0: Vec<u8>,
        k1: Vec<u8>,
        rd: Vec<u8>,
        disk: Vec<u8>,
    }

    fn images() -> Images {
        Images {
            k0: (0..5000u32).map(|i| i as u8).collect(),
            k1: vec![0xaa; 100],
            rd: vec![0x55; 9000],
            disk: (0..6000u32).map(|i| (i * 3) as u8).collect(),
        }
    }

    const MAC0: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

    fn specs(img: &Images) -> Vec<VmSpec<'_>> {
        let mut a = spec("vm0", &img.k0);
        a.cmdline = "hello hvc device heartbeat=8 off";
        a.cpu_affinity[0] = Some(0);
        a.initrd = Some(LoadImage {
            load: Ipa(0x4100_0000),
            bytes: &img.rd,
            mem_size: img.rd.len() as u64,
        });
        let mut b = spec("vm1", &img.k1);
        b.vcpus = 2;
        b.cpu_affinity[0] = Some(1);
        b.cpu_affinity[1] = Some(2);
        b.kernel.mem_size = 0x20_0000;
        b.devices.clear();
        b.memory.size = 64 << 20;

        // Every kind of extra: a disk with an image and a blank one, NICs,
        // passthrough paths, and virtio devices.
        a.devices = vec![DeviceKind::Pl011, DeviceKind::VirtioConsole, DeviceKind::VirtioRng];
        a.disks = vec![
            DiskSpec { image: &img.disk, capacity: 16 << 10, read_only: true, partition: None },
            DiskSpec { image: &[], capacity: 1 << 20, read_only: false, partition: None },
        ];
        a.nics = vec![NicSpec { network: "lan0", mac: MAC0, mtu: Some(9000) }];
        a.passthrough = vec!["/pl031@9010000".into()];
        b.nics = vec![
            NicSpec { network: "lan0", mac: [0x52, 0x54, 0, 0, 1, 0], mtu: Some(9000) },
            NicSpec { network: "wan", mac: [0x52, 0x54, 0, 0, 1, 1], mtu: None },
        ];
        // The same bytes as vm1's kernel: stored once.
        b.disks =
            vec![DiskSpec { image: &img.k1, capacity: 512, read_only: false, partition: None }];
        b.passthrough = vec![
            Passthrough { path: "/soc/gpio@0", dma: PassthroughDma::None },
            Passthrough { path: "/soc/i2c@1", dma: PassthroughDma::Unprotected },
        ];
        a.pmu = PmuMode::Off;
        b.pmu = PmuMode::Raw;
        a.gic = Some(GicVersion::V2);
        // Both start at boot, so that the tests below can forge a sum too large.
        a.control = true;
        b.policies = Policies {
            on_poweroff: Policy::Restart,
            on_reboot: Policy::Stop,
            on_crash: Policy::Restart,
        };
        vec![a, b]
    }

    fn valid() -> Vec<u8> {
        let img = images();
        encode_package(&specs(&img), &SchedSpec::default(), None, &M).unwrap()
    }

    #[test]
    fn round_trip() {
        let img = images();
        let vms = specs(&img);
        let bytes = encode_package(&vms, &SchedSpec::default(), None, &M).unwrap();
        assert_eq!(&bytes[..8], b"ARMHVPKG");
        assert_eq!(bytes.len() % 4096, 0);
        assert_eq!(package_len(&bytes[..PACKAGE_HEADER_LEN]), Ok(bytes.len() as u64));
        let pkg = decode_package(&bytes, &M).unwrap();
        assert_eq!(pkg.vms, vms);
        assert_eq!(pkg.bytes.len(), bytes.len());
        for vm in &pkg.vms {
            let images = vm.disks.iter().map(|d| d.image).filter(|i| !i.is_empty());
            for image in images.chain([vm.kernel.bytes]) {
                let off = image.as_ptr() as usize - bytes.as_ptr() as usize;
                assert_eq!(off % 4096, 0, "images are page aligned");
            }
        }
        assert_eq!(pkg.vms[1].disks[0].image.as_ptr(), pkg.vms[1].kernel.bytes.as_ptr());
        assert!(pkg.vms[0].disks[1].image.is_empty());
        assert!(pkg.vms[0].disks[0].read_only && !pkg.vms[0].disks[1].read_only);
        let paths: Vec<_> = pkg.vms[1].passthrough.iter().map(|p| (p.path, p.dma)).collect();
        assert_eq!(
            paths,
            [("/soc/gpio@0", PassthroughDma::None), ("/soc/i2c@1", PassthroughDma::Unprotected)]
        );
        assert_eq!(pkg.vms[0].passthrough[0].dma, PassthroughDma::Unstated);
        assert_eq!((pkg.vms[0].pmu, pkg.vms[1].pmu), (PmuMode::Off, PmuMode::Raw));
        assert_eq!((pkg.vms[0].gic, pkg.vms[1].gic), (Some(GicVersion::V2), None));
        assert!(pkg.vms[0].control && !pkg.vms[1].control);
        assert_eq!(pkg.vms[0].policies, Policies::default());
        assert_eq!(pkg.vms[1].policies.on_crash, Policy::Restart);
        assert_eq!(pkg.vms[0].virtio_devices().last(), Some(crate::VirtioDevice::Control));
        // Trailing bytes after the package are ignored.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0xff; 100]);
        assert_eq!(decode_package(&longer, &M).unwrap().vms, vms);
    }

    #[test]
    fn lifecycle_round_trip() {
        let k = [1u8; 64];
        // The defaults: started at boot, not a control VM, restarted only on a reboot.
        let bytes = encode_package(&[spec("a", &k)], &SchedSpec::default(), None, &M).unwrap();
        assert_eq!(bytes[REC0 + 19], LIFE_AUTOSTART | LIFE_RESTART_ON_REBOOT);
        // Every combination of the five settings.
        for bits in 0..=LIFE_BITS {
            let mut vm = spec("a", &k);
            let policy = |bit: u8| if bits & bit != 0 { Policy::Restart } else { Policy::Stop };
            vm.autostart = bits & LIFE_AUTOSTART != 0;
            vm.control = bits & LIFE_CONTROL != 0;
            vm.policies = Policies {
                on_poweroff: policy(LIFE_RESTART_ON_POWEROFF),
                on_reboot: policy(LIFE_RESTART_ON_REBOOT),
                on_crash: policy(LIFE_RESTART_ON_CRASH),
            };
            let vms = [vm];
            let bytes = encode_package(&vms, &SchedSpec::default(), None, &M).unwrap();
            assert_eq!(bytes[REC0 + 19], bits);
            assert_eq!(decode_package(&bytes, &M).unwrap().vms, vms, "bits {bits:#x}");
        }
    }

    #[test]
    fn gic_round_trip() {
        let k = [1u8; 64];
        let gics =
            [(None, 0), (Some(GicVersion::V2), FLAG_GIC_V2), (Some(GicVersion::V3), FLAG_GIC_V3)];
        let pmus =
            [(PmuMode::Virtual, 0), (PmuMode::Raw, FLAG_PMU_RAW), (PmuMode::Off, FLAG_PMU_OFF)];
        // Every GIC setting with every PMU setting, with and without an initrd: the bits
        // share a byte and must not disturb each other.
        for (gic, gic_bit) in gics {
            for (pmu, pmu_bit) in pmus {
                for initrd in [false, true] {
                    let mut vm = spec("a", &k);
                    (vm.gic, vm.pmu, vm.vcpus) = (gic, pmu, 8);
                    vm.initrd = initrd.then_some(LoadImage {
                        load: Ipa(0x4100_0000),
                        bytes: &k,
                        mem_size: k.len() as u64,
                    });
                    let vms = [vm];
                    let bytes = encode_package(&vms, &SchedSpec::default(), None, &M).unwrap();
                    let initrd_bit = if initrd { FLAG_INITRD } else { 0 };
                    assert_eq!(bytes[REC0 + 18], initrd_bit | pmu_bit | gic_bit);
                    let got = decode_package(&bytes, &M).unwrap().vms;
                    assert_eq!(got, vms, "{gic:?} {pmu:?} initrd {initrd}");
                }
            }
        }
    }

    #[test]
    fn identical_images_are_stored_once() {
        let k = vec![7u8; 10_000];
        let vms = [spec("a", &k), spec("b", &k)];
        let bytes = encode_package(&vms, &SchedSpec::default(), None, &M).unwrap();
        // One page of metadata plus three pages of kernel.
        assert_eq!(bytes.len(), 4 * 4096);
        let pkg = decode_package(&bytes, &M).unwrap();
        assert_eq!(pkg.vms[0].kernel.bytes.as_ptr(), pkg.vms[1].kernel.bytes.as_ptr());

        // Disk images too, with each other and with kernels.
        let mut vms = vms;
        let disk = DiskSpec { image: &k, capacity: 16 << 10, read_only: false, partition: None };
        vms[0].disks = vec![disk, disk];
        vms[1].disks = vec![disk];
        let bytes = encode_package(&vms, &SchedSpec::default(), None, &M).unwrap();
        assert_eq!(bytes.len(), 4 * 4096);
        assert_eq!(decode_package(&bytes, &M).unwrap().vms, vms);
    }

    #[test]
    fn uplink_round_trip_and_rules() {
        let img = images();
        let vms = specs(&img);
        assert_eq!(decode_package(&valid(), &M).unwrap().uplink, None);
        let bytes = encode_package(&vms, &SchedSpec::default(), Some("wan"), &M).unwrap();
        assert_eq!(decode_package(&bytes, &M).unwrap().uplink, Some("wan"));
        // An uplink network no NIC is on, or whose NICs have jumbo frames: refused both ways.
        let e = encode_package(&vms, &SchedSpec::default(), Some("dmz"), &M).unwrap_err();
        assert_eq!(e.path(), "network[0].name");
        let e = encode_package(&vms, &SchedSpec::default(), Some("lan0"), &M).unwrap_err();
        assert_eq!(e.path(), "vm[0].nic[0].mtu");
        let mut b = bytes.clone();
        let (off, len) = (u32_at(&b, 48).unwrap() as usize, u32_at(&b, 52).unwrap() as usize);
        b[off..off + len].copy_from_slice(b"dmz");
        match decode_package(&b, &M) {
            Err(PackageError::Invalid(v)) => assert_eq!(v.path(), "network[0].name"),
            other => panic!("{other:?}"),
        }
        b[off..off + len].copy_from_slice(b"la\xff");
        assert_eq!(
            malformed_what(decode_package(&b, &M)),
            "uplink network name out of bounds or not UTF-8"
        );
        let mut b = bytes.clone();
        set(&mut b, 48, &u32::MAX.to_le_bytes());
        assert_eq!(
            malformed_what(decode_package(&b, &M)),
            "uplink network name out of bounds or not UTF-8"
        );
    }

    #[test]
    fn a_minimal_vm_has_no_extras() {
        let k = [1u8; 64];
        let bytes = encode_package(&[spec("a", &k)], &SchedSpec::default(), None, &M).unwrap();
        // Header and one record: 56 + 184 = 240, where the (empty) extras and the strings start.
        assert_eq!(&bytes[REC0 + 160..REC0 + 168], &[240, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(bytes[32..40].try_into().unwrap()), 240);
        let vm = &decode_package(&bytes, &M).unwrap().vms[0];
        assert!(vm.disks.is_empty() && vm.nics.is_empty() && vm.passthrough.is_empty());
    }

    #[test]
    fn encode_refuses_invalid_vms() {
        let k = [1u8; 8];
        let mut vm = spec("vm0", &k);
        vm.memory.size = 2 << 30;
        assert_eq!(
            encode_package(&[vm], &SchedSpec::default(), None, &M).unwrap_err().path(),
            "vm[0].memory_size"
        );
        assert_eq!(encode_package(&[], &SchedSpec::default(), None, &M).unwrap_err().path(), "vm");
    }

    #[test]
    fn decode_rechecks_against_the_running_machine() {
        let bytes = valid();
        let small = Machine { ram_bytes: 128 << 20, cpus: 2 };
        match decode_package(&bytes, &small) {
            Err(PackageError::Invalid(v)) => assert_eq!(v.path(), "vm[1].cpu_affinity"),
            other => panic!("{other:?}"),
        }
    }

    fn set(bytes: &mut [u8], at: usize, v: &[u8]) {
        bytes[at..at + v.len()].copy_from_slice(v);
    }

    fn malformed_what(r: Result<Package<'_>, PackageError>) -> &'static str {
        match r {
            Err(PackageError::Malformed { what, .. }) => what,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    const REC0: usize = PACKAGE_HEADER_LEN;
    const REC1: usize = PACKAGE_HEADER_LEN + RECORD_LEN;

    #[test]
    fn header_errors() {
        let good = valid();
        assert!(matches!(
            decode_package(&good[..10], &M),
            Err(PackageError::Truncated { need: 56, have: 10 })
        ));
        assert!(matches!(decode_package(&[], &M), Err(PackageError::Truncated { .. })));
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(decode_package(&b, &M), Err(PackageError::BadMagic));
        // A version 1 package is named as such, although its header is shorter.
        let mut b = good.clone();
        set(&mut b, 8, &1u32.to_le_bytes());
        assert_eq!(decode_package(&b, &M), Err(PackageError::UnsupportedVersion { found: 1 }));
        assert_eq!(package_len(&b[..32]), Err(PackageError::UnsupportedVersion { found: 1 }));
        // Version 9, the last before the lifecycle byte, had a zero there: it is refused, not
        // read as VMs that are never started. Version 10, the last before the GIC bits, would
        // read as VMs that follow the host, but the decoder takes one version only.
        for old in [9u32, 10] {
            let mut b = good.clone();
            set(&mut b, 8, &old.to_le_bytes());
            let e = decode_package(&b, &M).unwrap_err();
            assert_eq!(e, PackageError::UnsupportedVersion { found: old });
            assert!(e.to_string().ends_with("this hypervisor reads 11; rebuild the image"), "{e}");
        }
        // Counts are capped before anything is read or allocated.
        for count in [0u32, 17, u32::MAX] {
            let mut b = good.clone();
            set(&mut b, 12, &count.to_le_bytes());
            assert!(
                matches!(decode_package(&b, &M), Err(PackageError::Invalid(v)) if v.key == "vm")
            );
        }
    }

    #[test]
    fn corrupted_length_fields() {
        let good = valid();
        let len = good.len() as u64;
        // total_len larger than what is there.
        for total in [len + 4096, u64::MAX - 4095, 1 << 63] {
            let mut b = good.clone();
            set(&mut b, 16, &total.to_le_bytes());
            assert!(matches!(decode_package(&b, &M), Err(PackageError::Truncated { .. })));
        }
        // total_len not page granular, zero, or cutting images off.
        for total in [len - 1, 0, 4096] {
            let mut b = good.clone();
            set(&mut b, 16, &total.to_le_bytes());
            assert!(decode_package(&b, &M).is_err(), "total_len {total}");
        }
        // blobs_off misaligned, inside the records, past the end.
        for off in [4095u64, 0, len + 4096, u64::MAX] {
            let mut b = good.clone();
            set(&mut b, 24, &off.to_le_bytes());
            assert!(decode_package(&b, &M).is_err(), "blobs_off {off}");
        }
        // strings_off inside the records, past blobs_off, huge.
        for off in [0u64, PACKAGE_HEADER_LEN as u64 + 1, 4097, u64::MAX] {
            let mut b = good.clone();
            set(&mut b, 32, &off.to_le_bytes());
            assert_eq!(
                malformed_what(decode_package(&b, &M)),
                "string area offset out of bounds",
                "strings_off {off}"
            );
        }
        // A string length reaching into the image area.
        let mut b = good.clone();
        set(&mut b, REC0 + 12, &5000u32.to_le_bytes());
        assert_eq!(malformed_what(decode_package(&b, &M)), "cmdline out of bounds or not UTF-8");
        // An image length past the end, and one that wraps.
        for l in [len, u64::MAX] {
            let mut b = good.clone();
            set(&mut b, REC0 + 96 + 24, &l.to_le_bytes());
            assert_eq!(malformed_what(decode_package(&b, &M)), "kernel image out of bounds");
        }
    }

    #[test]
    fn offsets_out_of_bounds() {
        let good = valid();
        let len = good.len() as u64;
        // Name pointing into the header, and past the end.
        for off in [0u32, u32::MAX] {
            let mut b = good.clone();
            set(&mut b, REC0, &off.to_le_bytes());
            assert_eq!(malformed_what(decode_package(&b, &M)), "name out of bounds or not UTF-8");
        }
        // Image offsets: misaligned, in the metadata, past the end, wrapping.
        for off in [4097u64, 0, len, u64::MAX - 4095] {
            let mut b = good.clone();
            set(&mut b, REC1 + 96 + 16, &off.to_le_bytes());
            assert_eq!(malformed_what(decode_package(&b, &M)), "kernel image out of bounds");
        }
        // vm1's kernel moved onto vm0's initrd: overlap.
        let mut b = good.clone();
        let initrd_off = u64::from_le_bytes(b[REC0 + 144..REC0 + 152].try_into().unwrap());
        set(&mut b, REC1 + 96 + 16, &initrd_off.to_le_bytes());
        assert_eq!(malformed_what(decode_package(&b, &M)), "images overlap");
        // Non-UTF-8 name.
        let mut b = good.clone();
        let name_off = u32::from_le_bytes(b[REC0..REC0 + 4].try_into().unwrap()) as usize;
        b[name_off] = 0xff;
        assert_eq!(malformed_what(decode_package(&b, &M)), "name out of bounds or not UTF-8");
        // Reserved bytes, unknown device, stray initrd fields.
        for (at, v) in [
            (REC0 + 19, 0x20u8),
            (REC1 + 19, 0xff),
            (REC0 + 18, 0x20),
            (REC0 + 18, 7),
            (REC0 + 18, 0x19),
            (REC1 + 18, 0x18),
            (REC0 + 90, 1),
            (REC0 + 59, 1),
        ] {
            let mut b = good.clone();
            b[at] = v;
            assert_eq!(malformed_what(decode_package(&b, &M)), "reserved field is not zero");
        }
        // The interrupt distributor's word: unknown bits, or settings without "configured".
        for word in [8u32, 2, 1 << 31] {
            let mut b = good.clone();
            set(&mut b, 44, &word.to_le_bytes());
            assert_eq!(
                malformed_what(decode_package(&b, &M)),
                "interrupt distributor word has unknown bits"
            );
        }
        let mut b = good.clone();
        set(&mut b, 44, &0b101u32.to_le_bytes());
        let d = decode_package(&b, &M).unwrap().scheduler.irqdist;
        assert_eq!(
            d,
            Some(IrqDistSpec { enabled: false, spread: Spread::All, avoid_realtime_pct: None })
        );
        let mut b = good.clone();
        set(&mut b, 44, &(1u32 | 10 << 8).to_le_bytes());
        let d = decode_package(&b, &M).unwrap().scheduler.irqdist;
        let avoiding =
            IrqDistSpec { enabled: false, spread: Spread::One, avoid_realtime_pct: Some(10) };
        assert_eq!(d, Some(avoiding));
        let mut b = good.clone();
        set(&mut b, 44, &(1u32 | 101 << 8).to_le_bytes());
        assert_eq!(
            malformed_what(decode_package(&b, &M)),
            "interrupt distributor's real-time percentage above 100"
        );
        let mut b = good.clone();
        b[REC0 + 52] = 99;
        assert_eq!(malformed_what(decode_package(&b, &M)), "unknown device code");
        let mut b = good.clone();
        b[REC0 + 17] = 9;
        assert_eq!(malformed_what(decode_package(&b, &M)), "too many devices");
        let mut b = good.clone();
        b[REC1 + 130] = 1;
        assert_eq!(
            malformed_what(decode_package(&b, &M)),
            "initrd fields set without the initrd flag"
        );
    }

    /// Offset of a record's extras table.
    fn extras_at(b: &[u8], rec: usize) -> usize {
        u32::from_le_bytes(b[rec + 160..rec + 164].try_into().unwrap()) as usize
    }

    #[test]
    fn corrupted_extras() {
        let good = valid();
        let len = good.len() as u64;
        let e0 = extras_at(&good, REC0);
        // vm0's extras: two disks (40 bytes each), one NIC (16), one path (8).
        const D: usize = DISK_ENTRY_LEN;
        let (nic0, path0) = (e0 + 2 * D, e0 + 2 * D + 16);
        let cases: &[(usize, &[u8], &str)] = &[
            (REC0 + 164, &[5], "too many disks"),
            (REC0 + 165, &[5], "too many NICs"),
            (REC0 + 166, &[5], "too many passthrough paths"),
            (REC0 + 164, &[255], "too many disks"),
            (REC0 + 167, &[1], "reserved field is not zero"),
            // Tables past the extras area, or in the records.
            (REC0 + 160, &u32::MAX.to_le_bytes(), "extras table out of bounds"),
            (REC0 + 160, &0u32.to_le_bytes(), "extras table out of bounds"),
            (REC1 + 166, &[4], "extras table out of bounds"),
            // Disk entries: flags, image offset and length.
            (e0 + 24, &[3], "reserved field is not zero"),
            (e0 + 31, &[1], "reserved field is not zero"),
            (e0 + 8, &1u64.to_le_bytes(), "disk image out of bounds"),
            (e0 + 8, &0u64.to_le_bytes(), "disk image out of bounds"),
            (e0 + 8, &(u64::MAX - 4095).to_le_bytes(), "disk image out of bounds"),
            (e0 + 16, &len.to_le_bytes(), "disk image out of bounds"),
            (e0 + 16, &u64::MAX.to_le_bytes(), "disk image out of bounds"),
            (e0 + D + 8, &4096u64.to_le_bytes(), "disk image out of bounds"),
            // NIC entry: network name.
            (nic0 + 8, &0u32.to_le_bytes(), "NIC network name out of bounds or not UTF-8"),
            (nic0 + 12, &5000u32.to_le_bytes(), "NIC network name out of bounds or not UTF-8"),
            (path0, &u32::MAX.to_le_bytes(), "passthrough path out of bounds or not UTF-8"),
            (path0 + 8, &[3], "unknown passthrough dma code"),
            (path0 + 9, &[1], "reserved field is not zero"),
        ];
        for &(at, v, what) in cases {
            let mut b = good.clone();
            set(&mut b, at, v);
            assert_eq!(malformed_what(decode_package(&b, &M)), what, "at {at} = {v:?}");
        }
        // A NIC's MTU out of range is a rule broken, not a malformed table.
        let mut b = good.clone();
        set(&mut b, nic0 + 6, &20u16.to_le_bytes());
        match decode_package(&b, &M) {
            Err(PackageError::Invalid(v)) => assert_eq!(v.path(), "vm[0].nic[0].mtu"),
            other => panic!("{other:?}"),
        }
        // vm0's disk image moved onto its kernel, but longer: overlap.
        let mut b = good.clone();
        let kernel_off = u64::from_le_bytes(b[REC0 + 112..REC0 + 120].try_into().unwrap());
        set(&mut b, e0 + 8, &kernel_off.to_le_bytes());
        assert_eq!(malformed_what(decode_package(&b, &M)), "images overlap");
        // A network name that is not UTF-8.
        let mut b = good.clone();
        let name_off = u32::from_le_bytes(b[nic0 + 8..nic0 + 12].try_into().unwrap()) as usize;
        b[name_off] = 0xc0;
        assert_eq!(
            malformed_what(decode_package(&b, &M)),
            "NIC network name out of bounds or not UTF-8"
        );
    }

    #[test]
    fn semantic_rules_apply_to_decoded_extras() {
        let good = valid();
        let e0 = extras_at(&good, REC0);
        let e1 = extras_at(&good, REC1);
        const D: usize = DISK_ENTRY_LEN;
        let (nic0, path0, nic1) = (e0 + 2 * D, e0 + 2 * D + 16, e1 + D);
        let path_off = u32::from_le_bytes(good[path0..path0 + 4].try_into().unwrap()) as usize;
        let name_off = u32::from_le_bytes(good[nic0 + 8..nic0 + 12].try_into().unwrap()) as usize;
        let cases: &[(usize, &[u8], &str)] = &[
            (e0, &1000u64.to_le_bytes(), "vm[0].disk[0].size"),
            (e0, &4096u64.to_le_bytes(), "vm[0].disk[0].size"),
            (e0 + D, &0u64.to_le_bytes(), "vm[0].disk[1].size"),
            (e0 + D, &(2u64 << 30).to_le_bytes(), "vm[0].disk[1].size"),
            (nic0, &[0x01], "vm[0].nic[0].mac"),
            (nic1 + 16, &MAC0, "vm[1].nic[1].mac"),
            (name_off, b"L", "vm[0].nic[0].network"),
            (path_off, b"x", "vm[0].passthrough"),
            (path_off + 5, b" ", "vm[0].passthrough"),
            // vm0 still fits with a 900 MiB disk, but then vm1 does not.
            (e0 + D, &(900u64 << 20).to_le_bytes(), "vm[1].memory_size"),
            // vm0 alone does not fit with a 1 GiB disk.
            (e0 + D, &(1u64 << 30).to_le_bytes(), "vm[0].memory_size"),
        ];
        for &(at, v, key) in cases {
            let mut b = good.clone();
            set(&mut b, at, v);
            match decode_package(&b, &M) {
                Err(PackageError::Invalid(got)) => assert_eq!(got.path(), key, "{got}"),
                other => panic!("{key}: {:?}", other.map(|p| p.vms)),
            }
        }
        // With vm1 not started at boot, the 900 MiB disk fits: vm1 waits for RAM to free up.
        let mut b = good.clone();
        set(&mut b, e0 + D, &(900u64 << 20).to_le_bytes());
        b[REC1 + 19] &= !LIFE_AUTOSTART;
        let vms = decode_package(&b, &M).unwrap().vms;
        assert!(vms[0].autostart && !vms[1].autostart);

        // Eight virtio devices fit; a ninth, forged in, does not.
        let k = [1u8; 64];
        let mut vm = spec("vm0", &k);
        let nic = |n| NicSpec { network: "lan0", mac: [2, 0, 0, 0, 0, n], mtu: None };
        vm.nics = (0..4).map(nic).collect();
        vm.disks =
            vec![DiskSpec { image: &[], capacity: 512, read_only: false, partition: None }; 4];
        let mut b = encode_package(&[vm], &SchedSpec::default(), None, &M).unwrap();
        assert_eq!(b[REC0 + 52], DeviceKind::Pl011.code());
        b[REC0 + 52] = DeviceKind::VirtioRng.code();
        match decode_package(&b, &M) {
            Err(PackageError::Invalid(got)) => assert_eq!(got.path(), "vm[0].devices", "{got}"),
            other => panic!("{:?}", other.map(|p| p.vms)),
        }
        // Nor does a control channel after eight others.
        b[REC0 + 52] = DeviceKind::Pl011.code();
        b[REC0 + 19] |= LIFE_CONTROL;
        match decode_package(&b, &M) {
            Err(PackageError::Invalid(got)) => assert_eq!(got.path(), "vm[0].control", "{got}"),
            other => panic!("{:?}", other.map(|p| p.vms)),
        }
    }

    /// Two VMs with a disk on a partition each (4 GiB and 1 TiB: more than the machine's
    /// RAM, which they do not use) and a RAM disk.
    fn partition_package() -> (Vec<u8>, usize, usize) {
        let k = [1u8; 64];
        let (mut a, mut b) = (spec("vm0", &k), spec("vm1", &k));
        let part = |capacity, name| DiskSpec {
            image: &[],
            capacity,
            read_only: false,
            partition: Some(name),
        };
        a.disks =
            vec![part(4 << 30, "linux0-data"), DiskSpec { partition: None, ..part(4096, "") }];
        a.disks[1].read_only = true;
        b.disks = vec![DiskSpec { read_only: true, ..part(1 << 40, "db_0") }];
        let vms = [a, b];
        let bytes = encode_package(&vms, &SchedSpec::default(), None, &M).unwrap();
        let pkg = decode_package(&bytes, &M).unwrap();
        assert_eq!(pkg.vms, vms);
        let (e0, e1) = (extras_at(&bytes, REC0), extras_at(&bytes, REC1));
        (bytes, e0, e1)
    }

    #[test]
    fn partition_names_round_trip() {
        let (bytes, e0, e1) = partition_package();
        let pkg = decode_package(&bytes, &M).unwrap();
        let got: Vec<_> = pkg
            .vms
            .iter()
            .flat_map(|vm| vm.disks.iter().map(|d| (d.partition, d.capacity, d.read_only)))
            .collect();
        assert_eq!(
            got,
            [
                (Some("linux0-data"), 4 << 30, false),
                (None, 4096, true),
                (Some("db_0"), 1 << 40, true)
            ]
        );
        assert!(pkg.vms.iter().flat_map(|vm| &vm.disks).all(|d| d.image.is_empty()));
        // The entries: no image, the name as a string; a RAM disk's name fields are zero.
        assert_eq!(&bytes[e0 + 8..e0 + 24], &[0; 16]);
        let (off, len) = (u32_at(&bytes, e0 + 32).unwrap(), u32_at(&bytes, e0 + 36).unwrap());
        assert_eq!(&bytes[off as usize..(off + len) as usize], b"linux0-data");
        assert_eq!(&bytes[e0 + DISK_ENTRY_LEN + 32..e0 + 2 * DISK_ENTRY_LEN], &[0; 8]);
        assert_eq!(u32_at(&bytes, e1 + 36), Some(4));
    }

    #[test]
    fn corrupted_partition_names() {
        let (good, e0, e1) = partition_package();
        let name0 = u32_at(&good, e0 + 32).unwrap();
        let ram = e0 + DISK_ENTRY_LEN;
        let malformed: &[(usize, &[u8], &str)] = &[
            // An offset without a length, a name outside the string area or not UTF-8.
            (ram + 32, &name0.to_le_bytes(), "partition name offset set without a name"),
            (e0 + 36, &0u32.to_le_bytes(), "partition name offset set without a name"),
            (e0 + 32, &0u32.to_le_bytes(), "partition name out of bounds or not UTF-8"),
            (e0 + 32, &u32::MAX.to_le_bytes(), "partition name out of bounds or not UTF-8"),
            (e0 + 36, &u32::MAX.to_le_bytes(), "partition name out of bounds or not UTF-8"),
            (e0 + 36, &100_000u32.to_le_bytes(), "partition name out of bounds or not UTF-8"),
            (name0 as usize, &[0xff], "partition name out of bounds or not UTF-8"),
            // A disk on a partition with image bytes in the package.
            (e0 + 8, &4096u64.to_le_bytes(), "a disk on a partition carries an image"),
            (e0 + 16, &1u64.to_le_bytes(), "a disk on a partition carries an image"),
        ];
        for &(at, v, what) in malformed {
            let mut b = good.clone();
            set(&mut b, at, v);
            assert_eq!(malformed_what(decode_package(&b, &M)), what, "at {at} = {v:?}");
        }
        // Well formed but against the rules: a bad name, a name another VM's disk has, a
        // disk beyond 1 TiB or not a whole number of sectors.
        let invalid: &[(usize, &[u8], &str)] = &[
            (name0 as usize, b"L", "vm[0].disk[0].partition"),
            (name0 as usize + 6, b" ", "vm[0].disk[0].partition"),
            (e0 + 36, &37u32.to_le_bytes(), "vm[0].disk[0].partition"),
            (e1 + 32, &name0.to_le_bytes(), "vm[1].disk[0].partition"),
            (e1, &((1u64 << 40) + 512).to_le_bytes(), "vm[1].disk[0].size"),
            (e0, &1000u64.to_le_bytes(), "vm[0].disk[0].size"),
        ];
        for &(at, v, key) in invalid {
            let mut b = good.clone();
            set(&mut b, at, v);
            if at == e1 + 32 {
                set(&mut b, e1 + 36, &11u32.to_le_bytes());
            }
            match decode_package(&b, &M) {
                Err(PackageError::Invalid(got)) => assert_eq!(got.path(), key, "{got}"),
                other => panic!("{key}: {:?}", other.map(|p| p.vms)),
            }
        }
        // vm1's name pointed at a part of vm0's: legal, if odd; the rules still hold.
        let mut b = good.clone();
        set(&mut b, e1 + 32, &(name0 + 7).to_le_bytes());
        assert_eq!(decode_package(&b, &M).unwrap().vms[1].disks[0].partition, Some("data"));
    }

    #[test]
    fn passthrough_is_exclusive_across_decoded_vms() {
        let img = images();
        let mut vms = specs(&img);
        vms[1].passthrough[1].path = "/pl031@9010000";
        let bytes = {
            // encode_package refuses it, so forge it: encode a legal package,
            // then point vm1's second path at vm0's path string.
            let legal = encode_package(&specs(&img), &SchedSpec::default(), None, &M).unwrap();
            let mut b = legal.clone();
            let path0 = extras_at(&b, REC0) + 2 * DISK_ENTRY_LEN + NIC_ENTRY_LEN;
            let path1 = extras_at(&b, REC1) + DISK_ENTRY_LEN + 2 * NIC_ENTRY_LEN + PATH_ENTRY_LEN;
            let src: [u8; 8] = b[path0..path0 + 8].try_into().unwrap();
            set(&mut b, path1, &src);
            b
        };
        assert_eq!(
            encode_package(&vms, &SchedSpec::default(), None, &M).unwrap_err().path(),
            "vm[1].passthrough"
        );
        match decode_package(&bytes, &M) {
            Err(PackageError::Invalid(v)) => {
                assert_eq!(v.path(), "vm[1].passthrough");
                assert!(v.message.contains("vm[0] (\"vm0\")"), "{v}");
            }
            other => panic!("{:?}", other.map(|p| p.vms)),
        }
    }

    #[test]
    fn semantic_rules_apply_to_decoded_vms() {
        let good = valid();
        let cases: [(usize, &[u8], &str); 9] = [
            (REC0 + 16, &[0], "vm[0].vcpus"),
            (REC0 + 20 + 4, &0u32.to_le_bytes(), "vm[0].cpu_affinity"),
            (REC0 + 168, &0u32.to_le_bytes(), "vm[0].weight"),
            (REC0 + 172, &100_000u32.to_le_bytes(), "vm[0].cap"),
            (REC0 + 180, &10_000u32.to_le_bytes(), "vm[0].realtime.budget_us"),
            (40, &5u32.to_le_bytes(), "scheduler.quantum_ms"),
            (REC0 + 64, &0x0800_0000u64.to_le_bytes(), "vm[0].memory_base"),
            (REC0 + 80, &0x41f0_0000u64.to_le_bytes(), "vm[0].entry"),
            (REC0 + 96, &0x5000_0000u64.to_le_bytes(), "vm[0].kernel_load"),
        ];
        for (at, v, key) in cases {
            let mut b = good.clone();
            set(&mut b, at, v);
            match decode_package(&b, &M) {
                Err(PackageError::Invalid(got)) => assert_eq!(got.path(), key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }

    #[test]
    fn truncated_at_every_length() {
        let good = valid();
        for n in 0..good.len() {
            let r = decode_package(&good[..n], &M);
            assert!(r.is_err(), "decoded a package cut at {n}");
        }
    }

    /// xorshift64*: deterministic, dependency-free noise.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for round in 0..2000 {
            let len = (rng.next() % 12_000) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            // Half the time give it a valid header so the record decoder is
            // reached, not only the magic check.
            if round % 2 == 0 && len >= PACKAGE_HEADER_LEN {
                b[..8].copy_from_slice(&PACKAGE_MAGIC);
                set(&mut b, 8, &PACKAGE_VERSION.to_le_bytes());
                set(&mut b, 12, &((rng.next() % 4) as u32).to_le_bytes());
                set(&mut b, 16, &((len as u64) & !4095).to_le_bytes());
                set(&mut b, 24, &4096u64.to_le_bytes());
                set(&mut b, 32, &(rng.next() % 4096).to_le_bytes());
            }
            let _ = decode_package(&b, &M);
            let _ = package_len(&b);
        }
    }

    #[test]
    fn corrupting_any_metadata_byte_never_panics() {
        let good = valid();
        let mut rng = Rng(42);
        let blobs_off = u64::from_le_bytes(good[24..32].try_into().unwrap()) as usize;
        for at in 0..blobs_off {
            for v in [0u8, 1, 0x7f, 0x80, 0xff, rng.next() as u8] {
                let mut b = good.clone();
                b[at] = v;
                if let Ok(pkg) = decode_package(&b, &M) {
                    // Whatever still decodes must still pass the rules.
                    assert!(check_vms(&pkg.vms, &M).is_ok());
                }
            }
        }
    }

    #[test]
    fn corrupting_many_metadata_bytes_never_panics() {
        let good = valid();
        let mut rng = Rng(7);
        let blobs_off = u64::from_le_bytes(good[24..32].try_into().unwrap()) as usize;
        for _ in 0..5000 {
            let mut b = good.clone();
            for _ in 0..1 + rng.next() % 8 {
                let at = (rng.next() % blobs_off as u64) as usize;
                // Small values as often as random ones: they make plausible
                // counts and offsets, which reach deeper into the decoder.
                b[at] = match rng.next() % 3 {
                    0 => (rng.next() % 8) as u8,
                    _ => rng.next() as u8,
                };
            }
            if let Ok(pkg) = decode_package(&b, &M) {
                assert!(check_vms(&pkg.vms, &M).is_ok());
            }
        }
    }

    #[test]
    fn error_messages_say_what_to_do() {
        let e = PackageError::UnsupportedVersion { found: 9 }.to_string();
        assert!(e.contains("rebuild"), "{e}");
        let e = PackageError::Malformed { vm: Some(1), what: "images overlap" }.to_string();
        assert_eq!(e, "VM package corrupt: vm[1]: images overlap");
    }
}
