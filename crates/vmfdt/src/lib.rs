//! The flattened device tree (DTB) armhv hands each guest in `x0`.
//!
//! It describes the machine of `docs/guest-abi.md` (`guest_abi::map`), which is QEMU `virt`'s, in the
//! shape Linux expects from QEMU: the same node names (`/pl011@9000000`,
//! `/intc@8000000`, `/virtio_mmio@a000000`, ...), compatibles and interrupt
//! specifiers, so a kernel that boots on `qemu-system-aarch64 -M virt` finds the
//! same devices here. What QEMU adds and a guest of ours does not need (flash,
//! PCIe, fw-cfg, RTC, GPIO, ITS, KASLR and RNG seeds) is left out.
//!
//! ```text
//! /  compatible = "linux,dummy-virt", #address-cells = #size-cells = 2,
//!    interrupt-parent = <&intc>
//! ├─ psci            arm,psci-1.0 / arm,psci-0.2, method = "hvc" | "smc"
//! ├─ memory@<base>   reg = <ram>
//! ├─ cpus/cpu@<n>    reg = <MPIDR Aff0 = n>, enable-method = "psci"
//! ├─ timer           arm,armv8-timer, PPIs 13 14 11 10 (level-low), always-on
//! ├─ pmu             arm,armv8-pmuv3, PPI 7 (level-high), for a VM with a virtual PMU
//! ├─ apb-pclk        fixed-clock, 24 MHz (the PL011's uartclk and apb_pclk)
//! ├─ pl011@<base>    arm,pl011 + arm,primecell, SPI (level-high)
//! ├─ intc@<dist>     arm,gic-v3, reg = <dist 64 KiB>, <redist vcpus * 128 KiB>; or
//! │                  arm,cortex-a15-gic (GICv2), reg = <dist 64 KiB>, <cpu interface 8 KiB>
//! ├─ virtio_mmio@<base>  virtio,mmio, 0x200 bytes, SPI (edge-rising, as QEMU)
//! └─ chosen          bootargs, stdout-path, linux,initrd-start/end
//! ```
//!
//! Without a GIC, devices are described without `interrupts` (polled use only).
#![no_std]

extern crate alloc;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use addr::{Ipa, IpaRange};
use guest_abi::map::{self, GICD_SIZE, MAX_VCPUS, TIMER_PPIS, UART_SIZE, VIRTIO_SLOT_SIZE};
use vm_fdt::FdtWriter;

/// Frequency of the `apb-pclk` fixed clock feeding the PL011 (as QEMU).
pub const APB_PCLK_HZ: u32 = 24_000_000;

/// phandle of the interrupt controller node.
pub const PHANDLE_GIC: u32 = 1;
/// phandle of the `apb-pclk` fixed clock.
pub const PHANDLE_APB_PCLK: u32 = 2;

// Interrupt specifier cells for both GIC bindings (`#interrupt-cells = 3`):
// <type number flags>, flags from include/dt-bindings/interrupt-controller/irq.h.
const GIC_SPI: u32 = 0;
const GIC_PPI: u32 = 1;
const IRQ_TYPE_EDGE_RISING: u32 = 1;
const IRQ_TYPE_LEVEL_HIGH: u32 = 4;
const IRQ_TYPE_LEVEL_LOW: u32 = 8;
/// Highest SPI number (INTID 1019 - 32).
const MAX_SPI: u32 = 987;

/// The PL011 UART.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uart {
    pub base: Ipa,
    /// SPI number (INTID - 32).
    pub spi: u32,
}

/// The interrupt controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gic {
    /// `arm,gic-v3`: one distributor frame and one contiguous redistributor region of
    /// `vcpus * GICR_STRIDE` bytes ([`map::gicr_size`]).
    V3 { dist: Ipa, redist: Ipa },
    /// `arm,cortex-a15-gic`: the distributor frame and the CPU interface
    /// ([`map::GICC_SIZE`]). Its PPI specifiers carry the CPUs they reach as a mask.
    V2 { dist: Ipa, cpu: Ipa },
}

impl Gic {
    pub fn dist(&self) -> Ipa {
        match *self {
            Self::V3 { dist, .. } | Self::V2 { dist, .. } => dist,
        }
    }

    /// The flags cell of a PPI specifier: GICv2's binding adds, in bits 15:8, the CPUs the
    /// PPI is wired to (all of them).
    fn ppi_flags(&self, vcpus: u32, trigger: u32) -> u32 {
        match self {
            Self::V3 { .. } => trigger,
            Self::V2 { .. } => (((1u32 << vcpus.min(8)) - 1) << 8) | trigger,
        }
    }
}

/// One virtio-mmio transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioSlot {
    pub base: Ipa,
    /// SPI number (INTID - 32).
    pub spi: u32,
    /// The control VM's channel to armhv: its node is marked `armhv,control-channel`, by
    /// which `armhvctl` in the guest finds it (docs/guest-abi.md).
    pub control: bool,
}

/// A physical device assigned to the guest: described as the host's device tree describes it
/// (same node name, compatible list and address, since it is mapped at the same address), with
/// its interrupts as SPIs of the virtual GIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssignedDevice<'a> {
    /// Node name with unit address, e.g. `pl031@9010000`.
    pub node_name: &'a str,
    /// The host node's `compatible` property, raw (NUL-separated strings).
    pub compatible: &'a [u8],
    pub reg: IpaRange,
    /// (SPI number, interrupt flags) pairs.
    pub interrupts: &'a [(u32, u32)],
}

/// Everything the device tree of one guest says.
#[derive(Clone, Copy, Debug)]
pub struct GuestDt<'a> {
    /// Shown as the root `model` ("armhv <name>").
    pub vm_name: &'a str,
    /// 1..=MAX_VCPUS; vCPU n has MPIDR Aff0 = n.
    pub vcpus: u32,
    pub ram: IpaRange,
    pub uart: Option<Uart>,
    pub gic: Option<Gic>,
    /// Describe the architected timer.
    pub timer: bool,
    /// Describe a PMU (`arm,armv8-pmuv3`) with its overflow PPI (needs the GIC).
    pub pmu: bool,
    pub virtio: &'a [VirtioSlot],
    pub assigned: &'a [AssignedDevice<'a>],
    pub bootargs: &'a str,
    /// Where the initrd was loaded; must lie inside `ram`.
    pub initrd: Option<IpaRange>,
    /// PSCI conduit: "hvc" or "smc".
    pub psci_method: &'a str,
}

#[derive(Debug, PartialEq, Eq)]
pub enum DtError {
    /// `vcpus` is 0 or above [`map::MAX_VCPUS`].
    VcpuCount(u32),
    /// RAM is empty or wraps the address space.
    BadRam,
    /// The initrd is not inside RAM.
    InitrdOutsideRam,
    /// An SPI number above 987 (INTID 1019).
    BadSpi(u32),
    /// `psci_method` is neither "hvc" nor "smc".
    BadPsciMethod,
    /// Two nodes under the root would have this name (two virtio slots at one
    /// address, or an assigned device named like another node): sibling names
    /// must be unique, and a guest would find only one of them.
    DuplicateNode(String),
    /// The writer refused (e.g. a NUL byte inside a string).
    Fdt(vm_fdt::Error),
}

impl fmt::Display for DtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DtError::VcpuCount(n) => write!(f, "{n} vCPUs (must be 1..={MAX_VCPUS})"),
            DtError::BadRam => write!(f, "RAM range is empty or wraps"),
            DtError::InitrdOutsideRam => write!(f, "initrd does not lie inside RAM"),
            DtError::BadSpi(n) => write!(f, "SPI {n} out of range (max {MAX_SPI})"),
            DtError::BadPsciMethod => write!(f, "PSCI method must be \"hvc\" or \"smc\""),
            DtError::DuplicateNode(name) => write!(f, "two nodes named {name}"),
            DtError::Fdt(e) => write!(f, "device tree writer: {e}"),
        }
    }
}

impl From<vm_fdt::Error> for DtError {
    fn from(e: vm_fdt::Error) -> Self {
        DtError::Fdt(e)
    }
}

/// Path of the UART node, as `/chosen/stdout-path` names it.
pub fn uart_path(uart: &Uart) -> String {
    format!("/pl011@{:x}", uart.base.raw())
}

fn memory_node(ram: &IpaRange) -> String {
    format!("memory@{:x}", ram.start.raw())
}

fn gic_node(gic: &Gic) -> String {
    format!("intc@{:x}", gic.dist().raw())
}

fn virtio_node(slot: &VirtioSlot) -> String {
    format!("virtio_mmio@{:x}", slot.base.raw())
}

/// Writes the device tree blob for `dt`.
pub fn build(dt: &GuestDt) -> Result<Vec<u8>, DtError> {
    validate(dt)?;
    let mut w = FdtWriter::new()?;
    // boot_cpuid_phys: the vCPU that enters first is vCPU 0.
    w.set_boot_cpuid_phys(0);

    let root = w.begin_node("")?;
    w.property_string("compatible", "linux,dummy-virt")?;
    w.property_string("model", &format!("armhv {}", dt.vm_name))?;
    w.property_u32("#address-cells", 2)?;
    w.property_u32("#size-cells", 2)?;
    if dt.gic.is_some() {
        w.property_u32("interrupt-parent", PHANDLE_GIC)?;
    }

    let psci = w.begin_node("psci")?;
    w.property_string_list("compatible", strings(&["arm,psci-1.0", "arm,psci-0.2"]))?;
    w.property_string("method", dt.psci_method)?;
    w.end_node(psci)?;

    let mem = w.begin_node(&memory_node(&dt.ram))?;
    w.property_string("device_type", "memory")?;
    w.property_array_u64("reg", &[dt.ram.start.raw(), dt.ram.size])?;
    w.end_node(mem)?;

    write_cpus(&mut w, dt.vcpus)?;

    if dt.timer {
        let timer = w.begin_node("timer")?;
        w.property_string_list("compatible", strings(&["arm,armv8-timer", "arm,armv7-timer"]))?;
        if let Some(gic) = &dt.gic {
            let mut cells = Vec::new();
            for ppi in TIMER_PPIS {
                cells.extend_from_slice(&[
                    GIC_PPI,
                    ppi,
                    gic.ppi_flags(dt.vcpus, IRQ_TYPE_LEVEL_LOW),
                ]);
            }
            w.property_array_u32("interrupts", &cells)?;
        }
        // The virtual timer keeps its state across vCPU switches: never lost.
        w.property_null("always-on")?;
        w.end_node(timer)?;
    }

    if dt.pmu
        && let Some(gic) = &dt.gic
    {
        // As QEMU `virt` describes it, so that Linux's perf finds the counters.
        let pmu = w.begin_node("pmu")?;
        w.property_string("compatible", "arm,armv8-pmuv3")?;
        let flags = gic.ppi_flags(dt.vcpus, IRQ_TYPE_LEVEL_HIGH);
        w.property_array_u32("interrupts", &[GIC_PPI, map::PMU_PPI, flags])?;
        w.end_node(pmu)?;
    }

    if let Some(uart) = &dt.uart {
        // Linux's AMBA bus driver needs apb_pclk to probe any primecell device.
        let clk = w.begin_node("apb-pclk")?;
        w.property_string("compatible", "fixed-clock")?;
        w.property_u32("#clock-cells", 0)?;
        w.property_u32("clock-frequency", APB_PCLK_HZ)?;
        w.property_string("clock-output-names", "clk24mhz")?;
        w.property_phandle(PHANDLE_APB_PCLK)?;
        w.end_node(clk)?;

        let node = w.begin_node(&uart_path(uart)[1..])?;
        w.property_string_list("compatible", strings(&["arm,pl011", "arm,primecell"]))?;
        w.property_array_u64("reg", &[uart.base.raw(), UART_SIZE])?;
        if dt.gic.is_some() {
            w.property_array_u32("interrupts", &[GIC_SPI, uart.spi, IRQ_TYPE_LEVEL_HIGH])?;
        }
        w.property_array_u32("clocks", &[PHANDLE_APB_PCLK, PHANDLE_APB_PCLK])?;
        w.property_string_list("clock-names", strings(&["uartclk", "apb_pclk"]))?;
        w.end_node(node)?;
    }

    if let Some(gic) = &dt.gic {
        let node = w.begin_node(&gic_node(gic))?;
        w.property_u32("#interrupt-cells", 3)?;
        w.property_null("interrupt-controller")?;
        match *gic {
            Gic::V3 { dist, redist } => {
                w.property_string("compatible", "arm,gic-v3")?;
                w.property_u32("#redistributor-regions", 1)?;
                // Cells for child nodes (an ITS, if one is ever added), as QEMU has them.
                w.property_u32("#address-cells", 2)?;
                w.property_u32("#size-cells", 2)?;
                w.property_null("ranges")?;
                let redist_size = map::gicr_size(dt.vcpus as usize);
                w.property_array_u64("reg", &[dist.raw(), GICD_SIZE, redist.raw(), redist_size])?;
            }
            Gic::V2 { dist, cpu } => {
                w.property_string("compatible", "arm,cortex-a15-gic")?;
                w.property_array_u64("reg", &[dist.raw(), GICD_SIZE, cpu.raw(), map::GICC_SIZE])?;
            }
        }
        w.property_phandle(PHANDLE_GIC)?;
        w.end_node(node)?;
    }

    for slot in dt.virtio {
        let node = w.begin_node(&virtio_node(slot))?;
        w.property_string("compatible", "virtio,mmio")?;
        w.property_array_u64("reg", &[slot.base.raw(), VIRTIO_SLOT_SIZE])?;
        if dt.gic.is_some() {
            // Edge-triggered like QEMU's: the device model signals each new
            // InterruptStatus bit; no line level to resample on EOI.
            w.property_array_u32("interrupts", &[GIC_SPI, slot.spi, IRQ_TYPE_EDGE_RISING])?;
        }
        // Stage-2 maps guest RAM cacheable; device and driver see the same data.
        w.property_null("dma-coherent")?;
        if slot.control {
            w.property_null("armhv,control-channel")?;
        }
        w.end_node(node)?;
    }

    for dev in dt.assigned {
        let node = w.begin_node(dev.node_name)?;
        w.property("compatible", dev.compatible)?;
        w.property_array_u64("reg", &[dev.reg.start.raw(), dev.reg.size])?;
        if dt.gic.is_some() && !dev.interrupts.is_empty() {
            let cells: Vec<u32> =
                dev.interrupts.iter().flat_map(|&(spi, flags)| [GIC_SPI, spi, flags]).collect();
            w.property_array_u32("interrupts", &cells)?;
        }
        w.end_node(node)?;
    }

    let chosen = w.begin_node("chosen")?;
    w.property_string("bootargs", dt.bootargs)?;
    if let Some(uart) = &dt.uart {
        w.property_string("stdout-path", &uart_path(uart))?;
    }
    if let Some(initrd) = &dt.initrd {
        // `validate` checked that the initrd lies inside RAM, so the end cannot wrap.
        w.property_u64("linux,initrd-start", initrd.start.raw())?;
        w.property_u64("linux,initrd-end", initrd.start.raw() + initrd.size)?;
    }
    w.end_node(chosen)?;

    w.end_node(root)?;
    Ok(w.finish()?)
}

fn validate(dt: &GuestDt) -> Result<(), DtError> {
    if dt.vcpus == 0 || dt.vcpus as usize > MAX_VCPUS {
        return Err(DtError::VcpuCount(dt.vcpus));
    }
    if dt.ram.size == 0 || dt.ram.checked_end().is_none() {
        return Err(DtError::BadRam);
    }
    if let Some(initrd) = &dt.initrd
        && !dt.ram.contains_span(initrd.start, initrd.size)
    {
        return Err(DtError::InitrdOutsideRam);
    }
    let spis = dt
        .uart
        .iter()
        .map(|u| u.spi)
        .chain(dt.virtio.iter().map(|v| v.spi))
        .chain(dt.assigned.iter().flat_map(|d| d.interrupts.iter().map(|&(spi, _)| spi)));
    for spi in spis {
        if spi > MAX_SPI {
            return Err(DtError::BadSpi(spi));
        }
    }
    if !matches!(dt.psci_method, "hvc" | "smc") {
        return Err(DtError::BadPsciMethod);
    }
    // The writer checks each name's syntax but not that siblings differ, and it
    // allows the empty name (meant for the root) anywhere.
    let mut names: Vec<String> = ["psci", "cpus", "chosen"].map(String::from).to_vec();
    names.push(memory_node(&dt.ram));
    if dt.timer {
        names.push("timer".into());
    }
    if dt.pmu && dt.gic.is_some() {
        names.push("pmu".into());
    }
    if let Some(uart) = &dt.uart {
        names.push("apb-pclk".into());
        names.push(uart_path(uart)[1..].into());
    }
    names.extend(dt.gic.iter().map(gic_node));
    for name in dt.virtio.iter().map(virtio_node) {
        if names.contains(&name) {
            return Err(DtError::DuplicateNode(name));
        }
        names.push(name);
    }
    for dev in dt.assigned {
        if dev.node_name.is_empty() {
            return Err(DtError::Fdt(vm_fdt::Error::InvalidNodeName));
        }
        if names.iter().any(|n| n == dev.node_name) {
            return Err(DtError::DuplicateNode(dev.node_name.into()));
        }
        names.push(dev.node_name.into());
    }
    Ok(())
}

fn write_cpus(w: &mut FdtWriter, vcpus: u32) -> Result<(), DtError> {
    let cpus = w.begin_node("cpus")?;
    // A cpu node's reg is its MPIDR affinity: one cell, no size.
    w.property_u32("#address-cells", 1)?;
    w.property_u32("#size-cells", 0)?;
    for n in 0..vcpus {
        let cpu = w.begin_node(&format!("cpu@{n:x}"))?;
        w.property_string("device_type", "cpu")?;
        w.property_string("compatible", "arm,armv8")?;
        w.property_u32("reg", n)?;
        w.property_string("enable-method", "psci")?;
        w.end_node(cpu)?;
    }
    w.end_node(cpus)?;
    Ok(())
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| String::from(*s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdt::Fdt;
    use fdt::node::FdtNode;

    const MIB: u64 = 1 << 20;

    fn virtio_slots() -> [VirtioSlot; 2] {
        [0, 1].map(|n| VirtioSlot {
            base: map::virtio_slot(n),
            spi: map::virtio_spi(n),
            control: n == 1,
        })
    }

    fn full<'a>(virtio: &'a [VirtioSlot]) -> GuestDt<'a> {
        GuestDt {
            vm_name: "vm0",
            vcpus: 2,
            ram: IpaRange::new(map::RAM_BASE, 256 * MIB),
            pmu: true,
            uart: Some(Uart { base: map::UART_BASE, spi: map::UART_SPI }),
            gic: Some(Gic::V3 { dist: map::GICD_BASE, redist: map::GICR_BASE }),
            timer: true,
            virtio,
            assigned: &[],
            bootargs: "console=ttyAMA0 hello off",
            initrd: Some(IpaRange::new(Ipa(0x4800_0000), 0x12_3456)),
            psci_method: "hvc",
        }
    }

    fn u32_cells(node: FdtNode, name: &str) -> Vec<u32> {
        let value = node.property(name).unwrap_or_else(|| panic!("no {name}")).value;
        assert_eq!(value.len() % 4, 0);
        value.chunks(4).map(|c| u32::from_be_bytes(c.try_into().unwrap())).collect()
    }

    fn u64_cells(node: FdtNode, name: &str) -> Vec<u64> {
        let value = node.property(name).unwrap_or_else(|| panic!("no {name}")).value;
        assert_eq!(value.len() % 8, 0);
        value.chunks(8).map(|c| u64::from_be_bytes(c.try_into().unwrap())).collect()
    }

    fn strs<'a>(node: FdtNode<'_, 'a>, name: &str) -> Vec<&'a str> {
        let value = node.property(name).unwrap_or_else(|| panic!("no {name}")).value;
        value
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| core::str::from_utf8(s).unwrap())
            .collect()
    }

    #[test]
    fn full_machine_parses_back() {
        let slots = virtio_slots();
        let blob = build(&full(&slots)).unwrap();
        let fdt = Fdt::new(&blob).unwrap();

        let root = fdt.find_node("/").unwrap();
        assert_eq!(strs(root, "compatible"), ["linux,dummy-virt"]);
        assert_eq!(fdt.root().model(), "armhv vm0");
        assert_eq!(u32_cells(root, "#address-cells"), [2]);
        assert_eq!(u32_cells(root, "#size-cells"), [2]);
        assert_eq!(u32_cells(root, "interrupt-parent"), [PHANDLE_GIC]);

        let mem: Vec<_> = fdt.memory().regions().collect();
        assert_eq!(mem.len(), 1);
        assert_eq!(mem[0].starting_address as u64, 0x4000_0000);
        assert_eq!(mem[0].size, Some(256 << 20));
        assert!(fdt.find_node("/memory@40000000").is_some());

        let cpus: Vec<_> = fdt.cpus().collect();
        assert_eq!(cpus.len(), 2);
        for (n, cpu) in cpus.iter().enumerate() {
            assert_eq!(cpu.ids().first(), n);
            assert_eq!(cpu.property("enable-method").unwrap().as_str(), Some("psci"));
            assert_eq!(cpu.property("device_type").unwrap().as_str(), Some("cpu"));
        }

        let psci = fdt.find_node("/psci").unwrap();
        assert_eq!(strs(psci, "compatible"), ["arm,psci-1.0", "arm,psci-0.2"]);
        assert_eq!(psci.property("method").unwrap().as_str(), Some("hvc"));

        let chosen = fdt.chosen();
        assert_eq!(chosen.bootargs(), Some("console=ttyAMA0 hello off"));
        let stdout = chosen.stdout().expect("stdout-path resolves");
        assert_eq!(stdout.name, "pl011@9000000");

        let uart = fdt.find_compatible(&["arm,pl011"]).unwrap();
        assert_eq!(uart.name, "pl011@9000000");
        assert_eq!(strs(uart, "compatible"), ["arm,pl011", "arm,primecell"]);
        assert_eq!(u64_cells(uart, "reg"), [0x0900_0000, 0x1000]);
        assert_eq!(u32_cells(uart, "interrupts"), [0, 1, 4]);
        assert_eq!(strs(uart, "clock-names"), ["uartclk", "apb_pclk"]);
        let clocks = u32_cells(uart, "clocks");
        assert_eq!(clocks, [PHANDLE_APB_PCLK, PHANDLE_APB_PCLK]);
        let clk = fdt.find_phandle(clocks[0]).unwrap();
        assert_eq!(clk.name, "apb-pclk");
        assert_eq!(strs(clk, "compatible"), ["fixed-clock"]);
        assert_eq!(u32_cells(clk, "clock-frequency"), [24_000_000]);
        assert_eq!(u32_cells(clk, "#clock-cells"), [0]);

        let pmu = fdt.find_compatible(&["arm,armv8-pmuv3"]).unwrap();
        assert_eq!(pmu.name, "pmu");
        assert_eq!(u32_cells(pmu, "interrupts"), [1, 7, 4]);

        let gic = fdt.find_phandle(PHANDLE_GIC).unwrap();
        assert_eq!(gic.name, "intc@8000000");
        assert_eq!(strs(gic, "compatible"), ["arm,gic-v3"]);
        assert!(gic.property("interrupt-controller").is_some());
        assert_eq!(gic.interrupt_cells(), Some(3));
        assert_eq!(u32_cells(gic, "#redistributor-regions"), [1]);
        assert_eq!(u64_cells(gic, "reg"), [0x0800_0000, 0x1_0000, 0x080A_0000, 2 * 0x2_0000]);

        let timer = fdt.find_compatible(&["arm,armv8-timer"]).unwrap();
        assert_eq!(u32_cells(timer, "interrupts"), [1, 13, 8, 1, 14, 8, 1, 11, 8, 1, 10, 8]);
        assert!(timer.property("always-on").is_some());

        let virtio: Vec<_> = fdt
            .all_nodes()
            .filter(|n| n.compatible().is_some_and(|c| c.first() == "virtio,mmio"))
            .collect();
        assert_eq!(virtio.len(), 2);
        assert_eq!(virtio[1].name, "virtio_mmio@a000200");
        assert_eq!(u64_cells(virtio[1], "reg"), [0x0A00_0200, 0x200]);
        assert_eq!(u32_cells(virtio[1], "interrupts"), [0, 17, 1]);

        let chosen = fdt.find_node("/chosen").unwrap();
        assert_eq!(u64_cells(chosen, "linux,initrd-start"), [0x4800_0000]);
        assert_eq!(u64_cells(chosen, "linux,initrd-end"), [0x4800_0000 + 0x12_3456]);
    }

    #[test]
    fn gicv2_machine_describes_a_cortex_a15_gic_and_cpu_masks() {
        let slots = virtio_slots();
        let dt = GuestDt {
            vcpus: 3,
            gic: Some(Gic::V2 { dist: map::GICD_BASE, cpu: map::GICC_BASE }),
            ..full(&slots)
        };
        let blob = build(&dt).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let gic = fdt.find_phandle(PHANDLE_GIC).unwrap();
        assert_eq!(gic.name, "intc@8000000");
        assert_eq!(strs(gic, "compatible"), ["arm,cortex-a15-gic"]);
        assert!(gic.property("interrupt-controller").is_some());
        assert!(gic.property("#redistributor-regions").is_none());
        assert_eq!(gic.interrupt_cells(), Some(3));
        assert_eq!(u64_cells(gic, "reg"), [0x0800_0000, 0x1_0000, 0x0801_0000, 0x2000]);
        // PPIs name the three CPUs they reach in bits 15:8 (GIC_CPU_MASK_SIMPLE(3)).
        let timer = fdt.find_compatible(&["arm,armv8-timer"]).unwrap();
        let low = 0x0700 | IRQ_TYPE_LEVEL_LOW;
        assert_eq!(
            u32_cells(timer, "interrupts"),
            [1, 13, low, 1, 14, low, 1, 11, low, 1, 10, low]
        );
        let pmu = fdt.find_compatible(&["arm,armv8-pmuv3"]).unwrap();
        assert_eq!(u32_cells(pmu, "interrupts"), [1, 7, 0x0700 | IRQ_TYPE_LEVEL_HIGH]);
        // SPIs are the same as on a GICv3.
        let uart = fdt.find_compatible(&["arm,pl011"]).unwrap();
        assert_eq!(u32_cells(uart, "interrupts"), [0, 1, 4]);
    }

    #[test]
    fn redistributor_region_scales_with_vcpus() {
        for vcpus in 1..=MAX_VCPUS as u32 {
            let dt = GuestDt { vcpus, ..full(&[]) };
            let blob = build(&dt).unwrap();
            let fdt = Fdt::new(&blob).unwrap();
            assert_eq!(fdt.cpus().count(), vcpus as usize);
            let last = fdt.cpus().last().unwrap();
            assert_eq!(last.ids().first(), vcpus as usize - 1);
            let gic = fdt.find_node("/intc@8000000").unwrap();
            assert_eq!(u64_cells(gic, "reg")[3], u64::from(vcpus) * map::GICR_STRIDE);
        }
    }

    #[test]
    fn minimal_machine() {
        let dt = GuestDt {
            uart: None,
            gic: None,
            timer: false,
            initrd: None,
            bootargs: "",
            psci_method: "smc",
            ..full(&[])
        };
        let blob = build(&dt).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let root = fdt.find_node("/").unwrap();
        assert!(root.property("interrupt-parent").is_none());
        assert!(fdt.find_node("/chosen").unwrap().property("stdout-path").is_none());
        assert!(fdt.find_node("/chosen").unwrap().property("linux,initrd-start").is_none());
        assert_eq!(fdt.chosen().bootargs(), Some(""));
        assert!(fdt.find_compatible(&["arm,pl011", "arm,gic-v3", "arm,armv8-timer"]).is_none());
        // A PMU without an interrupt controller for its PPI is not described.
        assert!(fdt.find_compatible(&["arm,armv8-pmuv3"]).is_none());
        let no_pmu = build(&GuestDt { pmu: false, ..full(&[]) }).unwrap();
        assert!(Fdt::new(&no_pmu).unwrap().find_compatible(&["arm,armv8-pmuv3"]).is_none());
        assert_eq!(
            fdt.find_node("/psci").unwrap().property("method").unwrap().as_str(),
            Some("smc")
        );
    }

    #[test]
    fn uart_without_gic_has_no_interrupts() {
        let dt = GuestDt { gic: None, ..full(&[]) };
        let blob = build(&dt).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let uart = fdt.chosen().stdout().unwrap();
        assert!(uart.property("interrupts").is_none());
        assert!(uart.property("clocks").is_some());
    }

    #[test]
    fn rejects_bad_input() {
        let base = full(&[]);
        assert_eq!(build(&GuestDt { vcpus: 0, ..base }), Err(DtError::VcpuCount(0)));
        assert_eq!(build(&GuestDt { vcpus: 9, ..base }), Err(DtError::VcpuCount(9)));
        let empty = IpaRange::new(map::RAM_BASE, 0);
        assert_eq!(build(&GuestDt { ram: empty, ..base }), Err(DtError::BadRam));
        let wraps = IpaRange::new(Ipa(u64::MAX - 0xfff), 0x2000);
        assert_eq!(build(&GuestDt { ram: wraps, ..base }), Err(DtError::BadRam));
        let outside = Some(IpaRange::new(Ipa(0x4fff_f000), 0x2000));
        assert_eq!(build(&GuestDt { initrd: outside, ..base }), Err(DtError::InitrdOutsideRam));
        let bad_uart = Some(Uart { base: map::UART_BASE, spi: 988 });
        assert_eq!(build(&GuestDt { uart: bad_uart, ..base }), Err(DtError::BadSpi(988)));
        assert_eq!(build(&GuestDt { psci_method: "svc", ..base }), Err(DtError::BadPsciMethod));
        assert_eq!(
            build(&GuestDt { bootargs: "a\0b", ..base }),
            Err(DtError::Fdt(vm_fdt::Error::InvalidString))
        );
    }

    #[test]
    fn assigned_devices_keep_their_host_description() {
        let irqs = [(2, IRQ_TYPE_LEVEL_HIGH)];
        let rtc = AssignedDevice {
            node_name: "pl031@9010000",
            compatible: b"arm,pl031\0arm,primecell\0",
            reg: IpaRange::new(Ipa(0x0901_0000), 0x1000),
            interrupts: &irqs,
        };
        let assigned = [rtc];
        let blob = build(&GuestDt { assigned: &assigned, ..full(&[]) }).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let node = fdt.find_node("/pl031@9010000").expect("assigned node");
        assert_eq!(strs(node, "compatible"), ["arm,pl031", "arm,primecell"]);
        assert_eq!(u64_cells(node, "reg"), [0x0901_0000, 0x1000]);
        assert_eq!(u32_cells(node, "interrupts"), [GIC_SPI, 2, IRQ_TYPE_LEVEL_HIGH]);

        let bad = [AssignedDevice { interrupts: &[(988, 4)], ..rtc }];
        assert_eq!(build(&GuestDt { assigned: &bad, ..full(&[]) }), Err(DtError::BadSpi(988)));
    }

    /// Found by the `device_tree` fuzz target: a second node with the same name
    /// used to be written, so a guest looking up `/chosen` (or the device) could
    /// find the wrong one.
    #[test]
    fn root_node_names_are_unique() {
        let rtc = AssignedDevice {
            node_name: "pl031@9010000",
            compatible: b"arm,pl031\0",
            reg: IpaRange::new(Ipa(0x0901_0000), 0x1000),
            interrupts: &[],
        };
        let dup = |node_name| DtError::DuplicateNode(String::from(node_name));
        let twice = [rtc, rtc];
        assert_eq!(build(&GuestDt { assigned: &twice, ..full(&[]) }), Err(dup("pl031@9010000")));
        for name in ["chosen", "cpus", "psci", "timer", "memory@40000000", "intc@8000000"] {
            let shadow = [AssignedDevice { node_name: name, ..rtc }];
            assert_eq!(build(&GuestDt { assigned: &shadow, ..full(&[]) }), Err(dup(name)));
        }
        for name in ["pl011@9000000", "apb-pclk", "virtio_mmio@a000200"] {
            let shadow = [AssignedDevice { node_name: name, ..rtc }];
            let slots = virtio_slots();
            assert_eq!(build(&GuestDt { assigned: &shadow, ..full(&slots) }), Err(dup(name)));
        }
        let slots = [virtio_slots()[0]; 2];
        assert_eq!(build(&GuestDt { ..full(&slots) }), Err(dup("virtio_mmio@a000000")));
        let nameless = [AssignedDevice { node_name: "", ..rtc }];
        assert_eq!(
            build(&GuestDt { assigned: &nameless, ..full(&[]) }),
            Err(DtError::Fdt(vm_fdt::Error::InvalidNodeName))
        );
        // Without a timer or UART their names are free.
        let timer = [AssignedDevice { node_name: "timer", ..rtc }];
        assert!(build(&GuestDt { timer: false, assigned: &timer, ..full(&[]) }).is_ok());
        let uart = [AssignedDevice { node_name: "pl011@9000000", ..rtc }];
        assert!(build(&GuestDt { uart: None, assigned: &uart, ..full(&[]) }).is_ok());
    }
}
