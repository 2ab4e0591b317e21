//! The host's side of the uplink workloads (`uplink-stream`, `uplink-rr`): a client on the host
//! reaches servers in the guest through QEMU's user network and its `hostfwd`, which are the
//! same natively and under armhv (under armhv the guest's NIC is on a network whose uplink is
//! the machine's NIC).
//!
//! The guest drives: for each repetition it prints
//!
//! ```text
//! armhv-bench: host uplink-stream rep=1 port=5301 ctl=5300 seconds=5 size=64
//! ```
//!
//! and waits. The client here runs against guest port `port` for `seconds`, then sends its
//! figures (`mbit_s=... bytes=...`, or `error ...`) to guest port `ctl`; the guest prints them as
//! its `result` (or `error`) line, so the figures reach the results the way every workload's do.
//! Every server in the guest greets a connection with one byte, `R`: QEMU's forwarder accepts a
//! host connection before it knows whether anything listens in the guest.
//!
//! The figures are the machine's instructions per MiB or per round trip (the cost runs,
//! `catalog::Mode::Cost`): QEMU's count ([`crate::qmp`]) read once the guest's server has
//! started and is idle, and again once it has ended. The host's own clock gives Mbit/s and µs
//! beside them, which depend on how busy the host is.
//!
//! The guest's disk workloads are measured the same way, in windows the guest marks on its
//! console (`armhv-bench --marks`):
//!
//! ```text
//! armhv-bench: mark open blk-write rep=1
//! armhv-bench: mark close blk-write rep=1
//! ```
//!
//! after each of which it sleeps, so that the count is read from an idle machine.

use crate::parse::split_vm_tag;
use crate::qmp::{Counter, Qmp};
use anyhow::{Context, Result, anyhow, bail};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The stream's writes: 128 KiB, iperf3's default for TCP.
const STREAM_BLOCK: usize = 128 << 10;
/// Round trips not counted at the start of `uplink-rr` (the connection's first exchanges).
const RR_WARMUP: usize = 10;
/// The pause between two round trips of `uplink-rr`: each request then finds the guest idle
/// and the previous exchange settled, so that every round trip takes the same path. QEMU's
/// user network acknowledges the guest's echo 2 ms later (libslirp's fast timer) unless the
/// next request carries the acknowledgement first: back to back, or with a 1 ms pause that the
/// host's scheduling sometimes stretched past 2 ms, some round trips had that lone
/// acknowledgement and some did not, and the instructions per round trip varied by up to 10 %
/// between repetitions. After 5 ms it has always come. The pause is idle time: it costs the
/// machine no instructions.
const RR_PAUSE: Duration = Duration::from_millis(5);
/// How long a server in the guest may take to answer a connection with its greeting.
const GREETING_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one read or write may block before the guest counts as gone.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// One repetition the guest asks the host to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub workload: String,
    pub rep: u32,
    /// The guest ports of the server and of the verdict's listener.
    pub port: u16,
    pub ctl: u16,
    pub seconds: f64,
    /// `uplink-rr`'s message size in bytes.
    pub size: usize,
}

impl Request {
    /// Every request in `console`, in order; `vm` is the guest's tag under armhv (`None`
    /// natively). Lines that do not parse are skipped: the guest then times out waiting and
    /// reports the repetition as failed.
    pub fn all(console: &str, vm: Option<&str>) -> Vec<Self> {
        lines_after(console, vm, "armhv-bench: host ").filter_map(|t| Self::parse(t).ok()).collect()
    }

    /// `NAME rep=I port=P ctl=C seconds=S size=B`
    pub fn parse(text: &str) -> Result<Self> {
        let mut words = text.split_whitespace();
        let workload = words.next().ok_or_else(|| anyhow!("no workload"))?.to_owned();
        let mut get = |key: &str| -> Result<String> {
            let w = words.next().ok_or_else(|| anyhow!("no {key}="))?;
            w.strip_prefix(key)
                .and_then(|v| v.strip_prefix('='))
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("{w:?}: expected {key}="))
        };
        fn num<T: std::str::FromStr>(v: String, key: &str) -> Result<T> {
            v.parse().map_err(|_| anyhow!("{key}={v}: not a number of the expected kind"))
        }
        let rep = num(get("rep")?, "rep")?;
        let port = num(get("port")?, "port")?;
        let ctl = num(get("ctl")?, "ctl")?;
        let seconds: f64 = num(get("seconds")?, "seconds")?;
        let size = num(get("size")?, "size")?;
        if !(seconds > 0.0 && seconds <= 600.0) {
            bail!("seconds={seconds}: expected 0 < seconds <= 600");
        }
        Ok(Self { workload, rep, port, ctl, seconds, size })
    }
}

/// The bodies of `vm`'s console lines (untagged ones natively: `vm` is `None`) that start
/// with `prefix`, without it.
fn lines_after<'a>(
    console: &'a str,
    vm: Option<&'a str>,
    prefix: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    console.lines().filter_map(move |line| {
        let (tag, body) = split_vm_tag(line.trim_end_matches('\r'));
        (tag == vm.unwrap_or("")).then_some(())?;
        body.strip_prefix(prefix)
    })
}

/// A window the guest marks around a repetition (`armhv-bench --marks`).
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    pub open: bool,
    pub workload: String,
    pub rep: u32,
}

impl Mark {
    /// Every mark in `console`, in order (`vm` as for [`Request::all`]).
    pub fn all(console: &str, vm: Option<&str>) -> Vec<Self> {
        lines_after(console, vm, "armhv-bench: mark ").filter_map(|t| Self::parse(t).ok()).collect()
    }

    /// `open|close NAME rep=I`
    pub fn parse(text: &str) -> Result<Self> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let [side, workload, rep] = words[..] else { bail!("{text:?}: expected 3 words") };
        let open = match side {
            "open" => true,
            "close" => false,
            _ => bail!("{side:?}: expected open or close"),
        };
        let rep = rep.strip_prefix("rep=").and_then(|r| r.parse().ok());
        let rep = rep.ok_or_else(|| anyhow!("{text:?}: no rep=I"))?;
        Ok(Self { open, workload: workload.to_owned(), rep })
    }
}

/// The machine's instructions over one marked repetition, or why they are not known.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub workload: String,
    pub rep: u32,
    pub instructions: std::result::Result<u64, String>,
}

/// A stream's outcome: `bytes` written, the seconds from the greeting to the server's close
/// (which comes after it has read the last byte), and the machine's instructions over it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stream {
    pub bytes: u64,
    pub seconds: f64,
    pub instructions: u64,
}

impl Stream {
    pub fn mbit_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds / 1e6
    }

    pub fn instr_mib(&self) -> f64 {
        self.instructions as f64 / (self.bytes as f64 / (1 << 20) as f64)
    }

    /// The figures as the guest reports them (`instr_mib` first: the workload's figure).
    pub fn line(&self) -> String {
        format!(
            "instr_mib={:.0} mbit_s={:.1} bytes={} seconds={:.3} instructions={}",
            self.instr_mib(),
            self.mbit_s(),
            self.bytes,
            self.seconds,
            self.instructions
        )
    }
}

/// Round trips' percentiles on the host's clock, in microseconds (over those after the
/// warm-up), and the machine's instructions per round trip (over all).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoundTrips {
    pub instr_rt: f64,
    pub n: usize,
    pub mean: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p99: f64,
}

impl RoundTrips {
    /// From the round trips in µs; `None` when there are none.
    pub fn of(usec: &[f64], instr_rt: f64) -> Option<Self> {
        if usec.is_empty() {
            return None;
        }
        let mut v = usec.to_vec();
        v.sort_by(f64::total_cmp);
        // Nearest rank: the smallest value with at least p % of the values at or below it.
        let pct = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Self {
            instr_rt,
            n: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p25: pct(25.0),
            p50: pct(50.0),
            p75: pct(75.0),
            p99: pct(99.0),
        })
    }

    /// The figures as the guest reports them (`instr_rt` first: the workload's figure), with
    /// tcp-rr's keys (`usec` is the median).
    pub fn line(&self) -> String {
        format!(
            "instr_rt={:.0} usec={:.3} mean_usec={:.3} p25_usec={:.3} p75_usec={:.3} \
             p99_usec={:.3} n={}",
            self.instr_rt, self.p50, self.mean, self.p25, self.p75, self.p99, self.n
        )
    }
}

/// Connects to 127.0.0.1:`port` and waits for the server's greeting, retrying while the
/// forwarder closes the connection without one (nothing listening in the guest yet).
fn connect_greeted(port: u16) -> Result<TcpStream> {
    let start = Instant::now();
    loop {
        let attempt = (|| -> std::io::Result<Option<TcpStream>> {
            let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            let mut b = [0u8; 1];
            Ok((s.read(&mut b)? == 1 && b[0] == b'R').then_some(s))
        })();
        match attempt {
            Ok(Some(s)) => return Ok(s),
            _ if start.elapsed() < GREETING_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Ok(None) => bail!("127.0.0.1:{port}: closed without the server's greeting"),
            Err(e) => bail!("127.0.0.1:{port}: {e}"),
        }
    }
}

/// Reads until the peer closes.
fn read_to_close(s: &mut TcpStream) -> Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("waiting for the server to close"),
        }
    }
}

/// Writes to the sink at `port` for `seconds`, then half-closes and waits for the sink to
/// close: the sink has read everything by then, so bytes over the whole time is what it
/// received per second (slow start and the last buffers' drain included).
pub fn stream(port: u16, seconds: f64, counter: &mut dyn Counter) -> Result<Stream> {
    let mut s = connect_greeted(port)?;
    let first = counter.settled_icount(SETTLE_HOST)?.last;
    let block = vec![0x5a_u8; STREAM_BLOCK];
    let length = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < length {
        s.write_all(&block).context("streaming")?;
        bytes += block.len() as u64;
    }
    s.shutdown(Shutdown::Write)?;
    read_to_close(&mut s)?;
    let seconds = start.elapsed().as_secs_f64();
    let instructions = counter.settled_icount(SETTLE_HOST)?.first.saturating_sub(first);
    Ok(Stream { bytes, seconds, instructions })
}

/// Sends `size`-byte messages to the echo server at `port`, one at a time, each waiting for its
/// echo, for `seconds`; the round trips after the first [`RR_WARMUP`].
pub fn request_response(
    port: u16,
    seconds: f64,
    size: usize,
    counter: &mut dyn Counter,
) -> Result<RoundTrips> {
    let mut s = connect_greeted(port)?;
    s.set_nodelay(true)?;
    let first = counter.settled_icount(SETTLE_HOST)?.last;
    let msg: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut back = vec![0u8; size];
    let length = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut usec = Vec::new();
    let mut i = 0usize;
    while start.elapsed() < length {
        std::thread::sleep(RR_PAUSE);
        let t = Instant::now();
        s.write_all(&msg).context("sending a request")?;
        s.read_exact(&mut back).context("reading the echo")?;
        let rtt = t.elapsed();
        if back != msg {
            bail!("round trip {i}: the echo differs from the request");
        }
        if i >= RR_WARMUP {
            usec.push(rtt.as_secs_f64() * 1e6);
        }
        i += 1;
    }
    s.shutdown(Shutdown::Write)?;
    read_to_close(&mut s)?;
    let instructions = counter.settled_icount(SETTLE_HOST)?.first.saturating_sub(first);
    RoundTrips::of(&usec, instructions as f64 / i as f64)
        .ok_or_else(|| anyhow!("no round trip in {seconds} s"))
}

/// Gives the guest its figures on its verdict port: one line, then the guest closes.
fn send_verdict(port: u16, text: &str) -> Result<()> {
    let mut s = connect_greeted(port)?;
    s.write_all(text.as_bytes())?;
    s.write_all(b"\n")?;
    s.shutdown(Shutdown::Write)?;
    read_to_close(&mut s)
}

/// The verdict for a repetition's outcome: its figures, or `error` and one line of why.
pub fn verdict(outcome: &Result<String>) -> String {
    match outcome {
        Ok(line) => line.clone(),
        Err(e) => format!("error {}", format!("{e:#}").replace(['\n', '\r'], " ")),
    }
}

/// The machine's instruction count: QEMU's QMP socket, connected when first needed, or a
/// stand-in.
enum Source {
    None,
    Socket(PathBuf),
    Counter(Box<dyn Counter>),
}

/// Serves a run's requests and reads its marked windows as they appear on its console.
pub struct Host {
    /// The guest's tag under armhv; `None` natively.
    vm: Option<String>,
    /// (guest port, host port) of each `hostfwd`.
    fwd: Vec<(u16, u16)>,
    /// Requests served and marks read so far.
    served: usize,
    marks: usize,
    source: Source,
    /// The open window: its repetition and the count when it opened.
    open: Option<(String, u32, std::result::Result<u64, String>)>,
    windows: Vec<Window>,
}

/// How long the machine may take to become idle: after a guest's mark (it then waits for the
/// host's go), and around a host client's transfer (the guest's server starting or ending its
/// process).
const SETTLE_MARK: Duration = Duration::from_secs(1);
const SETTLE_HOST: Duration = Duration::from_secs(10);

/// How long QEMU may take to answer on its QMP socket.
const QMP_TIMEOUT: Duration = Duration::from_secs(30);

impl Host {
    /// `fwd`: (host port, guest port), as [`xtask::Uplink::hostfwd`] has them.
    pub fn new(vm: Option<&str>, fwd: &[(u16, u16)]) -> Self {
        Self {
            vm: vm.map(str::to_owned),
            fwd: fwd.iter().map(|&(h, g)| (g, h)).collect(),
            served: 0,
            marks: 0,
            source: Source::None,
            open: None,
            windows: Vec::new(),
        }
    }

    /// Counts instructions through QEMU's QMP socket at `path`.
    pub fn with_qmp(self, path: PathBuf) -> Self {
        Self { source: Source::Socket(path), ..self }
    }

    /// Counts instructions with `counter` (the host tests' stand-in for QEMU).
    pub fn with_counter(self, counter: Box<dyn Counter>) -> Self {
        Self { source: Source::Counter(counter), ..self }
    }

    fn counter(&mut self) -> Result<&mut dyn Counter> {
        if let Source::Socket(path) = &self.source {
            self.source = Source::Counter(Box::new(Qmp::connect(path, QMP_TIMEOUT)?));
        }
        match &mut self.source {
            Source::Counter(c) => Ok(c.as_mut()),
            _ => bail!(
                "the figures are the machine's instructions, and this run gives no QMP socket to \
                 count them (the bench's cost runs do)"
            ),
        }
    }

    /// The windows measured so far, in order.
    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// Reads the count at the marks on `console` not read yet; returns how many there were,
    /// each a line the guest waits for on its console before it goes on.
    fn read_marks(&mut self, console: &str) -> usize {
        let marks = Mark::all(console, self.vm.as_deref());
        let new = marks.len().saturating_sub(self.marks);
        for m in marks.into_iter().skip(self.marks) {
            self.marks += 1;
            let count = self.counter().and_then(|c| c.settled_icount(SETTLE_MARK));
            let count = count.map_err(|e| format!("{e:#}"));
            if m.open {
                self.open = Some((m.workload, m.rep, count.map(|c| c.last)));
                continue;
            }
            let count = count.map(|c| c.first);
            let instructions = match self.open.take() {
                Some((w, rep, first)) if w == m.workload && rep == m.rep => {
                    first.and_then(|a| count.map(|b| b.saturating_sub(a)))
                }
                _ => Err("a window closed that was not open".to_owned()),
            };
            self.windows.push(Window { workload: m.workload, rep: m.rep, instructions });
        }
        new
    }

    fn host_port(&self, guest: u16) -> Result<u16> {
        self.fwd.iter().find(|(g, _)| *g == guest).map(|(_, h)| *h).ok_or_else(|| {
            anyhow!("guest port {guest} is not forwarded (catalog::UPLINK_PORTS: {:?})", self.fwd)
        })
    }

    /// Reads the marks and runs the requests on `console` not seen yet, each to its end;
    /// returns the lines to send the guest: one per mark, its go.
    #[must_use]
    pub fn poll(&mut self, console: &str) -> usize {
        let goes = self.read_marks(console);
        let requests = Request::all(console, self.vm.as_deref());
        for r in requests.into_iter().skip(self.served) {
            self.served += 1;
            let outcome = self.host_port(r.port).and_then(|port| match r.workload.as_str() {
                "uplink-stream" => stream(port, r.seconds, self.counter()?).map(|s| s.line()),
                "uplink-rr" => {
                    request_response(port, r.seconds, r.size, self.counter()?).map(|t| t.line())
                }
                other => Err(anyhow!("the host has no client for {other:?}")),
            });
            let text = verdict(&outcome);
            eprintln!("bench:   host client, {} rep {}: {text}", r.workload, r.rep);
            if let Err(e) = self.host_port(r.ctl).and_then(|port| send_verdict(port, &text)) {
                // The guest's wait for it times out and reports the repetition as failed.
                eprintln!("bench:   could not give the guest its figures: {e:#}");
            }
        }
        goes
    }
}
