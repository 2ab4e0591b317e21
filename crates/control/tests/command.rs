//! The command parser (accepted and refused lines, and what the errors say) and what a control
//! VM may do.

use control::command::{Denied, MAX_LINE, authorize, find_vm};
use control::{Issuer, LogLevel, ParseError, Request, Verb, parse};

#[test]
fn accepts_every_command() {
    let cases: &[(&[u8], Request<'_>)] = &[
        (b"list", Request::List),
        (b"help", Request::Help),
        (b"start vm0", Request::Vm(Verb::Start, "vm0")),
        (b"stop linux-1", Request::Vm(Verb::Stop, "linux-1")),
        (b"restart a_b", Request::Vm(Verb::Restart, "a_b")),
        (b"pause vm15", Request::Vm(Verb::Pause, "vm15")),
        (b"resume 0", Request::Vm(Verb::Resume, "0")),
        (b"info abcdefghijklmno", Request::Vm(Verb::Info, "abcdefghijklmno")),
        (b"log error", Request::Log(LogLevel::Error)),
        (b"log warn", Request::Log(LogLevel::Warn)),
        (b"log info", Request::Log(LogLevel::Info)),
        (b"log debug", Request::Log(LogLevel::Debug)),
        (b"log trace", Request::Log(LogLevel::Trace)),
        // Spaces and tabs anywhere, and the line ending, are forgiven.
        (b"  \tstop \t vm1  ", Request::Vm(Verb::Stop, "vm1")),
        (b"list\n", Request::List),
        (b"info vm1\r\n", Request::Vm(Verb::Info, "vm1")),
    ];
    for (line, want) in cases {
        assert_eq!(parse(line), Ok(*want), "{:?}", String::from_utf8_lossy(line));
    }
    for verb in Verb::ALL {
        let line = format!("{} vm7", verb.name());
        assert_eq!(parse(line.as_bytes()), Ok(Request::Vm(verb, "vm7")));
    }
}

#[test]
fn refuses_malformed_lines_and_says_how_to_fix_them() {
    let long_name = "a".repeat(16);
    let cases: Vec<(Vec<u8>, ParseError, &str)> = vec![
        (b"".to_vec(), ParseError::Empty, "`help` lists them"),
        (b" \t \r\n".to_vec(), ParseError::Empty, "no command"),
        (b"START vm0".to_vec(), ParseError::Unknown("START".into()), "the commands are list"),
        (
            b"destroy vm0".to_vec(),
            ParseError::Unknown("destroy".into()),
            "unknown command \"destroy\"",
        ),
        (b"stop".to_vec(), ParseError::MissingName(Verb::Stop), "`stop NAME`"),
        (b"info  ".to_vec(), ParseError::MissingName(Verb::Info), "`info` needs a VM name"),
        (b"start VM0".to_vec(), ParseError::BadName("VM0".into()), "a-z, 0-9, '_' and '-'"),
        (b"start vm.0".to_vec(), ParseError::BadName("vm.0".into()), "not a VM name"),
        (format!("stop {long_name}").into_bytes(), ParseError::BadName(long_name), "1 to 15"),
        (b"stop vm0 now".to_vec(), ParseError::Extra("stop", "now".into()), "remove \"now\""),
        (b"list all".to_vec(), ParseError::Extra("list", "all".into()), "`list`"),
        (b"log info x".to_vec(), ParseError::Extra("log", "x".into()), "remove"),
        (b"log".to_vec(), ParseError::MissingLevel, "error, warn, info, debug or trace"),
        (b"log verbose".to_vec(), ParseError::BadLevel("verbose".into()), "use error, warn"),
        (b"log INFO".to_vec(), ParseError::BadLevel("INFO".into()), "unknown log level"),
        ("start vmé".as_bytes().to_vec(), ParseError::NotAscii(8), "byte 8 is not ASCII"),
        (b"\xff\xfe".to_vec(), ParseError::NotAscii(0), "plain ASCII"),
        (b"start\0vm0".to_vec(), ParseError::Control(5), "byte 5 is a control character"),
        (b"\x1b[A".to_vec(), ParseError::Control(0), "printable ASCII"),
        (b"list\n\n".to_vec(), ParseError::Control(4), "control character"),
        (b"stop vm0\rx".to_vec(), ParseError::Control(8), "control character"),
        (b"list\x7f".to_vec(), ParseError::Control(4), "control character"),
    ];
    for (line, error, says) in cases {
        let shown = String::from_utf8_lossy(&line).into_owned();
        assert_eq!(parse(&line), Err(error), "{shown:?}");
        let message = parse(&line).unwrap_err().to_string();
        assert!(message.contains(says), "{shown:?}: {message:?} lacks {says:?}");
    }
}

#[test]
fn bounds_the_line_before_anything_else() {
    let mut line = b"list".to_vec();
    line.resize(MAX_LINE, b' ');
    assert_eq!(parse(&line), Ok(Request::List));
    line.push(b' ');
    assert_eq!(parse(&line), Err(ParseError::TooLong(MAX_LINE + 1)));
    // Even an oversized line of garbage is only "too long", never scanned.
    let huge = vec![0xffu8; 1 << 20];
    let e = parse(&huge).unwrap_err();
    assert_eq!(e, ParseError::TooLong(1 << 20));
    assert_eq!(e.to_string(), "the line is 1048576 bytes; a command has at most 256");
}

#[test]
fn a_control_vm_acts_on_itself_only_by_restart() {
    let me = Issuer::ControlVm("ctl");
    for verb in Verb::ALL {
        let own = Request::Vm(verb, "ctl");
        let allowed = matches!(verb, Verb::Restart | Verb::Info);
        assert_eq!(authorize(&own, me).is_ok(), allowed, "{verb:?} itself");
        // On the other VMs, and from the console, anything.
        assert_eq!(authorize(&Request::Vm(verb, "vm1"), me), Ok(()));
        assert_eq!(authorize(&own, Issuer::Console), Ok(()));
    }
    for request in [Request::List, Request::Help, Request::Log(LogLevel::Trace)] {
        assert_eq!(authorize(&request, me), Ok(()));
    }
    let denied = authorize(&Request::Vm(Verb::Stop, "ctl"), me).unwrap_err();
    assert_eq!(denied, Denied { vm: "ctl".into(), verb: Verb::Stop });
    assert_eq!(
        denied.to_string(),
        "a control VM cannot stop itself (ctl); it may only `restart ctl`, or ask at armhv's console"
    );
}

#[test]
fn names_resolve_to_the_packages_vms() {
    let names = ["vm0", "vm1", "ctl"];
    assert_eq!(find_vm(names, "ctl"), Ok(2));
    let e = find_vm(names, "vm9").unwrap_err();
    assert_eq!(e.to_string(), "no VM is named \"vm9\"; `list` shows them");
}
