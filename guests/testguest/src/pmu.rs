//! `pmu=R`: the PMU counts this guest's own work, and its overflow interrupt arrives.
//!
//! A window of R rounds, each a loop of `LOOP` iterations (2 instructions each) and an
//! ARMHV_YIELD through the PSCI conduit (another VM sharing the CPU runs then), is counted
//! with event counter 0 (INST_RETIRED), event counter 1 (CPU_CYCLES) and the cycle counter,
//! each asking for EL2 too (NSH set: armhv must not let it). Lines:
//! `testguest: pmu counters <n> instructions <i> cycles-event <e> cycles <c> expected <x> others-ran <k> elapsed-ticks <t>`:
//! <x> is the window's own instruction count, <k> how many yields let another vCPU run,
//! <t> the virtual counter's advance over the window (which counts everyone's time).
//! Then counter 0 is set 20,000 cycles short of overflowing with its interrupt enabled,
//! and the guest spins with IRQs on: `testguest: pmu overflow interrupts <k> intid <n>
//! ovs <hex>` (<ovs>: the overflow flags the handler found), or `testguest: pmu overflow
//! timed out`. `testguest: pmu absent` without an architected PMU (ID_AA64DFR0_EL1.PMUVer)
//! or without its device-tree node (needed for the interrupt).

use baremetal::console::Global;
use baremetal::psci::{self, Conduit};
use baremetal::{cpu, println, time};
use core::arch::asm;
use guest_abi::hypercall::ARMHV_YIELD;

use crate::gic;

/// Iterations of the counted loop per round.
const LOOP: u64 = 5_000;
/// Instructions of one round besides the loop: `mov` of the count, `mov x0`, `mov x1`,
/// `cbnz`, `hvc`, `b`, `add`, `subs`, `b.ne`.
const ROUND_EXTRA: u64 = 9;

/// Event numbers (Arm ARM, "PMU events"): the two QEMU counts under `-icount`.
const INST_RETIRED: u64 = 0x08;
const CPU_CYCLES: u64 = 0x11;
/// PMEVTYPER<n>_EL0.NSH / PMCCFILTR_EL0.NSH: count at EL2 as well.
const NSH: u64 = 1 << 27;
const PMCR_E: u64 = 1 << 0;
const PMCR_P: u64 = 1 << 1;
const PMCR_C: u64 = 1 << 2;
const PMCR_LC: u64 = 1 << 6;
const CYCLE_COUNTER: u64 = 1 << 31;

/// The overflow interrupt's INTID, from the device tree's `arm,armv8-pmuv3` node.
static INTID: Global<Option<u32>> = Global::new(None);
/// Overflow flags the handler found and cleared, accumulated.
static OVERFLOWS: Global<u64> = Global::new(0);

pub fn set_intid(intid: u32) {
    INTID.set(Some(intid));
}

pub fn intid() -> Option<u32> {
    INTID.get()
}

macro_rules! mrs {
    ($reg:literal) => {{
        let v: u64;
        // SAFETY: reading a PMU or ID register has no side effects.
        unsafe { asm!(concat!("isb\nmrs {}, ", $reg), out(reg) v, options(nomem, nostack)) };
        v
    }};
}

macro_rules! msr {
    ($reg:literal, $v:expr) => {{
        let v: u64 = $v;
        // SAFETY: the PMU's registers change only what it counts and interrupts.
        unsafe { asm!(concat!("msr ", $reg, ", {}\nisb"), in(reg) v, options(nomem, nostack)) };
    }};
}

/// The IRQ handler's part: note and clear the overflow, and stop its interrupt.
pub fn on_interrupt() {
    let ovs = mrs!("pmovsset_el0");
    msr!("pmovsclr_el0", ovs);
    msr!("pmintenclr_el1", ovs);
    OVERFLOWS.set(OVERFLOWS.get() | ovs);
}

pub fn step(rounds: u64) {
    let ver = (mrs!("id_aa64dfr0_el1") >> 8) & 0xf;
    if ver == 0 || ver == 0xf || intid().is_none() {
        println!("testguest: pmu absent");
        return;
    }
    if !gic::init_primary() {
        println!("testguest: pmu needs a GIC");
        return;
    }
    let counters = (mrs!("pmcr_el0") >> 11) & 0x1f;
    if counters < 2 {
        println!("testguest: pmu counters {counters}: needs 2");
        return;
    }
    msr!("pmcntenclr_el0", u64::from(u32::MAX));
    msr!("pmintenclr_el1", u64::from(u32::MAX));
    msr!("pmovsclr_el0", u64::from(u32::MAX));
    msr!("pmevtyper0_el0", INST_RETIRED | NSH);
    msr!("pmevtyper1_el0", CPU_CYCLES | NSH);
    msr!("pmccfiltr_el0", NSH);
    msr!("pmcr_el0", PMCR_E | PMCR_P | PMCR_C | PMCR_LC);
    msr!("pmcntenset_el0", 0b11 | CYCLE_COUNTER);

    let smc = u64::from(psci::conduit() == Conduit::Smc);
    let (i0, i1, e0, e1, c0, c1, t0, t1, others): (u64, u64, u64, u64, u64, u64, u64, u64, u64);
    // SAFETY: reads counters and makes ARMHV_YIELD calls, which change no memory (or return
    // NOT_SUPPORTED); every register they or the loop change is declared (the calls may
    // change x0-x17: the loop's own registers are x20 and up).
    unsafe {
        asm!(
            "isb",
            "mrs x26, cntvct_el0",
            "mrs x27, pmccntr_el0",
            "mrs x28, pmevcntr1_el0",
            "mrs x20, pmevcntr0_el0",
            "2:",
            "mov x9, x21",
            "3:",
            "subs x9, x9, #1",
            "b.ne 3b",
            "mov x0, x23",
            "mov x1, xzr",
            "cbnz x22, 4f",
            "hvc #0",
            "b 5f",
            "4:",
            "smc #0",
            "5:",
            "add x25, x25, x1",
            "subs x24, x24, #1",
            "b.ne 2b",
            "mrs x10, pmevcntr0_el0",
            "isb",
            "mrs x11, pmevcntr1_el0",
            "mrs x12, pmccntr_el0",
            "mrs x13, cntvct_el0",
            in("x21") LOOP,
            in("x22") smc,
            in("x23") u64::from(ARMHV_YIELD),
            inout("x24") rounds => _,
            inout("x25") 0u64 => others,
            out("x26") t0,
            out("x27") c0,
            out("x28") e0,
            out("x20") i0,
            lateout("x10") i1,
            lateout("x11") e1,
            lateout("x12") c1,
            lateout("x13") t1,
            clobber_abi("C"),
            options(nostack),
        );
    }
    let expected = rounds * (2 * LOOP + ROUND_EXTRA);
    println!(
        "testguest: pmu counters {counters} instructions {} cycles-event {} cycles {} expected {expected} others-ran {others} elapsed-ticks {}",
        i1.wrapping_sub(i0) & u64::from(u32::MAX),
        e1.wrapping_sub(e0) & u64::from(u32::MAX),
        c1.wrapping_sub(c0),
        t1 - t0,
    );
    overflow();
}

/// Counter 0, counting cycles (QEMU counts instructions only under `-icount`), a little short
/// of its 32-bit overflow, its interrupt on: the PPI must arrive.
fn overflow() {
    let intid = intid().unwrap_or(0);
    let before = gic::count(0, intid);
    OVERFLOWS.set(0);
    msr!("pmcntenclr_el0", u64::from(u32::MAX));
    msr!("pmovsclr_el0", u64::from(u32::MAX));
    msr!("pmevtyper0_el0", CPU_CYCLES);
    msr!("pmevcntr0_el0", u64::from(u32::MAX) - 20_000);
    msr!("pmintenset_el1", 1);
    msr!("pmcntenset_el0", 1);
    let deadline = time::counter() + time::ms_to_ticks(1000);
    cpu::irqs_on();
    while gic::count(0, intid) == before && !time::passed(deadline) {
        core::hint::spin_loop();
    }
    cpu::irqs_off();
    msr!("pmcntenclr_el0", u64::from(u32::MAX));
    msr!("pmintenclr_el1", u64::from(u32::MAX));
    let taken = gic::count(0, intid) - before;
    if taken == 0 {
        println!("testguest: pmu overflow timed out");
    } else {
        println!(
            "testguest: pmu overflow interrupts {taken} intid {intid} ovs {:#x}",
            OVERFLOWS.get()
        );
    }
}
