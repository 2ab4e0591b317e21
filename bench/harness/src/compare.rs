//! `make compare`: the ISCA-2016 study's Table II with one column per system. The same vmbench
//! binary runs on the same QEMU machine under icount (`cortex-a76`, `-smp 2`, GICv3): natively
//! on plain QEMU, under armhv (the micro part's run, `micro::run`), under KVM (Debian's stock
//! kernel at EL2 with `bench/kvm-vmm` as its /init, built by `scripts/kvm-host.sh`), and under
//! Xen (Debian's Xen 4.17 booted dom0less with vmbench as its only domain, `xen`, on one
//! physical CPU: the one Xen boots on under icount). Each system is one entry of [`SYSTEMS`]: a
//! runner that returns the system's [`Column`], or the reason there is none.
//!
//! The table is assembled from the columns alone ([`cell`], [`markdown`]), so a results file
//! renders again without running anything (`--from`).

use crate::catalog::{self, DEFAULT_VARIANT, GICV3};
use crate::charts::Bars;
use crate::convert::{self, Figure, Mode};
use crate::model::Kind;
use crate::numbers::int;
use crate::options::{Options, QUICK_WORDS, Step};
use crate::parse::{self, Skip};
use crate::runlog::{console_tail, rel};
use crate::{micro, timestamps, xen};
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use xtask::qemu::ICOUNT_ARGS;
use xtask::root;

/// Bumped when the JSON's shape changes.
pub const SCHEMA: u32 = 1;

/// The table's rows, vmbench's names: the study's Table II in its order, then ours.
pub const ROWS: [&str; 11] = [
    "hypercall",
    "gic-trap",
    "ipi",
    "eoi",
    "vmswitch",
    "io-out",
    "io-in",
    "pl011-write",
    "hypercall-psci-version",
    "hypercall-xen-version",
    "io-roundtrip",
];

/// vmbench's timing of Xen's null hypercall, beside armhv's ARMHV_NOP.
const XEN_VERSION: &str = "hypercall-xen-version";

/// What vmbench runs natively and under KVM: its default list and `vmswitch`, which it runs
/// only when named (elsewhere than armhv it prints why it cannot).
const BENCHMARKS: &str = "hypercall gic-trap pl011-write ipi eoi io-out io-in vmswitch";

pub const USAGE: &str = concat!(
    "usage: make compare ARGS=\"[options]\", or cargo run -q -p bench-harness -- compare [options]\n",
    "\n",
    "The study's Table II with one column per system (bench/README.md, \"Comparing systems\"):\n",
    "vmbench on QEMU virt (cortex-a76 x2, GICv3, -icount shift=0,sleep=off) natively, under\n",
    "armhv, under KVM (Debian's kernel at EL2, bench/kvm-vmm) and under Xen (dom0less, its\n",
    "only domain, on one CPU). Writes bench/results/<stamp>-compare.{md,json,svg} and latest-compare.*\n",
    "\n",
    "options:\n",
    "  --systems LIST   comma-separated: native, armhv, kvm, xen (default all)\n",
    "  --quick          n=1000 warmup=100 for every system\n",
    "  --timeout SECS   per QEMU run (default 600)\n",
    "  --from JSON      render the table and chart again from a compare results file",
);

/// How one system ran, or why it did not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "kebab-case")]
pub enum Status {
    Ran,
    /// Not part of this run, and why (a runner not in the build, a system left out).
    NotRun(String),
    /// It ran and failed: the first line of the error (the log has the console).
    Failed(String),
}

/// One system's column: vmbench's figures converted to instructions, its skips, and how it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Column {
    /// `native`, `armhv`, `kvm` or `xen`.
    pub system: String,
    pub title: String,
    pub status: Status,
    /// vmbench's clock: `pmu` (cycles: 1 instruction each) or `cntvct` (ticks: 16 each).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub clock: Option<String>,
    pub figures: Vec<Figure>,
    pub skips: Vec<Skip>,
    #[serde(default)]
    pub qemu_command: String,
    /// Wall time of the QEMU run.
    pub seconds: f64,
    /// Where the console went.
    #[serde(default)]
    pub log: String,
    /// What else a reader of the column should know (how the system ran).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Column {
    fn empty(system: &str, title: &str, status: Status) -> Self {
        Self {
            system: system.into(),
            title: title.into(),
            status,
            clock: None,
            figures: Vec::new(),
            skips: Vec::new(),
            qemu_command: String::new(),
            seconds: 0.0,
            log: String::new(),
            notes: Vec::new(),
        }
    }

    fn figure(&self, name: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.name == name)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub timestamp: String,
    pub stamp: String,
    pub commit: String,
    pub qemu: String,
    pub cpu: String,
    pub smp: u32,
    /// `n=... warmup=...` with `--quick`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub quick: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema: u32,
    pub meta: Meta,
    pub columns: Vec<Column>,
}

/// A table cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// The median in instructions and its resolution (1 for cycles, 16 for CNTVCT ticks).
    Value { median: f64, resolution: f64 },
    /// The system cannot run this operation, and why.
    NotApplicable(String),
    /// The system did not run at all, and why.
    NotRun(String),
}

/// Operations that need a hypervisor: natively there is none to call or switch.
const NEEDS_HYPERVISOR: [(&str, &str); 3] = [
    (
        "hypercall",
        "no hypervisor: without EL2, QEMU's built-in PSCI firmware answers the hvc itself",
    ),
    (
        "hypercall-psci-version",
        "no hypervisor: without EL2, QEMU's built-in PSCI firmware answers the hvc itself",
    ),
    ("vmswitch", "no hypervisor, no second VM to switch to"),
];

/// Why vmbench skipped `bench` on `system`, as the table says it.
fn skip_reason(system: &str, bench: &str, vmbench_says: &str) -> String {
    let why = match (system, bench) {
        ("kvm", "io-out" | "io-in") => {
            "vmbench takes one stamp in the hypervisor's device model, read back by armhv's \
             ARMHV_IO_STAMPS hypercall; KVM (Linux 6.1) answers every hvc in the kernel, so \
             no VMM can answer it (hypercalls forwarded to user space came in Linux 6.4)"
        }
        (_, "io-out" | "io-in") => {
            "vmbench takes one stamp in the hypervisor's device model, read back by armhv's \
             ARMHV_IO_STAMPS hypercall"
        }
        ("kvm", "vmswitch") => {
            "vmbench switches with armhv's ARMHV_YIELD to a partner VM on the same CPU; KVM \
             has no guest call that yields to another VM"
        }
        (_, "vmswitch") => "vmbench switches with armhv's ARMHV_YIELD to a partner VM",
        ("xen", "ipi") => xen::ICOUNT_ONE_CPU,
        _ => return format!("vmbench: {vmbench_says}"),
    };
    format!("{why} (vmbench: {vmbench_says})")
}

/// The cell of `bench` in `col`.
pub fn cell(col: &Column, bench: &str) -> Cell {
    match &col.status {
        Status::NotRun(why) => return Cell::NotRun(why.clone()),
        Status::Failed(why) => return Cell::NotRun(format!("failed: {why}")),
        Status::Ran => {}
    }
    if col.system == "native"
        && let Some((_, why)) = NEEDS_HYPERVISOR.iter().find(|(b, _)| *b == bench)
    {
        return Cell::NotApplicable((*why).to_owned());
    }
    if let Some(f) = col.figure(bench) {
        return Cell::Value { median: f.median, resolution: f.scale };
    }
    if bench == XEN_VERSION && col.system != "xen" {
        return Cell::NotApplicable(
            "Xen's own null hypercall (xen_version), which vmbench times only under Xen".into(),
        );
    }
    match col.skips.iter().find(|s| s.name == bench) {
        Some(s) => Cell::NotApplicable(skip_reason(&col.system, bench, &s.reason)),
        None => Cell::NotApplicable("not measured: vmbench printed no line for it".into()),
    }
}

/// The rows the table shows: every row some column has a value, n/a or not-run reason for;
/// rows no system measured are left out only when every column that ran printed nothing.
fn rows(c: &Comparison) -> Vec<&'static str> {
    ROWS.iter()
        .copied()
        .filter(|b| {
            c.columns.iter().any(|col| {
                col.status == Status::Ran
                    && (col.figure(b).is_some() || col.skips.iter().any(|s| s.name == *b))
            }) || catalog::bench(b).is_some_and(|x| x.in_study)
        })
        .collect()
}

/// Numbered notes for the table's n/a cells: the same reason gets the same number.
struct Notes(Vec<String>);

impl Notes {
    fn mark(&mut self, why: &str) -> usize {
        match self.0.iter().position(|n| n == why) {
            Some(i) => i + 1,
            None => {
                self.0.push(why.to_owned());
                self.0.len()
            }
        }
    }
}

fn show(cell: &Cell, notes: &mut Notes) -> String {
    match cell {
        Cell::Value { median, resolution } if *resolution > 1.0 => {
            format!("{} ±{}", int(*median), int(*resolution))
        }
        Cell::Value { median, .. } => int(*median),
        Cell::NotApplicable(why) => format!("n/a ({})", notes.mark(why)),
        Cell::NotRun(why) => format!("not run ({})", notes.mark(why)),
    }
}

/// The table (markdown) and its notes.
pub fn table(c: &Comparison) -> String {
    let mut notes = Notes(Vec::new());
    let mut out = String::from("| Operation |");
    for col in &c.columns {
        out.push_str(&format!(" {} |", col.title));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(c.columns.len()));
    out.push('\n');
    for bench in rows(c) {
        out.push_str(&format!("| {} |", catalog::row(bench)));
        for col in &c.columns {
            out.push_str(&format!(" {} |", show(&cell(col, bench), &mut notes)));
        }
        out.push('\n');
    }
    out.push_str(
        "\nInstructions (medians) under `-icount shift=0`; `±16`: timed with the virtual \
         counter CNTVCT_EL0, one tick per 16 instructions, so the figure is a multiple of 16 \
         and resolved to 16; plain figures: the PMU cycle counter, one per instruction.\n",
    );
    if !notes.0.is_empty() {
        out.push('\n');
        for (i, n) in notes.0.iter().enumerate() {
            out.push_str(&format!("{}. {n}\n", i + 1));
        }
    }
    out
}

/// How each column's figures were taken.
fn columns_section(c: &Comparison) -> String {
    let mut out = String::new();
    for col in &c.columns {
        let clock = match col.clock.as_deref() {
            Some("pmu") => "PMU cycle counter (1 instruction per count; the virtual IPI with \
                            CNTVCT_EL0, 16 per tick)"
                .to_owned(),
            Some("cntvct") => {
                "CNTVCT_EL0 only (16 instructions per tick): the guest has no PMU".to_owned()
            }
            Some(other) => other.to_owned(),
            None => String::new(),
        };
        let status = match &col.status {
            Status::Ran => format!("ran, QEMU {:.1} s", col.seconds),
            Status::NotRun(why) => format!("not run: {why}"),
            Status::Failed(why) => format!("failed: {why}"),
        };
        out.push_str(&format!("- **{}**: {status}.", col.title));
        if !clock.is_empty() {
            out.push_str(&format!(" Clock: {clock}."));
        }
        for n in &col.notes {
            out.push_str(&format!(" {n}."));
        }
        if !col.log.is_empty() {
            out.push_str(&format!(" Console: `{}`.", col.log));
        }
        if !col.qemu_command.is_empty() {
            out.push_str(&format!("\n  `{}`", col.qemu_command));
        }
        out.push('\n');
    }
    out
}

/// The study's silicon cycles, for scale only.
fn study_section() -> String {
    let mut out = String::from(
        "| Operation | KVM (study, cycles) | Xen (study, cycles) |\n|---|---:|---:|\n",
    );
    for b in catalog::BENCHES.iter().filter(|b| b.in_study) {
        if let Some((kvm, xen)) = b.study_cycles {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                b.row,
                int(f64::from(kvm)),
                int(f64::from(xen))
            ));
        }
    }
    out
}

pub fn markdown(c: &Comparison, chart: Option<&str>) -> String {
    let m = &c.meta;
    let mut out = format!(
        "# Table II, one column per system\n\n{} · commit {} · {} · `{}` × {} · GICv3 · icount{}\n\n",
        m.timestamp,
        m.commit,
        m.qemu,
        m.cpu,
        m.smp,
        m.quick.as_ref().map_or(String::new(), |q| format!(" · quick ({q})"))
    );
    out.push_str(&table(c));
    if let Some(chart) = chart {
        out.push_str(&format!("\n![Table II per system]({chart})\n"));
    }
    out.push_str("\n## The columns\n\n");
    out.push_str(&columns_section(c));
    out.push_str(
        "\nThe same vmbench image everywhere. Natively the board has no \
         `virtualization=on`: QEMU would enter the image at EL2, and vmbench runs at EL1 (the \
         rest of the machine is the same). Under TCG every instruction counts one, a trap or \
         an MMIO access to a device included: these are path lengths, not silicon cycles; \
         compare the columns with each other, not with the study's figures:\n\n",
    );
    out.push_str(&study_section());
    out
}

/// The table for the terminal: the same, without the sections.
pub fn terminal(c: &Comparison) -> String {
    table(c)
}

/// A bar per system and row, log scale; `None` when no system has a figure.
pub fn chart(c: &Comparison) -> Result<Option<String>> {
    let ran: Vec<&Column> = c.columns.iter().filter(|col| col.status == Status::Ran).collect();
    let rows: Vec<&str> = rows(c)
        .into_iter()
        .filter(|b| ran.iter().any(|col| matches!(cell(col, b), Cell::Value { .. })))
        .collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let values = rows
        .iter()
        .map(|b| {
            ran.iter()
                .map(|col| match cell(col, b) {
                    Cell::Value { median, .. } => Some(median),
                    _ => None,
                })
                .collect()
        })
        .collect();
    Bars {
        title: "Table II per system: median path length".into(),
        x_label: format!(
            "instructions, log scale (QEMU TCG, -icount shift=0, {}; lower is better; \
             no bar: n/a)",
            c.meta.cpu
        ),
        categories: rows.iter().map(|b| catalog::row(b).to_owned()).collect(),
        series: ran.iter().map(|col| col.title.clone()).collect(),
        values,
        log: true,
        ..Bars::default()
    }
    .render()
    .map(Some)
}

// ---------------------------------------------------------------------------------------------
// Running the systems.

/// What every runner gets.
pub struct Ctx<'a> {
    pub opts: &'a Options,
    /// The flat vmbench image (native and KVM boot it; armhv's build makes the same one).
    pub vmbench: PathBuf,
    /// vmbench's bootargs natively and under KVM.
    pub bootargs: String,
    /// The console log of a system: `<stamp>-compare-<system>.log`.
    pub log: &'a dyn Fn(&str) -> PathBuf,
}

pub type Runner = fn(&Ctx) -> Result<Column>;

pub struct System {
    pub id: &'static str,
    pub title: &'static str,
    /// The runner, or why this build has none.
    pub runner: std::result::Result<Runner, &'static str>,
}

/// The systems, in the table's column order.
pub const SYSTEMS: [System; 4] = [
    System { id: "native", title: "native", runner: Ok(run_native) },
    System { id: "armhv", title: "armhv", runner: Ok(run_armhv) },
    System { id: "kvm", title: "KVM", runner: Ok(run_kvm) },
    System { id: "xen", title: "Xen", runner: Ok(run_xen) },
];

pub fn main(args: Vec<String>) -> Result<()> {
    let mut opts = Options::default();
    let mut systems: Vec<String> = SYSTEMS.iter().map(|s| s.id.to_owned()).collect();
    let mut from = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| anyhow!("{a} needs a value"));
        match a.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--quick" => opts.quick = true,
            "--timeout" => {
                let v = value()?;
                opts.timeout = Duration::from_secs(
                    v.parse().map_err(|_| anyhow!("--timeout {v}: a number of seconds"))?,
                );
            }
            "--systems" => {
                systems = value()?.split(',').map(str::to_owned).collect();
                if let Some(s) = systems.iter().find(|s| !SYSTEMS.iter().any(|x| x.id == *s)) {
                    bail!("unknown system {s:?} for --systems; use native, armhv, kvm or xen");
                }
            }
            "--from" => from = Some(PathBuf::from(value()?)),
            _ => bail!("unknown compare option {a} (make compare ARGS=--help)"),
        }
    }
    let c = match from {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let c: Comparison = serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            if c.schema != SCHEMA {
                bail!("{}: compare schema {} (this tool reads {SCHEMA})", path.display(), c.schema);
            }
            c
        }
        None => measure(&opts, &systems)?,
    };
    for p in write(&opts.out_dir, &c)? {
        println!("compare: wrote {}", rel(&p));
    }
    println!("{}", terminal(&c));
    let failed: Vec<&str> = c
        .columns
        .iter()
        .filter(|col| matches!(col.status, Status::Failed(_)))
        .map(|col| col.title.as_str())
        .collect();
    if !failed.is_empty() {
        bail!("{} failed (see the table's notes and the console logs)", failed.join(", "));
    }
    Ok(())
}

/// Runs the systems named in `wanted` (the others say why not) and collects their columns;
/// writes the consoles to `opts.out_dir`, but no table.
pub fn measure(opts: &Options, wanted: &[String]) -> Result<Comparison> {
    xtask::setup::ensure_qemu()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (timestamp, stamp) = timestamps(now);
    std::fs::create_dir_all(&opts.out_dir)?;
    let quick = opts.quick.then(|| QUICK_WORDS.to_owned());
    let bootargs = match &quick {
        Some(q) => format!("{q} {BENCHMARKS}"),
        None => BENCHMARKS.to_owned(),
    };
    eprintln!("compare: building vmbench");
    let vmbench = vmbench_image()?;
    let out_dir = opts.out_dir.clone();
    let log_stamp = stamp.clone();
    let log = move |system: &str| out_dir.join(format!("{log_stamp}-compare-{system}.log"));
    let ctx = Ctx { opts, vmbench, bootargs, log: &log };
    let total = Instant::now();
    let mut columns = Vec::new();
    for (i, s) in SYSTEMS.iter().enumerate() {
        let tag = format!("compare: [{}/{}] {}", i + 1, SYSTEMS.len(), s.title);
        let col = if !wanted.iter().any(|w| w == s.id) {
            Column::empty(s.id, s.title, Status::NotRun("left out (--systems)".into()))
        } else {
            match s.runner {
                Err(why) => Column::empty(s.id, s.title, Status::NotRun(why.into())),
                Ok(run) => {
                    eprintln!("{tag} ...");
                    run(&ctx).unwrap_or_else(|e| {
                        eprintln!("{tag}: FAILED: {e:#}");
                        let first = format!("{e:#}").lines().next().unwrap_or_default().to_owned();
                        Column::empty(s.id, s.title, Status::Failed(first))
                    })
                }
            }
        };
        let summary = match &col.status {
            Status::Ran => format!(
                "{} results, {} skipped, QEMU {:.1} s",
                col.figures.len(),
                col.skips.len(),
                col.seconds
            ),
            Status::NotRun(why) => format!("not run: {why}"),
            Status::Failed(why) => format!("failed: {why}"),
        };
        eprintln!("{tag}: {summary} (total {:.0} s)", total.elapsed().as_secs_f64());
        columns.push(col);
    }
    let meta = Meta {
        timestamp,
        stamp,
        commit: crate::git_commit(),
        qemu: crate::qemu_version()?,
        cpu: opts.machine.cpu.clone(),
        smp: opts.machine.smp,
        quick,
    };
    Ok(Comparison { schema: SCHEMA, meta, columns })
}

/// Writes `<stamp>-compare.{md,json,svg}` and their `latest-compare.*` copies.
pub fn write(dir: &Path, c: &Comparison) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let svg = chart(c)?;
    let mut written = Vec::new();
    for stem in [format!("{}-compare", c.meta.stamp), "latest-compare".to_owned()] {
        let chart_name = format!("{stem}.svg");
        match &svg {
            Some(svg) => {
                std::fs::write(dir.join(&chart_name), svg)?;
                written.push(dir.join(&chart_name));
            }
            None => {
                let _ = std::fs::remove_file(dir.join(&chart_name));
            }
        }
        let md = dir.join(format!("{stem}.md"));
        std::fs::write(&md, markdown(c, svg.as_ref().map(|_| chart_name.as_str())))?;
        let json = dir.join(format!("{stem}.json"));
        std::fs::write(&json, serde_json::to_string_pretty(c)? + "\n")?;
        written.extend([md, json]);
    }
    Ok(written)
}

/// Builds vmbench and writes it as a flat arm64 Image, `build/bench/vmbench.img`.
fn vmbench_image() -> Result<PathBuf> {
    let elf = xtask::cargo_build("vmbench", xtask::GUEST_TARGET)?;
    let bytes = std::fs::read(&elf).with_context(|| format!("reading {}", elf.display()))?;
    let flat = xtask::elf::flatten(&bytes)?;
    let dir = xtask::build_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("vmbench.img");
    std::fs::write(&path, flat.bytes)?;
    Ok(path)
}

/// The column of a system from a console holding vmbench's lines. Lines may carry a prefix
/// before `vmbench: ` (a kernel's timestamp, a hypervisor's domain tag): it is dropped, as the
/// console holds one vmbench only.
pub fn column_from_console(system: &str, title: &str, console: &str) -> Result<Column> {
    let lines: String = console
        .lines()
        .filter_map(|l| l.find("vmbench: ").map(|i| &l[i..]))
        .flat_map(|l| [l, "\n"])
        .collect();
    let parsed = parse::parse_console(&lines)?;
    let out = parsed.vm("").ok_or_else(|| anyhow!("no vmbench output on the console"))?;
    if let Some(panic) = console.lines().find(|l| l.contains("vmbench: PANIC")) {
        bail!("vmbench failed: {}", panic.trim());
    }
    if !out.done {
        bail!("no `vmbench: done`: the run ended early");
    }
    let boot = out.boot.as_ref().ok_or_else(|| anyhow!("no `vmbench: boot` line"))?;
    if boot.el != 1 {
        bail!("vmbench ran at EL{}, not EL1", boot.el);
    }
    if out.gic.as_deref() != Some("v3") {
        bail!("vmbench found GIC {:?}, not the machine's GICv3", out.gic);
    }
    let freq = Some(boot.tick_freq());
    let figures = out
        .results
        .iter()
        .map(|r| convert::convert(r, freq, Mode::Icount))
        .collect::<Result<Vec<_>>>()?;
    Ok(Column {
        system: system.into(),
        title: title.into(),
        status: Status::Ran,
        clock: Some(boot.clock.clone()),
        figures,
        skips: out.skips.clone(),
        qemu_command: String::new(),
        seconds: 0.0,
        log: String::new(),
        notes: Vec::new(),
    })
}

/// The board's arguments shared by every system but armhv (whose xtask builds its own from the
/// same `MachineSpec`): `cortex-a76`, `-smp 2`, GICv3, icount.
fn board(opts: &Options, virtualization: bool, mem_mib: u32) -> Command {
    let mut cmd = Command::new("qemu-system-aarch64");
    let virt = if virtualization { "virtualization=on," } else { "" };
    cmd.args(["-M", &format!("virt,{virt}gic-version={GICV3},dtb-randomness=off")])
        .args(["-cpu", &opts.machine.cpu, "-smp", &opts.machine.smp.to_string()])
        .args(["-m", &format!("{mem_mib}M")])
        .args(ICOUNT_ARGS)
        .args(["-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot"]);
    cmd
}

/// Runs QEMU until it exits by itself or `timeout` passes; the console goes to `log`.
fn run_qemu(mut cmd: Command, timeout: Duration, log: &Path) -> Result<(String, f64, String)> {
    let command = xtask::qemu::command_line(&cmd);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().context("could not start qemu-system-aarch64")?;
    let output = Arc::new(Mutex::new(Vec::new()));
    let readers: Vec<_> = [
        Box::new(child.stdout.take().expect("piped")) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().expect("piped")),
    ]
    .into_iter()
    .map(|mut stream| {
        let out = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                out.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    })
    .collect();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for r in readers {
        let _ = r.join();
    }
    let seconds = start.elapsed().as_secs_f64();
    let console = String::from_utf8_lossy(&output.lock().unwrap()).replace('\r', "");
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    match status {
        None => bail!("QEMU still running after {timeout:?}\n{}", console_tail(&console, log)),
        Some(st) if !st.success() => {
            bail!("QEMU exited with {st}\n{}", console_tail(&console, log))
        }
        Some(_) => Ok((console, seconds, command)),
    }
}

/// Plain QEMU: vmbench at EL1 with QEMU's own GIC, UART and virtio-rng.
fn run_native(ctx: &Ctx) -> Result<Column> {
    let log = (ctx.log)("native");
    let mut cmd = board(ctx.opts, false, 256);
    // QEMU's virtio-mmio transports are legacy unless told otherwise; vmbench drives 1.x.
    cmd.args(["-global", "virtio-mmio.force-legacy=false", "-device", "virtio-rng-device"])
        .arg("-kernel")
        .arg(&ctx.vmbench)
        .args(["-append", &ctx.bootargs]);
    let (console, seconds, command) = run_qemu(cmd, ctx.opts.timeout, &log)?;
    let mut col = column_from_console("native", "native", &console)
        .with_context(|| console_tail(&console, &log))?;
    col.seconds = seconds;
    col.qemu_command = command;
    col.log = rel(&log);
    col.notes = vec![
        "The board without `virtualization=on`, where QEMU enters the image at EL1 (with it, \
         at EL2, where vmbench refuses to run); its figures are the same operations with no \
         hypervisor: a GIC or PL011 access goes straight to QEMU's device and, under TCG, \
         costs the one instruction, an IPI is QEMU's GIC and CPU scheduling"
            .into(),
    ];
    Ok(col)
}

/// armhv: the micro part's run (`configs/bench/micro.toml` on GICv3), as `make bench` makes it.
fn run_armhv(ctx: &Ctx) -> Result<Column> {
    let opts = ctx.opts;
    let step = Step {
        kind: Kind::Micro,
        variant: DEFAULT_VARIANT.into(),
        features: vec![],
        mode: Mode::Icount,
        round: 0,
        gic: GICV3,
    };
    let machine = micro::machine(&step, opts);
    let config = match opts.quick {
        true => micro::quick_config(&opts.config, &opts.vm, QUICK_WORDS, &machine)?,
        false => opts.config.clone(),
    };
    let log = (ctx.log)("armhv");
    let run = micro::run(&step, opts, &config, &log)?;
    let clock = run.console.vm(&opts.vm).and_then(|o| o.boot.as_ref()).map(|b| b.clock.clone());
    Ok(Column {
        system: "armhv".into(),
        title: "armhv".into(),
        status: Status::Ran,
        clock,
        figures: run.figures,
        skips: run.skips,
        qemu_command: run.qemu_command,
        seconds: run.seconds,
        log: rel(&log),
        notes: vec![format!(
            "The micro part of `make bench`: {} (VM `{}` and its VM-switch partner)",
            rel(&config),
            opts.vm
        )],
    })
}

/// KVM: Debian's stock kernel at EL2 on the same board, `bench/kvm-vmm` as its /init running
/// vmbench (`scripts/kvm-host.sh` builds the initramfs and names the kernel's arguments).
fn run_kvm(ctx: &Ctx) -> Result<Column> {
    let script = root().join("scripts/kvm-host.sh");
    let status = Command::new(&script)
        .arg("--vmbench")
        .arg(&ctx.vmbench)
        .status()
        .with_context(|| format!("running {}", rel(&script)))?;
    if !status.success() {
        bail!("{} failed ({status}); run it alone to see why", rel(&script));
    }
    let out = Command::new(&script).arg("--boot-args").output()?;
    let kernel_args = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let kernel = root().join("build/linux/Image");
    let initramfs = xtask::build_dir().join("kvm/initramfs.cpio.gz");
    let log = (ctx.log)("kvm");
    // The host's RAM: the kernel and its page cache, and the guest's 64 MiB.
    let mut cmd = board(ctx.opts, true, 512);
    cmd.arg("-kernel")
        .arg(&kernel)
        .arg("-initrd")
        .arg(&initramfs)
        // Words after `--` go to /init, which gives them to vmbench as its bootargs.
        .args(["-append", &format!("{kernel_args} -- {}", ctx.bootargs)]);
    let (console, seconds, command) = run_qemu(cmd, ctx.opts.timeout, &log)?;
    let tail = || console_tail(&console, &log);
    let mode = if console.contains("VHE mode initialized") {
        "VHE mode: the host kernel runs at EL2, so an exit to KVM needs no switch to a host \
         world (the study's KVM was the split, non-VHE design; the SFO17 slides' VHE figures \
         are the closer reference)"
    } else if console.contains("Hyp mode initialized") {
        "non-VHE (split) mode: a lowvisor at EL2 switches to the host kernel at EL1 on each exit"
    } else {
        bail!(
            "the host kernel did not start KVM (no \"kvm [1]: ... mode initialized\")\n{}",
            tail()
        );
    };
    let mut col = column_from_console("kvm", "KVM", &console).with_context(tail)?;
    col.seconds = seconds;
    col.qemu_command = command;
    col.log = rel(&log);
    col.notes = vec![
        format!("KVM in {mode}"),
        "The VMM (bench/kvm-vmm): 2 vCPU threads pinned one per host CPU, 64 MiB, an \
         in-kernel vGICv3 and PSCI, no PMU, and two devices emulated in user space: the PL011 \
         (so the PL011 write row is KVM's exit to user space and back, the study's I/O User \
         path) and a virtio-mmio entropy device, served on the notifying vCPU's thread, its \
         interrupt raised with KVM_IRQ_LINE (the I/O round trip row)"
            .into(),
    ];
    Ok(col)
}

/// Xen: Debian's stock Xen 4.17 booted dom0less on the same board (under icount on one
/// physical CPU), vmbench its only domain (`xen::run_vmbench`, `scripts/xen-host.sh`).
fn run_xen(ctx: &Ctx) -> Result<Column> {
    let log = (ctx.log)("xen");
    let run = xen::XenRun {
        vmbench: ctx.vmbench.clone(),
        bootargs: ctx.bootargs.clone(),
        cpu: ctx.opts.machine.cpu.clone(),
        icount: true,
        timeout: ctx.opts.timeout,
        log: log.clone(),
    };
    let start = Instant::now();
    let console = xen::run_vmbench(&run)?;
    let mut col = column_from_console("xen", "Xen", &console)
        .with_context(|| console_tail(&console, &log))?;
    col.seconds = start.elapsed().as_secs_f64();
    col.qemu_command = format!("see {} (Xen's boot and the device tree it was given)", rel(&log));
    col.log = rel(&log);
    col.notes = vec![
        "Xen 4.17 (Debian's xen-hypervisor-4.17-arm64) booted dom0less with no dom0: vmbench \
         is its only domain, with Xen's vpl011 (an SBSA UART, where vmbench's PL011 write \
         goes to UARTICR) as its console and no virtio device; its hypercall row is Xen's \
         slow path for a call it does not know, and Xen's own null hypercall (xen_version) \
         has a row of its own"
            .into(),
        xen::TIMING_NOTE.into(),
        xen::ICOUNT_ONE_CPU.into(),
    ];
    Ok(col)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NATIVE: &str = "\
vmbench: boot cpus=2 clock=pmu freq=1000000000 cntfrq=62500000 armhv=no el=1
vmbench: gic v3
vmbench: overhead unit=cycles 3
vmbench: result hypercall unit=cycles n=10 min=5 median=5 mean=5.0 max=5
vmbench: result gic-trap unit=cycles n=10 min=1 median=1 mean=1.0 max=1
vmbench: result ipi unit=ticks n=10 min=10 median=11 mean=11.0 max=12
vmbench: skip io-out: not armhv (no ARMHV_IO_STAMPS)
vmbench: skip vmswitch: not armhv (no ARMHV_YIELD)
vmbench: done
";

    const KVM: &str = "\
[    0.12] kvm [1]: VHE mode initialized successfully
vmbench: boot cpus=2 clock=cntvct freq=62500000 cntfrq=62500000 armhv=no el=1
vmbench: gic v3
vmbench: overhead unit=ticks 0
vmbench: result hypercall unit=ticks n=10 min=66 median=67 mean=66.6 max=67
vmbench: result eoi unit=ticks n=10 min=0 median=0 mean=0.3 max=1
vmbench: skip io-out: no virtio-rng device (virtio-mmio DeviceID 4)
vmbench: done
";

    fn comparison() -> Comparison {
        let native = column_from_console("native", "native", NATIVE).unwrap();
        let kvm = column_from_console("kvm", "KVM", KVM).unwrap();
        let xen = Column::empty("xen", "Xen", Status::NotRun("no runner".into()));
        Comparison {
            schema: SCHEMA,
            meta: Meta {
                timestamp: "t".into(),
                stamp: "s".into(),
                commit: "c".into(),
                qemu: "q".into(),
                cpu: "cortex-a76".into(),
                smp: 2,
                quick: None,
            },
            columns: vec![native, kvm, xen],
        }
    }

    #[test]
    fn ticks_become_instructions_with_their_resolution() {
        let c = comparison();
        assert_eq!(
            cell(&c.columns[1], "hypercall"),
            Cell::Value { median: 1072.0, resolution: 16.0 }
        );
        assert_eq!(cell(&c.columns[1], "eoi"), Cell::Value { median: 0.0, resolution: 16.0 });
        assert_eq!(cell(&c.columns[0], "gic-trap"), Cell::Value { median: 1.0, resolution: 1.0 });
        // The IPI is in ticks even when the clock is the PMU.
        assert_eq!(cell(&c.columns[0], "ipi"), Cell::Value { median: 176.0, resolution: 16.0 });
    }

    #[test]
    fn what_a_system_cannot_run_says_why() {
        let c = comparison();
        // Natively the hvc has a figure, but no hypervisor answered it.
        let Cell::NotApplicable(why) = cell(&c.columns[0], "hypercall") else { panic!() };
        assert!(why.contains("no hypervisor"), "{why}");
        let Cell::NotApplicable(why) = cell(&c.columns[1], "io-out") else { panic!() };
        assert!(why.contains("ARMHV_IO_STAMPS") && why.contains("Linux 6.4"), "{why}");
        assert!(why.contains("(vmbench: no virtio-rng"), "{why}");
        let Cell::NotApplicable(why) = cell(&c.columns[1], "vmswitch") else { panic!() };
        assert!(why.contains("not measured"), "{why}");
        assert_eq!(cell(&c.columns[2], "hypercall"), Cell::NotRun("no runner".into()));
    }

    #[test]
    fn the_table_has_the_study_rows_and_numbered_notes() {
        let t = table(&comparison());
        assert!(t.starts_with("| Operation | native | KVM | Xen |\n|---|---:|---:|---:|\n"), "{t}");
        assert!(t.contains("| Hypercall | n/a (1) | 1,072 ±16 | not run (2) |"), "{t}");
        assert!(t.contains("| Virtual IPI | 176 ±16 |"), "{t}");
        for row in ["VM Switch", "I/O Latency In", "Virtual IRQ Completion"] {
            assert!(t.contains(&format!("| {row} |")), "{row}: {t}");
        }
        assert!(t.contains("\n1. no hypervisor"), "{t}");
        assert!(t.contains("\n2. no runner"), "{t}");
        // One number per distinct reason.
        assert_eq!(t.matches("\n2. ").count(), 1, "{t}");
    }

    #[test]
    fn a_failed_or_unfinished_run_is_an_error_not_a_column() {
        let unfinished = NATIVE.replace("vmbench: done\n", "");
        assert!(column_from_console("native", "native", &unfinished).is_err());
        let panicked = format!("{NATIVE}vmbench: PANIC: lost an interrupt\n");
        let e = column_from_console("native", "native", &panicked).unwrap_err();
        assert!(e.to_string().contains("lost an interrupt"), "{e}");
        let el2 = NATIVE.replace("el=1", "el=2");
        assert!(column_from_console("native", "native", &el2).is_err());
        assert!(column_from_console("kvm", "KVM", "kernel panic").is_err());
    }

    #[test]
    fn a_prefix_before_vmbench_lines_is_dropped() {
        let tagged: String = KVM.lines().map(|l| format!("(d1) {l}\n")).collect();
        let col = column_from_console("xen", "Xen", &tagged).unwrap();
        assert_eq!(col.figures.len(), 2);
        assert_eq!(col.clock.as_deref(), Some("cntvct"));
    }

    #[test]
    fn results_render_again_from_json_and_chart() {
        let c = comparison();
        let json = serde_json::to_string(&c).unwrap();
        let back: Comparison = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        let svg = chart(&c).unwrap().unwrap();
        assert!(svg.contains("<svg") && svg.contains("KVM"), "{svg}");
        let md = markdown(&c, Some("x.svg"));
        assert!(md.contains("![Table II per system](x.svg)") && md.contains("6,500"), "{md}");
    }
}
