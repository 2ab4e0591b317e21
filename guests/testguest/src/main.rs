//! testguest: a bare-metal EL1 program that runs the steps named by the words
//! of `/chosen/bootargs`, in order, and prints one line per result.
//!
//! It is an arm64 Linux Image (see `baremetal::boot`) for QEMU `virt`'s machine, so it
//! runs unchanged on `qemu-system-aarch64 -M virt` and in an armhv VM. Everything
//! it needs comes from the device tree in x0: the PL011 (`/chosen/stdout-path`,
//! else the first `arm,pl011`), the PSCI conduit (`/psci` `method`), RAM (the
//! memory node), the GIC (distributor, and redistributors or CPU interface),
//! the timer's interrupt and the CPUs.
//!
//! Output lines (tests grep these; keep them stable). `<hex>` is `0x`-prefixed
//! lowercase, `<dec>` is signed decimal (x0 as i64).
//!
//! | step          | line(s)                                                          |
//! |---------------|------------------------------------------------------------------|
//! | (always)      | `testguest: boot el=<n> dt=<hex> uart=<hex> psci=<hvc|smc> ram=<hex>..<hex> gic=<v3|v2|none>` |
//! | `hello`       | `testguest: hello from EL<n>`                                    |
//! |               | `testguest: vm=<id> vcpu=<id> vcpus=<n>` (ARMHV_VM_INFO returned 0) |
//! |               | `testguest: vm-info not supported` (otherwise)                   |
//! | `hvc`         | `testguest: unknown hypercall -> <dec>` (0xC600_0FFF; armhv: -1) |
//! |               | `testguest: psci version <major>.<minor>` or `... version not supported (<dec>)` |
//! |               | `testguest: smccc version <major>.<minor>` or `... version not supported (<dec>)` |
//! |               | `testguest: nop -> <dec>` (ARMHV_NOP; armhv: 0)                  |
//! | `device`      | `testguest: pl011 id 11 10 14 00 0d f0 05 b1` (PeriphID0-3, CellID0-3) |
//! | `oob`         | per address, RAM end, 0x0, 0x1_4000_0000, GICD base (if any):    |
//! |               | `testguest: oob read <hex> -> abort esr=<hex> far=<hex>` or `-> value <hex>` |
//! |               | `testguest: oob write <hex> -> abort esr=<hex> far=<hex>` or `-> ok` |
//! |               | then `testguest: oob done`                                       |
//! | `virtio-probe`| QEMU virt's 32 virtio-mmio transports (0x0A00_0000, 0x200 apart) read as a |
//! |               | program for that board does: per transport with a device          |
//! |               | `testguest: virtio-probe slot <n> device <id>`; per one that is not a  |
//! |               | transport `testguest: virtio-probe slot <n> magic <hex> version <n>` |
//! |               | or `... slot <n> abort esr=<hex>`; then                          |
//! |               | `testguest: virtio-probe <k> devices, <b> bad, of 32 transports` |
//! | `idregs`      | `testguest: id pfr0=<hex> pfr1=<hex> zfr0=<hex> smfr0=<hex> dfr0=<hex> afr0=<hex> isar0=<hex> isar1=<hex> isar2=<hex> mmfr0=<hex> mmfr1=<hex> mmfr2=<hex>` (ID_AA64*_EL1) |
//! | `pauth=K`     | `testguest: pauth key K intact (200 rounds)`: an IA key from K signs a pointer |
//! |               | the same way after each of 200 yields; else `... lost in round <r>: ...`, |
//! |               | or `testguest: pauth absent` (no address authentication in the ID registers) |
//! | `heartbeat=N` | `testguest: heartbeat <k>` for k = 1..=N, ~50 ms apart           |
//! | `spin=N`      | nothing; busy-waits N ms                                         |
//! | `count=N`     | `testguest: count <k> in N ms`: loop iterations in N ms of the counter |
//! | `call=<hex>`  | `testguest: call <hex> -> <dec>`: SMCCC call with that function ID |
//! | `smp`         | per other CPU: `testguest: smp cpu <slot> up mpidr=<hex>` (printed by it) |
//! |               | or `testguest: smp cpu_on <hex> -> <dec>` / `testguest: smp cpu <hex> timed out` |
//! |               | then `testguest: smp <up>/<total> cpus up`                       |
//! | `smp-off`     | starts all other CPUs; each, in turn: `testguest: cpu <slot> online`, |
//! |               | then PSCI CPU_OFF; CPU 0 polls AFFINITY_INFO until all are off:  |
//! |               | `testguest: smp-off all <k> cpus off` (k = other CPUs), else     |
//! |               | `testguest: smp-off <off>/<k> cpus off`, preceded by             |
//! |               | `testguest: smp-off cpu_on <hex> -> <dec>`, `... cpu <slot> timed out` |
//! |               | or `... cpu <slot> still on (<dec>)` for the culprits            |
//! | `psci-errors` | `testguest: psci cpu_on self -> <dec>` (ALREADY_ON, -4)          |
//! |               | `testguest: psci cpu_on bad-entry -> <dec>` (entry = RAM end,    |
//! |               | on another CPU, else itself: INVALID_ADDRESS, -9), or, when ARMHV_VM_INFO is |
//! |               | not supported (QEMU's PSCI would start the CPU there):           |
//! |               | `testguest: psci cpu_on bad-entry skipped (not armhv)`           |
//! |               | `testguest: psci cpu_on bad-mpidr -> <dec>` (MPIDR 0xff: INVALID_PARAMETERS, -2) |
//! |               | `testguest: psci affinity_info off -> <dec>` (another CPU, off: 1), |
//! |               | or `testguest: psci affinity_info off skipped (1 cpu)`           |
//! |               | then `testguest: psci-errors done`                               |
//! | `psci-race`   | needs 5 CPUs: CPU 0 and 3 helpers call CPU_ON for the fifth at   |
//! |               | once; the one that gets SUCCESS asks AFFINITY_INFO right after:  |
//! |               | `testguest: psci-race <s> success, <a> already-on, <o> other; affinity after success <n>` |
//! |               | (`... cpu <slot> got <dec>` for each other answer), or           |
//! |               | `testguest: psci-race needs 5 cpus, have <n>`                    |
//! | `timer=N`     | `testguest: timer N ticks in <ms> ms (expected <N*10>)`: N virtual |
//! |               | timer interrupts (INTID from the DT timer node, else 27) 10 ms   |
//! |               | apart, re-armed by the handler; <ms> from arming to the N-th;    |
//! |               | `testguest: timer timed out after <k> of N ticks` if too slow    |
//! |               | then `testguest: timer latency max <us> us mean <us> us`: deadline to handler |
//! | `ptimer=N`    | as `timer=N` with the EL1 physical timer (CNTP_*, INTID from the |
//! |               | DT, else 30), printed as `testguest: ptimer ...`                 |
//! | `rtc=N`       | `testguest: rtc N alarms in <ms> ms, <delta> exits`: N alarms of |
//! |               | the PL031 RTC (from the DT; under armhv an assigned physical     |
//! |               | device), one second apart at most; `testguest: rtc absent`, or   |
//! |               | `testguest: rtc timed out after <k> of N alarms`                 |
//! | `rtc-eoi-first=N` | `rtc=N` whose handler completes the interrupt in the GIC before it |
//! |               | clears the device (the line still high at the EOI), then         |
//! |               | `testguest: rtc-eoi-first <taken> interrupts for <n> alarms`     |
//! | `rng=N`       | `testguest: rng N requests, interrupts taken: cpu0 <a> cpu1 <b> ...`: |
//! |               | N virtio-rng requests 5 ms apart, CPU 0 spinning between them, the |
//! |               | other CPUs waiting as helpers; per CPU, the completion interrupts |
//! |               | it took (routed to CPU 0 by the guest; `stream.rs`)              |
//! | `wfi=MS`      | `testguest: wfi woke after <ms> ms, <delta> exits`: virtual timer |
//! |               | armed MS ms ahead, `wfi` until it fires; <delta> = change of     |
//! |               | ARMHV_VM_EXITS across the wait, or `exits unknown` (not armhv)  |
//! | `eoi=N`       | `testguest: eoi <n> interrupts, <delta> exits` (or `exits unknown`): |
//! |               | N SGIs (INTID 3) to itself, one at a time, each acknowledged and |
//! |               | completed; <n> = how many arrived (N unless lost)                |
//! | `ipi=N`       | needs 2 CPUs: CPU 1 answers each SGI 1 from CPU 0 with SGI 2;   |
//! |               | CPU 0 sends N, one at a time, sleeping in `wfi` for each answer: |
//! |               | `testguest: ipi sent <s> received <r> lost <s - answers>`        |
//! |               | (<s> < N after `testguest: ipi no answer from cpu <slot> to ping <i>`, 1 s) |
//! |               | or `testguest: ipi needs 2 cpus, have <n>`                       |
//! | `ipi4=N`      | the same over CPUs 1..3 round-robin: `testguest: ipi4 sent ...`  |
//! |               | or `testguest: ipi4 needs 4 cpus, have <n>`                      |
//! |               | (both: `... cpu_on <hex> -> <dec>`, `... cpu <hex> not ready` or |
//! |               | `... cpu <hex> still on (<dec>)` if a helper misbehaves)         |
//! | `audio=MS,PERIOD_US,WORK_US[,HOG_PCT]` | the real-time "audio" workload (`audio.rs`): |
//! |               | virtual-timer interrupts PERIOD_US apart for MS ms (0: until the |
//! |               | VM is stopped), each busy-waiting WORK_US in the handler; other  |
//! |               | CPUs spin HOG_PCT % of every 10 ms meanwhile:                    |
//! |               | `testguest: audio period <us> us work <us> us for <ms> ms, hog <pct> % on <k> cpus` |
//! |               | (`... until stopped, ...`), every 5 s and at the end             |
//! |               | `testguest: audio <ms> ms: <n> interrupts (<r> per 10 ms), work <ms> ms in <loops> loops, latency max <us> us mean <us> us`, |
//! |               | per hog `testguest: audio hog cpu <slot>: busy <ms> ms of <ms> ms, <loops> loops`, |
//! |               | then `testguest: audio done`                                     |
//! | `fp=K`        | v0-v31 filled with a pattern from K, then 200 x (ARMHV_YIELD and |
//! |               | ~1 ms spin), then checked: `testguest: fp pattern K intact` or   |
//! |               | `testguest: fp pattern K corrupted in v<n>: <hex>` (first bad register) |
//! | `zcr=LEN`     | writes ZCR_EL1.LEN: `testguest: zcr len LEN: vl <bits> bits`, or  |
//! |               | `testguest: sve absent` (ID_AA64PFR0_EL1.SVE = 0)                |
//! | `sve=K`       | `testguest: sve vl <bits> bits, zcr <hex>, zfr0 <hex>`; the Z upper |
//! |               | halves, P0-P15 and FFR before it writes any: `testguest: sve initial |
//! |               | state clean` (or `... dirty in <reg> byte <i>: <hex>`); then as `fp=K` |
//! |               | for Z0-Z31, P0-P15, FFR and the vector length: `testguest: sve   |
//! |               | pattern K intact` or `... corrupted in <reg> byte <i>: <hex>` (or |
//! |               | `absent`)                                                         |
//! | `debug=K`     | (K = 0 or 1) `testguest: debug slots brps=<n> wrps=<n> doublelock=<hex> oslsr=<hex>` |
//! |               | (ID_AA64DFR0_EL1's counts and DoubleLock, OSLSR_EL1), then 40 rounds of: arm |
//! |               | breakpoint and watchpoint slot K on target K, ARMHV_YIELD, call both targets and |
//! |               | store to both watched doublewords (`debug.rs`); then single-steps 6 instructions: |
//! |               | `testguest: debug 40 rounds, another vCPU ran in <n> of their yields` |
//! |               | `testguest: debug breakpoint hits own=<n> other=<n> stray=<n>`   |
//! |               | `testguest: debug watchpoint hits own=<n> other=<n>`             |
//! |               | `testguest: debug step 6 steps, one instruction each`, or        |
//! |               | `testguest: debug step <n> steps, pcs [..] (expected [..])`      |
//! | `pmu=R`       | `testguest: pmu counters <n> instructions <i> cycles-event <e> cycles <c> expected <x> others-ran <k> elapsed-ticks <t>`: |
//! |               | R rounds of a 10,009-instruction loop and ARMHV_YIELD counted by the PMU (`pmu.rs`), |
//! |               | then `testguest: pmu overflow interrupts <k> intid <n> ovs <hex>` |
//! |               | or `testguest: pmu overflow timed out`; `testguest: pmu absent`  |
//! | (GIC steps)   | `testguest: <step> needs a GIC` without an `arm,gic-v3` node or a |
//! |               | GICv2 one (`arm,cortex-a15-gic`, `arm,gic-400`)                  |
//! | `off`         | `testguest: system off`, then PSCI SYSTEM_OFF; if it returns:    |
//! |               | `testguest: SYSTEM_OFF returned` and the CPU parks in `wfi`      |
//! | `reset`       | `testguest: system reset`, then PSCI SYSTEM_RESET; if it returns:|
//! |               | `testguest: SYSTEM_RESET returned` and the CPU parks             |
//! | other word    | `testguest: unknown step '<word>'`                               |
//! |               | `testguest: bad number in '<word>'` (steps taking `=N`)          |
//! | (after last)  | `testguest: done` and the CPU parks (only if no step ended the run) |
//! | (failure)     | `testguest: PANIC: <message>` then PSCI SYSTEM_OFF               |
//!
//! The other CPUs end every step with PSCI CPU_OFF (and a CPU is started only
//! once AFFINITY_INFO reports it off), so steps compose in any order. Interrupts
//! (GICv3 or GICv2, `gic.rs`) are taken only while a step waits for one; CPU 0
//! owns the virtual timer (`timer.rs`).
//!
//! The MMU stays off (see `baremetal::boot`): no page tables to get wrong, at
//! the cost of Device-memory rules for every access (aligned only, no atomics).
//! Boot, console, device tree, GIC driver, PSCI and time come from the
//! `baremetal` crate, shared with `vmbench`.
#![no_std]
#![no_main]

mod audio;
mod cpuid;
mod cpus;
mod debug;
mod gic;
mod pmu;
mod rtc;
mod steps;
mod stream;
mod sve;
mod timer;

use baremetal::fdt::Fdt;
use baremetal::machine::{self, Machine};
use baremetal::psci::{self, Conduit};
use baremetal::{boot, console, println, time};
use guest_abi::hypercall;

const HEARTBEAT_MS: u64 = 50;

baremetal::entry! {
    name: "testguest",
    primary: primary_main,
    secondary: cpus::secondary_main,
    irq: gic::handle_irq,
}

/// Rust entry of the boot CPU, with the device tree address and the tree.
fn primary_main(dt_addr: u64, fdt: Fdt<'static>) -> ! {
    let machine = discover(&fdt);
    println!(
        "testguest: boot el={} dt={dt_addr:#x} uart={:#x} psci={} ram={:#x}..{:#x} gic={}",
        baremetal::cpu::current_el(),
        console::uart_base(),
        if psci::conduit() == Conduit::Hvc { "hvc" } else { "smc" },
        machine.ram_start,
        machine.ram_end,
        baremetal::gic::version().map_or("none", baremetal::gic::Version::name),
    );
    for word in machine.bootargs.split_ascii_whitespace() {
        run_step(word, &machine);
    }
    println!("testguest: done");
    psci::halt()
}

/// Reads the machine from the device tree (`baremetal::machine`), then the
/// timers' and the PL031's interrupts, and the virtio-rng device.
fn discover<'a>(fdt: &Fdt<'a>) -> Machine<'a> {
    let found = machine::discover(fdt);

    // The timer's interrupts are (type, number, flags) triples: secure and
    // non-secure physical, virtual, hypervisor. Type 1 = PPI = INTID 16 + number.
    let timer = fdt.find_compatible(&["arm,armv8-timer", "arm,armv7-timer"]);
    let cell = |i: usize| timer.as_ref().and_then(|n| machine::interrupt_cell(n, i));
    // The PL031 RTC, if any: its first SPI (type 0, INTID 32 + number).
    if let Some(rtc) = fdt.find_compatible(&["arm,pl031"]) {
        let word = |i: usize| machine::interrupt_cell(&rtc, i);
        if let (Some(base), Some(0), Some(number)) =
            (rtc.reg().and_then(|mut r| r.next()), word(0), word(1))
        {
            rtc::configure(base.starting_address as u64, 32 + number);
        }
    }

    if let Some(rng) = baremetal::virtio_rng::find(fdt) {
        stream::configure(rng);
    }
    // The PMU's overflow interrupt: its node's first (and only) interrupt, a PPI.
    if let Some(node) = fdt.find_compatible(&["arm,armv8-pmuv3"]) {
        let word = |i: usize| machine::interrupt_cell(&node, i);
        if let (Some(1), Some(number)) = (word(0), word(1)) {
            pmu::set_intid(16 + number);
        }
    }
    for (timer, index) in [(timer::Timer::Physical, 1), (timer::Timer::Virtual, 2)] {
        if let (Some(1), Some(number)) = (cell(3 * index), cell(3 * index + 1)) {
            timer::set_intid(timer, 16 + number);
        }
    }
    found
}

fn run_step(word: &str, m: &Machine) {
    let (name, arg) = match word.split_once('=') {
        Some((name, arg)) => (name, Some(arg)),
        None => (word, None),
    };
    // Runs `step` with the decimal argument, or says it is not a number.
    let number = |step: &dyn Fn(u64)| match arg.and_then(|a| a.parse::<u64>().ok()) {
        Some(n) => step(n),
        None => println!("testguest: bad number in '{word}'"),
    };
    match (name, arg) {
        ("hello", None) => hello(),
        ("hvc", None) => hypercalls(),
        ("device", None) => device(),
        ("oob", None) => oob(m),
        ("virtio-probe", None) => virtio_probe(),
        ("smp", None) => cpus::smp(m),
        ("smp-off", None) => cpus::smp_off(m),
        ("psci-errors", None) => cpus::psci_errors(m),
        ("psci-race", None) => cpus::psci_race(m),
        ("heartbeat", Some(_)) => number(&heartbeat),
        ("spin", Some(_)) => number(&time::spin_ms),
        ("count", Some(_)) => number(&steps::count),
        ("timer", Some(_)) => number(&|n| steps::timer(timer::Timer::Virtual, n)),
        ("ptimer", Some(_)) => number(&|n| steps::timer(timer::Timer::Physical, n)),
        ("rtc", Some(_)) => number(&rtc::step),
        ("rtc-eoi-first", Some(_)) => number(&rtc::step_eoi_first),
        ("audio", Some(a)) => audio::step(m, word, a),
        ("rng", Some(_)) => number(&|n| stream::step(m, n)),
        ("wfi", Some(_)) => number(&steps::wfi),
        ("eoi", Some(_)) => number(&steps::eoi),
        ("fp", Some(_)) => number(&steps::fp),
        ("zcr", Some(_)) => number(&sve::zcr),
        ("sve", Some(_)) => number(&sve::sve),
        ("idregs", None) => cpuid::idregs(),
        ("pauth", Some(_)) => number(&cpuid::pauth),
        ("debug", Some(_)) => number(&debug::step),
        ("pmu", Some(_)) => number(&pmu::step),
        ("ipi", Some(_)) => number(&|n| cpus::ipi(m, "ipi", n, 1)),
        ("ipi4", Some(_)) => number(&|n| cpus::ipi(m, "ipi4", n, 3)),
        ("call", Some(a)) => match u32::from_str_radix(a.trim_start_matches("0x"), 16) {
            Ok(fid) => {
                let [x0, ..] = psci::call(fid, 0, 0, 0);
                println!("testguest: call {fid:#x} -> {}", x0 as i64);
            }
            Err(_) => println!("testguest: bad number in '{word}'"),
        },
        ("off", None) => {
            println!("testguest: system off");
            psci::system_off();
        }
        ("reset", None) => {
            println!("testguest: system reset");
            psci::call(psci::PSCI_SYSTEM_RESET, 0, 0, 0);
            println!("testguest: SYSTEM_RESET returned");
            psci::halt();
        }
        _ => println!("testguest: unknown step '{word}'"),
    }
}

fn hello() {
    println!("testguest: hello from EL{}", baremetal::cpu::current_el());
    let [status, vm, vcpu, vcpus] = psci::call(hypercall::ARMHV_VM_INFO, 0, 0, 0);
    if status == 0 {
        println!("testguest: vm={vm} vcpu={vcpu} vcpus={vcpus}");
    } else {
        println!("testguest: vm-info not supported");
    }
}

fn hypercalls() {
    let r = psci::call(psci::ARMHV_UNKNOWN, 0, 0, 0)[0];
    println!("testguest: unknown hypercall -> {}", r as i64);
    print_version("psci", psci::call(psci::PSCI_VERSION, 0, 0, 0)[0]);
    print_version("smccc", psci::call(psci::SMCCC_VERSION, 0, 0, 0)[0]);
    let r = psci::call(hypercall::ARMHV_NOP, 0, 0, 0)[0];
    println!("testguest: nop -> {}", r as i64);
}

/// PSCI_VERSION and SMCCC_VERSION both answer `major << 16 | minor` in w0, or a
/// negative error.
fn print_version(what: &str, x0: u64) {
    let w0 = x0 as u32;
    if (w0 as i32) < 0 {
        println!("testguest: {what} version not supported ({})", x0 as i64);
    } else {
        println!("testguest: {what} version {}.{}", w0 >> 16, w0 & 0xffff);
    }
}

fn device() {
    // UARTPeriphID0..3 at 0xFE0..0xFEC, UARTPCellID0..3 at 0xFF0..0xFFC; the
    // identification byte is the low 8 bits of each register.
    let mut ids = [0u32; 8];
    for (i, id) in ids.iter_mut().enumerate() {
        *id = console::read_reg(0xFE0 + 4 * i as u64) & 0xff;
    }
    let [a, b, c, d, e, f, g, h] = ids;
    println!("testguest: pl011 id {a:02x} {b:02x} {c:02x} {d:02x} {e:02x} {f:02x} {g:02x} {h:02x}");
}

fn oob(m: &Machine) {
    // Just past RAM, flash on real virt (absent in armhv), far above RAM, and
    // the GIC distributor (an emulated device, not RAM).
    let targets = [Some(m.ram_end), Some(0), Some(0x1_4000_0000), m.gicd];
    for addr in targets.into_iter().flatten() {
        let value = match boot::read32(addr) {
            Ok(value) => {
                println!("testguest: oob read {addr:#x} -> value {value:#x}");
                value
            }
            Err(a) => {
                println!(
                    "testguest: oob read {addr:#x} -> abort esr={:#x} far={:#x}",
                    a.esr, a.far
                );
                0
            }
        };
        // Write back what was read, so a real device register keeps its value.
        match boot::write32(addr, value) {
            Ok(()) => println!("testguest: oob write {addr:#x} -> ok"),
            Err(a) => println!(
                "testguest: oob write {addr:#x} -> abort esr={:#x} far={:#x}",
                a.esr, a.far
            ),
        }
    }
    println!("testguest: oob done");
}

/// Probes QEMU `virt`'s virtio-mmio window at its fixed addresses, without the device tree,
/// as programs written for that board do: an empty transport has the magic, version 2 and
/// device ID 0.
fn virtio_probe() {
    const BASE: u64 = 0x0A00_0000;
    const SLOT: u64 = 0x200;
    const TRANSPORTS: u64 = 32;
    const MAGIC: u32 = 0x7472_6976;
    let (mut devices, mut bad) = (0, 0);
    for n in 0..TRANSPORTS {
        let regs = BASE + n * SLOT;
        let read = |offset| boot::read32(regs + offset);
        match (read(0x0), read(0x4), read(0x8)) {
            (Ok(MAGIC), Ok(2), Ok(0)) => {}
            (Ok(MAGIC), Ok(2), Ok(id)) => {
                println!("testguest: virtio-probe slot {n} device {id}");
                devices += 1;
            }
            (Err(a), ..) | (_, Err(a), _) | (.., Err(a)) => {
                println!("testguest: virtio-probe slot {n} abort esr={:#x}", a.esr);
                bad += 1;
            }
            (Ok(magic), Ok(version), _) => {
                println!("testguest: virtio-probe slot {n} magic {magic:#x} version {version}");
                bad += 1;
            }
        }
    }
    println!("testguest: virtio-probe {devices} devices, {bad} bad, of {TRANSPORTS} transports");
}

fn heartbeat(n: u64) {
    for k in 1..=n {
        if k > 1 {
            time::spin_ms(HEARTBEAT_MS);
        }
        println!("testguest: heartbeat {k}");
    }
}
