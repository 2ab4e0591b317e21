//! `debug=K`: self-hosted debug at EL1 (breakpoints, watchpoints, software step), with the
//! guest's own exception handlers.
//!
//! Two target functions and two watched doublewords exist in every copy of this program, at
//! the same addresses in every VM. Step `debug=K` arms breakpoint slot K on function K and
//! watchpoint slot K on stores to doubleword K, yields (another VM sharing the CPU may run with
//! its own slots armed), then calls both functions and stores to both doublewords; each hit
//! disarms what fired. So a VM must see exactly one breakpoint and one watchpoint hit per
//! round, all on its own K: a hit on the other target is another VM's setting acting here.
//! Then it single-steps a block whose second instruction traps to the hypervisor (an ID
//! register read): every step must end one instruction further.

use baremetal::{boot, println, psci};
use core::ptr::{addr_of, addr_of_mut};
use guest_abi::hypercall;

const ROUNDS: u64 = 40;
/// Instructions single-stepped (of the block in `step`, which has 8).
const STEPS: usize = 6;

/// MDSCR_EL1: SS (bit 0) software step, KDE (13) debug exceptions at EL1, MDE (15) breakpoints
/// and watchpoints.
const MDSCR_SS: u64 = 1 << 0;
const MDSCR_KDE: u64 = 1 << 13;
const MDSCR_MDE: u64 = 1 << 15;
/// DBGBCR: E, PMC = EL1 and EL0, BAS = 0b1111 (an A64 instruction), unlinked address match.
const BCR_EXEC: u64 = (0xf << 5) | (0b11 << 1) | 1;
/// DBGWCR: E, PAC = EL1 and EL0, LSC = stores, BAS = all 8 bytes of the doubleword.
const WCR_STORE8: u64 = (0xff << 5) | (0b10 << 3) | (0b11 << 1) | 1;
/// SPSR.SS (bit 21): the instruction returned to is stepped.
const SPSR_SS: u64 = 1 << 21;

/// ESR_EL1.EC of debug exceptions taken from EL1 to EL1.
const EC_BREAKPOINT: u64 = 0x31;
const EC_STEP: u64 = 0x33;
const EC_WATCHPOINT: u64 = 0x35;

/// What the handler records. Device memory (MMU off): no atomics, volatile accesses only.
#[repr(C)]
struct Seen {
    breakpoints: [u64; 2],
    watchpoints: [u64; 2],
    /// Hits that matched neither target.
    strays: u64,
    steps: usize,
    step_pcs: [u64; STEPS],
}

static mut SEEN: Seen =
    Seen { breakpoints: [0; 2], watchpoints: [0; 2], strays: 0, steps: 0, step_pcs: [0; STEPS] };

/// The watched doublewords, 32 bytes apart (each watchpoint covers one doubleword).
#[repr(C, align(64))]
struct Watched([u64; 8]);
static mut WATCHED: Watched = Watched([0; 8]);

fn watched(k: usize) -> *mut u64 {
    // SAFETY: in bounds of WATCHED; only a raw pointer is made.
    unsafe { addr_of_mut!(WATCHED.0[4 * k]) }
}

#[inline(never)]
extern "C" fn target0() {
    // SAFETY: a no-op, so that the function has a body of its own to break on.
    unsafe { core::arch::asm!("nop", options(nomem, nostack)) };
}

#[inline(never)]
extern "C" fn target1() {
    // SAFETY: as in `target0`.
    unsafe { core::arch::asm!("nop; nop", options(nomem, nostack)) };
}

fn target(k: usize) -> u64 {
    [target0 as extern "C" fn() as usize, target1 as extern "C" fn() as usize][k] as u64
}

macro_rules! sysreg {
    (read $reg:literal) => {{
        let v: u64;
        // SAFETY: reading a debug or exception register has no side effects.
        unsafe { core::arch::asm!(concat!("mrs {}, ", $reg), out(reg) v, options(nomem, nostack)) };
        v
    }};
    (write $reg:literal, $v:expr) => {{
        let v: u64 = $v;
        // SAFETY: the debug registers only make this program take its own debug exceptions,
        // which `debug_vectors` handles; the exception registers are this handler's.
        unsafe {
            core::arch::asm!(concat!("msr ", $reg, ", {}"), "isb", in(reg) v, options(nomem, nostack))
        };
    }};
}

/// Arms breakpoint and watchpoint slot `k` on target `k`.
fn arm(k: usize) {
    let (bvr, wvr) = (target(k), watched(k) as u64);
    if k == 0 {
        sysreg!(write "dbgbvr0_el1", bvr);
        sysreg!(write "dbgbcr0_el1", BCR_EXEC);
        sysreg!(write "dbgwvr0_el1", wvr);
        sysreg!(write "dbgwcr0_el1", WCR_STORE8);
    } else {
        sysreg!(write "dbgbvr1_el1", bvr);
        sysreg!(write "dbgbcr1_el1", BCR_EXEC);
        sysreg!(write "dbgwvr1_el1", wvr);
        sysreg!(write "dbgwcr1_el1", WCR_STORE8);
    }
}

// The step's own vector table: synchronous exceptions at EL1h go to `debug_exception`; every
// other entry is the usual one (`baremetal::boot`'s `vectors`, same offset).
core::arch::global_asm!(
    r#"
    .section .text.debug_vectors, "ax"
    .balign 0x800
    .global debug_vectors
debug_vectors:
    .irp kind, 0, 1, 2, 3
    .balign 0x80
    b       vectors + 0x80 * \kind
    .endr
    .balign 0x80
    b       debug_sync
    .irp kind, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
    .balign 0x80
    b       vectors + 0x80 * \kind
    .endr

    /* Saves what an AAPCS64 function may clobber; the handler uses no FP/SIMD. */
debug_sync:
    sub     sp, sp, #176
    stp     x0, x1, [sp, #0]
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x29, [sp, #144]
    str     x30, [sp, #160]
    bl      {handler}
    ldp     x0, x1, [sp, #0]
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x29, [sp, #144]
    ldr     x30, [sp, #160]
    add     sp, sp, #176
    eret
"#,
    handler = sym debug_exception,
);

unsafe extern "C" {
    static debug_vectors: u8;
}

/// A synchronous exception at EL1 while the step runs: a debug exception is counted and
/// disarmed (or, for a step, the next step set up); anything else ends the run.
extern "C" fn debug_exception() {
    let esr = sysreg!(read "esr_el1");
    let elr = sysreg!(read "elr_el1");
    match esr >> 26 {
        EC_BREAKPOINT => {
            match (0..2).find(|&k| target(k) == elr) {
                Some(k) => bump(|s| &raw mut s.breakpoints[k]),
                None => bump(|s| &raw mut s.strays),
            }
            // The breakpointed instruction runs when we return: disarm what fired.
            sysreg!(write "dbgbcr0_el1", 0);
            sysreg!(write "dbgbcr1_el1", 0);
        }
        EC_WATCHPOINT => {
            let far = sysreg!(read "far_el1");
            let k = (0..2).find(|&k| (watched(k) as u64..watched(k) as u64 + 8).contains(&far));
            match k {
                Some(k) => bump(|s| &raw mut s.watchpoints[k]),
                None => bump(|s| &raw mut s.strays),
            }
            sysreg!(write "dbgwcr0_el1", 0);
            sysreg!(write "dbgwcr1_el1", 0);
        }
        EC_STEP => {
            // SAFETY: SEEN is shared only between this CPU's step and this handler, which
            // runs with debug exceptions masked (PSTATE.D is set on exception entry).
            let n = unsafe { (&raw const SEEN.steps).read_volatile() };
            if n < STEPS {
                // SAFETY: as above.
                unsafe { (&raw mut SEEN.step_pcs).cast::<u64>().add(n).write_volatile(elr) };
            }
            // SAFETY: as above.
            unsafe { (&raw mut SEEN.steps).write_volatile(n + 1) };
            if n + 1 < STEPS {
                // Step the next instruction too.
                sysreg!(write "spsr_el1", sysreg!(read "spsr_el1") | SPSR_SS);
            } else {
                sysreg!(write "mdscr_el1", sysreg!(read "mdscr_el1") & !MDSCR_SS);
            }
        }
        _ => {
            let far = sysreg!(read "far_el1");
            println!(
                "testguest: PANIC: unexpected exception in debug esr={esr:#x} elr={elr:#x} far={far:#x}"
            );
            psci::system_off();
        }
    }
}

/// Counts one in the counter of SEEN that `field` picks.
fn bump(field: impl FnOnce(&mut Seen) -> *mut u64) {
    // SAFETY: SEEN is shared only between this CPU's step and its handler, which runs with
    // debug exceptions masked, so nothing else holds it; volatile, as Device memory wants.
    unsafe {
        let p = field(&mut *addr_of_mut!(SEEN));
        p.write_volatile(p.read_volatile() + 1);
    }
}

/// `debug=K`.
pub fn step(k: u64) {
    let Ok(k) = usize::try_from(k) else { return };
    if k > 1 {
        println!("testguest: debug needs K = 0 or 1, not {k}");
        return;
    }
    let dfr0 = sysreg!(read "id_aa64dfr0_el1");
    println!(
        "testguest: debug slots brps={} wrps={} doublelock={:#x} oslsr={:#x}",
        ((dfr0 >> 12) & 0xf) + 1,
        ((dfr0 >> 20) & 0xf) + 1,
        (dfr0 >> 36) & 0xf,
        sysreg!(read "oslsr_el1"),
    );
    // The table is 2 KiB aligned and handles every exception (`debug_vectors`).
    sysreg!(write "vbar_el1", addr_of!(debug_vectors) as u64);
    // The first debug-register access of this vCPU (under armhv: traps, and loads them).
    sysreg!(write "mdscr_el1", sysreg!(read "mdscr_el1") | MDSCR_MDE | MDSCR_KDE);
    // SAFETY: unmasks debug exceptions, which `debug_vectors` handles.
    unsafe { core::arch::asm!("msr daifclr, #8", "isb", options(nomem, nostack)) };

    let mut switched = 0;
    for round in 0..ROUNDS {
        arm(k);
        // Another VM on this CPU runs now, with its own slots armed.
        let [_, other_ran, ..] = psci::call(hypercall::ARMHV_YIELD, 0, 0, 0);
        switched += u64::from(other_ran == 1);
        target0();
        target1();
        // SAFETY: in bounds of WATCHED, which only this step touches.
        unsafe {
            watched(0).write_volatile(round);
            watched(1).write_volatile(round);
        }
    }
    let step_start = single_step();

    // SAFETY: masks debug exceptions again; then nothing can fire.
    unsafe { core::arch::asm!("msr daifset, #8", "isb", options(nomem, nostack)) };
    sysreg!(write "mdscr_el1", 0);
    boot::install_vectors();

    // SAFETY: the handler can no longer run; plain reads of what it wrote.
    let seen = unsafe { &*addr_of!(SEEN) };
    let other = 1 - k;
    println!("testguest: debug {ROUNDS} rounds, another vCPU ran in {switched} of their yields");
    println!(
        "testguest: debug breakpoint hits own={} other={} stray={}",
        seen.breakpoints[k], seen.breakpoints[other], seen.strays
    );
    println!(
        "testguest: debug watchpoint hits own={} other={}",
        seen.watchpoints[k], seen.watchpoints[other]
    );
    let expected: [u64; STEPS] = core::array::from_fn(|i| step_start + 4 * (i as u64 + 1));
    if seen.steps == STEPS && seen.step_pcs == expected {
        println!("testguest: debug step {} steps, one instruction each", seen.steps);
    } else {
        println!(
            "testguest: debug step {} steps, pcs {:x?} (expected {:x?})",
            seen.steps, seen.step_pcs, expected
        );
    }
}

/// Steps the first `STEPS` instructions of a block of 8, the second of which traps to the
/// hypervisor (HCR_EL2.TID3) and is emulated there. Returns the block's address.
fn single_step() -> u64 {
    // With debug exceptions unmasked, MDSCR_EL1.SS with PSTATE.SS clear is a step already
    // pending: masked until the `eret` below, which unmasks them with PSTATE.SS set.
    // SAFETY: masks debug exceptions; changes no memory.
    unsafe { core::arch::asm!("msr daifset, #8", "isb", options(nomem, nostack)) };
    sysreg!(write "mdscr_el1", sysreg!(read "mdscr_el1") | MDSCR_SS);
    let start: u64;
    // SAFETY: returns to the block with PSTATE.SS set (EL1h, D clear, A/I/F masked, as
    // now): each instruction then takes a step exception, counted by `debug_exception`, which
    // clears MDSCR_EL1.SS after STEPS of them. Only the declared registers change.
    unsafe {
        core::arch::asm!(
            "adr {start}, 2f",
            "msr elr_el1, {start}",
            "mov {tmp}, #0x1c5",
            "orr {tmp}, {tmp}, #(1 << 21)",
            "msr spsr_el1, {tmp}",
            "eret",
            "2:",
            "add {n}, {n}, #1",
            "mrs {id}, id_aa64mmfr0_el1",
            "add {n}, {n}, #1",
            "add {n}, {n}, #1",
            "add {n}, {n}, #1",
            "add {n}, {n}, #1",
            "add {n}, {n}, #1",
            "add {n}, {n}, #1",
            start = out(reg) start,
            tmp = out(reg) _,
            n = inout(reg) 0u64 => _,
            id = out(reg) _,
            options(nostack),
        );
    }
    start
}
