//! `guests/linux/armhvctl`, the control VM's command-line tool (issue 18), against a fake armhv
//! on the host: no QEMU. The channel is two FIFOs, `ARMHVCTL_DEV` (the commands) and
//! `ARMHVCTL_DEV_IN` (armhv's lines); a responder thread reads each command and writes canned
//! JSON lines, with events and noise before the reply. Each case runs under `sh` (dash on Debian),
//! and when they are installed `bash --posix` and busybox's ash with every tool from busybox (the
//! guest's whole userland): the script must be POSIX. One case runs it on a pseudo-terminal, as
//! the guest's /dev/hvcN is a tty: its settings (raw, no echo) and the resynchronization after
//! what the tty echoed before them. Also `shellcheck -s sh` when installed.

use std::ffi::CStr;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Longer than any run takes: a hang fails the test instead of stopping it.
const HANG: Duration = Duration::from_secs(30);
/// What the responder takes to mean "the run is over".
const END: &str = "armhvctl-test-end";

const EVENT: &str = r#"{"event":"stopped","vm":"vm1","why":"powered off by the guest"}"#;
const LIST: &str = r#"{"ok":true,"vms":[{"name":"vm0","state":"running","vcpus":2,"cpus":[0,1],"memory_bytes":268435456,"uptime_ms":1234,"exits":5678,"restarts":0,"on_poweroff":"stop","on_reboot":"restart","on_crash":"stop"},{"name":"linux-big_1","state":"stopped","vcpus":0,"cpus":[],"memory_bytes":1610612736,"uptime_ms":null,"exits":12345678901,"restarts":12,"on_poweroff":"stop","on_reboot":"restart","on_crash":"restart"}]}"#;
const LIST_TABLE: &str = "\
NAME         STATE    VCPUS  CPUS  MEMORY(MiB)  UPTIME(s)        EXITS  RESTARTS
vm0          running      2  0,1           256        1.2         5678         0
linux-big_1  stopped      0  -            1536          -  12345678901        12
";
const INFO: &str = r#"{"ok":true,"vm":{"name":"vm0","state":"paused","vcpus":2,"cpus":[2,3],"memory_bytes":201326592,"uptime_ms":61001,"exits":5678,"restarts":1,"on_poweroff":"stop","on_reboot":"restart","on_crash":"stop"}}"#;
const INFO_TEXT: &str = "\
name         vm0
state        paused
vcpus        2
cpus         2,3
memory       192 MiB
uptime       61.001 s
exits        5678
restarts     1
on_poweroff  stop
on_reboot    restart
on_crash     stop
";
/// As `write_reply` escapes it: `no VM is named "x\"}\n{\"ok\":true"; ...` with a backslash.
const ERROR: &str = r#"{"ok":false,"error":"no VM is named \"x\\\"}\\n{\\\"ok\\\":true\"; `list` shows them \\ \u0001"}"#;
const ERROR_TEXT: &str =
    "armhvctl: no VM is named \"x\\\"}\\n{\\\"ok\\\":true\"; `list` shows them \\ ?\n";
const NO_CHANNEL: &str = "armhvctl: this VM has no control channel (only a VM with control = true \
                          in armhv's config has one)\n";

fn script() -> PathBuf {
    xtask::root().join("guests/linux/armhvctl")
}

fn scratch(tag: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("armhvctl-{tag}-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("running mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// How a case runs the script.
#[derive(Clone, Debug)]
struct Shell {
    name: &'static str,
    argv: Vec<String>,
    /// PATH for the run: busybox's applets only, for busybox; the host's otherwise.
    path: Option<PathBuf>,
}

/// The shells there are, found once.
fn shells() -> Vec<Shell> {
    static SHELLS: OnceLock<Vec<Shell>> = OnceLock::new();
    SHELLS.get_or_init(find_shells).clone()
}

fn find_shells() -> Vec<Shell> {
    let mut shells = vec![Shell { name: "sh", argv: vec!["sh".into()], path: None }];
    if have("bash", "--version") {
        shells.push(Shell {
            name: "bash --posix",
            argv: vec!["bash".into(), "--posix".into()],
            path: None,
        });
    }
    // The guest's userland: every command from busybox (its awk, sed, stty, sleep, ...), linked
    // once into build/ (busybox --install would not replace the links).
    let bin = xtask::build_dir().join("armhvctl-busybox");
    if have("busybox", "true") {
        if !bin.join("awk").exists() {
            fs::create_dir_all(&bin).unwrap();
            let status = Command::new("busybox").arg("--install").arg("-s").arg(&bin).status();
            assert!(status.is_ok_and(|s| s.success()), "busybox --install -s {}", bin.display());
        }
        shells.push(Shell {
            name: "busybox sh",
            argv: vec![bin.join("sh").to_string_lossy().into_owned()],
            path: Some(bin),
        });
    } else {
        eprintln!("armhvctl: busybox not installed: only sh and bash run the script");
    }
    eprintln!("armhvctl: shells: {}", shells.iter().map(|s| s.name).collect::<Vec<_>>().join(", "));
    shells
}

struct Outcome {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Outcome {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\nstdout:\n{}stderr:\n{}", self.status, self.stdout, self.stderr)
    }
}

/// What the fake armhv answers to a command line: the lines it then writes.
type Answer = Box<dyn FnMut(&str) -> Vec<String> + Send>;

/// The fake armhv's side of a channel.
struct Armhv {
    thread: JoinHandle<Vec<String>>,
    commands: PathBuf,
}

impl Armhv {
    /// Opens both FIFOs read-write (so that neither side's open blocks), writes `stale` to the
    /// script's side, then answers each command line until [`END`].
    fn start(commands: &Path, replies: &Path, stale: &[&str], mut answer: Answer) -> Self {
        let open = |p: &Path| OpenOptions::new().read(true).write(true).open(p).unwrap();
        let (input, mut output) = (open(commands), open(replies));
        for line in stale {
            writeln!(output, "{line}").unwrap();
        }
        let thread = thread::spawn(move || {
            let mut received = Vec::new();
            for line in BufReader::new(input).lines() {
                let line = line.unwrap();
                if line == END {
                    break;
                }
                for reply in answer(&line) {
                    writeln!(output, "{reply}").unwrap();
                }
                received.push(line);
            }
            received
        });
        Self { thread, commands: commands.to_owned() }
    }

    /// The command lines it received.
    fn stop(self) -> Vec<String> {
        writeln!(OpenOptions::new().write(true).open(&self.commands).unwrap(), "{END}").unwrap();
        self.thread.join().unwrap()
    }
}

/// A FIFO pair for the channel, and a TMPDIR for the lock.
struct Channel {
    dir: PathBuf,
    commands: PathBuf,
    replies: PathBuf,
}

impl Channel {
    fn new(tag: &str) -> Self {
        let dir = scratch(tag);
        let (commands, replies) = (dir.join("commands"), dir.join("replies"));
        mkfifo(&commands);
        mkfifo(&replies);
        Self { dir, commands, replies }
    }

    fn armhv(&self, stale: &[&str], answer: Answer) -> Armhv {
        Armhv::start(&self.commands, &self.replies, stale, answer)
    }

    fn command(&self, shell: &Shell, args: &[&str]) -> Command {
        let mut cmd = armhvctl(shell, &self.dir, args);
        cmd.env("ARMHVCTL_DEV", &self.commands).env("ARMHVCTL_DEV_IN", &self.replies);
        cmd
    }

    /// Runs the script with the fake armhv answering `answer`; the outcome and the lines it got.
    fn run(&self, shell: &Shell, args: &[&str], answer: Answer) -> (Outcome, Vec<String>) {
        self.run_env(shell, args, &[], answer)
    }

    fn run_env(
        &self,
        shell: &Shell,
        args: &[&str],
        env: &[(&str, &str)],
        answer: Answer,
    ) -> (Outcome, Vec<String>) {
        let armhv = self.armhv(&[], answer);
        let mut cmd = self.command(shell, args);
        cmd.envs(env.iter().copied());
        let outcome = finish(cmd.spawn().unwrap());
        (outcome, armhv.stop())
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The script under `shell` with `args`, TMPDIR `tmp`, none of the caller's ARMHVCTL_*.
fn armhvctl(shell: &Shell, tmp: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(&shell.argv[0]);
    cmd.args(&shell.argv[1..]).arg(script()).args(args);
    for var in ["ARMHVCTL_DEV", "ARMHVCTL_DEV_IN", "ARMHVCTL_TIMEOUT", "ARMHVCTL_ROOT"] {
        cmd.env_remove(var);
    }
    if let Some(path) = &shell.path {
        cmd.env("PATH", path);
    }
    cmd.env("TMPDIR", tmp).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

fn reader(pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        BufReader::new(pipe).read_to_string(&mut text).unwrap();
        text
    })
}

/// Waits for the script (killing it after [`HANG`]) and collects its output.
fn finish(mut child: Child) -> Outcome {
    let start = Instant::now();
    let (out, err) = (reader(child.stdout.take().unwrap()), reader(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            panic!("armhvctl still runs after {HANG:?}: {:?}", child.wait());
        }
        thread::sleep(Duration::from_millis(5));
    };
    let took = start.elapsed();
    Outcome { status, stdout: out.join().unwrap(), stderr: err.join().unwrap(), took }
}

/// Answers the first command with `lines` (an event and noise first), and nothing else.
fn once(lines: &[&str]) -> Answer {
    let mut lines: Vec<String> =
        [EVENT, "half a line from before\"}"].iter().chain(lines).map(|s| s.to_string()).collect();
    Box::new(move |_| std::mem::take(&mut lines))
}

fn check(outcome: &Outcome, code: i32, stdout: &str, stderr: &str, what: &str) {
    assert_eq!(outcome.code(), Some(code), "{what}: exit status\n{outcome}");
    assert_eq!(outcome.stdout, stdout, "{what}: stdout\n{outcome}");
    assert_eq!(outcome.stderr, stderr, "{what}: stderr\n{outcome}");
}

#[test]
fn replies_in_human_form() {
    for shell in shells() {
        let ch = Channel::new("human");
        let sh = shell.name;
        // The command (its words), armhv's reply, and the exit status, stdout and stderr.
        let cases = [
            ("list", LIST, 0, LIST_TABLE, ""),
            (
                "list",
                r#"{"ok":true,"vms":[]}"#,
                0,
                "NAME  STATE  VCPUS  CPUS  MEMORY(MiB)  UPTIME(s)  EXITS  RESTARTS\n",
                "",
            ),
            ("info vm0", INFO, 0, INFO_TEXT, ""),
            ("stop x", ERROR, 1, "", ERROR_TEXT),
            (
                "stop vm1",
                r#"{"ok":true,"message":"vm1 is starting; it stops once started"}"#,
                0,
                "vm1 is starting; it stops once started\n",
                "",
            ),
            ("start vm1", r#"{"ok":true}"#, 0, "", ""),
            ("log debug", r#"{"ok":true}"#, 0, "", ""),
            (
                "help",
                r#"{"ok":true,"help":"list | start NAME | stop NAME | log error|warn|info|debug|trace | help"}"#,
                0,
                "list | start NAME | stop NAME | log error|warn|info|debug|trace | help\n",
                "",
            ),
            (
                "pause vm1",
                r#"{"ok":false,"error":"vm1 is stopping; wait for it to stop"}"#,
                1,
                "",
                "armhvctl: vm1 is stopping; wait for it to stop\n",
            ),
        ];
        for (command, reply, code, stdout, stderr) in cases {
            let args: Vec<&str> = command.split(' ').collect();
            let (outcome, received) = ch.run(&shell, &args, once(&[reply]));
            check(&outcome, code, stdout, stderr, &format!("{sh}: {command}"));
            assert_eq!(received, [command], "{sh}: {command}");
        }
        // An info with a field this script does not know yet: shown too, after the others.
        let future = INFO.replace(r#""on_crash":"stop"}"#, r#""on_crash":"stop","pinned":true}"#);
        let (outcome, _) = ch.run(&shell, &["info", "vm0"], once(&[&future]));
        check(&outcome, 0, &format!("{INFO_TEXT}pinned       true\n"), "", sh);
    }
}

#[test]
fn json_flag_prints_the_reply_as_it_came() {
    for shell in shells() {
        let ch = Channel::new("json");
        let sh = shell.name;
        let (outcome, received) = ch.run(&shell, &["-j", "list"], once(&[LIST]));
        check(&outcome, 0, &format!("{LIST}\n"), "", sh);
        assert_eq!(received, ["list"], "{sh}");
        let (outcome, _) = ch.run(&shell, &["-j", "stop", "x"], once(&[ERROR]));
        check(&outcome, 1, &format!("{ERROR}\n"), "", sh);
        let (outcome, _) = ch.run(&shell, &["-j", "start", "vm1"], once(&[r#"{"ok":true}"#]));
        check(&outcome, 0, "{\"ok\":true}\n", "", sh);
    }
}

#[test]
fn an_unreadable_reply_is_reported() {
    for shell in shells() {
        let ch = Channel::new("bad");
        let (outcome, _) = ch.run(&shell, &["list"], once(&[r#"{"ok":true,"vms":[}"#]));
        let stderr = "armhvctl: a reply armhvctl cannot read: {\"ok\":true,\"vms\":[}\n";
        check(&outcome, 3, "", stderr, shell.name);
    }
}

/// No reply: exit 3 after ARMHVCTL_TIMEOUT. The reply that comes late is not taken for the next
/// run's: that run first resynchronizes (an empty line, then an `info` whose refusal quotes a
/// token of its own) and skips everything before the refusal.
#[test]
fn timeout_then_resynchronization() {
    for shell in shells() {
        let ch = Channel::new("timeout");
        let sh = shell.name;
        let (outcome, received) = ch.run_env(
            &shell,
            &["list"],
            &[("ARMHVCTL_TIMEOUT", "1")],
            Box::new(|_| vec![EVENT.into()]),
        );
        check(&outcome, 3, "", "armhvctl: no reply from armhv in 1 s\n", sh);
        assert_eq!(received, ["list"], "{sh}");
        assert!(
            outcome.took >= Duration::from_secs(1) && outcome.took < Duration::from_secs(5),
            "{sh}: took {:?}",
            outcome.took
        );
        assert!(ch.dir.join("armhvctl.resync").exists(), "{sh}: no resync mark");
        assert!(!ch.dir.join("armhvctl.lock").exists(), "{sh}: the lock was left");

        // The late reply to that list is in the channel before the next run starts.
        let late = r#"{"ok":true,"vms":[]}"#;
        let armhv = ch.armhv(
            &[late],
            Box::new(|line| {
                let reply = if line.is_empty() {
                    r#"{"ok":false,"error":"no command; `help` lists them"}"#.to_string()
                } else if let Some(name) = line.strip_prefix("info ") {
                    format!(
                        r#"{{"ok":false,"error":"\"{name}\" is not a VM name; names are 1 to 32 characters"}}"#
                    )
                } else {
                    r#"{"ok":true,"message":"vm1 started"}"#.to_string()
                };
                vec![EVENT.into(), reply]
            }),
        );
        let outcome = finish(ch.command(&shell, &["start", "vm1"]).spawn().unwrap());
        let received = armhv.stop();
        check(&outcome, 0, "vm1 started\n", "", sh);
        assert_eq!(received.len(), 3, "{sh}: {received:?}");
        assert_eq!(received[0], "", "{sh}");
        assert!(received[1].starts_with("info armhvctl.sync."), "{sh}: {received:?}");
        assert_eq!(received[2], "start vm1", "{sh}");
        assert!(!ch.dir.join("armhvctl.resync").exists(), "{sh}: the resync mark stayed");
    }
}

#[test]
fn no_channel() {
    for shell in shells() {
        let tmp = scratch("none");
        let sh = shell.name;
        // This host's own sysfs: no device tree node with armhv,control-channel.
        let outcome = finish(armhvctl(&shell, &tmp, &["list"]).spawn().unwrap());
        check(&outcome, 2, "", NO_CHANNEL, sh);
        // No sysfs at all.
        let mut cmd = armhvctl(&shell, &tmp, &["list"]);
        cmd.env("ARMHVCTL_ROOT", tmp.join("nothing"));
        check(&finish(cmd.spawn().unwrap()), 2, "", NO_CHANNEL, sh);
        let _ = fs::remove_dir_all(&tmp);
    }
}

/// The channel as Linux 6.1 shows it: platform devices BASE.virtio_mmio, each with its device-tree
/// node (of_node) and its virtio device (virtioK); the control channel's node has the property.
/// virtio consoles at indexes 0, 2, 9 (no platform device: a bus index need not be a slot), 10
/// (the control channel) and 11: it is the fourth console, /dev/hvc3.
#[test]
fn channel_found_in_sysfs() {
    for shell in shells() {
        let root = scratch("sysfs");
        let sh = shell.name;
        let platform = root.join("sys/bus/platform/devices");
        let virtio = root.join("sys/bus/virtio/devices");
        for (base, index, control) in [
            ("a000000", 0, false),
            ("a000200", 1, false),
            ("a000400", 2, false),
            ("a000600", 10, true),
            ("a000800", 11, false),
        ] {
            let dev = platform.join(format!("{base}.virtio_mmio"));
            fs::create_dir_all(dev.join("of_node")).unwrap();
            fs::create_dir_all(dev.join(format!("virtio{index}"))).unwrap();
            if control {
                File::create(dev.join("of_node/armhv,control-channel")).unwrap();
            }
        }
        fs::create_dir_all(platform.join("9000000.pl011/of_node")).unwrap();
        for (index, id) in [(0, 3), (1, 1), (2, 3), (9, 3), (10, 3), (11, 3), (12, 4)] {
            let dev = virtio.join(format!("virtio{index}"));
            fs::create_dir_all(dev.join("driver")).unwrap();
            fs::write(dev.join("device"), format!("0x{id:04x}\n")).unwrap();
        }
        fs::create_dir_all(root.join("dev")).unwrap();
        let (hvc3, replies) = (root.join("dev/hvc3"), root.join("replies"));
        mkfifo(&hvc3);
        mkfifo(&replies);

        let armhv = Armhv::start(&hvc3, &replies, &[], once(&[r#"{"ok":true}"#]));
        let mut cmd = armhvctl(&shell, &root, &["restart", "vm2"]);
        cmd.env("ARMHVCTL_ROOT", &root).env("ARMHVCTL_DEV_IN", &replies);
        let outcome = finish(cmd.spawn().unwrap());
        assert_eq!(armhv.stop(), ["restart vm2"], "{sh}");
        check(&outcome, 0, "", "", sh);

        // Without virtio_console's driver on it: said so.
        fs::remove_dir(virtio.join("virtio10/driver")).unwrap();
        let mut cmd = armhvctl(&shell, &root, &["list"]);
        cmd.env("ARMHVCTL_ROOT", &root);
        let stderr = "armhvctl: the control channel virtio10 has no driver (is virtio_console \
                      loaded?)\n";
        check(&finish(cmd.spawn().unwrap()), 2, "", stderr, sh);
        let _ = fs::remove_dir_all(&root);
    }
}

/// `events` prints each event line (not the replies) until it is killed, and holds the channel
/// meanwhile: another run waits for it, then gives up saying who holds it.
#[test]
fn events_until_killed() {
    for shell in shells() {
        for (json, first) in
            [(false, "vm1: powered off by the guest".to_string()), (true, EVENT.to_string())]
        {
            let ch = Channel::new("events");
            let sh = shell.name;
            let crashed = r#"{"event":"crashed","vm":"vm2","why":"crashed: EC 0x00 at \"pc\"; restarting in 1.500 s"}"#;
            let stale = [EVENT, r#"{"ok":true}"#, "noise", crashed];
            let armhv = ch.armhv(&stale, Box::new(|_| Vec::new()));
            let args: &[&str] = if json { &["-j", "events"] } else { &["events"] };
            let mut child = ch.command(&shell, args).spawn().unwrap();
            let (lines_tx, lines) = mpsc::channel();
            let stdout = child.stdout.take().unwrap();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    if lines_tx.send(line.unwrap()).is_err() {
                        break;
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < 2 {
                match lines.recv_timeout(HANG) {
                    Ok(line) => got.push(line),
                    Err(e) => {
                        let _ = child.kill();
                        panic!("{sh}: events printed {got:?}, then {e}");
                    }
                }
            }
            let second = if json {
                crashed.to_string()
            } else {
                "vm2: crashed: EC 0x00 at \"pc\"; restarting in 1.500 s".to_string()
            };
            assert_eq!(got, [first, second], "{sh}");

            let mut cmd = ch.command(&shell, &["list"]);
            cmd.env("ARMHVCTL_TIMEOUT", "1");
            let busy = finish(cmd.spawn().unwrap());
            let stderr = format!(
                "armhvctl: the control channel is busy: pid {} (armhvctl events) has held {} for \
                 over 1 s\n",
                child.id(),
                ch.dir.join("armhvctl.lock").display()
            );
            check(&busy, 3, "", &stderr, sh);

            Command::new("kill").arg(child.id().to_string()).status().unwrap();
            let status = child.wait().unwrap();
            assert_eq!(status.code(), Some(143), "{sh}: {status}");
            assert_eq!(armhv.stop(), Vec::<String>::new(), "{sh}: events sends nothing");
            assert!(!ch.dir.join("armhvctl.lock").exists(), "{sh}: the lock was left");
        }
    }
}

/// A lock left by a run that was killed (its pid gone) is taken over.
#[test]
fn a_dead_holders_lock_is_taken_over() {
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    for shell in shells() {
        let ch = Channel::new("stale");
        let lock = ch.dir.join("armhvctl.lock");
        fs::create_dir(&lock).unwrap();
        fs::write(lock.join("pid"), format!("{pid}\n")).unwrap();
        let (outcome, _) = ch.run(&shell, &["start", "vm1"], once(&[r#"{"ok":true}"#]));
        check(&outcome, 0, "", "", shell.name);
        assert!(!lock.exists(), "{}", shell.name);
    }
}

#[test]
fn usage_errors_send_nothing() {
    for shell in shells() {
        let ch = Channel::new("usage");
        let sh = shell.name;
        for (args, first) in [
            (&[][..], "armhvctl: no command\n"),
            (&["frob"][..], "armhvctl: unknown command frob\n"),
            (&["info"][..], "armhvctl: info needs one VM name (armhvctl list shows them)\n"),
            (&["list", "vm0"][..], "armhvctl: list takes no argument\n"),
            (&["log"][..], "armhvctl: log needs one LEVEL: error, warn, info, debug or trace\n"),
            (&["-x", "list"][..], "armhvctl: unknown option -x\n"),
            (
                &["stop", "vm1\nstart vm2"][..],
                "armhvctl: the command has a control character: stop takes printable words\n",
            ),
        ] {
            let (outcome, received) = ch.run(&shell, args, Box::new(|_| Vec::new()));
            assert_eq!(outcome.code(), Some(2), "{sh}: {args:?}\n{outcome}");
            assert!(outcome.stderr.starts_with(first), "{sh}: {args:?}\n{outcome}");
            assert!(outcome.stderr.contains("usage: armhvctl"), "{sh}: {args:?}\n{outcome}");
            assert_eq!(received, Vec::<String>::new(), "{sh}: {args:?}");
        }
        let (outcome, _) = ch.run_env(
            &shell,
            &["list"],
            &[("ARMHVCTL_TIMEOUT", "soon")],
            Box::new(|_| Vec::new()),
        );
        let stderr =
            "armhvctl: ARMHVCTL_TIMEOUT=soon: want a whole number of seconds, at least 1\n";
        check(&outcome, 2, "", stderr, sh);
        let (outcome, _) = ch.run(&shell, &["-h"], Box::new(|_| Vec::new()));
        assert_eq!(outcome.code(), Some(0), "{sh}\n{outcome}");
        assert!(outcome.stdout.starts_with("usage: armhvctl [-j] COMMAND\n"), "{sh}\n{outcome}");
    }
}

/// A pseudo-terminal: its master side, and the path of its slave (`/dev/pts/N`).
fn pty() -> (File, PathBuf) {
    // SAFETY: posix_openpt returns a new descriptor or -1; nothing else is touched.
    let fd = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a descriptor this function owns, given to the File that closes it.
    let master = unsafe { File::from_raw_fd(fd) };
    let mut name: [libc::c_char; 128] = [0; 128];
    // SAFETY: fd is a pty master; ptsname_r writes at most name.len() bytes, NUL included.
    let ok = unsafe {
        libc::grantpt(fd) == 0
            && libc::unlockpt(fd) == 0
            && libc::ptsname_r(fd, name.as_mut_ptr(), name.len()) == 0
    };
    assert!(ok, "grantpt, unlockpt or ptsname_r: {}", std::io::Error::last_os_error());
    // SAFETY: ptsname_r succeeded: name holds a NUL-terminated string.
    let slave = unsafe { CStr::from_ptr(name.as_ptr()) };
    (master, PathBuf::from(slave.to_str().unwrap()))
}

/// On a tty, as /dev/hvcN is: an event armhv sent before the run is echoed back to armhv (the
/// tty's settings are the defaults, echo on, until the script's stty), and armhv, as it does
/// with any line, answers it with an error, which is echoed too, and so on. The run still gets
/// its own reply: after `stty raw -echo` it reads what is waiting, finds something, and
/// resynchronizes (an empty line, `info armhvctl.sync...`, up to the refusal quoting it).
#[test]
fn on_a_tty_echo_off_and_resynchronized() {
    for shell in shells() {
        let sh = shell.name;
        let tmp = scratch("tty");
        let (mut master, slave) = pty();
        // The slave stays open meanwhile: its settings stay, and the master reads no EIO.
        let _slave = OpenOptions::new().read(true).write(true).open(&slave).unwrap();
        writeln!(master, "{EVENT}").unwrap();

        // The thread has copies: closing the master would hang up the slave, its last reply
        // undelivered.
        let mut reader = BufReader::new(master.try_clone().unwrap());
        let mut writer = master.try_clone().unwrap();
        let armhv = thread::spawn(move || {
            let mut received = Vec::new();
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break received;
                }
                // Echoed lines end in \r\n (the default settings' onlcr), the script's in \n.
                let line = line.trim_end_matches(['\n', '\r']).to_string();
                let reply = if line.starts_with('{') || line.is_empty() {
                    r#"{"ok":false,"error":"unknown command \"{\\\"event\\\"\""}"#.to_string()
                } else if let Some(name) = line.strip_prefix("info ") {
                    format!(r#"{{"ok":false,"error":"\"{name}\" is not a VM name"}}"#)
                } else {
                    LIST.to_string()
                };
                let done = line == "list";
                writeln!(writer, "{EVENT}\n{reply}").unwrap();
                received.push(line);
                if done {
                    break received;
                }
            }
        });
        let mut cmd = armhvctl(&shell, &tmp, &["list"]);
        cmd.env("ARMHVCTL_DEV", &slave);
        let outcome = finish(cmd.spawn().unwrap());
        check(&outcome, 0, LIST_TABLE, "", sh);
        let received = armhv.join().unwrap();
        drop(master);
        let n = received.len();
        assert!(n >= 4, "{sh}: {received:?}");
        assert!(received[0].starts_with(r#"{"event""#), "{sh}: not echoed: {received:?}");
        assert!(received[n - 2].starts_with("info armhvctl.sync."), "{sh}: {received:?}");
        assert_eq!(received[n - 1], "list", "{sh}");
        let _ = fs::remove_dir_all(&tmp);
    }
}

#[test]
fn shellcheck() {
    if !have("shellcheck", "--version") {
        eprintln!("armhvctl: shellcheck not installed: skipped");
        return;
    }
    let out = Command::new("shellcheck").args(["-s", "sh"]).arg(script()).output().unwrap();
    assert!(
        out.status.success(),
        "shellcheck -s sh guests/linux/armhvctl:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
