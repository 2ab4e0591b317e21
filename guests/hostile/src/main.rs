//! hostile: a bare-metal EL1 guest that attacks the hypervisor it runs on, one
//! step per word of `/chosen/bootargs`, and a `healthy` mode for the VM that
//! must not notice.
//!
//! Built on `baremetal` like testguest: an arm64 Image, MMU off (except while
//! `mmio` tries unaligned accesses), everything learnt from the device tree.
//! It installs its own exception vectors (`trap.rs`), so every abort or
//! UNDEFINED an attack causes comes back to the attack, which goes on.
//!
//! Output lines (the tests in `xtask/tests/hostile.rs` parse them; keep them
//! stable). `<hex>` is `0x`-prefixed lowercase, `<dec>` signed decimal.
//!
//! ```text
//! hostile: boot vm=<id> vcpus=<n> ram=<hex>..<hex> ipa-bits=<n> gic=<v3|v2|none> own=<hex>+<hex>,...
//! hostile: <attack> <target> -> <outcome>           one per attempt (or per batch)
//! hostile: <attack> <ms>ms starting                 before a timed flood or spin
//! hostile: <step> done: <n> attempts, <k> confined, <s> swept  after each step
//! hostile: total: <n> attempts, <k> confined, <b> bytes leaked, <s> swept
//! ```
//!
//! A batch (the SMCCC and system-register sweeps, random calls, floods) prints
//! one `absorbed` line for many attempts and counts each; an attempt that is
//! not confined always gets a line of its own. Probes that cannot fail (an
//! EL1/EL0 register encoding read, an EL0 probe, a measurement) are counted as
//! swept, never as attempts (`report.rs`). Leaks found by `leak-scan` are
//! `hostile: leak-scan <where> <register> -> marker value <hex>` (or
//! `-> changed <hex> (was <hex>)`, `-> not idle <hex>` for the GIC), and the
//! `reset-storm` lines are in `calls.rs`.
//!
//! `own=` lists the device windows of the device tree (GIC, PL011, virtio
//! slots, assigned devices): the only addresses outside RAM that may answer.
//! Outcomes: `abort esr=<hex>` (a data or instruction abort reached the guest),
//! `exception esr=<hex>` (another synchronous exception: alignment, illegal
//! state...), `undef`, `error <dec>` (SMCCC/PSCI error, or a virtio-blk error
//! status), `ret <hex>` (SMCCC success), `value <hex>` (a load that returned
//! data), `read <hex>` (a system register read), `ok` (a store or instruction
//! that completed), `needs-reset` (virtio DEVICE_NEEDS_RESET), or for floods
//! `absorbed <what>`. Whether each outcome is confined is decided per attack
//! (see the modules); a `value` from outside `own=` never is. Bytes leaked:
//! 4 per such value, 8 per marker value or EL2 register read, 1 per non-zero
//! byte of RAM the VM never wrote.
//!
//! | step              | what                                                        |
//! |-------------------|-------------------------------------------------------------|
//! | `mem`             | loads, stores and jumps all over the IPA space (`mem.rs`)   |
//! | `mem-exhaust`     | writes every free byte of its RAM, pushes below RAM, a 16 KiB console line |
//! | `sysregs`         | EL2/EL3, GIC hypervisor, debug, PMU, timer, cache/TLB ops, SMC, EL0 (`sysregs.rs`) |
//! | `sysreg-sweep`    | reads every op0=2/3 encoding; summary per op1               |
//! | `aarch32`         | AArch32 EL0 CP14/CP15 accesses that trap to EL2 (may stop the VM) |
//! | `hvc`             | every SMCCC owner range, armhv's calls, random arguments (`calls.rs`) |
//! | `psci`            | CPU_ON/AFFINITY_INFO/... with bad targets and entries        |
//! | `cpu-off-last`    | CPU_OFF of its last vCPU (ends the VM)                       |
//! | `reset-storm=K`   | SYSTEM_RESET K times, from either vCPU (needs a virtio disk for the count) |
//! | `reset-race=K`    | SYSTEM_RESET K times, from both vCPUs at once (as `reset-storm`) |
//! | `mmio`            | wrong widths, pairs, writeback, exclusives, out-of-window and (MMU on) unaligned accesses to its devices (`mmio.rs`) |
//! | `virtio`          | hostile descriptors to virtio-blk and virtio-rng; a buffer address rewritten by its second vCPU while in use (`virtio.rs`); to virtio-net (transmit and receive) and virtio-console (transmit), ring indices rewritten by its second vCPU, a flood of 64 KiB frames (`vnet.rs`) |
//! | `console-rx`      | hostile receive chains for virtio-console while the test types input (the VM's command line must hold `console=hvc0`, which the guest skips), ring fields rewritten by its second vCPU meanwhile (`vcons.rs`) |
//! | `sgi-storm=MS`    | SGIs to all its vCPUs (and to none) as fast as it can (`irq.rs`) |
//! | `spin-masked=MS`  | all exceptions masked, no exits, for MS ms                  |
//! | `chains=MS`       | full rings of chains naming ~4 GiB each on every virtio device, the console's from its second vCPU, for MS ms after MS/2 ms of spinning (`chains.rs`) |
//! | `abort-flood=MS`  | as many stage-2 aborts as it can take in MS ms              |
//! | `abort-loop=MS`   | its second vCPU in an endless injected-abort loop (vectors nowhere), MS ms, then on |
//! | `marker=MS`       | fills its registers with marker values and yields for MS ms (`leak.rs`) |
//! | `leak-scan=N`     | N rounds: yield, look for marker values in every register; fresh vCPUs' registers; never-written RAM |
//! | `healthy=N`       | N heartbeats ~50 ms apart, each with a checksum of 1 MiB (`healthy.rs`) |
//! | `talk=N`          | N unicast frames carrying a secret to the other talker of `hostile-switch.toml`, counting its (`snoop.rs`) |
//! | `snoop=MS`        | for MS ms: frames with the talkers' source MACs, a flood of fake sources, every received frame searched for the talkers' secret (`snoop.rs`) |
//! | `soak=MS`         | one incarnation of a soak VM: disk, IPI and network load for MS ms, then SYSTEM_RESET (`soak.rs`) |
//! | `off`             | PSCI SYSTEM_OFF                                             |
//!
//! After the last word: the totals, then SYSTEM_OFF.
#![no_std]
#![no_main]

mod calls;
mod chains;
mod healthy;
mod irq;
mod leak;
mod mem;
mod mmio;
mod net;
mod report;
mod ring;
mod snoop;
mod soak;
mod sysregs;
mod trap;
mod vcons;
mod virtio;
mod vnet;

use baremetal::boot::MAX_CPUS;
use baremetal::console::Global;
use baremetal::fdt::Fdt;
use baremetal::psci;
use baremetal::{cpu, machine, println};

baremetal::entry! {
    name: "hostile",
    primary: primary_main,
    secondary: irq::secondary_main,
    irq: irq::handle_irq,
}

/// Most device windows remembered from the device tree.
const MAX_OWN: usize = 16;

/// What the attacks need to know about their VM.
pub struct Vm<'a> {
    pub fdt: &'a Fdt<'static>,
    pub bootargs: &'a str,
    pub ram_start: u64,
    pub ram_end: u64,
    /// Where the device tree blob is and how long (it must survive `mem-exhaust`).
    pub dt_addr: u64,
    pub dt_size: u64,
    /// Device windows (base, size) of the device tree.
    pub own: [(u64, u64); MAX_OWN],
    pub nown: usize,
    pub cpus: [u64; MAX_CPUS],
    pub ncpus: usize,
    /// IPA size in bits (ID_AA64MMFR0_EL1.PARange as the VM sees it).
    pub ipa_bits: u32,
    pub vm_id: u64,
}

impl Vm<'_> {
    pub fn in_ram(&self, addr: u64, len: u64) -> bool {
        addr >= self.ram_start && addr.checked_add(len).is_some_and(|end| end <= self.ram_end)
    }

    /// Whether `[addr, addr + len)` lies in one of the VM's device windows.
    pub fn in_own_device(&self, addr: u64, len: u64) -> bool {
        self.own[..self.nown]
            .iter()
            .any(|&(base, size)| addr >= base && addr.saturating_add(len) <= base + size)
    }
}

unsafe extern "C" {
    /// End of the loaded image, .bss included (linker script).
    static __image_end: u8;
}

/// The first byte of RAM after our image, .bss and stacks.
pub fn image_end() -> u64 {
    &raw const __image_end as u64
}

fn ipa_bits() -> u32 {
    let mmfr0: u64;
    // SAFETY: reading an ID register has no side effects (armhv emulates it).
    unsafe {
        core::arch::asm!("mrs {v}, id_aa64mmfr0_el1", v = out(reg) mmfr0, options(nomem, nostack))
    };
    match mmfr0 & 0xf {
        0 => 32,
        1 => 36,
        2 => 40,
        3 => 42,
        4 => 44,
        5 => 48,
        _ => 52,
    }
}

fn discover<'a>(fdt: &'a Fdt<'static>, dt_addr: u64) -> Vm<'a> {
    let m = machine::discover(fdt);
    let mut own = [(0, 0); MAX_OWN];
    let mut nown = 0;
    for node in fdt.all_nodes() {
        if node.compatible().is_none() || node.name.starts_with("memory") {
            continue;
        }
        for reg in node.reg().into_iter().flatten() {
            if nown < MAX_OWN
                && let Some(size) = reg.size
            {
                own[nown] = (reg.starting_address as u64, size as u64);
                nown += 1;
            }
        }
    }
    let [status, vm_id, ..] = psci::call(guest_abi::hypercall::ARMHV_VM_INFO, 0, 0, 0);
    Vm {
        fdt,
        bootargs: m.bootargs,
        ram_start: m.ram_start,
        ram_end: m.ram_end,
        dt_addr,
        dt_size: fdt.total_size() as u64,
        own,
        nown,
        cpus: m.cpus,
        ncpus: m.ncpus.clamp(1, MAX_CPUS),
        ipa_bits: ipa_bits(),
        vm_id: if status == 0 { vm_id } else { u64::MAX },
    }
}

/// Set by `healthy`: it prints no totals (it attacks nothing).
static QUIET: Global<bool> = Global::new(false);

fn primary_main(dt_addr: u64, fdt: Fdt<'static>) -> ! {
    trap::install();
    let vm = discover(&fdt, dt_addr);
    let mut own = heapless_list(&vm);
    let vm_id = vm.vm_id as i64;
    println!(
        "hostile: boot vm={vm_id} vcpus={} ram={:#x}..{:#x} ipa-bits={} gic={} own={}",
        vm.ncpus,
        vm.ram_start,
        vm.ram_end,
        vm.ipa_bits,
        baremetal::gic::version().map_or("none", baremetal::gic::Version::name),
        own.as_str()
    );
    own.clear();
    for word in vm.bootargs.split_ascii_whitespace() {
        run_step(word, &vm);
    }
    end_run()
}

/// Prints the totals and powers the VM off.
pub fn end_run() -> ! {
    if !QUIET.get() {
        report::totals();
    }
    psci::system_off()
}

/// `own=` of the boot line.
fn heapless_list(vm: &Vm) -> Line {
    use core::fmt::Write;
    let mut line = Line::new();
    for (i, &(base, size)) in vm.own[..vm.nown].iter().enumerate() {
        let _ = write!(line, "{}{base:#x}+{size:#x}", if i > 0 { "," } else { "" });
    }
    line
}

/// A short line built in place (no allocator).
pub struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    pub const fn new() -> Self {
        Self { buf: [0; 512], len: 0 }
    }

    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl Default for Line {
    fn default() -> Self {
        Self::new()
    }
}

impl core::ops::Deref for Line {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl core::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

fn run_step(word: &str, vm: &Vm) {
    if word.starts_with("console=") {
        return; // for armhv: which console device gets typed input (`console-rx`)
    }
    let (name, arg) = match word.split_once('=') {
        Some((name, arg)) => (name, arg.parse::<u64>().ok()),
        None => (word, None),
    };
    let attack = |step: &str, f: &dyn Fn()| {
        report::begin_step();
        f();
        report::end_step(step);
    };
    match (name, arg) {
        ("mem", None) => attack("mem", &|| mem::step(vm)),
        ("mem-exhaust", None) => attack("mem-exhaust", &|| mem::exhaust(vm)),
        ("sysregs", None) => attack("sysregs", &|| sysregs::step(vm)),
        ("sysreg-sweep", None) => attack("sysreg-sweep", &|| sysregs::sweep()),
        ("aarch32", None) => attack("aarch32", &|| sysregs::aarch32()),
        ("hvc", None) => attack("hvc", &|| calls::hvc(vm)),
        ("psci", None) => attack("psci", &|| calls::psci(vm)),
        ("cpu-off-last", None) => calls::cpu_off_last(vm),
        ("reset-storm", Some(k)) => calls::reset_storm(vm, k, calls::Resetters::Alternate),
        ("reset-race", Some(k)) => calls::reset_storm(vm, k, calls::Resetters::Both),
        ("mmio", None) => attack("mmio", &|| mmio::step(vm)),
        ("virtio", None) => attack("virtio", &|| virtio::step(vm)),
        ("console-rx", None) => attack("console-rx", &|| vcons::step(vm)),
        ("sgi-storm", Some(ms)) => attack("sgi-storm", &|| irq::sgi_storm(vm, ms)),
        ("spin-masked", Some(ms)) => attack("spin-masked", &|| irq::spin_masked(ms)),
        ("chains", Some(ms)) => attack("chains", &|| chains::run(vm, ms)),
        ("abort-flood", Some(ms)) => attack("abort-flood", &|| mem::abort_flood(ms)),
        ("abort-loop", Some(ms)) => attack("abort-loop", &|| irq::abort_loop(vm, ms)),
        ("marker", Some(ms)) => leak::marker(vm, ms),
        ("leak-scan", Some(n)) => attack("leak-scan", &|| leak::scan(vm, n)),
        ("soak", Some(ms)) => {
            QUIET.set(true);
            soak::run(vm, ms)
        }
        ("talk", Some(n)) => snoop::talk(vm, n),
        ("snoop", Some(ms)) => attack("snoop", &|| snoop::snoop(vm, ms)),
        ("healthy", Some(n)) => {
            QUIET.set(true);
            healthy::run(vm, n)
        }
        ("off", None) => end_run(),
        _ => println!("hostile: unknown step '{word}'"),
    }
}

/// Busy-waits `ms` with `yield` hints (other vCPUs of QEMU's TCG get to run).
pub fn spin_ms(ms: u64) {
    let deadline = baremetal::time::counter() + baremetal::time::ms_to_ticks(ms);
    while !baremetal::time::passed(deadline) {
        cpu::yield_now();
    }
}
