//! The guest's device tree: what vmbench (`baremetal::machine::discover`) reads to find its
//! console, PSCI conduit, RAM, GIC and CPUs, laid out as QEMU `virt` does for the same devices.

use crate::layout::{
    GICD_BASE, GICD_SIZE, GICR_BASE, GICR_STRIDE, RAM_BASE, UART_BASE, UART_SIZE, UART_SPI,
    VIRTIO_BASE, VIRTIO_SIZE, VIRTIO_SPI,
};
use vm_fdt::FdtWriter;

const GIC_PHANDLE: u32 = 1;
/// The interrupt specifier's type cell (bindings/interrupt-controller/arm,gic-v3.yaml).
const SPI: u32 = 0;
const PPI: u32 = 1;
const IRQ_LEVEL_HIGH: u32 = 4;
/// QEMU `virt` describes its virtio-mmio interrupts as edge-triggered; vmbench drives its
/// device's as level-sensitive whatever the tree says, and so does the VMM's line.
const IRQ_EDGE_RISING: u32 = 1;
/// The architected timer's PPIs: secure, non-secure physical, virtual, hypervisor physical.
const TIMER_PPIS: [u32; 4] = [13, 14, 11, 10];

pub struct Machine<'a> {
    pub ram_size: u64,
    /// Each vCPU's MPIDR_EL1 affinity (as KVM assigned it), in vCPU order.
    pub mpidrs: &'a [u64],
    pub bootargs: &'a str,
}

fn uart_node() -> String {
    format!("/pl011@{UART_BASE:x}")
}

pub fn build(m: &Machine) -> Result<Vec<u8>, vm_fdt::Error> {
    let mut f = FdtWriter::new()?;
    let root = f.begin_node("")?;
    f.property_string("compatible", "linux,dummy-virt")?;
    f.property_u32("#address-cells", 2)?;
    f.property_u32("#size-cells", 2)?;
    f.property_u32("interrupt-parent", GIC_PHANDLE)?;

    let chosen = f.begin_node("chosen")?;
    f.property_string("bootargs", m.bootargs)?;
    f.property_string("stdout-path", &uart_node())?;
    f.end_node(chosen)?;

    let memory = f.begin_node(&format!("memory@{RAM_BASE:x}"))?;
    f.property_string("device_type", "memory")?;
    f.property_array_u64("reg", &[RAM_BASE, m.ram_size])?;
    f.end_node(memory)?;

    let cpus = f.begin_node("cpus")?;
    // Affinities up to Aff2 fit one cell, as on QEMU `virt`.
    f.property_u32("#address-cells", 1)?;
    f.property_u32("#size-cells", 0)?;
    for &mpidr in m.mpidrs {
        let cpu = f.begin_node(&format!("cpu@{mpidr:x}"))?;
        f.property_string("device_type", "cpu")?;
        f.property_string("compatible", "arm,arm-v8")?;
        f.property_string("enable-method", "psci")?;
        f.property_u32("reg", mpidr as u32)?;
        f.end_node(cpu)?;
    }
    f.end_node(cpus)?;

    // KVM answers PSCI 0.2+ (KVM_ARM_VCPU_PSCI_0_2) on hvc.
    let psci = f.begin_node("psci")?;
    f.property_string_list("compatible", vec!["arm,psci-1.0".into(), "arm,psci-0.2".into()])?;
    f.property_string("method", "hvc")?;
    f.end_node(psci)?;

    let gic = f.begin_node(&format!("intc@{GICD_BASE:x}"))?;
    f.property_string("compatible", "arm,gic-v3")?;
    f.property_null("interrupt-controller")?;
    f.property_u32("#interrupt-cells", 3)?;
    let redist_size = GICR_STRIDE * m.mpidrs.len() as u64;
    f.property_array_u64("reg", &[GICD_BASE, GICD_SIZE, GICR_BASE, redist_size])?;
    f.property_u32("#redistributor-regions", 1)?;
    f.property_phandle(GIC_PHANDLE)?;
    f.end_node(gic)?;

    let timer = f.begin_node("timer")?;
    f.property_string("compatible", "arm,armv8-timer")?;
    let cells: Vec<u32> = TIMER_PPIS.iter().flat_map(|&p| [PPI, p, IRQ_LEVEL_HIGH]).collect();
    f.property_array_u32("interrupts", &cells)?;
    f.property_null("always-on")?;
    f.end_node(timer)?;

    let uart = f.begin_node(&uart_node()[1..])?;
    f.property_string_list("compatible", vec!["arm,pl011".into(), "arm,primecell".into()])?;
    f.property_array_u64("reg", &[UART_BASE, UART_SIZE])?;
    f.property_array_u32("interrupts", &[SPI, UART_SPI, IRQ_LEVEL_HIGH])?;
    f.end_node(uart)?;

    let virtio = f.begin_node(&format!("virtio_mmio@{VIRTIO_BASE:x}"))?;
    f.property_string("compatible", "virtio,mmio")?;
    f.property_array_u64("reg", &[VIRTIO_BASE, VIRTIO_SIZE])?;
    f.property_array_u32("interrupts", &[SPI, VIRTIO_SPI, IRQ_EDGE_RISING])?;
    f.property_null("dma-coherent")?;
    f.end_node(virtio)?;

    f.end_node(root)?;
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(bootargs: &str) -> Vec<u8> {
        build(&Machine { ram_size: 64 << 20, mpidrs: &[0, 1], bootargs }).unwrap()
    }

    /// Read back with the parser vmbench itself uses (`fdt` 0.1), the way it reads it.
    #[test]
    fn vmbench_finds_its_console_psci_ram_gic_and_cpus() {
        let blob = tree("n=1000 warmup=100 hypercall");
        let dt = fdt::Fdt::new(&blob).unwrap();
        let chosen = dt.find_node("/chosen").unwrap();
        assert_eq!(
            chosen.property("bootargs").unwrap().as_str(),
            Some("n=1000 warmup=100 hypercall")
        );
        let stdout = chosen.property("stdout-path").unwrap().as_str().unwrap();
        let uart = dt.find_node(stdout).unwrap();
        assert!(uart.compatible().unwrap().all().any(|c| c == "arm,pl011"));
        assert_eq!(uart.reg().unwrap().next().unwrap().starting_address as u64, UART_BASE);

        let psci = dt.find_node("/psci").unwrap();
        assert_eq!(psci.property("method").unwrap().as_str(), Some("hvc"));

        let ram = dt.find_node("/memory").unwrap().reg().unwrap().next().unwrap();
        assert_eq!((ram.starting_address as u64, ram.size), (RAM_BASE, Some(64usize << 20)));

        let gic = dt.find_compatible(&["arm,gic-v3"]).unwrap();
        let regs: Vec<_> = gic
            .reg()
            .unwrap()
            .map(|r| (r.starting_address as u64, r.size.unwrap() as u64))
            .collect();
        assert_eq!(regs, [(GICD_BASE, 0x1_0000), (GICR_BASE, 2 * GICR_STRIDE)]);

        let cpus: Vec<usize> = dt.cpus().map(|c| c.ids().first()).collect();
        assert_eq!(cpus, [0, 1]);
    }

    #[test]
    fn the_timer_has_its_four_ppis_and_the_uart_its_spi() {
        let blob = tree("");
        let dt = fdt::Fdt::new(&blob).unwrap();
        let timer = dt.find_compatible(&["arm,armv8-timer"]).unwrap();
        let cells: Vec<u32> = timer
            .property("interrupts")
            .unwrap()
            .value
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(cells, [1, 13, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4]);
        let uart = dt.find_compatible(&["arm,pl011"]).unwrap();
        assert_eq!(
            uart.property("interrupts").unwrap().value,
            [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4]
        );
    }
}
