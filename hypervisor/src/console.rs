//! The one physical console shared by armhv and every VM, and armhv's leveled logger.
//!
//! What goes on the console, and how lines of several VMs and armhv's log stay whole, is the
//! line discipline in `vdev::console`; this is its physical UART and its lock.

use crate::arch::aarch64::cpu;
use crate::drivers::pl011::Pl011;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use spin::Once;
use vdev::console::{LineConsole, Terminal};
use vmm::sync::{Class, Lock, LockGuard};

// # When armhv itself fails
//
// A panic or a fatal exception must get its report out even when the console lock is held by
// a CPU that will never let it go: the failing CPU itself (a panic inside the console's critical
// section, e.g. in a `Display` impl of a log line, or a fault in it), or another CPU that died or
// hangs there. The lock is never broken: whoever holds it has a `&mut Console` that is live
// until its critical section ends, and a second `&mut` to the same data, from another CPU or
// from the interrupted CPU's fatal path, would be undefined behaviour (and a data race on the
// line state, with the other CPU alive). Instead:
//
// * The lock records its holder (`OWNER`). A fatal path that finds it held by its own CPU knows
//   the holder was interrupted by this failure and never resumes: it marks the console
//   abandoned (`ABANDONED`), and from then on everyone, this CPU and the others, writes through
//   `RAW_UART`, a copy of the UART handle used without the lock, and never touches `CONSOLE`
//   again. Lines stay whole but are no longer coordinated (an open line is not redrawn): each
//   output through `RAW_UART` takes `RAW_WRITER` for its lines, a flag whose wait is bounded
//   (`RAW_WAIT_US`) and which its own CPU never waits for, so a failure while holding it
//   cannot stop the output of anyone.
// * A fatal path on any other CPU waits a bounded time (`FATAL_WAIT_US`) for the lock; if it
//   does not get it, it writes its report through `RAW_UART` as well, its characters possibly
//   interleaved with the holder's.
//
// Writing through `RAW_UART` while another CPU writes through the console's own handle is sound:
// a `Pl011` holds no state, only the registers' address, and each access is a single volatile
// MMIO access (see `drivers::pl011`). The console is taken only with `try_lock` in a loop that
// looks at `ABANDONED`, so a CPU waiting for it when it is abandoned stops waiting.

struct Console {
    uart: Uart,
    lines: LineConsole<{ vmconfig::MAX_VMS }>,
}

static CONSOLE: Lock<Option<Console>> = Lock::new(Class::Console, None);
/// The CPU holding `CONSOLE`, or `NO_OWNER`: set by the holder right after taking it and
/// cleared right before releasing it, so a CPU reading its own number here holds the lock.
static OWNER: AtomicUsize = AtomicUsize::new(NO_OWNER);
const NO_OWNER: usize = usize::MAX;
/// Set once for good when a CPU failed inside the console's critical section: `CONSOLE` stays
/// locked by code that never resumes, and all output goes through `RAW_UART`.
static ABANDONED: AtomicBool = AtomicBool::new(false);
/// The UART, for output without the console lock.
static RAW_UART: Once<Pl011> = Once::new();
/// How long a report of armhv's own failure waits for another CPU to release the console.
const FATAL_WAIT_US: u64 = 100_000;
/// The CPU writing whole lines through `RAW_UART`, or `NO_OWNER`.
static RAW_WRITER: AtomicUsize = AtomicUsize::new(NO_OWNER);
/// How long a raw write waits for another CPU's lines before it writes anyway.
const RAW_WAIT_US: u64 = 10_000;

/// Lines written through `RAW_UART`, kept whole against the other CPUs' raw lines while held.
struct RawWriter {
    uart: Uart,
    /// This writer set `RAW_WRITER` (and clears it when dropped).
    owns: bool,
}

impl RawWriter {
    /// The raw UART, for this CPU's next lines: once the other CPUs' raw lines are done, or
    /// after `RAW_WAIT_US` (a CPU that died holding the flag), or at once if this CPU holds it
    /// already (a failure while it wrote).
    fn take() -> Option<Self> {
        let uart = Uart(*RAW_UART.get()?);
        let me = cpu::current();
        let start = crate::time::uptime_micros();
        loop {
            match RAW_WRITER.compare_exchange(NO_OWNER, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(Self { uart, owns: true }),
                Err(holder) if holder == me => return Some(Self { uart, owns: false }),
                Err(_) if crate::time::uptime_micros().saturating_sub(start) > RAW_WAIT_US => {
                    return Some(Self { uart, owns: false });
                }
                Err(_) => cpu::relax(),
            }
        }
    }
}

impl Drop for RawWriter {
    fn drop(&mut self) {
        if self.owns {
            RAW_WRITER.store(NO_OWNER, Ordering::Release);
        }
    }
}

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
    let uart = unsafe { Pl011::new(base) };
    RAW_UART.call_once(|| uart);
    if let Some(mut held) = hold() {
        *held.0 = Some(Console { uart: Uart(uart), lines: LineConsole::new() });
    }
}

/// The console lock, its holder recorded; `OWNER` is cleared before the lock is released.
struct Held(LockGuard<'static, Option<Console>>);

impl Drop for Held {
    fn drop(&mut self) {
        OWNER.store(NO_OWNER, Ordering::Relaxed);
    }
}

/// Takes the console lock, or `None` once the console is abandoned (write raw).
fn hold() -> Option<Held> {
    loop {
        if let Some(held) = try_hold() {
            return Some(held);
        }
        if ABANDONED.load(Ordering::Acquire) {
            return None;
        }
        cpu::relax();
    }
}

fn try_hold() -> Option<Held> {
    if ABANDONED.load(Ordering::Acquire) {
        return None;
    }
    let guard = CONSOLE.try_lock_in_wait()?;
    OWNER.store(cpu::current(), Ordering::Relaxed);
    Some(Held(guard))
}

/// Where output goes: the console under its lock, or the raw UART once the console is
/// abandoned (see the top of this file).
enum Out {
    Console(Held),
    Raw(RawWriter),
}

fn out() -> Option<Out> {
    match hold() {
        Some(held) => Some(Out::Console(held)),
        None => RawWriter::take().map(Out::Raw),
    }
}

impl Out {
    /// The console's lines and UART; raw, a line discipline of its own for this output alone
    /// (for no VM: small, and it keeps no open line).
    fn with(&mut self, f: impl FnOnce(&mut dyn Lines, &mut Uart)) {
        match self {
            Out::Console(held) => {
                if let Some(c) = held.0.as_mut() {
                    f(&mut c.lines, &mut c.uart);
                }
            }
            Out::Raw(raw) => f(&mut LineConsole::<0>::new(), &mut raw.uart),
        }
    }

    fn uart(&mut self) -> Option<&mut Uart> {
        match self {
            Out::Console(held) => held.0.as_mut().map(|c| &mut c.uart),
            Out::Raw(raw) => Some(&mut raw.uart),
        }
    }
}

/// A `LineConsole` of any size.
trait Lines {
    fn line(&mut self, t: &mut Uart, print: &mut dyn FnMut(&mut Uart));
    fn vm_line(&mut self, t: &mut Uart, vm: usize, name: &str, line: &[u8]);
    fn vm_partial(&mut self, t: &mut Uart, vm: usize, name: &str, text: &[u8]);
    fn prompt(&mut self, t: &mut Uart, text: &[u8]);
    fn end_prompt(&mut self, t: &mut Uart, keep: bool);
}

impl<const N: usize> Lines for LineConsole<N> {
    fn line(&mut self, t: &mut Uart, print: &mut dyn FnMut(&mut Uart)) {
        LineConsole::line(self, t, print);
    }
    fn vm_line(&mut self, t: &mut Uart, vm: usize, name: &str, line: &[u8]) {
        LineConsole::vm_line(self, t, vm, name, line);
    }
    fn vm_partial(&mut self, t: &mut Uart, vm: usize, name: &str, text: &[u8]) {
        LineConsole::vm_partial(self, t, vm, name, text);
    }
    fn prompt(&mut self, t: &mut Uart, text: &[u8]) {
        LineConsole::prompt(self, t, text);
    }
    fn end_prompt(&mut self, t: &mut Uart, keep: bool) {
        LineConsole::end_prompt(self, t, keep);
    }
}

/// Prints one line under the console lock.
pub fn print_line(args: fmt::Arguments) {
    if let Some(mut out) = out() {
        out.with(|lines, uart| {
            lines.line(uart, &mut |u| {
                let _ = u.write_fmt(args);
            })
        });
    }
}

/// Prints a line of VM `vm`'s console output, tagged with its name.
pub fn print_vm_line(vm: usize, vm_name: &str, line: &[u8]) {
    if let Some(mut out) = out() {
        out.with(|lines, uart| lines.vm_line(uart, vm, vm_name, line));
    }
}

/// Prints the start of a line of VM `vm`'s output; the line stays open for more.
pub fn print_vm_partial(vm: usize, vm_name: &str, text: &[u8]) {
    if let Some(mut out) = out() {
        out.with(|lines, uart| lines.vm_partial(uart, vm, vm_name, text));
    }
}

/// Draws armhv's command line (`text`: prompt and typing) as the console's open line.
pub fn print_prompt(text: &[u8]) {
    if let Some(mut out) = out() {
        out.with(|lines, uart| lines.prompt(uart, text));
    }
}

/// Ends armhv's command line, kept in the transcript (`keep`) or erased.
pub fn end_prompt(keep: bool) {
    if let Some(mut out) = out() {
        out.with(|lines, uart| lines.end_prompt(uart, keep));
    }
}

/// Makes the physical UART interrupt when input arrives.
pub fn enable_input_interrupt() {
    if let Some(uart) = out().as_mut().and_then(Out::uart) {
        uart.0.enable_rx_interrupt();
    }
}

/// Takes every byte of input waiting at the physical UART (at most `N` at a time, so the lock
/// is not held for long).
pub fn read_input<const N: usize>() -> heapless::Vec<u8, N> {
    let mut bytes = heapless::Vec::new();
    if let Some(uart) = out().as_mut().and_then(Out::uart) {
        while !bytes.is_full() {
            match uart.0.read_byte() {
                Some(b) => {
                    let _ = bytes.push(b);
                }
                None => break,
            }
        }
    }
    bytes
}

/// Where a report of armhv's own failure (a panic, a fatal exception) goes: the console, if
/// its lock can be had soon, else the raw UART (see the top of this file). Never waits for
/// long, never breaks the lock. Held for the whole report, so its lines stay together.
pub struct FatalOutput(Option<Held>);

/// Starts a report of armhv's own failure on this CPU. Not for anything else: it gives up the
/// console for good if this CPU holds its lock.
pub fn fatal_output() -> FatalOutput {
    let me = cpu::current();
    // What this CPU holds stays held: the CPUs that wait for it give up (`vmm::sync`).
    vmm::sync::cpu_failed(me);
    let start = crate::time::uptime_micros();
    loop {
        if let Some(held) = try_hold() {
            return FatalOutput(Some(held));
        }
        if OWNER.load(Ordering::Relaxed) == me {
            // This CPU holds the lock in code this failure interrupted, which never resumes.
            ABANDONED.store(true, Ordering::Release);
        }
        if ABANDONED.load(Ordering::Acquire)
            || crate::time::uptime_micros().saturating_sub(start) > FATAL_WAIT_US
        {
            // The holder may have been in the middle of a line: the report starts a new one.
            if let Some(mut raw) = RawWriter::take() {
                Terminal::write(&mut raw.uart, b"\n");
            }
            return FatalOutput(None);
        }
        cpu::relax();
    }
}

/// Panics while printing a line, inside the console's critical section: the abandoned
/// console's test.
#[cfg(feature = "fault-injection")]
pub fn provoke_panic_in_console() -> ! {
    struct Panics;
    impl fmt::Display for Panics {
        fn fmt(&self, _: &mut fmt::Formatter) -> fmt::Result {
            panic!("a log line's argument panicked while it was printed")
        }
    }
    print_line(format_args!("about to panic: {Panics}"));
    unreachable!("formatting the line did not panic")
}

impl FatalOutput {
    /// Prints one line of the report, as an error-level log line.
    pub fn line(&mut self, args: fmt::Arguments) {
        let micros = crate::time::uptime_micros();
        let cpu = cpu::current();
        let print = |u: &mut Uart| {
            let _ = write!(
                u,
                "[{:>4}.{:06} armhv ERROR cpu{cpu}] {args}",
                micros / 1_000_000,
                micros % 1_000_000
            );
        };
        match self.0.as_mut().and_then(|held| held.0.as_mut()) {
            Some(c) => c.lines.line(&mut c.uart, print),
            None => {
                if let Some(mut raw) = RawWriter::take() {
                    LineConsole::<0>::new().line(&mut raw.uart, print);
                }
            }
        }
    }
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
