//! Driver for the physical PL011 UART, the machine's one console: polled transmit, and receive
//! by interrupt (console input for the VMs).

const DR: usize = 0x000;
const FR: usize = 0x018;
const IMSC: usize = 0x038;
/// FR.RXFE: receive FIFO empty; FR.TXFF: transmit FIFO full.
const FR_RXFE: u32 = 1 << 4;
const FR_TXFF: u32 = 1 << 5;
/// Receive and receive-timeout interrupts: a byte is waiting.
const INT_RX: u32 = 1 << 4;
const INT_RT: u32 = 1 << 6;

/// A handle on the UART's registers. It holds no state of its own, only their address, so
/// copies of it may be used at once: the console serializes its own use with its lock, and the
/// fatal path writes through a copy without that lock (`console::fatal_output`).
#[derive(Clone, Copy)]
pub struct Pl011 {
    base: *mut u32,
}

// SAFETY: the UART's registers are a fixed MMIO window, and every method is one or two single
// 32-bit volatile accesses to them, with no memory of armhv's behind the pointer. Used from
// several CPUs at once, the hardware serializes the accesses: bytes written by two CPUs
// interleave (or one is lost if the transmit FIFO fills between a CPU's check and its write),
// and a received byte goes to one of two readers; nothing else can go wrong.
unsafe impl Send for Pl011 {}
// SAFETY: as for `Send`.
unsafe impl Sync for Pl011 {}

impl Pl011 {
    /// # Safety
    /// `base` must be the physical (identity-mapped) address of a PL011's register frame, and
    /// armhv alone may drive that UART (several handles on it are fine, see [`Pl011`]).
    pub const unsafe fn new(base: usize) -> Self {
        Self { base: base as *mut u32 }
    }

    pub fn write_byte(&self, byte: u8) {
        // SAFETY: `base` points at the PL011's 4 KiB register frame (constructor contract);
        // FR and DR are within it and accessed as 32-bit device registers.
        unsafe {
            while self.base.byte_add(FR).read_volatile() & FR_TXFF != 0 {
                core::hint::spin_loop();
            }
            self.base.byte_add(DR).write_volatile(byte as u32);
        }
    }

    /// The next received byte, if any (reading it clears the receive interrupt once the FIFO
    /// is empty).
    pub fn read_byte(&self) -> Option<u8> {
        // SAFETY: as in `write_byte`.
        unsafe {
            if self.base.byte_add(FR).read_volatile() & FR_RXFE != 0 {
                return None;
            }
            Some(self.base.byte_add(DR).read_volatile() as u8)
        }
    }

    /// Raises the UART's interrupt whenever input is waiting.
    pub fn enable_rx_interrupt(&self) {
        // SAFETY: as in `write_byte`; IMSC only selects which conditions interrupt.
        unsafe { self.base.byte_add(IMSC).write_volatile(INT_RX | INT_RT) };
    }
}
