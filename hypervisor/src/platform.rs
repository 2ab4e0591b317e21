//! What the machine looks like, read from the device tree the loader passed us: RAM, CPUs,
//! the console UART, the GIC and the PSCI conduit. Nothing here is hard-coded.

use crate::arch::aarch64::cpu::MAX_CPUS;
use fdt::Fdt;

pub const MAX_RAM_REGIONS: usize = 8;
/// virtio-mmio transports armhv looks at (QEMU `virt` has 32).
pub const MAX_VIRTIO_MMIO: usize = 32;

#[derive(Clone, Copy, Debug, Default)]
pub struct Range {
    pub start: u64,
    pub size: u64,
}

impl Range {
    pub fn end(&self) -> u64 {
        self.start + self.size
    }
}

pub struct Platform {
    pub ram: heapless::Vec<Range, MAX_RAM_REGIONS>,
    /// MPIDR affinity of each CPU, in device-tree order; the index is the logical CPU number.
    pub cpus: heapless::Vec<u64, MAX_CPUS>,
    /// CPUs the device tree lists beyond MAX_CPUS (reported, not used).
    pub cpus_ignored: usize,
    pub uart: Range,
    /// The console UART's interrupt (INTID of its SPI), if the device tree gives one.
    pub uart_intid: Option<u32>,
    pub gic_dist: Option<Range>,
    pub gic_redist: Option<Range>,
    pub psci_method: Option<&'static str>,
    /// The machine's virtio-mmio transports (its own devices: the machine disk), most of them
    /// empty on QEMU.
    pub virtio_mmio: heapless::Vec<VirtioWindow, MAX_VIRTIO_MMIO>,
    pub dtb: Range,
    pub reserved: heapless::Vec<Range, 8>,
}

/// One of the machine's virtio-mmio transports: its registers and its interrupt, an SPI, as
/// (INTID, device-tree flags: 1 = rising edge, 4 = high level), if the device tree gives one.
#[derive(Clone, Copy, Debug)]
pub struct VirtioWindow {
    pub reg: Range,
    pub interrupt: Option<(u32, u32)>,
}

impl VirtioWindow {
    /// Whether its interrupt is level-sensitive.
    pub fn level(flags: u32) -> bool {
        flags & 0xc != 0
    }
}

#[derive(Debug)]
pub enum PlatformError {
    BadDeviceTree,
    NoMemory,
    NoUart,
    NoCpus,
}

impl core::fmt::Display for PlatformError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::BadDeviceTree => "x0 does not point at a valid device tree (boot armhv as an arm64 Image, e.g. with QEMU -kernel)",
            Self::NoMemory => "the device tree describes no memory",
            Self::NoUart => "the device tree has no arm,pl011 UART for the console",
            Self::NoCpus => "the device tree lists no CPUs",
        })
    }
}

impl Platform {
    /// # Safety
    /// `dtb` must be the address the loader passed in x0; the blob must stay untouched for as
    /// long as the returned strings are used (its range is reserved from allocation).
    pub unsafe fn from_device_tree(dtb: usize) -> Result<Self, PlatformError> {
        // SAFETY: forwarded from the caller; `from_ptr` checks the header magic and size.
        let fdt: Fdt<'static> =
            unsafe { Fdt::from_ptr(dtb as *const u8) }.map_err(|_| PlatformError::BadDeviceTree)?;

        let mut ram = heapless::Vec::new();
        for region in fdt.memory().regions() {
            if let Some(size) = region.size {
                let _ =
                    ram.push(Range { start: region.starting_address as u64, size: size as u64 });
            }
        }
        if ram.is_empty() {
            return Err(PlatformError::NoMemory);
        }

        let mut cpus = heapless::Vec::new();
        let mut cpus_ignored = 0;
        for cpu in fdt.cpus() {
            if cpus.push(cpu.ids().first() as u64).is_err() {
                cpus_ignored += 1;
            }
        }
        if cpus.is_empty() {
            return Err(PlatformError::NoCpus);
        }

        let uart_node = fdt
            .chosen()
            .stdout()
            .filter(|n| n.compatible().is_some_and(|c| c.all().any(|s| s == "arm,pl011")))
            .or_else(|| fdt.find_compatible(&["arm,pl011"]))
            .ok_or(PlatformError::NoUart)?;
        let uart = first_reg(&uart_node).ok_or(PlatformError::NoUart)?;
        let uart_intid = match gic_interrupts(&uart_node).map(|mut irqs| irqs.next()) {
            Ok(Some(GicInterrupt::Spi { intid, .. })) => Some(intid),
            _ => None,
        };

        let (gic_dist, gic_redist) = match fdt.find_compatible(&["arm,gic-v3"]) {
            Some(gic) => {
                let mut regs = gic.reg().into_iter().flatten();
                let to_range = |r: fdt::standard_nodes::MemoryRegion| Range {
                    start: r.starting_address as u64,
                    size: r.size.unwrap_or(0) as u64,
                };
                (regs.next().map(to_range), regs.next().map(to_range))
            }
            None => (None, None),
        };

        let psci_method = fdt
            .find_compatible(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"])
            .and_then(|n| n.property("method"))
            .and_then(|p| p.as_str());

        let mut virtio_mmio = heapless::Vec::new();
        for node in fdt.all_nodes() {
            if node.compatible().is_some_and(|c| c.all().any(|s| s == "virtio,mmio"))
                && let Some(reg) = first_reg(&node)
            {
                let interrupt = match gic_interrupts(&node).map(|mut irqs| irqs.next()) {
                    Ok(Some(GicInterrupt::Spi { intid, flags })) => Some((intid, flags)),
                    _ => None,
                };
                let _ = virtio_mmio.push(VirtioWindow { reg, interrupt });
            }
        }

        let mut reserved = heapless::Vec::new();
        for r in fdt.memory_reservations() {
            let _ = reserved.push(Range { start: r.address() as u64, size: r.size() as u64 });
        }

        Ok(Self {
            ram,
            cpus,
            cpus_ignored,
            uart,
            uart_intid,
            gic_dist,
            gic_redist,
            psci_method,
            virtio_mmio,
            dtb: Range { start: dtb as u64, size: fdt.total_size() as u64 },
            reserved,
        })
    }

    pub fn ram_bytes(&self) -> u64 {
        self.ram.iter().map(|r| r.size).sum()
    }

    /// The device at host device-tree path `path`, for assignment to a VM: its first register
    /// window and its SPIs. Errors say what is wrong with the node.
    pub fn host_device(&self, path: &str) -> Result<HostDevice, &'static str> {
        // SAFETY: `dtb` was validated in `from_device_tree` and its memory is reserved.
        let fdt: Fdt<'static> = unsafe { Fdt::from_ptr(self.dtb.start as *const u8) }
            .map_err(|_| "the host device tree is unreadable")?;
        let node = fdt.find_node(path).ok_or("no such node in the host device tree")?;
        if node.property("status").and_then(|p| p.as_str()).is_some_and(|s| s != "okay") {
            return Err("the host device tree marks the device disabled");
        }
        let reg = node
            .reg()
            .and_then(|mut r| r.next())
            .and_then(|r| Some(Range { start: r.starting_address as u64, size: r.size? as u64 }))
            .ok_or("the node has no register window")?;
        let mut interrupts = alloc::vec::Vec::new();
        for irq in gic_interrupts(&node)? {
            match irq {
                GicInterrupt::Spi { intid, flags } => interrupts.push((intid, flags)),
                GicInterrupt::Private => {
                    return Err(
                        "the device has a per-CPU interrupt (PPI), which cannot be assigned",
                    );
                }
            }
        }
        Ok(HostDevice {
            node_name: node.name,
            compatible: node.property("compatible").map_or(&[][..], |p| p.value),
            reg,
            interrupts,
            properties: node.properties().map(|p| p.name).collect(),
        })
    }
}

/// A device of the host's device tree.
pub struct HostDevice {
    /// Node name with unit address.
    pub node_name: &'static str,
    /// Raw `compatible` (NUL-separated strings).
    pub compatible: &'static [u8],
    pub reg: Range,
    /// (INTID, device-tree interrupt flags) of each SPI.
    pub interrupts: alloc::vec::Vec<(u32, u32)>,
    /// The names of the node's properties (whether it masters DMA shows in them).
    pub properties: alloc::vec::Vec<&'static str>,
}

fn first_reg(node: &fdt::node::FdtNode) -> Option<Range> {
    let r = node.reg()?.next()?;
    Some(Range { start: r.starting_address as u64, size: r.size.unwrap_or(0x1000) as u64 })
}

/// One interrupt specifier of a node whose parent is the GICv3 (`#interrupt-cells = 3`).
enum GicInterrupt {
    Spi {
        intid: u32,
        flags: u32,
    },
    /// A PPI (or anything that is not an SPI): per CPU, never a device's alone.
    Private,
}

/// The node's `interrupts`: `<type number flags>` triples, type 0 = SPI (INTID 32 + number).
/// An iterator, not a `Vec`: the UART's is read before the heap exists.
fn gic_interrupts<'a>(
    node: &fdt::node::FdtNode<'_, 'a>,
) -> Result<impl Iterator<Item = GicInterrupt> + 'a, &'static str> {
    let value = node.property("interrupts").map_or(&[][..], |p| p.value);
    if !value.len().is_multiple_of(12) {
        return Err("malformed interrupts property");
    }
    let word = |cell: &[u8], i: usize| {
        u32::from_be_bytes([cell[4 * i], cell[4 * i + 1], cell[4 * i + 2], cell[4 * i + 3]])
    };
    Ok(value.chunks_exact(12).map(move |cell| match word(cell, 0) {
        0 => GicInterrupt::Spi { intid: 32 + word(cell, 1), flags: word(cell, 2) },
        _ => GicInterrupt::Private,
    }))
}
