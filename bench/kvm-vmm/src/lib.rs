//! The pure parts of `kvm-vmm`, the small VMM that runs vmbench as a KVM guest for
//! `make compare` (bench/README.md, "Comparing systems"): the guest's memory map, the arm64
//! Image header, the device tree, and the user-space PL011. `main.rs` drives KVM with them.
//!
//! The guest's machine is a cut-down QEMU `virt`: RAM at 0x4000_0000, a GICv3 (distributor
//! 0x0800_0000, redistributors from 0x080A_0000) emulated in the kernel, the architected timer,
//! PSCI 0.2+ answered in the kernel through `hvc`, and two trapped devices emulated here in
//! user space: the PL011 at 0x0900_0000 and a virtio-mmio entropy device at 0x0A00_0000.
//! vmbench learns all of it from the device tree.

pub mod fdt;
pub mod image;
pub mod pl011;
pub mod virtio;

/// Guest-physical addresses and sizes, the same as QEMU `virt`'s (and armhv's VMs'), so that
/// vmbench finds the same devices in the same places under every system it is compared on.
pub mod layout {
    pub const RAM_BASE: u64 = 0x4000_0000;
    pub const GICD_BASE: u64 = 0x0800_0000;
    pub const GICD_SIZE: u64 = 0x1_0000;
    pub const GICR_BASE: u64 = 0x080A_0000;
    /// One redistributor: its RD_base and SGI_base frames (64 KiB each).
    pub const GICR_STRIDE: u64 = 0x2_0000;
    pub const UART_BASE: u64 = 0x0900_0000;
    pub const UART_SIZE: u64 = 0x1000;
    /// QEMU `virt`'s UART interrupt: SPI 1.
    pub const UART_SPI: u32 = 1;
    /// The first of QEMU `virt`'s virtio-mmio transports and its interrupt, SPI 16: the
    /// entropy device.
    pub const VIRTIO_BASE: u64 = 0x0A00_0000;
    pub const VIRTIO_SIZE: u64 = 0x200;
    pub const VIRTIO_SPI: u32 = 16;
    /// The device tree goes this far below the end of RAM (2 MiB aligned, as the arm64 boot
    /// protocol asks, and far above vmbench's image and stacks).
    pub const DTB_FROM_END: u64 = 2 << 20;
    /// Interrupts the in-kernel vGIC implements (a multiple of 32): SGIs, PPIs and 96 SPIs.
    pub const GIC_NR_IRQS: u32 = 128;

    /// The guest-physical address of the device tree in `ram_size` bytes of RAM.
    pub fn dtb_addr(ram_size: u64) -> u64 {
        RAM_BASE + ram_size - DTB_FROM_END
    }
}

/// How `kvm-vmm` was asked to run: `kvm-vmm [--image PATH] [--vcpus N] [--mem MIB]
/// [--timeout SECS] [WORD...]`, the words being the guest's `/chosen/bootargs`. As a Linux
/// `/init` it gets the kernel command line's words after `--`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    pub image: String,
    pub vcpus: u32,
    pub mem_mib: u64,
    /// How long the guest may run before the VMM gives up on it.
    pub timeout_secs: u64,
    pub bootargs: String,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            image: "/vmbench.img".into(),
            vcpus: 2,
            mem_mib: 64,
            timeout_secs: 900,
            bootargs: String::new(),
        }
    }
}

/// Most vCPUs: vmbench's own limit, and two redistributor pages each.
pub const MAX_VCPUS: u32 = 8;

impl Args {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut a = Self::default();
        let mut words = Vec::new();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next().ok_or_else(|| format!("{name} needs a value (kvm-vmm --help)"))
            };
            let number = |name: &str, v: String| {
                v.parse::<u64>().map_err(|_| format!("{name} {v}: not a number"))
            };
            match arg.as_str() {
                "--image" => a.image = value("--image")?,
                "--vcpus" => a.vcpus = number("--vcpus", value("--vcpus")?)? as u32,
                "--mem" => a.mem_mib = number("--mem", value("--mem")?)?,
                "--timeout" => a.timeout_secs = number("--timeout", value("--timeout")?)?,
                s if s.starts_with("--") => return Err(format!("unknown option {s}")),
                _ => words.push(arg),
            }
        }
        if !(1..=MAX_VCPUS).contains(&a.vcpus) {
            return Err(format!("--vcpus {}: between 1 and {MAX_VCPUS}", a.vcpus));
        }
        // vmbench's image, stacks and sample store need a few MiB, and the device tree sits
        // 2 MiB below the end.
        if !(16..=1024).contains(&a.mem_mib) {
            return Err(format!("--mem {}: between 16 and 1024 MiB", a.mem_mib));
        }
        a.bootargs = words.join(" ");
        Ok(a)
    }

    pub fn ram_bytes(&self) -> u64 {
        self.mem_mib << 20
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<Args, String> {
        Args::parse(words.iter().map(|s| s.to_string()))
    }

    #[test]
    fn words_are_the_bootargs_and_options_are_taken_out() {
        let a = parse(&["n=1000", "--vcpus", "2", "warmup=100", "hypercall"]).unwrap();
        assert_eq!(a.bootargs, "n=1000 warmup=100 hypercall");
        assert_eq!((a.vcpus, a.mem_mib, a.image.as_str()), (2, 64, "/vmbench.img"));
        assert_eq!(parse(&[]).unwrap().bootargs, "");
    }

    #[test]
    fn bad_options_say_what_is_wrong() {
        assert!(parse(&["--vcpus", "0"]).unwrap_err().contains("between 1"));
        assert!(parse(&["--mem", "8"]).unwrap_err().contains("16"));
        assert!(parse(&["--mem"]).unwrap_err().contains("needs a value"));
        assert!(parse(&["--frobnicate"]).unwrap_err().contains("unknown option"));
        assert!(parse(&["--timeout", "x"]).unwrap_err().contains("not a number"));
    }

    #[test]
    fn the_device_tree_sits_2_mib_below_the_end_of_ram() {
        assert_eq!(layout::dtb_addr(64 << 20), 0x43E0_0000);
    }
}
