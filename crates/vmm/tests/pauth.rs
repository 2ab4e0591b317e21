//! Lazy pointer-authentication key switching (`emulate::pauth`) through the per-CPU loop on the
//! fake hardware: `a` and `b` share CPU 3 and each uses its own keys; a vCPU's first use after
//! it was loaded traps once and finds its own keys, never the other VM's.

mod common;

use common::{Machine, esr, sysreg, wfx};
use common::{SHARED_CPU as CPU, TWO_VMS_SHARING_A_CPU as CONFIG};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use vmm::arch::{PauthKeys, fake};
use vmm::cpu_loop::Step;

/// APIAKeyLo_EL1.
const APIAKEYLO_EL1: (u32, u32, u32, u32, u32) = (3, 0, 2, 1, 0);

/// A PAC instruction (PACIASP...) trapped: ESR_EL2.EC 0x09, ISS 0.
fn pac() -> fake::Trap {
    fake::Trap::sync(esr(0x09, 0), 0, 0)
}

fn keys(seed: u64) -> PauthKeys {
    let k = |n: u64| [seed << 8 | n, !(seed << 8 | n)];
    PauthKeys { apia: k(0), apib: k(1), apda: k(2), apdb: k(3), apga: k(4) }
}

fn who(m: &Machine, step: Step) -> &'static str {
    match step {
        Step::Ran { vm, .. } => m.names[vm],
        Step::Idled => panic!("CPU {CPU} idled with two runnable vCPUs"),
    }
}

/// One turn of whichever VM runs next on the CPU: it finds pointer authentication trapping
/// (its keys are not loaded), uses it by `first` (a PAC instruction or a key-register
/// read), which traps once and finds `expect` in the key registers; then it writes keys of its
/// own (`new`, as its kernel does at a context switch, without trapping now) and yields.
/// Returns the VM that ran.
fn turn(
    m: &mut Machine,
    first: fake::Trap,
    expect: fn(&str) -> PauthKeys,
    new: fn(&str) -> PauthKeys,
) -> &'static str {
    let seen = Rc::new(Cell::new((false, PauthKeys::default(), false)));
    let (at_first, at_end) = (seen.clone(), seen.clone());
    let elr = Rc::new(Cell::new(0));
    let elr_first = elr.clone();
    let first = first.after(move |regs, _| {
        elr_first.set(regs.elr);
        let trapping = fake::with(|f| f.pauth_trap[CPU]);
        at_first.set((trapping, PauthKeys::default(), false));
    });
    // The trapped instruction runs again: the guest's next trap comes from the same PC, with
    // the keys loaded and nothing trapping.
    let elr_end = elr.clone();
    let end = wfx(true).after(move |regs, _| {
        assert_eq!(regs.elr, elr_end.get(), "the trapped instruction was stepped over");
        let (trapping_before, ..) = at_end.get();
        let (loaded, trapping) = fake::with(|f| (f.pauth[CPU], f.pauth_trap[CPU]));
        at_end.set((trapping_before, loaded, trapping));
    });
    let step = m.step(CPU, vec![first, end]);
    let name = who(m, step);
    let (trapping_before, loaded, trapping_after) = seen.get();
    assert!(trapping_before, "{name}: pointer authentication did not trap after its load");
    assert!(!trapping_after, "{name}: still trapping once its keys were loaded");
    assert_eq!(loaded, expect(name), "{name}: keys in the registers at its first use");
    // What the guest writes to its key registers stays there until armhv puts it.
    fake::with(|f| f.pauth[CPU] = new(name));
    name
}

fn keys_of(name: &str) -> PauthKeys {
    keys(if name == "a" { 0xa } else { 0xb })
}

#[test]
fn each_vcpu_uses_its_own_keys_and_traps_once_per_load() {
    let mut m = common::install(CONFIG);
    // First turns: both find zeroed keys (their reset value) and install their own.
    let first = turn(&mut m, pac(), |_| PauthKeys::default(), keys_of);
    let second = turn(&mut m, sysreg(APIAKEYLO_EL1, 4, true, 0), |_| PauthKeys::default(), keys_of);
    assert_ne!(first, second, "a yield gave the CPU to no other vCPU");
    // From then on, each finds its own keys, whichever way it first uses them.
    for i in 0..6 {
        let use_ = if i % 2 == 0 { pac() } else { sysreg(APIAKEYLO_EL1, 4, true, 0) };
        turn(&mut m, use_, keys_of, keys_of);
    }
    // One trap per load, none per instruction: 8 loads.
    let switches: u64 = ["a", "b"].iter().map(|n| m.vm(n).stats.pauth_switches.load(Relaxed)).sum();
    assert_eq!(switches, 8);
    // A vCPU that runs without using pointer authentication leaves the keys trapping and
    // loses nothing: the other finds its own keys afterwards.
    let step = m.step(CPU, vec![wfx(true)]);
    let idle_user = who(&m, step);
    assert!(fake::with(|f| f.pauth_trap[CPU]), "{idle_user} loaded keys it did not use");
    let next = turn(&mut m, pac(), keys_of, keys_of);
    assert_ne!(next, idle_user);
    let again = turn(&mut m, pac(), keys_of, keys_of);
    assert_eq!(again, idle_user);
}
