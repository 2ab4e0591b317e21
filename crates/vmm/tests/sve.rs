//! Lazy FP/SIMD and SVE switching on the fake hardware, whose CPUs keep Z, P and FFR registers
//! (the V registers being the low 128 bits of the Z registers) and trap EL2's own accesses as
//! CPTR_EL2 says: VMs `a` and `b` share CPU 3 on a machine whose CPUs all support 128, 256
//! and 512-bit vectors (an A64FX's).

mod common;

use common::{Machine, esr, sysreg, wfx};
use common::{SHARED_CPU as CPU, TWO_VMS_SHARING_A_CPU as CONFIG};
use std::sync::atomic::Ordering::Relaxed;
use vmm::arch::fake::{self, FpRegs, Trap};
use vmm::arch::{SVE_MAX_VQ, SveState};
use vmm::cpu_loop::Step;
use vmm::emulate::fpsimd;

/// 128, 256 and 512 bits: bits 0, 1 and 3.
const A64FX: u16 = 0b1011;
const VQ: usize = 4;

const ID_AA64PFR0_EL1: (u32, u32, u32, u32, u32) = (3, 0, 0, 4, 0);
const ID_AA64ZFR0_EL1: (u32, u32, u32, u32, u32) = (3, 0, 0, 4, 4);

#[test]
fn lazy_sve_switching() {
    vector_length_policy();
    for _ in common::MPIDRS {
        fpsimd::record_cpu_sve(Some(A64FX));
    }
    assert_eq!(fpsimd::machine_vq(), VQ);
    let mut m = common::install(CONFIG);
    for vm in ["a", "b"] {
        let vm_vm = m.vm(vm);
        let vcpu = &vm_vm.vcpus[0].state.lock();
        let area = vcpu.sve.as_ref().expect("a VM on an SVE machine has an SVE save area");
        assert_eq!(area.capacity_vq(), VQ, "sized for the machine's vector length");
        assert_eq!(SveState::bytes(VQ), 32 * 64 + 17 * 8);
    }
    id_registers_show_sve(&mut m);
    switching(&mut m);
    a_machine_without_sve_everywhere_hides_it(&mut m);
}

/// KVM's rule: the longest length every CPU has, below which no CPU has one the others lack.
fn vector_length_policy() {
    assert_eq!(fpsimd::guest_vq(A64FX, A64FX), Some(4));
    assert_eq!(fpsimd::guest_vq(0xffff, 0xffff), Some(SVE_MAX_VQ), "QEMU's max: 2048 bits");
    assert_eq!(fpsimd::guest_vq(0b1, 0b1), Some(1));
    // An A64FX beside a CPU with every length up to 1024 bits: at 384 bits, ZCR_EL1.LEN = 2
    // would give 384 on one and 256 on the other, so 256 is the longest a guest may use.
    assert_eq!(fpsimd::guest_vq(A64FX & 0xff, A64FX | 0xff), Some(2));
    // Lengths beyond the common ones only some CPUs have do not matter below them.
    assert_eq!(fpsimd::guest_vq(0b1011, 0b1111_0000_1011), Some(4));
    assert_eq!(fpsimd::guest_vq(0, 0), None);
}

fn who(step: Step) -> usize {
    match step {
        Step::Ran { vm, .. } => vm,
        Step::Idled => panic!("CPU {CPU} idled with two runnable vCPUs"),
    }
}

/// Runs `script` in whichever of the two VMs the CPU picks next, which must be `vm`.
fn run(m: &mut Machine, vm: &str, script: Vec<Trap>) {
    let id = m.vm(vm).id;
    assert_eq!(who(m.step(CPU, script)), id, "CPU {CPU} did not run {vm}");
}

fn traps() -> (bool, bool) {
    fake::with(|f| (f.fp_trap[CPU], f.sve_trap[CPU]))
}

fn live() -> FpRegs {
    fake::with(|f| f.fpregs[CPU].clone())
}

/// A guest's first FP/SIMD instruction.
fn fp_use() -> Trap {
    Trap::sync(esr(0x07, 0), 0, 0)
}

/// A guest's SVE instruction (or ZCR_EL1 access) trapped by CPTR_EL2.TZ.
fn sve_use() -> Trap {
    Trap::sync(esr(0x19, 0), 0, 0)
}

/// A full SVE register file for pattern `k`, at `vq` quadwords (nothing beyond).
fn sve_pattern(k: u8, vq: usize) -> FpRegs {
    let mut r = FpRegs::default();
    for (n, z) in r.z.iter_mut().enumerate() {
        for (i, b) in z[..vq * 16].iter_mut().enumerate() {
            *b = k.wrapping_mul(31) ^ (n as u8).wrapping_mul(7) ^ (i as u8) ^ 0x80;
        }
    }
    for (n, p) in r.p.iter_mut().enumerate() {
        for (i, b) in p[..vq * 2].iter_mut().enumerate() {
            *b = k ^ (n as u8) << 3 ^ i as u8;
        }
    }
    r.ffr[0] = 0x0f;
    (r.fpsr, r.fpcr, r.zcr_el1) = (u64::from(k), u64::from(k) << 22, 1);
    r
}

/// `b`'s FP/SIMD-only state: its V registers, FPSR and FPCR.
fn fp_pattern(k: u8) -> FpRegs {
    let mut r = FpRegs::default();
    for n in 0..32 {
        r.set_v(n, u128::from(k) << 120 | n as u128);
    }
    (r.fpsr, r.fpcr) = (u64::from(k), 0);
    r
}

fn switching(m: &mut Machine) {
    let a_sve = sve_pattern(0xa, VQ);
    let b_fp = fp_pattern(0xb);
    // Whichever runs first is `a` from here on: both are fresh.
    let first = who(m.step(CPU, vec![wfx(true)]));
    let (a, b) = if first == m.vm("a").id { ("a", "b") } else { ("b", "a") };

    // a: FP/SIMD first (its V registers), then SVE: its V registers become the low halves of
    // its Z registers, the rest zero; then it fills everything and picks 256 bits.
    let a_v = fp_pattern(0x3);
    let a_v2 = a_v.clone();
    let write = a_sve.clone();
    run(
        m,
        b,
        vec![wfx(true)], // the other one yields once: the scheduler alternates
    );
    run(
        m,
        a,
        vec![
            fp_use(),
            sve_use().after(move |_, _| {
                assert_eq!(traps(), (false, true), "an FP-only vCPU still traps SVE");
                fake::with(|f| f.fpregs[CPU] = a_v2);
            }),
            wfx(true).after(move |_, _| {
                assert_eq!(traps(), (false, false), "a vCPU using SVE traps nothing");
                let r = live();
                for n in 0..32 {
                    assert_eq!(r.v(n), a_v.v(n), "V{n} lost on the way to SVE");
                    assert!(r.z[n][16..].iter().all(|&b| b == 0), "Z{n} not cleared above V{n}");
                }
                assert_eq!(r.zcr_el1, 0xf, "ZCR_EL1 starts at the longest length");
                fake::with(|f| {
                    assert_eq!(f.zcr_el2_len[CPU], Some(VQ as u64 - 1), "ZCR_EL2.LEN");
                    f.fpregs[CPU] = write;
                });
            }),
        ],
    );
    let va = &m.vm(a);
    assert_eq!(va.stats.fp_switches.load(Relaxed), 1);
    assert_eq!(va.stats.sve_switches.load(Relaxed), 1);
    assert!(va.vcpus[0].state.lock().sve.as_ref().unwrap().in_use);

    // b, FP/SIMD only: a's SVE state is saved whole, b's V registers loaded.
    let b_write = b_fp.clone();
    run(
        m,
        b,
        vec![
            fp_use().after(|_, _| assert_eq!(traps(), (true, true), "not the owner: both trap")),
            wfx(true).after(move |_, _| {
                assert_eq!(traps(), (false, true));
                fake::with(|f| f.fpregs[CPU] = b_write);
            }),
        ],
    );
    {
        let vm_a = m.vm(a);
        let vcpu = &vm_a.vcpus[0].state.lock();
        let area = vcpu.sve.as_ref().unwrap();
        for n in 0..32 {
            for j in 0..VQ {
                let want = u128::from_le_bytes(a_sve.z[n][j * 16..j * 16 + 16].try_into().unwrap());
                assert_eq!(area.regs()[n * VQ + j], want, "a's Z{n} quadword {j} saved");
            }
        }
        assert_eq!(area.ctrl, [a_sve.fpsr, a_sve.fpcr, a_sve.zcr_el1]);
    }

    // a again: its first instruction is an SVE one (TZ is checked before TFP): it gets its
    // whole SVE state back, ZCR_EL1 included, and b's V registers are saved.
    let a_back = a_sve.clone();
    run(
        m,
        a,
        vec![
            sve_use().after(|_, _| assert_eq!(traps(), (true, true))),
            wfx(true).after(move |_, _| {
                assert_eq!(traps(), (false, false));
                assert!(live() == a_back, "a's SVE registers were not restored as it left them");
            }),
        ],
    );
    assert_eq!(m.vm(a).stats.sve_switches.load(Relaxed), 2);

    // b: FP/SIMD again, then its first SVE instruction. What it then reads in its Z, P and
    // FFR registers is its V registers and zeros: nothing of a's.
    let b_v = b_fp.clone();
    run(
        m,
        b,
        vec![
            fp_use(),
            sve_use().after(move |_, _| {
                assert_eq!(traps(), (false, true));
                let r = live();
                for n in 0..32 {
                    assert_eq!(r.v(n), b_v.v(n), "b's V{n}");
                }
            }),
            wfx(true).after(move |_, _| {
                let r = live();
                let mut want = b_fp.clone();
                want.zcr_el1 = 0xf;
                assert!(r == want, "b's first SVE use found more than its own V registers");
            }),
        ],
    );
    let vb = &m.vm(b);
    assert_eq!(vb.stats.fp_switches.load(Relaxed), 2);
    assert_eq!(vb.stats.sve_switches.load(Relaxed), 1);

    // ZCR_EL1 is each vCPU's own: a gets its 256 bits (LEN 1) back, b's is saved.
    run(m, a, vec![sve_use(), wfx(true)]);
    assert_eq!(live().zcr_el1, 1);
    let vm_b = m.vm(b);
    let vcpu = &vm_b.vcpus[0].state.lock();
    assert_eq!(vcpu.sve.as_ref().unwrap().ctrl[2], 0xf, "b's ZCR_EL1");
}

fn id_registers_show_sve(m: &mut Machine) {
    let script =
        vec![sysreg(ID_AA64PFR0_EL1, 5, true, 0), sysreg(ID_AA64ZFR0_EL1, 6, true, 0), wfx(true)];
    let vm = who(m.step(CPU, script));
    let regs = &m.vm_by_id(vm).vcpus[0].state.lock().regs.clone();
    assert_eq!(regs.x[5] >> 32 & 0xf, 1, "ID_AA64PFR0_EL1.SVE");
    // The hardware's, in the fields the allow-list names (trap::id_regs::AA64ZFR0).
    assert_eq!(regs.x[6], 0x0110_1101_0011_0011, "ID_AA64ZFR0_EL1: the hardware's");
}

/// A CPU without SVE comes up (a heterogeneous machine): guests are told of no SVE, and an
/// SVE instruction is UNDEFINED.
fn a_machine_without_sve_everywhere_hides_it(m: &mut Machine) {
    fpsimd::record_cpu_sve(None);
    assert_eq!(fpsimd::machine_vq(), 0);
    let script = vec![
        sysreg(ID_AA64PFR0_EL1, 5, true, 0),
        sysreg(ID_AA64ZFR0_EL1, 6, true, 0),
        sve_use(),
        wfx(true),
    ];
    let vm = who(m.step(CPU, script));
    let regs = &m.vm_by_id(vm).vcpus[0].state.lock().regs.clone();
    assert_eq!(regs.x[5] >> 32 & 0xf, 0, "ID_AA64PFR0_EL1.SVE");
    assert_eq!(regs.x[6], 0, "ID_AA64ZFR0_EL1");
    assert_eq!(m.vm_by_id(vm).stats.undef_injected.load(Relaxed), 1, "SVE is UNDEFINED");
    let (_, sve_trap) = traps();
    assert!(sve_trap, "SVE traps for good");
}
