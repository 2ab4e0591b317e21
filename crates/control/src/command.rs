//! The command language of the console and of a control VM, one command a line:
//!
//! ```text
//! list                 every VM: name, state, vCPUs and their CPUs, memory, uptime, exits, restarts
//! start NAME           build and start a stopped VM
//! stop NAME            stop it now (forced: the guest is not asked)
//! restart NAME         reset it in place
//! pause NAME           keep its vCPUs out of their guests
//! resume NAME          let them in again
//! info NAME            one VM, in detail
//! log LEVEL            armhv's log level: error, warn, info, debug or trace
//! help                 this list
//! ```
//!
//! A control VM's lines are untrusted: [`parse`] takes bytes, bounds them ([`MAX_LINE`]),
//! accepts printable ASCII only and names VMs by the configs' rule (`vmconfig::valid_name`).
//! Every error names the problem and the fix, and a refused line changes nothing.

use alloc::string::String;
use core::fmt;

use crate::state::Command;

/// Longest line accepted, in bytes, its line ending included.
pub const MAX_LINE: usize = 256;

/// What [`Request::Help`] shows.
pub const HELP: &str = "list | start NAME | stop NAME | restart NAME | pause NAME | resume NAME \
                        | info NAME | log error|warn|info|debug|trace | help";

/// armhv's log levels, as the `log` crate's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub const ALL: [Self; 5] = [Self::Error, Self::Warn, Self::Info, Self::Debug, Self::Trace];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warn => "warn",
            Self::Info => "info",
            Self::Debug => "debug",
            Self::Trace => "trace",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// The commands that name one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    Start,
    Stop,
    Restart,
    Pause,
    Resume,
    Info,
}

impl Verb {
    pub const ALL: [Self; 6] =
        [Self::Start, Self::Stop, Self::Restart, Self::Pause, Self::Resume, Self::Info];

    /// The word: the state machine command's, or `info`.
    pub const fn name(self) -> &'static str {
        match self.command() {
            Some(command) => command.name(),
            None => "info",
        }
    }

    /// The state machine's command, for the verbs that change a VM's state.
    pub const fn command(self) -> Option<Command> {
        match self {
            Self::Start => Some(Command::Start),
            Self::Stop => Some(Command::Stop),
            Self::Restart => Some(Command::Restart),
            Self::Pause => Some(Command::Pause),
            Self::Resume => Some(Command::Resume),
            Self::Info => None,
        }
    }
}

/// A parsed line; names borrow from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    List,
    Help,
    Log(LogLevel),
    Vm(Verb, &'a str),
}

/// Why a line is not a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The line's length in bytes.
    TooLong(usize),
    /// The offset of a byte that is not ASCII.
    NotAscii(usize),
    /// The offset of a control character (other than a tab, or the line ending).
    Control(usize),
    Empty,
    Unknown(String),
    MissingName(Verb),
    BadName(String),
    /// Words after the command's last argument.
    Extra(&'static str, String),
    MissingLevel,
    BadLevel(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const LEVELS: &str = "error, warn, info, debug or trace";
        match self {
            Self::TooLong(n) => {
                write!(f, "the line is {n} bytes; a command has at most {MAX_LINE}")
            }
            Self::NotAscii(at) => {
                write!(f, "byte {at} is not ASCII; commands and VM names are plain ASCII")
            }
            Self::Control(at) => write!(
                f,
                "byte {at} is a control character; a command is printable ASCII words \
                 separated by spaces"
            ),
            Self::Empty => f.write_str("no command; `help` lists them"),
            Self::Unknown(word) => write!(
                f,
                "unknown command {word:?}; the commands are list, start, stop, restart, pause, \
                 resume, info, log and help"
            ),
            Self::MissingName(verb) => {
                write!(f, "`{0}` needs a VM name: `{0} NAME` (`list` shows them)", verb.name())
            }
            Self::BadName(name) => write!(
                f,
                "{name:?} is not a VM name; names are 1 to {} characters from a-z, 0-9, '_' \
                 and '-'",
                vmconfig::MAX_NAME_LEN
            ),
            Self::Extra(command, rest) => {
                write!(f, "too many words for `{command}`: remove {rest:?}")
            }
            Self::MissingLevel => write!(f, "`log` needs a level: {LEVELS}"),
            Self::BadLevel(level) => write!(f, "unknown log level {level:?}; use {LEVELS}"),
        }
    }
}

/// Parses one line (its `\n` or `\r\n` may be included).
pub fn parse(line: &[u8]) -> Result<Request<'_>, ParseError> {
    if line.len() > MAX_LINE {
        return Err(ParseError::TooLong(line.len()));
    }
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    for (at, &b) in body.iter().enumerate() {
        if !b.is_ascii() {
            return Err(ParseError::NotAscii(at));
        }
        if b.is_ascii_control() && b != b'\t' {
            return Err(ParseError::Control(at));
        }
    }
    // Checked above: ASCII only.
    let text = core::str::from_utf8(body).map_err(|e| ParseError::NotAscii(e.valid_up_to()))?;
    let mut words = text.split([' ', '\t']).filter(|w| !w.is_empty());
    let Some(first) = words.next() else {
        return Err(ParseError::Empty);
    };
    let (request, name) = match first {
        "list" => (Request::List, "list"),
        "help" => (Request::Help, "help"),
        "log" => {
            let level = words.next().ok_or(ParseError::MissingLevel)?;
            let level =
                LogLevel::from_name(level).ok_or_else(|| ParseError::BadLevel(level.into()))?;
            (Request::Log(level), "log")
        }
        word => {
            let verb = Verb::ALL
                .into_iter()
                .find(|v| v.name() == word)
                .ok_or_else(|| ParseError::Unknown(word.into()))?;
            let vm = words.next().ok_or(ParseError::MissingName(verb))?;
            if !vmconfig::valid_name(vm) {
                return Err(ParseError::BadName(vm.into()));
            }
            (Request::Vm(verb, vm), verb.name())
        }
    };
    match words.next() {
        Some(extra) => Err(ParseError::Extra(name, extra.into())),
        None => Ok(request),
    }
}

/// Where a command comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issuer<'a> {
    /// The armhv console: whoever holds the machine's UART may do anything.
    Console,
    /// The control VM of that name.
    ControlVm(&'a str),
}

/// Why a control VM may not do what it asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub vm: String,
    pub verb: Verb,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a control VM cannot {} itself ({}); it may only `restart {}`, or ask at armhv's \
             console",
            self.verb.name(),
            self.vm,
            self.vm
        )
    }
}

/// Whether `issuer` may make `request`. A control VM may do anything to the other VMs but only
/// restart itself (or read its `info`): stopping or pausing itself would leave nobody to undo
/// it. No command stops armhv itself (only the console's Ctrl-A q does), so a control VM
/// cannot either.
pub fn authorize(request: &Request<'_>, issuer: Issuer<'_>) -> Result<(), Denied> {
    match (request, issuer) {
        (Request::Vm(verb, vm), Issuer::ControlVm(me))
            if vm == &me && !matches!(verb, Verb::Restart | Verb::Info) =>
        {
            Err(Denied { vm: String::from(me), verb: *verb })
        }
        _ => Ok(()),
    }
}

/// A name that passed [`parse`] but names no VM of the package.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoSuchVm(pub String);

impl fmt::Display for NoSuchVm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no VM is named {:?}; `list` shows them", self.0)
    }
}

/// The index of VM `name` among `names` (the package's order).
pub fn find_vm<'a>(
    names: impl IntoIterator<Item = &'a str>,
    name: &str,
) -> Result<usize, NoSuchVm> {
    names.into_iter().position(|n| n == name).ok_or_else(|| NoSuchVm(String::from(name)))
}
