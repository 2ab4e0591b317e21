//! Replies and events: one line each, valid JSON, strings escaped.

use control::command::NoSuchVm;
use control::reply::{Reply, VmSummary, write_event, write_reply, write_string};
use control::state::{RestartWhy, StopWhy};
use control::{Event, Policies, State};
use serde_json::{Value, json};

fn line(reply: &Reply<'_>) -> String {
    let mut s = String::new();
    write_reply(&mut s, reply).unwrap();
    s
}

/// One line, ending in `\n`, holding one JSON object.
fn parsed(s: &str) -> Value {
    let body = s.strip_suffix('\n').unwrap_or_else(|| panic!("no line end: {s:?}"));
    assert!(!body.contains(['\n', '\r']), "{s:?}");
    let value: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{s:?}: {e}"));
    assert!(value.is_object(), "{s:?}");
    value
}

#[test]
fn strings_are_escaped() {
    let nasty = "a\"b\\c\nd\re\tf\u{0}\u{1}\u{1f} \u{7f}é€\u{2028}🦀}";
    let mut s = String::new();
    write_string(&mut s, nasty).unwrap();
    assert_eq!(s, "\"a\\\"b\\\\c\\nd\\re\\tf\\u0000\\u0001\\u001f \u{7f}é€\u{2028}🦀}\"");
    assert_eq!(serde_json::from_str::<String>(&s).unwrap(), nasty);
    for c in (0u8..0x80).map(char::from) {
        let mut s = String::new();
        write_string(&mut s, format!("x{c}y")).unwrap();
        assert_eq!(serde_json::from_str::<String>(&s).unwrap(), format!("x{c}y"));
    }
}

fn summary<'a>(name: &'a str, cpus: &'a [u32], state: State) -> VmSummary<'a> {
    VmSummary {
        name,
        state,
        vcpus: 2,
        cpus,
        memory_bytes: 256 << 20,
        uptime_ms: (state == State::Running).then_some(1234),
        exits: 99,
        restarts: 2,
        policies: Policies::default(),
    }
}

#[test]
fn replies_are_one_json_object_per_line() {
    assert_eq!(line(&Reply::Ok), "{\"ok\":true}\n");
    let vms = [summary("vm0", &[0, 1], State::Running), summary("vm1", &[], State::Stopped)];
    let list = parsed(&line(&Reply::List(&vms)));
    assert_eq!(
        list,
        json!({"ok": true, "vms": [
            {"name": "vm0", "state": "running", "vcpus": 2, "cpus": [0, 1],
             "memory_bytes": 268435456u64, "uptime_ms": 1234, "exits": 99, "restarts": 2,
             "on_poweroff": "stop", "on_reboot": "restart", "on_crash": "stop"},
            {"name": "vm1", "state": "stopped", "vcpus": 2, "cpus": [],
             "memory_bytes": 268435456u64, "uptime_ms": null, "exits": 99, "restarts": 2,
             "on_poweroff": "stop", "on_reboot": "restart", "on_crash": "stop"},
        ]})
    );
    assert_eq!(parsed(&line(&Reply::List(&[]))), json!({"ok": true, "vms": []}));
    let info = parsed(&line(&Reply::Info(&vms[0])));
    assert_eq!(info["vm"]["name"], "vm0");
    assert_eq!(
        parsed(&line(&Reply::Note("vm1 stops once started")))["message"],
        "vm1 stops once started"
    );
    assert!(parsed(&line(&Reply::Help))["help"].as_str().unwrap().contains("log error|warn"));
    let error = NoSuchVm("x\"}\n{\"ok\":true".into());
    let s = line(&Reply::Error(&error));
    assert_eq!(
        parsed(&s),
        json!({"ok": false, "error": "no VM is named \"x\\\"}\\n{\\\"ok\\\":true\"; `list` shows them"})
    );
}

#[test]
fn events_say_what_happened_and_why() {
    let cases = [
        (Event::Started, "started", "started"),
        (Event::Paused, "paused", "paused"),
        (Event::Resumed, "resumed", "resumed"),
        (Event::Restarted(RestartWhy::Command), "restarted", "restarted by a command"),
        (Event::Restarted(RestartWhy::Rebooted), "restarted", "reset by the guest"),
        (Event::Restarted(RestartWhy::PoweredOff), "restarted", "on_poweroff = restart"),
        (Event::Restarted(RestartWhy::Crashed), "restarted", "after a crash"),
        (
            Event::Crashed { reason: "EC 0x00 at \"pc\"".into(), restart_in_ms: Some(1500) },
            "crashed",
            "crashed: EC 0x00 at \"pc\"; restarting in 1.500 s",
        ),
        (Event::Crashed { reason: "x".into(), restart_in_ms: None }, "crashed", "crashed: x"),
        (Event::Stopped(StopWhy::Command), "stopped", "stopped by a command"),
        (Event::Stopped(StopWhy::PoweredOff), "stopped", "powered off by the guest"),
        (Event::Stopped(StopWhy::Rebooted), "stopped", "on_reboot = stop"),
        (Event::Stopped(StopWhy::Crashed("y".into())), "stopped", "stopped on a fault: y"),
        (
            Event::Stopped(StopWhy::CrashLoop { crashes: 5, window_ms: 60_000 }),
            "stopped",
            "crashed 5 times in 60 s: stopped; fix the guest, then `start vm1`",
        ),
        (
            Event::Stopped(StopWhy::StartFailed("64 MiB of RAM missing".into())),
            "stopped",
            "could not start: 64 MiB of RAM missing",
        ),
    ];
    for (event, name, why) in cases {
        let mut s = String::new();
        write_event(&mut s, "vm1", &event).unwrap();
        let value = parsed(&s);
        assert_eq!((&value["event"], &value["vm"]), (&json!(name), &json!("vm1")), "{event:?}");
        assert_eq!(value.as_object().unwrap().len(), 3, "{value}");
        let said = value["why"].as_str().unwrap();
        assert!(said.contains(why), "{event:?}: {said:?} lacks {why:?}");
    }
}
