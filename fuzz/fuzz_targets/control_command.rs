//! Fuzzes the control channel: `control::parse` on arbitrary lines, and, for what parses, the
//! authorization, the VM lookup and three VMs' life-cycle state machines driven by the
//! commands, interleaved with guest events and the monitor's completions in any order.
//!
//! Input layout: one byte of flags (bit 0: `on_poweroff = restart`, bit 1: `on_reboot =
//! restart`, bit 2: `on_crash = restart`, bit 3: the lines come from the control VM `ctl`
//! rather than the console), then lines split at `\n`. A line `!` VM KIND is not a command
//! but the monitor's news for VM `0`..`2` (`vm0`, `vm1`, `ctl`): `s` Started, `f` StartFailed,
//! `d` StopDone, `r` ResetDone, `o` PowerOff, `b` Reboot, `c` Crash, `t` a tick. Every line
//! moves the clock on (1 kHz) by 100 times its length plus one.
//!
//! Checked besides "no panic": every reply and event is one line of one JSON object; a refused
//! command or completion changes nothing; each action is asked for in the state it belongs
//! to; a control VM never stops, pauses or starts itself; a queued stop only while starting,
//! a pending restart only while stopping or stopped.
#![no_main]

use control::command::{authorize, find_vm};
use control::reply::{Reply, VmSummary, write_event, write_reply};
use control::{
    Action, CrashLoop, Input, Issuer, Lifecycle, Policies, Policy, Request, State, Verb, parse,
};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 3] = ["vm0", "vm1", "ctl"];

fn one_json_line(s: &str) {
    let body = s.strip_suffix('\n').unwrap_or_else(|| panic!("no line end: {s:?}"));
    assert!(!body.contains(['\n', '\r']), "{s:?}");
    let value: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{s:?}: {e}"));
    assert!(value.is_object(), "{s:?}");
}

fn reply(r: &Reply<'_>) {
    let mut s = String::new();
    write_reply(&mut s, r).unwrap();
    one_json_line(&s);
}

fn summary(vm: &Lifecycle, now: u64) -> VmSummary<'_> {
    VmSummary {
        name: vm.name(),
        state: vm.state(),
        vcpus: 2,
        cpus: &[0, 1],
        memory_bytes: 1 << 28,
        uptime_ms: vm.uptime(now),
        exits: now,
        restarts: vm.restarts(),
        policies: vm.policies(),
    }
}

/// Feeds `input` to `vm` and checks the answer.
fn drive(vm: &mut Lifecycle, input: Input, now: u64) {
    let before = format!("{vm:?}");
    let from = vm.state();
    match vm.handle(input.clone(), now) {
        Ok(actions) => check_actions(vm, from, &actions, now),
        Err(refusal) => {
            assert_eq!(format!("{vm:?}"), before, "{input:?} refused ({refusal}) but changed");
            reply(&Reply::Error(&refusal));
        }
    }
}

fn check_actions(vm: &Lifecycle, from: State, actions: &[Action], now: u64) {
    let to = vm.state();
    for action in actions {
        match action {
            Action::BuildAndStart => assert_eq!(to, State::Starting),
            Action::BeginReset => assert_eq!(to, State::Resetting),
            Action::TearDown | Action::ScrubAndRelease => assert_eq!(to, State::Stopping),
            Action::PauseVcpus => assert_eq!((from, to), (State::Running, State::Paused)),
            Action::ResumeVcpus => assert_eq!((from, to), (State::Paused, State::Running)),
            Action::WakeAt(t) => assert!(*t > now && to == State::Stopped),
            Action::Report(event) => {
                let mut s = String::new();
                write_event(&mut s, vm.name(), event).unwrap();
                one_json_line(&s);
            }
        }
    }
    assert!(!vm.stop_queued() || to == State::Starting);
    assert!(vm.restart_at().is_none() || matches!(to, State::Stopped | State::Stopping));
    assert_eq!(
        vm.uptime(now).is_some(),
        matches!(to, State::Running | State::Paused | State::Resetting)
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let policy = |bit: u8| if flags & (1 << bit) != 0 { Policy::Restart } else { Policy::Stop };
    let policies = Policies { on_poweroff: policy(0), on_reboot: policy(1), on_crash: policy(2) };
    let issuer = if flags & 8 != 0 { Issuer::ControlVm("ctl") } else { Issuer::Console };
    let mut vms = NAMES.map(|name| Lifecycle::new(name, policies, CrashLoop::new(1000)));
    let mut now = 0u64;

    for line in rest.split(|&b| b == b'\n') {
        now += 100 * (line.len() as u64 + 1);
        if let [b'!', which, kind, ..] = *line {
            let vm = &mut vms[usize::from(which % 3)];
            let input = match kind {
                b's' => Input::Started,
                b'f' => Input::StartFailed("64 MiB of RAM missing".into()),
                b'd' => Input::StopDone,
                b'r' => Input::ResetDone,
                b'o' => Input::PowerOff,
                b'b' => Input::Reboot,
                b'c' => Input::Crash(String::from_utf8_lossy(&line[3..]).into_owned()),
                _ => {
                    let from = vm.state();
                    let actions = vm.tick(now);
                    check_actions(vm, from, &actions, now);
                    continue;
                }
            };
            drive(vm, input, now);
            continue;
        }
        let request = match parse(line) {
            Ok(request) => request,
            Err(e) => {
                reply(&Reply::Error(&e));
                continue;
            }
        };
        if let Err(denied) = authorize(&request, issuer) {
            assert!(
                matches!(request, Request::Vm(v, "ctl") if v != Verb::Restart && v != Verb::Info)
            );
            reply(&Reply::Error(&denied));
            continue;
        }
        match request {
            Request::List => {
                let list: Vec<_> = vms.iter().map(|vm| summary(vm, now)).collect();
                reply(&Reply::List(&list));
            }
            Request::Help => reply(&Reply::Help),
            Request::Log(_) => reply(&Reply::Ok),
            Request::Vm(verb, name) => {
                let i = match find_vm(NAMES, name) {
                    Ok(i) => i,
                    Err(e) => {
                        reply(&Reply::Error(&e));
                        continue;
                    }
                };
                let vm = &mut vms[i];
                match verb.command() {
                    None => reply(&Reply::Info(&summary(vm, now))),
                    Some(command) => {
                        if issuer != Issuer::Console && name == "ctl" {
                            assert_eq!(verb, Verb::Restart);
                        }
                        drive(vm, Input::Command(command), now);
                    }
                }
            }
        }
    }
});
