//! MMIO to the vGIC and to virtio, virtual IPIs, WFI that blocks and wakes, and the expiry of
//! the virtual and the emulated physical timer, through exit dispatch on the fake hardware:
//! VM `io` has two vCPUs on CPUs 0 and 1 and a virtio-rng in slot 0.

mod common;

use common::{CNTP_CTL_EL0, CNTP_CVAL_EL0, Machine, load, store, sysreg, wfx};
use guest_abi::map;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use vgic::regs::*;
use virtio::mmio::regs as vio;
use vmm::arch::{PPI_VIRT_TIMER, fake};
use vmm::cpu_loop::Step;

const CONFIG: &str = r#"
[[vm]]
name = "io"
vcpus = 2
cpu_affinity = [0, 1]
memory_size = "16M"
kernel = "@testguest"
devices = ["pl011", "virtio-rng"]
"#;

const RAM: u64 = 0x4000_0000;
const GICD: u64 = map::GICD_BASE.0;
const GICR: u64 = map::GICR_BASE.0;
/// vCPU `n`'s SGI/PPI frame.
const fn gicr_sgi(n: u64) -> u64 {
    GICR + n * GICR_STRIDE + GICR_SGI_BASE
}
const ICC_SGI1R_EL1: (u32, u32, u32, u32, u32) = (3, 0, 12, 11, 5);

#[test]
fn interrupts_and_devices_through_the_monitor() {
    let mut m = common::install(CONFIG);
    gic_mmio(&mut m);
    ipi_wakes_a_vcpu_blocked_in_wfi(&mut m);
    virtio_request_raises_its_interrupt(&mut m);
    virtual_timer_expiry_wakes_its_vcpu(&mut m);
    emulated_physical_timer_expiry_wakes_its_vcpu(&mut m);
}

/// A load that records what the guest's register got, for the next trap to check.
fn read_into(ipa: u64, bytes: u32, seen: &Rc<Cell<u64>>) -> Vec<fake::Trap> {
    let seen = seen.clone();
    vec![load(ipa, bytes, 7), wfx(true).after(move |regs, _| seen.set(regs.x[7]))]
}

fn gic_mmio(m: &mut Machine) {
    let seen = Rc::new(Cell::new(0));
    m.step(0, read_into(GICD + GICD_TYPER, 4, &seen));
    let typer = seen.get();
    let io = &m.vm("io");
    let spis = io.vgic.lock().spis();
    assert_eq!(((typer & 0x1f) + 1) * 32, u64::from(spis) + 32, "GICD_TYPER.ITLinesNumber");
    assert_eq!(io.stats.mmio.load(Relaxed), 1);

    // Both groups on, every SGI and PPI of both vCPUs group 1 and enabled.
    let mut script = vec![store(GICD + GICD_CTLR, 4, 3, 0x3)];
    for n in 0..2 {
        script.push(store(gicr_sgi(n) + GICD_IGROUPR, 4, 3, 0xffff_ffff));
        script.push(store(gicr_sgi(n) + GICD_ISENABLER, 4, 3, 0xffff_ffff));
    }
    script.push(wfx(true));
    m.step(0, script);
    let gic = io.vgic.lock();
    assert!(gic.irq_state(3, 1).is_some_and(|s| s.enabled && s.group1), "SGI 3 of vCPU 1");
    assert!(gic.irq_state(PPI_VIRT_TIMER, 1).is_some_and(|s| s.enabled));
}

fn ipi_wakes_a_vcpu_blocked_in_wfi(m: &mut Machine) {
    let cpu_on = common::hvc(smccc::psci::PSCI_CPU_ON_64, &[1, RAM + 0x1000, 0]);
    m.step(0, vec![cpu_on, wfx(true)]);
    // vCPU 1 waits in WFI: it blocks, and its CPU has nothing to run.
    assert_eq!(m.step(1, vec![wfx(false)]), Step::Ran { vm: 0, index: 1 });
    let io = &m.vm("io");
    assert!(io.vcpus[1].in_wfi());
    m.idle(1);

    // vCPU 0 sends it SGI 3 (ICC_SGI1R_EL1: INTID 3, target list {1}).
    fake::with(|f| f.kicks.clear());
    let sgi = sysreg(ICC_SGI1R_EL1, 2, false, (3 << 24) | 0b10);
    m.step(0, vec![sgi, wfx(true)]);
    assert_eq!(io.stats.sgi.load(Relaxed), 1);
    assert!(
        fake::with(|f| f.kicks.contains(&credit::CpuSet::single(1))),
        "CPU 1 was not kicked for the IPI"
    );

    // CPU 1 runs vCPU 1 again, with SGI 3 in a list register.
    let lr0 = Rc::new(Cell::new(0));
    let seen = lr0.clone();
    // The guest acknowledges and completes it in the list register, without a trap.
    let entry = wfx(true).after(move |_, lrs| {
        seen.set(lrs[0]);
        lrs[0] &= !(0b11 << 62);
    });
    assert_eq!(m.step(1, vec![entry]), Step::Ran { vm: 0, index: 1 });
    assert!(!io.vcpus[1].in_wfi());
    assert!(!io.vgic.lock().pending_for(1), "SGI 3 is complete");
    let lr = lr0.get();
    assert_eq!(lr & 0xffff_ffff, 3, "LR0's vINTID: {lr:#x}");
    assert_eq!(lr >> 62, 0b01, "LR0's state: pending ({lr:#x})");
}

fn virtio_request_raises_its_interrupt(m: &mut Machine) {
    let slot = map::virtio_slot(0).0;
    let spi = map::spi_intid(map::virtio_spi(0));
    let seen = Rc::new(Cell::new(0));
    m.step(0, read_into(slot + vio::MAGIC_VALUE, 4, &seen));
    assert_eq!(seen.get(), 0x7472_6976, "virtio-mmio's magic value");
    m.step(0, read_into(slot + vio::DEVICE_ID, 4, &seen));
    assert_eq!(seen.get(), 4, "virtio-rng");

    // A driver's setup of queue 0 (descriptors, available and used rings in RAM) and one
    // 16-byte request for entropy.
    let (desc, avail, used, buf) =
        (RAM + 0x10_0000, RAM + 0x10_1000, RAM + 0x10_2000, RAM + 0x10_3000);
    let io = &m.vm("io");
    let mut d = Vec::new();
    d.extend_from_slice(&buf.to_le_bytes());
    d.extend_from_slice(&16u32.to_le_bytes());
    d.extend_from_slice(&2u16.to_le_bytes()); // VIRTQ_DESC_F_WRITE
    d.extend_from_slice(&0u16.to_le_bytes());
    assert!(io.memory.write(addr::Ipa(desc), &d));
    // avail: flags 0, idx 1, ring[0] = 0.
    assert!(io.memory.write(addr::Ipa(avail), &[0, 0, 1, 0, 0, 0]));
    let mut script = common::virtio_queue0_setup(slot, desc, avail, used);
    // Its SPI enabled, group 1, routed to vCPU 0.
    script.push(store(GICD + GICD_IGROUPR + 4 * u64::from(spi / 32), 4, 3, 0xffff_ffff));
    script.push(store(GICD + GICD_ISENABLER + 4 * u64::from(spi / 32), 4, 3, 1 << (spi % 32)));
    script.push(store(GICD + GICD_IROUTER + 8 * u64::from(spi), 8, 3, 0));
    script.push(store(slot + vio::QUEUE_NOTIFY, 4, 4, 0));
    script.push(wfx(true));
    m.step(0, script);

    let used_ring = common::read_ram(io, used, 8);
    assert_eq!(u16::from_le_bytes([used_ring[2], used_ring[3]]), 1, "used.idx");
    assert_eq!(u32::from_le_bytes(used_ring[4..8].try_into().unwrap()), 0, "used id");
    assert_ne!(common::read_ram(io, buf, 16), vec![0xa5; 16], "entropy written");
    let state = io.vgic.lock().irq_state(spi, 0).expect("the slot's SPI");
    assert!(state.pending && state.enabled, "the virtio SPI: {state:?}");
    assert_eq!(state.owner, Some(0), "routed to vCPU 0");
    m.step(0, read_into(slot + vio::INTERRUPT_STATUS, 4, &seen));
    assert_eq!(seen.get() & 1, 1, "InterruptStatus: used buffer");
    assert!(io.stats.device_irqs.load(Relaxed) >= 1);
}

fn virtual_timer_expiry_wakes_its_vcpu(m: &mut Machine) {
    let io = &m.vm("io");
    assert_eq!(m.step(1, vec![wfx(false)]), Step::Ran { vm: 0, index: 1 });
    assert!(io.vcpus[1].in_wfi());
    m.idle(1);
    // vCPU 1 stays loaded on its CPU: its virtual timer fires as the physical PPI 27.
    fake::with(|f| {
        f.vtimer_asserted = true;
        f.vtimer_compare = 1234;
        f.pending[1].push_back(PPI_VIRT_TIMER);
    });
    m.idle(1);
    let silenced = fake::with(|f| f.ppis_disabled[1] & (1 << PPI_VIRT_TIMER) != 0);
    assert!(silenced, "the physical PPI stays quiet while the virtual line is up");
    assert!(io.vgic.lock().pending_for(1), "the virtual timer's PPI is pending");
    // The guest runs, takes the interrupt and turns the timer off: the line drops and the
    // physical PPI is let through again before the next entry (after an exit to the run
    // loop: ARMHV_VM_INFO, which the vector's fast path does not answer).
    let off = fake::Trap::sync(common::esr(0x16, 0), 0, 0).after(|regs, _| {
        fake::with(|f| f.vtimer_asserted = false);
        regs.x[0] = u64::from(guest_abi::hypercall::ARMHV_VM_INFO);
        regs.elr += 4;
    });
    assert_eq!(m.step(1, vec![off, wfx(true)]), Step::Ran { vm: 0, index: 1 });
    let quiet = fake::with(|f| f.ppis_disabled[1] & (1 << PPI_VIRT_TIMER) == 0);
    assert!(quiet, "the physical PPI was not re-enabled");
}

fn emulated_physical_timer_expiry_wakes_its_vcpu(m: &mut Machine) {
    let io = &m.vm("io");
    let now = fake::with(|f| f.now);
    let deadline = now + 5_000;
    let arm = vec![
        sysreg(CNTP_CVAL_EL0, 2, false, deadline),
        sysreg(CNTP_CTL_EL0, 2, false, 1),
        wfx(false),
    ];
    assert_eq!(m.step(1, arm), Step::Ran { vm: 0, index: 1 });
    m.idle(1);
    assert_eq!(fake::with(|f| f.hyp_timer[1]), Some(deadline), "armhv's timer for the deadline");
    assert!(!io.vgic.lock().pending_for(1));
    fake::with(|f| {
        f.now = deadline;
        f.pending[1].push_back(vmm::arch::PPI_HYP_TIMER);
    });
    // The deadline passed: PPI 30 is pending and vCPU 1 runs.
    assert_eq!(m.step(1, vec![wfx(true)]), Step::Ran { vm: 0, index: 1 });
    let state = io.vgic.lock().irq_state(30, 1).expect("PPI 30");
    assert!(state.pending || state.lr.is_some(), "the emulated timer's PPI: {state:?}");
}
