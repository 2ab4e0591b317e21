//! Self-hosted debug switched lazily per vCPU (`emulate::debug`), through the per-CPU loop on
//! the fake hardware: VMs `x` and `y` share CPU 0, yielding to each other (WFE).

mod common;

use common::{Machine, sysreg, wfx};
use std::sync::atomic::Ordering::Relaxed;
use vmm::arch::{DebugRegs, MDCR_EL2_TDA, MDSCR_EL1_MDE, fake};
use vmm::cpu_loop::Step;

const CONFIG: &str = r#"
[[vm]]
name = "x"
vcpus = 1
cpu_affinity = [0]
memory_size = "16M"
kernel = "@testguest"

[[vm]]
name = "y"
vcpus = 1
cpu_affinity = [0]
memory_size = "16M"
kernel = "@testguest"
"#;

const CPU: usize = 0;
const DBGBCR0_EL1: (u32, u32, u32, u32, u32) = (2, 0, 0, 0, 5);
const DBGBCR7_EL1: (u32, u32, u32, u32, u32) = (2, 0, 0, 7, 5);
const MDSCR_EL1: (u32, u32, u32, u32, u32) = (2, 0, 0, 2, 2);
const OSLSR_EL1: (u32, u32, u32, u32, u32) = (2, 0, 1, 1, 4);
const ID_AA64MMFR0_EL1: (u32, u32, u32, u32, u32) = (3, 0, 0, 7, 0);
const BCR_ENABLED: u64 = 0x1e7;
const SPSR_SS: u64 = 1 << 21;

/// One step of the CPU with `traps` for whichever VM it runs: that VM's name.
fn run(m: &mut Machine, traps: Vec<fake::Trap>) -> String {
    match m.step(CPU, traps) {
        Step::Ran { vm, .. } => m.names[vm].to_string(),
        Step::Idled => panic!("CPU {CPU} idled with two runnable vCPUs"),
    }
}

fn tda() -> bool {
    fake::with(|f| f.mdcr[CPU] & MDCR_EL2_TDA != 0)
}

fn live_bcr0() -> u64 {
    fake::with(|f| f.debug[CPU].bcr[0])
}

fn saved(m: &Machine, vm: &str) -> (DebugRegs, bool) {
    let vm = m.vm(vm);
    let vcpu = &vm.vcpus[0].state.lock();
    (vcpu.debug.clone(), vcpu.debug_live)
}

#[test]
fn debug_registers_are_per_vcpu_and_loaded_lazily() {
    let mut m = common::install(CONFIG);

    // Whoever runs first enters with its accesses trapping; its first one loads its (zero)
    // registers, clears TDA and runs again, now on the hardware: the guest's own write of
    // DBGBCR0 and MDSCR_EL1.MDE. Then it yields.
    let restores = fake::with(|f| {
        f.debug[CPU].bcr[0] = 0xdead; // whatever an earlier owner left
        f.debug_restores
    });
    let at_entry = std::rc::Rc::new(std::cell::Cell::new((false, 0)));
    let seen = at_entry.clone();
    let first_access = sysreg(DBGBCR0_EL1, 1, false, BCR_ENABLED).after(move |regs, _| {
        seen.set((tda(), regs.elr));
        regs.x[1] = BCR_ENABLED;
    });
    let pc = std::rc::Rc::new(std::cell::Cell::new((0, 0)));
    let pcs = pc.clone();
    let executes = wfx(true).after(move |regs, _| {
        assert!(!tda(), "the access ran again with TDA set");
        pcs.set((regs.elr, live_bcr0()));
        fake::with(|f| {
            f.debug[CPU].bcr[0] = BCR_ENABLED;
            f.el1[CPU].mdscr_el1 |= MDSCR_EL1_MDE;
        });
    });
    let first = run(&mut m, vec![first_access, executes]);
    let (tda_at_entry, entry_pc) = at_entry.get();
    assert!(tda_at_entry, "{first} entered without TDA: its accesses would not trap");
    let (re_executed_at, loaded_bcr0) = pc.get();
    assert_eq!(re_executed_at, entry_pc, "the trapped access was skipped, not run again");
    assert_eq!(loaded_bcr0, 0, "{first} saw what an earlier owner left in DBGBCR0");
    assert_eq!(fake::with(|f| f.debug_restores), restores + 1);
    assert_eq!(m.vm(&first).stats.debug_loads.load(Relaxed), 1);

    // The other VM runs: the first one's registers are saved; the other enters with TDA and
    // without MDE, so what the hardware still holds can neither fire nor be read in it. Its
    // read of MDSCR_EL1 loads its own registers (zero) over them.
    let entered = std::rc::Rc::new(std::cell::Cell::new((false, 0)));
    let seen = entered.clone();
    let read = sysreg(MDSCR_EL1, 2, true, 0).after(move |_, _| {
        let mde = fake::with(|f| f.el1[CPU].mdscr_el1) & MDSCR_EL1_MDE;
        seen.set((tda(), mde));
    });
    let own = wfx(true).after(|_, _| assert_eq!(live_bcr0(), 0, "the other VM's breakpoint"));
    let second = run(&mut m, vec![read, own]);
    assert_ne!(first, second, "a yield gave the CPU to no other vCPU");
    assert_eq!(entered.get(), (true, 0), "{second} entered with TDA clear or MDE set");
    let (regs, live) = saved(&m, &first);
    assert_eq!((regs.bcr[0], live), (BCR_ENABLED, false), "{first}'s breakpoint was not saved");
    assert_eq!(m.vm(&second).stats.debug_loads.load(Relaxed), 1);

    // The first one comes back with MDE set: its breakpoint is loaded at entry, untrapped.
    let tda_again = std::rc::Rc::new(std::cell::Cell::new(true));
    let seen = tda_again.clone();
    let back = wfx(true).after(move |_, _| seen.set(tda() || live_bcr0() != BCR_ENABLED));
    assert_eq!(run(&mut m, vec![back]), first);
    assert!(!tda_again.get(), "{first}'s armed breakpoint was not in place at its entry");
    assert_eq!(m.vm(&first).stats.debug_loads.load(Relaxed), 1, "a second trap for it");

    // The second one comes back without MDE: trapping again, its registers saved.
    let back = wfx(true).after(|_, _| assert!(tda(), "entered with its registers reachable"));
    assert_eq!(run(&mut m, vec![back]), second);
    assert_eq!(saved(&m, &first).0.bcr[0], BCR_ENABLED);

    // Slots beyond the CPU's (the fake has 2 breakpoints) are UNDEFINED; the OS lock reads as
    // absent; a step over an emulated instruction ends the software step there (SPSR.SS).
    fake::with(|f| f.injected[CPU] = None);
    let undefined = sysreg(DBGBCR7_EL1, 1, true, 0);
    let oslsr = sysreg(OSLSR_EL1, 3, true, 0).after(|regs, _| regs.x[3] = 0xff);
    let stepped = sysreg(ID_AA64MMFR0_EL1, 4, true, 0).after(|regs, _| regs.spsr |= SPSR_SS);
    let check = std::rc::Rc::new(std::cell::Cell::new((0, 0)));
    let seen = check.clone();
    let end = wfx(true).after(move |regs, _| seen.set((regs.x[3], regs.spsr & SPSR_SS)));
    let who = run(&mut m, vec![undefined, oslsr, stepped, end]);
    let injected = fake::with(|f| f.injected[CPU]);
    assert_eq!(injected.map(|(esr, ..)| esr >> 26), Some(0), "DBGBCR7 is not UNDEFINED");
    assert_eq!(check.get(), (0, 0), "OSLSR_EL1 / PSTATE.SS after an emulated instruction");
    assert_eq!(m.vm(&who).stats.undef_injected.load(Relaxed), 1);
}
