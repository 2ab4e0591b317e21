//! Devices assigned to a VM, on the fake hardware: VM `rtc` has the host's PL031 and GPIO, and
//! a device it vouches does no DMA (`dma = "none"`), which armhv does not know how to quiesce;
//! VM `risky` has a DMA master assigned with `dma = "unprotected"`. At `rtc`'s reset and at its
//! stop, armhv writes the registers that quiesce the PL031 (alarm masked and cleared) and the
//! PL061 (pin interrupts masked and cleared, every pin an input), once none of its vCPUs runs;
//! the unknown device is left alone. (What is refused, and why: `passthrough::check_dma`'s unit
//! tests and the QEMU test `assigned_device_interrupts`.)

mod common;

use common::hvc;
use smccc::psci;
use vmm::arch::fake;
use vmm::cpu_loop::Step;
use vmm::vm::AssignedDevice;

const CONFIG: &str = r#"
[[vm]]
name = "rtc"
vcpus = 1
cpu_affinity = [0]
memory_size = "16M"
kernel = "@testguest"
passthrough = ["/pl031@9010000", "/pl061@9030000", { path = "/flash@0", dma = "none" }]

[[vm]]
name = "risky"
vcpus = 1
cpu_affinity = [1]
memory_size = "16M"
kernel = "@testguest"
passthrough = [{ path = "/fw-cfg@9020000", dma = "unprotected" }]
"#;

/// QEMU virt's nodes, as the EL2 loader finds them.
fn host_device(path: &str) -> Result<AssignedDevice, String> {
    let (node_name, compatible, base, size, intids, properties): (_, &[u8], _, _, &[_], &[_]) =
        match path {
            "/pl031@9010000" => (
                "pl031@9010000",
                b"arm,pl031\0arm,primecell\0",
                0x0901_0000,
                0x1000,
                &[(34, 4)],
                &["clock-names", "clocks", "interrupts", "reg", "compatible"],
            ),
            "/pl061@9030000" => (
                "pl061@9030000",
                b"arm,pl061\0arm,primecell\0",
                0x0903_0000,
                0x1000,
                &[(39, 4)],
                &["clocks", "interrupts", "gpio-controller", "compatible", "reg"],
            ),
            "/flash@0" => ("flash@0", b"cfi-flash\0", 0, 0x400_0000, &[], &["bank-width", "reg"]),
            "/fw-cfg@9020000" => (
                "fw-cfg@9020000",
                b"qemu,fw-cfg-mmio\0",
                0x0902_0000,
                0x18,
                &[],
                &["dma-coherent", "reg", "compatible"],
            ),
            _ => return Err(format!("no host device {path}")),
        };
    Ok(AssignedDevice {
        node_name,
        compatible,
        reg: addr::IpaRange::new(addr::Ipa(base), size),
        interrupts: intids.to_vec(),
        properties: properties.to_vec(),
        dma: vmm::vm::DmaVerdict::Free,
    })
}

/// The writes that quiesce rtc's PL031 and PL061, in order.
const QUIESCE: [(u64, u32); 6] = [
    (0x0901_0010, 0),    // PL031 IMSC: alarm masked
    (0x0901_001c, 1),    // PL031 ICR: a raised alarm cleared
    (0x0903_0410, 0),    // PL061 GPIOIE: pin interrupts masked
    (0x0903_041c, 0xff), // PL061 GPIOIC: cleared
    (0x0903_0400, 0),    // PL061 GPIODIR: every pin an input
    (0x0903_0420, 0),    // PL061 GPIOAFSEL: software control
];

#[test]
fn assigned_devices_are_quiesced_at_reset_and_stop() {
    let mut m = common::install_with(CONFIG, &mut host_device);
    let rtc = &m.vm("rtc");
    let verdicts: Vec<_> = rtc.assigned.iter().map(|d| d.dma).collect();
    use vmm::vm::DmaVerdict;
    assert_eq!(verdicts, [DmaVerdict::Free, DmaVerdict::Free, DmaVerdict::Vouched]);
    assert_eq!(m.vm("risky").assigned[0].dma, DmaVerdict::Unprotected);
    assert!(fake::with(|f| f.device_writes.is_empty()), "a device was written at boot");

    // SYSTEM_RESET: quiesced as the reset begins, before the RAM is zeroed and the guest back.
    assert_eq!(m.step(0, vec![hvc(psci::PSCI_SYSTEM_RESET, &[])]), Step::Ran { vm: 0, index: 0 });
    assert_eq!(fake::with(|f| std::mem::take(&mut f.device_writes)), QUIESCE);
    let mut steps = 0;
    while rtc.is_resetting() {
        m.step(0, vec![]);
        steps += 1;
        assert!(steps < 100, "the reset does not end");
    }
    assert!(fake::with(|f| f.device_writes.is_empty()), "written again after the reset");

    // SYSTEM_OFF: quiesced, and the interrupts disabled at the GIC.
    assert_eq!(m.step(0, vec![hvc(psci::PSCI_SYSTEM_OFF, &[])]), Step::Ran { vm: 0, index: 0 });
    assert!(rtc.is_stopped());
    assert_eq!(fake::with(|f| std::mem::take(&mut f.device_writes)), QUIESCE);
    assert!(fake::with(|f| f.disabled_spis.contains(&34) && f.disabled_spis.contains(&39)));
}
