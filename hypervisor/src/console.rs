//! The one physical console shared by armhv and every VM, and armhv's leveled logger.
//!
//! Each VM's output arrives as whole lines and is printed tagged with the VM's name, so the
//! lines of VMs running on different CPUs at the same time never interleave mid-line. The VM
//! that has the console's input (`vmm::console_mux`) may also print part of a line (a prompt,
//! the echo of what is typed); the line stays open until it ends or someone else prints, which
//! first closes it.

use crate::arch::aarch64::cpu;
use crate::drivers::pl011::Pl011;
use core::fmt::{self, Write};
use spin::Mutex;

struct Console {
    uart: Pl011,
    /// The VM (id) whose partly printed line is open on the terminal.
    open: Option<usize>,
}

static CONSOLE: Mutex<Option<Console>> = Mutex::new(None);

impl Console {
    /// Ends another VM's open line, then tags the start of a new one for `vm` unless its own
    /// line is open.
    fn start_vm_text(&mut self, vm: usize, name: &str) {
        if self.open == Some(vm) {
            return;
        }
        self.close_line();
        let _ = write!(Writer(&mut self.uart), "[{name}] ");
    }

    fn close_line(&mut self) {
        if self.open.take().is_some() {
            let _ = Writer(&mut self.uart).write_str("\n");
        }
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
        c.close_line();
        let mut w = Writer(&mut c.uart);
        let _ = w.write_fmt(args);
        let _ = w.write_str("\n");
    }
}

/// Prints a line of VM `vm`'s console output, tagged with its name.
pub fn print_vm_line(vm: usize, vm_name: &str, line: &[u8]) {
    let mut guard = CONSOLE.lock();
    if let Some(c) = guard.as_mut() {
        c.start_vm_text(vm, vm_name);
        c.put_vm_bytes(line);
        c.open = None;
        let _ = Writer(&mut c.uart).write_str("\n");
    }
}

/// Prints the start of a line of VM `vm`'s output; the line stays open for more.
pub fn print_vm_partial(vm: usize, vm_name: &str, text: &[u8]) {
    let mut guard = CONSOLE.lock();
    if let Some(c) = guard.as_mut() {
        c.start_vm_text(vm, vm_name);
        c.put_vm_bytes(text);
        c.open = Some(vm);
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
