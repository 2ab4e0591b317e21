//! The interrupt-distributor experiment's runs, the multicore CE study's Table 1 (`make
//! table1`; what it does and why: `bench/README.md`, "The interrupt distributor"). Each case is
//! a copy of `configs/bench/distributor.toml` with `[irqdist]` and the audio word set; a run
//! boots it, dumps armhv's per-tick trace (Ctrl-A t) every 2.5 s of the iperf3 transfer, waits
//! for the result, stops every VM (Ctrl-A q) and parses the console.

use crate::catalog::{Case, GP_VM, PEER_VM, RT_VM, Spread};
use crate::configtext::{absolute_paths, cmdline_of, edit_cmdline, set_table_keys};
use crate::irqtrace::{self, Trace};
use crate::model::{CaseRun, Kind, Run};
use crate::options::{Options, Step};
use crate::parse::{Output, last_audio};
use crate::runlog::{console_tail, host_load, rel, run_error};
use crate::{catalog, workloads};
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xtask::{MachineSpec, image, qemu};

/// iperf3 -O 1: the transfer's first second is not measured.
const OMITTED_SECS: f64 = 1.0;
/// The first trace dump, and the time between dumps (less than the 3 s a dump holds).
const FIRST_DUMP_SECS: f64 = 3.0;
const DUMP_EVERY_SECS: f64 = 2.5;
/// How long armhv may take to dump the trace, and the VMs to stop after Ctrl-A q.
const DUMP_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long iperf3's result may take after the last dump (the end of the transfer).
const RESULT_TIMEOUT: Duration = Duration::from_secs(90);

/// The `audio=MS,PERIOD_US,WORK_US[,HOG_PCT]` word of a cmdline, as its fields.
fn audio_fields(cmdline: &str) -> Option<Vec<&str>> {
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("audio="))
        .map(|a| a.split(',').collect())
}

/// The real-time VM's cmdline for `case`, from the template's: the `audio=` word kept whole
/// (cases 5–7; it must carry HOG_PCT), without HOG_PCT (2–4), or removed (1).
pub fn rt_cmdline(template: &str, case: &Case) -> Result<String> {
    let fields = audio_fields(template)
        .ok_or_else(|| anyhow!("VM {RT_VM}'s cmdline has no audio=MS,PERIOD_US,WORK_US,HOG_PCT"))?;
    if fields.len() != 4 {
        bail!(
            "VM {RT_VM}'s audio= word needs all four fields, MS,PERIOD_US,WORK_US,HOG_PCT (the \
             H.264 cases use HOG_PCT; the others drop it)"
        );
    }
    let words = template.split_whitespace().filter_map(|w| {
        if !w.starts_with("audio=") {
            return Some(w.to_owned());
        }
        match (case.audio, case.hog) {
            (false, _) => None,
            (true, false) => Some(format!("audio={}", fields[..3].join(","))),
            (true, true) => Some(w.to_owned()),
        }
    });
    Ok(words.collect::<Vec<_>>().join(" "))
}

/// The config of `case` from the template's text (paths already absolute).
pub fn case_config(template: &str, case: &Case) -> Result<String> {
    let rt = cmdline_of(template, RT_VM)?.unwrap_or_default();
    let rt = rt_cmdline(&rt, case)?;
    let text = edit_cmdline(template, RT_VM, |_| rt.clone())?;
    let (enabled, spread) = match case.spread {
        Spread::Off => ("false", "\"one\""),
        Spread::One => ("true", "\"one\""),
        Spread::All => ("true", "\"all\""),
    };
    Ok(set_table_keys(&text, "irqdist", &[("enabled", enabled), ("spread", spread)]))
}

/// The length of the network test, from the `--seconds,N` of the VM's `armhv.run=` (5 by
/// default, as armhv-bench's).
pub fn net_seconds(cmdline: &str) -> u64 {
    let run = cmdline.split_whitespace().find_map(|w| w.strip_prefix("armhv.run=")).unwrap_or("");
    let words: Vec<&str> = run.split(',').collect();
    words.windows(2).find(|w| w[0] == "--seconds").and_then(|w| w[1].parse().ok()).unwrap_or(5)
}

/// When to dump the trace, in seconds after iperf3 started, for a transfer of `seconds`
/// measured seconds after the omitted one: every `DUMP_EVERY_SECS` from `FIRST_DUMP_SECS`,
/// and at the end.
pub fn dump_offsets(seconds: u64) -> Vec<f64> {
    let end = OMITTED_SECS + seconds as f64;
    let mut out = Vec::new();
    let mut d = FIRST_DUMP_SECS.min(end);
    while d < end {
        out.push(d);
        d += DUMP_EVERY_SECS;
    }
    out.push(end);
    out
}

/// The measured seconds' trace from the dumps taken `offsets` seconds after iperf3 started:
/// merged, from the tick at which the omitted second ended to the one at which the transfer
/// did (placed by the first and the last dump). All of it if the dumps cannot be placed.
pub fn measured(dumps: &[Trace], offsets: &[f64], seconds: u64) -> Option<Trace> {
    let (first, last) = (dumps.first()?, dumps.last()?);
    let merged = Trace::merge(dumps);
    if dumps.len() != offsets.len() {
        return Some(merged);
    }
    let tick_s = f64::from(first.tick_ms.max(1)) / 1000.0;
    let ticks = |secs: f64| (secs.max(0.0) / tick_s).round() as u64;
    let from = first.last_tick()?.saturating_sub(ticks(offsets[0] - OMITTED_SECS));
    let end = OMITTED_SECS + seconds as f64;
    let to = last.last_tick()?.saturating_sub(ticks(offsets[offsets.len() - 1] - end));
    Some(merged.range(from + 1, to))
}

/// The machine of the experiment: the study's four cores.
pub fn machine(opts: &Options) -> MachineSpec {
    MachineSpec { cpu: opts.machine.cpu.clone(), smp: 4, mem_mib: 2048, ..MachineSpec::default() }
}

/// Writes `case`'s config into build/table1 from the template; returns its path and the
/// real-time VM's cmdline there.
pub fn write_config(template: &Path, case: &Case) -> Result<(PathBuf, String)> {
    let text = std::fs::read_to_string(template)
        .with_context(|| format!("reading {}", template.display()))?;
    let dir = template.parent().unwrap_or(Path::new("."));
    let dir = if dir.is_absolute() { dir.to_owned() } else { std::env::current_dir()?.join(dir) };
    let text = case_config(&absolute_paths(&text, &dir), case)
        .with_context(|| format!("{}: case {}", rel(template), case.number))?;
    let out = xtask::build_dir().join("table1").join(format!("case{}.toml", case.number));
    std::fs::create_dir_all(out.parent().unwrap())?;
    std::fs::write(&out, &text)?;
    let rt = cmdline_of(&text, RT_VM)?.unwrap_or_default();
    Ok((out, rt))
}

/// Runs one case (`step.variant` = `caseN`) and returns its record; the console goes to `log`.
pub fn run(step: &Step, opts: &Options, log: &Path, tag: &str) -> Result<Run> {
    let case = catalog::case_of_variant(&step.variant)
        .ok_or_else(|| anyhow!("{} is not a case of Table 1", step.variant))?;
    let (config, rt_cmdline) = write_config(&opts.distributor_config, case)?;
    let machine = machine(opts);
    let cfg = vmconfig::load(&config, &machine.as_config_machine()).map_err(|e| anyhow!("{e}"))?;
    let gp = cfg
        .vms
        .iter()
        .find(|v| v.name == GP_VM)
        .ok_or_else(|| anyhow!("{}: no VM named {GP_VM:?}", rel(&opts.distributor_config)))?;
    for r in [Some(&gp.kernel), gp.initrd.as_ref()].into_iter().flatten() {
        if let vmconfig::ImageRef::Path(p) = r
            && !p.exists()
        {
            bail!("{} is missing: run {}", rel(p), workloads::ASSETS_HINT);
        }
    }
    let seconds = net_seconds(&gp.cmdline);
    let img = image::build(&config, &machine)?;
    let qemu_command = qemu::command_line(&qemu::command(&img, &machine));
    let load_before = host_load();
    let start = Instant::now();
    let mut q = qemu::Run::start(&img, &machine)?;
    eprintln!("{tag}: booting ({})", rel(&config));
    let mut dumps = Vec::new();
    let waited = drive(&mut q, opts, seconds, tag, &mut dumps);
    let seconds_run = start.elapsed().as_secs_f64();
    let console = q.output();
    drop(q); // stops QEMU if it is still running
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    let tail = || console_tail(&console, log);
    let mut run =
        record(case, rel(&config), rt_cmdline, &console, &dumps, seconds).with_context(tail)?;
    run.host_load = load_before.zip(host_load());
    // A case that goes wrong is recorded as such, with what it measured, and the others go on:
    // how the guests behave under this load is part of the experiment.
    run.failure = match waited {
        Err(e) => Some(run_error(&e)),
        Ok(()) if run.mbit_s.is_none() => Some(format!("no iperf3 result from VM {GP_VM}")),
        Ok(()) if run.trace.is_none() => Some("no irqdist trace after Ctrl-A t".to_owned()),
        Ok(()) => None,
    };
    if let Some(why) = &run.failure {
        eprintln!("{tag}: FAILED: {why}\n{}", tail());
    }
    Ok(Run {
        kind: Kind::Distributor,
        variant: step.variant.clone(),
        features: Vec::new(),
        mode: step.mode,
        seconds: seconds_run,
        figures: Vec::new(),
        skips: Vec::new(),
        overhead: None,
        console: Default::default(),
        qemu_command,
        workloads: None,
        distributor: Some(run),
        tablev: None,
        paths: None,
        gic: machine.gic,
        not_run: None,
    })
}

/// The console side of a case: wait for the transfer, dump the trace at [`dump_offsets`]
/// (recorded in `dumps`, in seconds after iperf3 started), wait for the result, stop everything.
fn drive(
    q: &mut qemu::Run,
    opts: &Options,
    seconds: u64,
    tag: &str,
    dumps: &mut Vec<f64>,
) -> Result<()> {
    let started = format!("[{GP_VM}] armhv-bench: workload iperf3:");
    q.expect(&started, opts.timeout).context("waiting for iperf3 to start")?;
    let t0 = Instant::now();
    let offsets = dump_offsets(seconds);
    eprintln!(
        "{tag}: iperf3 running ({:.0} s); trace dumps at {} s",
        OMITTED_SECS + seconds as f64,
        offsets.iter().map(|o| format!("{o:.1}")).collect::<Vec<_>>().join(", ")
    );
    for at in offsets {
        std::thread::sleep(
            (t0 + Duration::from_secs_f64(at)).saturating_duration_since(Instant::now()),
        );
        let mark = q.mark();
        dumps.push(t0.elapsed().as_secs_f64());
        q.send("\x01t")?;
        q.expect_since(mark, "irqdist: trace end", DUMP_TIMEOUT)
            .context("waiting for the trace (Ctrl-A t)")?;
    }
    eprintln!("{tag}: {} dumps taken; waiting for iperf3's result", dumps.len());
    let done = format!("[{GP_VM}] {}", workloads::DONE);
    if let Err(e) = q.expect(&done, RESULT_TIMEOUT) {
        // The VMs' statistics at the stall (Ctrl-A s: each virtio device's line, interrupt
        // state and queue indices) go into the console log for the diagnosis.
        let mark = q.mark();
        q.send("\x01s")?;
        let _ = q.expect_since(mark, &format!("({PEER_VM}, "), DUMP_TIMEOUT);
        std::thread::sleep(Duration::from_secs(1));
        return Err(e).context("waiting for iperf3's result (Ctrl-A s in the console log)");
    }
    let mark = q.mark();
    q.send("\x01q")?;
    q.expect_since(mark, "all VMs have stopped", STOP_TIMEOUT)
        .context("stopping the VMs (Ctrl-A q)")?;
    q.wait_exit(STOP_TIMEOUT).map(|_| ())
}

/// Everything but the run itself from a finished console, whose trace dumps were taken
/// `dumps` seconds after iperf3 started a transfer of `seconds` measured seconds.
pub fn record(
    case: &Case,
    config: String,
    rt_cmdline: String,
    console: &str,
    dumps: &[f64],
    seconds: u64,
) -> Result<CaseRun> {
    let out = Output::parse(console, Some(GP_VM))?;
    let mbit_s = out.values("iperf3").last().copied();
    let errors = out.failures.iter().map(|f| f.message.clone()).collect();
    Ok(CaseRun {
        case: case.number,
        config,
        rt_cmdline,
        mbit_s,
        errors,
        trace: measured(&irqtrace::traces(console)?, dumps, seconds),
        dumps: dumps.to_vec(),
        windows: irqtrace::windows(console)?,
        events: irqtrace::events(console)?,
        audio: last_audio(console, RT_VM),
        host_load: None,
        failure: None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::CASES;

    const TEMPLATE: &str = "\
# comment
[scheduler]
quantum_ms = 10

[irqdist]
enabled = true
spread = \"one\"

[[vm]]
name = \"rt\"
vcpus = 3
cmdline = \"audio=0,3000,1500,40 off\"

[[vm]]
name = \"gp\"
cmdline = \"console=ttyAMA0 armhv.run=armhv-bench,--peer,10.0.0.2,--seconds,12,--reverse,iperf3\"
";

    #[test]
    fn the_audio_word_per_case() {
        let t = "audio=0,3000,1500,40 off";
        assert_eq!(rt_cmdline(t, &CASES[0]).unwrap(), "off");
        assert_eq!(rt_cmdline(t, &CASES[1]).unwrap(), "audio=0,3000,1500 off");
        assert_eq!(rt_cmdline(t, &CASES[6]).unwrap(), "audio=0,3000,1500,40 off");
        assert!(rt_cmdline("audio=0,3000,1500", &CASES[1]).is_err(), "no HOG_PCT");
        assert!(rt_cmdline("hello", &CASES[1]).is_err());
    }

    #[test]
    fn case_configs() {
        let c2 = case_config(TEMPLATE, &CASES[1]).unwrap();
        assert!(c2.contains("cmdline = \"audio=0,3000,1500 off\""), "{c2}");
        assert!(c2.contains("enabled = false"));
        let c7 = case_config(TEMPLATE, &CASES[6]).unwrap();
        assert!(c7.contains("cmdline = \"audio=0,3000,1500,40 off\""));
        assert!(c7.contains("enabled = true\nspread = \"all\""), "{c7}");
        // The general-purpose VM is untouched.
        assert!(c7.contains("--seconds,12,--reverse,iperf3"));
        assert_eq!(net_seconds("x armhv.run=armhv-bench,--seconds,12,iperf3"), 12);
        assert_eq!(net_seconds("x armhv.run=armhv-bench,iperf3"), 5);
    }

    #[test]
    fn the_template_validates_for_every_case() {
        let stand_in = crate::tests::StandInImages::new("configs/bench/distributor.toml");
        let (text, dir) = (stand_in.text(), stand_in.config_dir());
        let m = MachineSpec { smp: 4, ..MachineSpec::default() };
        for case in &CASES {
            let text = case_config(&absolute_paths(&text, &dir), case).unwrap();
            let path = std::env::temp_dir().join(format!("armhv-table1-case{}.toml", case.number));
            std::fs::write(&path, &text).unwrap();
            let cfg = vmconfig::load(&path, &m.as_config_machine())
                .unwrap_or_else(|e| panic!("case {}: {e}", case.number));
            let names: Vec<&str> = cfg.vms.iter().map(|v| v.name.as_str()).collect();
            assert_eq!(names, [RT_VM, GP_VM, PEER_VM]);
            let _ = std::fs::remove_file(&path);
        }
    }

    /// A case's console as armhv and the guests print it.
    pub(crate) fn console(case: u32, mbit: f64, net_cpu: usize) -> String {
        let redirect = if net_cpu != 0 {
            format!(
                "[   6.000000 armhv INFO  cpu0] irqdist: gp/net0 redirected from CPU 0 to vCPU \
                 {net_cpu} on CPU {net_cpu}\n"
            )
        } else {
            String::new()
        };
        let audio = if case == 1 { 0 } else { 3 };
        let mut ticks = String::new();
        // Ticks 0..300 end 3 s after the start: 0..100 are the omitted second.
        for k in 0..300 {
            ticks.push_str(&format!(
                "[  12.000000 armhv INFO  cpu1] irqdist: tick {k} {} {}\n",
                audio + k % 2,
                1 + k % 3
            ));
        }
        format!(
            "[   0.9 armhv INFO  cpu0] rt: 3 vCPU(s) on CPU(s) [0, 1, 2]\n\
             [rt] testguest: audio 5000 ms: 1666 interrupts (3.3 per 10 ms), work 2510 ms in \
             4000 loops, latency max 8206 us mean 1043 us\n\
             {redirect}\
             [gp] armhv-bench: workload iperf3: iperf3 -c 10.0.0.2 -R\n\
             [  12.000000 armhv INFO  cpu1] irqdist: last window: cpu0 96% busy cpu1 3% busy cpu2 \
             0% busy cpu3 50% busy, rt/timer Periodic 33, gp/net0 Sporadic 20\n\
             [  12.000000 armhv INFO  cpu1] irqdist: trace 300 ticks of 10 ms, oldest first: \
             rt/timer@cpu0 gp/net0@cpu{net_cpu}\n\
             {ticks}\
             [  12.100000 armhv INFO  cpu1] irqdist: trace end\n\
             [gp] armhv-bench: result iperf3 rep=1 mbit_s={mbit}\n\
             [gp] armhv-bench: done\n"
        )
    }

    pub(crate) fn case_run(case: u32, mbit: f64, net_cpu: usize) -> Run {
        let c = catalog::case(case).unwrap();
        let console = console(case, mbit, net_cpu);
        // One dump, 3 s after iperf3 started a transfer of 10 s: its ticks from 1 s on.
        let d =
            record(c, "build/table1/x.toml".into(), String::new(), &console, &[3.0], 10).unwrap();
        Run {
            kind: Kind::Distributor,
            variant: catalog::variant(case),
            features: Vec::new(),
            mode: crate::convert::Mode::WallClock,
            seconds: 60.0,
            figures: Vec::new(),
            skips: Vec::new(),
            overhead: None,
            console: Default::default(),
            qemu_command: String::new(),
            workloads: None,
            distributor: Some(d),
            tablev: None,
            paths: None,
            gic: catalog::GICV3,
            not_run: None,
        }
    }

    #[test]
    fn dumps_cover_the_measured_seconds() {
        assert_eq!(dump_offsets(10), [3.0, 5.5, 8.0, 10.5, 11.0]);
        assert_eq!(dump_offsets(1), [2.0]);
        let dump = |last: u64| Trace {
            tick_ms: 10,
            columns: vec![irqtrace::Column { source: "a".into(), cpu: 0 }],
            ticks: (last - 299..=last).map(|k| (k, vec![1])).collect(),
            at_secs: 0.0,
        };
        // Dumps 3 s and 11.5 s after the start of 1 + 10 s: ticks 1 s .. 11 s after it.
        let t = measured(&[dump(1300), dump(2150)], &[3.0, 11.5], 10).unwrap();
        assert_eq!(t.ticks.first().unwrap().0, 1101);
        assert_eq!(t.ticks.last().unwrap().0, 2100);
        // The gap between the dumps has no ticks.
        assert_eq!(t.ticks.len(), 200 + 250);
        // Offsets that do not match the dumps: all of them.
        assert_eq!(measured(&[dump(1300)], &[], 10).unwrap().ticks.len(), 300);
        assert!(measured(&[], &[], 10).is_none());
    }
}
