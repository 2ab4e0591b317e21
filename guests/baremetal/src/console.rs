//! Polled PL011 output and `println!`.
//!
//! The UART is used as the boot loader left it (as Linux's earlycon does): no
//! baud rate or enable bits are written, only the data register.

use core::cell::UnsafeCell;
use core::fmt::{self, Write};

/// Used until the device tree has been read: the guest ABI's (and QEMU virt's) PL011.
pub const DEFAULT_UART: u64 = guest_abi::map::UART_BASE.0;

const UARTDR: u64 = 0x000;
const UARTFR: u64 = 0x018;
const UARTFR_TXFF: u32 = 1 << 5;

/// A word-sized global set by one CPU while no other CPU is reading it.
///
/// Plain volatile accesses instead of atomics: with the MMU off all memory is
/// Device-nGnRnE, where exclusive loads and stores are not guaranteed to work.
/// Aligned 64-bit accesses are single-copy atomic on AArch64. It has the
/// layout of `T`, so `repr(C)` structures of them can describe memory that a
/// device reads and writes too (virtqueues).
#[repr(transparent)]
pub struct Global<T: Copy>(UnsafeCell<T>);

// SAFETY: see the type's comment: writers are serialised by the program's
// structure (the primary sets globals before starting any other CPU).
unsafe impl<T: Copy> Sync for Global<T> {}

impl<T: Copy> Global<T> {
    pub const fn new(value: T) -> Self {
        Self(UnsafeCell::new(value))
    }

    pub fn get(&self) -> T {
        // SAFETY: the pointer is valid and aligned; see `Sync` above for races.
        unsafe { self.0.get().read_volatile() }
    }

    pub fn set(&self, value: T) {
        // SAFETY: as in `get`.
        unsafe { self.0.get().write_volatile(value) }
    }
}

static UART_BASE: Global<u64> = Global::new(DEFAULT_UART);
static UART_SBSA: Global<bool> = Global::new(false);

/// The console UART is at `base`; `sbsa`: it is an SBSA generic UART, which has only part of
/// a PL011's registers (its data, flag, interrupt mask, status and clear registers).
pub fn set_uart(base: u64, sbsa: bool) {
    UART_BASE.set(base);
    UART_SBSA.set(sbsa);
}

/// The console is an SBSA generic UART (a PL011 subset), not a full PL011.
pub fn uart_is_sbsa() -> bool {
    UART_SBSA.get()
}

pub fn uart_base() -> u64 {
    UART_BASE.get()
}

/// Reads a 32-bit PL011 register.
pub fn read_reg(offset: u64) -> u32 {
    // SAFETY: the PL011 register frame is 4 KiB of device registers at the
    // address the device tree gave; reads of the ID and flag registers have no
    // side effects.
    unsafe { ((uart_base() + offset) as *const u32).read_volatile() }
}

fn put_byte(byte: u8) {
    while read_reg(UARTFR) & UARTFR_TXFF != 0 {
        core::hint::spin_loop();
    }
    // SAFETY: UARTDR of the PL011; writing it queues one byte for transmission.
    unsafe { ((uart_base() + UARTDR) as *mut u32).write_volatile(u32::from(byte)) }
}

pub struct Console;

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for byte in s.bytes() {
            if byte == b'\n' {
                put_byte(b'\r');
            }
            put_byte(byte);
        }
        Ok(())
    }
}

pub fn print(args: fmt::Arguments) {
    // Console never fails.
    let _ = Console.write_fmt(args);
}

#[macro_export]
macro_rules! println {
    ($($arg:tt)*) => {
        $crate::console::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}
