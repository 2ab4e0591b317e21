//! The life-cycle state machine: every input in every state, the restart policies, the
//! crash-loop back-off, and commands that arrive while earlier work is under way.

use control::state::{AfterCrash, RestartWhy, StopWhy};
use control::{Action, Command, CrashLoop, Event, Input, Lifecycle, Policies, Policy, State};

use Action::{
    BeginReset, BuildAndStart, PauseVcpus, Report, ResumeVcpus, ScrubAndRelease, TearDown,
};

/// `now` counts milliseconds in these tests.
const HZ: u64 = 1000;

fn vm_with(policies: Policies) -> Lifecycle {
    Lifecycle::new("vm1", policies, CrashLoop::new(HZ))
}

fn ok(vm: &mut Lifecycle, input: Input, now: u64) -> Vec<Action> {
    let what = format!("{input:?} in {}", vm.state());
    vm.handle(input, now).unwrap_or_else(|e| panic!("{what}: refused: {e}"))
}

fn cmd(c: Command) -> Input {
    Input::Command(c)
}

/// A VM brought to `state` by the ordinary path, with default policies.
fn in_state(state: State) -> Lifecycle {
    let mut vm = vm_with(Policies::default());
    let path: &[Input] = match state {
        State::Stopped => &[],
        State::Starting => &[cmd(Command::Start)],
        State::Running => &[cmd(Command::Start), Input::Started],
        State::Paused => &[cmd(Command::Start), Input::Started, cmd(Command::Pause)],
        State::Resetting => &[cmd(Command::Start), Input::Started, cmd(Command::Restart)],
        State::Stopping => &[cmd(Command::Start), Input::Started, cmd(Command::Stop)],
    };
    for input in path {
        ok(&mut vm, input.clone(), 0);
    }
    assert_eq!(vm.state(), state);
    vm
}

enum Expect {
    To(State, Vec<Action>),
    Refused(&'static str),
}

use Expect::{Refused, To};

fn stop_actions() -> Vec<Action> {
    vec![TearDown, ScrubAndRelease]
}

/// Every command in every state: the one table of who answers what.
fn command_table() -> Vec<(State, Command, Expect)> {
    use Command::*;
    use State::*;
    vec![
        (Stopped, Start, To(Starting, vec![BuildAndStart])),
        (Stopped, Stop, Refused("vm1 is already stopped")),
        (Stopped, Restart, Refused("vm1 is stopped; `start vm1` starts it")),
        (Stopped, Pause, Refused("vm1 is stopped; `start vm1` starts it")),
        (Stopped, Resume, Refused("vm1 is stopped; `start vm1` starts it")),
        (Starting, Start, Refused("vm1 is already starting")),
        // Queued: taken when the start completes.
        (Starting, Stop, To(Starting, vec![])),
        (Starting, Restart, Refused("vm1 is starting; wait for it to start")),
        (Starting, Pause, Refused("vm1 is starting; wait for it to start")),
        (Starting, Resume, Refused("vm1 is starting; wait for it to start")),
        (Running, Start, Refused("vm1 is already running")),
        (Running, Stop, To(Stopping, stop_actions())),
        (Running, Restart, To(Resetting, vec![BeginReset])),
        (Running, Pause, To(Paused, vec![PauseVcpus, Report(Event::Paused)])),
        (Running, Resume, Refused("vm1 is not paused: it is running")),
        (Paused, Start, Refused("vm1 is paused; `resume vm1` continues it")),
        (Paused, Stop, To(Stopping, stop_actions())),
        (Paused, Restart, To(Resetting, vec![BeginReset])),
        (Paused, Pause, Refused("vm1 is already paused")),
        (Paused, Resume, To(Running, vec![ResumeVcpus, Report(Event::Resumed)])),
        (Resetting, Start, Refused("vm1 is resetting; wait for its reset to end")),
        (Resetting, Stop, To(Stopping, stop_actions())),
        (Resetting, Restart, Refused("vm1 is resetting; wait for its reset to end")),
        (Resetting, Pause, Refused("vm1 is resetting; wait for its reset to end")),
        (Resetting, Resume, Refused("vm1 is resetting; wait for its reset to end")),
        (Stopping, Start, Refused("vm1 is stopping; wait for it to stop")),
        (Stopping, Stop, Refused("vm1 is already stopping")),
        (Stopping, Restart, Refused("vm1 is stopping; wait for it to stop")),
        (Stopping, Pause, Refused("vm1 is stopping; wait for it to stop")),
        (Stopping, Resume, Refused("vm1 is stopping; wait for it to stop")),
    ]
}

const UNEXPECTED: &str = "a monitor bug";

/// Every other input in every state, with the default policies.
fn event_table() -> Vec<(State, Input, Expect)> {
    use Input::*;
    use State::*;
    let crash = || Crash("data abort at 0x0".into());
    let crashed =
        || Report(Event::Crashed { reason: "data abort at 0x0".into(), restart_in_ms: None });
    let failed = || StartFailed("64 MiB missing".into());
    let mut table = Vec::new();
    for state in State::ALL {
        let (power_off, reboot, crashed_to) = match state {
            Running | Paused => (
                To(Stopping, stop_actions()),
                To(Resetting, vec![BeginReset]),
                To(Stopping, vec![crashed(), TearDown, ScrubAndRelease]),
            ),
            Resetting => (
                To(Resetting, vec![]),
                To(Resetting, vec![]),
                To(Stopping, vec![crashed(), TearDown, ScrubAndRelease]),
            ),
            // Late or early news: dropped.
            _ => (To(state, vec![]), To(state, vec![]), To(state, vec![])),
        };
        table.push((state, PowerOff, power_off));
        table.push((state, Reboot, reboot));
        table.push((state, crash(), crashed_to));
        let done = |s, to: Expect| if state == s { to } else { Refused(UNEXPECTED) };
        table.push((state, Started, done(Starting, To(Running, vec![Report(Event::Started)]))));
        table.push((
            state,
            failed(),
            done(
                Starting,
                To(
                    Stopped,
                    vec![Report(Event::Stopped(StopWhy::StartFailed("64 MiB missing".into())))],
                ),
            ),
        ));
        table.push((
            state,
            StopDone,
            done(Stopping, To(Stopped, vec![Report(Event::Stopped(StopWhy::Command))])),
        ));
        table.push((
            state,
            ResetDone,
            done(Resetting, To(Running, vec![Report(Event::Restarted(RestartWhy::Command))])),
        ));
    }
    table
}

fn check(state: State, input: Input, expect: &Expect) {
    let mut vm = in_state(state);
    let before = format!("{vm:?}");
    let what = format!("{input:?} in {state}");
    match (vm.handle(input, 0), expect) {
        (Ok(actions), To(to, want)) => {
            assert_eq!(vm.state(), *to, "{what}");
            assert_eq!(&actions, want, "{what}");
        }
        (Err(refusal), Refused(message)) => {
            let got = refusal.to_string();
            assert!(got.contains(message), "{what}: {got:?}, want {message:?}");
            // A refusal changes nothing at all.
            assert_eq!(format!("{vm:?}"), before, "{what}");
        }
        (Ok(actions), Refused(message)) => {
            panic!("{what}: accepted ({actions:?}, now {}), want {message:?}", vm.state())
        }
        (Err(refusal), To(to, _)) => panic!("{what}: refused ({refusal}), want {to}"),
    }
}

#[test]
fn every_command_in_every_state() {
    let table = command_table();
    for state in State::ALL {
        for command in Command::ALL {
            let rows = table.iter().filter(|(s, c, _)| (*s, *c) == (state, command)).count();
            assert_eq!(rows, 1, "{command:?} in {state}: {rows} rows");
        }
    }
    for (state, command, expect) in &table {
        check(*state, cmd(*command), expect);
    }
}

#[test]
fn every_event_and_completion_in_every_state() {
    let table = event_table();
    assert_eq!(table.len(), State::ALL.len() * 7);
    for (state, input, expect) in table {
        check(state, input, &expect);
    }
}

#[test]
fn refusals_name_the_state_and_the_fix() {
    let mut vm = in_state(State::Stopping);
    let e = vm.handle(cmd(Command::Start), 0).unwrap_err();
    assert_eq!(e.to_string(), "vm1 is stopping; wait for it to stop");
    let mut vm = in_state(State::Running);
    let e = vm.handle(Input::StopDone, 0).unwrap_err();
    assert_eq!(e.to_string(), "vm1: \"stop done\" while running (a monitor bug)");
}

#[test]
fn policies_decide_power_off_and_reboot() {
    let restart_all = Policies {
        on_poweroff: Policy::Restart,
        on_reboot: Policy::Restart,
        on_crash: Policy::Stop,
    };
    let mut vm = vm_with(restart_all);
    ok(&mut vm, cmd(Command::Start), 0);
    ok(&mut vm, Input::Started, 0);
    assert_eq!(ok(&mut vm, Input::PowerOff, 5), vec![BeginReset]);
    assert_eq!(
        ok(&mut vm, Input::ResetDone, 7),
        vec![Report(Event::Restarted(RestartWhy::PoweredOff))]
    );
    assert_eq!(ok(&mut vm, Input::Reboot, 9), vec![BeginReset]);
    assert_eq!(
        ok(&mut vm, Input::ResetDone, 10),
        vec![Report(Event::Restarted(RestartWhy::Rebooted))]
    );
    assert_eq!(vm.restarts(), 2);

    let stop_all =
        Policies { on_poweroff: Policy::Stop, on_reboot: Policy::Stop, on_crash: Policy::Stop };
    for (input, why) in [(Input::PowerOff, StopWhy::PoweredOff), (Input::Reboot, StopWhy::Rebooted)]
    {
        let mut vm = vm_with(stop_all);
        ok(&mut vm, cmd(Command::Start), 0);
        ok(&mut vm, Input::Started, 0);
        assert_eq!(ok(&mut vm, input, 1), stop_actions());
        assert_eq!(ok(&mut vm, Input::StopDone, 2), vec![Report(Event::Stopped(why))]);
        assert_eq!(vm.state(), State::Stopped);
        assert_eq!(vm.restarts(), 0);
    }
    assert_eq!(Policy::from_name("restart"), Some(Policy::Restart));
    assert_eq!(Policy::from_name("destroy"), None);
}

fn crash_restart_vm() -> Lifecycle {
    let mut vm = vm_with(Policies { on_crash: Policy::Restart, ..Policies::default() });
    ok(&mut vm, cmd(Command::Start), 0);
    ok(&mut vm, Input::Started, 0);
    vm
}

/// Crashes at `now`, lets the stop complete at once and the restart when due; returns the
/// delay announced, or the stop's event when it gave up.
fn crash_and_recover(vm: &mut Lifecycle, now: u64) -> Result<u64, Event> {
    let actions = ok(vm, Input::Crash("undefined instruction".into()), now);
    let Report(Event::Crashed { restart_in_ms, .. }) = &actions[0] else { panic!("{actions:?}") };
    assert_eq!(actions[1..], stop_actions());
    let done = ok(vm, Input::StopDone, now);
    let Some(delay) = *restart_in_ms else {
        let [Report(event)] = &done[..] else { panic!("{done:?}") };
        return Err(event.clone());
    };
    assert_eq!(done, vec![Action::WakeAt(now + delay)]);
    assert_eq!(vm.state(), State::Stopped);
    assert_eq!(vm.tick(now + delay - 1), vec![], "restarted early");
    assert_eq!(vm.tick(now + delay), vec![BuildAndStart]);
    assert_eq!(
        ok(vm, Input::Started, now + delay),
        vec![Report(Event::Restarted(RestartWhy::Crashed))]
    );
    Ok(delay)
}

#[test]
fn a_crash_loop_backs_off_then_stops_with_a_report() {
    let mut vm = crash_restart_vm();
    let mut now = 1000;
    let mut delays = Vec::new();
    let stopped = loop {
        match crash_and_recover(&mut vm, now) {
            Ok(delay) => {
                delays.push(delay);
                now += delay + 100;
            }
            Err(event) => break event,
        }
    };
    assert_eq!(delays, [1000, 2000, 4000, 8000]);
    assert_eq!(stopped, Event::Stopped(StopWhy::CrashLoop { crashes: 5, window_ms: 60_000 }));
    assert_eq!(
        format!("vm1 {}", stopped.describe("vm1")),
        "vm1 crashed 5 times in 60 s: stopped; fix the guest, then `start vm1`"
    );
    assert_eq!(vm.state(), State::Stopped);
    assert_eq!(vm.restart_at(), None);
    assert_eq!(vm.restarts(), 4);
    // The user's start is a fresh one: the first crash after it waits the first delay again.
    ok(&mut vm, cmd(Command::Start), now);
    ok(&mut vm, Input::Started, now);
    assert_eq!(crash_and_recover(&mut vm, now + 1), Ok(1000));
}

#[test]
fn crashes_further_apart_than_the_window_never_stop_the_vm() {
    let mut vm = crash_restart_vm();
    for i in 1..=20 {
        assert_eq!(crash_and_recover(&mut vm, i * 61_000), Ok(1000), "crash {i}");
    }
}

#[test]
fn the_back_off_is_a_pure_function_of_now() {
    let limits = CrashLoop { max_crashes: 100, ..CrashLoop::new(HZ) };
    let mut history = Vec::new();
    let delays: Vec<_> = (0..8)
        .map(|i| match limits.after_crash(&mut history, i) {
            AfterCrash::Restart { at, delay_ms } => {
                assert_eq!(at, i + delay_ms);
                delay_ms
            }
            give_up => panic!("{give_up:?}"),
        })
        .collect();
    assert_eq!(delays, [1000, 2000, 4000, 8000, 16_000, 16_000, 16_000, 16_000]);
    // In other units: 24 MHz ticks.
    let ticks = CrashLoop::new(24_000_000);
    assert_eq!(
        ticks.after_crash(&mut Vec::new(), 5),
        AfterCrash::Restart { at: 5 + 24_000_000, delay_ms: 1000 }
    );
    // Old crashes leave the window; a late `now` cannot overflow.
    let mut history = vec![0, 1, 2, 3];
    assert!(matches!(
        ticks.after_crash(&mut history, u64::MAX),
        AfterCrash::Restart { at: u64::MAX, .. }
    ));
    assert_eq!(history, [u64::MAX]);
    let once = CrashLoop { max_crashes: 1, ..CrashLoop::new(HZ) };
    assert_eq!(
        once.after_crash(&mut Vec::new(), 0),
        AfterCrash::GiveUp { crashes: 1, window_ms: 60_000 }
    );
}

#[test]
fn stop_cancels_a_restart_after_a_crash() {
    // While the crashed VM is still being torn down...
    let mut vm = crash_restart_vm();
    ok(&mut vm, Input::Crash("x".into()), 0);
    assert_eq!(ok(&mut vm, cmd(Command::Stop), 1), vec![]);
    assert_eq!(ok(&mut vm, Input::StopDone, 2), vec![Report(Event::Stopped(StopWhy::Command))]);
    assert_eq!(vm.tick(1_000_000), vec![]);
    // ...and while it waits for its back-off.
    let mut vm = crash_restart_vm();
    ok(&mut vm, Input::Crash("x".into()), 0);
    ok(&mut vm, Input::StopDone, 2);
    assert_eq!(vm.restart_at(), Some(1000));
    assert_eq!(ok(&mut vm, cmd(Command::Stop), 3), vec![]);
    assert_eq!(vm.tick(1_000_000), vec![]);
    assert_eq!(vm.state(), State::Stopped);
    // Once nothing is pending, stop is refused again.
    assert!(vm.handle(cmd(Command::Stop), 4).is_err());
}

#[test]
fn start_during_the_back_off_starts_now() {
    let mut vm = crash_restart_vm();
    ok(&mut vm, Input::Crash("x".into()), 0);
    ok(&mut vm, Input::StopDone, 2);
    assert_eq!(ok(&mut vm, cmd(Command::Start), 3), vec![BuildAndStart]);
    assert_eq!(vm.restart_at(), None);
    assert_eq!(ok(&mut vm, Input::Started, 4), vec![Report(Event::Started)]);
    assert_eq!(vm.tick(1_000_000), vec![]);
}

#[test]
fn stop_while_starting_is_queued_once() {
    let mut vm = in_state(State::Starting);
    assert_eq!(ok(&mut vm, cmd(Command::Stop), 0), vec![]);
    assert!(vm.stop_queued());
    let again = vm.handle(cmd(Command::Stop), 0).unwrap_err();
    assert_eq!(again.to_string(), "vm1 is starting and already stops as soon as it has started");
    // The start completes: no Started event, straight to the stop.
    assert_eq!(ok(&mut vm, Input::Started, 1), stop_actions());
    assert_eq!(ok(&mut vm, Input::StopDone, 2), vec![Report(Event::Stopped(StopWhy::Command))]);
    assert!(!vm.stop_queued());

    // A start that fails forgets the queued stop.
    let mut vm = in_state(State::Starting);
    ok(&mut vm, cmd(Command::Stop), 0);
    ok(&mut vm, Input::StartFailed("no RAM".into()), 1);
    assert_eq!(vm.state(), State::Stopped);
    assert!(!vm.stop_queued());
    ok(&mut vm, cmd(Command::Start), 2);
    assert_eq!(ok(&mut vm, Input::Started, 3), vec![Report(Event::Started)]);
}

#[test]
fn stop_during_a_reset_wins_and_a_late_reset_completion_is_refused() {
    let mut vm = in_state(State::Running);
    ok(&mut vm, Input::Reboot, 0);
    assert_eq!(ok(&mut vm, cmd(Command::Stop), 1), stop_actions());
    assert!(vm.handle(Input::ResetDone, 2).is_err());
    // Late guest news is dropped.
    assert_eq!(ok(&mut vm, Input::PowerOff, 2), vec![]);
    assert_eq!(ok(&mut vm, Input::StopDone, 3), vec![Report(Event::Stopped(StopWhy::Command))]);
    assert_eq!(vm.restarts(), 0);
}

#[test]
fn a_paused_vm_still_obeys_its_guests_last_words() {
    let mut vm = in_state(State::Paused);
    assert_eq!(ok(&mut vm, Input::PowerOff, 0), stop_actions());
    assert_eq!(ok(&mut vm, Input::StopDone, 1), vec![Report(Event::Stopped(StopWhy::PoweredOff))]);
}

#[test]
fn uptime_counts_from_the_last_start() {
    let mut vm = in_state(State::Stopped);
    assert_eq!(vm.uptime(10), None);
    ok(&mut vm, cmd(Command::Start), 10);
    assert_eq!(vm.uptime(20), None);
    ok(&mut vm, Input::Started, 100);
    assert_eq!(vm.uptime(150), Some(50));
    ok(&mut vm, cmd(Command::Pause), 160);
    assert_eq!(vm.uptime(170), Some(70));
    ok(&mut vm, cmd(Command::Restart), 180);
    ok(&mut vm, Input::ResetDone, 200);
    assert_eq!(vm.uptime(250), Some(50));
    ok(&mut vm, cmd(Command::Stop), 300);
    assert_eq!(vm.uptime(400), None);
}

/// A deterministic stream of inputs, as several issuers and the monitor would interleave them,
/// with the monitor's completions arriving late: every answer must be consistent.
#[test]
fn interleaved_commands_events_and_completions_stay_consistent() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for policies in [
        Policies::default(),
        Policies {
            on_poweroff: Policy::Restart,
            on_reboot: Policy::Stop,
            on_crash: Policy::Restart,
        },
    ] {
        let mut vm = vm_with(policies);
        let mut now = 0;
        let mut owed: Option<Input> = None;
        let mut wake: Option<u64> = None;
        let mut seen = std::collections::HashSet::new();
        let mut restarted_after_crash = false;
        for _ in 0..20_000 {
            now += next(500);
            let input = match next(10) {
                0..=4 => cmd(Command::ALL[next(5) as usize]),
                5 => [Input::PowerOff, Input::Reboot, Input::Crash("f".into())][next(3) as usize]
                    .clone(),
                6 => [Input::Started, Input::StopDone, Input::ResetDone][next(3) as usize].clone(),
                _ => match owed.take() {
                    Some(done) => done,
                    None => {
                        let actions = vm.tick(now);
                        if !actions.is_empty() {
                            assert_eq!(actions, vec![BuildAndStart]);
                            assert!(wake.is_some_and(|t| t <= now));
                            owed = Some(Input::Started);
                        }
                        continue;
                    }
                },
            };
            let before = vm.state();
            let Ok(actions) = vm.handle(input.clone(), now) else {
                assert_eq!(vm.state(), before);
                continue;
            };
            let after = vm.state();
            seen.insert(after);
            restarted_after_crash |=
                actions.contains(&Report(Event::Restarted(RestartWhy::Crashed)));
            for action in &actions {
                // Each piece of work is asked for exactly when its state begins.
                match action {
                    BuildAndStart => {
                        assert_eq!(after, State::Starting);
                        owed = Some(Input::Started);
                    }
                    BeginReset => {
                        assert_eq!(after, State::Resetting);
                        owed = Some(Input::ResetDone);
                    }
                    ScrubAndRelease => {
                        assert_eq!(after, State::Stopping);
                        owed = Some(Input::StopDone);
                    }
                    TearDown => assert_eq!(after, State::Stopping),
                    PauseVcpus => assert_eq!((before, after), (State::Running, State::Paused)),
                    ResumeVcpus => assert_eq!((before, after), (State::Paused, State::Running)),
                    Action::WakeAt(t) => {
                        assert!(*t > now && after == State::Stopped);
                        wake = Some(*t);
                    }
                    Report(_) => {}
                }
            }
            if matches!(after, State::Stopped | State::Running | State::Paused) {
                owed = None;
            }
            assert_eq!(
                vm.uptime(now).is_some(),
                matches!(after, State::Running | State::Paused | State::Resetting),
                "{before} -{input:?}-> {after}"
            );
            if vm.restart_at().is_some() {
                assert!(matches!(after, State::Stopped | State::Stopping));
            }
        }
        assert_eq!(seen.len(), State::ALL.len(), "states reached: {seen:?}");
        assert_eq!(restarted_after_crash, policies.on_crash == Policy::Restart);
    }
}

#[test]
fn a_users_start_forgets_earlier_crashes() {
    let mut vm = crash_restart_vm();
    for (now, delay) in [(10, 1000), (2000, 2000), (5000, 4000)] {
        assert_eq!(crash_and_recover(&mut vm, now), Ok(delay));
    }
    ok(&mut vm, cmd(Command::Stop), 10_000);
    ok(&mut vm, Input::StopDone, 10_001);
    ok(&mut vm, cmd(Command::Start), 10_002);
    ok(&mut vm, Input::Started, 10_003);
    assert_eq!(crash_and_recover(&mut vm, 10_004), Ok(1000));
}

#[test]
fn a_vm_that_does_not_fit_says_how_much_is_missing() {
    let no_room = control::NoRoom { vm: "vm1", need: 256 << 20, free: (192 << 20) + 4096 };
    assert_eq!(
        no_room.to_string(),
        "vm1 needs 256 MiB of RAM and 192 MiB are free: 64 MiB missing; stop another VM first"
    );
}
