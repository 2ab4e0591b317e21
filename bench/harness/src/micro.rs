//! The vmbench runs (the micro part on GICv3 and on GICv2, the breakdown, ablation and wall
//! parts): one QEMU run of `configs/bench/micro.toml` per step, its console parsed and
//! converted to instructions or ns.

use crate::catalog::TRAP_PROBE;
use crate::configtext::rewrite_cmdline;
use crate::convert::{self, Mode};
use crate::model::{Kind, NotRun, Run};
use crate::options::{Options, Step};
use crate::parse;
use crate::runlog::{console_tail, run_error};
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xtask::{MachineSpec, image, qemu};

/// How long QEMU may take to power off after `vmbench: done` (the other VMs end, armhv prints
/// its breakdown).
const GRACE: Duration = Duration::from_secs(120);

/// The machine a step runs on: the options' CPU model and count, the step's build, timing
/// and interrupt controller.
pub fn machine(step: &Step, opts: &Options) -> MachineSpec {
    MachineSpec {
        hyp_features: step.features.clone(),
        icount: step.mode == Mode::Icount,
        gic: step.gic,
        ..opts.machine.clone()
    }
}

pub fn run(step: &Step, opts: &Options, config: &Path, log: &Path) -> Result<Run> {
    let probe_config;
    let config = if step.variant == TRAP_PROBE {
        probe_config = with_benchmark(config, &opts.vm, "trap", &opts.machine)?;
        &probe_config
    } else {
        config
    };
    let machine = machine(step, opts);
    let img = image::build(config, &machine)?;
    let qemu_command = qemu::command_line(&qemu::command(&img, &machine));
    let start = Instant::now();
    let mut q = qemu::Run::start(&img, &machine)?;
    let done = format!("[{}] vmbench: done", opts.vm);
    let waited = q.expect(&done, opts.timeout);
    let exited = if waited.is_ok() { q.wait_exit(GRACE).map(|_| ()) } else { Ok(()) };
    let seconds = start.elapsed().as_secs_f64();
    let console = q.output();
    drop(q); // stops QEMU if it is still running
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    let tail = || console_tail(&console, log);
    if let Err(e) = waited {
        bail!("no `{done}`: {}\n{}", run_error(&e), tail());
    }
    let mut run = run_from_console(step, &opts.vm, &console, seconds).with_context(tail)?;
    run.qemu_command = qemu_command;
    if step.kind == Kind::Breakdown && run.console.breakdown.is_empty() {
        let why = match exited {
            Err(_) => format!("QEMU did not power off within {GRACE:?} after vmbench finished"),
            Ok(()) => "armhv printed none".to_owned(),
        };
        bail!("no `ws-breakdown:` lines: {why}\n{}", tail());
    }
    Ok(run)
}

/// A step's record from its console: the bench VM's results converted to the step's unit.
pub fn run_from_console(step: &Step, vm: &str, console: &str, seconds: f64) -> Result<Run> {
    let parsed = parse::parse_console(console)?;
    let out = parsed.vm(vm).ok_or_else(|| anyhow!("no vmbench output from VM {vm}"))?;
    // vmbench drives the GIC its device tree names: on the other version it would time the
    // other interface under this step's name.
    if let Some(seen) = &out.gic
        && *seen != format!("v{}", step.gic)
    {
        bail!("vmbench in VM {vm} found GIC {seen} on a gic-version={} machine", step.gic);
    }
    // `cycles` need no rate; `ticks` are always the virtual counter's.
    let freq = out.boot.as_ref().map(parse::Boot::tick_freq);
    let figures = out
        .results
        .iter()
        .map(|r| convert::convert(r, freq, step.mode))
        .collect::<Result<Vec<_>>>()?;
    let overhead = match out.overhead {
        Some((unit, v)) => Some(v as f64 * convert::scale(unit, freq)?),
        None => None,
    };
    let skips = out.skips.clone();
    Ok(Run {
        kind: step.kind,
        variant: step.variant.clone(),
        features: step.features.iter().map(|f| f.to_string()).collect(),
        mode: step.mode,
        seconds,
        figures,
        skips,
        overhead,
        console: parsed,
        qemu_command: String::new(),
        workloads: None,
        distributor: None,
        tablev: None,
        paths: None,
        gic: step.gic,
        not_run: None,
    })
}

/// The record of a step that has no figures, and why.
pub fn not_run(step: &Step, why: NotRun) -> Run {
    Run {
        kind: step.kind,
        variant: step.variant.clone(),
        features: step.features.iter().map(|f| f.to_string()).collect(),
        mode: step.mode,
        seconds: 0.0,
        figures: Vec::new(),
        skips: Vec::new(),
        overhead: None,
        console: Default::default(),
        qemu_command: String::new(),
        workloads: None,
        distributor: None,
        tablev: None,
        paths: None,
        gic: step.gic,
        not_run: Some(why),
    }
}

/// A copy of `config` with the benchmark `name` appended to `vm`'s cmdline, for the probe
/// build's step (`config` may be the quick copy already).
fn with_benchmark(config: &Path, vm: &str, name: &str, machine: &MachineSpec) -> Result<PathBuf> {
    edited_copy(config, vm, name, (name, "the trap-probe step"), machine)
}

/// A copy of `config` with `words` appended to `vm`'s cmdline (replacing any `n=`/`warmup=`
/// words there), for `--quick`.
pub fn quick_config(
    config: &Path,
    vm: &str,
    words: &str,
    machine: &MachineSpec,
) -> Result<PathBuf> {
    edited_copy(config, vm, words, ("quick", "--quick"), machine)
}

/// A copy of `config` in build/bench, named after it and `suffix`, for `purpose` (in errors),
/// with `words` appended to `vm`'s cmdline (`key=value` words replace the old ones of that key). Only for configs whose
/// images are all `@guest`s: the copy lives elsewhere, so relative file paths would not
/// resolve.
fn edited_copy(
    config: &Path,
    vm: &str,
    words: &str,
    (suffix, purpose): (&str, &str),
    machine: &MachineSpec,
) -> Result<PathBuf> {
    let cfg = vmconfig::load(config, &machine.as_config_machine()).map_err(|e| anyhow!("{e}"))?;
    let by_path = cfg.vms.iter().any(|v| {
        matches!(v.kernel, vmconfig::ImageRef::Path(_))
            || matches!(v.initrd, Some(vmconfig::ImageRef::Path(_)))
            || v.disks.iter().any(|d| d.image.is_some())
    });
    if by_path {
        bail!(
            "{purpose} needs a config whose images are all \"@guest\" builds ({})",
            config.display()
        );
    }
    let text = std::fs::read_to_string(config)?;
    let edited = rewrite_cmdline(&text, vm, words)
        .with_context(|| format!("{}: {purpose}", config.display()))?;
    let dir = xtask::build_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let stem = config.file_stem().and_then(|s| s.to_str()).unwrap_or("bench");
    let out = dir.join(format!("{stem}-{suffix}.toml"));
    std::fs::write(&out, edited)?;
    Ok(out)
}
