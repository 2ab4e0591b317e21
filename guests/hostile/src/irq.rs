//! Interrupts and CPU time: `sgi-storm=MS` (SGIs to all its vCPUs, to all
//! but itself and to vCPUs that do not exist, as fast as it can: ICC_SGI1R_EL1
//! writes on a GICv3, GICD_SGIR writes on a GICv2),
//! `spin-masked=MS` (every exception masked, not one exit, for MS ms) and
//! `abort-loop=MS` (a vCPU whose vectors are nowhere takes an exception);
//! the secondary vCPUs' tasks and the IRQ handler.
//!
//! Lines: `hostile: sgi-storm <pattern> -> absorbed <sent> sent, <taken> taken in all, ...`,
//! `hostile: spin-masked <ms>ms -> absorbed preempted <n> times, longest gap <ms> ms`,
//! `hostile: abort-loop vcpu <mpidr> <ms>ms -> absorbed <n> exits of its VM`, each
//! preceded by `hostile: <attack> <ms>ms starting`.
//! What matters is elsewhere: the healthy VM's heartbeat keeps its pace.

use core::arch::{asm, global_asm};

use baremetal::boot::MAX_CPUS;
use baremetal::console::Global;
use baremetal::cpu::{self, dsb_sev, wfe};
use baremetal::gic::{self, Version, v2};
use baremetal::psci::{self, AFFINITY_OFF};
use baremetal::time;

use crate::Vm;
use crate::report;

/// What a secondary vCPU does once started (by slot).
pub const TASK_OFF: u64 = 0;
pub const TASK_SGI: u64 = 1;
pub const TASK_RESET: u64 = 2;
pub const TASK_NOP_LOOP: u64 = 3;
pub const TASK_FLIP: u64 = 4;
pub const TASK_PONG: u64 = 5;
pub const TASK_FLIP16: u64 = 6;
pub const TASK_RESET_AT_GO: u64 = 7;
pub const TASK_FLIP_RX: u64 = 8;
pub const TASK_CHAINS: u64 = 9;

pub static TASK: [Global<u64>; MAX_CPUS] = [const { Global::new(TASK_OFF) }; MAX_CPUS];
static READY: [Global<bool>; MAX_CPUS] = [const { Global::new(false) }; MAX_CPUS];
static STOP: Global<bool> = Global::new(false);
/// `reset-race`: the signal for both vCPUs to call SYSTEM_RESET.
static GO: Global<bool> = Global::new(false);
/// Interrupts taken per slot.
static TAKEN: [Global<u64>; MAX_CPUS] = [const { Global::new(0) }; MAX_CPUS];

pub fn handle_irq() {
    let iar = gic::acknowledge();
    if gic::intid_of(iar) >= gic::INTID_SPECIAL {
        return;
    }
    if gic::intid_of(iar) == crate::soak::PPI_VTIMER {
        crate::soak::timer_fired();
    }
    let c = &TAKEN[baremetal::boot::cpu_slot()];
    c.set(c.get() + 1);
    gic::complete(iar);
}

pub fn secondary_main(slot: usize) -> ! {
    crate::trap::install();
    match TASK[slot].get() {
        TASK_SGI => {
            gic::init_cpu(&[]);
            READY[slot].set(true);
            dsb_sev();
            gic::wait_for(None, || STOP.get());
        }
        TASK_RESET => {
            psci::call(psci::PSCI_SYSTEM_RESET, 0, 0, 0);
        }
        TASK_RESET_AT_GO => {
            READY[slot].set(true);
            dsb_sev();
            while !GO.get() {}
            psci::call(psci::PSCI_SYSTEM_RESET, 0, 0, 0);
        }
        TASK_NOP_LOOP => loop {
            psci::call(guest_abi::hypercall::ARMHV_NOP, 0, 0, 0);
        },
        TASK_FLIP => crate::virtio::flip_loop(),
        TASK_PONG => crate::soak::pong_loop(),
        TASK_FLIP16 => crate::vnet::flip16_loop(),
        TASK_FLIP_RX => crate::vcons::flip_loop(),
        TASK_CHAINS => crate::chains::console_task(),
        _ => {}
    }
    READY[slot].set(false);
    dsb_sev();
    psci::call(psci::PSCI_CPU_OFF, 0, 0, 0);
    psci::halt()
}

/// Starts the vCPU with affinity `mpidr` on stack slot `slot` with `task`,
/// once it is off. PSCI's status.
pub fn start(slot: usize, mpidr: u64, task: u64) -> i64 {
    psci::wait_off(mpidr, 1000);
    TASK[slot].set(task);
    dsb_sev();
    psci::cpu_on(mpidr, slot)
}

/// `reset-race`: starts the vCPU with affinity `mpidr` spinning until the signal, waits until
/// it spins, and gives the signal: the caller calls SYSTEM_RESET next, as the other one does.
pub fn start_reset_race(slot: usize, mpidr: u64) {
    GO.set(false);
    READY[slot].set(false);
    if start(slot, mpidr, TASK_RESET_AT_GO) != 0 {
        return;
    }
    let deadline = time::counter() + time::ms_to_ticks(1000);
    while !READY[slot].get() && !time::passed(deadline) {
        cpu::yield_now();
    }
    GO.set(true);
    dsb_sev();
}

/// The other vCPUs, each with the stack slot it gets.
pub fn others<'a>(vm: &'a Vm) -> impl Iterator<Item = (usize, u64)> + 'a {
    let me = cpu::affinity();
    vm.cpus[..vm.ncpus]
        .iter()
        .copied()
        .filter(move |&c| c != me)
        .enumerate()
        .map(|(i, c)| (i + 1, c))
}

/// One SGI request: ICC_SGI1R_EL1 on a GICv3, GICD_SGIR on a GICv2.
fn sgi(value: u64) {
    if gic::version() == Some(Version::V2) {
        let sgir = gic::distributor() + v2::GICD_SGIR;
        // SAFETY: GICD_SGIR of the VM's own distributor; generating an SGI
        // only changes interrupt state.
        unsafe { (sgir as *mut u32).write_volatile(value as u32) };
    } else {
        // SAFETY: generating an SGI only changes interrupt state.
        unsafe { asm!("msr icc_sgi1r_el1, {v}", v = in(reg) value, options(nomem, nostack)) };
    }
}

/// The storm's SGI requests, as ICC_SGI1R_EL1 values: INTID in bits 27:24;
/// target list (Aff0 0..15 of Aff1.2.3 = 0) in 15:0; IRM (bit 40): every PE
/// but the sender.
fn patterns_v3(ncpus: usize) -> [(&'static str, u64); 4] {
    let all = (1u64 << ncpus) - 1;
    [
        ("all-vcpus", (1 << 24) | all),
        ("broadcast", (2 << 24) | (1 << 40)),
        ("no-such-vcpu", (3 << 24) | (0xff << 48) | (0xff << 32) | (0xff << 16) | 0xffff),
        ("range-selector-15", (4 << 24) | (15 << 44) | 0xffff),
    ]
}

/// The same as GICD_SGIR values: SGIINTID in bits 3:0, CPUTargetList (one bit
/// per CPU interface, 0..7) in 23:16, TargetListFilter in 25:24 (0: the list,
/// 1: every CPU but the sender, 3: reserved).
fn patterns_v2(ncpus: usize) -> [(&'static str, u64); 4] {
    let all = (1u64 << ncpus) - 1;
    [
        ("all-vcpus", (all << 16) | 1),
        ("broadcast", (1 << 24) | 2),
        // The CPU interfaces no vCPU has (none if it has all 8).
        ("no-such-vcpu", ((0xff & !all) << 16) | 3),
        ("filter-reserved", (3 << 24) | (0xff << 16) | 4),
    ]
}

pub fn sgi_storm(vm: &Vm, ms: u64) {
    if !gic::present() {
        baremetal::println!("hostile: sgi-storm needs a GIC");
        return;
    }
    gic::init_distributor();
    gic::init_cpu(&[]);
    STOP.set(false);
    let mut helpers = 0;
    for (slot, mpidr) in others(vm) {
        READY[slot].set(false);
        if start(slot, mpidr, TASK_SGI) == 0 {
            let deadline = time::counter() + time::ms_to_ticks(1000);
            while !READY[slot].get() && !time::passed(deadline) {
                wfe();
            }
            helpers += 1;
        }
    }
    let taken_before: u64 = TAKEN.iter().map(Global::get).sum();
    baremetal::println!("hostile: sgi-storm {ms}ms starting");
    let patterns = if gic::version() == Some(Version::V2) {
        patterns_v2(vm.ncpus)
    } else {
        patterns_v3(vm.ncpus)
    };
    let mut sent = [0u64; 4];
    let deadline = time::counter() + time::ms_to_ticks(ms);
    let mut i = 0u64;
    while !time::passed(deadline) {
        for (n, &(_, value)) in patterns.iter().enumerate() {
            sgi(value);
            sent[n] += 1;
        }
        i += 1;
        if i.is_multiple_of(64) {
            gic::take_pending();
        }
    }
    gic::take_pending();
    STOP.set(true);
    dsb_sev();
    for (_, mpidr) in others(vm) {
        gic::send_sgi(0, mpidr);
    }
    let mut stopped = 0;
    for (_, mpidr) in others(vm) {
        if psci::wait_off(mpidr, 2000) == AFFINITY_OFF {
            stopped += 1;
        }
    }
    let taken: u64 = TAKEN.iter().map(Global::get).sum::<u64>() - taken_before;
    for (n, &(name, _)) in patterns.iter().enumerate() {
        report::attempt(
            "sgi-storm",
            name,
            format_args!(
                "absorbed {} sent, {taken} taken in all, {stopped}/{helpers} helpers stopped",
                sent[n]
            ),
            stopped == helpers,
        );
    }
}

/// Spins with DAIF all masked, making no exits: only armhv's own timer can
/// take the CPU from it. Reports how often (and how long) it lost the CPU:
/// a gap of more than a millisecond between two reads of the counter.
pub fn spin_masked(ms: u64) {
    let gap_ticks = time::ms_to_ticks(1);
    let ticks = time::ms_to_ticks(ms);
    let (mut preempted, mut longest) = (0u64, 0u64);
    let daif: u64;
    baremetal::println!("hostile: spin-masked {ms}ms starting");
    // SAFETY: masking exceptions has no memory effect; restored after.
    unsafe {
        asm!("mrs {d}, daif", "msr daifset, #0xf", d = out(reg) daif, options(nomem, nostack))
    };
    let start = time::counter();
    let mut last = start;
    loop {
        let now = time::counter();
        let gap = now - last;
        if gap > gap_ticks {
            preempted += 1;
            longest = longest.max(gap);
        }
        last = now;
        if now - start >= ticks {
            break;
        }
    }
    // SAFETY: back to the mask bits it had.
    unsafe { asm!("msr daif, {d}", d = in(reg) daif, options(nomem, nostack)) };
    // A measurement: the host test judges the preemptions and the others' heartbeat.
    report::sweep(
        "spin-masked",
        format_args!("{ms}ms"),
        format_args!(
            "absorbed preempted {preempted} times, longest gap {} ms",
            time::ticks_to_ms(longest)
        ),
    );
}

global_asm!(
    r#"
    .section .text.hostile_abort_loop, "ax"
    .balign 4
    /* A CPU_ON entry: vectors at IPA 0 (nobody's memory), then an UNDEFINED
     * instruction. The exception goes to 0x200, whose fetch aborts, whose
     * injected abort goes to 0x200 again... for as long as the VM lives. */
    .global hostile_abort_loop_entry
hostile_abort_loop_entry:
    msr     vbar_el1, xzr
    isb
    udf     #0
1:  b       1b
"#
);

unsafe extern "C" {
    fn hostile_abort_loop_entry();
}

/// `abort-loop=MS`: puts the second vCPU into an endless chain of injected
/// aborts (its vectors are nowhere), and lets it run for MS ms while this
/// vCPU measures how much CPU time it itself still gets. The looping vCPU
/// stays in the loop until the VM ends.
pub fn abort_loop(vm: &Vm, ms: u64) {
    let Some((_, mpidr)) = others(vm).next() else {
        baremetal::println!("hostile: abort-loop needs 2 vCPUs");
        return;
    };
    psci::wait_off(mpidr, 1000);
    let entry = hostile_abort_loop_entry as *const () as u64;
    let r = psci::call(psci::PSCI_CPU_ON, mpidr, entry, 0)[0] as i64;
    if r != 0 {
        report::attempt(
            "abort-loop",
            format_args!("vcpu {mpidr:#x}"),
            format_args!("error {r}"),
            false,
        );
        return;
    }
    baremetal::println!("hostile: abort-loop {ms}ms starting");
    let before = psci::vm_exits().unwrap_or(0);
    // Meanwhile this vCPU waits as a guest waits for another CPU: PSCI
    // AFFINITY_INFO and `wfe`, over and over (each one an exit).
    let deadline = time::counter() + time::ms_to_ticks(ms);
    while !time::passed(deadline) {
        psci::affinity_info(mpidr);
        wfe();
    }
    let exits = psci::vm_exits().unwrap_or(0) - before;
    // A measurement: the host test judges what the loop cost the other VMs.
    report::sweep(
        "abort-loop",
        format_args!("vcpu {mpidr:#x} {ms}ms"),
        format_args!("absorbed {exits} exits of its VM"),
    );
}
