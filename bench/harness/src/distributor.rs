//! The interrupt-distributor experiment's runs, the multicore CE study's Table 1 (`make
//! table1`; what it does and why: `bench/README.md`, "The interrupt distributor"). Each case is
//! a copy of `configs/bench/distributor.toml` with `[irqdist]` and the audio word set; a run
//! boots it, dumps armhv's per-tick trace (Ctrl-A t) every 2.5 s of the iperf3 transfer, waits
//! for the result, stops every VM (Ctrl-A q) and parses the console.

use crate::catalog::{AUDIO_CPU, AUDIO_SOURCE, Case, GP_VM, PEER_VM, RT_VM, Spread};
use crate::configtext::{absolute_paths, cmdline_of, edit_cmdline, set_table_keys};
use crate::convert::Mode;
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
/// How long armhv may take to dump the trace, and the VMs to stop after Ctrl-A q.
const DUMP_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

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

/// The measured seconds' trace from the dumps taken `offsets` seconds (on armhv's clock) after
/// iperf3 started: merged, from the tick at which the omitted second ended to the one at which
/// the transfer did (placed by the first and the last dump). All of it if the dumps cannot be
/// placed.
pub fn measured(dumps: &[Trace], offsets: &[f64], seconds: u64) -> Option<Trace> {
    let (first, last) = (dumps.first()?, dumps.last()?);
    let merged = Trace::merge(dumps);
    if dumps.len() != offsets.len() || dumps.len() < 2 {
        return Some(merged);
    }
    let tick_s = f64::from(first.tick_ms.max(1)) / 1000.0;
    // The tick `secs` after iperf3 started, placed by a dump taken `at` seconds after it.
    let tick_at = |dump: &Trace, at: f64, secs: f64| {
        let k = dump.last_tick()? as f64 + ((secs - at) / tick_s).round();
        Some(k.max(0.0) as u64)
    };
    let from = tick_at(first, offsets[0], OMITTED_SECS)?;
    let to = tick_at(last, offsets[offsets.len() - 1], OMITTED_SECS + seconds as f64)?;
    Some(merged.range(from + 1, to))
}

/// The machine of the experiment: the study's four cores, under icount for `Mode::Icount`
/// (each CPU's time is its own instructions' count, whatever the host does: bench/README.md).
pub fn machine(opts: &Options, mode: Mode) -> MachineSpec {
    MachineSpec {
        cpu: opts.machine.cpu.clone(),
        smp: 4,
        mem_mib: 2048,
        icount: mode == Mode::Icount,
        ..MachineSpec::default()
    }
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
    let machine = machine(opts, step.mode);
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
    let waited = drive(&mut q, opts, tag);
    let seconds_run = start.elapsed().as_secs_f64();
    let console = q.output();
    drop(q); // stops QEMU if it is still running
    std::fs::write(log, &console).with_context(|| format!("writing {}", log.display()))?;
    let tail = || console_tail(&console, log);
    let mut run = record(case, rel(&config), rt_cmdline, &console, seconds).with_context(tail)?;
    run.host_load = load_before.zip(host_load());
    // A case that goes wrong is recorded as such, with what it measured, and the others go on:
    // how the guests behave under this load is part of the experiment.
    run.failure = match waited {
        Err(e) => Some(run_error(&e)),
        Ok(()) if run.mbit_s.is_none() => Some(format!("no iperf3 result from VM {GP_VM}")),
        Ok(()) if run.trace.is_none() => Some("no irqdist trace after Ctrl-A t".to_owned()),
        Ok(()) => audio_gap(case, run.trace.as_ref()),
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

/// The audio must be running when the measured seconds begin (an interrupt in the first of
/// them, `AUDIO_START_TICKS`) and through most of them (`AUDIO_PRESENCE` of the ticks): the
/// real-time VM starts it after a delay (`wfi=` in the template, so that the Linux VMs boot on
/// an unloaded core 0). Not through all of them: a handler that overruns its period (2.9 ms of
/// work every 3 ms) lets the timer fire late, and a saturated core 0 leaves ticks without one.
const AUDIO_START_TICKS: usize = 10;
const AUDIO_PRESENCE: f64 = 0.5;

/// Why a case with audio did not measure what it claims: the audio missing at the start of
/// the measured ticks or from most of them.
pub fn audio_gap(case: &Case, trace: Option<&Trace>) -> Option<String> {
    let t = trace.filter(|_| case.audio)?;
    let series = t.series(AUDIO_SOURCE, AUDIO_CPU);
    if !series.iter().take(AUDIO_START_TICKS).any(|&n| n > 0) {
        return Some(format!(
            "no audio in the first {AUDIO_START_TICKS} measured ticks: it started late"
        ));
    }
    let present = series.iter().filter(|&&n| n > 0).count() as f64 / series.len().max(1) as f64;
    (present < AUDIO_PRESENCE).then(|| {
        format!(
            "the audio ran in {:.0} % of the measured ticks (at least {:.0} % expected): it \
             stalled",
            present * 100.0,
            AUDIO_PRESENCE * 100.0
        )
    })
}

/// The console side of a case: a trace dump as iperf3 starts, which places the transfer on
/// armhv's clock, then another once its result is in (the trace holds the whole transfer: a
/// dump runs on CPU 0, so none is taken during it), then every VM stopped.
fn drive(q: &mut qemu::Run, opts: &Options, tag: &str) -> Result<()> {
    let started = format!("[{GP_VM}] armhv-bench: workload iperf3:");
    q.expect(&started, opts.timeout).context("waiting for iperf3 to start")?;
    let dump = |q: &mut qemu::Run| -> Result<()> {
        let mark = q.mark();
        q.send("\x01t")?;
        q.expect_since(mark, "irqdist: trace end", DUMP_TIMEOUT)
            .context("waiting for the trace (Ctrl-A t)")
            .map(|_| ())
    };
    dump(q)?;
    eprintln!("{tag}: iperf3 running; waiting for its result");
    let done = format!("[{GP_VM}] {}", workloads::DONE);
    if let Err(e) = q.expect(&done, opts.timeout) {
        // The VMs' statistics at the stall (Ctrl-A s: each virtio device's line, interrupt
        // state and queue indices) go into the console log for the diagnosis.
        let mark = q.mark();
        q.send("\x01s")?;
        let _ = q.expect_since(mark, &format!("({PEER_VM}, "), DUMP_TIMEOUT);
        std::thread::sleep(Duration::from_secs(1));
        return Err(e).context("waiting for iperf3's result (Ctrl-A s in the console log)");
    }
    dump(q)?;
    let mark = q.mark();
    q.send("\x01q")?;
    q.expect_since(mark, "all VMs have stopped", STOP_TIMEOUT)
        .context("stopping the VMs (Ctrl-A q)")?;
    q.wait_exit(STOP_TIMEOUT).map(|_| ())
}

/// Everything but the run itself from a finished console, whose first trace dump was taken as
/// iperf3 started a transfer of `seconds` measured seconds.
pub fn record(
    case: &Case,
    config: String,
    rt_cmdline: String,
    console: &str,
    seconds: u64,
) -> Result<CaseRun> {
    let out = Output::parse(console, Some(GP_VM))?;
    let traces = irqtrace::traces(console)?;
    let start = traces.first().map_or(0.0, |t| t.at_secs);
    let dumps: Vec<f64> = traces.iter().map(|t| t.at_secs - start).collect();
    let mbit_s = out.values("iperf3").last().copied();
    let errors = out.failures.iter().map(|f| f.message.clone()).collect();
    Ok(CaseRun {
        case: case.number,
        config,
        rt_cmdline,
        mbit_s,
        errors,
        trace: measured(&traces, &dumps, seconds),
        dumps,
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

    /// A case's console as armhv and the guests print it: a dump as iperf3 starts, 1 s after
    /// the distributor did (ticks 0..100), and one after its 11 s (ticks 0..1200), whose
    /// ticks 200..1200 are the measured ones.
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
        let dump = |at: &str, n: u64| {
            let mut ticks = String::new();
            for k in 0..n {
                // rt holds core 0 for 60 % of every tick, gp for 40 % on even ones.
                ticks.push_str(&format!(
                    "[{at} armhv INFO  cpu1] irqdist: tick {k} {} {} 60 {}\n",
                    audio + k % 2,
                    1 + k % 3,
                    if k % 2 == 0 { 40 } else { 0 }
                ));
            }
            format!(
                "[{at} armhv INFO  cpu1] irqdist: last window: cpu0 96% busy cpu1 3% busy cpu2 \
                 0% busy cpu3 50% busy, rt/timer Periodic 33, gp/net0 Sporadic 20\n\
                 [{at} armhv INFO  cpu1] irqdist: trace {n} ticks of 10 ms, oldest first: \
                 rt/timer@cpu0 gp/net0@cpu{net_cpu} run:rt@cpu0 run:gp@cpu0\n\
                 {ticks}\
                 [{at} armhv INFO  cpu1] irqdist: trace end\n"
            )
        };
        format!(
            "[   0.9 armhv INFO  cpu0] rt: 3 vCPU(s) on CPU(s) [0, 1, 2]\n\
             [rt] testguest: audio 5000 ms: 1666 interrupts (3.3 per 10 ms), work 2510 ms in \
             4000 loops, latency max 8206 us mean 1043 us\n\
             [gp] armhv-bench: workload iperf3: iperf3 -c 10.0.0.2 -R\n\
             {}\
             {redirect}\
             [gp] armhv-bench: result iperf3 rep=1 mbit_s={mbit}\n\
             [gp] armhv-bench: done\n\
             {}",
            dump("   1.000000", 100),
            dump("  12.000000", 1200),
        )
    }

    pub(crate) fn case_run(case: u32, mbit: f64, net_cpu: usize) -> Run {
        let c = catalog::case(case).unwrap();
        let console = console(case, mbit, net_cpu);
        let d = record(c, "build/table1/x.toml".into(), String::new(), &console, 10).unwrap();
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
    fn dumps_place_the_measured_seconds() {
        let dump = |last: u64, at_secs: f64| Trace {
            tick_ms: 10,
            columns: vec![irqtrace::Column { source: "a".into(), cpu: 0 }],
            ticks: (last - 299..=last).map(|k| (k, vec![1])).collect(),
            at_secs,
        };
        // Dumps as a transfer of 1 + 2 s starts and 3.5 s later: ticks 1 s .. 3 s after it.
        let t = measured(&[dump(1300, 13.0), dump(1650, 16.5)], &[0.0, 3.5], 2).unwrap();
        assert_eq!(t.ticks.first().unwrap().0, 1401);
        assert_eq!(t.ticks.last().unwrap().0, 1600);
        // A transfer longer than a dump holds: only the ticks the last dump still has.
        let t = measured(&[dump(1300, 13.0), dump(2150, 21.5)], &[0.0, 8.5], 7).unwrap();
        assert_eq!(t.ticks.first().unwrap().0, 1851);
        assert_eq!(t.ticks.len(), 250);
        // A lone dump cannot be placed: all of it.
        assert_eq!(measured(&[dump(1300, 13.0)], &[0.0], 10).unwrap().ticks.len(), 300);
        assert!(measured(&[], &[], 10).is_none());
    }

    #[test]
    fn a_record_places_its_dumps_on_armhvs_clock() {
        let c = catalog::case(3).unwrap();
        let d = record(c, String::new(), String::new(), &console(3, 50.0, 1), 10).unwrap();
        assert_eq!(d.dumps, [0.0, 11.0]);
        let t = d.trace.unwrap();
        assert_eq!((t.ticks.first().unwrap().0, t.ticks.last().unwrap().0), (200, 1199));
        assert_eq!(d.windows.len(), 2);
        assert_eq!(d.mbit_s, Some(50.0));
        assert_eq!(audio_gap(c, Some(&t)), None);
        // Silent ticks: `late` from the 6th on, and the first 5 more.
        let silent = |ticks: &[(u64, Vec<u32>)]| -> Vec<(u64, Vec<u32>)> {
            ticks.iter().map(|(k, c)| (*k, vec![0; c.len()])).collect()
        };
        let n = t.ticks.len();
        let mut ticks = silent(&t.ticks[..n * 6 / 10]);
        ticks.extend_from_slice(&t.ticks[n * 6 / 10..]);
        let mostly = Trace { ticks: ticks.clone(), ..t.clone() };
        assert!(audio_gap(c, Some(&mostly)).unwrap().contains("first 10 measured ticks"));
        ticks[..5].clone_from_slice(&t.ticks[..5]);
        let stalled = Trace { ticks, ..t.clone() };
        assert!(audio_gap(c, Some(&stalled)).unwrap().contains("in 40 % of the measured ticks"));
        assert_eq!(audio_gap(catalog::case(1).unwrap(), Some(&stalled)), None, "no audio in 1");
    }
}
