//! The sample store, the statistics and result lines, and the benchmarks that
//! run on CPU 0 alone: `hypercall`, `gic-trap`, `eoi`, `vmswitch` and the
//! `vmswitch-partner` loop.

use core::fmt;

use baremetal::console::Global;
use baremetal::psci::{self, PSCI_VERSION};
use baremetal::{cpu, gic, println, time};
use guest_abi::hypercall::{ARMHV_NOP, ARMHV_YIELD};

use crate::clock::Clock;
use crate::{Ctx, skip};

/// Most samples one result can have (`n=`).
pub const MAX_N: usize = 65536;
/// Sample sets: `io` keeps three (out, in, round trip) from one loop.
const SETS: usize = 3;
/// How long a wait for an interrupt or a flag may take before it is a failure.
pub const WAIT_MS: u64 = 1000;
/// `vmswitch`: how long to wait for the partner VM to show up.
const PARTNER_WAIT_MS: u64 = 2000;
/// `vmswitch-partner`: how long vmbench must have been gone before the partner ends.
const PARTNER_GONE_MS: u64 = 200;
/// SGI that `eoi` sends to its own CPU.
const SGI_SELF: u32 = 3;

#[repr(C, align(16))]
struct Store([u64; SETS * MAX_N]);

// Handed out once, by `take_store`.
static mut STORE: Store = Store([0; SETS * MAX_N]);
static STORE_TAKEN: Global<bool> = Global::new(false);

fn take_store() -> &'static mut [u64; SETS * MAX_N] {
    assert!(!STORE_TAKEN.get(), "sample store taken twice");
    STORE_TAKEN.set(true);
    let store = &raw mut STORE;
    // SAFETY: STORE_TAKEN makes this the only reference ever made to STORE, and
    // only CPU 0's main flow uses it (no handler touches it).
    unsafe { &mut (*store).0 }
}

/// The run's parameters and the sample store.
pub struct Runner {
    /// Timed samples per result (`n=`).
    pub n: usize,
    /// Untimed runs before them (`warmup=`).
    pub warmup: usize,
    /// The empty region's cost in the main clock's unit (set once measured).
    pub overhead: u64,
    store: &'static mut [u64; SETS * MAX_N],
}

impl Runner {
    pub fn new(n: usize, warmup: usize) -> Self {
        Runner { n, warmup, overhead: 0, store: take_store() }
    }

    /// Three sample sets of `n` each.
    pub fn sets(&mut self) -> [&mut [u64]; SETS] {
        let (a, rest) = self.store.split_at_mut(MAX_N);
        let (b, c) = rest.split_at_mut(MAX_N);
        let n = self.n;
        [&mut a[..n], &mut b[..n], &mut c[..n]]
    }

    /// `warmup` untimed, then `n` timed runs of `sample`, into set 0.
    pub fn collect(&mut self, mut sample: impl FnMut() -> u64) -> &mut [u64] {
        for _ in 0..self.warmup {
            sample();
        }
        let [set, ..] = self.sets();
        for s in set.iter_mut() {
            *s = sample();
        }
        set
    }
}

/// Sorts `samples` less `subtract` (floored at 0) and prints the result line,
/// with `extra` at its end.
pub fn report(name: &str, unit: &str, samples: &mut [u64], subtract: u64, extra: fmt::Arguments) {
    for s in samples.iter_mut() {
        *s = s.saturating_sub(subtract);
    }
    samples.sort_unstable();
    let n = samples.len();
    let (lo, hi) = (samples[(n - 1) / 2], samples[n / 2]);
    let median = lo + (hi - lo) / 2;
    let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
    let n128 = n as u128;
    let mean10 = (sum * 10 + n128 / 2) / n128;
    println!(
        "vmbench: result {name} unit={unit} n={n} min={} median={median} mean={}.{} max={}{extra}",
        samples[0],
        mean10 / 10,
        mean10 % 10,
        samples[n - 1],
    );
}

/// The empty timed region: prints its minimum and returns it (the overhead).
pub fn overhead<C: Clock>(r: &mut Runner) -> u64 {
    let overhead = r.collect(C::empty).iter().copied().min().unwrap_or(0);
    println!("vmbench: overhead unit={} {overhead}", C::UNIT);
    overhead
}

/// Xen's `xen_version` hypercall and its XENVER_version command (public/version.h), which
/// takes no buffer and returns the version: Xen's null hypercall.
const XEN_HYPERVISOR_XEN_VERSION: u64 = 17;
const XENVER_VERSION: u64 = 0;

/// `hypercall`: ARMHV_NOP, then PSCI_VERSION, through the PSCI conduit (`hvc`
/// under every hypervisor); under Xen also `xen_version`, Xen's own null call (ARMHV_NOP is
/// an SMCCC call Xen does not know, and times Xen's path for those).
pub fn hypercall<C: Clock>(r: &mut Runner, ctx: &Ctx) {
    let overhead = r.overhead;
    for (name, fid) in [("hypercall", ARMHV_NOP), ("hypercall-psci-version", PSCI_VERSION)] {
        let samples = r.collect(|| C::call(fid, ctx.smc).0);
        report(name, C::UNIT, samples, overhead, format_args!(""));
    }
    if ctx.xen {
        let samples = r.collect(|| C::xen_call(XEN_HYPERVISOR_XEN_VERSION, XENVER_VERSION).0);
        report("hypercall-xen-version", C::UNIT, samples, overhead, format_args!(""));
    }
}

/// `trap`: a trap to EL2 and straight back, nothing saved (the KVM/ARM paper's "Trap"), on an
/// armhv built with `trap-probe`, whose vector answers `hvc #0x7ea`. Elsewhere the call is a
/// full one and its x0 comes back SUCCESS: skipped, saying so.
pub fn trap<C: Clock>(r: &mut Runner) {
    const _: () = assert!(guest_abi::hypercall::TRAP_PROBE_HVC_IMM == 0x7ea);
    if C::trap_probe(ARMHV_NOP).1 != u64::from(ARMHV_NOP) {
        return skip("trap", format_args!("hvc #0x7ea was a call: armhv has no trap-probe build"));
    }
    let overhead = r.overhead;
    let samples = r.collect(|| C::trap_probe(ARMHV_NOP).0);
    report("trap", C::UNIT, samples, overhead, format_args!(""));
}

/// `gic-trap`: a 32-bit read of GICD_TYPER, emulated under a hypervisor.
pub fn gic_trap<C: Clock>(r: &mut Runner) {
    if !gic::present() {
        return skip("gic-trap", format_args!("no GIC in the device tree"));
    }
    let addr = gic::distributor() + gic::GICD_TYPER;
    let overhead = r.overhead;
    let samples = r.collect(|| C::read32(addr));
    report("gic-trap", C::UNIT, samples, overhead, format_args!(""));
}

/// PL011 UARTILPR, a register whose write changes nothing else (the IrDA low-power divisor).
const UARTILPR: u64 = 0x20;
/// UARTICR, the interrupt clear register: a write of 0 clears nothing. The SBSA generic UART
/// (Xen's vpl011) has no UARTILPR, so its console is written here instead.
const UARTICR: u64 = 0x44;

/// `pl011-write`: a 32-bit store of 0 to the console UART's UARTILPR (UARTICR on an SBSA
/// UART), which a hypervisor emulates: the cost of a trap to a simple device model.
pub fn pl011_write<C: Clock>(r: &mut Runner) {
    let register = if baremetal::console::uart_is_sbsa() { UARTICR } else { UARTILPR };
    let addr = baremetal::console::uart_base() + register;
    let overhead = r.overhead;
    let samples = r.collect(|| C::write32(addr, 0));
    report("pl011-write", C::UNIT, samples, overhead, format_args!(""));
}

/// Hundredths of (`delta` - `n` - 1) / `n`, rounded half away from zero.
fn exits_per_op_x100(delta: u64, n: usize) -> i64 {
    let extra = delta as i64 - n as i64 - 1;
    let n = n as i64;
    let x100 = extra * 100;
    if x100 >= 0 { (x100 + n / 2) / n } else { (x100 - n / 2) / n }
}

/// A value in hundredths as `<int>.<2 digits>`.
struct Hundredths(i64);

impl fmt::Display for Hundredths {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let v = self.0.unsigned_abs();
        write!(f, "{sign}{}.{:02}", v / 100, v % 100)
    }
}

/// `eoi` (virtual IRQ completion): with IRQs masked, an SGI to this CPU, seen
/// pending in ICC_HPPIR1_EL1 (GICv2: GICC_HPPIR), then timed: acknowledge +
/// complete, through the ICC_* system registers or the GICv2 CPU interface.
/// Under armhv also the exits the timed loop cost beyond its SGI writes.
pub fn eoi<C: Clock>(r: &mut Runner, ctx: &Ctx) {
    if !gic::present() {
        return skip("eoi", format_args!("no GIC in the device tree"));
    }
    let me = cpu::affinity();
    let gicc = (gic::version() == Some(gic::Version::V2)).then(gic::cpu_interface);
    let one = || {
        gic::send_sgi(SGI_SELF, me);
        let deadline = time::counter() + time::ms_to_ticks(WAIT_MS);
        while gic::highest_pending() != SGI_SELF {
            if time::passed(deadline) {
                panic!("eoi: SGI {SGI_SELF} never became pending");
            }
            cpu::yield_now();
        }
        let (elapsed, iar) = match gicc {
            Some(gicc) => C::ack_eoi_mmio(gicc),
            None => C::ack_eoi(),
        };
        let intid = gic::intid_of(iar);
        if intid != SGI_SELF {
            panic!("eoi: acknowledged INTID {intid}, expected SGI {SGI_SELF}");
        }
        elapsed
    };
    for _ in 0..r.warmup {
        one();
    }
    let before = if ctx.armhv { psci::vm_exits() } else { None };
    let (n, overhead) = (r.n, r.overhead);
    let [samples, ..] = r.sets();
    for s in samples.iter_mut() {
        *s = one();
    }
    let after = if ctx.armhv { psci::vm_exits() } else { None };
    match (before, after) {
        (Some(b), Some(a)) => {
            let x100 = exits_per_op_x100(a.wrapping_sub(b), n);
            report(
                "eoi",
                C::UNIT,
                samples,
                overhead,
                format_args!(" exits-per-op={}", Hundredths(x100)),
            )
        }
        _ => report("eoi", C::UNIT, samples, overhead, format_args!("")),
    }
}

/// `vmswitch`: ARMHV_YIELD round trips to a partner VM on this physical CPU,
/// reported per switch (half a round trip).
pub fn vmswitch<C: Clock>(r: &mut Runner, ctx: &Ctx) {
    const NAME: &str = "vmswitch";
    if !ctx.armhv {
        return skip(NAME, format_args!("not armhv (no ARMHV_YIELD)"));
    }
    let deadline = time::counter() + time::ms_to_ticks(PARTNER_WAIT_MS);
    loop {
        let [x0, x1, ..] = psci::call(ARMHV_YIELD, 0, 0, 0);
        if x0 != 0 {
            return skip(NAME, format_args!("ARMHV_YIELD not supported ({})", x0 as i64));
        }
        if x1 == 1 {
            break;
        }
        if time::passed(deadline) {
            return skip(NAME, format_args!("no partner VM on this CPU"));
        }
    }
    let mut gone = false;
    let overhead = r.overhead;
    let samples = r.collect(|| {
        let (elapsed, _, x1) = C::call(ARMHV_YIELD, ctx.smc);
        gone |= x1 != 1;
        elapsed.saturating_sub(overhead) / 2
    });
    // Warm-up yields count too: the partner must stay for the whole loop.
    if gone {
        return skip(NAME, format_args!("partner went away"));
    }
    report(NAME, C::UNIT, samples, 0, format_args!(""));
}

/// `vmswitch-partner`: yields forever; once vmbench has been seen and then
/// absent for PARTNER_GONE_MS, powers the VM off.
pub fn partner() -> ! {
    let mut seen = false;
    let mut absent_since = None;
    loop {
        let [x0, x1, ..] = psci::call(ARMHV_YIELD, 0, 0, 0);
        if x0 != 0 {
            println!("vmbench: partner: not armhv");
            psci::system_off();
        }
        if x1 == 1 {
            seen = true;
            absent_since = None;
        } else if seen {
            let now = time::counter();
            let since = *absent_since.get_or_insert(now);
            if now.wrapping_sub(since) >= time::ms_to_ticks(PARTNER_GONE_MS) {
                println!("vmbench: partner done");
                psci::system_off();
            }
        }
    }
}
