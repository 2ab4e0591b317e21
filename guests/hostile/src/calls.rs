//! Hypercalls and firmware calls: `hvc` (every SMCCC owner range through HVC
//! and SMC, other immediates, random and extreme arguments), `psci` (CPU_ON
//! and friends with bad targets, entries and levels), `cpu-off-last`,
//! `reset-storm=K` and `reset-race=K`.
//!
//! Lines: `hostile: hvc|smc|psci <what> -> ret <hex>|error <dec>`,
//! `hostile: hvc-sweep owner=<n> -> absorbed <t> calls: <u> not-supported, <o> other`,
//! `hostile: hvc-random -> absorbed <n> calls ..., <k> defined`; for the storm:
//! `hostile: reset-storm resetting (<i> of <K>)` before each reset, then in the
//! next incarnation `hostile: reset-storm reset-<i> -> ok ram-words-left=0` (its
//! RAM was zeroed) and `hostile: reset-storm virtio-status-after-reset-<i> ->
//! value <hex>` (its disk's status register: 0 once the reset forgot it), and
//! finally `hostile: reset-storm done: <2K> attempts, <k> confined`; the same with
//! `reset-race` for the race.
//! Confined: an unknown function returns NOT_SUPPORTED (-1); a known one
//! returns its documented value or a PSCI error; nothing starts, stops or
//! resets what the call did not name.

use core::arch::{asm, global_asm};

use baremetal::psci::{self, AFFINITY_OFF};
use baremetal::{cpu, println, time};
use guest_abi::hypercall::{
    self, ARMHV_IO_STAMPS, ARMHV_NOP, ARMHV_TEST_CONSOLE_PANIC, ARMHV_TEST_HYP_FAULT,
    ARMHV_VM_EXITS, ARMHV_VM_INFO, ARMHV_YIELD,
};

use crate::irq::{self, TASK_NOP_LOOP, TASK_RESET};
use crate::report::{self, Outcome};
use crate::{Vm, image_end, virtio};

const NOT_SUPPORTED: i64 = -1;
const INVALID_PARAMETERS: i64 = -2;
const ALREADY_ON: i64 = -4;
const INVALID_ADDRESS: i64 = -9;

const PSCI_FEATURES: u32 = 0x8400_000a;
const CPU_ON_32: u32 = 0x8400_0003;
const CPU_ON_64: u32 = 0xc400_0003;
const CPU_SUSPEND_64: u32 = 0xc400_0001;
const AFFINITY_INFO_64: u32 = 0xc400_0004;
const MIGRATE_INFO_UP_CPU: u32 = 0xc400_0007;

/// Calls that would end, reset or suspend the caller if they were
/// implemented: never swept; tried one by one where PSCI_FEATURES says they
/// do not exist.
const DANGEROUS: [u32; 13] = [
    0x8400_0002, // CPU_OFF
    0x8400_0008, // SYSTEM_OFF
    0x8400_0009, // SYSTEM_RESET
    0x8400_0012, // SYSTEM_RESET2
    0xc400_0012,
    0x8400_000e, // SYSTEM_SUSPEND
    0xc400_000e,
    0x8400_000b, // CPU_FREEZE
    0x8400_000c, // CPU_DEFAULT_SUSPEND
    0xc400_000c,
    0x8400_0015,              // SYSTEM_OFF2
    ARMHV_TEST_HYP_FAULT,     // armhv's fault injection (test builds only)
    ARMHV_TEST_CONSOLE_PANIC, // likewise
];

/// SMCCC through HVC #0 with six arguments.
pub fn hvc6(fid: u64, a: [u64; 6]) -> [u64; 4] {
    let (mut r0, mut r1, mut r2, mut r3) = (fid, a[0], a[1], a[2]);
    // SAFETY: an SMCCC call changes no Rust-visible memory; x4-x17 are
    // declared clobbered (SMCCC 1.0 allows it).
    unsafe {
        asm!(
            "hvc #0",
            inout("x0") r0, inout("x1") r1, inout("x2") r2, inout("x3") r3,
            inout("x4") a[3] => _, inout("x5") a[4] => _, inout("x6") a[5] => _,
            out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
            out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _,
            options(nostack),
        )
    };
    [r0, r1, r2, r3]
}

/// SMCCC through SMC #0 (armhv traps it: the firmware is not the guest's).
pub fn smc6(fid: u64, a: [u64; 6]) -> [u64; 4] {
    let (mut r0, mut r1, mut r2, mut r3) = (fid, a[0], a[1], a[2]);
    // SAFETY: as in `hvc6`.
    unsafe {
        asm!(
            "smc #0",
            inout("x0") r0, inout("x1") r1, inout("x2") r2, inout("x3") r3,
            inout("x4") a[3] => _, inout("x5") a[4] => _, inout("x6") a[5] => _,
            out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
            out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _,
            options(nostack),
        )
    };
    [r0, r1, r2, r3]
}

macro_rules! call_imm {
    ($insn:literal, $fid:expr) => {{
        let mut r0: u64 = $fid;
        // SAFETY: as in `hvc6`, with another immediate.
        unsafe {
            asm!(
                $insn,
                inout("x0") r0, out("x1") _, out("x2") _, out("x3") _,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _, out("x9") _,
                out("x10") _, out("x11") _, out("x12") _, out("x13") _, out("x14") _,
                out("x15") _, out("x16") _, out("x17") _,
                options(nostack),
            )
        };
        r0
    }};
}

/// A small xorshift generator: the same sequence every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const WORKAROUND_1: u32 = 0x8000_8000;
const WORKAROUND_3: u32 = 0x8000_3fff;

/// Functions armhv implements (docs/guest-abi.md): any return is theirs.
fn known(fid: u32) -> bool {
    fid == 0x8000_0000
        || fid == 0x8000_0001
        || fid == WORKAROUND_1
        || fid == WORKAROUND_3
        || fid & 0xbfff_ffe0 == 0x8400_0000
        || hypercall::is_call(fid)
}

fn dangerous(fid: u32) -> bool {
    DANGEROUS.contains(&fid)
}

/// Whether a call's x0 is a defined answer.
fn defined(fid: u32, x0: u64) -> bool {
    let e = x0 as i64;
    if known(fid) { e >= INVALID_ADDRESS } else { e == NOT_SUPPORTED }
}

fn extremes(vm: &Vm) -> [u64; 12] {
    [
        0,
        1,
        u64::MAX,
        1 << 63,
        i64::MAX as u64,
        vm.ram_start,
        vm.ram_end,
        vm.ram_end - 4,
        0x4008_0000,
        0xffff_ffff,
        1 << 32,
        0x0900_0000,
    ]
}

/// An MPIDR that names no vCPU of ours.
fn bad_mpidr(vm: &Vm) -> u64 {
    0xff00 | vm.ncpus as u64
}

/// Arguments made safe for the function they go to: CPU_ON never names a
/// real vCPU (a random entry in our RAM would run garbage there).
fn tame(fid: u32, args: &mut [u64; 6], vm: &Vm) {
    if fid & 0xbfff_ffff == CPU_ON_32 {
        args[0] = bad_mpidr(vm);
    }
}

pub fn hvc(vm: &Vm) {
    // The calls armhv documents, with their documented answers.
    for (name, fid, want) in [
        ("SMCCC_VERSION", 0x8000_0000u32, Some(0x1_0001u64)),
        ("PSCI_VERSION", 0x8400_0000, Some(0x1_0001)),
        ("ARMHV_NOP", ARMHV_NOP, Some(0)),
        ("ARMHV_VM_INFO", ARMHV_VM_INFO, Some(0)),
        ("ARMHV_YIELD", ARMHV_YIELD, Some(0)),
        ("ARMHV_VM_EXITS", ARMHV_VM_EXITS, Some(0)),
        ("ARMHV_IO_STAMPS", ARMHV_IO_STAMPS, Some(0)),
        ("ARMHV_UNKNOWN", psci::ARMHV_UNKNOWN, None),
        ("SMCCC_ARCH_SOC_ID", 0x8000_0002, None),
        ("SMCCC_ARCH_WORKAROUND_2", 0x8000_7fff, None),
        ("TRNG_VERSION", 0x8400_0050, None),
        ("SDEI_VERSION", 0xc400_0020, None),
        ("FFA_VERSION", 0x8400_0063, None),
        ("SIP_0", 0x8200_0000, None),
        ("OEM_0", 0x8300_0000, None),
        ("STD_HYP_0", 0x8500_0000, None),
        ("TRUSTED_APP_0", 0xb000_0000, None),
        ("TRUSTED_OS_0", 0xb200_0000, None),
        ("TRUSTED_OS_UID", 0xbf00_ff01, None),
        ("SIP_CALL_COUNT", 0x8200_ff00, None),
    ] {
        for (conduit, call) in [("hvc", hvc6 as fn(u64, [u64; 6]) -> [u64; 4]), ("smc", smc6)] {
            let x0 = call(u64::from(fid), [u64::MAX; 6])[0];
            let o = Outcome::from_x0(x0);
            let confined = match want {
                Some(w) => x0 == w,
                None => x0 as i64 == NOT_SUPPORTED,
            };
            report::attempt(conduit, name, o, confined);
        }
    }
    // The Spectre workarounds (docs/guest-abi.md, "Speculation"): what ARCH_FEATURES says
    // depends on the CPU model; the call itself must agree with it: done (0) unless
    // NOT_SUPPORTED. The test checks each model's answers.
    for (name, fid) in
        [("SMCCC_ARCH_WORKAROUND_1", WORKAROUND_1), ("SMCCC_ARCH_WORKAROUND_3", WORKAROUND_3)]
    {
        let said = hvc6(0x8000_0001, [u64::from(fid), 0, 0, 0, 0, 0])[0] as i64;
        let want = if said == NOT_SUPPORTED { NOT_SUPPORTED as u64 } else { 0 };
        for (conduit, call) in [("hvc", hvc6 as fn(u64, [u64; 6]) -> [u64; 4]), ("smc", smc6)] {
            let x0 = call(u64::from(fid), [u64::MAX; 6])[0];
            report::attempt(conduit, name, Outcome::from_x0(x0), x0 == want);
        }
    }
    // ARCH_FEATURES about every arch function: SSBD and SOC_ID are not offered.
    for q in [0x8000_8000u64, 0x8000_7fff, 0x8000_3fff, 0x8000_0002, u64::MAX] {
        let x0 = hvc6(0x8000_0001, [q, 0, 0, 0, 0, 0])[0];
        report::attempt(
            "hvc",
            format_args!("SMCCC_ARCH_FEATURES({q:#x})"),
            Outcome::from_x0(x0),
            defined(0x8000_0001, x0),
        );
    }
    // The function ID is W0: the upper half of X0 is ignored.
    let x0 = hvc6(0xffff_ffff_8000_0000, [0; 6])[0];
    report::attempt("hvc", "x0-upper-bits", Outcome::from_x0(x0), x0 == 0x1_0001);
    // Other immediates (SMCCC says #0; armhv must not care or must refuse).
    for (name, x0) in [
        ("hvc#1", call_imm!("hvc #1", 0x8000_0000)),
        ("hvc#0x4242", call_imm!("hvc #0x4242", 0x8000_0000)),
        ("hvc#0xffff", call_imm!("hvc #0xffff", 0x8000_0000)),
        ("smc#1", call_imm!("smc #1", 0x8000_0000)),
        ("smc#0xffff", call_imm!("smc #0xffff", 0x8000_0000)),
    ] {
        let o = Outcome::from_x0(x0);
        report::attempt("hvc", name, o, x0 == 0x1_0001 || x0 as i64 == NOT_SUPPORTED);
    }
    sweep(vm);
    random(vm, 600);
}

/// Every owner (0..63), fast and yielding, SMC32 and SMC64 conventions,
/// function numbers 0..31 and a few far ones, through HVC; number 0 and the
/// general queries through SMC.
fn sweep(vm: &Vm) {
    const NUMBERS: [u32; 12] =
        [0x20, 0x50, 0xff, 0x100, 0x7fff, 0x8000, 0xfeff, 0xff00, 0xff01, 0xff02, 0xff03, 0xffff];
    let mut rng = Rng::new(0x5eed_0000 ^ vm.vm_id);
    for owner in 0..64u32 {
        let (mut calls, mut unsupported, mut other) = (0u64, 0u64, 0u64);
        let mut bad = 0u64;
        for kind in [0x8000_0000u32, 0xc000_0000, 0, 0x4000_0000] {
            for number in (0..32).chain(NUMBERS) {
                let fid = kind | (owner << 24) | number;
                if dangerous(fid) {
                    continue;
                }
                let mut args = [0; 6];
                for a in &mut args {
                    *a = rng.next();
                }
                tame(fid, &mut args, vm);
                let smc = number == 0 || number >= 0xff00;
                let r = hvc6(u64::from(fid), args)[0];
                let rs = if smc { Some(smc6(u64::from(fid), args)[0]) } else { None };
                for x0 in core::iter::once(r).chain(rs) {
                    calls += 1;
                    if x0 as i64 == NOT_SUPPORTED {
                        unsupported += 1;
                    } else {
                        other += 1;
                    }
                    if !defined(fid, x0) {
                        bad += 1;
                        report::attempt(
                            "hvc-sweep",
                            format_args!("{fid:#x}"),
                            Outcome::from_x0(x0),
                            false,
                        );
                    }
                }
            }
        }
        println!(
            "hostile: hvc-sweep owner={owner} -> absorbed {calls} calls: {unsupported} not-supported, {other} other"
        );
        report::count(calls - bad, calls - bad);
    }
}

/// Random functions (known and not) with random and extreme arguments.
fn random(vm: &Vm, n: u64) {
    let mut rng = Rng::new(0xa11_ca11 ^ vm.vm_id);
    let ext = extremes(vm);
    let known_fids = [
        0x8000_0000u32,
        0x8000_0001,
        0x8400_0000,
        0x8400_0001,
        CPU_SUSPEND_64,
        CPU_ON_32,
        CPU_ON_64,
        0x8400_0004,
        AFFINITY_INFO_64,
        0x8400_0005,
        0x8400_0006,
        MIGRATE_INFO_UP_CPU,
        PSCI_FEATURES,
        0x8400_000d,
        0xc400_0010,
        0x8400_0013,
        0xc400_0014,
        ARMHV_NOP,
        ARMHV_VM_INFO,
        ARMHV_YIELD,
        ARMHV_VM_EXITS,
        ARMHV_IO_STAMPS,
    ];
    let (mut calls, mut ok) = (0u64, 0u64);
    while calls < n {
        let r = rng.next();
        let fid = if r & 3 == 0 {
            r as u32 >> 2 | (r as u32 & 0x8000_0000)
        } else {
            known_fids[(r >> 8) as usize % known_fids.len()]
        };
        if dangerous(fid) {
            continue;
        }
        let mut args = [0; 6];
        for a in &mut args {
            let r = rng.next();
            *a = if r & 1 == 0 { ext[(r >> 1) as usize % ext.len()] } else { r };
        }
        tame(fid, &mut args, vm);
        let x0 =
            if r & 4 == 0 { hvc6(u64::from(fid), args)[0] } else { smc6(u64::from(fid), args)[0] };
        calls += 1;
        if defined(fid, x0) {
            ok += 1;
        } else {
            report::attempt(
                "hvc-random",
                format_args!("{fid:#x} {args:x?}"),
                Outcome::from_x0(x0),
                false,
            );
        }
    }
    println!(
        "hostile: hvc-random -> absorbed {calls} calls with random and extreme arguments, {ok} defined"
    );
    report::count(ok, ok);
}

global_asm!(
    r#"
    .section .text.hostile_off, "ax"
    .balign 4
    /* A CPU_ON entry that takes any context id: straight back off. */
    .global hostile_cpu_off_entry
hostile_cpu_off_entry:
    movz    x0, #0x8400, lsl #16
    orr     x0, x0, #2
    hvc     #0
1:  wfe
    b       1b
"#
);

unsafe extern "C" {
    fn hostile_cpu_off_entry();
}

fn off_entry() -> u64 {
    hostile_cpu_off_entry as *const () as u64
}

fn psci_attempt(what: impl core::fmt::Display, x0: u64, want: &[i64]) {
    let o = Outcome::from_x0(x0);
    report::attempt("psci", what, o, want.contains(&(x0 as i64)));
}

pub fn psci(vm: &Vm) {
    let me = cpu::affinity();
    let other = irq::others(vm).next().map(|(_, m)| m);
    let entry = off_entry();
    let cpu_on = |fid: u32, mpidr: u64, entry: u64, ctx: u64| {
        hvc6(u64::from(fid), [mpidr, entry, ctx, 0, 0, 0])[0]
    };

    // Targets that are not ours: other VMs' vCPUs have the same virtual
    // MPIDRs as ours, so only numbers past our vCPUs, higher affinity levels
    // and the physical CPUs' numbers are left to try.
    let n = vm.ncpus as u64;
    for mpidr in [
        n,
        n + 1,
        3,
        7,
        0xff,
        0x100,
        0x1_0000,
        0x1_0000_0000,
        0xff_00ff_ffff,
        u64::MAX,
        0x8000_0000 | n,
    ] {
        let x0 = cpu_on(CPU_ON_64, mpidr, entry, 0);
        psci_attempt(format_args!("cpu_on mpidr={mpidr:#x}"), x0, &[INVALID_PARAMETERS]);
    }
    psci_attempt("cpu_on self", cpu_on(CPU_ON_64, me, entry, 0), &[ALREADY_ON]);
    // Entry points that are not ours to run.
    let target = other.unwrap_or(me);
    let bad_entries = [
        0,
        vm.ram_end,
        vm.ram_end - 2,
        vm.ram_start + 2,
        vm.ram_start - 4,
        0x0900_0000,
        0x0800_0000,
        !3,
        1 << 63,
        (1 << vm.ipa_bits) + vm.ram_start,
        vm.ram_start + (1 << 32),
    ];
    for e in bad_entries {
        if let Some(m) = other {
            psci::wait_off(m, 1000);
        }
        let x0 = cpu_on(CPU_ON_64, target, e, 0);
        let want: &[i64] =
            if other.is_some() { &[INVALID_ADDRESS] } else { &[INVALID_ADDRESS, ALREADY_ON] };
        psci_attempt(format_args!("cpu_on entry={e:#x}"), x0, want);
    }
    if let Some(m) = other {
        // SMC32 CPU_ON: the upper halves of the arguments are ignored, so
        // this one is valid (it starts the vCPU, which turns itself off).
        psci::wait_off(m, 1000);
        let x0 =
            cpu_on(CPU_ON_32, m | 0xffff_ffff_0000_0000, entry | 0xdead_0000_0000_0000, u64::MAX);
        psci_attempt("cpu_on_32 upper-bits", x0, &[0]);
        // Again at once: already on (as on KVM, even before it ran), or off again already.
        let x0 = cpu_on(CPU_ON_64, m, entry, 0);
        psci_attempt("cpu_on twice", x0, &[ALREADY_ON, 0]);
        psci::wait_off(m, 1000);
        // Start/stop cycles as fast as they complete.
        let (mut cycles, mut ok) = (0u64, 0u64);
        let deadline = time::counter() + time::ms_to_ticks(500);
        while !time::passed(deadline) && cycles < 200 {
            cycles += 1;
            if cpu_on(CPU_ON_64, m, entry, cycles) == 0 && psci::wait_off(m, 1000) == AFFINITY_OFF {
                ok += 1;
            }
        }
        report::attempt(
            "psci",
            "cpu_on-off-cycles",
            format_args!("absorbed {cycles} cycles, {ok} clean"),
            ok == cycles,
        );
    }
    // AFFINITY_INFO: levels above 0, nobody's MPIDRs.
    for (mpidr, level) in
        [(me, 1u64), (me, 2), (me, 3), (me, u64::MAX), (bad_mpidr(vm), 0), (u64::MAX, 0)]
    {
        let x0 = hvc6(u64::from(AFFINITY_INFO_64), [mpidr, level, 0, 0, 0, 0])[0];
        psci_attempt(
            format_args!("affinity_info mpidr={mpidr:#x} level={level}"),
            x0,
            &[INVALID_PARAMETERS],
        );
    }
    // CPU_SUSPEND with any power state and an entry point that is not ours:
    // a standby that returns (armhv), or an error.
    for (state, e) in
        [(0u64, 0u64), (u64::MAX, vm.ram_end), (1 << 16, 0x0900_0000), (0x4000_0000, 0)]
    {
        let x0 = hvc6(u64::from(CPU_SUSPEND_64), [state, e, 0, 0, 0, 0])[0];
        psci_attempt(
            format_args!("cpu_suspend state={state:#x} entry={e:#x}"),
            x0,
            &[0, -2, -9, -1],
        );
    }
    // PSCI_FEATURES of every PSCI function number and of nonsense.
    let mut features = 0u64;
    for fid in (0x8400_0000u64..0x8400_0020).chain(0xc400_0000..0xc400_0020).chain([
        0,
        u64::MAX,
        u64::from(ARMHV_NOP),
    ]) {
        let x0 = hvc6(u64::from(PSCI_FEATURES), [fid, 0, 0, 0, 0, 0])[0];
        features += 1;
        if x0 != 0 && x0 as i64 != NOT_SUPPORTED {
            psci_attempt(format_args!("features {fid:#x}"), x0, &[]);
        }
    }
    println!("hostile: psci features -> absorbed {features} queries, each 0 or -1");
    report::count(features, features);
    // Functions that would end or suspend the caller, called only if armhv
    // says they do not exist: then they must return NOT_SUPPORTED.
    for fid in [
        0x8400_0012u32,
        0xc400_0012,
        0x8400_000e,
        0xc400_000e,
        0x8400_000b,
        0x8400_000c,
        0xc400_000c,
        0x8400_0015,
    ] {
        if hvc6(u64::from(PSCI_FEATURES), [u64::from(fid), 0, 0, 0, 0, 0])[0] as i64
            == NOT_SUPPORTED
        {
            let x0 = hvc6(u64::from(fid), [0, 0, 0, 0, 0, 0])[0];
            psci_attempt(format_args!("unsupported {fid:#x}"), x0, &[NOT_SUPPORTED]);
        }
    }
    for fid in [0x8400_0005u32, 0xc400_0005, 0x8400_0007, MIGRATE_INFO_UP_CPU] {
        let x0 = hvc6(u64::from(fid), [u64::MAX, 0, 0, 0, 0, 0])[0];
        psci_attempt(format_args!("migrate {fid:#x}"), x0, &[NOT_SUPPORTED]);
    }
    if let Some(m) = other {
        psci::wait_off(m, 1000);
    }
}

/// `cpu-off-last`: PSCI CPU_OFF from the last vCPU that is on: the VM ends
/// (armhv logs `<vm>: powered off by the guest`). Prints the totals first.
pub fn cpu_off_last(vm: &Vm) {
    for (_, m) in irq::others(vm) {
        psci::wait_off(m, 1000);
    }
    report::totals();
    println!("hostile: psci cpu_off last vcpu");
    psci::call(psci::PSCI_CPU_OFF, 0, 0, 0);
    report::attempt("psci", "cpu_off last vcpu", "returned", false);
}

const STORM_MAGIC: u64 = 0x4d52_4f54_5354_4552; // "RESTSTORM"-ish
/// The region each incarnation fills before it resets; the next one must
/// find it zeroed.
const SCRUB_BYTES: u64 = 1 << 20;

/// Who calls SYSTEM_RESET in `reset-storm` and `reset-race`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Resetters {
    /// One vCPU while the other runs, alternately.
    Alternate,
    /// Both vCPUs at once.
    Both,
}

/// `reset-storm=K` ([`Resetters::Alternate`]) and `reset-race=K` ([`Resetters::Both`]):
/// SYSTEM_RESET, K times in all. The count survives in sector 0 of the VM's virtio disk (its
/// RAM does not: armhv zeroes it).
pub fn reset_storm(vm: &Vm, k: u64, who: Resetters) {
    let step = if who == Resetters::Both { "reset-race" } else { "reset-storm" };
    let Some(base) = virtio::find(vm, virtio::ID_BLOCK) else {
        println!("hostile: {step} needs a virtio disk");
        return;
    };
    // Before anything resets it: the device as the reset left it.
    let status_at_boot = u64::from(baremetal::virtio_mmio::Regs(base).status());
    let scrub = (image_end() + 0xf_ffff) & !0xf_ffff;
    let mut dirty = 0u64;
    for a in (scrub..scrub + SCRUB_BYTES).step_by(8) {
        // SAFETY: free RAM of ours, read only.
        dirty += u64::from(unsafe { (a as *const u64).read_volatile() } != 0);
    }
    let Some(mut disk) = virtio::Disk::open(base) else {
        println!("hostile: {step}: virtio disk unusable");
        return;
    };
    let mut w = disk.read0().unwrap_or([0; 8]);
    if w[0] != STORM_MAGIC {
        w = [STORM_MAGIC, 0, 0, 0, 0, 0, 0, 0];
    }
    let (resets, mut ram_ok, mut dev_ok) = (w[1], w[2], w[3]);
    if resets > 0 {
        // RAM zeroed by the reset, and the device forgotten (a device still
        // at DRIVER_OK would go on using rings in memory that was reloaded).
        ram_ok += u64::from(dirty == 0);
        dev_ok += u64::from(status_at_boot == 0);
        println!(
            "hostile: {step} reset-{resets} -> {} ram-words-left={dirty}",
            if dirty == 0 { "ok" } else { "stale" }
        );
        println!("hostile: {step} virtio-status-after-reset-{resets} -> value {status_at_boot:#x}");
    }
    if resets >= k {
        println!("hostile: {step} done: {} attempts, {} confined", 2 * resets, ram_ok + dev_ok);
        report::count(2 * resets, ram_ok + dev_ok);
        return;
    }
    w[1] = resets + 1;
    w[2] = ram_ok;
    w[3] = dev_ok;
    if !disk.write0(&w) {
        println!("hostile: {step}: cannot write the count");
        return;
    }
    // Leave something for the next incarnation to look for, and the disk's
    // queue configured (a reset must forget it).
    for a in (scrub..scrub + SCRUB_BYTES).step_by(8) {
        // SAFETY: free RAM of ours: no Rust object lives above the image.
        unsafe { (a as *mut u64).write_volatile(STORM_MAGIC) };
    }
    println!("hostile: {step} resetting ({} of {k})", resets + 1);
    let other = irq::others(vm).next();
    match other {
        // Both at once: the other vCPU waits for our signal, then both call it.
        Some((slot, mpidr)) if who == Resetters::Both => {
            irq::start_reset_race(slot, mpidr);
        }
        // Odd resets: the other vCPU resets the VM while this one spins in hypercalls.
        Some((slot, mpidr)) if resets % 2 == 1 => {
            irq::start(slot, mpidr, TASK_RESET);
            loop {
                psci::call(ARMHV_NOP, 0, 0, 0);
            }
        }
        // Even ones: this vCPU resets it while the other makes hypercalls.
        Some((slot, mpidr)) => {
            irq::start(slot, mpidr, TASK_NOP_LOOP);
            crate::spin_ms(5);
        }
        None => {}
    }
    psci::call(psci::PSCI_SYSTEM_RESET, 0, 0, 0);
    println!("hostile: {step} SYSTEM_RESET returned");
    report::attempt("psci", "system_reset", "returned", false);
}
