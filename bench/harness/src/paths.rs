//! Where each microbenchmark's instructions go (issue 20, `--only paths`): armhv's path of one
//! vmbench operation decomposed by function, from QEMU execution traces mapped to armhv's
//! symbols with Table V's machinery ([`crate::tablev`]: its log parser, symbolizer and rules).
//!
//! A **differential**: for one benchmark, vmbench runs twice in the bench VM, with
//! `n=N1 warmup=0 <bench>` and `n=N2 warmup=0 <bench>`, each traced at EL2 for the whole run
//! (`-singlestep -d exec,nochain` from the start, into a FIFO read as it comes), up to armhv's
//! `vmm::lifecycle::stop` for the bench VM's SYSTEM_OFF. Both runs boot, measure the counter
//! overhead, print and power off alike, under icount instruction for instruction; they differ
//! by N2 - N1 operations. So per column and per function (count(N2) - count(N1)) / (N2 - N1) is
//! the exact count per operation: the boot and everything else cancels. The runs are under
//! icount, so the timer ticks (the scheduler's) come with the time the operations take: their
//! share is in the figures too (the "scheduler" column), as on every real run.

pub use crate::catalog::PATH_ROWS as ROWS;
pub use crate::model::{Column, PathRow, Paths, PerOp};
use crate::tablev::{self, ArmhvClassifier, Category, ElfSymbols, Symbolizer};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

impl Column {
    pub const ALL: [Column; 7] = [
        Column::SpectreBhb,
        Column::Assembly,
        Column::RunLoop,
        Column::WorldSwitch,
        Column::Handler,
        Column::Scheduler,
        Column::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Column::SpectreBhb => "Spectre-BHB",
            Column::Assembly => "exit/entry assembly",
            Column::RunLoop => "run loop and dispatch",
            Column::WorldSwitch => "world switch",
            Column::Handler => "handler",
            Column::Scheduler => "scheduler",
            Column::Other => "other",
        }
    }

    fn index(self) -> usize {
        Column::ALL.iter().position(|&c| c == self).unwrap_or(0)
    }
}

/// The assembly of the exit and entry paths (hypervisor/src/arch/aarch64/vectors.S), by symbol.
const ASSEMBLY: &[&str] = &[
    "el2_vectors",
    "guest_sync_fast",
    "guest_sync_slow",
    "guest_exit_common",
    "spectre_exit_done", // guest_exit_common's tail, after the mitigation
    "__guest_enter",
    "hyp_exception",
];

/// Handlers Table V's rules leave in its "other": the emulation of hypercalls, PSCI and system
/// registers, the VM's own services.
const HANDLERS: &[&str] = &["vmm::emulate::", "vmm::bench", "vmm::control_port", "vmm::manage"];

/// The column of an armhv instruction from Table V's category and deciding function (as
/// [`ArmhvClassifier::classify`] gives them; library code is `LIB (from CALLER)`).
pub fn column(category: Category, func: &str) -> Column {
    let own = match func.split_once(" (from ") {
        Some((_, caller)) => caller.trim_end_matches(')'),
        None => func,
    };
    if own.starts_with("spectre_exit_work") || own.starts_with("armhv::arch::aarch64::speculation")
    {
        return Column::SpectreBhb;
    }
    if ASSEMBLY.iter().any(|a| own.starts_with(a)) {
        return Column::Assembly;
    }
    match category {
        Category::Trap => Column::RunLoop,
        Category::WorldSwitch => Column::WorldSwitch,
        Category::Device | Category::Interrupt => Column::Handler,
        Category::Scheduler => Column::Scheduler,
        Category::ArmhvOther if HANDLERS.iter().any(|h| own.starts_with(h)) => Column::Handler,
        _ => Column::Other,
    }
}

/// One traced run's EL2 counts, up to the end marker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub by_column: [u64; 7],
    /// Per (column, deciding function).
    pub functions: HashMap<(Column, String), u64>,
    /// Exits from the guest (entries into the lower-EL half of `el2_vectors`).
    pub exits: u64,
    /// Instructions QEMU logged but did not start (taken back).
    pub stopped: u64,
    /// Whether the end marker was reached.
    pub ended: bool,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.by_column.iter().sum()
    }
}

/// The streaming counter of one run's log: EL2 instructions only, from the start of the log
/// to the first instruction of the end function (`vmm::lifecycle::stop`).
pub struct PathAggregator<S> {
    armhv: ArmhvClassifier<S>,
    vectors: Option<u64>,
    end: &'static str,
    is_end: HashMap<u64, bool>,
    last: Option<(Column, String, bool)>,
    pub counts: Counts,
}

/// The function whose first instruction ends a run's count: the bench VM's SYSTEM_OFF stops
/// it (after it, the partner VM of `vmswitch` yields alone for 200 ms).
pub const END: &str = "vmm::lifecycle::stop";

impl<S: Symbolizer> PathAggregator<S> {
    pub fn new(symbols: S, vectors: Option<u64>) -> Self {
        Self {
            armhv: ArmhvClassifier::new(symbols),
            vectors,
            end: END,
            is_end: HashMap::new(),
            last: None,
            counts: Counts::default(),
        }
    }

    pub fn done(&self) -> bool {
        self.counts.ended
    }

    pub fn feed(&mut self, line: &[u8]) {
        if self.counts.ended {
            return;
        }
        if line.starts_with(tablev::STOPPED) {
            if let Some((col, func, exit)) = self.last.take() {
                self.counts.by_column[col.index()] -= 1;
                if let Some(n) = self.counts.functions.get_mut(&(col, func)) {
                    *n -= 1;
                }
                self.counts.exits -= exit as u64;
                self.counts.stopped += 1;
            }
            return;
        }
        let Some(e) = tablev::parse_line(line) else { return };
        self.last = None;
        if e.el != 2 {
            return;
        }
        let (armhv, end) = (&mut self.armhv, self.end);
        let at_end = *self
            .is_end
            .entry(e.pc)
            .or_insert_with(|| armhv.frames(e.pc).iter().any(|f| f.starts_with(end)));
        if at_end {
            self.counts.ended = true;
            return;
        }
        let (cat, func) = self.armhv.classify(e.cpu as usize, e.pc);
        let col = column(cat, &func);
        let exit = self.vectors.is_some_and(|v| tablev::is_lower_el_entry(v, e.pc));
        self.counts.by_column[col.index()] += 1;
        self.counts.exits += exit as u64;
        *self.counts.functions.entry((col, func.clone())).or_default() += 1;
        self.last = Some((col, func, exit));
    }
}

/// Per-operation figures from two runs of `n1` and `n2` operations: (count(n2) - count(n1)) /
/// (n2 - n1) per column, per function (the `top` largest) and for the exits.
pub fn differential(a: &Counts, n1: u64, b: &Counts, n2: u64, top: usize) -> PerOp {
    let d = (n2 - n1) as f64;
    let per = |x: u64, y: u64| (y as f64 - x as f64) / d;
    let columns =
        Column::ALL.iter().map(|c| (*c, per(a.by_column[c.index()], b.by_column[c.index()])));
    let mut keys: Vec<&(Column, String)> = a.functions.keys().chain(b.functions.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut functions: Vec<(Column, String, f64)> = keys
        .into_iter()
        .map(|k| {
            let (x, y) = (a.functions.get(k), b.functions.get(k));
            (k.0, k.1.clone(), per(x.copied().unwrap_or(0), y.copied().unwrap_or(0)))
        })
        .filter(|f| f.2.abs() >= 0.5)
        .collect();
    functions.sort_by(|x, y| y.2.abs().total_cmp(&x.2.abs()).then(x.1.cmp(&y.1)));
    functions.truncate(top);
    PerOp {
        columns: columns.collect(),
        total: per(a.total(), b.total()),
        exits: per(a.exits, b.exits),
        functions,
    }
}

/// Operations of the two runs.
pub const N1: u64 = 300;
pub const N2: u64 = 900;

/// The bench config with only `vm` (and the partner when asked for) and `words` as its
/// cmdline's benchmarks, `n=` and `warmup=0` set.
pub fn row_config(text: &str, vm: &str, words: &str, n: u64, partner: bool) -> Result<String> {
    let text = if partner { text.to_owned() } else { only_vm(text, vm) };
    crate::configtext::edit_cmdline(&text, vm, |_| format!("n={n} warmup=0 {words}"))
}

/// Config text without the `[[vm]]` tables other than `vm`'s.
pub fn only_vm(text: &str, vm: &str) -> String {
    let mut out = String::new();
    let mut keep = true;
    let mut table = String::new();
    let flush = |table: &mut String, keep: bool, out: &mut String| {
        if keep {
            out.push_str(table);
        }
        table.clear();
    };
    for line in text.lines() {
        if line.trim() == "[[vm]]" {
            flush(&mut table, keep, &mut out);
            keep = false;
        }
        if let Some(name) = crate::configtext::string_value(line, "name")
            && !table.is_empty()
            && table.trim_start().starts_with("[[vm]]")
        {
            keep = name == vm;
        }
        table.push_str(line);
        table.push('\n');
    }
    flush(&mut table, keep, &mut out);
    out
}

/// Where a run keeps its FIFO and configs.
pub fn work_dir() -> PathBuf {
    xtask::build_dir().join("paths")
}

/// One traced run: the counts up to the end marker, the console, the wall seconds.
fn traced_run(
    config: &Path,
    machine: &xtask::MachineSpec,
    elf: &Path,
    vectors: u64,
    work: &Path,
    vm: &str,
    timeout: Duration,
) -> Result<(Counts, String, f64)> {
    let img = xtask::image::build(config, machine)?;
    let fifo = work.join("paths.fifo");
    let _ = std::fs::remove_file(&fifo);
    let st = Command::new("mkfifo").arg(&fifo).status().context("running mkfifo")?;
    if !st.success() {
        bail!("mkfifo {} failed", fifo.display());
    }
    let symbols = ElfSymbols::open(elf)?;
    let done = Arc::new(AtomicBool::new(false));
    let (done2, path) = (done.clone(), fifo.clone());
    let reader = std::thread::spawn(move || -> Result<Counts> {
        let mut agg = PathAggregator::new(symbols, Some(vectors));
        let f =
            std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut line = Vec::with_capacity(128);
        loop {
            line.clear();
            if r.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            // After the end, drained unread so that QEMU goes on to print.
            if !agg.done() {
                agg.feed(&line);
                if agg.done() {
                    done2.store(true, Ordering::Relaxed);
                }
            }
        }
        Ok(agg.counts)
    });
    let start = Instant::now();
    let mut cmd = xtask::qemu::command(&img, machine);
    cmd.arg("-singlestep").args(["-d", "exec,nochain", "-D"]).arg(&fifo);
    let mut q = xtask::qemu::Run::spawn(cmd)?;
    let finished = format!("[{vm}] vmbench: done");
    let mut result = Ok(());
    loop {
        if done.load(Ordering::Relaxed) {
            // The console may trail the trace a little.
            result = q.expect(&finished, Duration::from_secs(60));
            break;
        }
        if q.output().contains("PANIC") {
            result = Err(anyhow!("a panic on the console"));
            break;
        }
        if start.elapsed() >= timeout {
            result = Err(anyhow!("timed out after {timeout:?} (raise --timeout)"));
            break;
        }
        // Also the pause between polls; QEMU gone: the reader has the whole log.
        if q.wait_exit(Duration::from_millis(200)).is_ok() {
            break;
        }
    }
    let console = q.output();
    drop(q);
    {
        use std::os::unix::fs::OpenOptionsExt;
        const O_NONBLOCK: i32 = 0o4000;
        let _ = std::fs::OpenOptions::new().write(true).custom_flags(O_NONBLOCK).open(&fifo);
    }
    let seconds = start.elapsed().as_secs_f64();
    let counts = reader.join().map_err(|_| anyhow!("the trace reader panicked"))?;
    let _ = std::fs::remove_file(&fifo);
    let tail = || {
        let lines: Vec<&str> = console.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    };
    result.map_err(|e| anyhow!("{e:#}\n{}", tail()))?;
    let counts = counts?;
    if !counts.ended {
        bail!("the trace ended before armhv's {END}\n{}", tail());
    }
    Ok((counts, console, seconds))
}

/// vmbench's medians on a console, in instructions.
fn medians(console: &str, vm: &str, mode: crate::convert::Mode) -> Result<Vec<(String, f64)>> {
    let parsed = crate::parse::parse_console(console)?;
    let out = parsed.vm(vm).ok_or_else(|| anyhow!("no vmbench output from VM {vm}"))?;
    let freq = out.boot.as_ref().map(crate::parse::Boot::tick_freq);
    out.results
        .iter()
        .map(|r| crate::convert::convert(r, freq, mode).map(|f| (f.name, f.median)))
        .collect()
}

/// Runs every row: two traced runs each. A row that fails is recorded and the rest go on.
pub fn run(opts: &crate::Options, log: &Path) -> Result<Paths> {
    let machine = xtask::MachineSpec { icount: true, ..opts.machine.clone() };
    let text = std::fs::read_to_string(&opts.config)
        .with_context(|| format!("reading {}", opts.config.display()))?;
    let work = work_dir();
    std::fs::create_dir_all(&work)?;
    let elf = xtask::cargo_build("armhv", xtask::HYP_TARGET)?;
    let vectors = tablev::elf_symbol(&elf, "el2_vectors")?
        .ok_or_else(|| anyhow!("{}: no symbol el2_vectors", elf.display()))?;
    let start = Instant::now();
    let mut paths = Paths::default();
    let mut consoles = String::new();
    for &(name, words, partner) in ROWS.iter().filter(|r| opts.paths_rows.iter().any(|n| n == r.0))
    {
        let one = |n: u64| -> Result<(Counts, String, f64)> {
            let cfg = row_config(&text, &opts.vm, words, n, partner)?;
            let copy = work.join(format!("paths-{}-{n}.toml", name.replace('/', "-")));
            std::fs::write(&copy, cfg)?;
            traced_run(&copy, &machine, &elf, vectors, &work, &opts.vm, opts.timeout)
        };
        let row = (|| -> Result<PathRow> {
            let (a, ca, sa) = one(N1)?;
            consoles.push_str(&format!("=== {name} n={N1}\n{ca}\n"));
            let (b, cb, sb) = one(N2)?;
            consoles.push_str(&format!("=== {name} n={N2}\n{cb}\n"));
            let per_op = differential(&a, N1, &b, N2, 30);
            Ok(PathRow {
                name: name.into(),
                words: words.into(),
                n: (N1, N2),
                medians: medians(&cb, &opts.vm, crate::convert::Mode::Icount)?,
                totals: (a.total(), b.total()),
                stopped: (a.stopped, b.stopped),
                seconds: (sa, sb),
                per_op,
            })
        })();
        match row {
            Ok(r) => {
                eprintln!(
                    "bench: paths {name}: {:.1} armhv instructions per operation ({:.2} exits), \
                     traced in {:.0} + {:.0} s",
                    r.per_op.total, r.per_op.exits, r.seconds.0, r.seconds.1
                );
                paths.rows.push(r);
            }
            Err(e) => {
                eprintln!("bench: paths {name}: FAILED: {e:#}");
                let first = format!("{e:#}").lines().next().unwrap_or_default().to_owned();
                paths.failed.push((name.into(), first));
            }
        }
    }
    paths.seconds = start.elapsed().as_secs_f64();
    std::fs::write(log, consoles).with_context(|| format!("writing {}", log.display()))?;
    Ok(paths)
}

/// The part's one step: every row, the consoles written to `log`.
pub fn run_step(
    step: &crate::options::Step,
    opts: &crate::Options,
    log: &Path,
) -> Result<crate::model::Run> {
    let start = Instant::now();
    let p = run(opts, log)?;
    if p.rows.is_empty() {
        bail!("no row of the paths part completed: {:?}", p.failed);
    }
    let mut r = crate::micro::not_run(step, crate::model::NotRun::Failed(String::new()));
    r.not_run = None;
    r.seconds = start.elapsed().as_secs_f64();
    r.paths = Some(p);
    Ok(r)
}

// --- The report -----------------------------------------------------------------------------

/// The table: per row, the columns, the total, the exits and vmbench's medians.
pub fn rows(p: &Paths) -> Vec<Vec<String>> {
    use crate::numbers::int;
    let mut out = Vec::new();
    for r in &p.rows {
        let mut cells = vec![r.name.clone()];
        for c in Column::ALL {
            let v = r.per_op.columns.iter().find(|x| x.0 == c).map_or(0.0, |x| x.1);
            cells.push(if v.abs() < 0.05 { "-".into() } else { format!("{v:.0}") });
        }
        cells.push(format!("{:.0}", r.per_op.total));
        cells.push(format!("{:.2}", r.per_op.exits));
        let med: Vec<String> = r
            .medians
            .iter()
            .map(|(n, m)| {
                let target = crate::catalog::bench(n)
                    .and_then(|b| b.target.as_ref())
                    .map_or(String::new(), |t| format!(" ({})", t.describe()));
                format!("{n} {}{target}", int(*m))
            })
            .collect();
        cells.push(med.join(", "));
        out.push(cells);
    }
    out
}

fn header() -> Vec<String> {
    let mut h = vec!["Benchmark".to_owned()];
    h.extend(Column::ALL.iter().map(|c| c.name().to_owned()));
    h.extend(["armhv total".into(), "exits".into(), "vmbench median (target)".into()]);
    h
}

fn find(runs: &[crate::model::Run]) -> Option<&crate::model::Run> {
    runs.iter().find(|r| r.kind == crate::model::Kind::Paths)
}

pub fn markdown(md: &mut String, runs: &[crate::model::Run]) {
    use std::fmt::Write as _;
    let Some(run) = find(runs) else { return };
    let _ = writeln!(md, "\n## Where each microbenchmark's instructions go\n");
    let Some(p) = &run.paths else {
        let why = run.not_run.as_ref().map_or("no figures".into(), |n| n.describe());
        let _ = writeln!(md, "{why}\n");
        return;
    };
    let _ = writeln!(
        md,
        "armhv's instructions (EL2) per operation, from two traced runs per benchmark \
         (`n={N1} warmup=0` and `n={N2} warmup=0`, the difference divided by {}; how: \
         bench/README.md, \"Where each microbenchmark's instructions go\"). The columns sum to \
         the total. vmbench's median (of the n={N2} run) differs from it by the guest's own \
         instructions in the timed region and, for the IPI, by icount's interleaving of the two \
         CPUs; `hypercall` times two calls (NOP and PSCI_VERSION) and `io-out/io-in` is one \
         loop that measures both, so their totals are of both. {} rows in {:.0} s.\n",
        N2 - N1,
        p.rows.len(),
        p.seconds
    );
    let h = header();
    let _ = writeln!(md, "| {} |", h.join(" | "));
    let _ = writeln!(md, "|---|{}", "---:|".repeat(h.len() - 2) + "---|");
    for r in rows(p) {
        let _ = writeln!(md, "| {} |", r.join(" | "));
    }
    for (name, why) in &p.failed {
        let _ = writeln!(md, "\n- {name}: FAILED: {why}");
    }
    let _ = writeln!(
        md,
        "\nThe largest functions per operation (the function that decided the column; `(from X)`: library code charged to X):\n"
    );
    for r in &p.rows {
        let cells: Vec<String> = r
            .per_op
            .functions
            .iter()
            .map(|(c, f, v)| format!("`{}` ({}) {v:.0}", f.replace('|', "\\|"), c.name()))
            .collect();
        let _ = writeln!(md, "- {}: {}", r.name, cells.join(", "));
    }
}

pub fn terminal(runs: &[crate::model::Run]) -> String {
    let Some(p) = find(runs).and_then(|r| r.paths.as_ref()) else { return String::new() };
    let mut out = format!(
        "Where each microbenchmark's instructions go (armhv, per operation; n={N1} vs n={N2}, \
         {:.0} s)\n",
        p.seconds
    );
    let h = header();
    let widths = [14, 11, 19, 21, 12, 10, 9, 5, 11, 6];
    let fmt = |cells: &[String]| {
        let mut s = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if i == 0 { s.push_str(&format!(" {c:<w$}")) } else { s.push_str(&format!(" {c:>w$}")) }
        }
        s.push('\n');
        s
    };
    out.push_str(&fmt(&h));
    for r in rows(p) {
        out.push_str(&fmt(&r));
    }
    for (name, why) in &p.failed {
        out.push_str(&format!("  {name}: FAILED: {why}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tablev::Category::*;
    use crate::tablev::tests::{Fake, line};

    #[test]
    fn columns_from_categories_and_functions() {
        assert_eq!(column(Trap, "spectre_exit_work"), Column::SpectreBhb);
        assert_eq!(column(Trap, "spectre_exit_done"), Column::Assembly);
        assert_eq!(column(Trap, "el2_vectors"), Column::Assembly);
        assert_eq!(column(Trap, "guest_sync_fast"), Column::Assembly);
        assert_eq!(column(Trap, "__guest_enter"), Column::Assembly);
        assert_eq!(column(Trap, "vmm::run::run"), Column::RunLoop);
        assert_eq!(column(Trap, "memcpy (from vmm::run::run)"), Column::RunLoop);
        assert_eq!(column(WorldSwitch, "armhv_arch_el1_save"), Column::WorldSwitch);
        assert_eq!(column(Interrupt, "vgic::Vgic::read"), Column::Handler);
        assert_eq!(column(Device, "vmm::emulate::uart::write"), Column::Handler);
        assert_eq!(column(ArmhvOther, "vmm::emulate::hypercall::handle"), Column::Handler);
        assert_eq!(column(Scheduler, "credit::Scheduler::pick"), Column::Scheduler);
        assert_eq!(column(ArmhvOther, "vmm::stats::bump"), Column::Other);
        // Through the real rules: the fast path's symbol is a trap's.
        let rules = |f: &str| tablev::classify_frames(&[f]).unwrap();
        assert_eq!(column(rules("guest_sync_slow"), "guest_sync_slow"), Column::Assembly);
        assert_eq!(column(rules("spectre_exit_work"), "spectre_exit_work"), Column::SpectreBhb);
    }

    fn symbols() -> Fake {
        Fake(HashMap::from([
            (0x4008_0c00, vec!["el2_vectors"]),
            (0x4009_0000, vec!["spectre_exit_work"]),
            (0x400a_0000, vec!["vmm::run::run"]),
            (0x400b_0000, vec!["vgic::Vgic::read", "vmm::emulate::vgic::mmio"]),
            (0x400c_0000, vec!["memcpy"]),
            (0x400f_0000, vec!["vmm::lifecycle::stop"]),
        ]))
    }

    /// A run: a boot of 5 EL2 instructions, `n` operations, the end, and what follows.
    fn run(n: u64) -> Counts {
        let mut a = PathAggregator::new(symbols(), Some(0x4008_0800));
        let mut feed = |l: &str| a.feed(l.as_bytes());
        let stopped = "Stopped execution of TB chain before 0x7f00 [00000000400a0000] \n";
        for _ in 0..5 {
            feed(&line(0, 0x400a_0000, 6)); // boot: run loop
        }
        for i in 0..n {
            feed(&line(0, 0x1000, 2)); // the guest: not counted
            feed(&line(0, 0x4008_0c00, 6)); // exit
            feed(&line(0, 0x4009_0000, 6));
            feed(&line(0, 0x4009_0000, 6));
            feed(&line(0, 0x400a_0000, 6));
            feed(&line(1, 0x400b_0000, 6)); // the other CPU, a handler
            feed(&line(1, 0x400c_0000, 6)); // memcpy: the handler's
            if i % 2 == 0 {
                // logged, then not run: taken back
                feed(&line(0, 0x400a_0000, 6));
                feed(stopped);
            }
        }
        feed(&line(0, 0x400f_0000, 6)); // the end
        feed(&line(0, 0x400a_0000, 6)); // after it: not counted
        assert!(a.done());
        a.counts
    }

    #[test]
    fn the_differential_leaves_exact_counts_per_operation() {
        let (a, b) = (run(3), run(7));
        assert_eq!(a.total(), 5 + 3 * 6);
        assert_eq!(a.stopped, 2);
        let d = differential(&a, 3, &b, 7, 10);
        let col = |c| d.columns.iter().find(|x| x.0 == c).unwrap().1;
        assert_eq!(col(Column::Assembly), 1.0);
        assert_eq!(col(Column::SpectreBhb), 2.0);
        assert_eq!(col(Column::RunLoop), 1.0); // the boot's 5 cancel
        assert_eq!(col(Column::Handler), 2.0);
        assert_eq!(d.total, 6.0);
        assert_eq!(d.exits, 1.0);
        let sum: f64 = d.columns.iter().map(|c| c.1).sum();
        assert_eq!(sum, d.total);
        assert_eq!(d.functions[0], (Column::SpectreBhb, "spectre_exit_work".into(), 2.0));
        assert!(d.functions.iter().any(|f| f.1 == "memcpy (from vgic::Vgic::read)" && f.2 == 1.0));
    }

    #[test]
    fn row_configs_keep_the_bench_vm_and_set_its_words() {
        let text = "[hyp]\nx = 1\n\n[[vm]]\nname = \"bench\"\ncmdline = \"vmswitch hypercall\"\n\
                    \n[[vm]]\nname = \"partner\"\ncmdline = \"vmswitch-partner\"\n";
        let c = row_config(text, "bench", "gic-trap", 300, false).unwrap();
        assert!(c.contains("cmdline = \"n=300 warmup=0 gic-trap\""), "{c}");
        assert!(!c.contains("partner"), "{c}");
        assert!(c.starts_with("[hyp]\nx = 1\n"), "{c}");
        let c = row_config(text, "bench", "vmswitch", 900, true).unwrap();
        assert!(c.contains("n=900 warmup=0 vmswitch\"") && c.contains("vmswitch-partner"), "{c}");
    }
}
