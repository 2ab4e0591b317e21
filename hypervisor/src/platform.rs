//! What the machine looks like, read from the device tree the loader passed us: RAM, CPUs,
//! the console UART, the GIC and the PSCI conduit. Nothing here is hard-coded.

use crate::arch::aarch64::cpu::MAX_CPUS;
use fdt::Fdt;

pub const MAX_RAM_REGIONS: usize = 8;
/// MPIDR_EL1's affinity fields: Aff3 (bits 39:32) and Aff2..Aff0 (bits 23:0).
const MPIDR_AFFINITY: u64 = 0xff_00ff_ffff;
/// virtio-mmio transports armhv looks at (QEMU `virt` has 32).
pub const MAX_VIRTIO_MMIO: usize = 32;
/// Firmware reservations armhv honours: `/memreserve/` entries and `reg` ranges of
/// `/reserved-memory`'s children together (read before the heap exists, so the room is fixed).
/// Firmware typically has a handful; a device tree with more is refused at boot, never cut.
pub const MAX_RESERVED: usize = 128;

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
    /// The interrupt controller's register frames, if the device tree has one armhv drives.
    pub gic: Option<GicFrames>,
    /// Its maintenance interrupt (the INTID of a PPI), if the device tree names it.
    pub gic_maintenance: Option<u32>,
    pub psci_method: Option<&'static str>,
    /// The machine's virtio-mmio transports (its own devices: the machine disk), most of them
    /// empty on QEMU.
    pub virtio_mmio: heapless::Vec<VirtioWindow, MAX_VIRTIO_MMIO>,
    pub dtb: Range,
    /// The firmware's reservations, kept out of the heap and the frame pool: every
    /// `/memreserve/` entry and every `reg` range of an enabled child of `/reserved-memory`.
    pub reserved: heapless::Vec<Range, MAX_RESERVED>,
    /// Reservations beyond [`MAX_RESERVED`]: armhv refuses to boot if there are any.
    pub reserved_beyond: usize,
}

/// The GIC's register frames, from its device-tree node's `reg`.
#[derive(Clone, Copy, Debug)]
pub enum GicFrames {
    /// `arm,gic-v3`: the distributor and one redistributor region.
    V3 { dist: Range, redist: Range },
    /// `arm,cortex-a15-gic` / `arm,gic-400` (the GICv2 binding): the distributor, the CPU
    /// interface, and with the virtualization extensions the virtual interface control (GICH)
    /// and the virtual CPU interface (GICV).
    V2 { dist: Range, cpu: Range, hyp: Option<Range>, vcpu: Option<Range> },
}

/// Compatibles of the GICv2 binding armhv drives (those with the virtualization extensions
/// list GICH and GICV as their third and fourth `reg`).
const GICV2_COMPATIBLES: [&str; 3] = ["arm,gic-400", "arm,cortex-a15-gic", "arm,cortex-a7-gic"];

impl GicFrames {
    fn from_device_tree(fdt: &Fdt<'_>) -> Option<Self> {
        let to_range = |r: fdt::standard_nodes::MemoryRegion| Range {
            start: r.starting_address as u64,
            size: r.size.unwrap_or(0) as u64,
        };
        if let Some(node) = fdt.find_compatible(&["arm,gic-v3"]) {
            let mut regs = node.reg().into_iter().flatten().map(to_range);
            return Some(Self::V3 { dist: regs.next()?, redist: regs.next()? });
        }
        let node = fdt.find_compatible(&GICV2_COMPATIBLES)?;
        let mut regs = node.reg().into_iter().flatten().map(to_range);
        Some(Self::V2 {
            dist: regs.next()?,
            cpu: regs.next()?,
            hyp: regs.next(),
            vcpu: regs.next(),
        })
    }

    /// Every frame, for armhv's page tables and its list of what no VM may be given.
    pub fn frames(&self) -> impl Iterator<Item = Range> {
        let (a, b, c, d) = match *self {
            Self::V3 { dist, redist } => (Some(dist), Some(redist), None, None),
            Self::V2 { dist, cpu, hyp, vcpu } => (Some(dist), Some(cpu), hyp, vcpu),
        };
        [a, b, c, d].into_iter().flatten()
    }
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
        let size = fdt.total_size();
        // SAFETY: the blob the loader passed, `size` bytes as its checked header says; nothing
        // else refers to it yet (the `Fdt` above is dropped before it is used again), and no
        // other CPU runs.
        let blob = unsafe { core::slice::from_raw_parts_mut(dtb as *mut u8, size) };
        remove_nops(blob).ok_or(PlatformError::BadDeviceTree)?;
        // SAFETY: as above; the blob is still a valid tree, with fewer tokens.
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

        // CPUs by their MPIDR affinity (every level), in device-tree order; the boot CPU is
        // always among those used, even if the tree lists more than armhv manages.
        let boot = crate::arch::aarch64::cpu::mpidr_affinity();
        let mut cpus = heapless::Vec::<u64, MAX_CPUS>::new();
        let mut cpus_ignored = 0;
        let enabled = |c: &fdt::standard_nodes::Cpu| {
            c.property("status").and_then(|s| s.as_str()).is_none_or(|s| s == "okay")
        };
        for cpu in fdt.cpus().filter(enabled) {
            let mpidr = cpu.ids().first() as u64 & MPIDR_AFFINITY;
            if cpus.push(mpidr).is_err() {
                cpus_ignored += 1;
                if mpidr == boot {
                    cpus[MAX_CPUS - 1] = mpidr;
                }
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

        let gic = GicFrames::from_device_tree(&fdt);
        let gic_maintenance = fdt
            .find_compatible(&["arm,gic-v3"])
            .or_else(|| fdt.find_compatible(&GICV2_COMPATIBLES))
            .and_then(|node| match gic_interrupts(&node).map(|mut irqs| irqs.next()) {
                Ok(Some(GicInterrupt::Private { intid })) => Some(intid),
                _ => None,
            });

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
        let mut reserved_beyond = 0;
        let mut reserve = |r: Range| {
            if r.size > 0 && reserved.push(r).is_err() {
                reserved_beyond += 1;
            }
        };
        for r in fdt.memory_reservations() {
            reserve(Range { start: r.address() as u64, size: r.size() as u64 });
        }
        // Children of /reserved-memory with `reg` are fixed regions the firmware or another
        // agent owns (with or without `no-map`, `reusable` or not: armhv shares none of them).
        // Those with only `size` are for the OS to place, and armhv places nothing there.
        if let Some(node) = fdt.find_node("/reserved-memory") {
            for child in node.children() {
                if child.property("status").and_then(|p| p.as_str()).is_some_and(|s| s != "okay") {
                    continue;
                }
                for r in child.reg().into_iter().flatten() {
                    let size = r.size.unwrap_or(0) as u64;
                    reserve(Range { start: r.starting_address as u64, size });
                }
            }
        }

        Ok(Self {
            ram,
            cpus,
            cpus_ignored,
            uart,
            uart_intid,
            gic,
            gic_maintenance,
            psci_method,
            virtio_mmio,
            dtb: Range { start: dtb as u64, size: fdt.total_size() as u64 },
            reserved,
            reserved_beyond,
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
                GicInterrupt::Private { .. } => {
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
    /// A PPI (type 1): INTID 16 + number.
    Private {
        intid: u32,
    },
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
        _ => GicInterrupt::Private { intid: 16 + word(cell, 1) },
    }))
}

/// Removes the NOP tokens from a device tree's structure block, in place. Firmware that deletes
/// a node or property overwrites it with NOP tokens (libfdt's `fdt_nop_node`: QEMU does, for
/// the memory nodes of a tree given with `-dtb`), and the `fdt` crate (0.1.5) stops looking
/// for a node at the first NOP between two nodes: armhv found no `/cpus` and stopped before its
/// console worked. `None` if the block is malformed.
fn remove_nops(blob: &mut [u8]) -> Option<()> {
    const BEGIN_NODE: u32 = 1;
    const END_NODE: u32 = 2;
    const PROP: u32 = 3;
    const NOP: u32 = 4;
    const END: u32 = 9;
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let off = word(blob, 8)? as usize;
    let size = word(blob, 36)? as usize;
    let block = blob.get_mut(off..off.checked_add(size)?)?;
    if !(block.as_ptr() as usize).is_multiple_of(4) {
        return None;
    }
    let (mut read, mut write) = (0, 0);
    loop {
        let token = word(block, read)?;
        let len = match token {
            BEGIN_NODE => {
                let name = block.get(read + 4..)?.iter().position(|&b| b == 0)?;
                4 + (name + 1).next_multiple_of(4)
            }
            PROP => 12 + (word(block, read + 4)? as usize).next_multiple_of(4),
            END_NODE | NOP | END => 4,
            _ => return None,
        };
        let end = read.checked_add(len).filter(|&e| e <= block.len())?;
        if token != NOP {
            // Word by word, volatile: the MMU is off, so this is Device memory, where an
            // access must be aligned (which a `copy_within` would not promise).
            let words = block.as_mut_ptr().cast::<u32>();
            for i in 0..(end - read) / 4 {
                // SAFETY: `read + 4i` and `write + 4i` are word offsets inside `block` (`write`
                // never passes `read`), 4-byte aligned as the block is (checked above).
                unsafe {
                    words.add(write / 4 + i).write_volatile(words.add(read / 4 + i).read_volatile())
                };
            }
            write += end - read;
        }
        read = end;
        if token == END {
            break;
        }
    }
    blob[36..40].copy_from_slice(&(write as u32).to_be_bytes());
    Some(())
}
