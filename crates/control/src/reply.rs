//! Replies and events on the control channel: one JSON object per line.
//!
//! ```text
//! {"ok":true}
//! {"ok":true,"vms":[{"name":"vm0","state":"running","vcpus":2,"cpus":[0,1],...}]}
//! {"ok":false,"error":"vm1 is stopping; wait for it to stop"}
//! {"event":"stopped","vm":"vm1","why":"powered off by the guest"}
//! ```
//!
//! Written straight into any [`fmt::Write`] (the channel's buffer), with no allocation: a small
//! encoder rather than a serde dependency for four shapes of object. Strings are escaped as
//! RFC 8259 requires (`"`, `\` and every control character), so that a VM name or a guest's
//! fault reason can never end the line or the string early.

use core::fmt::{self, Write};

use crate::state::{Event, Policies, State};

/// A writer that escapes what goes through it for the inside of a JSON string.
struct Escaped<'w, W: Write + ?Sized>(&'w mut W);

impl<W: Write + ?Sized> Write for Escaped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut plain = 0;
        for (i, c) in s.char_indices() {
            let escape = match c {
                '"' => "\\\"",
                '\\' => "\\\\",
                '\n' => "\\n",
                '\r' => "\\r",
                '\t' => "\\t",
                c if c < ' ' => "",
                _ => continue,
            };
            self.0.write_str(&s[plain..i])?;
            if escape.is_empty() {
                write!(self.0, "\\u{:04x}", u32::from(c))?;
            } else {
                self.0.write_str(escape)?;
            }
            plain = i + c.len_utf8();
        }
        self.0.write_str(&s[plain..])
    }
}

/// `value` as a JSON string, quotes included.
pub fn write_string<W: Write + ?Sized>(w: &mut W, value: impl fmt::Display) -> fmt::Result {
    w.write_char('"')?;
    write!(Escaped(w), "{value}")?;
    w.write_char('"')
}

/// What `list` and `info` show of a VM; the monitor fills it in.
#[derive(Clone, Copy, Debug)]
pub struct VmSummary<'a> {
    pub name: &'a str,
    pub state: State,
    pub vcpus: u8,
    /// The physical CPU of each vCPU (none while it is stopped).
    pub cpus: &'a [u32],
    /// Its configured RAM (held only while it is not stopped).
    pub memory_bytes: u64,
    /// `None` unless it is up (running or paused).
    pub uptime_ms: Option<u64>,
    pub exits: u64,
    pub restarts: u32,
    pub policies: Policies,
}

fn write_vm<W: Write + ?Sized>(w: &mut W, vm: &VmSummary<'_>) -> fmt::Result {
    w.write_str("{\"name\":")?;
    write_string(w, vm.name)?;
    write!(w, ",\"state\":\"{}\",\"vcpus\":{},\"cpus\":[", vm.state.name(), vm.vcpus)?;
    for (i, cpu) in vm.cpus.iter().enumerate() {
        if i > 0 {
            w.write_char(',')?;
        }
        write!(w, "{cpu}")?;
    }
    write!(w, "],\"memory_bytes\":{},\"uptime_ms\":", vm.memory_bytes)?;
    match vm.uptime_ms {
        Some(ms) => write!(w, "{ms}")?,
        None => w.write_str("null")?,
    }
    let p = vm.policies;
    write!(
        w,
        ",\"exits\":{},\"restarts\":{},\"on_poweroff\":\"{}\",\"on_reboot\":\"{}\",\
         \"on_crash\":\"{}\"}}",
        vm.exits,
        vm.restarts,
        p.on_poweroff.name(),
        p.on_reboot.name(),
        p.on_crash.name()
    )
}

/// The answer to one command.
#[derive(Clone, Copy)]
pub enum Reply<'a> {
    /// Done, with nothing to tell.
    Ok,
    /// Done; `message` says what follows (e.g. a queued stop).
    Note(&'a str),
    List(&'a [VmSummary<'a>]),
    Info(&'a VmSummary<'a>),
    Help,
    /// Refused (a parse error, a refusal of the state machine, a denial): nothing changed.
    Error(&'a dyn fmt::Display),
}

/// Writes `reply` as one line, `\n` included.
pub fn write_reply<W: Write + ?Sized>(w: &mut W, reply: &Reply<'_>) -> fmt::Result {
    match reply {
        Reply::Ok => w.write_str("{\"ok\":true")?,
        Reply::Note(message) => {
            w.write_str("{\"ok\":true,\"message\":")?;
            write_string(w, message)?;
        }
        Reply::List(vms) => {
            w.write_str("{\"ok\":true,\"vms\":[")?;
            for (i, vm) in vms.iter().enumerate() {
                if i > 0 {
                    w.write_char(',')?;
                }
                write_vm(w, vm)?;
            }
            w.write_char(']')?;
        }
        Reply::Info(vm) => {
            w.write_str("{\"ok\":true,\"vm\":")?;
            write_vm(w, vm)?;
        }
        Reply::Help => {
            w.write_str("{\"ok\":true,\"help\":")?;
            write_string(w, crate::command::HELP)?;
        }
        Reply::Error(error) => {
            w.write_str("{\"ok\":false,\"error\":")?;
            write_string(w, error)?;
        }
    }
    w.write_str("}\n")
}

/// Writes what happened to VM `vm` as one line, `\n` included.
pub fn write_event<W: Write + ?Sized>(w: &mut W, vm: &str, event: &Event) -> fmt::Result {
    write!(w, "{{\"event\":\"{}\",\"vm\":", event.name())?;
    write_string(w, vm)?;
    w.write_str(",\"why\":")?;
    write_string(w, event.describe(vm))?;
    w.write_str("}\n")
}
