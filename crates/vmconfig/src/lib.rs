//! VM definitions, from the user's TOML file to the record the hypervisor boots.
//!
//! The pipeline has two ends that never share memory:
//!
//! ```text
//!  configs/*.toml --[std: load/parse]--> Config --[Config::spec + images]--> VmSpec
//!       --[encode_package]--> bytes appended to the hypervisor image
//!       --[decode_package, at EL2]--> VmSpec (zero-copy) --> build the VMs
//! ```
//!
//! The hypervisor must not trust the package: it is just bytes found after its
//! own image. So the semantic rules live in one place ([`check_vms`]) and run on
//! both ends — the build tool rejects a bad config with a message naming the
//! file and key, and the hypervisor rejects a corrupt or foreign package before
//! it maps a single guest page.
//!
//! Without the default `std` feature the crate is `no_std + alloc` and holds
//! only the package format and the checks.
//!
//! The build tool's side, end to end:
//!
//! ```
//! # #[cfg(feature = "std")] {
//! use std::path::Path;
//! use vmconfig::{ImageRef, Machine, decode_package, encode_package, parse};
//!
//! let machine = Machine { ram_bytes: 1 << 30, cpus: 4 };
//! let text = r#"
//!     [[vm]]
//!     name = "vm0"
//!     vcpus = 1
//!     memory_size = "32M"
//!     kernel = "@testguest"
//! "#;
//! let config = parse(text, Path::new("configs/example.toml"), &machine)?;
//! assert_eq!(config.vms[0].kernel, ImageRef::Built("testguest".into()));
//!
//! let kernel = vec![0u8; 8192]; // what building guests/testguest produced
//! let spec = config.spec(0, &kernel, None, &[])?;
//! let package = encode_package(&[spec], &config.scheduler, config.uplink(), &machine)?;
//!
//! // ...and the hypervisor's, at boot:
//! let vms = decode_package(&package, &machine)?.vms;
//! assert_eq!(vms[0].entry.raw(), 0x4008_0000);
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![no_std]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "std")]
mod image;
mod package;
mod rules;
mod spec;

#[cfg(feature = "std")]
mod config;

use core::fmt;

use guest_abi::map;

pub use addr::{Ipa, IpaRange};
/// The type of [`VmSpec::gic`], so users of the spec need not name `guest_abi`.
pub use guest_abi::map::GicVersion;

#[cfg(feature = "std")]
pub use config::{
    Config, ConfigError, DiskConfig, ImageRef, NicConfig, PartitionDisk, PassthroughConfig,
    VmConfig, load, parse,
};
pub use package::{
    PACKAGE_ALIGN, PACKAGE_HEADER_LEN, PACKAGE_MAGIC, PACKAGE_VERSION, Package, PackageError,
    decode_package, encode_package, package_len,
};
pub use rules::{Violation, check_scheduler, check_vms, valid_name};
pub use spec::{
    DEFAULT_MTU, DEFAULT_QUANTUM_MS, DEFAULT_WEIGHT, DiskSpec, IrqDistSpec, LoadImage, MAX_MTU,
    MAX_WEIGHT, MIN_MTU, MIN_REALTIME_BUDGET_US, NicSpec, Passthrough, PassthroughDma, PmuMode,
    Policies, Policy, QUANTUM_MS, REALTIME_PERIOD_US, RealTimeSpec, SchedSpec, Spread,
    VirtioDevice, VmSched, VmSpec,
};

/// At most this many VMs per package: the hypervisor sizes its VM table
/// statically, and a count read from an untrusted package must be capped
/// before anything is allocated for it.
pub const MAX_VMS: usize = 16;
/// At most this many vCPUs per VM (the guest ABI's limit: `guest_abi::map::MAX_VCPUS`).
pub const MAX_VCPUS: u8 = map::MAX_VCPUS as u8;
/// VM names are short so they fit log prefixes and fixed-width tables.
pub const MAX_NAME_LEN: usize = 15;
/// Linux arm64's `COMMAND_LINE_SIZE` is 2048 bytes including the NUL.
pub const MAX_CMDLINE_LEN: usize = 2047;
/// At most this many emulated devices per VM.
pub const MAX_DEVICES: usize = 8;
/// Virtio-mmio transports armhv gives a VM (`guest_abi::map::VIRTIO_SLOTS`): its
/// NICs, disks, virtio-console, virtio-rng and, in a control VM, its channel to
/// armhv together must fit in them. See
/// [`VmSpec::virtio_devices`] for which device gets which slot.
pub const MAX_VIRTIO_SLOTS: usize = map::VIRTIO_SLOTS;
/// At most this many `[[vm.disk]]` tables per VM.
pub const MAX_DISKS: usize = 4;
/// At most this many `[[vm.nic]]` tables per VM.
pub const MAX_NICS: usize = 4;
/// At most this many `passthrough` paths per VM.
pub const MAX_PASSTHROUGH: usize = 4;
/// Largest RAM disk capacity. A RAM disk lives in host RAM, so it is budgeted
/// like guest RAM and kept modest.
pub const MAX_DISK_SIZE: u64 = 1 << 30;
/// Largest capacity of a disk on a partition of the machine disk
/// ([`DiskSpec::partition`]): 1 TiB. It takes no host RAM, so it is not
/// counted against the machine's RAM; the cap only keeps a typo (`"100T"`)
/// from making the build tool grow the disk image file without bound.
pub const MAX_PARTITION_DISK_SIZE: u64 = 1 << 40;
/// Longest partition name: what a GPT entry's name field holds (36 UTF-16
/// code units; the crate `machine-disk`'s `MAX_NAME`). Names use a-z 0-9 _ -.
pub const MAX_PARTITION_NAME_LEN: usize = 36;
/// virtio-blk counts capacity in 512-byte sectors, so capacities are multiples.
pub const DISK_SECTOR_SIZE: u64 = 512;
/// Longest `passthrough` path: ample for real device trees, and short enough
/// that a corrupt package cannot make the hypervisor walk huge strings.
pub const MAX_DT_PATH_LEN: usize = 127;

/// Host RAM kept back for the hypervisor itself (its image, the package, page
/// tables, per-CPU stacks, heap). Guest RAM is budgeted from the rest.
pub const HYPERVISOR_RESERVE: u64 = 64 << 20;
/// Guest RAM is mapped with 2 MiB Stage-2 blocks, so base and size are
/// multiples of this.
pub const MEMORY_ALIGN: u64 = addr::BLOCK_2M;
/// The device tree takes the last 2 MiB, so anything smaller leaves no room for
/// a kernel.
pub const MIN_MEMORY: u64 = 4 << 20;
/// Below this, QEMU `virt`'s map has the GIC, UART and virtio-mmio windows
/// (`guest_abi::map`); RAM must not shadow them.
pub const GUEST_RAM_START: Ipa = map::RAM_BASE;
/// Where RAM starts when the config does not say.
pub const DEFAULT_MEMORY_BASE: Ipa = GUEST_RAM_START;
/// Guest RAM must end below this: 40 bits is the smallest physical (and so
/// Stage-2 input) address size of the cores we target (Cortex-A53/A57/A72).
pub const IPA_LIMIT: u64 = 1 << 40;
/// The device tree area at the top of guest RAM (docs/guest-abi.md).
pub const FDT_AREA_SIZE: u64 = addr::BLOCK_2M;
/// Default load offset from the RAM base: the arm64 Image's historical
/// `text_offset`, and where bare-metal `virt` programs are usually linked.
pub const DEFAULT_KERNEL_OFFSET: u64 = 0x8_0000;
/// Kernel and initrd load addresses must be page aligned so the hypervisor can
/// copy images into guest RAM page by page.
pub const LOAD_ALIGN: u64 = addr::PAGE_SIZE;

/// The facts about the physical machine that bound a configuration.
///
/// The build tool passes the machine it builds for (e.g. the QEMU command
/// line); the hypervisor passes what it found at boot, so a package built for a
/// bigger board is refused instead of running out of memory half-way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    pub ram_bytes: u64,
    pub cpus: u32,
}

impl Machine {
    /// Bytes available to all guests together.
    pub const fn guest_ram_budget(&self) -> u64 {
        self.ram_bytes.saturating_sub(HYPERVISOR_RESERVE)
    }
}

/// The last 2 MiB of guest RAM, where the hypervisor writes the device tree.
///
/// Returns an empty range at the base if RAM is smaller than the area (such a
/// VM is rejected by the checks anyway).
pub const fn fdt_area(memory: IpaRange) -> IpaRange {
    if memory.size < FDT_AREA_SIZE {
        return IpaRange::new(memory.start, 0);
    }
    IpaRange::new(Ipa(memory.start.0.wrapping_add(memory.size - FDT_AREA_SIZE)), FDT_AREA_SIZE)
}

/// An emulated device a VM can ask for in `devices`.
///
/// Deliberately not `#[non_exhaustive]`: when a kind is added, every `match`
/// in the hypervisor should stop compiling until it handles it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// The PL011 UART (`guest_abi::map::UART_BASE`, `UART_SPI`).
    Pl011,
    /// A virtio console on a virtio-mmio slot.
    VirtioConsole,
    /// A virtio entropy source on a virtio-mmio slot.
    VirtioRng,
}

impl DeviceKind {
    /// Every kind, in the order the config file documentation lists them.
    pub const ALL: &'static [DeviceKind] =
        &[DeviceKind::Pl011, DeviceKind::VirtioConsole, DeviceKind::VirtioRng];

    /// The name used in config files.
    pub const fn name(self) -> &'static str {
        match self {
            DeviceKind::Pl011 => "pl011",
            DeviceKind::VirtioConsole => "virtio-console",
            DeviceKind::VirtioRng => "virtio-rng",
        }
    }

    /// Whether the device takes one of the VM's [`MAX_VIRTIO_SLOTS`].
    pub const fn is_virtio(self) -> bool {
        match self {
            DeviceKind::Pl011 => false,
            DeviceKind::VirtioConsole | DeviceKind::VirtioRng => true,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The package's byte code; 0 is never used so zeroed bytes do not decode
    /// as a device.
    pub(crate) const fn code(self) -> u8 {
        match self {
            DeviceKind::Pl011 => 1,
            DeviceKind::VirtioConsole => 2,
            DeviceKind::VirtioRng => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.code() == code)
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a byte count as written in config files: `"512K"`, `"64M"`, `"1G"`,
/// `"1T"` (binary multiples; `KiB`/`MiB`/`GiB`/`TiB` also accepted) or plain
/// decimal digits.
///
/// Returns `None` for anything else, including overflow, so a typo such as
/// `"64MB"` is an error rather than a silently different size.
pub fn parse_size(text: &str) -> Option<u64> {
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return None;
    }
    let shift = match suffix {
        "" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        _ => return None,
    };
    let value: u64 = digits.parse().ok()?;
    value.checked_mul(1 << shift)
}

/// Formats a byte count the way users write it (`32 MiB`), falling back to hex.
pub(crate) struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] =
            [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
        for (unit, name) in UNITS {
            if self.0 >= unit && self.0.is_multiple_of(unit) {
                return write!(f, "{} {}", self.0 / unit, name);
            }
        }
        write!(f, "{:#x} bytes", self.0)
    }
}

/// Formats an address the way TOML lets users write it (`0x4008_0000`), so a
/// suggested value can be pasted back into the file.
pub(crate) struct Addr(pub u64);

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut digits = [0u8; 16];
        let mut n = self.0;
        let mut len = 0;
        loop {
            digits[len] = b"0123456789abcdef"[(n & 0xf) as usize];
            len += 1;
            n >>= 4;
            if n == 0 {
                break;
            }
        }
        f.write_str("0x")?;
        for i in (0..len).rev() {
            let c = char::from(digits[i]);
            write!(f, "{c}")?;
            if i != 0 && i % 4 == 0 {
                f.write_str("_")?;
            }
        }
        Ok(())
    }
}

/// Formats a MAC address as config files write it: `52:54:00:12:34:56`.
pub(crate) struct Mac(pub [u8; 6]);

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl From<Ipa> for Addr {
    fn from(ipa: Ipa) -> Self {
        Addr(ipa.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn addr_display() {
        assert_eq!(format!("{}", Addr(0x4008_0000)), "0x4008_0000");
        assert_eq!(format!("{}", Addr(0x8_0000_0000)), "0x8_0000_0000");
        assert_eq!(format!("{}", Addr(0xfff)), "0xfff");
        assert_eq!(format!("{}", Addr(0)), "0x0");
        assert_eq!(format!("{}", Addr(u64::MAX)), "0xffff_ffff_ffff_ffff");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512K"), Some(512 << 10));
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("64MiB"), Some(64 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("3GiB"), Some(3 << 30));
        assert_eq!(parse_size("1T"), Some(1 << 40));
        assert_eq!(parse_size("2TiB"), Some(2 << 40));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("0"), Some(0));
        for bad in ["", "M", "64MB", "64m", " 64M", "64 M", "1.5G", "-1M", "0x100", "64M "] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
        // Overflow is an error, not a wrap.
        assert_eq!(parse_size("17179869184G"), None);
        assert_eq!(parse_size("99999999999999999999"), None);
    }

    #[test]
    fn size_display() {
        assert_eq!(format!("{}", Size(32 << 20)), "32 MiB");
        assert_eq!(format!("{}", Size(1 << 30)), "1 GiB");
        assert_eq!(format!("{}", Size(1536 << 20)), "1536 MiB");
        assert_eq!(format!("{}", Size(4)), "0x4 bytes");
        assert_eq!(format!("{}", Size(0)), "0x0 bytes");
    }

    #[test]
    fn fdt_area_is_last_2m() {
        let ram = IpaRange::new(Ipa(0x4000_0000), 32 << 20);
        assert_eq!(fdt_area(ram), IpaRange::new(Ipa(0x41e0_0000), 2 << 20));
        assert_eq!(fdt_area(IpaRange::new(Ipa(0x4000_0000), 4096)).size, 0);
    }

    #[test]
    fn device_codes_round_trip() {
        for &k in DeviceKind::ALL {
            assert_eq!(DeviceKind::from_code(k.code()), Some(k));
            assert_eq!(DeviceKind::from_name(k.name()), Some(k));
        }
        assert_eq!(DeviceKind::from_code(0), None);
        assert_eq!(DeviceKind::from_code(4), None);
        assert_eq!(DeviceKind::from_name("PL011"), None);
        assert_eq!(DeviceKind::from_name("virtio-rng"), Some(DeviceKind::VirtioRng));
        assert!(DeviceKind::VirtioConsole.is_virtio() && !DeviceKind::Pl011.is_virtio());
    }

    #[test]
    fn mac_display() {
        assert_eq!(format!("{}", Mac([0x52, 0x54, 0, 0x12, 0x34, 0xab])), "52:54:00:12:34:ab");
    }
}
