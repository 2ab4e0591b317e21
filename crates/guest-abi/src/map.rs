//! The guest-physical memory map and the interrupts every VM sees: QEMU `virt`'s, so a program
//! that runs on `qemu-system-aarch64 -M virt` runs in an armhv VM unchanged.
//!
//! ```text
//! 0x0800_0000  GIC distributor         64 KiB (GICv3's or GICv2's register layout)
//! 0x0801_0000  GICv2 CPU interface     8 KiB  (GICv2 only: the hardware's virtual CPU interface)
//! 0x080A_0000  GICv3 redistributors    128 KiB per vCPU (GICv3 only; vCPU n at GICR_BASE +
//!                                      n * GICR_STRIDE)
//! 0x0900_0000  PL011 UART              4 KiB                SPI 1
//! 0x0A00_0000  virtio-mmio slot n      0x200 each, 32 slots SPI 16 + n (devices in the first 8,
//!                                                           the rest answer "no device")
//! 0x4000_0000  RAM (default base; nothing may be mapped below it but the devices above)
//! ```
//!
//! SPI numbers are INTID - 32, as device trees write them; PPI numbers INTID - 16.

use addr::Ipa;

/// The distributor frame (`GICD_*`).
pub const GICD_BASE: Ipa = Ipa(0x0800_0000);
pub const GICD_SIZE: u64 = 0x1_0000;

/// A virtual GICv2's CPU interface (`GICC_*`, up to `GICC_DIR` at 0x1000): the host's virtual
/// CPU interface (GICV) mapped in, so the guest acknowledges and completes interrupts without
/// trapping. Only these two pages: never the host's GICV beyond them, its GICH or its GICC.
pub const GICC_BASE: Ipa = Ipa(0x0801_0000);
pub const GICC_SIZE: u64 = 0x2000;

/// The first redistributor; vCPU n's is at `GICR_BASE + n * GICR_STRIDE`.
pub const GICR_BASE: Ipa = Ipa(0x080A_0000);
/// One redistributor: its `RD_base` and `SGI_base` frames, 64 KiB each (no VLPI frames).
pub const GICR_STRIDE: u64 = 0x2_0000;

/// The redistributor region of a VM with `vcpus` vCPUs, in bytes.
pub const fn gicr_size(vcpus: usize) -> u64 {
    vcpus as u64 * GICR_STRIDE
}

/// Most vCPUs a VM may have: vCPU n has MPIDR Aff0 = n, and the GIC's 8-bit target lists name
/// at most 8 CPUs.
pub const MAX_VCPUS: usize = 8;

/// The interrupt controller a VM sees: a GICv3 (distributor, redistributors, the CPU interface
/// in system registers) or a GICv2 (distributor, memory-mapped CPU interface). It follows the
/// host's, whose virtual CPU interface the guest uses directly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GicVersion {
    V2,
    #[default]
    V3,
}

/// The PL011 UART's register frame and its SPI.
pub const UART_BASE: Ipa = Ipa(0x0900_0000);
pub const UART_SIZE: u64 = 0x1000;
pub const UART_SPI: u32 = 1;

/// virtio-mmio slot n is at `VIRTIO_BASE + n * VIRTIO_SLOT_SIZE` and raises SPI
/// `VIRTIO_FIRST_SPI + n`; a VM has [`VIRTIO_SLOTS`] of them (its NICs, disks, console,
/// entropy source and a control VM's channel to armhv together).
pub const VIRTIO_BASE: Ipa = Ipa(0x0A00_0000);
pub const VIRTIO_SLOT_SIZE: u64 = 0x200;
pub const VIRTIO_FIRST_SPI: u32 = 16;
pub const VIRTIO_SLOTS: usize = 8;
/// The transports of QEMU `virt`'s virtio-mmio window, which programs written for that board
/// probe: those after a VM's devices answer as empty transports (device ID 0), as on QEMU.
pub const VIRTIO_TRANSPORTS: usize = 32;
/// The whole window, `VIRTIO_TRANSPORTS` slots.
pub const VIRTIO_WINDOW_SIZE: u64 = VIRTIO_TRANSPORTS as u64 * VIRTIO_SLOT_SIZE;

/// Where virtio-mmio slot `n` is.
pub const fn virtio_slot(n: usize) -> Ipa {
    Ipa(VIRTIO_BASE.0 + n as u64 * VIRTIO_SLOT_SIZE)
}

/// The SPI of virtio-mmio slot `n`.
pub const fn virtio_spi(n: usize) -> u32 {
    VIRTIO_FIRST_SPI + n as u32
}

/// Where RAM starts unless the VM's config says otherwise, and the lowest address it may start
/// at: everything below is the device windows above.
pub const RAM_BASE: Ipa = Ipa(0x4000_0000);

/// The INTID of SPI `spi`.
pub const fn spi_intid(spi: u32) -> u32 {
    32 + spi
}

/// The architected timer PPIs (INTID - 16) in the order of the `arm,armv8-timer` binding:
/// secure physical, non-secure physical, virtual, hypervisor.
pub const TIMER_PPIS: [u32; 4] = [13, 14, 11, 10];
/// The guest's virtual timer (CNTV), which it drives directly.
pub const VTIMER_INTID: u32 = 16 + TIMER_PPIS[2];
/// The guest's EL1 physical timer (CNTP), emulated by armhv.
pub const PTIMER_INTID: u32 = 16 + TIMER_PPIS[1];
/// The PMU's overflow interrupt (PPI 7, as on QEMU `virt`), for the `arm,armv8-pmuv3` node.
pub const PMU_PPI: u32 = 7;
pub const PMU_INTID: u32 = 16 + PMU_PPI;

#[cfg(test)]
mod tests {
    use super::*;
    use addr::IpaRange;

    /// Every device window, as large as it can be.
    fn windows() -> [(&'static str, IpaRange); 5] {
        [
            ("gicd", IpaRange::new(GICD_BASE, GICD_SIZE)),
            ("gicc", IpaRange::new(GICC_BASE, GICC_SIZE)),
            ("gicr", IpaRange::new(GICR_BASE, gicr_size(MAX_VCPUS))),
            ("uart", IpaRange::new(UART_BASE, UART_SIZE)),
            ("virtio", IpaRange::new(VIRTIO_BASE, VIRTIO_WINDOW_SIZE)),
        ]
    }

    #[test]
    fn device_windows_do_not_overlap_and_lie_below_ram() {
        let w = windows();
        for (i, (a, ra)) in w.iter().enumerate() {
            assert!(ra.checked_end().is_some_and(|end| end.0 <= RAM_BASE.0), "{a} reaches RAM");
            for (b, rb) in &w[i + 1..] {
                assert!(!ra.overlaps(rb), "{a} overlaps {b}");
            }
        }
    }

    #[test]
    fn windows_are_page_aligned_where_stage2_maps_them() {
        // The GIC frames and the UART are whole pages (trapped as a unit); virtio slots are
        // smaller but their window starts on a page.
        for (name, r) in windows() {
            assert!(r.start.0 % 0x1000 == 0 && r.size % 0x1000 == 0, "{name}");
        }
    }

    #[test]
    fn slots() {
        assert_eq!(virtio_slot(0), VIRTIO_BASE);
        assert_eq!(virtio_slot(3), Ipa(0x0A00_0600));
        assert_eq!(virtio_spi(7), 23);
        assert_eq!(spi_intid(UART_SPI), 33);
    }

    #[test]
    fn interrupts_are_distinct() {
        let spis: std::vec::Vec<u32> =
            core::iter::once(UART_SPI).chain((0..VIRTIO_SLOTS).map(virtio_spi)).collect();
        for (i, a) in spis.iter().enumerate() {
            assert!(!spis[i + 1..].contains(a), "SPI {a} used twice");
            // The highest SPI is INTID 1019.
            assert!(spi_intid(*a) < 1020);
        }
        assert_eq!((VTIMER_INTID, PTIMER_INTID), (27, 30));
        for ppi in TIMER_PPIS {
            assert!((16..32).contains(&(16 + ppi)));
        }
    }
}
