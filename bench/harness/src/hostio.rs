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

use crate::parse::split_vm_tag;
use anyhow::{Context, Result, anyhow, bail};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// The stream's writes: 128 KiB, iperf3's default for TCP.
const STREAM_BLOCK: usize = 128 << 10;
/// Round trips not counted at the start of `uplink-rr` (the connection's first exchanges).
const RR_WARMUP: usize = 10;
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
        console
            .lines()
            .filter_map(|line| {
                let (tag, body) = split_vm_tag(line.trim_end_matches('\r'));
                if tag != vm.unwrap_or("") {
                    return None;
                }
                Self::parse(body.strip_prefix("armhv-bench: host ")?).ok()
            })
            .collect()
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

/// A stream's outcome: `bytes` written, and the seconds from the greeting to the server's
/// close, which comes after it has read the last byte.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stream {
    pub bytes: u64,
    pub seconds: f64,
}

impl Stream {
    pub fn mbit_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds / 1e6
    }

    /// The figures as the guest reports them (`mbit_s` first: the workload's figure).
    pub fn line(&self) -> String {
        format!("mbit_s={:.1} bytes={} seconds={:.3}", self.mbit_s(), self.bytes, self.seconds)
    }
}

/// Round trips' percentiles, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoundTrips {
    pub n: usize,
    pub mean: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p99: f64,
}

impl RoundTrips {
    /// From the round trips in µs; `None` when there are none.
    pub fn of(usec: &[f64]) -> Option<Self> {
        if usec.is_empty() {
            return None;
        }
        let mut v = usec.to_vec();
        v.sort_by(f64::total_cmp);
        // Nearest rank: the smallest value with at least p % of the values at or below it.
        let pct = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Self {
            n: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p25: pct(25.0),
            p50: pct(50.0),
            p75: pct(75.0),
            p99: pct(99.0),
        })
    }

    /// The figures as the guest reports them, with tcp-rr's keys (`usec` is the median).
    pub fn line(&self) -> String {
        format!(
            "usec={:.3} mean_usec={:.3} p25_usec={:.3} p75_usec={:.3} p99_usec={:.3} n={}",
            self.p50, self.mean, self.p25, self.p75, self.p99, self.n
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
pub fn stream(port: u16, seconds: f64) -> Result<Stream> {
    let mut s = connect_greeted(port)?;
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
    Ok(Stream { bytes, seconds: start.elapsed().as_secs_f64() })
}

/// Sends `size`-byte messages to the echo server at `port`, one at a time, each waiting for its
/// echo, for `seconds`; the round trips after the first [`RR_WARMUP`].
pub fn request_response(port: u16, seconds: f64, size: usize) -> Result<RoundTrips> {
    let mut s = connect_greeted(port)?;
    s.set_nodelay(true)?;
    let msg: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut back = vec![0u8; size];
    let length = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut usec = Vec::new();
    let mut i = 0usize;
    while start.elapsed() < length {
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
    RoundTrips::of(&usec).ok_or_else(|| anyhow!("no round trip in {seconds} s"))
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

/// Serves a run's requests as they appear on its console.
pub struct Host {
    /// The guest's tag under armhv; `None` natively.
    vm: Option<String>,
    /// (guest port, host port) of each `hostfwd`.
    fwd: Vec<(u16, u16)>,
    /// Requests served so far.
    served: usize,
}

impl Host {
    /// `fwd`: (host port, guest port), as [`xtask::Uplink::hostfwd`] has them.
    pub fn new(vm: Option<&str>, fwd: &[(u16, u16)]) -> Self {
        Self {
            vm: vm.map(str::to_owned),
            fwd: fwd.iter().map(|&(h, g)| (g, h)).collect(),
            served: 0,
        }
    }

    fn host_port(&self, guest: u16) -> Result<u16> {
        self.fwd.iter().find(|(g, _)| *g == guest).map(|(_, h)| *h).ok_or_else(|| {
            anyhow!("guest port {guest} is not forwarded (catalog::UPLINK_PORTS: {:?})", self.fwd)
        })
    }

    /// Runs the requests on `console` not served yet, each to its end.
    pub fn poll(&mut self, console: &str) {
        let requests = Request::all(console, self.vm.as_deref());
        for r in requests.into_iter().skip(self.served) {
            self.served += 1;
            let outcome = self.host_port(r.port).and_then(|port| match r.workload.as_str() {
                "uplink-stream" => stream(port, r.seconds).map(|s| s.line()),
                "uplink-rr" => request_response(port, r.seconds, r.size).map(|t| t.line()),
                other => Err(anyhow!("the host has no client for {other:?}")),
            });
            let text = verdict(&outcome);
            eprintln!("bench:   host client, {} rep {}: {text}", r.workload, r.rep);
            if let Err(e) = self.host_port(r.ctl).and_then(|port| send_verdict(port, &text)) {
                // The guest's wait for it times out and reports the repetition as failed.
                eprintln!("bench:   could not give the guest its figures: {e:#}");
            }
        }
    }
}
