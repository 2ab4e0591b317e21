//! Running armhv on QEMU's `virt` board, and watching its console from tests.

use crate::MachineSpec;
use crate::disk::ScratchDisk;
use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

// armhv erases a VM's partial line (a prompt) before printing another line over it, then
// redraws it.
use vdev::console::ERASE_LINE;

/// Appends console output to a transcript as a terminal shows it: an erased partial line is
/// gone, and carriage returns are dropped.
fn append_console(transcript: &mut String, text: &str) {
    for (i, piece) in text.split(ERASE_LINE).enumerate() {
        if i > 0 {
            transcript.truncate(transcript.rfind('\n').map_or(0, |n| n + 1));
        }
        transcript.push_str(&piece.replace('\r', ""));
    }
}

/// Lines that mean armhv itself failed: a test fails as soon as one appears.
pub const FAILURE_PATTERNS: [&str; 2] = ["PANIC on CPU", "FATAL:"];

/// QEMU's arguments for deterministic timing (`MachineSpec::icount`): one instruction per ns of
/// virtual time (so the cycle counter counts instructions), no sleeping while CPUs idle, and an
/// RTC that starts at a fixed date and follows virtual time.
pub const ICOUNT_ARGS: [&str; 4] =
    ["-icount", "shift=0,sleep=off", "-rtc", "base=2024-01-01T00:00:00,clock=vm"];

/// [`ICOUNT_ARGS`] with idle time on the host's clock (`MachineSpec::icount_sleep`).
pub const ICOUNT_SLEEP_ARGS: [&str; 4] =
    ["-icount", "shift=0,sleep=on", "-rtc", "base=2024-01-01T00:00:00,clock=vm"];

/// QEMU's arguments for a QMP server on the Unix socket `path`, which QEMU creates and does not
/// wait on.
pub fn qmp_args(path: &Path) -> [String; 2] {
    ["-qmp".into(), format!("unix:{},server=on,wait=off", path.display())]
}

pub fn command(image: &Path, m: &MachineSpec) -> Command {
    let mut cmd = Command::new("qemu-system-aarch64");
    // dtb-randomness=off: no random seeds in the device tree, which would change what the
    // guests execute from run to run.
    let mut board = format!("virt,virtualization=on,gic-version={}", m.gic);
    if m.icount {
        board.push_str(",dtb-randomness=off");
    }
    cmd.args(["-M", &board, "-cpu", &m.cpu]).args([
        "-smp",
        &m.smp.to_string(),
        "-m",
        &format!("{}M", m.mem_mib),
    ]);
    match &m.firmware {
        // QEMU loads an arm64 Image at RAM base + text_offset and enters it at EL2 itself.
        None => cmd.arg("-kernel").arg(image),
        // The firmware comes up at EL2 with the image already in RAM: QEMU's loader writes
        // it there at reset, as a board's firmware would have read it from storage.
        Some(fw) => cmd.arg("-bios").arg(&fw.bios).arg("-device").arg(format!(
            "loader,file={},addr={:#x},force-raw=on",
            image.display(),
            fw.load_addr
        )),
    };
    cmd.arg("-no-reboot");
    match (m.icount, m.icount_sleep) {
        (true, false) => _ = cmd.args(ICOUNT_ARGS),
        (true, true) => _ = cmd.args(ICOUNT_SLEEP_ARGS),
        (false, _) => {}
    }
    if let Some(qmp) = &m.qmp {
        cmd.args(qmp_args(qmp));
    }
    if let Some(disk) = &m.machine_disk {
        cmd.args(machine_disk_args(disk, m.machine_disk_read_only));
    }
    if let Some(uplink) = &m.uplink {
        cmd.args(uplink.qemu_args());
    }
    if let Some(dtb) = &m.dtb {
        cmd.arg("-dtb").arg(dtb);
    }
    cmd
}

/// The device tree QEMU makes for machine `m` (booting `image`), as a blob: what armhv reads at
/// boot, for a test to edit and pass back with [`MachineSpec::dtb`].
pub fn dump_dtb(image: &Path, m: &MachineSpec, to: &Path) -> Result<Vec<u8>> {
    let mut cmd = command(image, &MachineSpec { dtb: None, ..m.clone() });
    cmd.arg("-machine").arg(format!("dumpdtb={}", to.display()));
    let out = cmd.output().context("could not start qemu-system-aarch64")?;
    if !out.status.success() {
        bail!("QEMU could not dump its device tree: {}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::read(to).with_context(|| format!("reading {}", to.display()))
}

/// QEMU's arguments for the machine disk: the image file `disk` as a virtio-blk device
/// (virtio-mmio), with the host's page cache in `cache=writeback` mode: a guest's flush becomes
/// an fsync of the file; `read_only`: the device refuses writes. The bench's native runs attach
/// their disk file with these too.
pub fn machine_disk_args(disk: &Path, read_only: bool) -> [String; 4] {
    let mut drive =
        format!("file={},if=none,format=raw,id=machine-disk,cache=writeback", disk.display());
    if read_only {
        drive.push_str(",readonly=on");
    }
    ["-drive".into(), drive, "-device".into(), "virtio-blk-device,drive=machine-disk".into()]
}

/// U-Boot's command that starts armhv loaded at `addr`: `booti` moves it to a 2 MiB-aligned
/// base + text_offset if it is not there (Image header flags bit 3), and enters it at EL2 with
/// the device tree in x0; `-`: no initrd.
pub fn booti_command(addr: u64) -> String {
    format!("booti {addr:#x} - ${{fdtcontroladdr}}")
}

/// `cmd` as one line for reports and logs (arguments with a space quoted).
pub fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let a = a.to_string_lossy();
            if a.contains(' ') { format!("\"{a}\"") } else { a.into_owned() }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Boots interactively: the console is this terminal. QEMU's own escape moves from Ctrl-A to
/// Ctrl-] (`-echr`), so that armhv's Ctrl-A commands reach armhv; Ctrl-] x quits QEMU.
pub fn run_interactive(image: &Path, m: &MachineSpec) -> Result<ExitStatus> {
    let mut cmd = command(image, m);
    cmd.args(["-nographic", "-echr", "0x1d"]);
    let icount = if m.icount { ", icount" } else { "" };
    eprintln!(
        "xtask: starting QEMU ({} x{}, {} MiB{icount}); Ctrl-A h: armhv's console commands; \
         Ctrl-] x quits QEMU",
        m.cpu, m.smp, m.mem_mib
    );
    if let Some(fw) = &m.firmware {
        eprintln!(
            "xtask: {} first, the boot image at {:#x}: stop its autoboot with a key, then type: {}",
            fw.bios.display(),
            fw.load_addr,
            booti_command(fw.load_addr)
        );
    }
    cmd.status().context("could not start qemu-system-aarch64")
}

/// A QEMU run whose console output is collected for assertions.
pub struct Run {
    /// Whether armhv failure reports end the wait (tests of the failure path turn this off).
    pub fail_on_report: bool,
    child: Child,
    output: Arc<(Mutex<String>, Condvar)>,
    status: Option<ExitStatus>,
    /// The run's scratch machine disk, deleted when the run drops, after QEMU has exited.
    scratch: Option<ScratchDisk>,
}

impl Run {
    /// Boots `image`, built from the config file `config`, with the machine disk the config's
    /// disks on partitions need ([`crate::disk::for_test`]): a scratch one of the run's own,
    /// laid out from the config's images and deleted with the run, or `machine.machine_disk`
    /// when set (laid out, and kept for a later run). A test only writes the config.
    pub fn start_config(config: &Path, image: &Path, machine: &MachineSpec) -> Result<Self> {
        let (machine, scratch) = crate::disk::for_test(config, machine)?;
        let mut run = Self::start(image, &machine)?;
        run.scratch = scratch;
        Ok(run)
    }

    pub fn start(image: &Path, m: &MachineSpec) -> Result<Self> {
        Self::spawn(command(image, m))
    }

    /// Starts `cmd`, a QEMU command line of the caller's (e.g. [`command`] with arguments
    /// added), with its serial console collected.
    pub fn spawn(mut cmd: Command) -> Result<Self> {
        cmd.args(["-display", "none", "-serial", "stdio", "-monitor", "none"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("could not start qemu-system-aarch64")?;
        let output = Arc::new((Mutex::new(String::new()), Condvar::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = output.clone();
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                let mut pending = String::new();
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                    // An erase sequence may be split across reads: keep a tail that starts one.
                    let keep = (1..ERASE_LINE.len())
                        .rev()
                        .find(|&k| pending.ends_with(&ERASE_LINE[..k]))
                        .unwrap_or(0);
                    let ready: String = pending.drain(..pending.len() - keep).collect();
                    append_console(&mut out.0.lock().unwrap(), &ready);
                    out.1.notify_all();
                }
            });
        }
        Ok(Self { fail_on_report: true, child, output, status: None, scratch: None })
    }

    pub fn output(&self) -> String {
        self.output.0.lock().unwrap().clone()
    }

    /// The console output from `mark` (a value of [`Run::mark`]) on.
    pub fn output_since(&self, mark: usize) -> String {
        self.output.0.lock().unwrap().get(mark..).unwrap_or("").to_owned()
    }

    /// Where the console output ends now: for [`Run::expect_since`]. If armhv later erases a
    /// partial line before the mark to print another line over it (and redraws it after), the
    /// output since the mark gains that line and the redrawn part: never loses anything. A
    /// pattern that ends a line should be waited for with its `\n`, so that a redrawn copy of
    /// it cannot match twice.
    pub fn mark(&self) -> usize {
        self.output.0.lock().unwrap().len()
    }

    /// Types `text` on the console (QEMU's serial input), as a user would.
    pub fn send(&mut self, text: &str) -> Result<()> {
        let stdin = self.child.stdin.as_mut().context("QEMU's stdin is closed")?;
        // Byte by byte with a pause, as typed: the UART's receive FIFO is small and a guest
        // that is busy would otherwise lose input.
        for b in text.bytes() {
            stdin.write_all(&[b])?;
            stdin.flush()?;
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    /// Waits until `pattern` appears in the console output.
    pub fn expect(&mut self, pattern: &str, timeout: Duration) -> Result<()> {
        self.expect_since(0, pattern, timeout)
    }

    /// Waits until `pattern` appears in the console output after `mark`.
    pub fn expect_since(&mut self, mark: usize, pattern: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let (lock, cvar) = &*self.output;
        let mut out = lock.lock().unwrap();
        loop {
            if let Some(bad) =
                FAILURE_PATTERNS.iter().find(|p| self.fail_on_report && out.contains(*p))
            {
                bail!("armhv reported a failure ({bad}) while waiting for {pattern:?}:\n{out}");
            }
            if out.get(mark..).is_some_and(|o| o.contains(pattern)) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {pattern:?}; console so far:\n{out}"
                );
            }
            if self.status.is_none()
                && let Ok(Some(st)) = self.child.try_wait()
            {
                self.status = Some(st);
            }
            if self.status.is_some() {
                // Let the reader threads drain, then one last look.
                drop(out);
                std::thread::sleep(Duration::from_millis(200));
                out = lock.lock().unwrap();
                if out.get(mark..).is_some_and(|o| o.contains(pattern)) {
                    return Ok(());
                }
                bail!(
                    "QEMU exited ({:?}) before {pattern:?} appeared; console:\n{out}",
                    self.status
                );
            }
            out =
                cvar.wait_timeout(out, (deadline - now).min(Duration::from_millis(100))).unwrap().0;
        }
    }

    /// Stops U-Boot's autoboot and starts armhv, at the machine's [`Firmware::load_addr`], with
    /// `booti` and the device tree U-Boot itself runs on (QEMU's, `fdtcontroladdr`). Returns
    /// the console mark before the command.
    pub fn booti(&mut self, m: &MachineSpec, timeout: Duration) -> Result<usize> {
        let fw = m.firmware.as_ref().context("the machine boots with -kernel, not firmware")?;
        self.expect("Hit any key to stop autoboot", timeout)?;
        self.send(" ")?;
        self.expect("=> ", timeout)?;
        let mark = self.mark();
        self.send(&format!("{}\r", booti_command(fw.load_addr)))?;
        Ok(mark)
    }

    /// Waits for QEMU to exit by itself (armhv powers the machine off when every VM has ended).
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.status {
                return Ok(st);
            }
            if let Some(st) = self.child.try_wait()? {
                self.status = Some(st);
                std::thread::sleep(Duration::from_millis(200));
                return Ok(st);
            }
            if Instant::now() >= deadline {
                bail!("QEMU still running after {timeout:?}; console:\n{}", self.output());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // QEMU is gone: its scratch disk can go.
        self.scratch.take();
    }
}

#[cfg(test)]
mod tests {
    use super::append_console;

    #[test]
    fn erased_partial_lines_leave_no_fragment() {
        let mut t = String::new();
        append_console(&mut t, "[a] one\r\n[b] pro");
        append_console(&mut t, "mpt\r\x1b[2K[a] two\n[b] prompt");
        append_console(&mut t, "\r\x1b[2K[a] three\n[b] prompt# ls\n");
        assert_eq!(t, "[a] one\n[a] two\n[a] three\n[b] prompt# ls\n");
    }
}
