//! QEMU's machine protocol (QMP) on a Unix socket, for the one figure only QEMU has: how many
//! instructions the whole machine has executed. Under `-icount` QEMU keeps that count whether
//! or not it records (`query-replay`'s `icount`); it is the sum over all CPUs and leaves out
//! the time an idle machine sleeps or skips. The cost runs of the workloads read it around each
//! measured window (`bench/README.md`, "Application workloads").

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long apart [`Qmp::idle_icount`] reads the count twice, and how far it may move between
/// them for the machine to count as idle: a machine whose guests sleep runs only their timers'
/// and armhv's ticks, some thousands of instructions in that time; a guest at work runs
/// millions (TCG runs about 10^8 instructions per host second).
pub const IDLE_GAP: Duration = Duration::from_millis(100);
pub const IDLE_DRIFT: u64 = 500_000;

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects to the socket QEMU serves at `path` (retrying while QEMU starts) and leaves
    /// the protocol's negotiation mode.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Self> {
        let start = Instant::now();
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(_) if start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => bail!("connecting to QEMU's QMP socket {}: {e}", path.display()),
            }
        };
        stream.set_read_timeout(Some(timeout))?;
        let writer = stream.try_clone()?;
        let mut qmp = Self { reader: BufReader::new(stream), writer };
        let greeting = qmp.message()?;
        if greeting.get("QMP").is_none() {
            bail!("QEMU's QMP socket greeted with {greeting}");
        }
        qmp.execute("qmp_capabilities")?;
        Ok(qmp)
    }

    /// The next message that is not an event.
    fn message(&mut self) -> Result<Value> {
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).context("reading from QEMU's QMP socket")? == 0 {
                bail!("QEMU closed its QMP socket");
            }
            let v: Value = serde_json::from_str(&line)
                .with_context(|| format!("QEMU's QMP socket sent {line:?}"))?;
            if v.get("event").is_none() {
                return Ok(v);
            }
        }
    }

    /// Runs `command` and returns its `return` value.
    fn execute(&mut self, command: &str) -> Result<Value> {
        writeln!(self.writer, "{{\"execute\":\"{command}\"}}")
            .context("writing to QEMU's QMP socket")?;
        let answer = self.message()?;
        answer.get("return").cloned().ok_or_else(|| anyhow!("QMP {command}: {answer}"))
    }
}

impl Counter for Qmp {
    fn icount(&mut self) -> Result<u64> {
        let r = self.execute("query-replay")?;
        r.get("icount").and_then(Value::as_u64).ok_or_else(|| anyhow!("query-replay gave {r}"))
    }
}

/// Two reads of an idle machine's count, [`IDLE_GAP`] apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled {
    pub first: u64,
    pub last: u64,
}

/// Where the instruction count comes from: QEMU, or a stand-in in the host tests.
pub trait Counter: Send {
    /// The instructions the machine has executed so far (QEMU must run with `-icount`).
    fn icount(&mut self) -> Result<u64>;

    /// The machine idle: reads [`IDLE_GAP`] apart until two differ by at most
    /// [`IDLE_DRIFT`], those two; an error if that takes longer than `within` (the guest at
    /// work: a window read then would lose or gain some of it). A window opens at the later
    /// of an opening pair and closes at the earlier of a closing one, so that as little idle
    /// time as possible, whose timer work counts, falls inside it.
    fn settled_icount(&mut self, within: Duration) -> Result<Settled> {
        let start = Instant::now();
        let mut a = self.icount()?;
        loop {
            std::thread::sleep(IDLE_GAP);
            let b = self.icount()?;
            match idle(a, b) {
                Ok(b) => return Ok(Settled { first: a, last: b }),
                Err(e) if start.elapsed() >= within => {
                    return Err(e.context(format!("not idle within {} ms", within.as_millis())));
                }
                Err(_) => a = b,
            }
        }
    }
}

/// `b`, if the machine was idle between reads `a` and `b`.
pub fn idle(a: u64, b: u64) -> Result<u64> {
    let moved = b.checked_sub(a).ok_or_else(|| anyhow!("the count went back from {a} to {b}"))?;
    if moved > IDLE_DRIFT {
        bail!(
            "the machine was not idle ({moved} instructions in {} ms, at most {IDLE_DRIFT}): the \
             guest was at work when the host read the count (a host too busy to answer within the \
             guest's pause, or the guest's own background work)",
            IDLE_GAP.as_millis()
        );
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts `step` more at every read.
    struct Steps(u64, u64);

    impl Counter for Steps {
        fn icount(&mut self) -> Result<u64> {
            self.0 += self.1;
            Ok(self.0)
        }
    }

    #[test]
    fn an_idle_machine_is_read_at_once_and_a_busy_one_refused() {
        let settled = Steps(0, 10).settled_icount(Duration::ZERO).unwrap();
        assert_eq!(settled, Settled { first: 10, last: 20 });
        let busy = Steps(0, IDLE_DRIFT + 1).settled_icount(Duration::ZERO).unwrap_err();
        assert!(format!("{busy:#}").contains("not idle within 0 ms"), "{busy:#}");
    }

    #[test]
    fn idle_takes_the_second_read_and_refuses_a_busy_machine() {
        assert_eq!(idle(1_000, 1_000 + IDLE_DRIFT).unwrap(), 1_000 + IDLE_DRIFT);
        let busy = idle(1_000, 1_001 + IDLE_DRIFT).unwrap_err().to_string();
        assert!(busy.contains("not idle"), "{busy}");
        assert!(idle(5, 4).is_err());
    }
}
