//! VMs managed while armhv runs (issue 18): the hardware-independent core.
//!
//! `vmm::manage` feeds this state machine and carries out its actions; the EL2 binary's console
//! and the control VMs' channels speak its command language. Dependencies point one way: this
//! crate knows nothing of `vmm`.
//!
//! * [`state`]: one VM's life cycle as a pure state machine. Commands, the guest's own power
//!   events, faults and the monitor's completions go in, with the time (`now`, in the
//!   monitor's units); a new state and the [`Action`]s the monitor must take come out, or a
//!   [`Refusal`] that says why and what to do. The restart policies (`on_poweroff`,
//!   `on_reboot`, `on_crash`: [`Policies`], defined by `vmconfig` with the rest of a VM's
//!   config and re-exported here) and the crash-loop back-off are applied here.
//! * [`command`]: the command language the console and a control VM share, its parser for
//!   untrusted bytes (bounded, ASCII, names as in configs), and what a control VM may do.
//! * [`reply`]: replies and events as one JSON object per line, for the control channel.
//! * [`editor`]: the console's command line, opened with a Ctrl-A key: a line editor fed one
//!   byte at a time, with a history and tab completion of commands, VM names and log levels.
//!
//! A line from a control VM, end to end:
//!
//! ```
//! use control::reply::{Reply, write_reply};
//! use control::{Action, CrashLoop, Input, Issuer, Lifecycle, Policies, Request, parse};
//! use control::command::authorize;
//!
//! let mut vm1 = Lifecycle::new("vm1", Policies::default(), CrashLoop::new(1000));
//! let request = parse(b"start vm1\n").unwrap();
//! authorize(&request, Issuer::ControlVm("ctl")).unwrap();
//! let Request::Vm(verb, "vm1") = request else { unreachable!() };
//! let actions = vm1.handle(Input::Command(verb.command().unwrap()), 0).unwrap();
//! assert_eq!(actions, [Action::BuildAndStart]);
//!
//! // A second start, before the first has completed, is refused and changes nothing.
//! let refusal = vm1.handle(Input::Command(verb.command().unwrap()), 1).unwrap_err();
//! let mut line = String::new();
//! write_reply(&mut line, &Reply::Error(&refusal)).unwrap();
//! assert_eq!(line, "{\"ok\":false,\"error\":\"vm1 is already starting\"}\n");
//! ```
//!
//! `no_std` + `alloc`, tested on the host (`cargo test -p control`), fuzzed by
//! `fuzz/fuzz_targets/control_command.rs` and `control_editor.rs`. The states and their
//! transitions are tabled in `docs/design.md`, "VM lifecycle: states and commands".
#![no_std]

extern crate alloc;

pub mod command;
pub mod editor;
pub mod reply;
pub mod state;

pub use command::{Issuer, LogLevel, ParseError, Request, Verb, parse};
pub use state::{
    Action, AfterCrash, Command, CrashLoop, Event, Input, Lifecycle, NoRoom, Policies, Policy,
    Refusal, RestartWhy, State, StopWhy,
};
