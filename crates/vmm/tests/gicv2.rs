//! A GICv2 host (QEMU `gic-version=2`, a GIC-400): each VM gets a virtual GICv2. Its
//! distributor answers in GICv2's layout, banked by the accessing vCPU; a virtual IPI is a
//! trapped GICD_SGIR write; its CPU interface is the host's virtual CPU interface (GICV) mapped
//! at the guest's GICC address, two pages and no more, so acknowledge and EOI never trap; it
//! has no redistributor window. A VM whose config pins a GICv3 is refused with the reason.

mod common;

use common::{Machine, load, store, wfx};
use guest_abi::map::{self, GicVersion};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Mutex;
use vgic::regs::{GICD_CTLR, GICD_ISENABLER, GICD_TYPER};
use vmm::arch::fake;
use vmm::emulate::vgic::HostGic;
use vmm::manage;

/// The host's GICV frame, as QEMU `virt` places it.
const HOST_GICV: u64 = 0x0804_0000;

const CONFIG: &str = r#"
[[vm]]
name = "v2"
vcpus = 2
cpu_affinity = [0, 1]
memory_size = "16M"
kernel = "@testguest"
devices = ["pl011"]

[[vm]]
name = "pinned-v3"
vcpus = 1
cpu_affinity = [2]
memory_size = "16M"
kernel = "@testguest"
gic = "v3"
"#;

const GICD: u64 = map::GICD_BASE.0;
const GICD_ITARGETSR: u64 = 0x800;
const GICD_SGIR: u64 = 0xf00;
const GICD_SPENDSGIR: u64 = 0xf20;

static EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn on_event(name: &str, event: &control::Event, _: Option<&vmm::vm::Vm>) {
    EVENTS.lock().unwrap().push(format!("{name}: {}", event.describe(name)));
}

fn on_reply(_: manage::Reply<'_>) {}

/// A load that records what the guest's register got, for the next trap to check.
fn read_into(ipa: u64, bytes: u32, seen: &Rc<Cell<u64>>) -> Vec<fake::Trap> {
    let seen = seen.clone();
    vec![load(ipa, bytes, 7), wfx(true).after(move |regs, _| seen.set(regs.x[7]))]
}

#[test]
fn vms_on_a_gicv2_host_get_a_virtual_gicv2() {
    manage::set_sinks(manage::Sinks { reply: on_reply, event: on_event });
    let host = HostGic { version: GicVersion::V2, virtual_cpu_interface: Some(HOST_GICV) };
    let mut m = common::install_on(
        CONFIG,
        &mut |path: &str| Err(format!("no host device {path} in tests")),
        host,
    );
    pinned_gicv3_is_refused();
    cpu_interface_is_the_hosts_gicv_mapped(&m);
    distributor_speaks_gicv2(&mut m);
    sgir_write_is_a_virtual_ipi(&mut m);
    no_redistributor_window(&mut m);
}

fn pinned_gicv3_is_refused() {
    let events = EVENTS.lock().unwrap().join("\n");
    assert!(
        events.contains("pinned-v3")
            && events.contains("gic = \"v3\"")
            && events.contains("this machine has a GICv2"),
        "the refusal names the key and the host's GIC:\n{events}"
    );
    assert!(vmm::registry::get(1).is_none(), "the pinned VM must not run");
}

fn cpu_interface_is_the_hosts_gicv_mapped(m: &Machine) {
    let vm = m.vm("v2");
    for offset in [0, 0x1000] {
        let t = vm.stage2_lookup(addr::Ipa(map::GICC_BASE.0 + offset)).expect("GICC mapped");
        assert_eq!(t.pa.0, HOST_GICV + offset);
        assert_eq!(t.attr, stage2::MemAttr::Device);
    }
    // Two pages and no more: the rest of the host's GICV frame, its GICH and its GICC are not
    // the guest's.
    for ipa in [map::GICC_BASE.0 + map::GICC_SIZE, 0x0803_0000, HOST_GICV, map::GICR_BASE.0] {
        assert!(vm.stage2_lookup(addr::Ipa(ipa)).is_none(), "{ipa:#x} mapped");
    }
}

fn distributor_speaks_gicv2(m: &mut Machine) {
    let seen = Rc::new(Cell::new(0));
    m.step(0, read_into(GICD + GICD_TYPER, 4, &seen));
    // GICv2's TYPER: CPUNumber (bits 7:5) is the vCPU count - 1.
    assert_eq!((seen.get() >> 5) & 7, 1, "GICD_TYPER {:#x}", seen.get());
    // ITARGETSR0..7 read as the accessing vCPU's own bit: vCPU 0 reads 0x01 in every byte.
    m.step(0, read_into(GICD + GICD_ITARGETSR, 4, &seen));
    assert_eq!(seen.get(), 0x0101_0101);
    let vm = m.vm("v2");
    assert_eq!(vm.vgic.lock().version(), GicVersion::V2);
}

fn sgir_write_is_a_virtual_ipi(m: &mut Machine) {
    let vm = m.vm("v2");
    // Group 0 on: GICv2 guests put their interrupts there.
    m.step(0, vec![store(GICD + GICD_CTLR, 4, 3, 1), wfx(true)]);
    // vCPU 0 sends SGI 5 to vCPU 1 (CPUTargetList bit 1, filter 0).
    m.step(0, vec![store(GICD + GICD_SGIR, 4, 3, (0b10 << 16) | 5), wfx(true)]);
    let gic = vm.vgic.lock();
    let sgi = gic.irq_state(5, 1).expect("SGI 5 of vCPU 1");
    assert!(sgi.pending, "vCPU 1's SGI 5 pending after GICD_SGIR: {sgi:?}");
    assert!(!gic.irq_state(5, 0).unwrap().pending, "vCPU 0's SGI 5 untouched");
    drop(gic);
    // SPENDSGIR of vCPU 0's bank reads vCPU 0's own sources: none.
    let seen = Rc::new(Cell::new(0));
    m.step(0, read_into(GICD + GICD_SPENDSGIR + 4, 4, &seen));
    assert_eq!(seen.get(), 0);
    // vCPU 0's ISENABLER0 write enables in vCPU 0's bank only.
    m.step(0, vec![store(GICD + GICD_ISENABLER, 4, 3, 1 << 5), wfx(true)]);
    let gic = vm.vgic.lock();
    assert!(gic.irq_state(5, 0).unwrap().enabled && !gic.irq_state(5, 1).unwrap().enabled);
}

fn no_redistributor_window(m: &mut Machine) {
    fake::with(|f| f.injected[0] = None);
    m.step(0, vec![load(map::GICR_BASE.0, 4, 7), wfx(true)]);
    let injected = fake::with(|f| f.injected[0]);
    assert!(injected.is_some(), "a load from the GICv3 redistributor window was not refused");
}
