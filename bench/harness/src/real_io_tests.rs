//! Host tests of the real-I/O workloads (issue 15): the host's clients and the guest's requests
//! (`hostio`), the targets, the devices taken from the config, the native command line, and
//! the report's section and chart.

use crate::catalog::{self, ARMHV, CLIENT_VM, Goal, NATIVE, UPLINK_PORTS};
use crate::charts::tests::labels;
use crate::hostio::{self, Host, Mark, Request, RoundTrips, Stream, Window};
use crate::model::Results;
use crate::qmp::Counter;
use crate::tests::{sample_results, workload_run};
use crate::{Options, charts, report, workloads};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener};
use std::sync::mpsc;

#[test]
fn the_guests_requests_are_read_from_its_console_lines() {
    let console = "\
[linux0] armhv-bench: host uplink-stream rep=1 port=5301 ctl=5300 seconds=5 size=64\n\
[linux1] armhv-bench: host uplink-rr rep=1 port=5302 ctl=5300 seconds=5 size=64\n\
armhv-bench: host uplink-rr rep=2 port=5302 ctl=5300 seconds=2.5 size=32\r\n\
[linux0] armhv-bench: host uplink-rr rep=2 port=5302 ctl=5300 seconds=0 size=64\n\
[linux0] armhv-bench: host uplink-rr rep=3 port=5302 ctl=5300 size=64\n\
[linux0] armhv-bench: host uplink-rr rep=4 port=5302 ctl=5300 seconds=1 size=64\n";
    let armhv = Request::all(console, Some(CLIENT_VM));
    let reps: Vec<(&str, u32)> = armhv.iter().map(|r| (r.workload.as_str(), r.rep)).collect();
    // Another VM's lines, and malformed ones (seconds=0, a missing key), are not requests.
    assert_eq!(reps, [("uplink-stream", 1), ("uplink-rr", 4)]);
    assert_eq!(
        (armhv[0].port, armhv[0].ctl, armhv[0].seconds, armhv[0].size),
        (5301, 5300, 5.0, 64)
    );
    let native = Request::all(console, None);
    assert_eq!(native.len(), 1);
    assert_eq!((native[0].rep, native[0].seconds, native[0].size), (2, 2.5, 32));
    for bad in ["uplink-rr", "uplink-rr rep=1 port=99999 ctl=1 seconds=1 size=1", "x rep=1 ctl=1"] {
        assert!(Request::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn figures_are_given_as_the_guest_reports_them() {
    let t = RoundTrips::of(&[400.0, 100.0, 300.0, 200.0], 41_000.4).unwrap();
    // Nearest rank.
    assert_eq!((t.n, t.p25, t.p50, t.p75, t.p99, t.mean), (4, 100.0, 200.0, 300.0, 400.0, 250.0));
    assert_eq!(
        t.line(),
        "instr_rt=41000 usec=200.000 mean_usec=250.000 p25_usec=100.000 p75_usec=300.000 \
         p99_usec=400.000 n=4"
    );
    let many: Vec<f64> = (1..=1000).map(f64::from).collect();
    let t = RoundTrips::of(&many, 1.0).unwrap();
    assert_eq!((t.p50, t.p99), (500.0, 990.0));
    assert!(RoundTrips::of(&[], 1.0).is_none());
    let s = Stream { bytes: 125_000_000, seconds: 2.0, instructions: 119_209_289 };
    assert_eq!(s.mbit_s(), 500.0);
    assert_eq!(
        s.line(),
        "instr_mib=1000000 mbit_s=500.0 bytes=125000000 seconds=2.000 instructions=119209289"
    );
    // The guest prints what it is given as one line: an error's too.
    assert_eq!(hostio::verdict(&Ok("usec=1".into())), "usec=1");
    let e = Err(anyhow::anyhow!("first\nsecond").context("outer"));
    assert_eq!(hostio::verdict(&e), "error outer: first second");
    // And the figures parse as the workload's result line, with the catalogue's metric.
    let line = format!(
        "armhv-bench: result uplink-rr rep=1 {}",
        RoundTrips::of(&[5.0], 7.0).unwrap().line()
    );
    let out = crate::parse::Output::parse(&line, None).unwrap();
    let metric = catalog::workload("uplink-rr").unwrap().metric;
    assert_eq!((out.samples[0].metric.as_str(), out.samples[0].value), (metric, 7.0));
    let line = format!("armhv-bench: result uplink-stream rep=1 {}", s.line());
    let out = crate::parse::Output::parse(&line, None).unwrap();
    assert_eq!(out.samples[0].metric, catalog::workload("uplink-stream").unwrap().metric);
}

/// A machine that runs `step` instructions between two reads of its count.
struct Ticking(u64, u64);

impl Counter for Ticking {
    fn icount(&mut self) -> anyhow::Result<u64> {
        self.0 += self.1;
        Ok(self.0)
    }
}

#[test]
fn the_guests_marks_are_read_from_its_console_lines() {
    let console = "\
[linux0] armhv-bench: mark open blk-write rep=1\n\
[linux1] armhv-bench: mark open blk-read rep=1\n\
armhv-bench: mark close mdisk-read rep=2\r\n\
[linux0] armhv-bench: mark shut blk-write rep=1\n\
[linux0] armhv-bench: mark close blk-write\n\
[linux0] armhv-bench: mark close blk-write rep=1\n";
    let armhv: Vec<(bool, String, u32)> = Mark::all(console, Some(CLIENT_VM))
        .into_iter()
        .map(|m| (m.open, m.workload, m.rep))
        .collect();
    assert_eq!(armhv, [(true, "blk-write".into(), 1), (false, "blk-write".into(), 1)]);
    let native = Mark::all(console, None);
    assert_eq!((native.len(), native[0].open, native[0].rep), (1, false, 2));
}

#[test]
fn a_marked_window_counts_the_instructions_between_its_marks() {
    // Every read is 1,000 more: the open mark reads twice (1,000, 2,000), the close twice
    // (3,000, 4,000); the window runs from the open's later read to the close's earlier one:
    // 1,000.
    let mut host = Host::new(None, &[]).with_counter(Box::new(Ticking(0, 1_000)));
    let mut console = "armhv-bench: mark open blk-write rep=1\n".to_owned();
    // Each mark read is a go the guest waits for.
    assert_eq!(host.poll(&console), 1);
    assert!(host.windows().is_empty());
    console.push_str("armhv-bench: mark close blk-write rep=1\n");
    assert_eq!(host.poll(&console), 1);
    // A close without its open, and a busy machine, are errors of their window.
    console.push_str("armhv-bench: mark close blk-read rep=1\n");
    assert_eq!(host.poll(&console), 1);
    assert_eq!(host.poll(&console), 0);
    let w = host.windows();
    assert_eq!(w.len(), 2);
    assert_eq!(
        (w[0].workload.as_str(), w[0].rep, w[0].instructions.clone()),
        ("blk-write", 1, Ok(1_000))
    );
    assert!(w[1].instructions.as_ref().unwrap_err().contains("not open"));
    let mut busy = Host::new(None, &[]).with_counter(Box::new(Ticking(0, 10_000_000)));
    let _ = busy
        .poll("armhv-bench: mark open blk-write rep=1\narmhv-bench: mark close blk-write rep=1\n");
    assert!(busy.windows()[0].instructions.as_ref().unwrap_err().contains("not idle"));
    // Without a count, the window says why.
    let mut none = Host::new(None, &[]);
    let _ = none
        .poll("armhv-bench: mark open blk-write rep=1\narmhv-bench: mark close blk-write rep=1\n");
    assert!(none.windows()[0].instructions.as_ref().unwrap_err().contains("QMP"));
}

#[test]
fn the_disk_figures_are_instructions_per_mib_of_their_windows() {
    let console = "\
armhv-bench: result blk-write rep=1 mib_s=10.0 mib=256\n\
armhv-bench: result blk-write rep=2 mib_s=11.0 mib=256\n\
armhv-bench: result blk-read rep=1 mib_s=12.0 mib=256\n\
armhv-bench: result blk-read rep=2 mib_s=12.0\n\
armhv-bench: result hackbench rep=1 seconds=0.5\n";
    let mut out = crate::parse::Output::parse(console, None).unwrap();
    let window = |w: &str, rep, n: Result<u64, &str>| Window {
        workload: w.into(),
        rep,
        instructions: n.map_err(str::to_owned),
    };
    let windows = [
        window("blk-write", 1, Ok(256_000_000)),
        window("blk-write", 2, Err("the machine was not idle")),
        window("blk-read", 2, Ok(1)),
    ];
    workloads::apply_windows(&mut out, &windows);
    let s: Vec<(&str, u32, &str, f64)> = out
        .samples
        .iter()
        .map(|s| (s.workload.as_str(), s.rep, s.metric.as_str(), s.value))
        .collect();
    assert_eq!(s, [("blk-write", 1, "instr_mib", 1_000_000.0), ("hackbench", 1, "seconds", 0.5)]);
    assert_eq!(out.samples[0].extra["mib_s"], 10.0);
    let failed: Vec<(&str, u32, &str)> =
        out.failures.iter().map(|f| (f.workload.as_str(), f.rep, f.message.as_str())).collect();
    assert_eq!(failed.len(), 3);
    assert!(failed[0].2.contains("not idle"), "{failed:?}");
    assert!(failed[1].2.contains("no marked window"), "{failed:?}");
    assert!(failed[2].2.contains("no mib="), "{failed:?}");
}

/// A stand-in for the guest's servers: greets each connection with `R`, then sinks
/// (`echo` false) or echoes; the first connection is closed without a greeting, as QEMU's
/// forwarder does while nothing listens in the guest.
fn guest_server(echo: bool) -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (i, s) in listener.incoming().enumerate() {
            let Ok(mut s) = s else { continue };
            if i == 0 {
                continue; // dropped: closed without a greeting
            }
            std::thread::spawn(move || {
                s.write_all(b"R").unwrap();
                let mut buf = [0u8; 65536];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || (echo && s.write_all(&buf[..n]).is_err()) {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// The guest's verdict listener: greets, then sends what it reads to `tx`, once per connection.
fn verdict_server(tx: mpsc::Sender<String>) -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            s.write_all(b"R").unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            s.shutdown(Shutdown::Both).unwrap();
            tx.send(text).unwrap();
        }
    });
    port
}

#[test]
fn the_host_serves_each_request_once_and_gives_the_guest_its_figures() {
    let (tx, rx) = mpsc::channel();
    let [ctl, sink, echo] = UPLINK_PORTS;
    let forwards =
        [(verdict_server(tx), ctl), (guest_server(false), sink), (guest_server(true), echo)];
    // 400,000 instructions between reads: idle; a window from the opening pair's later read
    // to the closing pair's earlier one: 400,000.
    let mut host =
        Host::new(Some(CLIENT_VM), &forwards).with_counter(Box::new(Ticking(0, 400_000)));
    let mut console = format!(
        "[linux0] armhv-bench: host uplink-stream rep=1 port={sink} ctl={ctl} seconds=0.2 size=64\n"
    );
    assert_eq!(host.poll(&console), 0, "no marks");
    let stream = rx.recv().unwrap();
    assert!(stream.starts_with("instr_mib=") && stream.ends_with('\n'), "{stream:?}");
    console.push_str(&format!(
        "[linux0] armhv-bench: host uplink-rr rep=1 port={echo} ctl={ctl} seconds=0.2 size=64\n\
         [linux0] armhv-bench: host iperf9 rep=1 port={echo} ctl={ctl} seconds=0.2 size=64\n\
         [linux0] armhv-bench: host uplink-rr rep=2 port=4999 ctl={ctl} seconds=0.2 size=64\n"
    ));
    assert_eq!(host.poll(&console), 0, "no marks");
    let rr = rx.recv().unwrap();
    let out =
        crate::parse::Output::parse(&format!("armhv-bench: result uplink-rr rep=1 {rr}"), None)
            .unwrap();
    let (per_rt, n) = (out.samples[0].value, out.samples[0].extra["n"]);
    // The round trips after the warm-up are n; the instructions are over all of them.
    assert!(n > 10.0 && (per_rt - 400_000.0 / (n + 10.0)).abs() <= 0.5, "{rr:?}");
    assert_eq!(rx.recv().unwrap(), "error the host has no client for \"iperf9\"\n");
    let unforwarded = rx.recv().unwrap();
    assert!(unforwarded.starts_with("error guest port 4999 is not forwarded"), "{unforwarded}");
    // Served already: nothing runs again.
    assert_eq!(host.poll(&console), 0, "no marks");
    assert!(rx.recv_timeout(std::time::Duration::from_millis(300)).is_err());
}

#[test]
fn targets_compare_armhv_with_native_in_their_own_terms() {
    let disk = catalog::DISK_GOAL;
    assert_eq!(disk, Goal::ThroughputAtLeast(0.9));
    // A throughput, and the same as a cost: 1,000 instructions per MiB natively, 1,075 under
    // armhv is 93 % of native's throughput at a fixed instruction rate.
    let r = disk.ratio(true, 1000.0, 930.0).unwrap();
    assert!(disk.met(r) && !disk.met(disk.ratio(true, 1000.0, 899.0).unwrap()));
    assert_eq!((disk.show(r), disk.describe()), ("93 %".to_owned(), "≥ 90 % of native".to_owned()));
    assert_eq!(disk.show(disk.ratio(false, 1000.0, 1075.0).unwrap()), "93 %");
    assert!(!disk.met(disk.ratio(false, 1000.0, 1112.0).unwrap()));
    assert!((disk.max_normalized() - 1.0 / 0.9).abs() < 1e-12);
    let rr = catalog::RR_GOAL;
    let r = rr.ratio(false, 300.0, 330.0).unwrap();
    assert!(rr.met(r) && !rr.met(rr.ratio(false, 300.0, 361.0).unwrap()));
    assert_eq!((rr.show(r), rr.describe()), ("1.10 ×".to_owned(), "≤ 1.20 × native".to_owned()));
    assert_eq!(rr.max_normalized(), 1.2);
    assert_eq!(catalog::STREAM_GOAL, Goal::ThroughputAtLeast(0.8));
    assert_eq!(disk.ratio(true, 0.0, 1.0), None);
    assert_eq!(disk.ratio(false, 1.0, 0.0), None);
    let goals: Vec<&str> =
        catalog::WORKLOADS.iter().filter(|w| w.goal.is_some()).map(|w| w.name).collect();
    assert_eq!(goals, ["mdisk-write", "mdisk-read", "uplink-stream", "uplink-rr"]);
}

/// A one-VM config with `disks` and `nics` (TOML tables) and `tail` after it.
fn config(disks: &str, nics: &str, tail: &str) -> (vmconfig::Config, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "armhv-bench-realio-{}-{}",
        std::process::id(),
        disks.len() * 31 + nics.len() * 7 + tail.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Image"), [0u8; 4096]).unwrap();
    let text = format!(
        "[[vm]]\nname = \"linux0\"\nvcpus = 2\nmemory_size = \"256M\"\nkernel = \"Image\"\n\
         cmdline = \"console=ttyAMA0\"\n{disks}\n{nics}\n{tail}"
    );
    let machine = workloads::armhv_machine(&Options::default()).as_config_machine();
    let cfg =
        vmconfig::parse(&text, &dir.join("w.toml"), &machine).unwrap_or_else(|e| panic!("{e}"));
    (cfg, dir)
}

#[test]
fn the_real_io_devices_come_from_the_config() {
    let ram = "[[vm.disk]]\nsize = \"64M\"\n";
    let part = |size: &str| format!("[[vm.disk]]\npartition = \"p\"\nsize = \"{size}\"\n");
    let nics = "[[vm.nic]]\nnetwork = \"lan0\"\n[[vm.nic]]\nnetwork = \"wan\"\nmac = \"52:54:00:A5:BE:01\"\n";
    let wan = "[[network]]\nname = \"wan\"\nuplink = true\n";
    let (cfg, dir) = config(&format!("{ram}{}", part("128M")), nics, wan);
    let io = workloads::RealIo::of(&cfg, "linux0").unwrap();
    assert_eq!(io.mdisk, Some(128 << 20));
    assert_eq!(io.uplink_mac.map(workloads::mac_text).as_deref(), Some("52:54:00:a5:be:01"));
    assert_eq!(io.words(), ["--mdisk", "128", "--uplink", "52:54:00:a5:be:01"]);
    assert!(workloads::RealIo::of(&cfg, "linux9").is_err());
    std::fs::remove_dir_all(dir).unwrap();
    // Without an uplink network or a partition: nothing.
    let (cfg, dir) = config(ram, nics, "");
    assert_eq!(workloads::RealIo::of(&cfg, "linux0").unwrap(), workloads::RealIo::default());
    std::fs::remove_dir_all(dir).unwrap();
    // The guest tells the disks apart by size: the same size, or a part of a MiB, is refused.
    for size in ["64M", "1536K"] {
        let (cfg, dir) = config(&format!("{ram}{}", part(size)), "", "");
        let e = workloads::RealIo::of(&cfg, "linux0").unwrap_err().to_string();
        assert!(e.contains("must be a whole number of MiB and differ in size"), "{size}: {e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn natively_the_disk_and_the_nic_are_attached_as_under_armhv() {
    let (cfg, dir) = config("[[vm.disk]]\nsize = \"64M\"\n", "", "");
    let io = workloads::NativeIo {
        machine_disk: Some("/tmp/m.img".into()),
        nic: Some((xtask::Uplink { hostfwd: vec![(40000, 5300)] }, [0x52, 0x54, 0, 0xa5, 0xbe, 1])),
    };
    let machine = workloads::armhv_machine(&Options::default());
    let cmd = workloads::native_command(&machine, &cfg.vms[0], "armhv.run=x", None, &io).unwrap();
    let joined = xtask::qemu::command_line(&cmd);
    let disk = xtask::qemu::machine_disk_args(std::path::Path::new("/tmp/m.img"), false).join(" ");
    assert!(joined.contains(&disk), "{joined}");
    assert!(disk.contains("cache=writeback"));
    assert!(
        joined.contains(
            "-netdev user,id=uplink0,hostfwd=tcp:127.0.0.1:40000-:5300 -device \
             virtio-net-device,netdev=uplink0,mac=52:54:00:a5:be:01"
        ),
        "{joined}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_uplink_ports_are_the_guest_scripts() {
    let script =
        std::fs::read_to_string(xtask::root().join("guests/linux/bench/armhv-bench")).unwrap();
    for (name, port) in ["CTL_PORT", "SINK_PORT", "ECHO_PORT"].iter().zip(UPLINK_PORTS) {
        assert!(script.contains(&format!("\n{name}={port} ")), "{name}={port} in armhv-bench");
    }
    for w in catalog::WORKLOADS {
        assert!(
            script.contains(&format!("{} |", w.name)) || script.contains(&format!("{})", w.name)),
            "armhv-bench does not know {}",
            w.name
        );
    }
}

const NATIVE_IO: &str = "\
armhv-bench: workload mdisk-write: 2 x dd if=/dev/zero of=/dev/vdb bs=1M count=128 oflag=direct conv=fsync
armhv-bench: result mdisk-write rep=1 instr_mib=650000 mib=256
armhv-bench: result mdisk-read rep=1 instr_mib=150000 mib=256
armhv-bench: result uplink-stream rep=1 instr_mib=3000000 bytes=1 seconds=5
armhv-bench: result uplink-rr rep=1 instr_rt=30000 n=10
armhv-bench: done
";

const ARMHV_IO: &str = "\
[linux0] armhv-bench: result mdisk-write rep=1 instr_mib=700000 mib=256
[linux0] armhv-bench: result mdisk-read rep=1 instr_mib=300000 mib=256
[linux0] armhv-bench: result uplink-stream rep=1 instr_mib=6000000 bytes=1 seconds=5
[linux0] armhv-bench: result uplink-rr rep=1 instr_rt=33000 n=10
[linux0] armhv-bench: done
";

fn real_io_results() -> Results {
    let mut r = sample_results();
    r.runs.retain(|run| run.kind == crate::model::Kind::Workload);
    r.runs.push(workload_run(NATIVE, NATIVE_IO));
    r.runs.push(workload_run(ARMHV, ARMHV_IO));
    r.workloads = workloads::summarize(&r.runs);
    r
}

#[test]
fn the_report_says_which_targets_were_met() {
    let r = real_io_results();
    let charts = report::Charts { real_io: Some("s-real-io.svg".into()), ..Default::default() };
    let md = report::markdown(&r, &charts);
    for needle in [
        "## Real I/O against its targets",
        "| Workload | Unit | Native | armhv | armhv against native | Best of n | Target | |",
        "| Block write (machine disk) | instructions per MiB | 650,000 | 700,000 | 93 % | 93 % | ≥ 90 % of native | ✅ met |",
        "| Block read (machine disk) | instructions per MiB | 150,000 | 300,000 | 50 % | 50 % | ≥ 90 % of native | ❌ missed |",
        "| TCP stream, host to VM (uplink) | instructions per MiB | 3,000,000 | 6,000,000 | 50 % | 50 % | ≥ 80 % of native | ❌ missed |",
        "| TCP request/response, host to VM (uplink) | instructions per round trip | 30,000 | 33,000 | 1.10 × | 1.10 × | ≤ 1.20 × native | ✅ met |",
        "([how](../README.md#real-io-like-for-like))",
        "![Real I/O against its targets](s-real-io.svg)",
    ] {
        assert!(md.contains(needle), "{needle:?} missing from:\n{md}");
    }
    // The loopback warning is for the peer workloads only.
    assert!(!md.contains("over **loopback**"), "{md}");
    let term = report::terminal(&r);
    assert!(term.contains("Block read (machine disk): 50 % (≥ 90 % of native): MISSED"), "{term}");
    assert!(term.contains("uplink): 1.10 × (≤ 1.20 × native): met"), "{term}");

    let svg = charts::real_io(&r).unwrap().unwrap();
    let l = labels(&svg);
    assert!(l.contains(&"2.00") && l.contains(&"1.08"), "{l:?}");
    assert!(l.contains(&"target: at most this overhead"), "{l:?}");
    assert!(charts::real_io(&sample_results()).unwrap().is_none());
    // Best of n: each side's best repetition (the fewest instructions).
    let mut r2 = real_io_results();
    r2.runs.push(workload_run(NATIVE, "armhv-bench: result mdisk-read rep=1 instr_mib=200000\n"));
    r2.workloads = workloads::summarize(&r2.runs);
    let md = report::markdown(&r2, &report::Charts::default());
    let row = "| Block read (machine disk) | instructions per MiB | 175,000 | 300,000 | 58 % | 50 % | ≥ \
         90 % of native |";
    assert!(md.contains(row), "{md}");
    // Without the real-I/O workloads, no section.
    let md = report::markdown(&crate::tests::workload_results(), &report::Charts::default());
    assert!(!md.contains("## Real I/O"));
}
