//! The two clocks a measurement can use, and the timed regions built on them.
//!
//! Every timed region is one `asm!` block, `isb; mrs t0, <counter>; isb; <operation>;
//! isb; mrs t1, <counter>; isb`, so no compiler-generated instruction lands inside it and
//! the empty region (`empty`) costs exactly what every other region adds around its
//! operation: that is the overhead subtracted from results.

use core::arch::asm;

use baremetal::boot;
use baremetal::gic::v2;

/// PMU cycle counter enable bits (Arm ARM D13, PMU registers).
const PMCR_E: u64 = 1 << 0;
/// PMCR_EL0.LC: the cycle counter overflows at 64 bits, not 32.
const PMCR_LC: u64 = 1 << 6;
/// PMCNTENSET_EL0.C: enable the cycle counter.
const PMCNTENSET_C: u64 = 1 << 31;
/// PMCCFILTR_EL0.NSH: count at EL2 too, so time spent in the hypervisor counts.
const PMCCFILTR_NSH: u64 = 1 << 27;

/// A counter and the timed regions read with it.
pub trait Clock {
    /// `cycles` or `ticks`.
    const UNIT: &'static str;
    /// The counter now, with `isb` before and after.
    fn now() -> u64;
    /// An empty region: two back-to-back reads.
    fn empty() -> u64;
    /// An SMCCC call (`hvc #0`, or `smc #0` if `smc`) with `w0 = fid`: (elapsed, x0, x1).
    fn call(fid: u32, smc: bool) -> (u64, u64, u64);
    /// `hvc #0x7ea` (`TRAP_PROBE_HVC_IMM`) with `w0 = fid`: (elapsed, x0, x1). A `trap-probe`
    /// armhv returns from its vector with the registers untouched; any other takes a call.
    fn trap_probe(fid: u32) -> (u64, u64, u64);
    /// A Xen hypercall, `hvc #0xea1` with the call's number in x16 and its first argument in
    /// x0 (Xen's arm64 ABI): (elapsed, x0).
    fn xen_call(op: u64, arg: u64) -> (u64, u64);
    /// A 32-bit load from the device register at `addr`.
    fn read32(addr: u64) -> u64;
    /// A 32-bit store of `value` to the device register at `addr`.
    fn write32(addr: u64, value: u32) -> u64;
    /// Acknowledge (ICC_IAR1_EL1) and complete (ICC_EOIR1_EL1) the highest-priority
    /// pending interrupt: (elapsed, the IAR value). EOImode 0: no ICC_DIR_EL1.
    fn ack_eoi() -> (u64, u64);
    /// The same on a GICv2, through its CPU interface at `gicc`: a load of GICC_IAR and a
    /// store of that value to GICC_EOIR. EOImode 0: no GICC_DIR.
    fn ack_eoi_mmio(gicc: u64) -> (u64, u64);
    /// Reads the counter, then stores `value` to the device register at `addr`:
    /// the counter value (the region's end is taken by someone else).
    fn stamp_store32(addr: u64, value: u32) -> u64;
}

/// One SMCCC call between two counter reads, with the conduit instruction `$insn`.
macro_rules! timed_call {
    ($reg:literal, $insn:literal, $fid:expr) => {{
        let (t0, t1, x0, x1): (u64, u64, u64, u64);
        // SAFETY: an SMCCC call changes no Rust-visible memory; x2..x17 are declared
        // clobbered (SMCCC 1.0 allowed the callee to use x4..x17). t0 is an early output,
        // so it gets a register of its own that survives the call.
        unsafe {
            asm!(
                "isb",
                concat!("mrs {t0}, ", $reg),
                "isb",
                $insn,
                "isb",
                concat!("mrs {t1}, ", $reg),
                "isb",
                t0 = out(reg) t0,
                t1 = lateout(reg) t1,
                inout("x0") u64::from($fid) => x0,
                inout("x1") 0u64 => x1,
                inout("x2") 0u64 => _,
                inout("x3") 0u64 => _,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
                out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                options(nostack),
            )
        };
        (t1.wrapping_sub(t0), x0, x1)
    }};
}

/// Implements `Clock` for `$name` reading the system register `$reg`.
macro_rules! clock {
    ($name:ident, $reg:literal, $unit:literal) => {
        pub struct $name;

        impl Clock for $name {
            const UNIT: &'static str = $unit;

            #[inline(always)]
            fn now() -> u64 {
                let v: u64;
                // SAFETY: reading the counter has no side effects. No `nomem`: the
                // read stays in program order with the memory accesses around it.
                unsafe { asm!("isb", concat!("mrs {v}, ", $reg), "isb", v = out(reg) v, options(nostack)) };
                v
            }

            #[inline(always)]
            fn empty() -> u64 {
                let (t0, t1): (u64, u64);
                // SAFETY: two counter reads, no side effects.
                unsafe {
                    asm!(
                        "isb",
                        concat!("mrs {t0}, ", $reg),
                        "isb",
                        "isb",
                        concat!("mrs {t1}, ", $reg),
                        "isb",
                        t0 = out(reg) t0,
                        t1 = lateout(reg) t1,
                        options(nostack),
                    )
                };
                t1.wrapping_sub(t0)
            }

            #[inline(always)]
            fn call(fid: u32, smc: bool) -> (u64, u64, u64) {
                if smc { timed_call!($reg, "smc #0", fid) } else { timed_call!($reg, "hvc #0", fid) }
            }

            #[inline(always)]
            fn trap_probe(fid: u32) -> (u64, u64, u64) {
                timed_call!($reg, "hvc #0x7ea", fid)
            }

            #[inline(always)]
            fn xen_call(op: u64, arg: u64) -> (u64, u64) {
                let (t0, t1, x0): (u64, u64, u64);
                // SAFETY: the caller names a call that writes no guest memory; Xen may
                // clobber x1..x4 and x16 (its debug builds do, on purpose), declared here.
                unsafe {
                    asm!(
                        "isb",
                        concat!("mrs {t0}, ", $reg),
                        "isb",
                        "hvc #0xea1",
                        "isb",
                        concat!("mrs {t1}, ", $reg),
                        "isb",
                        t0 = out(reg) t0,
                        t1 = lateout(reg) t1,
                        inout("x0") arg => x0,
                        inout("x16") op => _,
                        out("x1") _, out("x2") _, out("x3") _, out("x4") _,
                        options(nostack),
                    )
                };
                (t1.wrapping_sub(t0), x0)
            }

            #[inline(always)]
            fn read32(addr: u64) -> u64 {
                let (t0, t1): (u64, u64);
                // SAFETY: one 32-bit load of a device register the caller names, which
                // has no read side effects; no Rust memory is touched.
                unsafe {
                    asm!(
                        "isb",
                        concat!("mrs {t0}, ", $reg),
                        "isb",
                        "ldr {v:w}, [{a}]",
                        "isb",
                        concat!("mrs {t1}, ", $reg),
                        "isb",
                        t0 = out(reg) t0,
                        t1 = lateout(reg) t1,
                        a = in(reg) addr,
                        v = out(reg) _,
                        options(nostack),
                    )
                };
                t1.wrapping_sub(t0)
            }

            #[inline(always)]
            fn ack_eoi() -> (u64, u64) {
                let (t0, t1, iar): (u64, u64, u64);
                // SAFETY: acknowledging and completing an interrupt changes only the
                // GIC's state for it; IRQs are masked, so no handler runs.
                unsafe {
                    asm!(
                        "isb",
                        concat!("mrs {t0}, ", $reg),
                        "isb",
                        "mrs {iar}, icc_iar1_el1",
                        "msr icc_eoir1_el1, {iar}",
                        "isb",
                        concat!("mrs {t1}, ", $reg),
                        "isb",
                        t0 = out(reg) t0,
                        t1 = lateout(reg) t1,
                        iar = out(reg) iar,
                        options(nostack),
                    )
                };
                (t1.wrapping_sub(t0), iar)
            }

            #[inline(always)]
            fn ack_eoi_mmio(gicc: u64) -> (u64, u64) {
                let (t0, t1, iar): (u64, u64, u32);
                // SAFETY: a load of GICC_IAR and a store to GICC_EOIR of the CPU interface
                // the caller names: they change only the GIC's state for the interrupt;
                // IRQs are masked, so no handler runs. No Rust memory is touched.
                unsafe {
                    asm!(
                        "isb",
                        concat!("mrs {t0}, ", $reg),
                        "isb",
                        "ldr {iar:w}, [{c}, #{iar_off}]",
                        "str {iar:w}, [{c}, #{eoir_off}]",
                        "isb",
                        concat!("mrs {t1}, ", $reg),
                        "isb",
                        t0 = out(reg) t0,
                        t1 = lateout(reg) t1,
                        iar = out(reg) iar,
                        c = in(reg) gicc,
                        iar_off = const v2::GICC_IAR,
                        eoir_off = const v2::GICC_EOIR,
                        options(nostack),
                    )
                };
                (t1.wrapping_sub(t0), u64::from(iar))
            }

            #[inline(always)]
            fn write32(addr: u64, value: u32) -> u64 {
                let (t0, t1): (u64, u64);
                // SAFETY: one 32-bit store to a device register the caller names, one whose
                // write has no effect beyond the register; no Rust memory is touched.
                unsafe {
                    asm!(
                        "isb",
                        concat!("mrs {t0}, ", $reg),
                        "isb",
                        "str {v:w}, [{a}]",
                        "isb",
                        concat!("mrs {t1}, ", $reg),
                        "isb",
                        t0 = out(reg) t0,
                        t1 = lateout(reg) t1,
                        a = in(reg) addr,
                        v = in(reg) value,
                        options(nostack),
                    )
                };
                t1.wrapping_sub(t0)
            }

            #[inline(always)]
            fn stamp_store32(addr: u64, value: u32) -> u64 {
                let t0: u64;
                // SAFETY: one 32-bit store to a device register the caller names; the
                // device may then write guest memory it was given (a virtqueue), which
                // Rust reads only through volatile accesses.
                unsafe {
                    asm!(
                        "dsb sy",
                        "isb",
                        concat!("mrs {t0}, ", $reg),
                        "isb",
                        "str {v:w}, [{a}]",
                        t0 = out(reg) t0,
                        a = in(reg) addr,
                        v = in(reg) value,
                        options(nostack),
                    )
                };
                t0
            }
        }
    };
}

clock!(Pmu, "pmccntr_el0", "cycles");
clock!(Cntvct, "cntvct_el0", "ticks");

/// The clock the IRQ handler stamps with: `now()` of the PMU or CNTVCT.
pub fn now(pmu: bool) -> u64 {
    if pmu { Pmu::now() } else { Cntvct::now() }
}

/// Turns the PMU cycle counter on if ID_AA64DFR0_EL1.PMUVer says there is an
/// architected PMU, and checks that it counts. False: use CNTVCT.
pub fn enable_pmu() -> bool {
    let dfr0: u64;
    // SAFETY: reading an ID register has no side effects.
    unsafe { asm!("mrs {v}, id_aa64dfr0_el1", v = out(reg) dfr0, options(nomem, nostack)) };
    let pmuver = (dfr0 >> 8) & 0xf;
    if pmuver == 0 || pmuver == 0xf {
        return false;
    }
    // A hypervisor may show the PMU in the ID register and still refuse some of its
    // registers: Xen 4.17 takes PMCR_EL0 and PMCNTENSET_EL0 but makes PMCCFILTR_EL0
    // undefined. Each access is probed, and a refused one means CNTVCT.
    let mut pmcr: u64 = 0;
    let read = boot::probe(|| {
        // SAFETY: with an architected PMU the register exists at EL1; one
        // instruction, which `probe` skips if it faults; it only configures this
        // CPU's event counters. The same holds for the three writes below.
        unsafe { asm!("mrs {v}, pmcr_el0", v = inout(reg) pmcr, options(nomem, nostack)) }
    });
    let pmcr = pmcr | PMCR_E | PMCR_LC;
    let start = || {
        boot::probe(|| {
            // SAFETY: as above.
            unsafe { asm!("msr pmcr_el0, {v}", v = in(reg) pmcr, options(nomem, nostack)) }
        })
    };
    let enable = || {
        boot::probe(|| {
            // SAFETY: as above.
            unsafe {
                asm!("msr pmcntenset_el0, {v}", v = in(reg) PMCNTENSET_C, options(nomem, nostack))
            }
        })
    };
    let filter = || {
        boot::probe(|| {
            // SAFETY: as above.
            unsafe {
                asm!("msr pmccfiltr_el0, {v}", v = in(reg) PMCCFILTR_NSH, options(nomem, nostack))
            }
        })
    };
    if read.and_then(|()| start()).and_then(|()| enable()).and_then(|()| filter()).is_err() {
        return false;
    }
    // SAFETY: a barrier only.
    unsafe { asm!("isb", options(nomem, nostack)) };
    let before = Pmu::now();
    for i in 0..1000u32 {
        core::hint::black_box(i);
    }
    Pmu::now() > before
}
