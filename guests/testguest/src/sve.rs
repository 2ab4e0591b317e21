//! `zcr=LEN` and `sve=K`: SVE state across hypervisor yields (the Z, P and FFR registers at
//! the vector length the hypervisor allows, and ZCR_EL1).

use crate::println;
use crate::time;
use baremetal::psci::{self, Conduit};
use guest_abi::hypercall::ARMHV_YIELD;

/// `sve=K`: yields, each followed by ~1 ms of spinning, as `fp=K`.
const ROUNDS: u64 = 200;
/// The longest Z register (2048 bits), and a predicate register at that length.
const ZMAX: usize = 256;
const PMAX: usize = ZMAX / 8;

/// Z0-Z31 and P0-P15, FFR, as `str z<n>, [x, #n, mul vl]` / `str p<n>, [x, #n, mul vl]` lay
/// them out at the current vector length. In memory, not on the 16 KiB stack.
#[repr(C, align(256))]
struct Regs {
    z: [u8; 32 * ZMAX],
    p: [u8; 17 * PMAX],
}

const ZERO: Regs = Regs { z: [0; 32 * ZMAX], p: [0; 17 * PMAX] };

/// What `sve=K` writes to the registers and what it finds in them.
struct Buffers(core::cell::UnsafeCell<[Regs; 2]>);
// SAFETY: only CPU 0 runs steps, one at a time: the buffers are never used concurrently.
unsafe impl Sync for Buffers {}
static BUFFERS: Buffers = Buffers(core::cell::UnsafeCell::new([ZERO, ZERO]));

/// ID_AA64PFR0_EL1.SVE (as the hypervisor shows it), and ID_AA64ZFR0_EL1.
fn sve_ids() -> (u64, u64) {
    let (pfr0, zfr0): (u64, u64);
    // SAFETY: reading ID registers has no side effects (under a hypervisor they trap and
    // return its view); ID_AA64ZFR0_EL1 reads as zero where SVE is absent.
    unsafe {
        core::arch::asm!("mrs {}, id_aa64pfr0_el1", out(reg) pfr0, options(nomem, nostack));
        core::arch::asm!("mrs {}, s3_0_c0_c4_4", out(reg) zfr0, options(nomem, nostack));
    }
    ((pfr0 >> 32) & 0xf, zfr0)
}

/// Turns SVE on at EL1 (CPACR_EL1.ZEN = 0b11), if the CPU says it has it.
fn enable() -> bool {
    if sve_ids().0 == 0 {
        println!("testguest: sve absent");
        return false;
    }
    // SAFETY: CPACR_EL1.ZEN only stops SVE instructions from trapping to EL1.
    unsafe {
        core::arch::asm!(
            "mrs {t}, cpacr_el1",
            "orr {t}, {t}, #(3 << 16)",
            "msr cpacr_el1, {t}",
            "isb",
            t = out(reg) _,
            options(nomem, nostack),
        );
    }
    true
}

/// The vector length in bytes (RDVL) and ZCR_EL1.
fn vl_and_zcr() -> (usize, u64) {
    let (vl, zcr): (usize, u64);
    // SAFETY: SVE is enabled (`enable`); both only read.
    unsafe {
        core::arch::asm!(
            ".arch_extension sve",
            "rdvl {vl}, #1",
            "mrs {zcr}, s3_0_c1_c2_0",
            vl = out(reg) vl,
            zcr = out(reg) zcr,
            options(nomem, nostack),
        );
    }
    (vl, zcr)
}

/// `zcr=LEN`: writes ZCR_EL1.LEN (the guest's vector length choice, bounded by the
/// hypervisor's): `testguest: zcr len LEN: vl <bits> bits`.
pub fn zcr(len: u64) {
    if !enable() {
        return;
    }
    // SAFETY: SVE is enabled; ZCR_EL1 only sets this EL's vector length.
    unsafe {
        core::arch::asm!(
            "msr s3_0_c1_c2_0, {}",
            "isb",
            in(reg) len & 0xf,
            options(nomem, nostack),
        );
    }
    let (vl, _) = vl_and_zcr();
    println!("testguest: zcr len {len}: vl {} bits", vl * 8);
}

/// Byte `i` of Z<n> for pattern K: different in every register, every byte and every K.
fn z_byte(k: u64, n: usize, i: usize) -> u8 {
    (k as usize * 97 + n * 31 + i * 7 + (i >> 5)) as u8 ^ 0x5a
}

fn p_byte(k: u64, n: usize, i: usize) -> u8 {
    (k as usize * 41 + n * 13 + i * 3 + 1) as u8
}

/// `sve=K`: reports the vector length and what SVE registers it starts with (zero beyond the
/// V registers: nothing of another VM), fills Z0-Z31, P0-P15 and FFR with a pattern from K,
/// yields to the hypervisor and spins ~1 ms, 200 times, then checks every byte and that
/// the vector length and ZCR_EL1 are unchanged:
/// `testguest: sve vl <bits> bits, zcr <hex>, zfr0 <hex>`,
/// `testguest: sve initial state clean` (or `... dirty in <reg> byte <i>: <hex>`),
/// `testguest: sve pattern K intact` (or `... corrupted in <reg> byte <i>: <hex>`).
pub fn sve(k: u64) {
    if !enable() {
        return;
    }
    let (vl, zcr) = vl_and_zcr();
    println!("testguest: sve vl {} bits, zcr {zcr:#x}, zfr0 {:#x}", vl * 8, sve_ids().1);
    let pl = vl / 8;
    // SAFETY: only CPU 0 runs steps, one at a time: nothing else uses the buffers.
    let [expected, found] = unsafe { &mut *BUFFERS.0.get() };

    // What the registers hold before this step writes any: the upper parts of the Z
    // registers and the predicates are zero, whatever another VM left on this CPU. (The low
    // 128 bits are the V registers, which this guest's own code used.)
    store(found);
    let dirty = (0..32)
        .flat_map(|n| (16..vl).map(move |i| (n, i)))
        .map(|(n, i)| (Reg::Z(n), i, found.z[n * vl + i]))
        .chain((0..17 * pl).map(|i| (Reg::P(i / pl), i % pl, found.p[i])))
        .find(|&(_, _, b)| b != 0);
    match dirty {
        None => println!("testguest: sve initial state clean"),
        Some((r, i, b)) => println!("testguest: sve initial state dirty in {r} byte {i}: {b:#x}"),
    }

    for n in 0..32 {
        for i in 0..vl {
            expected.z[n * vl + i] = z_byte(k, n, i);
        }
    }
    for n in 0..16 {
        for i in 0..pl {
            expected.p[n * pl + i] = p_byte(k, n, i);
        }
    }
    // FFR must hold a monotonic predicate (ones, then zeros) for WRFFR to restore it.
    let ones = (k as usize * 5 + 3) % (pl * 8);
    for i in 0..pl {
        let bits = ones.saturating_sub(i * 8).min(8);
        expected.p[16 * pl + i] = ((1u16 << bits) - 1) as u8;
    }
    *found = ZERO;
    let smc = u64::from(psci::conduit() == Conduit::Smc);
    // SAFETY: reads `expected` and writes `found` (Regs, 256-byte aligned, room for the
    // longest vector length); the hypercall is ARMHV_YIELD, which changes no memory. The
    // registers the SMCCC call and the loop may change are declared (clobber_abi("C"): x0-x17,
    // x30, v0-v31); the compiler uses no SVE register, so the Z upper halves, P and FFR are
    // this block's alone.
    unsafe {
        core::arch::asm!(
            ".arch_extension sve",
            "ldr p0, [x26, #16, mul vl]",
            "wrffr p0.b",
            "ldr p0, [x26, #0, mul vl]",
            "ldr p1, [x26, #1, mul vl]",
            "ldr p2, [x26, #2, mul vl]",
            "ldr p3, [x26, #3, mul vl]",
            "ldr p4, [x26, #4, mul vl]",
            "ldr p5, [x26, #5, mul vl]",
            "ldr p6, [x26, #6, mul vl]",
            "ldr p7, [x26, #7, mul vl]",
            "ldr p8, [x26, #8, mul vl]",
            "ldr p9, [x26, #9, mul vl]",
            "ldr p10, [x26, #10, mul vl]",
            "ldr p11, [x26, #11, mul vl]",
            "ldr p12, [x26, #12, mul vl]",
            "ldr p13, [x26, #13, mul vl]",
            "ldr p14, [x26, #14, mul vl]",
            "ldr p15, [x26, #15, mul vl]",
            "ldr z0, [x20, #0, mul vl]",
            "ldr z1, [x20, #1, mul vl]",
            "ldr z2, [x20, #2, mul vl]",
            "ldr z3, [x20, #3, mul vl]",
            "ldr z4, [x20, #4, mul vl]",
            "ldr z5, [x20, #5, mul vl]",
            "ldr z6, [x20, #6, mul vl]",
            "ldr z7, [x20, #7, mul vl]",
            "ldr z8, [x20, #8, mul vl]",
            "ldr z9, [x20, #9, mul vl]",
            "ldr z10, [x20, #10, mul vl]",
            "ldr z11, [x20, #11, mul vl]",
            "ldr z12, [x20, #12, mul vl]",
            "ldr z13, [x20, #13, mul vl]",
            "ldr z14, [x20, #14, mul vl]",
            "ldr z15, [x20, #15, mul vl]",
            "ldr z16, [x20, #16, mul vl]",
            "ldr z17, [x20, #17, mul vl]",
            "ldr z18, [x20, #18, mul vl]",
            "ldr z19, [x20, #19, mul vl]",
            "ldr z20, [x20, #20, mul vl]",
            "ldr z21, [x20, #21, mul vl]",
            "ldr z22, [x20, #22, mul vl]",
            "ldr z23, [x20, #23, mul vl]",
            "ldr z24, [x20, #24, mul vl]",
            "ldr z25, [x20, #25, mul vl]",
            "ldr z26, [x20, #26, mul vl]",
            "ldr z27, [x20, #27, mul vl]",
            "ldr z28, [x20, #28, mul vl]",
            "ldr z29, [x20, #29, mul vl]",
            "ldr z30, [x20, #30, mul vl]",
            "ldr z31, [x20, #31, mul vl]",
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
            "mrs x1, cntvct_el0",
            "add x1, x1, x21",
            "5:",
            "isb",
            "mrs x2, cntvct_el0",
            "cmp x2, x1",
            "b.lo 5b",
            "subs x24, x24, #1",
            "b.ne 2b",
            "str z0, [x25, #0, mul vl]",
            "str z1, [x25, #1, mul vl]",
            "str z2, [x25, #2, mul vl]",
            "str z3, [x25, #3, mul vl]",
            "str z4, [x25, #4, mul vl]",
            "str z5, [x25, #5, mul vl]",
            "str z6, [x25, #6, mul vl]",
            "str z7, [x25, #7, mul vl]",
            "str z8, [x25, #8, mul vl]",
            "str z9, [x25, #9, mul vl]",
            "str z10, [x25, #10, mul vl]",
            "str z11, [x25, #11, mul vl]",
            "str z12, [x25, #12, mul vl]",
            "str z13, [x25, #13, mul vl]",
            "str z14, [x25, #14, mul vl]",
            "str z15, [x25, #15, mul vl]",
            "str z16, [x25, #16, mul vl]",
            "str z17, [x25, #17, mul vl]",
            "str z18, [x25, #18, mul vl]",
            "str z19, [x25, #19, mul vl]",
            "str z20, [x25, #20, mul vl]",
            "str z21, [x25, #21, mul vl]",
            "str z22, [x25, #22, mul vl]",
            "str z23, [x25, #23, mul vl]",
            "str z24, [x25, #24, mul vl]",
            "str z25, [x25, #25, mul vl]",
            "str z26, [x25, #26, mul vl]",
            "str z27, [x25, #27, mul vl]",
            "str z28, [x25, #28, mul vl]",
            "str z29, [x25, #29, mul vl]",
            "str z30, [x25, #30, mul vl]",
            "str z31, [x25, #31, mul vl]",
            "str p0, [x27, #0, mul vl]",
            "str p1, [x27, #1, mul vl]",
            "str p2, [x27, #2, mul vl]",
            "str p3, [x27, #3, mul vl]",
            "str p4, [x27, #4, mul vl]",
            "str p5, [x27, #5, mul vl]",
            "str p6, [x27, #6, mul vl]",
            "str p7, [x27, #7, mul vl]",
            "str p8, [x27, #8, mul vl]",
            "str p9, [x27, #9, mul vl]",
            "str p10, [x27, #10, mul vl]",
            "str p11, [x27, #11, mul vl]",
            "str p12, [x27, #12, mul vl]",
            "str p13, [x27, #13, mul vl]",
            "str p14, [x27, #14, mul vl]",
            "str p15, [x27, #15, mul vl]",
            "rdffr p0.b",
            "str p0, [x27, #16, mul vl]",
            in("x20") expected.z.as_ptr(),
            in("x21") time::ms_to_ticks(1),
            in("x22") smc,
            in("x23") u64::from(ARMHV_YIELD),
            inout("x24") ROUNDS => _,
            in("x25") found.z.as_mut_ptr(),
            in("x26") expected.p.as_ptr(),
            in("x27") found.p.as_mut_ptr(),
            clobber_abi("C"),
            options(nostack),
        );
    }
    let (vl_after, zcr_after) = vl_and_zcr();
    let bad = (0..32 * vl)
        .map(|i| (Reg::Z(i / vl), i % vl, i))
        .find(|&(_, _, i)| found.z[i] != expected.z[i])
        .map(|(r, b, i)| (r, b, found.z[i]))
        .or_else(|| {
            (0..17 * pl)
                .find(|&i| found.p[i] != expected.p[i])
                .map(|i| (Reg::P(i / pl), i % pl, found.p[i]))
        });
    match bad {
        _ if (vl_after, zcr_after) != (vl, zcr) => println!(
            "testguest: sve pattern {k} corrupted: vl {} bits, zcr {zcr_after:#x} after the yields",
            vl_after * 8
        ),
        None => println!("testguest: sve pattern {k} intact"),
        Some((r, i, b)) => println!("testguest: sve pattern {k} corrupted in {r} byte {i}: {b:#x}"),
    }
}

/// Stores Z0-Z31, P0-P15 and FFR into `regs` at the current vector length.
fn store(regs: &mut Regs) {
    // SAFETY: writes only `regs` (room for the longest vector length); P0 carries FFR and is
    // loaded back from what was stored of it, so no register changes.
    unsafe {
        core::arch::asm!(
            ".arch_extension sve",
            "str z0, [x0, #0, mul vl]",
            "str z1, [x0, #1, mul vl]",
            "str z2, [x0, #2, mul vl]",
            "str z3, [x0, #3, mul vl]",
            "str z4, [x0, #4, mul vl]",
            "str z5, [x0, #5, mul vl]",
            "str z6, [x0, #6, mul vl]",
            "str z7, [x0, #7, mul vl]",
            "str z8, [x0, #8, mul vl]",
            "str z9, [x0, #9, mul vl]",
            "str z10, [x0, #10, mul vl]",
            "str z11, [x0, #11, mul vl]",
            "str z12, [x0, #12, mul vl]",
            "str z13, [x0, #13, mul vl]",
            "str z14, [x0, #14, mul vl]",
            "str z15, [x0, #15, mul vl]",
            "str z16, [x0, #16, mul vl]",
            "str z17, [x0, #17, mul vl]",
            "str z18, [x0, #18, mul vl]",
            "str z19, [x0, #19, mul vl]",
            "str z20, [x0, #20, mul vl]",
            "str z21, [x0, #21, mul vl]",
            "str z22, [x0, #22, mul vl]",
            "str z23, [x0, #23, mul vl]",
            "str z24, [x0, #24, mul vl]",
            "str z25, [x0, #25, mul vl]",
            "str z26, [x0, #26, mul vl]",
            "str z27, [x0, #27, mul vl]",
            "str z28, [x0, #28, mul vl]",
            "str z29, [x0, #29, mul vl]",
            "str z30, [x0, #30, mul vl]",
            "str z31, [x0, #31, mul vl]",
            "str p0, [x1, #0, mul vl]",
            "str p1, [x1, #1, mul vl]",
            "str p2, [x1, #2, mul vl]",
            "str p3, [x1, #3, mul vl]",
            "str p4, [x1, #4, mul vl]",
            "str p5, [x1, #5, mul vl]",
            "str p6, [x1, #6, mul vl]",
            "str p7, [x1, #7, mul vl]",
            "str p8, [x1, #8, mul vl]",
            "str p9, [x1, #9, mul vl]",
            "str p10, [x1, #10, mul vl]",
            "str p11, [x1, #11, mul vl]",
            "str p12, [x1, #12, mul vl]",
            "str p13, [x1, #13, mul vl]",
            "str p14, [x1, #14, mul vl]",
            "str p15, [x1, #15, mul vl]",
            "rdffr p0.b",
            "str p0, [x1, #16, mul vl]",
            "ldr p0, [x1, #0, mul vl]",
            in("x0") regs.z.as_mut_ptr(),
            in("x1") regs.p.as_mut_ptr(),
            options(nostack),
        );
    }
}

#[derive(Clone, Copy)]
enum Reg {
    Z(usize),
    /// P0-P15, and 16 for FFR.
    P(usize),
}

impl core::fmt::Display for Reg {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        match *self {
            Reg::Z(n) => write!(f, "z{n}"),
            Reg::P(16) => f.write_str("ffr"),
            Reg::P(n) => write!(f, "p{n}"),
        }
    }
}
