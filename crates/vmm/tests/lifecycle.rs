//! VMs managed while armhv runs (issue 18), through the monitor on the fake hardware: a VM
//! defined but not started at boot, commands carried out at the top of a CPU's loop (start,
//! pause, resume, restart, stop, two at once), the restart policies on a crash (stop; restart
//! after a back-off; a crash loop that gives up), and the frames a life took coming back.

mod common;

use common::{Machine, esr, wfx};
use control::{Command, State};
use std::sync::Mutex;
use vmm::arch::fake::{self, Trap};
use vmm::cpu_loop::Step;
use vmm::manage::{self, From, Queued};

const CONFIG: &str = r#"
[[vm]]
name = "keeper"
vcpus = 1
cpu_affinity = [0]
memory_size = "16M"
kernel = "@testguest"

[[vm]]
name = "crashy"
vcpus = 1
cpu_affinity = [1]
memory_size = "16M"
kernel = "@testguest"
on_crash = "restart"

[[vm]]
name = "fragile"
vcpus = 1
cpu_affinity = [2]
memory_size = "16M"
kernel = "@testguest"

[[vm]]
name = "later"
vcpus = 1
cpu_affinity = [3]
memory_size = "16M"
kernel = "@testguest"
autostart = false
"#;

const CRASHY: usize = 1;
const FRAGILE: usize = 2;
const LATER: usize = 3;
/// The fake counter's frequency: 1 GHz.
const SECOND: u64 = 1_000_000_000;

static EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static REPLIES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn on_event(name: &str, event: &control::Event, _: Option<&vmm::vm::Vm>) {
    EVENTS.lock().unwrap().push(format!("{name}: {}", event.describe(name)));
}

fn on_reply(reply: manage::Reply<'_>) {
    let text = match reply {
        manage::Reply::Done(name, command) => format!("{} {name}: ok", command.name()),
        manage::Reply::Refused(why) => why.to_string(),
    };
    REPLIES.lock().unwrap().push(text);
}

fn events() -> Vec<String> {
    std::mem::take(&mut *EVENTS.lock().unwrap())
}

fn replies() -> Vec<String> {
    std::mem::take(&mut *REPLIES.lock().unwrap())
}

fn state(id: usize) -> State {
    manage::summary(id, |s| s.state).unwrap()
}

/// A trap of an exception class armhv has no handler for: it stops the VM on a fault.
fn crash() -> Trap {
    Trap::sync(esr(0x3f, 0), 0, 0)
}

/// Steps CPU `cpu` until it idles (a stop's zeroing done, nothing to run).
fn settle(m: &mut Machine, cpu: usize) {
    for _ in 0..1000 {
        if m.step(cpu, vec![]) == Step::Idled {
            return;
        }
    }
    panic!("CPU {cpu} never idled");
}

fn submit(command: Command, vm: usize) {
    manage::submit(Queued { command, vm, from: From::Console }).unwrap();
}

fn advance(ticks: u64) {
    fake::with(|f| f.now += ticks);
}

#[test]
fn vms_live_and_die_by_command_and_policy() {
    manage::set_sinks(manage::Sinks { reply: on_reply, event: on_event });
    let mut m = common::install(CONFIG);
    assert!(vmm::registry::get(LATER).is_none(), "later has autostart = false");
    assert_eq!(state(LATER), State::Stopped);
    assert_eq!(state(CRASHY), State::Running);
    events();

    commands_run_at_the_top_of_a_cpus_loop(&mut m);
    a_crash_stops_a_vm_whose_policy_is_stop(&mut m);
    a_crash_restarts_after_a_back_off_until_a_crash_loop(&mut m);
}

fn commands_run_at_the_top_of_a_cpus_loop(m: &mut Machine) {
    let frames = vmm::frames::used_frames();
    submit(Command::Start, LATER);
    assert!(vmm::registry::get(LATER).is_none(), "carried out at a CPU's next step, not before");
    // CPU 0 carries it out, then runs keeper, which waits for an interrupt from then on (CPU 0
    // then idles: it carries out the commands below).
    m.step(0, vec![wfx(false)]);
    assert_eq!(replies(), ["start later: ok"]);
    assert_eq!(events(), ["later: started"]);
    assert_eq!(state(LATER), State::Running);
    assert!(vmm::frames::used_frames() > frames, "its RAM is taken at its start");
    assert_eq!(m.step(3, vec![wfx(true)]), Step::Ran { vm: LATER, index: 0 });

    submit(Command::Pause, LATER);
    m.idle(0);
    assert!(m.vm("later").is_paused());
    assert_eq!(events(), ["later: paused"]);
    m.idle(3); // its vCPU stays out
    submit(Command::Start, LATER);
    submit(Command::Resume, LATER);
    m.idle(0);
    assert_eq!(
        replies(),
        ["pause later: ok", "later is paused; `resume later` continues it", "resume later: ok"]
    );
    assert_eq!(events(), ["later: resumed"]);
    assert_eq!(m.step(3, vec![wfx(true)]), Step::Ran { vm: LATER, index: 0 });

    submit(Command::Restart, LATER);
    m.idle(0);
    let later = m.vm("later");
    while later.is_resetting() {
        assert_eq!(m.step(3, vec![]), Step::Ran { vm: LATER, index: 0 }); // zeroes its RAM
    }
    drop(later);
    assert_eq!(m.step(3, vec![wfx(true)]), Step::Ran { vm: LATER, index: 0 }, "runs again");
    assert_eq!(events(), ["later: restarted by a command"]);
    assert_eq!(replies(), ["restart later: ok"]);
    assert_eq!(state(LATER), State::Running);

    // Two at once, carried out in order: a stop, then a start that finds it stopping.
    submit(Command::Stop, LATER);
    submit(Command::Start, LATER);
    m.idle(0);
    assert_eq!(replies(), ["stop later: ok", "later is stopping; wait for it to stop"]);
    settle(m, 3);
    let events = events();
    assert!(events[0].starts_with("later: stopped by a command"), "{events:?}");
    assert_eq!(state(LATER), State::Stopped);
    assert!(vmm::registry::get(LATER).is_none(), "its life has ended");
    assert_eq!(vmm::frames::used_frames(), frames, "its frames came back");
}

fn a_crash_stops_a_vm_whose_policy_is_stop(m: &mut Machine) {
    assert_eq!(m.step(2, vec![crash()]), Step::Ran { vm: FRAGILE, index: 0 });
    settle(m, 2);
    let events = events();
    assert!(events[0].starts_with("fragile: crashed: unexpected exit class 0x3f"), "{events:?}");
    assert!(events[1].starts_with("fragile: stopped on a fault: "), "{events:?}");
    assert_eq!(state(FRAGILE), State::Stopped);
}

fn a_crash_restarts_after_a_back_off_until_a_crash_loop(m: &mut Machine) {
    for (n, delay_s) in [(1, 1), (2, 2), (3, 4), (4, 8)] {
        assert_eq!(m.step(1, vec![crash()]), Step::Ran { vm: CRASHY, index: 0 }, "crash {n}");
        settle(m, 1);
        let crashed = events();
        assert!(
            crashed[0].ends_with(&format!("; restarting in {delay_s} s")),
            "crash {n}: {crashed:?}"
        );
        assert_eq!(state(CRASHY), State::Stopped, "crash {n}: waits out its back-off");
        advance(delay_s * SECOND - 1);
        m.idle(1);
        assert_eq!(state(CRASHY), State::Stopped, "crash {n}: restarted before its back-off");
        advance(1);
        m.idle(0); // the restart is due: the next CPU to look carries it out
        assert_eq!(events(), ["crashy: restarted after a crash (on_crash = restart)"]);
        assert_eq!(state(CRASHY), State::Running);
    }
    // The fifth crash within 60 s: stopped for good, with what to do.
    assert_eq!(m.step(1, vec![crash()]), Step::Ran { vm: CRASHY, index: 0 });
    settle(m, 1);
    let events = events();
    assert!(
        events[1].contains("crashed 5 times in 60 s: stopped; fix the guest, then `start crashy`"),
        "{events:?}"
    );
    advance(60 * SECOND);
    m.idle(0);
    assert_eq!(state(CRASHY), State::Stopped);
    assert!(!common::all_stopped(), "keeper still runs: armhv does not power off");
}
