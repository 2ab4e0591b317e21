//! The one physical console shared by armhv and every VM, and armhv's leveled logger.
//!
//! What goes on the console, and how lines of several VMs and armhv's log stay whole, is the
//! line discipline in `vdev::console`; this is its physical UART and its lock.

use crate::arch::aarch64::cpu;
use crate::drivers::pl011::Pl011;
use core::fmt::{self, Write};
use spin::Mutex;
use vdev::console::{LineConsole, Terminal};

struct Console {
    uart: Uart,
    lines: LineConsole<{ vmconfig::MAX_VMS }>,
}

static CONSOLE: Mutex<Option<Console>> = Mutex::new(None);

struct Uart(Pl011);

impl Terminal for Uart {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.0.write_byte(b'\r');
            }
            self.0.write_byte(b);
        }
    }
}

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        Terminal::write(self, s.as_bytes());
        Ok(())
    }
}

/// # Safety
/// `base` must be the address of the PL011 the device tree names as stdout, identity-mapped.
pub unsafe fn init(base: usize) {
    // SAFETY: forwarded from the caller.
    let uart = Uart(unsafe { Pl011::new(base) });
    *CONSOLE.lock() = Some(Console { uart, lines: LineConsole::new() });
}

/// Prints one line under the console lock.
pub fn print_line(args: fmt::Arguments) {
    if let Some(c) = CONSOLE.lock().as_mut() {
        c.lines.line(&mut c.uart, |u| {
            let _ = u.write_fmt(args);
        });
    }
}

/// Prints a line of VM `vm`'s console output, tagged with its name.
pub fn print_vm_line(vm: usize, vm_name: &str, line: &[u8]) {
    if let Some(c) = CONSOLE.lock().as_mut() {
        c.lines.vm_line(&mut c.uart, vm, vm_name, line);
    }
}

/// Prints the start of a line of VM `vm`'s output; the line stays open for more.
pub fn print_vm_partial(vm: usize, vm_name: &str, text: &[u8]) {
    if let Some(c) = CONSOLE.lock().as_mut() {
        c.lines.vm_partial(&mut c.uart, vm, vm_name, text);
    }
}

/// Makes the physical UART interrupt when input arrives.
pub fn enable_input_interrupt() {
    if let Some(c) = CONSOLE.lock().as_mut() {
        c.uart.0.enable_rx_interrupt();
    }
}

/// Takes every byte of input waiting at the physical UART (at most `N` at a time, so the lock
/// is not held for long).
pub fn read_input<const N: usize>() -> heapless::Vec<u8, N> {
    let mut bytes = heapless::Vec::new();
    if let Some(c) = CONSOLE.lock().as_mut() {
        while !bytes.is_full() {
            match c.uart.0.read_byte() {
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
