//! What the hypervisor needs to build one VM: every default resolved, every
//! image in hand. Borrowed, so the decoder can point into the package instead
//! of copying kernels around at boot.

use alloc::vec::Vec;
use core::fmt;

use addr::{Ipa, IpaRange};

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
}

impl VmSpec<'_> {
    /// Where the hypervisor writes the device tree (its address goes in `x0`).
    pub fn fdt_area(&self) -> IpaRange {
        fdt_area(self.memory)
    }

    /// The affinity of the VM's vCPUs only.
    pub fn affinity(&self) -> &[Option<u32>] {
        let n = usize::from(self.vcpus).min(self.cpu_affinity.len());
        &self.cpu_affinity[..n]
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
}
