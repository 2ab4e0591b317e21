//! The one physical console shared by armhv and every VM, and armhv's leveled logger.
//!
//! Each VM's output arrives as whole lines and is printed tagged with the VM's name, so the
//! lines of VMs running on different CPUs at the same time never interleave mid-line. The VM
//! that has the console's input (`vmm::console_mux`) may also print part of a line (a prompt,
//! the echo of what is typed). That line stays open; if anything else must be printed first,
//! the open line is ended, the other line printed, and the open line redrawn in full, so every
//! line still appears whole.

use crate::arch::aarch64::cpu;
use crate::drivers::pl011::Pl011;
use core::fmt::{self, Write};
use spin::Mutex;

/// How much of an open line is kept for redrawing; a longer one is redrawn cut short.
const OPEN_LINE_MAX: usize = 256;
/// Back to the line's start and clear it (ECMA-48 CR, EL 2). A guest cannot produce it: its
/// `\r` are dropped (`put_vm_bytes`), so transcripts can apply it too (xtask's `qemu::Run`).
const ERASE_LINE: &str = "\r\x1b[2K";

/// A VM's partly printed line.
struct OpenLine {
    vm: usize,
    name: heapless::String<32>,
    text: heapless::Vec<u8, OPEN_LINE_MAX>,
}

struct Console {
    uart: Pl011,
    open: Option<OpenLine>,
}

static CONSOLE: Mutex<Option<Console>> = Mutex::new(None);

impl Console {
    /// Prints a whole line of someone else's (`print` writes it without its `\n`): an open
    /// line is erased first (so no fragment of it stays on the terminal or in a transcript)
    /// and redrawn after.
    fn print_between(&mut self, print: impl FnOnce(&mut Self)) {
        if self.open.is_some() {
            let _ = Writer(&mut self.uart).write_str(ERASE_LINE);
        }
        print(self);
        let _ = Writer(&mut self.uart).write_str("\n");
        if let Some(open) = self.open.take() {
            self.tag(&open.name);
            self.put_vm_bytes(&open.text);
            self.open = Some(open);
        }
    }

    fn tag(&mut self, name: &str) {
        let _ = write!(Writer(&mut self.uart), "[{name}] ");
    }

    fn put_vm_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            // Tab, backspace and escape sequences are the guest's business with the terminal;
            // other control characters would confuse it (and \r comes with each \n).
            let b = if b == b'\t' || b == 0x08 || b == 0x1b || (0x20..0x7f).contains(&b) {
                b
            } else if b == b'\r' {
                continue;
            } else {
                b'?'
            };
            self.uart.write_byte(b);
        }
    }
}

struct Writer<'a>(&'a mut Pl011);

impl Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.0.write_byte(b'\r');
            }
            self.0.write_byte(b);
        }
        Ok(())
    }
}

/// # Safety
/// `base` must be the address of the PL011 the device tree names as stdout, identity-mapped.
pub unsafe fn init(base: usize) {
    // SAFETY: forwarded from the caller.
    *CONSOLE.lock() = Some(Console { uart: unsafe { Pl011::new(base) }, open: None });
}

/// Prints one line under the console lock.
pub fn print_line(args: fmt::Arguments) {
    let mut guard = CONSOLE.lock();
    if let Some(c) = guard.as_mut() {
        c.print_between(|c| {
            let _ = Writer(&mut c.uart).write_fmt(args);
        });
    }
}

/// Prints a line of VM `vm`'s console output, tagged with its name.
pub fn print_vm_line(vm: usize, vm_name: &str, line: &[u8]) {
    let mut guard = CONSOLE.lock();
    let Some(c) = guard.as_mut() else { return };
    if c.open.as_ref().is_some_and(|o| o.vm == vm) {
        // The end of its own open line.
        c.open = None;
        c.put_vm_bytes(line);
        let _ = Writer(&mut c.uart).write_str("\n");
        return;
    }
    c.print_between(|c| {
        c.tag(vm_name);
        c.put_vm_bytes(line);
    });
}

/// Prints the start of a line of VM `vm`'s output; the line stays open for more.
pub fn print_vm_partial(vm: usize, vm_name: &str, text: &[u8]) {
    let mut guard = CONSOLE.lock();
    let Some(c) = guard.as_mut() else { return };
    if c.open.as_ref().is_some_and(|o| o.vm != vm) {
        // Focus moved on while another VM's line was open: that line is ended as it stands.
        c.open = None;
        let _ = Writer(&mut c.uart).write_str("\n");
    }
    if c.open.is_none() {
        c.tag(vm_name);
        let mut name = heapless::String::new();
        for ch in vm_name.chars() {
            if name.push(ch).is_err() {
                break;
            }
        }
        c.open = Some(OpenLine { vm, name, text: heapless::Vec::new() });
    }
    c.put_vm_bytes(text);
    if let Some(open) = c.open.as_mut() {
        let room = OPEN_LINE_MAX - open.text.len();
        let _ = open.text.extend_from_slice(&text[..text.len().min(room)]);
    }
}

/// Makes the physical UART interrupt when input arrives.
pub fn enable_input_interrupt() {
    if let Some(c) = CONSOLE.lock().as_mut() {
        c.uart.enable_rx_interrupt();
    }
}

/// Takes every byte of input waiting at the physical UART (at most `N` at a time, so the lock
/// is not held for long).
pub fn read_input<const N: usize>() -> heapless::Vec<u8, N> {
    let mut bytes = heapless::Vec::new();
    if let Some(c) = CONSOLE.lock().as_mut() {
        while !bytes.is_full() {
            match c.uart.read_byte() {
                Some(b) => {
                    let _ = bytes.push(b);
                }
                None => break,
            }
        }
    }
    bytes
}

/// Breaks the console lock if a CPU died holding it, so the fatal report still gets out.
pub fn emergency_unlock() {
    for _ in 0..1000 {
        if !CONSOLE.is_locked() {
            return;
        }
        core::hint::spin_loop();
    }
    // SAFETY: only used on the fatal path, when the holder can no longer be trusted to release
    // it; the worst outcome is interleaved characters.
    unsafe { CONSOLE.force_unlock() };
}

struct Logger;

static LOGGER: Logger = Logger;

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let micros = crate::time::uptime_micros();
        print_line(format_args!(
            "[{:>4}.{:06} armhv {:5} cpu{}] {}",
            micros / 1_000_000,
            micros % 1_000_000,
            record.level(),
            cpu::current(),
            record.args()
        ));
    }

    fn flush(&self) {}
}

/// The log level is chosen at build time: `ARMHV_LOG=debug make run`.
pub fn init_logger() {
    let level = match option_env!("ARMHV_LOG") {
        Some("error") => log::LevelFilter::Error,
        Some("warn") => log::LevelFilter::Warn,
        Some("debug") => log::LevelFilter::Debug,
        Some("trace") => log::LevelFilter::Trace,
        _ => log::LevelFilter::Info,
    };
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
