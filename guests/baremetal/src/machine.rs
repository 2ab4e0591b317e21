//! What every guest reads from the device tree: the console, the PSCI conduit,
//! RAM, the GIC (v3 or v2) and the CPUs, and `/chosen/bootargs`.

use fdt::Fdt;
use fdt::node::FdtNode;

use crate::boot::MAX_CPUS;
use crate::psci::{self, Conduit};
use crate::{console, gic};

const GICV3: &str = "arm,gic-v3";
/// The GICv2 bindings: QEMU virt's and armhv's, the GIC-400's, the Cortex-A7's.
const GICV2: [&str; 3] = ["arm,cortex-a15-gic", "arm,gic-400", "arm,cortex-a7-gic"];

/// The consoles the polled driver can write to: a PL011, or an SBSA generic UART (a PL011
/// subset with the same data and flag registers: Xen's vpl011, the only console of a dom0less
/// domain, which names no `stdout-path`).
const UARTS: [&str; 2] = ["arm,pl011", "arm,sbsa-uart"];

/// The machine, as the device tree describes it.
pub struct Machine<'a> {
    pub bootargs: &'a str,
    pub ram_start: u64,
    pub ram_end: u64,
    /// The GIC distributor's base, any GIC version.
    pub gicd: Option<u64>,
    /// MPIDR affinity (the cpu nodes' `reg`) of up to MAX_CPUS CPUs.
    pub cpus: [u64; MAX_CPUS],
    pub ncpus: usize,
}

/// Reads the machine from the device tree and points the console, the SMCCC
/// conduit and the GIC driver at what it names. Panics without a memory node
/// or with an unknown PSCI method.
pub fn discover<'a>(fdt: &Fdt<'a>) -> Machine<'a> {
    let chosen = fdt.find_node("/chosen");
    let stdout = chosen
        .and_then(|c| c.property("stdout-path"))
        .and_then(|p| p.as_str())
        // "path:options", e.g. "serial0:115200n8"; find_node resolves aliases.
        .and_then(|path| fdt.find_node(path.split(':').next().unwrap_or(path)))
        .filter(|n| n.compatible().is_some_and(|c| c.all().any(|s| UARTS.contains(&s))));
    let uart = stdout.or_else(|| fdt.find_compatible(&UARTS));
    if let Some(node) = uart
        && let Some(base) = node.reg().and_then(|mut r| r.next())
    {
        let sbsa = !node.compatible().is_some_and(|c| c.all().any(|s| s == UARTS[0]));
        console::set_uart(base.starting_address as u64, sbsa);
    }

    let psci =
        fdt.find_node("/psci").or_else(|| fdt.find_compatible(&["arm,psci-1.0", "arm,psci-0.2"]));
    match psci.and_then(|n| n.property("method")).and_then(|p| p.as_str()) {
        Some("smc") => psci::set_conduit(Conduit::Smc),
        Some("hvc") | None => psci::set_conduit(Conduit::Hvc),
        Some(other) => panic!("unknown PSCI method '{other}'"),
    }

    let ram = fdt
        .find_node("/memory")
        .and_then(|n| n.reg()?.next())
        .unwrap_or_else(|| panic!("no memory node"));
    let ram_start = ram.starting_address as u64;
    let ram_end = ram_start + ram.size.unwrap_or(0) as u64;

    // reg: the distributor, then the redistributor region(s) (GICv3; the
    // driver uses the first) or the CPU interface (GICv2).
    let gic_node = fdt.find_compatible(&[GICV3, GICV2[0], GICV2[1], GICV2[2]]);
    let mut gic_regs = gic_node.and_then(|n| n.reg()).into_iter().flatten();
    let gicd = gic_regs.next().map(|r| r.starting_address as u64);
    let is = |names: &[&str]| {
        gic_node.and_then(|n| n.compatible()).is_some_and(|c| c.all().any(|s| names.contains(&s)))
    };
    if let (Some(gicd), Some(second)) = (gicd, gic_regs.next()) {
        let second_base = second.starting_address as u64;
        if is(&[GICV3]) {
            gic::configure_v3(gicd, second_base, second.size.unwrap_or(0) as u64);
        } else if is(&GICV2) {
            gic::configure_v2(gicd, second_base);
        }
    }

    let mut cpus = [0; MAX_CPUS];
    let mut ncpus = 0;
    if fdt.find_node("/cpus").is_some() {
        for (slot, cpu) in cpus.iter_mut().zip(fdt.cpus()) {
            *slot = cpu.ids().first() as u64;
            ncpus += 1;
        }
    }

    let bootargs =
        chosen.and_then(|c| c.property("bootargs")).and_then(|p| p.as_str()).unwrap_or("");
    Machine { bootargs, ram_start, ram_end, gicd, cpus, ncpus }
}

/// Cell `i` (big-endian u32) of a node's `interrupts` property.
pub fn interrupt_cell(node: &FdtNode, i: usize) -> Option<u32> {
    let value = node.property("interrupts")?.value;
    value.get(4 * i..4 * i + 4).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes)
}

/// The INTID of a GIC interrupt specifier (type, number, flags): type 0 is an
/// SPI (INTID 32 + number), type 1 a PPI (16 + number).
pub fn gic_intid(kind: u32, number: u32) -> Option<u32> {
    match kind {
        0 => Some(32 + number),
        1 => Some(16 + number),
        _ => None,
    }
}
