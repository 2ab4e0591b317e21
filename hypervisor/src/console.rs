//! The one physical console shared by armhv and every VM, and armhv's leveled logger.
//!
//! Each VM's output arrives as whole lines and is printed tagged with the VM's name, so the
//! lines of VMs running on different CPUs at the same time never interleave mid-line.

use crate::arch::aarch64::cpu;
use crate::drivers::pl011::Pl011;
use core::fmt::{self, Write};
use spin::Mutex;

static CONSOLE: Mutex<Option<Pl011>> = Mutex::new(None);

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
    *CONSOLE.lock() = Some(unsafe { Pl011::new(base) });
}

/// Prints one line under the console lock.
pub fn print_line(args: fmt::Arguments) {
    let mut guard = CONSOLE.lock();
    if let Some(uart) = guard.as_mut() {
        let mut w = Writer(uart);
        let _ = w.write_fmt(args);
        let _ = w.write_str("\n");
    }
}

/// Prints a line of a VM's console output, tagged with its name.
pub fn print_vm_line(vm_name: &str, line: &[u8]) {
    let mut guard = CONSOLE.lock();
    if let Some(uart) = guard.as_mut() {
        let mut w = Writer(uart);
        let _ = write!(w, "[{}] ", vm_name);
        for &b in line {
            // Control characters other than tab would confuse the shared terminal.
            let b = if b == b'\t' || (0x20..0x7f).contains(&b) { b } else { b'?' };
            w.0.write_byte(b);
        }
        let _ = w.write_str("\n");
    }
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
