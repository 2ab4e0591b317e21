//! vmbench: the seven ARM virtualization microbenchmarks of Dall et al., ISCA 2016
//! ("ARM Virtualization: Performance and Architectural Implications", Table II), run
//! inside a VM: hypercall, interrupt-controller trap, virtual IPI, virtual IRQ
//! completion, VM switch, and I/O latency out and in.
//!
//! A bare-metal EL1 program with an arm64 Linux Image header (`baremetal` crate, shared
//! with testguest) that learns the machine from the device tree: the GIC (v3 or v2), the PL011
//! (`/chosen/stdout-path`), the PSCI conduit, the CPUs and the `virtio,mmio` nodes. So
//! the same binary runs on plain `qemu-system-aarch64 -M virt,gic-version=3` (or
//! `gic-version=2`; no hypervisor), under armhv, and under other hypervisors.
//!
//! `/chosen/bootargs`: `n=N` timed samples per result (default 10000, at most 65536),
//! `warmup=W` untimed runs before them (default 1000), then the benchmarks to run, in
//! order; none named: `hypercall gic-trap pl011-write ipi eoi io-out io-in`. `vmswitch`,
//! `vmswitch-partner` and `trap` run only when named.
//!
//! ## Clock
//! The PMU cycle counter (PMCCNTR_EL0, counting at EL2 too: PMCCFILTR_EL0.NSH) if
//! ID_AA64DFR0_EL1.PMUVer shows an architected PMU, its registers can be written (Xen
//! refuses PMCCFILTR_EL0) and the counter advances, unit
//! `cycles`; else the virtual counter CNTVCT_EL0, unit `ticks` at CNTFRQ_EL0. Every
//! timed region is `isb; mrs; isb; <operation>; isb; mrs; isb` (`clock.rs`). The
//! empty region's minimum over `warmup` + `n` runs is the overhead, subtracted
//! (floored at 0) from each sample of a region bracketed by two reads on one CPU:
//! hypercall, trap, gic-trap, pl011-write, eoi, vmswitch, io-roundtrip. `ipi` (two CPUs) always uses
//! CNTVCT_EL0 and io-out/io-in (one stamp taken by armhv) get no subtraction.
//!
//! ## Benchmarks
//! | name         | one sample                                                               |
//! |--------------|--------------------------------------------------------------------------|
//! | `hypercall`  | `hvc #0` round trip, w0 = ARMHV_NOP (NOT_SUPPORTED elsewhere); then      |
//! |              | `hypercall-psci-version`: PSCI_VERSION (both through the DT's conduit);  |
//! |              | under Xen (its SMCCC UID) `hypercall-xen-version`: `hvc #0xea1`,         |
//! |              | x16 = xen_version, x0 = XENVER_version, Xen's null hypercall             |
//! | `trap`       | `hvc #0x7ea`, w0 = ARMHV_NOP, which a `trap-probe` armhv answers in its  |
//! |              | vector (a bare trap); skipped where it comes back as a call, and where   |
//! |              | the hypervisor is not armhv (Xen refuses the immediate)                  |
//! | `gic-trap`   | a 32-bit read of GICD_TYPER (emulated under a hypervisor)                |
//! | `pl011-write`| a 32-bit write of 0 to the console PL011's UARTILPR (emulated under a    |
//! |              | hypervisor; changes nothing else); on an SBSA UART (Xen's vpl011), which |
//! |              | has no UARTILPR, to UARTICR (clears nothing)                             |
//! | `ipi`        | CPU 0 stamps, writes ICC_SGI1R_EL1 (GICv2: GICD_SGIR) for CPU 1, which   |
//! |              | spins with IRQs unmasked; CPU 1's handler stamps first thing (CNTVCT_EL0,|
//! |              | ticks)                                                                   |
//! | `eoi`        | IRQs masked, an SGI to itself seen pending in ICC_HPPIR1_EL1, then timed:|
//! |              | read ICC_IAR1_EL1 + write ICC_EOIR1_EL1 (EOImode 0); on a GICv2 the same |
//! |              | through GICC_HPPIR, GICC_IAR and GICC_EOIR; under armhv                  |
//! |              | `exits-per-op` = (ARMHV_VM_EXITS delta - n SGI writes - 1) / n           |
//! | `io-out`     | QueueNotify of the first virtio-rng (virtio-mmio version 2, DeviceID 4): |
//! |              | armhv's notify stamp - t0 (ARMHV_IO_STAMPS, in the unit x3 says)         |
//! | `io-in`      | the IRQ handler's stamp - armhv's interrupt stamp; with both,            |
//! |              | `io-roundtrip` = handler stamp - t0 (printed whenever the device works)  |
//! | `vmswitch`   | ARMHV_YIELD round trip to a `vmswitch-partner` VM on the same physical   |
//! |              | CPU, halved (two switches); waits up to 2 s for the partner first        |
//! | `vmswitch-partner` | ARMHV_YIELD forever; 200 ms after vmbench was last seen, powers off|
//!
//! ## Output (one line each; a host tool parses these, keep them stable)
//! ```text
//! vmbench: boot cpus=<n> clock=<pmu|cntvct> freq=<hz> cntfrq=<hz> armhv=<yes|no> el=<n>
//! vmbench: gic <v3|v2|none>
//! vmbench: overhead unit=<cycles|ticks> <value>
//! vmbench: result <name> unit=<cycles|ticks> n=<N> min=<u64> median=<u64> mean=<dec, 1 decimal> max=<u64>[ exits-per-op=<d.dd>]
//! vmbench: skip <name>: <reason>
//! vmbench: done
//! ```
//! `freq` is the unit's rate: CNTFRQ_EL0 for `cntvct`, a nominal 1000000000 for
//! `pmu` (under QEMU's `-icount shift=0` a cycle is one instruction); `cntfrq` is
//! CNTFRQ_EL0 either way (`ipi` is in ticks). `armhv=yes` when ARMHV_VM_INFO
//! answers. `median` of an even count is the mean of the middle two, rounded down.
//! After `done`: PSCI SYSTEM_OFF. A failure (a lost interrupt, a device that sets
//! DEVICE_NEEDS_RESET, a bad parameter): `vmbench: PANIC: <message>`, then SYSTEM_OFF.
//! `vmswitch-partner` prints `vmbench: partner done` (or `vmbench: partner: not armhv`)
//! before its SYSTEM_OFF.
//!
//! ## Caveat
//! The MMU stays off, as in testguest: all data accesses are Device-nGnRnE. On QEMU's
//! TCG that costs nothing and the virtqueue needs no cache maintenance; on hardware the
//! numbers would include uncached memory and a hypervisor reading the virtqueue through
//! a cacheable mapping could see stale data.
#![no_std]
#![no_main]

mod bench;
mod clock;
mod io;
mod ipi;
mod irq;

use core::fmt;

use baremetal::boot::MAX_CPUS;
use baremetal::fdt::Fdt;
use baremetal::psci::{self, Conduit};
use baremetal::{cpu, gic, machine, println, time, virtio_rng};
use guest_abi::hypercall::ARMHV_VM_INFO;

use bench::Runner;
use clock::{Clock, Cntvct, Pmu};

baremetal::entry! {
    name: "vmbench",
    primary: primary_main,
    secondary: ipi::secondary,
    irq: irq::handle_irq,
}

const DEFAULT_N: usize = 10_000;
const DEFAULT_WARMUP: usize = 1_000;
const DEFAULT_BENCHMARKS: [&str; 7] =
    ["hypercall", "gic-trap", "pl011-write", "ipi", "eoi", "io-out", "io-in"];
/// Most benchmark names one bootargs can list.
const MAX_NAMES: usize = 16;
/// SMCCC's Call UID query (function 0xff01) of the Standard Hypervisor Service range (owner
/// 5), where Xen 4.17 answers it with its UUID in w0..w3 (it answers NOT_SUPPORTED in the
/// vendor range, owner 6). A dom0less Xen domain's device tree has no `xen,xen` node to say it
/// is Xen.
const HYP_SERVICE_UID: u32 = 0x8500_ff01;
/// Xen's UUID (a71812dc-c698-4369-9acf-79d18ddee667) as Xen returns it: each register holds
/// four of its bytes, the first in bits [7:0].
const XEN_UID: [u64; 4] = [0xdc12_18a7, 0x6943_98c6, 0xd179_cf9a, 0x67e6_de8d];
/// The nominal PMU cycle counter frequency printed as `freq`.
const PMU_FREQ: u64 = 1_000_000_000;

/// What the benchmarks need to know about the machine.
pub struct Ctx<'a> {
    /// MPIDR affinities of the CPUs.
    pub cpus: &'a [u64],
    /// ARMHV_VM_INFO answered.
    pub armhv: bool,
    /// The PSCI conduit is `smc` (else `hvc`).
    pub smc: bool,
    /// The main clock is the PMU cycle counter.
    pub pmu: bool,
    pub rng: Option<virtio_rng::Rng>,
    /// The hypervisor is Xen (its SMCCC UID): Xen's own hypercalls work.
    pub xen: bool,
}

/// Prints `vmbench: skip <name>: <reason>`.
pub fn skip(name: &str, reason: fmt::Arguments) {
    println!("vmbench: skip {name}: {reason}");
}

/// `n=`, `warmup=` and the benchmark names of `/chosen/bootargs`.
struct Args<'a> {
    n: usize,
    warmup: usize,
    names: [&'a str; MAX_NAMES],
    count: usize,
}

fn parse_args(bootargs: &str) -> Args<'_> {
    let mut args = Args { n: DEFAULT_N, warmup: DEFAULT_WARMUP, names: [""; MAX_NAMES], count: 0 };
    let number = |word: &str, value: &str| -> usize {
        value.parse().unwrap_or_else(|_| panic!("bad number in '{word}'"))
    };
    for word in bootargs.split_ascii_whitespace() {
        if let Some(v) = word.strip_prefix("n=") {
            args.n = number(word, v);
        } else if let Some(v) = word.strip_prefix("warmup=") {
            args.warmup = number(word, v);
        } else if args.count < MAX_NAMES {
            args.names[args.count] = word;
            args.count += 1;
        } else {
            panic!("more than {MAX_NAMES} benchmark names");
        }
    }
    if !(1..=bench::MAX_N).contains(&args.n) {
        panic!("n={} is out of range 1..={}", args.n, bench::MAX_N);
    }
    if args.count == 0 {
        args.names[..DEFAULT_BENCHMARKS.len()].copy_from_slice(&DEFAULT_BENCHMARKS);
        args.count = DEFAULT_BENCHMARKS.len();
    }
    args
}

fn primary_main(_dt_addr: u64, fdt: Fdt<'static>) -> ! {
    let m = machine::discover(&fdt);
    let el = cpu::current_el();
    if el != 1 {
        panic!("vmbench runs at EL1, entered at EL{el}");
    }
    let pmu = clock::enable_pmu();
    let armhv = psci::call(ARMHV_VM_INFO, 0, 0, 0)[0] == 0;
    let ncpus = m.ncpus.clamp(1, MAX_CPUS);
    let ctx = Ctx {
        cpus: &m.cpus[..m.ncpus.min(MAX_CPUS)],
        armhv,
        smc: psci::conduit() == Conduit::Smc,
        pmu,
        rng: virtio_rng::find(&fdt),
        xen: psci::call(HYP_SERVICE_UID, 0, 0, 0) == XEN_UID,
    };
    println!(
        "vmbench: boot cpus={ncpus} clock={} freq={} cntfrq={} armhv={} el={el}",
        if pmu { "pmu" } else { "cntvct" },
        if pmu { PMU_FREQ } else { time::frequency() },
        time::frequency(),
        if armhv { "yes" } else { "no" },
    );
    println!("vmbench: gic {}", gic::version().map_or("none", gic::Version::name));
    let args = parse_args(m.bootargs);
    if gic::present() {
        gic::init_distributor();
        gic::init_cpu(&[]);
    }
    let mut runner = Runner::new(args.n, args.warmup);
    if pmu {
        run::<Pmu>(&mut runner, &ctx, &args.names[..args.count]);
    } else {
        run::<Cntvct>(&mut runner, &ctx, &args.names[..args.count]);
    }
    println!("vmbench: done");
    psci::system_off()
}

/// Measures the overhead, then runs the named benchmarks in order.
fn run<C: Clock>(r: &mut Runner, ctx: &Ctx, names: &[&str]) {
    r.overhead = bench::overhead::<C>(r);
    let mut io_done = false;
    for &name in names {
        match name {
            "hypercall" => bench::hypercall::<C>(r, ctx),
            "gic-trap" => bench::gic_trap::<C>(r),
            // `hvc #0x7ea` is undefined without EL2 and under Xen ("Invalid HVC imm").
            "trap" if !ctx.armhv => skip(name, format_args!("needs armhv (its trap-probe build)")),
            "trap" => bench::trap::<C>(r),
            "pl011-write" => bench::pl011_write::<C>(r),
            "ipi" => ipi::ipi(r, ctx),
            "eoi" => bench::eoi::<C>(r, ctx),
            // One loop measures both (and the round trip): at the first of them.
            "io-out" | "io-in" if !io_done => {
                io_done = true;
                let wanted =
                    io::Wanted { out: names.contains(&"io-out"), r#in: names.contains(&"io-in") };
                io::io(r, ctx, wanted);
            }
            "io-out" | "io-in" => {}
            "vmswitch" => bench::vmswitch::<C>(r, ctx),
            "vmswitch-partner" => bench::partner(),
            _ => skip(name, format_args!("unknown benchmark")),
        }
    }
}
