//! Table V: where the instructions of one TCP request/response go, under armhv and natively
//! (issue 20, "Performance, round two"). QEMU logs every instruction it executes (`-singlestep`
//! and `log exec,nochain`, switched on through the HMP monitor only for the measured window)
//! into a FIFO; this module reads that stream as it comes (it is gigabytes), maps each
//! instruction to a category and counts. The runner is [`run`], the report [`markdown`].
//!
//! - Exception level: from the MMU index in the TB flags QEMU prints (EL2 is armhv, EL1 the
//!   guest kernel, EL0 guest user space).
//! - armhv's instructions: the innermost inlined function at the PC (its ELF's DWARF, built with
//!   `debug = true`), matched against [`RULES`]; frames that are library code (`core::`,
//!   `memcpy`, ...) are skipped outwards, and an instruction whose frames are all library code
//!   takes the category of the last armhv instruction classified on its CPU (its caller).
//! - Transactions: entries into the guest kernel's `tcp_sendmsg` (its address from
//!   `/proc/kallsyms` of a native boot with `nokaslr`): a request/response sends twice, the
//!   request and the echo. The window starts at one entry and ends 2N entries later, so it
//!   holds exactly N round trips whatever the log's start and end caught.

use std::collections::HashMap;

/// Where an instruction's time goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Exception entry and exit (vectors, the GP-register save and restore, the Spectre-BHB
    /// loop, `eret`) and exit decode and dispatch.
    Trap,
    /// State save and restore beyond the GP registers: EL1 system registers, FP/SIMD, debug,
    /// PMU, pointer-authentication keys, Stage-2 activation; vCPU load and put.
    WorldSwitch,
    /// Device emulation: virtio-mmio and its devices, the virtual switch, the uplink (the
    /// machine NIC's driver), the disks, the console UART, the MMIO bus.
    Device,
    /// Interrupt delivery: the vGIC, list registers, physical interrupt handling, timers,
    /// wake-ups and kicks.
    Interrupt,
    /// armhv's scheduler, its per-CPU loop and idle work.
    Scheduler,
    /// armhv code none of the rules names (system-register and hypercall emulation,
    /// statistics, ...): the report lists its largest functions.
    ArmhvOther,
    GuestKernel,
    GuestUser,
}

impl Category {
    pub const ALL: [Category; 8] = [
        Category::Trap,
        Category::WorldSwitch,
        Category::Device,
        Category::Interrupt,
        Category::Scheduler,
        Category::ArmhvOther,
        Category::GuestKernel,
        Category::GuestUser,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Trap => "armhv: traps (entry/exit, exit decode)",
            Category::WorldSwitch => "armhv: world switch (state save/restore, vCPU load/put)",
            Category::Device => "armhv: device emulation (virtio, switch, uplink)",
            Category::Interrupt => "armhv: interrupt delivery (vGIC, LRs, timers, kicks)",
            Category::Scheduler => "armhv: scheduler and idle",
            Category::ArmhvOther => "armhv: other",
            Category::GuestKernel => "guest kernel (EL1)",
            Category::GuestUser => "guest user (EL0)",
        }
    }

    pub fn is_armhv(self) -> bool {
        !matches!(self, Category::GuestKernel | Category::GuestUser)
    }

    fn index(self) -> usize {
        Category::ALL.iter().position(|&c| c == self).unwrap_or(0)
    }
}

/// What a rule makes of a function name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Is(Category),
    /// Library code: the category comes from the caller.
    Helper,
}

use Category::*;

/// armhv's function names (demangled, without generic arguments' detail) to categories: the
/// first rule whose pattern the name starts with wins, so specific names come before their
/// modules. Assembly symbols are matched by their plain names.
pub const RULES: &[(&str, Rule)] = &[
    // The vectors and the assembly around them: exception entry and exit.
    ("el2_vectors", Rule::Is(Trap)),
    ("guest_exit_common", Rule::Is(Trap)),
    ("guest_sync_", Rule::Is(Trap)),
    ("__guest_enter", Rule::Is(Trap)),
    ("spectre_exit_", Rule::Is(Trap)),
    ("hyp_exception", Rule::Is(Trap)),
    ("armhv::arch::aarch64::exception", Rule::Is(Trap)),
    ("armhv::arch::aarch64::speculation", Rule::Is(Trap)),
    ("trap::", Rule::Is(Trap)),
    ("vmm::exits", Rule::Is(Trap)),
    ("vmm::exit_ctx", Rule::Is(Trap)),
    // The run loop around the guest entry: the dispatch of each exit.
    ("vmm::run::run", Rule::Is(Trap)),
    ("vmm::cpu_loop::run_vcpu", Rule::Is(Trap)),
    // State that stays in the hardware while the same vCPU runs.
    ("__fpsimd_", Rule::Is(WorldSwitch)),
    ("__sve_", Rule::Is(WorldSwitch)),
    ("armhv_arch_el1_", Rule::Is(WorldSwitch)),
    ("armhv_arch_debug_", Rule::Is(WorldSwitch)),
    ("armhv_arch_pmu_", Rule::Is(WorldSwitch)),
    ("armhv_arch_sve_", Rule::Is(WorldSwitch)),
    ("armhv_arch_mdcr_for", Rule::Is(WorldSwitch)),
    ("armhv::arch::aarch64::el1_state", Rule::Is(WorldSwitch)),
    ("armhv::arch::aarch64::el2_regs", Rule::Is(WorldSwitch)),
    ("armhv::arch::aarch64::fpsimd", Rule::Is(WorldSwitch)),
    ("armhv::arch::aarch64::debug", Rule::Is(WorldSwitch)),
    ("armhv::arch::aarch64::pmu", Rule::Is(WorldSwitch)),
    ("armhv::arch::aarch64::pauth", Rule::Is(WorldSwitch)),
    ("armhv::arch::aarch64::mmu", Rule::Is(WorldSwitch)),
    ("vmm::emulate::fpsimd", Rule::Is(WorldSwitch)),
    ("vmm::emulate::pauth", Rule::Is(WorldSwitch)),
    ("vmm::run::", Rule::Is(WorldSwitch)),
    ("vmm::vcpu::", Rule::Is(WorldSwitch)),
    ("vmm::arch::", Rule::Is(WorldSwitch)),
    // Interrupts: the vGIC model and the hardware's list registers, physical interrupts,
    // timers, and the wake-ups (kicks) of other vCPUs.
    ("armhv_arch_read_lr", Rule::Is(Interrupt)),
    ("armhv_arch_gic_", Rule::Is(Interrupt)),
    ("vgic::", Rule::Is(Interrupt)),
    ("vmm::emulate::vgic", Rule::Is(Interrupt)),
    ("vmm::emulate::vtimer", Rule::Is(Interrupt)),
    ("vmm::emulate::ptimer", Rule::Is(Interrupt)),
    ("gtimer::", Rule::Is(Interrupt)),
    ("vmm::irq", Rule::Is(Interrupt)),
    ("irqdist::", Rule::Is(Interrupt)),
    ("vmm::wakeups", Rule::Is(Interrupt)),
    ("armhv::arch::aarch64::gic_cpuif", Rule::Is(Interrupt)),
    ("armhv::drivers::gic", Rule::Is(Interrupt)),
    ("arm_gic::", Rule::Is(Interrupt)),
    // Devices: virtio, the switch and the uplink, the disks, the UART, the bus.
    ("virtio::", Rule::Is(Device)),
    ("virtio_drivers::", Rule::Is(Device)),
    ("vdev::", Rule::Is(Device)),
    ("machine_disk::", Rule::Is(Device)),
    ("vmm::emulate::virtio", Rule::Is(Device)),
    ("vmm::emulate::network", Rule::Is(Device)),
    ("vmm::emulate::machine_disk", Rule::Is(Device)),
    ("vmm::emulate::uart", Rule::Is(Device)),
    ("vmm::emulate::mmio", Rule::Is(Device)),
    ("vmm::emulate::passthrough", Rule::Is(Device)),
    ("vmm::nic", Rule::Is(Device)),
    ("vmm::coherency", Rule::Is(Device)),
    ("vmm::memory", Rule::Is(Device)),
    ("armhv::drivers::", Rule::Is(Device)),
    // The scheduler and what a CPU does when it has no vCPU to run.
    ("credit::", Rule::Is(Scheduler)),
    ("vmm::sched", Rule::Is(Scheduler)),
    ("vmm::cpu_loop::", Rule::Is(Scheduler)),
    ("vmm::scrub", Rule::Is(Scheduler)),
    ("vmm::lifecycle::run_scrub_slice", Rule::Is(Scheduler)),
    // Library code, charged to its caller.
    ("core::", Rule::Helper),
    ("alloc::", Rule::Helper),
    ("compiler_builtins", Rule::Helper),
    ("spin::", Rule::Helper),
    ("lockorder::", Rule::Helper),
    ("vmm::sync", Rule::Helper),
    ("hashbrown::", Rule::Helper),
    ("heapless::", Rule::Helper),
    ("buddy_system_allocator::", Rule::Helper),
    ("aarch64_cpu::", Rule::Helper),
    ("tock_registers::", Rule::Helper),
    ("addr::", Rule::Helper),
    ("mem", Rule::Helper), // memcpy, memset, memmove, memcmp
    ("__", Rule::Helper),  // compiler_builtins' __udivti3 and the like
];

/// The rule for one function name, if any: a leading `<` (a trait impl, `<T as Trait>::f`) is
/// looked through to the type's path.
pub fn rule_for(name: &str) -> Option<Rule> {
    let name = name.trim_start_matches('<');
    // Methods of primitive types, pointers, slices and references (`<u64>::checked_add`,
    // `<*const u8>::read`) are the core library's.
    let primitive = name.starts_with(['*', '[', '&', '(']) || {
        let ty = name.split(['>', ' ']).next().unwrap_or_default();
        PRIMITIVES.contains(&ty)
    };
    if primitive {
        return Some(Rule::Helper);
    }
    RULES.iter().find(|(p, _)| name.starts_with(p)).map(|&(_, r)| r)
}

const PRIMITIVES: &[&str] = &[
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "bool",
    "char", "str", "f32", "f64",
];

/// The category of an armhv PC from its inline frames, innermost first: the first frame a
/// rule gives a category decides; `None` when every frame is library code (the caller's
/// category applies). Frames no rule names make it [`Category::ArmhvOther`], unless an outer
/// frame has a category.
pub fn classify_frames<S: AsRef<str>>(frames: &[S]) -> Option<Category> {
    let mut unnamed = false;
    for f in frames {
        match rule_for(f.as_ref()) {
            Some(Rule::Is(c)) => return Some(c),
            Some(Rule::Helper) => {}
            None => unnamed = true,
        }
    }
    unnamed.then_some(ArmhvOther)
}

/// One line of QEMU's `exec` log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exec {
    pub cpu: u32,
    pub pc: u64,
    pub el: u8,
}

/// Parses `Trace CPU: HOSTPTR [CS_BASE/PC/FLAGS/CFLAGS] SYMBOL` (QEMU 7.2's `exec` log). The
/// exception level is the MMU index in TBFLAG_ANY bits 4-7 (target/arm/cpu.h, ARMMMUIdx):
/// 0 E10_0 and 1 E20_0 are EL0, 2 E10_1 and 4 E10_1_PAN EL1, 3 E20_2, 5 E20_2_PAN and 6 E2
/// EL2, 7 EL3.
pub fn parse_line(line: &[u8]) -> Option<Exec> {
    let rest = line.strip_prefix(b"Trace ")?;
    let colon = rest.iter().position(|&b| b == b':')?;
    let cpu: u32 = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
    let open = rest.iter().position(|&b| b == b'[')?;
    let close = open + rest[open..].iter().position(|&b| b == b']')?;
    let mut fields = rest[open + 1..close].split(|&b| b == b'/');
    let _cs_base = fields.next()?;
    let pc = hex(fields.next()?)?;
    let flags = hex(fields.next()?)?;
    let el = match (flags >> 4) & 0xf {
        0 | 1 => 0,
        2 | 4 => 1,
        3 | 5 | 6 => 2,
        7 => 3,
        _ => return None,
    };
    Some(Exec { cpu, pc, el })
}

fn hex(s: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
}

/// The address of `name` in `/proc/kallsyms` text (`ADDR TYPE NAME [MODULE]`).
pub fn kallsyms_address(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let (addr, _ty, n) = (w.next()?, w.next()?, w.next()?);
        (n == name).then(|| u64::from_str_radix(addr, 16).ok()).flatten()
    })
}

/// The guest kernel's functions from `/proc/kallsyms` text: the text symbols (`t`, `T`),
/// sorted, a module's with its name in brackets.
#[derive(Clone, Debug, Default)]
pub struct KernelSymbols {
    starts: Vec<u64>,
    names: Vec<String>,
}

impl KernelSymbols {
    pub fn parse(text: &str) -> Self {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (addr, ty, name) = (w.next()?, w.next()?, w.next()?);
                if !matches!(ty, "t" | "T") {
                    return None;
                }
                let addr = u64::from_str_radix(addr, 16).ok()?;
                let name = match w.next() {
                    Some(module) => format!("{name} {module}"),
                    None => name.to_owned(),
                };
                Some((addr, name))
            })
            .collect();
        syms.sort();
        let (starts, names) = syms.into_iter().unzip();
        Self { starts, names }
    }

    /// The index of the function holding `pc`: the last that starts at or below it.
    pub fn index(&self, pc: u64) -> Option<usize> {
        self.starts.partition_point(|&s| s <= pc).checked_sub(1)
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// The inline frames of an armhv PC, innermost first (the ELF's DWARF in the real run).
pub trait Symbolizer {
    fn frames(&mut self, pc: u64) -> Vec<String>;
}

/// armhv's ELF through `addr2line`: inline frames from the DWARF, else the symbol table (the
/// assembly has no DWARF functions).
pub struct ElfSymbols {
    loader: addr2line::Loader,
}

impl ElfSymbols {
    pub fn open(path: &std::path::Path) -> anyhow::Result<Self> {
        let loader = addr2line::Loader::new(path)
            .map_err(|e| anyhow::anyhow!("reading armhv's symbols from {}: {e}", path.display()))?;
        Ok(Self { loader })
    }
}

impl Symbolizer for ElfSymbols {
    fn frames(&mut self, pc: u64) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(mut it) = self.loader.find_frames(pc) {
            while let Ok(Some(f)) = it.next() {
                if let Some(name) = f.function.as_ref().and_then(|n| n.demangle().ok()) {
                    out.push(strip_hash(&name).to_owned());
                }
            }
        }
        if out.is_empty()
            && let Some(sym) = self.loader.find_symbol(pc)
        {
            out.push(strip_hash(&addr2line::demangle_auto(sym.into(), None)).to_owned());
        }
        out
    }
}

/// The address of symbol `name` in the ELF file at `path`.
pub fn elf_symbol(path: &Path, name: &str) -> Result<Option<u64>> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = object::File::parse(&*data)
        .map_err(|e| anyhow!("{}: not an ELF file: {e}", path.display()))?;
    Ok(file.symbols().find(|s| s.name() == Ok(name)).map(|s| s.address()))
}

/// `path::f::h0123456789abcdef` to `path::f` (legacy mangling's hash).
fn strip_hash(name: &str) -> &str {
    match name.rsplit_once("::h") {
        Some((head, tail)) if tail.len() == 16 && tail.bytes().all(|b| b.is_ascii_hexdigit()) => {
            head
        }
        _ => name,
    }
}

/// armhv's PCs to categories, cached: the deciding function of each PC from its inline frames
/// ([`classify_frames`]); an instruction of library code only takes the category of the last
/// armhv instruction classified on its CPU (its caller), and its function is named
/// `LIB (from CALLER)`. Shared by Table V's window and the microbenchmarks' paths (`paths`).
pub struct ArmhvClassifier<S> {
    symbols: S,
    /// armhv PC -> its category (None: library code) and deciding function.
    cache: HashMap<u64, (Option<Category>, String)>,
    /// The category and function of the last classified armhv instruction per CPU.
    last: Vec<(Category, String)>,
}

impl<S: Symbolizer> ArmhvClassifier<S> {
    pub fn new(symbols: S) -> Self {
        Self { symbols, cache: HashMap::new(), last: Vec::new() }
    }

    /// The category and deciding function of the armhv instruction at `pc`, run on `cpu`.
    pub fn classify(&mut self, cpu: usize, pc: u64) -> (Category, String) {
        if self.last.len() <= cpu {
            self.last.resize(cpu + 1, (Trap, String::new()));
        }
        let symbols = &mut self.symbols;
        let (cat, func) = self.cache.entry(pc).or_insert_with(|| {
            let frames = symbols.frames(pc);
            let cat = classify_frames(&frames);
            let func = frames
                .iter()
                .find(|f| matches!(rule_for(f), Some(Rule::Is(_))))
                .or_else(|| frames.iter().find(|f| rule_for(f).is_none()))
                .or(frames.first())
                .cloned()
                .unwrap_or_else(|| format!("{pc:#x} (no symbol)"));
            (cat, func)
        });
        match cat {
            Some(c) => {
                self.last[cpu] = (*c, func.clone());
                (*c, func.clone())
            }
            None => (self.last[cpu].0, format!("{} (from {})", func, self.last[cpu].1)),
        }
    }

    /// The inline frames at `pc`, innermost first (uncached).
    pub fn frames(&mut self, pc: u64) -> Vec<String> {
        self.symbols.frames(pc)
    }
}

/// The counts of one traced window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Instructions per category, in [`Category::ALL`]'s order.
    pub by_category: [u64; 8],
    /// Instructions per CPU.
    pub by_cpu: Vec<u64>,
    /// armhv's instructions per (category, deciding function), for the report's detail.
    pub armhv_functions: HashMap<(Category, String), u64>,
    /// Instructions at EL3 or that could not be parsed (should be none).
    pub unparsed: u64,
    /// Round trips in the window.
    pub transactions: u64,
    /// Trace lines read before the window opened and after it closed.
    pub outside: u64,
    /// Exits from the guests to armhv (lower-EL vector entries) in the window.
    pub exits: u64,
    /// Instructions QEMU logged and then did not execute (taken back).
    pub stopped: u64,
}

impl Tally {
    pub fn total(&self) -> u64 {
        self.by_category.iter().sum()
    }
}

/// The streaming aggregator: feed it the log's lines; it opens the window at the first send,
/// closes it after `wanted` round trips, and ignores the rest.
pub struct Aggregator<S> {
    armhv: ArmhvClassifier<S>,
    marker: u64,
    wanted: u64,
    sends: u64,
    open: bool,
    done: bool,
    /// The function key of the EL2 instruction being counted, for [`Counted`].
    counted_func: Option<(Category, String)>,
    counted: Option<Counted>,
    vectors: Option<u64>,
    kernel: KernelSymbols,
    /// Instructions per guest kernel function, by [`KernelSymbols`] index.
    kernel_counts: Vec<u64>,
    pub tally: Tally,
}

impl<S: Symbolizer> Aggregator<S> {
    /// `marker`: the guest kernel's `tcp_sendmsg`; `wanted`: round trips to measure.
    pub fn new(symbols: S, marker: u64, wanted: u64) -> Self {
        Self {
            armhv: ArmhvClassifier::new(symbols),
            marker,
            wanted,
            sends: 0,
            open: false,
            done: false,
            counted_func: None,
            counted: None,
            vectors: None,
            kernel: KernelSymbols::default(),
            kernel_counts: Vec::new(),
            tally: Tally::default(),
        }
    }

    pub fn done(&self) -> bool {
        self.done
    }

    /// Sends seen so far (two per round trip).
    pub fn sends(&self) -> u64 {
        self.sends
    }

    pub fn feed(&mut self, line: &[u8]) {
        if self.done {
            self.tally.outside += 1;
            return;
        }
        // QEMU logged a TB it then did not start (its instruction budget ran out, or an
        // interrupt came): the line before, on this one-thread icount log, did not execute.
        if line.starts_with(STOPPED) {
            if let Some(last) = self.counted.take() {
                self.uncount(last);
            }
            return;
        }
        let Some(e) = parse_line(line) else {
            if self.open && line.starts_with(b"Trace ") {
                self.tally.unparsed += 1;
            }
            return;
        };
        self.counted = None;
        let send = e.el == 1 && e.pc == self.marker;
        let mut kernel_fn = None;
        if send {
            self.sends += 1;
            if !self.open {
                self.open = true;
                self.sends = 0;
            } else if self.sends == 2 * self.wanted {
                self.tally.transactions = self.wanted;
                self.done = true;
                self.tally.outside += 1;
                return;
            }
        }
        if !self.open {
            self.tally.outside += 1;
            return;
        }
        let cpu = e.cpu as usize;
        if self.tally.by_cpu.len() <= cpu {
            self.tally.by_cpu.resize(cpu + 1, 0);
        }
        self.tally.by_cpu[cpu] += 1;
        if e.el == 2 && self.vectors.is_some_and(|v| is_lower_el_entry(v, e.pc)) {
            self.tally.exits += 1;
        }
        let category = match e.el {
            0 => GuestUser,
            1 => {
                kernel_fn = self.kernel.index(e.pc);
                if let Some(i) = kernel_fn {
                    self.kernel_counts[i] += 1;
                }
                GuestKernel
            }
            2 => {
                let (cat, func) = self.armhv.classify(cpu, e.pc);
                *self.tally.armhv_functions.entry((cat, func.clone())).or_default() += 1;
                self.counted_func = Some((cat, func));
                cat
            }
            _ => {
                self.tally.unparsed += 1;
                return;
            }
        };
        self.tally.by_category[category.index()] += 1;
        let func = self.counted_func.take();
        self.counted = Some(Counted { cpu, category, func, kernel_fn, send, pc: e.pc, el: e.el });
    }

    fn uncount(&mut self, c: Counted) {
        self.tally.by_cpu[c.cpu] -= 1;
        self.tally.by_category[c.category.index()] -= 1;
        if let Some(key) = c.func
            && let Some(n) = self.tally.armhv_functions.get_mut(&key)
        {
            *n -= 1;
        }
        if c.el == 2 && self.vectors.is_some_and(|v| is_lower_el_entry(v, c.pc)) {
            self.tally.exits -= 1;
        }
        if c.send {
            self.sends -= 1;
        }
        if let Some(i) = c.kernel_fn {
            self.kernel_counts[i] -= 1;
        }
        self.tally.stopped += 1;
    }

    /// Counts the guest kernel's instructions per function too.
    pub fn with_kernel(mut self, kernel: KernelSymbols) -> Self {
        self.kernel_counts = vec![0; kernel.len()];
        self.kernel = kernel;
        self
    }

    /// The guest kernel's `n` functions with the most instructions.
    pub fn kernel_top(&self, n: usize) -> Vec<(String, u64)> {
        let mut top: Vec<(usize, u64)> =
            self.kernel_counts.iter().copied().enumerate().filter(|c| c.1 > 0).collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.into_iter().take(n).map(|(i, c)| (self.kernel.name(i).to_owned(), c)).collect()
    }

    /// Counts exits from the guest: entries into the lower-EL half of the vector table at
    /// `base` (`el2_vectors`).
    pub fn with_vectors(mut self, base: Option<u64>) -> Self {
        self.vectors = base;
        self
    }
}

pub(crate) const STOPPED: &[u8] = b"Stopped execution of TB chain";

/// Whether `pc` is the first instruction of an entry for exceptions from a lower EL (AArch64:
/// offsets 0x400-0x580 of the table, 0x80 apart).
pub fn is_lower_el_entry(base: u64, pc: u64) -> bool {
    pc.checked_sub(base).is_some_and(|off| (0x400..0x600).contains(&off) && off % 0x80 == 0)
}

/// The last instruction counted, to take back when QEMU says it did not execute.
struct Counted {
    cpu: usize,
    category: Category,
    func: Option<(Category, String)>,
    kernel_fn: Option<usize>,
    send: bool,
    pc: u64,
    el: u8,
}

// --- The runs -------------------------------------------------------------------------------

use crate::configtext::{absolute_paths, rewrite_cmdline};
use crate::model::TableV;
use crate::runlog::rel;
use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Round trips traced per run: a few hundred make the per-transaction figures steady while the
/// trace (every instruction a log line) stays within minutes.
pub const ROUND_TRIPS: u64 = 200;
/// The config of the armhv run (its `linux0` is also the native run's guest).
pub const CONFIG: &str = "configs/bench/tablev.toml";
/// The console line after which sockperf runs.
const STARTED: &str = "armhv-bench: workload tcp-rr";
/// sockperf as the workloads run it (5 s: a longer `-t` makes sockperf allocate its samples
/// beyond the guest's 256 MiB), repeated far longer than the trace needs; the run is stopped
/// once the trace is done.
const RUN_WORDS: &str = "--seconds,5,--reps,100,tcp-rr";
const MARKER: &str = "tcp_sendmsg";
/// armhv's EL2 vector table (hypervisor/src/arch/aarch64/boot.S).
const VECTORS: &str = "el2_vectors";
/// How long sockperf runs untraced before the window (wall time).
const SETTLE: Duration = Duration::from_secs(3);

impl TableV {
    fn from_tally(t: &Tally, kernel_functions: Vec<(String, u64)>, trace_seconds: f64) -> Self {
        let mut top: Vec<_> = t
            .armhv_functions
            .iter()
            .map(|((c, f), n)| (c.name().to_owned(), f.clone(), *n))
            .collect();
        top.sort_by(|a, b| b.2.cmp(&a.2).then(a.1.cmp(&b.1)));
        top.truncate(40);
        TableV {
            transactions: t.transactions,
            categories: Category::ALL
                .iter()
                .map(|c| (c.name().to_owned(), t.by_category[c.index()]))
                .collect(),
            by_cpu: t.by_cpu.clone(),
            top_functions: top,
            unparsed: t.unparsed,
            exits: t.exits,
            stopped: t.stopped,
            kernel_functions,
            trace_seconds,
            marker: MARKER.into(),
        }
    }

    pub fn total(&self) -> u64 {
        self.categories.iter().map(|c| c.1).sum()
    }

    /// Instructions per transaction of a category, by name.
    pub fn per_transaction(&self, name: &str) -> Option<f64> {
        let n = self.categories.iter().find(|c| c.0 == name)?.1;
        (self.transactions > 0).then(|| n as f64 / self.transactions as f64)
    }
}

/// The guest kernel's symbols, from `/proc/kallsyms` in a short native boot of the same kernel
/// and initramfs with `nokaslr` (Debian's System.map is a placeholder; the real one is in the
/// -dbg package, hundreds of MB).
pub fn kallsyms(kernel: &Path, initrd: &Path, dir: &Path) -> Result<String> {
    let mut cmd = Command::new("qemu-system-aarch64");
    cmd.args(["-M", "virt,gic-version=3,dtb-randomness=off", "-cpu", "cortex-a76"])
        .args(["-smp", "2", "-m", "512M", "-kernel"])
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyAMA0 quiet nokaslr armhv.run=cat,/proc/kallsyms"])
        .args(["-no-reboot", "-display", "none", "-serial", "stdio", "-monitor", "none"]);
    let out = run_bounded(cmd, Duration::from_secs(120))
        .context("booting the guest kernel natively to read its /proc/kallsyms")?;
    std::fs::write(dir.join("kallsyms.txt"), &out)?;
    if kallsyms_address(&out, MARKER).is_none() {
        bail!(
            "no {MARKER} in the guest's /proc/kallsyms (see {}): is the kernel Debian's?",
            rel(&dir.join("kallsyms.txt"))
        );
    }
    Ok(out)
}

/// Runs `cmd` to its end with its stdout as the result, killed after `timeout`.
fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<String> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().context("could not start qemu-system-aarch64")?;
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stdout.read_to_end(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("QEMU did not finish in {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = reader.join().map_err(|_| anyhow!("console reader panicked"))?;
    Ok(String::from_utf8_lossy(&out).replace('\r', ""))
}

/// QEMU's human monitor on a Unix socket.
struct Monitor(UnixStream);

impl Monitor {
    fn connect(path: &Path, timeout: Duration) -> Result<Self> {
        let deadline = Instant::now() + timeout;
        loop {
            match UnixStream::connect(path) {
                Ok(s) => {
                    s.set_read_timeout(Some(Duration::from_millis(300)))?;
                    return Ok(Self(s));
                }
                Err(e) if Instant::now() >= deadline => {
                    bail!("connecting to QEMU's monitor at {}: {e}", path.display())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Sends one command and returns what the monitor printed after it (its echo included).
    fn command(&mut self, cmd: &str) -> Result<String> {
        self.0.write_all(format!("{cmd}\n").as_bytes())?;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match self.0.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    if out.ends_with(b"(qemu) ") && out.len() > cmd.len() {
                        break;
                    }
                }
                Err(_) => {
                    if !out.is_empty() {
                        break;
                    }
                }
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// What one side's run measured, and its console.
pub struct Measured {
    pub table: TableV,
    pub console: String,
    pub command: String,
    pub seconds: f64,
}

/// Traces one side: `variant` is `native` (the client VM's kernel on plain QEMU, client and
/// server over loopback) or `armhv` (the config's two VMs over armhv's switch). Both under
/// `-icount shift=0,sleep=off`, so that an instruction is a unit of time.
pub fn run(variant: &str, opts: &crate::Options, work: &Path) -> Result<Measured> {
    let timeout = opts.timeout;
    use crate::catalog::{CLIENT_VM, NATIVE, SERVER_VM};
    let config_path = xtask::root().join(CONFIG);
    let mut machine = crate::workloads::armhv_machine(opts);
    machine.icount = true;
    let cfg =
        vmconfig::load(&config_path, &machine.as_config_machine()).map_err(|e| anyhow!("{e}"))?;
    let vm = |name: &str| {
        cfg.vms
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| anyhow!("{}: no VM named {name:?}", rel(&config_path)))
    };
    let client = vm(CLIENT_VM)?;
    let file = |r: &vmconfig::ImageRef| match r {
        vmconfig::ImageRef::Path(p) => Ok(p.clone()),
        vmconfig::ImageRef::Built(n) => bail!("{}: @{n}: Table V needs Linux", rel(&config_path)),
    };
    let kernel = file(&client.kernel)?;
    let initrd = file(client.initrd.as_ref().ok_or_else(|| anyhow!("linux0 has no initrd"))?)?;
    for p in [&kernel, &initrd] {
        if !p.exists() {
            bail!("{} is missing: run {}", rel(p), crate::workloads::ASSETS_HINT);
        }
    }
    std::fs::create_dir_all(work)?;
    let syms = kallsyms(&kernel, &initrd, work)?;
    let marker = kallsyms_address(&syms, MARKER).unwrap_or_default();

    let fifo = work.join(format!("{variant}.fifo"));
    let monitor = work.join(format!("{variant}.monitor"));
    for p in [&fifo, &monitor] {
        let _ = std::fs::remove_file(p);
    }
    let st = Command::new("mkfifo").arg(&fifo).status().context("running mkfifo")?;
    if !st.success() {
        bail!("mkfifo {} failed", fifo.display());
    }
    let (mut cmd, elf) = if variant == NATIVE {
        let run = format!("armhv.run=armhv-bench,--local,{RUN_WORDS}");
        let io = crate::workloads::NativeIo { machine_disk: None, nic: None };
        let mut cmd = crate::workloads::native_command(&machine, client, &run, None, &io)?;
        cmd.args(xtask::qemu::ICOUNT_ARGS);
        (cmd, None)
    } else {
        let server = vm(SERVER_VM)?;
        let addr = crate::workloads::vm_address(&server.cmdline)
            .ok_or_else(|| anyhow!("{}: {SERVER_VM} has no armhv.ip=", rel(&config_path)))?;
        let words = format!("armhv.run=armhv-bench,--peer,{addr},{RUN_WORDS}");
        let text = std::fs::read_to_string(&config_path)?;
        let dir = config_path.parent().unwrap_or(Path::new("."));
        let text = rewrite_cmdline(&absolute_paths(&text, dir), CLIENT_VM, &words)?;
        let copy = work.join("tablev-run.toml");
        std::fs::write(&copy, text)?;
        let img = xtask::image::build(&copy, &machine)?;
        // Already built by the image: cargo only checks it is fresh.
        let elf = xtask::cargo_build("armhv", xtask::HYP_TARGET)?;
        let mut cmd = xtask::qemu::command(&img, &machine);
        cmd.args(["-display", "none", "-serial", "stdio"]);
        (cmd, Some(elf))
    };
    cmd.arg("-monitor")
        .arg(format!("unix:{},server=on,wait=off", monitor.display()))
        .arg("-D")
        .arg(&fifo);
    let command = xtask::qemu::command_line(&cmd);
    let symbols: Box<dyn Symbolizer + Send> = match &elf {
        Some(elf) => Box::new(ElfSymbols::open(elf)?),
        None => Box::new(NoArmhv),
    };
    let vectors = match &elf {
        Some(elf) => Some(elf_symbol(elf, VECTORS)?.ok_or_else(|| {
            anyhow!("{}: no symbol {VECTORS} (armhv's EL2 vector table)", elf.display())
        })?),
        None => None,
    };
    let agg = Aggregator::new(symbols, marker, ROUND_TRIPS)
        .with_vectors(vectors)
        .with_kernel(KernelSymbols::parse(&syms));
    trace(cmd, command, &fifo, &monitor, agg, timeout)
}

/// Natively nothing runs at EL2.
struct NoArmhv;
impl Symbolizer for NoArmhv {
    fn frames(&mut self, _pc: u64) -> Vec<String> {
        Vec::new()
    }
}

impl Symbolizer for Box<dyn Symbolizer + Send> {
    fn frames(&mut self, pc: u64) -> Vec<String> {
        (**self).frames(pc)
    }
}

fn trace(
    mut cmd: Command,
    command: String,
    fifo: &Path,
    monitor: &Path,
    mut agg: Aggregator<Box<dyn Symbolizer + Send>>,
    timeout: Duration,
) -> Result<Measured> {
    // The reader opens the FIFO first: QEMU's open for writing waits for it.
    let done = Arc::new(AtomicBool::new(false));
    let sends = Arc::new(AtomicU64::new(0));
    let (done2, sends2, path) = (done.clone(), sends.clone(), fifo.to_owned());
    let reader = std::thread::spawn(move || -> Result<(Tally, Vec<(String, u64)>)> {
        let f =
            std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut line = Vec::with_capacity(128);
        loop {
            line.clear();
            if r.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            agg.feed(&line);
            if agg.done() {
                done2.store(true, Ordering::Relaxed);
            } else if agg.sends().is_multiple_of(16) {
                sends2.store(agg.sends(), Ordering::Relaxed);
            }
        }
        let top = agg.kernel_top(20);
        Ok((agg.tally, top))
    });
    let start = Instant::now();
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().context("could not start qemu-system-aarch64")?;
    let console = Arc::new(Mutex::new(String::new()));
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let out = console.clone();
        std::thread::spawn(move || {
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                out.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
    }
    let result = drive(&mut child, &console, monitor, &done, &sends, timeout);
    let trace_seconds = result.as_ref().map(|t| *t).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    // A reader still waiting in open (QEMU never opened the log) gets a writer and then EOF.
    // Non-blocking: when the reader has already gone, a blocking open would wait forever.
    {
        use std::os::unix::fs::OpenOptionsExt;
        const O_NONBLOCK: i32 = 0o4000; // Linux's, on x86-64 and arm64 alike
        let _ = std::fs::OpenOptions::new().write(true).custom_flags(O_NONBLOCK).open(fifo);
    }
    let seconds = start.elapsed().as_secs_f64();
    let console = console.lock().unwrap().replace('\r', "");
    let tally = reader.join().map_err(|_| anyhow!("the trace reader panicked"))?;
    let _ = std::fs::remove_file(fifo);
    result.map_err(|e| anyhow!("{e:#}\n{}", tail(&console)))?;
    let (tally, kernel_top) = tally?;
    if tally.transactions == 0 {
        bail!("the trace ended before {ROUND_TRIPS} round trips\n{}", tail(&console));
    }
    Ok(Measured {
        table: TableV::from_tally(&tally, kernel_top, trace_seconds),
        console,
        command,
        seconds,
    })
}

fn tail(console: &str) -> String {
    let lines: Vec<&str> = console.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Waits for sockperf, switches the log on for the window and off when the reader has its
/// round trips; returns the window's wall seconds.
fn drive(
    child: &mut Child,
    console: &Mutex<String>,
    monitor: &Path,
    done: &AtomicBool,
    sends: &AtomicU64,
    timeout: Duration,
) -> Result<f64> {
    let start = Instant::now();
    let mut mon = Monitor::connect(monitor, Duration::from_secs(20))?;
    loop {
        if console.lock().unwrap().contains(STARTED) {
            break;
        }
        if let Some(st) = child.try_wait()? {
            bail!("QEMU exited ({st}) before `{STARTED}`");
        }
        if start.elapsed() >= timeout {
            bail!("no `{STARTED}` on the console in {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // sockperf first allocates and touches its sample buffers, tens of millions of
    // instructions that are no round trip; untraced, the guest passes them in well under this.
    std::thread::sleep(SETTLE);
    // One instruction per translation block, so that every executed instruction is a line;
    // nochain so that none runs without passing the logger.
    for c in ["singlestep on", "log exec,nochain"] {
        let out = mon.command(c)?;
        if out.contains("Invalid") || out.contains("unknown") {
            bail!("QEMU's monitor refused `{c}`: {out}");
        }
    }
    let window = Instant::now();
    let mut last_report = Instant::now();
    while !done.load(Ordering::Relaxed) {
        if let Some(st) = child.try_wait()? {
            bail!("QEMU exited ({st}) during the trace");
        }
        {
            let out = console.lock().unwrap();
            if let Some(l) = out.lines().find(|l| l.contains("armhv-bench: error")) {
                bail!("sockperf failed during the trace: {l}");
            }
            if out.contains(crate::workloads::DONE) {
                bail!("armhv-bench finished its repetitions before the trace had its round trips");
            }
        }
        if start.elapsed() >= timeout {
            bail!(
                "timed out after {timeout:?} with {} of {} sends traced (raise --timeout)",
                sends.load(Ordering::Relaxed),
                2 * ROUND_TRIPS
            );
        }
        if last_report.elapsed() >= Duration::from_secs(30) {
            eprintln!(
                "bench: tablev: {} of {} sends traced, {:.0} s",
                sends.load(Ordering::Relaxed),
                2 * ROUND_TRIPS,
                window.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let seconds = window.elapsed().as_secs_f64();
    for c in ["log none", "singlestep off"] {
        let _ = mon.command(c);
    }
    let _ = mon.command("quit");
    Ok(seconds)
}

/// Where a run keeps its FIFO, monitor socket and the guest's symbols.
pub fn work_dir() -> PathBuf {
    xtask::build_dir().join("tablev")
}

/// One planned step: the trace of `step.variant`, its console written to `log`.
pub fn run_step(
    step: &crate::options::Step,
    opts: &crate::Options,
    log: &Path,
) -> Result<crate::model::Run> {
    let m = run(&step.variant, opts, &work_dir());
    if let Ok(m) = &m {
        std::fs::write(log, &m.console).with_context(|| format!("writing {}", log.display()))?;
    }
    let m = m?;
    eprintln!(
        "bench: tablev {}: {} round trips, {:.0} instructions each, traced in {:.0} s",
        step.variant,
        m.table.transactions,
        m.table.total() as f64 / m.table.transactions as f64,
        m.table.trace_seconds
    );
    Ok(crate::model::Run {
        kind: crate::model::Kind::TableV,
        variant: step.variant.clone(),
        features: Vec::new(),
        mode: step.mode,
        seconds: m.seconds,
        figures: Vec::new(),
        skips: Vec::new(),
        overhead: None,
        console: Default::default(),
        qemu_command: m.command,
        workloads: None,
        distributor: None,
        tablev: Some(m.table),
        paths: None,
        gic: crate::catalog::GICV3,
        not_run: None,
    })
}

// --- The report -----------------------------------------------------------------------------

fn side<'a>(runs: &'a [crate::model::Run], variant: &str) -> Option<&'a TableV> {
    runs.iter()
        .filter(|r| r.kind == crate::model::Kind::TableV && r.variant == variant)
        .find_map(|r| r.tablev.as_ref())
}

/// The table's rows: (category, per round trip and share under armhv, the same natively).
pub fn rows(armhv: Option<&TableV>, native: Option<&TableV>) -> Vec<[String; 5]> {
    use crate::numbers::int;
    let cell = |t: Option<&TableV>, name: &str| match t {
        Some(t) => match t.per_transaction(name) {
            Some(v) if v > 0.0 || !name.starts_with("armhv") => {
                (int(v), format!("{:.1} %", 100.0 * v * t.transactions as f64 / t.total() as f64))
            }
            _ => ("-".into(), "".into()),
        },
        None => ("not run".into(), "".into()),
    };
    let mut out = Vec::new();
    for c in Category::ALL {
        let (a, ash) = cell(armhv, c.name());
        let (n, nsh) = cell(native, c.name());
        out.push([c.name().to_owned(), a, ash, n, nsh]);
    }
    let total = |t: Option<&TableV>| {
        t.map_or("not run".into(), |t| int(t.total() as f64 / t.transactions as f64))
    };
    let armhv_share = armhv.map_or(String::new(), |t| {
        let a: u64 = t.categories.iter().filter(|c| c.0.starts_with("armhv")).map(|c| c.1).sum();
        format!("armhv {:.1} %", 100.0 * a as f64 / t.total() as f64)
    });
    out.push([
        "**total per round trip**".into(),
        format!("**{}**", total(armhv)),
        armhv_share,
        format!("**{}**", total(native)),
        String::new(),
    ]);
    out
}

pub fn markdown(md: &mut String, runs: &[crate::model::Run]) {
    use crate::catalog::{ARMHV, NATIVE};
    use crate::numbers::int;
    use std::fmt::Write as _;
    let (a, n) = (side(runs, ARMHV), side(runs, NATIVE));
    let planned = runs.iter().any(|r| r.kind == crate::model::Kind::TableV);
    if !planned {
        return;
    }
    let _ = writeln!(md, "\n## Table V: one TCP request/response, decomposed\n");
    let _ = writeln!(
        md,
        "Instructions per round trip of sockperf's 64-byte TCP ping-pong, from a trace of every \
         instruction QEMU executed (icount, one instruction per translation block) over exactly \
         the round trips counted; under armhv both VMs, their 4 vCPUs and armhv on 4 CPUs, \
         natively client and server in one guest over loopback (how: bench/README.md, \
         \"Table V\").\n"
    );
    let count = |t: Option<&TableV>| {
        t.map_or("not run".to_owned(), |t| {
            format!("{} round trips, traced in {:.0} s", t.transactions, t.trace_seconds)
        })
    };
    let _ = writeln!(md, "- under armhv: {}; natively: {}\n", count(a), count(n));
    let _ = writeln!(
        md,
        "| Where | armhv: instructions / round trip | share | native: instructions / round \
         trip | share |\n|---|---:|---:|---:|---:|"
    );
    for r in rows(a, n) {
        let _ = writeln!(md, "| {} |", r.join(" | "));
    }
    if let Some(t) = a {
        let per = |v: u64| int(v as f64 / t.transactions as f64);
        let cpus: Vec<String> =
            t.by_cpu.iter().enumerate().map(|(i, v)| format!("CPU {i}: {}", per(*v))).collect();
        let _ = writeln!(
            md,
            "\nUnder armhv: {:.1} exits from the guests per round trip (entries into armhv's \
             lower-EL vectors); per CPU and round trip (CPUs 0-1 run the client VM `linux0`, \
             2-3 the server `linux1`): {}. {} instructions QEMU logged but did not start were \
             taken back; {} lines could not be parsed.\n",
            t.exits as f64 / t.transactions as f64,
            cpus.join(", "),
            t.stopped,
            t.unparsed
        );
        let _ = writeln!(
            md,
            "armhv's largest functions (the function that decided the category; `(from X)`: \
             library code charged to its caller X):\n\n| Function | Category | instructions / \
             round trip |\n|---|---|---:|"
        );
        for (cat, f, v) in t.top_functions.iter().take(20) {
            let _ = writeln!(md, "| `{}` | {} | {} |", f.replace('|', "\\|"), cat, per(*v));
        }
    }
    kernel_functions(md, a, n);
}

/// The guest kernel's largest functions on both sides, by instructions per round trip.
fn kernel_functions(md: &mut String, a: Option<&TableV>, n: Option<&TableV>) {
    use crate::numbers::int;
    use std::fmt::Write as _;
    let lists = [("under armhv (both VMs)", a), ("natively", n)];
    if lists.iter().all(|(_, t)| t.is_none_or(|t| t.kernel_functions.is_empty())) {
        return;
    }
    let _ = writeln!(
        md,
        "\nThe guest kernel's largest functions (names from the native boot's kallsyms; a \
         module's, in brackets, assume it loaded at the same address under armhv):\n"
    );
    for (what, t) in lists {
        let Some(t) = t.filter(|t| t.transactions > 0) else { continue };
        let cells: Vec<String> = t
            .kernel_functions
            .iter()
            .map(|(f, v)| format!("`{f}` {}", int(*v as f64 / t.transactions as f64)))
            .collect();
        let _ = writeln!(md, "- {what}: {}", cells.join(", "));
    }
}

pub fn terminal(runs: &[crate::model::Run]) -> String {
    use crate::catalog::{ARMHV, NATIVE};
    if !runs.iter().any(|r| r.kind == crate::model::Kind::TableV) {
        return String::new();
    }
    let (a, n) = (side(runs, ARMHV), side(runs, NATIVE));
    let mut out = format!(
        "Table V: instructions per TCP round trip ({} / {} round trips, armhv / native)\n",
        a.map_or("not run".into(), |t| t.transactions.to_string()),
        n.map_or("not run".into(), |t| t.transactions.to_string())
    );
    out.push_str(&format!(
        "  {:<58} {:>12} {:>7} {:>12} {:>7}\n",
        "", "armhv", "share", "native", "share"
    ));
    if let Some(t) = a {
        out.push_str(&format!(
            "  under armhv: {:.1} exits per round trip\n",
            t.exits as f64 / t.transactions as f64
        ));
    }
    for r in rows(a, n) {
        let name = r[0].trim_matches('*');
        let (x, y) = (r[1].trim_matches('*'), r[3].trim_matches('*'));
        out.push_str(&format!("  {name:<58} {x:>12} {:>7} {y:>12} {:>7}\n", r[2], r[4]));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Symbols by address, each with its inlined frames, innermost first (the paths part's
    /// tests use it too).
    pub(crate) struct Fake(pub(crate) HashMap<u64, Vec<&'static str>>);
    impl Symbolizer for Fake {
        fn frames(&mut self, pc: u64) -> Vec<String> {
            self.0.get(&pc).map(|v| v.iter().map(|s| s.to_string()).collect()).unwrap_or_default()
        }
    }

    /// QEMU 7.2's exec-log line for `pc` on `cpu` at MMU index `mmu_idx`.
    pub(crate) fn line(cpu: u32, pc: u64, mmu_idx: u32) -> String {
        format!(
            "Trace {cpu}: 0x7fee85d985c0 [0000000000000000/{pc:016x}/{:08x}/ff020201] \n",
            (mmu_idx << 4) | 1
        )
    }

    #[test]
    fn parses_qemu_72_exec_lines() {
        let l = b"Trace 3: 0x7fee85d985c0 [0000000000000000/00000000400f3608/00000061/ff020201] \n";
        assert_eq!(parse_line(l), Some(Exec { cpu: 3, pc: 0x400f3608, el: 2 }));
        let k = line(0, 0xffff800008b34604, 2);
        assert_eq!(parse_line(k.as_bytes()).map(|e| e.el), Some(1));
        assert_eq!(parse_line(line(1, 0x400000, 0).as_bytes()).map(|e| e.el), Some(0));
        assert_eq!(parse_line(line(1, 0x400000, 4).as_bytes()).map(|e| e.el), Some(1));
        assert_eq!(parse_line(b"IN: foo"), None);
        assert_eq!(parse_line(b"Trace x: 0x0 [0/0/0/0]"), None);
    }

    #[test]
    fn rules_put_armhv_functions_in_their_categories() {
        let cases = [
            ("el2_vectors", Trap),
            ("trap::esr::Esr::class", Trap),
            ("vmm::exits::handle", Trap),
            ("vmm::run::run", Trap),
            ("vmm::run::load", WorldSwitch),
            ("armhv_arch_el1_save", WorldSwitch),
            ("<virtio::mmio::VirtioMmio<D> as vdev::MmioDevice>::write", Device),
            ("armhv::drivers::uplink::on_interrupt", Device),
            ("vmm::emulate::network::deliver", Device),
            ("vgic::Vgic::set_level", Interrupt),
            ("armhv::drivers::gic::v3::ack", Interrupt),
            ("vmm::wakeups::Wakeups::add", Interrupt),
            ("credit::Scheduler::account", Scheduler),
            ("vmm::cpu_loop::idle", Scheduler),
            ("vmm::cpu_loop::run_vcpu", Trap),
        ];
        for (name, cat) in cases {
            assert_eq!(rule_for(name), Some(Rule::Is(cat)), "{name}");
        }
        for name in ["memset", "core::ptr::write", "<alloc::vec::Vec<T> as Drop>::drop"] {
            assert_eq!(rule_for(name), Some(Rule::Helper), "{name}");
        }
        assert_eq!(rule_for("vmm::stats::VmStats::count"), None);
    }

    #[test]
    fn inline_frames_decide_innermost_first_skipping_library_code() {
        assert_eq!(
            classify_frames(&["core::ptr::copy", "virtio::net::Net::rx", "vmm::run::run"]),
            Some(Device)
        );
        assert_eq!(classify_frames(&["vmm::stats::bump", "vmm::run::run"]), Some(Trap));
        assert_eq!(classify_frames(&["vmm::stats::bump"]), Some(ArmhvOther));
        assert_eq!(classify_frames(&["memcpy"]), None);
        assert_eq!(classify_frames::<&str>(&[]), None);
    }

    #[test]
    fn primitive_methods_are_library_code() {
        for name in ["<u64>::checked_add", "<*const [u8; 8]>::read", "<*mut u8>::wrapping_offset"] {
            assert_eq!(rule_for(name), Some(Rule::Helper), "{name}");
        }
        assert_eq!(rule_for("<usize as core::fmt::Debug>::fmt"), Some(Rule::Helper));
        assert_eq!(rule_for("<u64x2 as vgic::Foo>::f"), None);
    }

    #[test]
    fn lower_el_vector_entries_are_exits() {
        let base = 0x4008_0800;
        assert!(is_lower_el_entry(base, base + 0x400)); // synchronous, AArch64
        assert!(is_lower_el_entry(base, base + 0x480)); // IRQ
        assert!(!is_lower_el_entry(base, base + 0x404));
        assert!(!is_lower_el_entry(base, base + 0x200)); // from EL2 itself
        assert!(!is_lower_el_entry(base, base + 0x600)); // AArch32
        assert!(!is_lower_el_entry(base, base - 4));
    }

    #[test]
    fn a_tb_qemu_did_not_start_is_taken_back() {
        let marker = 0xffff800008b34604;
        let fake = Fake(HashMap::from([(0x4008_0c00, vec!["el2_vectors"])]));
        let mut a = Aggregator::new(fake, marker, 1).with_vectors(Some(0x4008_0800));
        a.feed(line(0, marker, 2).as_bytes());
        a.feed(line(0, 0x4008_0c00, 6).as_bytes()); // an exit ...
        a.feed(b"Stopped execution of TB chain before 0x7f00 [000000004008_0c00] \n"); // ... not run
        a.feed(line(0, 0x4008_0c00, 6).as_bytes()); // ... run
        a.feed(line(0, marker, 2).as_bytes()); // the echo: logged, not started
        a.feed(b"Stopped execution of TB chain before 0x7f00 [ffff800008b34604] \n");
        assert!(!a.done());
        a.feed(line(0, marker, 2).as_bytes());
        a.feed(line(0, marker, 2).as_bytes());
        assert!(a.done());
        let t = &a.tally;
        assert_eq!((t.exits, t.stopped), (1, 2));
        assert_eq!(t.by_category[Trap.index()], 1);
        assert_eq!(t.by_category[GuestKernel.index()], 2);
        assert_eq!(t.armhv_functions.values().sum::<u64>(), 1);
    }

    #[test]
    fn kernel_functions_from_kallsyms() {
        let k = KernelSymbols::parse(
            "ffff800008b34604 T tcp_sendmsg\nffff800008010000 t _stext\n\
             ffff800008b34700 D some_data\nffff800000d00e7c t vm_notify\t[virtio_mmio]\n",
        );
        assert_eq!(k.len(), 3);
        assert_eq!(k.index(0xffff800008b34610).map(|i| k.name(i)), Some("tcp_sendmsg"));
        assert_eq!(k.index(0xffff800000d00e80).map(|i| k.name(i)), Some("vm_notify [virtio_mmio]"));
        assert_eq!(k.index(0xffff800000000000), None);
        let fake = Fake(HashMap::new());
        let mut a = Aggregator::new(fake, 0xffff800008b34604, 1).with_kernel(k);
        for pc in [0xffff800008b34604, 0xffff800008b34608, 0xffff800008010004] {
            a.feed(line(0, pc, 2).as_bytes());
        }
        // The request's echo, counted; then the next request, which closes the window.
        a.feed(line(0, 0xffff800008b34604, 2).as_bytes());
        a.feed(line(0, 0xffff800008b34604, 2).as_bytes());
        assert!(a.done());
        assert_eq!(a.kernel_top(5), [("tcp_sendmsg".to_owned(), 3), ("_stext".to_owned(), 1)]);
    }

    #[test]
    fn strips_legacy_hashes_only() {
        assert_eq!(strip_hash("a::b::h0123456789abcdef"), "a::b");
        assert_eq!(strip_hash("a::b::hello"), "a::b::hello");
    }

    #[test]
    fn finds_kallsyms_addresses() {
        let t = "ffff800008010000 T _stext\nffff800008b34604 T tcp_sendmsg\n\
                 ffff800000d00e7c t cleanup_module\t[virtio_mmio]\n";
        assert_eq!(kallsyms_address(t, "tcp_sendmsg"), Some(0xffff800008b34604));
        assert_eq!(kallsyms_address(t, "tcp_sendmsg_locked"), None);
    }

    #[test]
    fn the_window_holds_exactly_the_round_trips_asked_for() {
        let marker = 0xffff800008b34604;
        let fake = Fake(HashMap::from([
            (0x4008_0800, vec!["el2_vectors"]),
            (0x4009_0000, vec!["core::ptr::copy", "virtio::net::rx"]),
            (0x400f_3600, vec!["memset"]),
        ]));
        let mut a = Aggregator::new(fake, marker, 2);
        let mut feed = |cpu, pc, idx| a.feed(line(cpu, pc, idx).as_bytes());
        feed(0, 0x1000, 0); // before the window: not counted
        feed(0, marker, 2); // send 1 opens the window
        feed(0, 0x4008_0800, 6); // trap
        feed(0, 0x4009_0000, 6); // device
        feed(0, 0x400f_3600, 6); // memset: the device's
        feed(2, marker, 2); // echo
        feed(2, 0xaaaa_0000, 0); // user
        feed(0, marker, 2); // round trip 2
        feed(2, marker, 2);
        feed(0, marker, 2); // closes: 2 round trips
        feed(0, 0x4008_0800, 6); // after: not counted
        assert!(a.done());
        let t = &a.tally;
        assert_eq!(t.transactions, 2);
        assert_eq!(t.by_category[Trap.index()], 1);
        assert_eq!(t.by_category[Device.index()], 2);
        assert_eq!(t.by_category[GuestUser.index()], 1);
        assert_eq!(t.by_category[GuestKernel.index()], 4);
        assert_eq!(t.total(), 8);
        assert_eq!(t.by_cpu, vec![5, 0, 3]);
        assert_eq!(t.outside, 3);
        assert!(t.armhv_functions.keys().any(|(c, f)| *c == Device && f.starts_with("memset")));
    }
}
