//! Hypercalls, PSCI, system registers, a reset and the end of the machine, through exit
//! dispatch on the fake hardware: VM `a` has two vCPUs on CPUs 0 and 1, VM `b` one on CPU 2.

mod common;

use common::{Machine, calls, hvc, sysreg, wfx};
use smccc::psci::{self, error};
use std::sync::atomic::Ordering::Relaxed;
use vmm::arch::fake;
use vmm::cpu_loop::Step;
use vmm::vcpu::Power;

const CONFIG: &str = r#"
[[vm]]
name = "a"
vcpus = 2
cpu_affinity = [0, 1]
memory_size = "16M"
kernel = "@testguest"

[[vm]]
name = "b"
vcpus = 1
cpu_affinity = [2]
memory_size = "16M"
kernel = "@testguest"
"#;

const RAM: u64 = 0x4000_0000;
const NOT_SUPPORTED: u64 = u64::MAX; // SMCCC -1

fn err(e: i32) -> u64 {
    e as i64 as u64
}

#[test]
fn exits_through_the_monitor() {
    let mut m = common::install(CONFIG);
    hypercalls(&mut m);
    psci_cpu_on_and_off(&mut m);
    system_registers(&mut m);
    system_reset_restarts_the_vm_on_zeroed_ram(&mut m);
    system_off_ends_each_vm_and_then_the_machine(&mut m);
}

fn hypercalls(m: &mut Machine) {
    let (script, results) = calls(&[
        (guest_abi::hypercall::ARMHV_NOP, &[]),
        (guest_abi::hypercall::ARMHV_VM_INFO, &[]),
        (0xC600_0777, &[]),
        (0x8000_0000, &[]), // SMCCC_VERSION
        (psci::PSCI_VERSION, &[]),
        (psci::PSCI_FEATURES, &[u64::from(psci::PSCI_CPU_ON_64)]),
        (0x8600_0000, &[]), // an SMCCC owner armhv does not serve
    ]);
    assert_eq!(m.step(0, script), Step::Ran { vm: 0, index: 0 });
    let r = results.borrow();
    assert_eq!(r[0][0], 0, "ARMHV_NOP");
    assert_eq!(r[1], [0, 0, 0, 2], "ARMHV_VM_INFO: VM 0, vCPU 0 of 2");
    assert_eq!(r[2][0], NOT_SUPPORTED, "an unknown armhv call");
    assert_eq!(r[3][0], 0x1_0001, "SMCCC 1.1");
    assert_eq!(r[4][0], 0x1_0001, "PSCI 1.1");
    assert_eq!(r[5][0], 0, "CPU_ON is implemented");
    assert_eq!(r[6][0], NOT_SUPPORTED, "an unserved owner");
    let a = &m.vm("a");
    assert_eq!(a.stats.hypercalls.load(Relaxed), 7);
    // ARMHV_NOP, SMCCC_VERSION and PSCI_VERSION were answered by the vector's fast path
    // (modelled by the fake arch): still exits, counted at the next one.
    assert_eq!(a.stats.exits.load(Relaxed), 8, "seven calls and the WFE");
    assert_eq!(a.stats.wfx.load(Relaxed), 1, "the WFE that ended the run");
    spectre_workarounds(m);
}

/// What guests learn of the Spectre workarounds follows the worst CPU's plan: a Cortex-A76
/// (the branch loop on exits) and then a Cortex-A57 without firmware.
fn spectre_workarounds(m: &mut Machine) {
    use trap::speculation::{CpuIds, Firmware, Options, Plan};
    const FEATURES: u32 = 0x8000_0001;
    const WA1: u64 = 0x8000_8000;
    const WA3: u64 = 0x8000_3fff;
    let script = || {
        calls(&[
            (FEATURES, &[WA1]),
            (FEATURES, &[WA3]),
            (FEATURES, &[0x8000_7fff]),
            (WA1 as u32, &[]),
            (WA3 as u32, &[]),
        ])
    };
    let a76 = CpuIds { midr: 0x414f_d0b1, pfr0: 1 << 56, mmfr1: 0, isar2: 0 };
    vmm::emulate::hypercall::record_speculation(&Plan::decide(
        a76,
        Firmware::NONE,
        Options::default(),
    ));
    let (run, results) = script();
    assert_eq!(m.step(0, run), Step::Ran { vm: 0, index: 0 });
    let answers: Vec<u64> = results.borrow().iter().map(|r| r[0]).collect();
    assert_eq!(answers, [err(-2), 0, NOT_SUPPORTED, 0, 0], "Cortex-A76");

    let a57 = CpuIds { midr: 0x411f_d070, pfr0: 0, mmfr1: 0, isar2: 0 };
    vmm::emulate::hypercall::record_speculation(&Plan::decide(
        a57,
        Firmware::NONE,
        Options::default(),
    ));
    let (run, results) = script();
    assert_eq!(m.step(0, run), Step::Ran { vm: 0, index: 0 });
    let answers: Vec<u64> = results.borrow().iter().map(|r| r[0]).collect();
    assert_eq!(answers, [NOT_SUPPORTED; 5], "and a Cortex-A57: the worst wins");
}

fn psci_cpu_on_and_off(m: &mut Machine) {
    let entry = RAM + 0x1000;
    let (script, results) = calls(&[
        (psci::PSCI_AFFINITY_INFO_64, &[1, 0]),
        (psci::PSCI_CPU_ON_64, &[1, entry, 0x55]),
        (psci::PSCI_AFFINITY_INFO_64, &[1, 0]),
        (psci::PSCI_CPU_ON_64, &[1, entry, 0x55]),
        (psci::PSCI_CPU_ON_64, &[0, entry, 0]),
        (psci::PSCI_CPU_ON_64, &[7, entry, 0]),
        (psci::PSCI_CPU_ON_64, &[1, 0x10, 0]),
    ]);
    fake::with(|f| f.kicks.clear());
    assert_eq!(m.step(0, script), Step::Ran { vm: 0, index: 0 });
    let r = results.borrow();
    assert_eq!(r[0][0], 1, "vCPU 1 starts off");
    assert_eq!(r[1][0], 0, "CPU_ON");
    assert_eq!(r[2][0], 0, "vCPU 1 is ON once CPU_ON returned, as on KVM (not ON_PENDING)");
    assert_eq!(r[3][0], err(error::ALREADY_ON), "a second CPU_ON, as on KVM");
    assert_eq!(r[4][0], err(error::ALREADY_ON), "the caller itself");
    assert_eq!(r[5][0], err(error::INVALID_PARAMETERS), "no vCPU 7");
    assert_eq!(r[6][0], err(error::INVALID_ADDRESS), "an entry outside RAM");
    // vCPU 1 has CPU 1 to itself: the wake-up is a kick of that CPU.
    assert!(fake::with(|f| f.kicks.contains(&credit::CpuSet::single(1))), "CPU 1 was not kicked");
    let a = &m.vm("a");
    assert_eq!(a.vcpus[1].power(), Power::Starting);

    // CPU 1 starts vCPU 1 at the entry with x0 = the context, and it turns itself off.
    let seen = std::rc::Rc::new(std::cell::Cell::new((0, 0)));
    let at_entry = seen.clone();
    let off = fake::Trap::sync(common::esr(0x16, 0), 0, 0).after(move |regs, _| {
        at_entry.set((regs.elr, regs.x[0]));
        regs.x[0] = u64::from(psci::PSCI_CPU_OFF);
    });
    assert_eq!(m.step(1, vec![off]), Step::Ran { vm: 0, index: 1 });
    assert_eq!(seen.get(), (entry, 0x55), "vCPU 1's first instruction and x0");
    assert_eq!(a.vcpus[1].power(), Power::Off);
    m.idle(1);

    let (script, results) = calls(&[(psci::PSCI_AFFINITY_INFO_64, &[1, 0])]);
    m.step(0, script);
    assert_eq!(results.borrow()[0][0], 1, "vCPU 1 is off again");
}

fn system_registers(m: &mut Machine) {
    // ID_AA64PFR0_EL1 (3, 0, 0, 4, 0): the fake CPU has every feature, the guest no SVE.
    let id_aa64pfr0 = (3, 0, 0, 4, 0);
    let read = sysreg(id_aa64pfr0, 5, true, 0);
    let seen = std::rc::Rc::new(std::cell::Cell::new(0));
    let after = seen.clone();
    let end = wfx(true).after(move |regs, _| after.set(regs.x[5]));
    // An unknown register: UNDEFINED, an exception at the guest's vector.
    let unknown = sysreg((3, 7, 15, 15, 7), 1, true, 0);
    fake::with(|f| {
        f.el1[0].vbar_el1 = 0x4010_0000;
        f.injected[0] = None;
    });
    let before = m.regs("a", 0).elr;
    m.step(0, vec![read, end]);
    assert_eq!(m.regs("a", 0).elr, before + 8, "the MRS and the WFE were stepped over");
    let pfr0 = seen.get();
    assert_eq!((pfr0 >> 32) & 0xf, 0, "SVE hidden: {pfr0:#x}");
    assert_eq!(pfr0 & 0xf, 1, "EL0 as the hardware has it: {pfr0:#x}");

    m.step(0, vec![unknown, wfx(true)]);
    let injected = fake::with(|f| f.injected[0]);
    let (esr, ..) = injected.expect("no exception injected for an unknown register");
    assert_eq!(esr >> 26, 0, "ESR_EL1.EC: Unknown reason (an UNDEFINED instruction)");
    assert_eq!(m.vm("a").stats.undef_injected.load(Relaxed), 1);

    // An SME instruction (SMSTART) on a CPU that has SME, which the guest is not shown: it
    // traps (ESR_EL2.EC 0x1D) and is UNDEFINED for the guest, whose VM goes on.
    fake::with(|f| f.injected[0] = None);
    m.step(0, vec![fake::Trap::sync(common::esr(0x1d, 0), 0, 0), wfx(true)]);
    let (esr, ..) = fake::with(|f| f.injected[0]).expect("no exception injected for SME");
    assert_eq!(esr >> 26, 0, "ESR_EL1.EC: Unknown reason");
    assert_eq!(m.vm("a").stats.undef_injected.load(Relaxed), 2);
    assert!(!m.vm("a").is_stopped());
}

fn system_reset_restarts_the_vm_on_zeroed_ram(m: &mut Machine) {
    let b = &m.vm("b");
    let marker = addr::Ipa(RAM + (8 << 20));
    assert!(b.memory.write(marker, b"the old kernel's data"));
    let reset = hvc(psci::PSCI_SYSTEM_RESET, &[]);
    assert_eq!(m.step(2, vec![reset]), Step::Ran { vm: 1, index: 0 });
    assert!(b.is_resetting(), "the reset began");
    // vCPU 0 zeroes the RAM in its turns, then restarts the VM at its entry point.
    let mut steps = 0;
    while b.is_resetting() {
        assert_eq!(m.step(2, vec![]), Step::Ran { vm: 1, index: 0 });
        steps += 1;
        assert!(steps < 100, "the reset does not end");
    }
    let back = common::read_ram(b, marker.0, 21);
    assert_eq!(back, [0; 21], "the old kernel's data survived the reset");
    assert_eq!(b.stats.resets.load(Relaxed), 1);
    let seen = std::rc::Rc::new(std::cell::Cell::new(0));
    let at_entry = seen.clone();
    let first = wfx(true).after(move |regs, _| at_entry.set(regs.elr));
    assert_eq!(m.step(2, vec![first]), Step::Ran { vm: 1, index: 0 });
    assert_eq!(seen.get(), b.entry().raw(), "restarted at the entry point");
}

fn system_off_ends_each_vm_and_then_the_machine(m: &mut Machine) {
    let b = m.vm("b");
    let marker = addr::Ipa(RAM + (4 << 20));
    assert!(b.memory.write(marker, b"secret"));
    assert_eq!(m.step(2, vec![hvc(psci::PSCI_SYSTEM_OFF, &[])]), Step::Ran { vm: 1, index: 0 });
    assert!(b.is_stopped());
    // Its RAM is zeroed by its vCPU 0 before the stop is reported.
    while m.step(2, vec![]) != Step::Idled {}
    let back = common::read_ram(&b, marker.0, 6);
    assert_eq!(back, [0; 6], "a stopped VM's data outlived it");
    assert!(!common::all_stopped(), "VM a still runs");
    assert!(vmm::registry::get(1).is_none(), "b's life has ended");
    drop(b);

    assert_eq!(m.step(0, vec![hvc(psci::PSCI_SYSTEM_OFF, &[])]), Step::Ran { vm: 0, index: 0 });
    while m.step(0, vec![]) != Step::Idled {}
    // The power-off waits until no VM is left, each CPU letting go of what it held at its
    // next step: then the next look at the top of a CPU's loop powers off.
    m.idle(1);
    m.idle(1);
    assert!(vmm::registry::get(0).is_none(), "a's life has not ended");
    assert_eq!(vmm::registry::alive(), 0, "a VM outlived its life");
    assert!(common::all_stopped(), "the last VM's end did not end the machine");
}
