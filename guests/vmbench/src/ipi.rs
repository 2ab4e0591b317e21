//! `ipi`: virtual IPI latency between two vCPUs, both running VM code.
//!
//! CPU 1 spins (`yield`) with IRQs unmasked; its IRQ handler stamps CNTVCT_EL0
//! first thing. CPU 0 stamps CNTVCT_EL0, writes ICC_SGI1R_EL1 (GICv2:
//! GICD_SGIR) and waits for the handler's stamp; a sample is the difference.
//! Both stamps come from the virtual counter of one VM (one CNTVOFF), so they
//! compare across CPUs.

use baremetal::console::Global;
use baremetal::psci::{self, AFFINITY_OFF, PSCI_CPU_OFF};
use baremetal::{cpu, gic, println, time};

use crate::bench::{self, Runner, WAIT_MS};
use crate::clock::{Clock, Cntvct};
use crate::{Ctx, irq, skip};

/// SGI CPU 0 sends to CPU 1.
const SGI_IPI: u32 = 1;
/// Stack slot (PSCI CPU_ON context id) of the answering CPU.
const SLOT: usize = 1;

/// Set by CPU 1 once its GIC interface takes SGIs.
static READY: Global<bool> = Global::new(false);
/// Set by CPU 0 to end CPU 1's loop.
static STOP: Global<bool> = Global::new(false);

/// Waits, yielding the CPU, until `done()`; false after WAIT_MS.
fn wait(done: impl Fn() -> bool) -> bool {
    let deadline = time::counter() + time::ms_to_ticks(WAIT_MS);
    while !done() {
        if time::passed(deadline) {
            return false;
        }
        cpu::yield_now();
    }
    true
}

pub fn ipi(r: &mut Runner, ctx: &Ctx) {
    const NAME: &str = "ipi";
    let me = cpu::affinity();
    let Some(&target) = ctx.cpus.iter().find(|&&c| c != me) else {
        return skip(NAME, format_args!("needs 2 cpus, have {}", ctx.cpus.len()));
    };
    if !gic::present() {
        return skip(NAME, format_args!("no GIC in the device tree"));
    }
    irq::use_clock(false);
    READY.set(false);
    STOP.set(false);
    let status = psci::cpu_on(target, SLOT);
    if status != 0 {
        return skip(NAME, format_args!("PSCI CPU_ON of cpu {target:#x} failed ({status})"));
    }
    if !wait(|| READY.get()) {
        panic!("ipi: cpu {target:#x} did not come up");
    }

    let mut i = 0;
    let samples = r.collect(|| {
        i += 1;
        let count = irq::count();
        let t0 = Cntvct::now();
        gic::send_sgi(SGI_IPI, target);
        if !wait(|| irq::count() != count) {
            panic!("ipi: no interrupt on cpu {target:#x} for IPI {i}");
        }
        irq::stamp().saturating_sub(t0)
    });
    bench::report(NAME, Cntvct::UNIT, samples, 0, format_args!(""));

    STOP.set(true);
    cpu::dsb_sev();
    let state = psci::wait_off(target, WAIT_MS);
    if state != AFFINITY_OFF {
        panic!("ipi: cpu {target:#x} still on after CPU_OFF ({state})");
    }
}

/// CPU 1: takes SGIs (the handler stamps them) while spinning, until STOP.
pub fn secondary(_slot: usize) -> ! {
    gic::init_cpu(&[]);
    READY.set(true);
    cpu::dsb_sev();
    cpu::irqs_on();
    while !STOP.get() {
        cpu::yield_now();
    }
    cpu::irqs_off();
    psci::call(PSCI_CPU_OFF, 0, 0, 0);
    println!("vmbench: CPU_OFF returned");
    psci::halt()
}
