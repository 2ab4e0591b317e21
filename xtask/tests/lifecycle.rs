//! VMs managed while armhv runs (issue 18), from the console's command line (Ctrl-A c):
//! `autostart = false`, start, stop, pause, resume, restart, `log`, `on_poweroff = "restart"`,
//! `on_reboot = "stop"`, focus beyond Ctrl-A's digits, an
//! overcommitted start refused and then allowed, clear errors, and start/stop cycles after which
//! armhv holds exactly the heap and frames it held before them (configs/tests/lifecycle.toml).

use std::path::PathBuf;
use std::time::Duration;
use xtask::qemu::Run;
use xtask::{MachineSpec, image};

/// Generous: QEMU TCG on a loaded 2-core machine.
const TIMEOUT: Duration = Duration::from_secs(180);
/// Start/stop cycles of `worker`.
const CYCLES: usize = 100;

fn boot() -> Run {
    let cfg: PathBuf = xtask::root().join("configs/tests/lifecycle.toml");
    let img = image::build(&cfg, &MachineSpec::for_tests()).expect("building the boot image");
    let machine = MachineSpec { cpu: "cortex-a76".into(), ..MachineSpec::for_tests() };
    Run::start_config(&cfg, &img, &machine).expect("starting QEMU")
}

/// Types `line` at the open command line and waits for `reply` after it.
fn command(run: &mut Run, line: &str, reply: &str) -> String {
    let mark = run.mark();
    run.send(&format!("{line}\r")).unwrap();
    run.expect_since(mark, reply, TIMEOUT)
        .unwrap_or_else(|e| panic!("`{line}`: {e}\n{}", run.output_since(mark)));
    run.output_since(mark)
}

/// armhv's heap bytes and frames, as `list` shows them.
fn usage(run: &mut Run) -> (u64, u64) {
    let out = command(run, "list", " frames\n");
    let line = out.lines().find(|l| l.contains("armhv holds ")).expect("the usage line");
    let rest = &line[line.find("armhv holds ").unwrap() + 12..];
    let mut words = rest.split(' ');
    let heap = words.next().unwrap().parse().unwrap();
    let frames = rest.split(", ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    (heap, frames)
}

/// The row of `vm` in a `list` transcript.
fn row<'a>(out: &'a str, vm: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(&format!("console: {vm} ")))
        .unwrap_or_else(|| panic!("no row of {vm}:\n{out}"))
}

#[test]
fn vms_are_managed_from_the_console() {
    let mut run = boot();
    run.expect("[keeper] testguest: hello from EL1", TIMEOUT).unwrap();
    let boot = run.output();
    assert!(!boot.contains("worker: started"), "worker has autostart = false");
    run.send("\x01c").unwrap();
    run.expect("armhv> ", TIMEOUT).unwrap();

    let list = command(&mut run, "list", " frames\n");
    assert!(row(&list, "keeper").contains(" running "), "{list}");
    for vm in ["worker", "big1", "big2", "bye", "rebooter", "spare11"] {
        assert!(row(&list, vm).contains(" stopped "), "{list}");
    }

    // Start, pause, resume, restart and stop a VM defined but not started at boot.
    command(&mut run, "start worker", "[worker] testguest: hello from EL1");
    let list = command(&mut run, "list", " frames\n");
    assert!(row(&list, "worker").contains(" running "), "{list}");
    command(&mut run, "pause worker", "worker: paused");
    let list = command(&mut run, "list", " frames\n");
    assert!(row(&list, "worker").contains(" paused "), "{list}");
    let out = command(&mut run, "pause worker", "console: ");
    assert!(out.contains("worker is already paused"), "{out}");
    command(&mut run, "resume worker", "worker: resumed");
    let out = command(&mut run, "restart worker", "[worker] testguest: hello from EL1");
    assert!(out.contains("worker: restarted by a command"), "{out}");
    let info = command(&mut run, "info worker", " frames\n");
    assert!(row(&info, "worker").trim_end().ends_with(" 1"), "one restart: {info}");
    let out = command(&mut run, "stop worker", "; RAM zeroed");
    assert!(out.contains("worker: stopped by a command ("), "{out}");
    let out = command(&mut run, "resume worker", "console: ");
    assert!(out.contains("worker is stopped; `start worker` starts it"), "{out}");

    // Errors name the problem and the fix.
    let out = command(&mut run, "frobnicate", "console: ");
    assert!(out.contains("unknown command \"frobnicate\""), "{out}");
    let out = command(&mut run, "stop nosuch", "console: ");
    assert!(out.contains("no VM is named \"nosuch\"; `list` shows them"), "{out}");
    let out = command(&mut run, "start", "console: ");
    assert!(out.contains("`start` needs a VM name"), "{out}");

    // Overcommitted definitions: big2 cannot start while big1 runs, and can once it stops.
    command(&mut run, "start big1", "[big1] testguest: hello from EL1");
    let out = command(&mut run, "start big2", "console: ");
    assert!(out.contains("big2 needs 1200 MiB of RAM and "), "{out}");
    assert!(out.contains(" MiB missing; stop another VM first"), "{out}");
    assert!(!out.contains("big2: started"), "{out}");
    command(&mut run, "stop big1", "big1: stopped by a command");
    command(&mut run, "start big2", "[big2] testguest: hello from EL1");
    command(&mut run, "stop big2", "big2: stopped by a command");

    // on_poweroff = "restart": the guest powers off after its hello, and comes back each time.
    let out = command(&mut run, "start bye", "(on_poweroff = restart)");
    assert!(out.contains("bye: powered off by the guest, restarted"), "{out}");
    let mark = run.mark();
    run.expect_since(mark, "bye: powered off by the guest, restarted", TIMEOUT).unwrap();
    command(&mut run, "stop bye", "bye: stopped by a command");

    // on_reboot = "stop": SYSTEM_RESET ends it.
    command(&mut run, "start rebooter", "rebooter: reset by the guest: stopped (on_reboot = stop)");

    // Focus reaches every VM, by name or number, beyond Ctrl-A's digits.
    command(&mut run, "focus spare11", "console: input goes to vm 11 (spare11); it is stopped");
    command(&mut run, "focus 0", "console: input goes to vm 0 (keeper)");

    // `log LEVEL` sets what armhv logs (here, no more events), not whether it answers.
    command(&mut run, "log warn", "console: log level warn");
    let mark = run.mark();
    command(&mut run, "start spare6", "console: start spare6: ok");
    run.expect_since(mark, "[spare6] testguest: boot", TIMEOUT).unwrap();
    command(&mut run, "log info", "console: log level info");
    assert!(!run.output_since(mark).contains("spare6: started"), "{}", run.output_since(mark));
    command(&mut run, "stop spare6", "spare6: stopped by a command");

    // Start/stop cycles: the other VM keeps running, and what the cycles took comes back.
    let before = usage(&mut run);
    let cycles_began = run.mark();
    for i in 0..CYCLES {
        command(&mut run, "start worker", "worker: started");
        let out = command(&mut run, "stop worker", "worker: stopped by a command");
        assert!(!out.contains("could not start"), "cycle {i}: {out}");
    }
    let after = usage(&mut run);
    assert_eq!(after, before, "heap bytes and frames after {CYCLES} start/stop cycles");
    // keeper's heartbeats went on meanwhile (one each ~50 ms of its time).
    let beats = run.output_since(cycles_began).matches("[keeper] testguest: heartbeat").count();
    assert!(beats >= 10, "keeper beat {beats} times during {CYCLES} start/stop cycles");
    // Leaving the command line, Ctrl-A's own keys work as before.
    run.send("exit\r").unwrap();
    let mark = run.mark();
    run.send("\x01h").unwrap();
    run.expect_since(mark, "console: typing goes to the focused VM.", TIMEOUT).unwrap();

    run.send("\x01q").unwrap();
    run.expect("all VMs have stopped", TIMEOUT).unwrap();
    run.wait_exit(TIMEOUT).unwrap();
    let out = run.output();
    assert!(out.contains("keeper: stopped from the console"), "{out}");
    let end = out.lines().find(|l| l.contains("usage: end: ")).expect("the final usage line");
    assert!(end.ends_with(": back to the baseline"), "{end}");
}
