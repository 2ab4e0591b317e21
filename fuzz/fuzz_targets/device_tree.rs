//! Fuzzes the guest device-tree builder, `vmfdt::build`, with arbitrary
//! machines: VM name, vCPU count, RAM range, UART, GIC and timer options,
//! virtio slots, assigned devices (node names, compatibles, reg and
//! interrupts as the host tree could give them), bootargs, initrd range and
//! PSCI method.
//!
//! Input: consumed with `arbitrary::Unstructured`; each field usually takes
//! a plausible value (the QEMU `virt` map, names the tree itself uses) and
//! sometimes an arbitrary one.
//!
//! Checked besides "no panic": `build` succeeds exactly when the input breaks
//! none of the rules `DtError` documents, and an error names a rule the input
//! does break; a blob it returns parses with the `fdt` crate and says what was
//! asked: the vCPUs, the memory node's `reg`, the bootargs, the PSCI method,
//! the initrd, the UART, GIC and each virtio slot's and assigned device's
//! node with its `reg`.
#![no_main]

use addr::{Ipa, IpaRange};
use fdt::Fdt;
use fdt::node::FdtNode;
use guest_abi::map;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use vmfdt::{AssignedDevice, DtError, Gic, GuestDt, Uart, VirtioSlot};

/// Most vCPUs `build` accepts, in `GuestDt::vcpus`'s type.
const MAX_VCPUS: u32 = map::MAX_VCPUS as u32;

/// Highest SPI number `build` accepts (INTID 1019).
const MAX_SPI: u32 = 987;

/// Node names the tree itself uses, and a few invalid ones.
const NAMES: &[&str] = &[
    "pl031@9010000",
    "rtc@1000",
    "chosen",
    "cpus",
    "psci",
    "timer",
    "pmu",
    "apb-pclk",
    "memory@40000000",
    "pl011@9000000",
    "intc@8000000",
    "virtio_mmio@a000000",
    "",
    "a@b@c",
    "1bad",
    "bad/name",
    "x@",
    "this-node-name-is-longer-than-31-chars@1",
];

const STRINGS: &[&str] = &["vm0", "console=ttyAMA0 quiet", "", "hvc", "smc", "a\0b"];

fn pick_str<'a>(u: &mut Unstructured<'a>, dict: &[&'static str]) -> Result<&'a str> {
    if u.ratio(3, 4)? { Ok(*u.choose(dict)?) } else { u.arbitrary() }
}

fn pick_u64(u: &mut Unstructured, usual: &[u64]) -> Result<u64> {
    if u.ratio(3, 4)? { Ok(*u.choose(usual)?) } else { u.arbitrary() }
}

fn spi(u: &mut Unstructured) -> Result<u32> {
    if u.ratio(7, 8)? { u.int_in_range(0..=MAX_SPI + 2) } else { u.arbitrary() }
}

/// An assigned device: node name, compatible, reg, interrupts.
type Assigned<'a> = (&'a str, &'a [u8], IpaRange, Vec<(u32, u32)>);

/// The fuzzer's machine; `GuestDt` borrows from it.
struct Machine<'a> {
    vm_name: &'a str,
    vcpus: u32,
    ram: IpaRange,
    uart: Option<Uart>,
    gic: Option<Gic>,
    timer: bool,
    pmu: bool,
    virtio: Vec<VirtioSlot>,
    assigned: Vec<Assigned<'a>>,
    bootargs: &'a str,
    initrd: Option<IpaRange>,
    psci_method: &'a str,
}

fn machine<'a>(u: &mut Unstructured<'a>) -> Result<Machine<'a>> {
    const MIB: u64 = 1 << 20;
    let vm_name = pick_str(u, STRINGS)?;
    let vcpus = if u.ratio(7, 8)? { u.int_in_range(0..=MAX_VCPUS + 1)? } else { u.arbitrary()? };
    let start = pick_u64(u, &[map::RAM_BASE.raw(), 0x8000_0000, 0, u64::MAX - 0xfff])?;
    let size = pick_u64(u, &[256 * MIB, 32 * MIB, 0, 0x1000, u64::MAX])?;
    let ram = IpaRange::new(Ipa(start), size);
    let uart = if u.arbitrary()? {
        let base = pick_u64(u, &[map::UART_BASE.raw()])?;
        Some(Uart { base: Ipa(base), spi: spi(u)? })
    } else {
        None
    };
    let gic = if u.ratio(3, 4)? {
        let dist = Ipa(pick_u64(u, &[map::GICD_BASE.raw()])?);
        Some(if u.arbitrary()? {
            Gic::V2 { dist, cpu: Ipa(pick_u64(u, &[map::GICC_BASE.raw()])?) }
        } else {
            Gic::V3 { dist, redist: Ipa(pick_u64(u, &[map::GICR_BASE.raw()])?) }
        })
    } else {
        None
    };
    let timer = u.arbitrary()?;
    let pmu = u.arbitrary()?;
    let mut virtio = Vec::new();
    for n in 0..u.int_in_range(0..=10)? {
        let base = if u.ratio(7, 8)? {
            map::VIRTIO_BASE.raw() + u64::from(n) * map::VIRTIO_SLOT_SIZE
        } else {
            u.arbitrary()?
        };
        let spi = if u.ratio(7, 8)? { map::VIRTIO_FIRST_SPI + n } else { spi(u)? };
        virtio.push(VirtioSlot { base: Ipa(base), spi, control: false });
    }
    let mut assigned = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let name = pick_str(u, NAMES)?;
        let compatible: &[u8] =
            if u.ratio(1, 2)? { b"arm,pl031\0arm,primecell\0" } else { u.arbitrary()? };
        let reg =
            IpaRange::new(Ipa(pick_u64(u, &[0x0901_0000, 0x1000])?), pick_u64(u, &[0x1000, 0])?);
        let mut irqs = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            irqs.push((spi(u)?, pick_u64(u, &[4, 1, 8])? as u32));
        }
        assigned.push((name, compatible, reg, irqs));
    }
    let bootargs = pick_str(u, STRINGS)?;
    let initrd = if !u.arbitrary()? {
        None
    } else if u.ratio(3, 4)? && size > 0 {
        // Usually inside RAM.
        let off = u.arbitrary::<u64>()? % size;
        let len = u.arbitrary::<u64>()? % (size - off).saturating_add(1).max(1);
        Some(IpaRange::new(Ipa(start.wrapping_add(off)), len))
    } else {
        Some(IpaRange::new(Ipa(u.arbitrary()?), u.arbitrary()?))
    };
    let psci_method = pick_str(u, &["hvc", "smc"])?;
    Ok(Machine {
        vm_name,
        vcpus,
        ram,
        uart,
        gic,
        timer,
        pmu,
        virtio,
        assigned,
        bootargs,
        initrd,
        psci_method,
    })
}

/// vm-fdt's node-name rule: `name[@unit]`, the name 1..=31 characters of
/// `A-Za-z0-9,._+-` starting with a letter, the unit of the same characters.
fn node_name_valid(name: &str) -> bool {
    let mut parts = name.split('@');
    let base = parts.next().unwrap_or("");
    let unit = parts.next();
    let ok = |c: char| c.is_ascii_alphanumeric() || ",._+-".contains(c);
    parts.next().is_none()
        && (1..=31).contains(&base.len())
        && base.starts_with(|c: char| c.is_ascii_alphabetic())
        && base.chars().all(ok)
        && unit.is_none_or(|u| u.chars().all(ok))
}

/// The rule `e` names, if the input breaks it.
fn breaks(dt: &GuestDt, e: &DtError) -> bool {
    let spis = || {
        dt.uart
            .iter()
            .map(|u| u.spi)
            .chain(dt.virtio.iter().map(|v| v.spi))
            .chain(dt.assigned.iter().flat_map(|d| d.interrupts.iter().map(|i| i.0)))
    };
    match e {
        DtError::VcpuCount(n) => *n == dt.vcpus && !(1..=MAX_VCPUS).contains(n),
        DtError::BadRam => ram_bad(dt.ram),
        DtError::InitrdOutsideRam => dt.initrd.is_some_and(|i| !inside(i, dt.ram)),
        DtError::BadSpi(n) => *n > MAX_SPI && spis().any(|s| s == *n),
        DtError::BadPsciMethod => !matches!(dt.psci_method, "hvc" | "smc"),
        DtError::Fdt(vm_fdt::Error::InvalidString) => [dt.vm_name, dt.bootargs]
            .into_iter()
            .chain(dt.assigned.iter().map(|d| d.node_name))
            .any(|s| s.contains('\0')),
        DtError::DuplicateNode(name) => root_names(dt).iter().filter(|n| *n == name).count() > 1,
        DtError::Fdt(vm_fdt::Error::InvalidNodeName) => {
            dt.assigned.iter().any(|d| !node_name_valid(d.node_name))
        }
        _ => false,
    }
}

/// The names of the root's children, as written here from the docs of
/// `vmfdt` (the module's tree diagram), not from its code.
fn root_names(dt: &GuestDt) -> Vec<String> {
    let mut names = vec!["psci".to_string(), "cpus".into(), "chosen".into()];
    names.push(format!("memory@{:x}", dt.ram.start.raw()));
    if dt.timer {
        names.push("timer".into());
    }
    // The PMU's node carries its PPI: only with an interrupt controller.
    if dt.pmu && dt.gic.is_some() {
        names.push("pmu".into());
    }
    if let Some(uart) = &dt.uart {
        names.push("apb-pclk".into());
        names.push(format!("pl011@{:x}", uart.base.raw()));
    }
    if let Some(gic) = &dt.gic {
        names.push(format!("intc@{:x}", gic.dist().raw()));
    }
    names.extend(dt.virtio.iter().map(|v| format!("virtio_mmio@{:x}", v.base.raw())));
    names.extend(dt.assigned.iter().map(|d| d.node_name.to_string()));
    names
}

fn ram_bad(ram: IpaRange) -> bool {
    ram.size == 0 || u128::from(ram.start.raw()) + u128::from(ram.size) > u128::from(u64::MAX)
}

fn inside(i: IpaRange, ram: IpaRange) -> bool {
    i.start.raw() >= ram.start.raw()
        && u128::from(i.start.raw() - ram.start.raw()) + u128::from(i.size) <= u128::from(ram.size)
}

/// Whether the input breaks any rule.
fn any_rule_broken(dt: &GuestDt) -> bool {
    let mut spis = dt
        .uart
        .iter()
        .map(|u| u.spi)
        .chain(dt.virtio.iter().map(|v| v.spi))
        .chain(dt.assigned.iter().flat_map(|d| d.interrupts.iter().map(|i| i.0)));
    !(1..=MAX_VCPUS).contains(&dt.vcpus)
        || ram_bad(dt.ram)
        || dt.initrd.is_some_and(|i| !inside(i, dt.ram))
        || spis.any(|s| s > MAX_SPI)
        || !matches!(dt.psci_method, "hvc" | "smc")
        || [dt.vm_name, dt.bootargs].iter().any(|s| s.contains('\0'))
        || dt.assigned.iter().any(|d| d.node_name.contains('\0'))
        || dt.assigned.iter().any(|d| !node_name_valid(d.node_name))
        || {
            let names = root_names(dt);
            names.iter().enumerate().any(|(i, n)| names[..i].contains(n))
        }
}

fn u32s(node: &FdtNode, prop: &str) -> Vec<u32> {
    let v = node.property(prop).unwrap_or_else(|| panic!("{}: no {prop}", node.name)).value;
    assert_eq!(v.len() % 4, 0);
    v.chunks(4).map(|c| u32::from_be_bytes(c.try_into().unwrap())).collect()
}

fn u64s(node: &FdtNode, prop: &str) -> Vec<u64> {
    let v = node.property(prop).unwrap_or_else(|| panic!("{}: no {prop}", node.name)).value;
    assert_eq!(v.len() % 8, 0);
    v.chunks(8).map(|c| u64::from_be_bytes(c.try_into().unwrap())).collect()
}

fn string<'a>(node: &FdtNode<'_, 'a>, prop: &str) -> &'a [u8] {
    let v = node.property(prop).unwrap_or_else(|| panic!("{}: no {prop}", node.name)).value;
    v.strip_suffix(b"\0").unwrap_or_else(|| panic!("{}: {prop} not NUL-terminated", node.name))
}

/// The root's only child named exactly `name`.
fn child<'b, 'a>(root: &FdtNode<'b, 'a>, name: &str) -> FdtNode<'b, 'a> {
    let mut found = root.children().filter(|c| c.name == name);
    let node = found.next().unwrap_or_else(|| panic!("no node {name}"));
    assert!(found.next().is_none(), "two nodes named {name}");
    node
}

fn check_blob(dt: &GuestDt, blob: &[u8]) {
    let fdt = Fdt::new(blob).expect("the blob parses");
    let root = fdt.find_node("/").expect("a root node");

    let cpus = child(&root, "cpus");
    let mut n = 0;
    for cpu in cpus.children() {
        assert_eq!(cpu.name, format!("cpu@{n:x}"));
        assert_eq!(u32s(&cpu, "reg"), [n]);
        n += 1;
    }
    assert_eq!(n, dt.vcpus);

    let mem = child(&root, &format!("memory@{:x}", dt.ram.start.raw()));
    assert_eq!(u64s(&mem, "reg"), [dt.ram.start.raw(), dt.ram.size]);

    assert_eq!(string(&child(&root, "psci"), "method"), dt.psci_method.as_bytes());

    let chosen = child(&root, "chosen");
    assert_eq!(string(&chosen, "bootargs"), dt.bootargs.as_bytes());
    match dt.initrd {
        Some(i) => {
            assert_eq!(u64s(&chosen, "linux,initrd-start"), [i.start.raw()]);
            assert_eq!(u64s(&chosen, "linux,initrd-end"), [i.start.raw() + i.size]);
        }
        None => assert!(chosen.property("linux,initrd-start").is_none()),
    }

    if let Some(uart) = &dt.uart {
        let path = vmfdt::uart_path(uart);
        let node = child(&root, &path[1..]);
        assert_eq!(u64s(&node, "reg"), [uart.base.raw(), map::UART_SIZE]);
        assert_eq!(string(&chosen, "stdout-path"), path.as_bytes());
    }
    if let Some(gic) = &dt.gic {
        let node = child(&root, &format!("intc@{:x}", gic.dist().raw()));
        let reg = match *gic {
            Gic::V3 { dist, redist } => {
                let size = u64::from(dt.vcpus) * map::GICR_STRIDE;
                [dist.raw(), map::GICD_SIZE, redist.raw(), size]
            }
            Gic::V2 { dist, cpu } => [dist.raw(), map::GICD_SIZE, cpu.raw(), map::GICC_SIZE],
        };
        assert_eq!(u64s(&node, "reg"), reg);
    }
    for slot in dt.virtio {
        let node = child(&root, &format!("virtio_mmio@{:x}", slot.base.raw()));
        assert_eq!(u64s(&node, "reg"), [slot.base.raw(), map::VIRTIO_SLOT_SIZE]);
        if dt.gic.is_some() {
            assert_eq!(u32s(&node, "interrupts"), [0, slot.spi, 1]);
        }
    }
    for dev in dt.assigned {
        let node = child(&root, dev.node_name);
        assert_eq!(u64s(&node, "reg"), [dev.reg.start.raw(), dev.reg.size]);
        assert_eq!(node.property("compatible").unwrap().value, dev.compatible);
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(m) = machine(&mut Unstructured::new(data)) else {
        return;
    };
    let assigned: Vec<AssignedDevice> = m
        .assigned
        .iter()
        .map(|(node_name, compatible, reg, irqs)| AssignedDevice {
            node_name,
            compatible,
            reg: *reg,
            interrupts: irqs,
        })
        .collect();
    let dt = GuestDt {
        vm_name: m.vm_name,
        vcpus: m.vcpus,
        ram: m.ram,
        uart: m.uart,
        gic: m.gic,
        timer: m.timer,
        pmu: m.pmu,
        virtio: &m.virtio,
        assigned: &assigned,
        bootargs: m.bootargs,
        initrd: m.initrd,
        psci_method: m.psci_method,
    };
    match vmfdt::build(&dt) {
        Ok(blob) => {
            assert!(!any_rule_broken(&dt), "accepted a machine that breaks a rule: {dt:?}");
            check_blob(&dt, &blob);
        }
        Err(e) => assert!(breaks(&dt, &e), "{e:?} ({e}) for {dt:?}"),
    }
});
