//! Steps run on CPU 0 alone: `timer=N`, `wfi=MS`, `eoi=N` (interrupts) and
//! `fp=K` (FP/SIMD state across hypervisor yields).

use baremetal::cpu::{MPIDR_AFF_MASK, mpidr};
use baremetal::psci::{self, Conduit};
use guest_abi::hypercall::ARMHV_YIELD;

use crate::timer::{self, Timer};
use crate::{gic, println, time};

const TIMER_PERIOD_MS: u64 = 10;
/// `fp=K`: yields, each followed by ~1 ms of spinning.
const FP_ROUNDS: u64 = 200;

/// Sets up the GIC for a step, or says the step cannot run.
pub fn need_gic(step: &str) -> bool {
    let ok = gic::init_primary();
    if !ok {
        println!("testguest: {step} needs a GIC");
    }
    ok
}

/// `<delta> exits` between two ARMHV_VM_EXITS readings, or `exits unknown`.
pub struct Exits(pub Option<u64>, pub Option<u64>);

impl core::fmt::Display for Exits {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        match (self.0, self.1) {
            (Some(before), Some(after)) => write!(f, "{} exits", after.wrapping_sub(before)),
            _ => f.write_str("exits unknown"),
        }
    }
}

/// `timer=N` / `ptimer=N`: N interrupts of the virtual / physical timer 10 ms
/// apart, re-armed by the handler; reports the time from arming to the N-th.
pub fn timer(which: Timer, n: u64) {
    let name = match which {
        Timer::Virtual => "timer",
        Timer::Physical => "ptimer",
    };
    if !need_gic(name) {
        return;
    }
    let expected = n * TIMER_PERIOD_MS;
    if n == 0 {
        println!("testguest: {name} 0 ticks in 0 ms (expected 0)");
        return;
    }
    timer::select(which);
    let period = time::ms_to_ticks(TIMER_PERIOD_MS);
    let start = timer::start_periodic(period, n);
    // The ticks themselves wake the wait; give up on a timer at half speed.
    let deadline = time::counter() + period * (2 * n + 10);
    let ok = gic::wait_for(Some(deadline), || timer::ticks() >= n);
    timer::stop();
    timer::select(Timer::Virtual);
    if ok {
        let ms = time::ticks_to_ms(timer::last() - start);
        println!("testguest: {name} {n} ticks in {ms} ms (expected {expected})");
        let (max, sum) = timer::latency();
        let (max, mean) = (time::ticks_to_us(max), time::ticks_to_us(sum / n));
        println!("testguest: {name} latency max {max} us mean {mean} us");
    } else {
        println!("testguest: {name} timed out after {} of {n} ticks", timer::ticks());
    }
}

/// `count=MS`: counts loop iterations for MS ms of the counter, the guest's own measure of how
/// much CPU it got (the counter runs whether or not the vCPU does).
pub fn count(ms: u64) {
    let end = time::counter() + time::ms_to_ticks(ms);
    let mut n = 0u64;
    while !time::passed(end) {
        n += 1;
    }
    println!("testguest: count {n} in {ms} ms");
}

/// `wfi=MS`: arms the virtual timer MS ms ahead and sleeps in `wfi` until it fires.
pub fn wfi(ms: u64) {
    if !need_gic("wfi") {
        return;
    }
    let before = psci::vm_exits();
    let start = timer::start_oneshot(time::ms_to_ticks(ms));
    // No watchdog: the timer is the only thing that can end this wait.
    gic::wait_for(None, || timer::ticks() >= 1);
    let after = psci::vm_exits();
    let slept = time::ticks_to_ms(timer::last() - start);
    println!("testguest: wfi woke after {slept} ms, {}", Exits(before, after));
}

/// `eoi=N`: N SGIs to this CPU, one at a time, each acknowledged and completed
/// by the handler; counts the VM exits they cost (under armhv only the SGI
/// write should trap, never the acknowledge or the EOI).
pub fn eoi(n: u64) {
    if !need_gic("eoi") {
        return;
    }
    let me = mpidr() & MPIDR_AFF_MASK;
    let before_count = gic::count(0, gic::SGI_SELF);
    let handled = || gic::count(0, gic::SGI_SELF) - before_count;
    // One watchdog for the whole step: programming the timer traps nothing,
    // and it fires only if an SGI goes missing.
    let deadline = time::counter() + time::ms_to_ticks(1000 + n);
    timer::arm_at(deadline);
    let before = psci::vm_exits();
    for i in 1..=n {
        gic::send_sgi(gic::SGI_SELF, me);
        if !gic::wait_for(Some(deadline), || handled() >= i) {
            break;
        }
    }
    let after = psci::vm_exits();
    timer::stop();
    println!("testguest: eoi {} interrupts, {}", handled(), Exits(before, after));
}

/// The value `fp=K` puts in v<reg>: different in every register, both
/// halves and for every K.
fn fp_pattern(k: u64, reg: usize) -> u128 {
    let seed = (k + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let lo = seed ^ reg as u64;
    let hi = seed.rotate_left(32) ^ ((reg as u64) << 56);
    (u128::from(hi) << 64) | u128::from(lo)
}

/// The 32 SIMD registers as `ldp`/`stp` of q-registers see them in memory.
#[repr(C, align(16))]
struct VRegs([u128; 32]);

/// `fp=K`: fills v0-v31, yields to the hypervisor and spins ~1 ms, 200
/// times, then checks every register. The whole sequence is one `asm!`
/// block, so no compiler-generated code can touch the registers in between.
pub fn fp(k: u64) {
    let mut expected = VRegs([0; 32]);
    for (reg, value) in expected.0.iter_mut().enumerate() {
        *value = fp_pattern(k, reg);
    }
    let mut found = VRegs([0; 32]);
    let smc = u64::from(psci::conduit() == Conduit::Smc);
    // SAFETY: reads `expected` and writes `found` (both 512 bytes, 16-byte
    // aligned); the hypercall is ARMHV_YIELD, which changes no memory (or
    // NOT_SUPPORTED). Every register the SMCCC call or the loop may change
    // is declared: clobber_abi("C") covers x0-x17, x30 and v0-v31.
    unsafe {
        core::arch::asm!(
            "ldp q0, q1, [x20, #0]",
            "ldp q2, q3, [x20, #32]",
            "ldp q4, q5, [x20, #64]",
            "ldp q6, q7, [x20, #96]",
            "ldp q8, q9, [x20, #128]",
            "ldp q10, q11, [x20, #160]",
            "ldp q12, q13, [x20, #192]",
            "ldp q14, q15, [x20, #224]",
            "ldp q16, q17, [x20, #256]",
            "ldp q18, q19, [x20, #288]",
            "ldp q20, q21, [x20, #320]",
            "ldp q22, q23, [x20, #352]",
            "ldp q24, q25, [x20, #384]",
            "ldp q26, q27, [x20, #416]",
            "ldp q28, q29, [x20, #448]",
            "ldp q30, q31, [x20, #480]",
            // Yield through the PSCI conduit...
            "2:",
            "mov x0, x23",
            "cbnz x22, 3f",
            "hvc #0",
            "b 4f",
            "3:",
            "smc #0",
            // ...then spin until the counter has advanced x21 ticks.
            "4:",
            "isb",
            "mrs x27, cntvct_el0",
            "add x27, x27, x21",
            "5:",
            "isb",
            "mrs x28, cntvct_el0",
            "cmp x28, x27",
            "b.lo 5b",
            "subs x24, x24, #1",
            "b.ne 2b",
            "stp q0, q1, [x25, #0]",
            "stp q2, q3, [x25, #32]",
            "stp q4, q5, [x25, #64]",
            "stp q6, q7, [x25, #96]",
            "stp q8, q9, [x25, #128]",
            "stp q10, q11, [x25, #160]",
            "stp q12, q13, [x25, #192]",
            "stp q14, q15, [x25, #224]",
            "stp q16, q17, [x25, #256]",
            "stp q18, q19, [x25, #288]",
            "stp q20, q21, [x25, #320]",
            "stp q22, q23, [x25, #352]",
            "stp q24, q25, [x25, #384]",
            "stp q26, q27, [x25, #416]",
            "stp q28, q29, [x25, #448]",
            "stp q30, q31, [x25, #480]",
            in("x20") expected.0.as_ptr(),
            in("x21") time::ms_to_ticks(1),
            in("x22") smc,
            in("x23") u64::from(ARMHV_YIELD),
            inout("x24") FP_ROUNDS => _,
            in("x25") found.0.as_mut_ptr(),
            out("x27") _,
            out("x28") _,
            clobber_abi("C"),
            options(nostack),
        );
    }
    let bad = expected.0.iter().zip(&found.0).position(|(e, f)| e != f);
    match bad {
        None => println!("testguest: fp pattern {k} intact"),
        Some(reg) => {
            println!("testguest: fp pattern {k} corrupted in v{reg}: {:#x}", found.0[reg])
        }
    }
}
