//! The package: the VMs and their images, appended to the hypervisor's image.
//!
//! A small hand-written little-endian format rather than a serde encoding:
//! the images must sit at 4 KiB-aligned offsets so the hypervisor can copy them
//! page by page (or map them), and the decoder must be auditable line by line
//! because it parses untrusted bytes at EL2.
//!
//! ```text
//! offset  size  field (all integers little-endian)
//! header (PACKAGE_HEADER_LEN = 32 bytes)
//!      0     8  magic "ARMHVPKG"
//!      8     4  version (PACKAGE_VERSION)
//!     12     4  vm_count, 1..=MAX_VMS
//!     16     8  total_len: bytes from the magic to the end of the last image,
//!               a multiple of 4 KiB
//!     24     8  blobs_off: where the image area starts, a multiple of 4 KiB
//! vm_count records of RECORD_LEN = 160 bytes, from offset 32:
//!      0     4  name_off     \ UTF-8 strings, inside the string area
//!      4     4  name_len     | [end of records, blobs_off)
//!      8     4  cmdline_off  |
//!     12     4  cmdline_len  /
//!     16     1  vcpus
//!     17     1  device_count, <= MAX_DEVICES
//!     18     1  flags: bit 0 = has an initrd; other bits zero
//!     19     1  zero
//!     20    32  cpu_affinity: u32 per vCPU slot, u32::MAX = not pinned
//!     52     8  device codes, device_count used, the rest zero
//!     60     4  zero
//!     64     8  memory start (IPA)
//!     72     8  memory size
//!     80     8  entry (IPA)
//!     88     8  zero
//!     96    32  kernel: load IPA, mem_size, data_off, data_len
//!    128    32  initrd: same; all zero without an initrd
//! then the string area, zero padding to blobs_off, and the images, each at a
//! 4 KiB-aligned offset and zero-padded to the next 4 KiB.
//! ```
//!
//! Reserved fields must be zero so that a package from a different format
//! revision with the same version number is refused instead of misread. Two
//! VMs with identical images (the default config's two test guests) share one
//! copy; apart from that, images must not overlap.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use addr::Ipa;
use addr::IpaRange;

use crate::rules::{Violation, check_count, check_vms};
use crate::spec::{LoadImage, VmSpec};
use crate::{DeviceKind, MAX_DEVICES, MAX_VCPUS, Machine};

/// The first bytes of every package.
pub const PACKAGE_MAGIC: [u8; 8] = *b"ARMHVPKG";
/// Bumped on every format change; the hypervisor and its package are built
/// together, so the decoder accepts exactly one version.
pub const PACKAGE_VERSION: u32 = 1;
/// Alignment of every image inside the package and of the package's length.
/// The build tool must also place the package itself at a 4 KiB-aligned
/// address for the images to be page aligned in memory.
pub const PACKAGE_ALIGN: u64 = addr::PAGE_SIZE;
/// Bytes of the fixed header; [`package_len`] needs this many.
pub const PACKAGE_HEADER_LEN: usize = 32;

const RECORD_LEN: usize = 160;
const FLAG_INITRD: u8 = 1;
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
    pub vms: Vec<VmSpec<'a>>,
}

/// Encodes VMs into a package, after checking them against `machine` so the
/// build fails rather than the boot.
pub fn encode_package(vms: &[VmSpec<'_>], machine: &Machine) -> Result<Vec<u8>, Violation> {
    check_vms(vms, machine)?;

    let records_end = PACKAGE_HEADER_LEN + vms.len() * RECORD_LEN;
    let mut strings: Vec<u8> = Vec::new();
    let mut add_string = |s: &str| {
        let off = records_end + strings.len();
        strings.extend_from_slice(s.as_bytes());
        (off as u32, s.len() as u32)
    };
    let string_refs: Vec<_> =
        vms.iter().map(|vm| (add_string(vm.name), add_string(vm.cmdline))).collect();
    let blobs_off = align_up(records_end + strings.len());

    // Lay out the images, sharing identical ones.
    let mut blobs: Vec<(&[u8], usize)> = Vec::new();
    let mut cursor = blobs_off;
    let image_offs: Vec<(usize, Option<usize>)> = vms
        .iter()
        .map(|vm| {
            let kernel = place(&mut blobs, &mut cursor, vm.kernel.bytes);
            let initrd = vm.initrd.map(|i| place(&mut blobs, &mut cursor, i.bytes));
            (kernel, initrd)
        })
        .collect();
    let total_len = cursor;

    let mut out = vec![0u8; total_len];
    out[0..8].copy_from_slice(&PACKAGE_MAGIC);
    put(&mut out, 8, &PACKAGE_VERSION.to_le_bytes());
    put(&mut out, 12, &(vms.len() as u32).to_le_bytes());
    put(&mut out, 16, &(total_len as u64).to_le_bytes());
    put(&mut out, 24, &(blobs_off as u64).to_le_bytes());

    for (n, vm) in vms.iter().enumerate() {
        let r = PACKAGE_HEADER_LEN + n * RECORD_LEN;
        let ((name_off, name_len), (cmd_off, cmd_len)) = string_refs[n];
        put(&mut out, r, &name_off.to_le_bytes());
        put(&mut out, r + 4, &name_len.to_le_bytes());
        put(&mut out, r + 8, &cmd_off.to_le_bytes());
        put(&mut out, r + 12, &cmd_len.to_le_bytes());
        out[r + 16] = vm.vcpus;
        out[r + 17] = vm.devices.len() as u8;
        out[r + 18] = if vm.initrd.is_some() { FLAG_INITRD } else { 0 };
        for (slot, cpu) in vm.cpu_affinity.iter().enumerate() {
            put(&mut out, r + 20 + 4 * slot, &cpu.unwrap_or(UNPINNED).to_le_bytes());
        }
        for (slot, dev) in vm.devices.iter().enumerate() {
            out[r + 52 + slot] = dev.code();
        }
        put(&mut out, r + 64, &vm.memory.start.0.to_le_bytes());
        put(&mut out, r + 72, &vm.memory.size.to_le_bytes());
        put(&mut out, r + 80, &vm.entry.0.to_le_bytes());
        let (kernel_off, initrd_off) = image_offs[n];
        put_image(&mut out, r + 96, &vm.kernel, kernel_off);
        if let (Some(initrd), Some(off)) = (&vm.initrd, initrd_off) {
            put_image(&mut out, r + 128, initrd, off);
        }
    }
    out[records_end..records_end + strings.len()].copy_from_slice(&strings);
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

fn put_image(out: &mut [u8], at: usize, image: &LoadImage<'_>, off: usize) {
    put(out, at, &image.load.0.to_le_bytes());
    put(out, at + 8, &image.mem_size.to_le_bytes());
    put(out, at + 16, &(off as u64).to_le_bytes());
    put(out, at + 24, &(image.bytes.len() as u64).to_le_bytes());
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

struct Header {
    vm_count: u32,
    total_len: u64,
    blobs_off: u64,
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
    let (Some(version), Some(vm_count), Some(total_len), Some(blobs_off)) =
        (u32_at(bytes, 8), u32_at(bytes, 12), u64_at(bytes, 16), u64_at(bytes, 24))
    else {
        return Err(truncated);
    };
    if version != PACKAGE_VERSION {
        return Err(PackageError::UnsupportedVersion { found: version });
    }
    if !total_len.is_multiple_of(PACKAGE_ALIGN) || total_len < PACKAGE_HEADER_LEN as u64 {
        return Err(malformed(None, "total length is not a positive multiple of 4 KiB"));
    }
    Ok(Header { vm_count, total_len, blobs_off })
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
    let strings = records_end..h.blobs_off;
    let blobs = h.blobs_off..h.total_len;

    let mut vms = Vec::with_capacity(count);
    let mut extents: Vec<(u64, u64)> = Vec::with_capacity(2 * count);
    for n in 0..count {
        let at = PACKAGE_HEADER_LEN + n * RECORD_LEN;
        let rec = total
            .get(at..at + RECORD_LEN)
            .ok_or(malformed(Some(n), "record past the end of the package"))?;
        vms.push(decode_record(n, rec, total, &strings, &blobs, &mut extents)?);
    }
    check_extents(&mut extents)?;
    check_vms(&vms, machine)?;
    Ok(Package { bytes: total, vms })
}

fn decode_record<'a>(
    n: usize,
    rec: &[u8],
    pkg: &'a [u8],
    strings: &core::ops::Range<u64>,
    blobs: &core::ops::Range<u64>,
    extents: &mut Vec<(u64, u64)>,
) -> Result<VmSpec<'a>, PackageError> {
    let bad = |what| malformed(Some(n), what);
    let short = || bad("record too short");
    let u32f = |at| u32_at(rec, at).ok_or_else(short);
    let u64f = |at| u64_at(rec, at).ok_or_else(short);
    let u8f = |at: usize| rec.get(at).copied().ok_or_else(short);

    let string = |off: u32, len: u32, what| -> Result<&'a str, PackageError> {
        let (off, len) = (u64::from(off), u64::from(len));
        let end = off + len; // two u32s cannot overflow a u64
        if off < strings.start || end > strings.end {
            return Err(bad(what));
        }
        let raw = pkg.get(off as usize..end as usize).ok_or(bad(what))?;
        core::str::from_utf8(raw).map_err(|_| bad(what))
    };
    let name = string(u32f(0)?, u32f(4)?, "name out of bounds or not UTF-8")?;
    let cmdline = string(u32f(8)?, u32f(12)?, "cmdline out of bounds or not UTF-8")?;

    let vcpus = u8f(16)?;
    let device_count = usize::from(u8f(17)?);
    let flags = u8f(18)?;
    if u8f(19)? != 0 || u32f(60)? != 0 || u64f(88)? != 0 || flags & !FLAG_INITRD != 0 {
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
        let off = u64f(at + 16)?;
        let len = u64f(at + 24)?;
        let end = off.checked_add(len).ok_or(bad(what))?;
        if !off.is_multiple_of(PACKAGE_ALIGN) || off < blobs.start || end > blobs.end {
            return Err(bad(what));
        }
        let bytes = pkg.get(off as usize..end as usize).ok_or(bad(what))?;
        extents.push((off, len));
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

    Ok(VmSpec { name, vcpus, cpu_affinity, memory, entry, kernel, initrd, cmdline, devices })
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
    }

    fn images() -> Images {
        Images {
            k0: (0..5000u32).map(|i| i as u8).collect(),
            k1: vec![0xaa; 100],
            rd: vec![0x55; 9000],
        }
    }

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
        vec![a, b]
    }

    fn valid() -> Vec<u8> {
        let img = images();
        encode_package(&specs(&img), &M).unwrap()
    }

    #[test]
    fn round_trip() {
        let img = images();
        let vms = specs(&img);
        let bytes = encode_package(&vms, &M).unwrap();
        assert_eq!(&bytes[..8], b"ARMHVPKG");
        assert_eq!(bytes.len() % 4096, 0);
        assert_eq!(package_len(&bytes[..PACKAGE_HEADER_LEN]), Ok(bytes.len() as u64));
        let pkg = decode_package(&bytes, &M).unwrap();
        assert_eq!(pkg.vms, vms);
        assert_eq!(pkg.bytes.len(), bytes.len());
        for vm in &pkg.vms {
            let off = vm.kernel.bytes.as_ptr() as usize - bytes.as_ptr() as usize;
            assert_eq!(off % 4096, 0, "images are page aligned");
        }
        // Trailing bytes after the package are ignored.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0xff; 100]);
        assert_eq!(decode_package(&longer, &M).unwrap().vms, vms);
    }

    #[test]
    fn identical_images_are_stored_once() {
        let k = vec![7u8; 10_000];
        let vms = [spec("a", &k), spec("b", &k)];
        let bytes = encode_package(&vms, &M).unwrap();
        // One page of metadata plus three pages of kernel.
        assert_eq!(bytes.len(), 4 * 4096);
        let pkg = decode_package(&bytes, &M).unwrap();
        assert_eq!(pkg.vms[0].kernel.bytes.as_ptr(), pkg.vms[1].kernel.bytes.as_ptr());
    }

    #[test]
    fn encode_refuses_invalid_vms() {
        let k = [1u8; 8];
        let mut vm = spec("vm0", &k);
        vm.memory.size = 2 << 30;
        assert_eq!(encode_package(&[vm], &M).unwrap_err().path(), "vm[0].memory_size");
        assert_eq!(encode_package(&[], &M).unwrap_err().path(), "vm");
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
            Err(PackageError::Truncated { need: 32, have: 10 })
        ));
        assert!(matches!(decode_package(&[], &M), Err(PackageError::Truncated { .. })));
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(decode_package(&b, &M), Err(PackageError::BadMagic));
        let mut b = good.clone();
        set(&mut b, 8, &2u32.to_le_bytes());
        assert_eq!(decode_package(&b, &M), Err(PackageError::UnsupportedVersion { found: 2 }));
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
        for (at, v) in [(REC0 + 19, 1u8), (REC0 + 18, 2), (REC0 + 90, 1), (REC0 + 59, 1)] {
            let mut b = good.clone();
            b[at] = v;
            assert_eq!(malformed_what(decode_package(&b, &M)), "reserved field is not zero");
        }
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

    #[test]
    fn semantic_rules_apply_to_decoded_vms() {
        let good = valid();
        let cases: [(usize, &[u8], &str); 5] = [
            (REC0 + 16, &[0], "vm[0].vcpus"),
            (REC0 + 20 + 4, &0u32.to_le_bytes(), "vm[0].cpu_affinity"),
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
    fn error_messages_say_what_to_do() {
        let e = PackageError::UnsupportedVersion { found: 9 }.to_string();
        assert!(e.contains("rebuild"), "{e}");
        let e = PackageError::Malformed { vm: Some(1), what: "images overlap" }.to_string();
        assert_eq!(e, "VM package corrupt: vm[1]: images overlap");
    }
}
