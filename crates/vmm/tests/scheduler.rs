//! The scheduler's decisions with several VMs on one physical CPU, through the per-CPU loop on
//! the fake hardware: `light` (weight 256) and `heavy` (weight 512) share CPU 3.

mod common;

use common::{CNTP_CTL_EL0, CNTP_CVAL_EL0, Machine, store, sysreg, wfx};
use guest_abi::map;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use vmm::arch::{PPI_HYP_TIMER, fake};
use vmm::cpu_loop::Step;

const CONFIG: &str = r#"
[scheduler]
quantum_ms = 10

[[vm]]
name = "light"
vcpus = 1
cpu_affinity = [3]
memory_size = "16M"
kernel = "@testguest"
weight = 256

[[vm]]
name = "heavy"
vcpus = 1
cpu_affinity = [3]
memory_size = "16M"
kernel = "@testguest"
weight = 512
"#;

const CPU: usize = 3;

#[test]
fn scheduling_several_vms_on_one_cpu() {
    let mut m = common::install(CONFIG);
    a_blocked_vcpu_gives_way_and_its_timer_wakes_it(&mut m);
    yields_alternate(&mut m);
    busy_vcpus_share_the_cpu_by_weight(&mut m);
    list_registers_survive_switches(&mut m);
}

/// The guest computes until armhv's timer ends its slice: the clock jumps to the slice's end
/// and the timer's interrupt exits the guest.
fn busy_slice() -> fake::Trap {
    fake::Trap::irq().after(|_, _| {
        fake::with(|f| {
            let end = f.hyp_timer[CPU].expect("a shared CPU's slice has an end");
            f.now = f.now.max(end);
            f.pending[CPU].push_back(PPI_HYP_TIMER);
        })
    })
}

fn who(step: Step) -> usize {
    match step {
        Step::Ran { vm, .. } => vm,
        Step::Idled => panic!("CPU {CPU} idled with two runnable vCPUs"),
    }
}

fn yields_alternate(m: &mut Machine) {
    let first = who(m.step(CPU, vec![wfx(true)]));
    let second = who(m.step(CPU, vec![wfx(true)]));
    let third = who(m.step(CPU, vec![wfx(true)]));
    assert_ne!(first, second, "a yield gave the CPU to no other vCPU");
    assert_eq!(first, third);
}

fn busy_vcpus_share_the_cpu_by_weight(m: &mut Machine) {
    let mut slices: HashMap<usize, u32> = HashMap::new();
    let start = fake::with(|f| f.now);
    let mut time: HashMap<usize, u64> = HashMap::new();
    for _ in 0..300 {
        let before = fake::with(|f| f.now);
        let vm = who(m.step(CPU, vec![busy_slice()]));
        *slices.entry(vm).or_default() += 1;
        *time.entry(vm).or_default() += fake::with(|f| f.now) - before;
    }
    let elapsed = fake::with(|f| f.now) - start;
    let (light, heavy) = (m.vm("light").id, m.vm("heavy").id);
    let (tl, th) = (time[&light] as f64, time[&heavy] as f64);
    eprintln!(
        "300 slices over {} ms: light {} slices, {:.0} ms; heavy {} slices, {:.0} ms",
        elapsed / 1_000_000,
        slices[&light],
        tl / 1e6,
        slices[&heavy],
        th / 1e6
    );
    let ratio = th / tl;
    assert!((1.6..=2.4).contains(&ratio), "heavy (weight 512) got {ratio:.2} x light's time");
}

fn a_blocked_vcpu_gives_way_and_its_timer_wakes_it(m: &mut Machine) {
    let gicr_sgi = map::GICR_BASE.0 + vgic::regs::GICR_SGI_BASE;
    // Whichever VM runs first enables its timer's PPI 30, arms its emulated physical timer
    // 50 ms ahead and waits in WFI.
    let deadline = fake::with(|f| f.now) + 50_000_000;
    let arm = vec![
        store(map::GICD_BASE.0, 4, 3, 0x3),
        store(gicr_sgi + vgic::regs::GICD_IGROUPR, 4, 3, 0xffff_ffff),
        store(gicr_sgi + vgic::regs::GICD_ISENABLER, 4, 3, 1 << 30),
        sysreg(CNTP_CVAL_EL0, 2, false, deadline),
        sysreg(CNTP_CTL_EL0, 2, false, 1),
        wfx(false),
    ];
    let sleeper = who(m.step(CPU, arm));
    assert!(m.vm_by_id(sleeper).vcpus[0].in_wfi());
    // The other one has the CPU until the deadline, in slices that end no later than it.
    let mut slices = 0;
    while fake::with(|f| f.now) < deadline {
        let vm = who(m.step(CPU, vec![busy_slice()]));
        assert_ne!(vm, sleeper, "a vCPU blocked in WFI ran");
        slices += 1;
        assert!(slices < 20, "the deadline never came");
    }
    let now = fake::with(|f| f.now);
    assert_eq!(now, deadline, "the running vCPU's slice did not end at the sleeper's deadline");
    // Its timer expired while the other ran: it runs next, its PPI 30 pending.
    assert_eq!(who(m.step(CPU, vec![wfx(true)])), sleeper, "the timer did not wake its vCPU");
    let state = &m.vm_by_id(sleeper).vgic.lock().irq_state(30, 0).expect("PPI 30");
    assert!(state.pending || state.lr.is_some(), "the emulated timer's PPI: {state:?}");
    // Its timer off again, for the tests that follow.
    m.step(CPU, vec![wfx(true)]);
    let off = vec![sysreg(CNTP_CTL_EL0, 2, false, 0), wfx(true)];
    while who(m.step(CPU, vec![wfx(true)])) == sleeper {}
    assert_eq!(who(m.step(CPU, off)), sleeper);
}

/// One yield's run: the VM that ran and the list registers its guest found on entry.
fn run_seeing_lrs(m: &mut Machine) -> (usize, Vec<u64>) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    let vm = who(m.step(CPU, vec![wfx(true).after(move |_, lrs| *s.borrow_mut() = lrs.to_vec())]));
    (vm, seen.take())
}

/// The entries for `intid` among `lrs`.
fn entries(lrs: &[u64], intid: u64) -> Vec<u64> {
    lrs.iter().copied().filter(|&v| v >> 62 != 0 && v & 0xffff_ffff == intid).collect()
}

/// A vCPU switched out and back in finds each of its interrupts in its list registers once,
/// neither lost nor doubled: when nothing changed for it meanwhile (it is entered from its own
/// copy of its last flush, without the vGIC) and when an interrupt came meanwhile (the vGIC
/// chooses again); the other VM never sees them.
fn list_registers_survive_switches(m: &mut Machine) {
    let (light, heavy) = (m.vm("light"), m.vm("heavy"));
    let gicr_sgi = map::GICR_BASE.0 + vgic::regs::GICR_SGI_BASE;
    // Whichever runs: its distributor on, its SGIs group 1 and enabled.
    let setup = || {
        vec![
            store(map::GICD_BASE.0, 4, 3, 0x3),
            store(gicr_sgi + vgic::regs::GICD_IGROUPR, 4, 3, 0xffff_ffff),
            store(gicr_sgi + vgic::regs::GICD_ISENABLER, 4, 3, 0xffff),
            wfx(true),
        ]
    };
    assert_ne!(who(m.step(CPU, setup())), who(m.step(CPU, setup())), "yields alternate");
    // SGI 3 for light's vCPU while it is out.
    light.vgic.lock().trigger_edge(3, 0);
    let (mut vm, mut lrs) = run_seeing_lrs(m);
    if vm == heavy.id {
        assert!(entries(&lrs, 3).is_empty(), "heavy got light's SGI: {lrs:x?}");
        (vm, lrs) = run_seeing_lrs(m);
    }
    assert_eq!(vm, light.id);
    let sgi3 = entries(&lrs, 3);
    assert_eq!(sgi3.len(), 1, "SGI 3 once: {lrs:x?}");
    assert_eq!(sgi3[0] >> 62, 0b01, "SGI 3 pending: {lrs:x?}");
    // The guest leaves it pending and yields; nothing changes for light while heavy runs.
    let (vm, lrs) = run_seeing_lrs(m);
    assert_eq!(vm, heavy.id);
    assert!(entries(&lrs, 3).is_empty(), "heavy got light's SGI: {lrs:x?}");
    assert!(light.vgic_clean.is_clean(0), "light's last flush still stands");
    let (vm, lrs) = run_seeing_lrs(m);
    assert_eq!(vm, light.id);
    assert_eq!(entries(&lrs, 3), sgi3, "SGI 3 after the switch: {lrs:x?}");
    // SGI 5 comes while heavy runs.
    let (vm, lrs) = run_seeing_lrs(m);
    assert_eq!(vm, heavy.id);
    assert!(entries(&lrs, 3).is_empty(), "heavy got light's SGI: {lrs:x?}");
    light.vgic.lock().trigger_edge(5, 0);
    assert!(!light.vgic_clean.is_clean(0));
    let (vm, lrs) = run_seeing_lrs(m);
    assert_eq!(vm, light.id);
    assert_eq!(entries(&lrs, 3), sgi3, "SGI 3 with SGI 5: {lrs:x?}");
    let sgi5 = entries(&lrs, 5);
    assert_eq!(sgi5.len(), 1, "SGI 5 once: {lrs:x?}");
    assert_eq!(sgi5[0] >> 62, 0b01, "SGI 5 pending: {lrs:x?}");
}
