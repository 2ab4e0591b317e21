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

pub struct Pl011 {
    base: *mut u32,
}

// SAFETY: the UART's registers are a fixed MMIO window; access is serialized by the console lock.
unsafe impl Send for Pl011 {}

impl Pl011 {
    /// # Safety
    /// `base` must be the physical (identity-mapped) address of a PL011's register frame, and
    /// nothing else may drive that UART.
    pub const unsafe fn new(base: usize) -> Self {
        Self { base: base as *mut u32 }
    }

    pub fn write_byte(&mut self, byte: u8) {
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
    pub fn read_byte(&mut self) -> Option<u8> {
        // SAFETY: as in `write_byte`.
        unsafe {
            if self.base.byte_add(FR).read_volatile() & FR_RXFE != 0 {
                return None;
            }
            Some(self.base.byte_add(DR).read_volatile() as u8)
        }
    }

    /// Raises the UART's interrupt whenever input is waiting.
    pub fn enable_rx_interrupt(&mut self) {
        // SAFETY: as in `write_byte`; IMSC only selects which conditions interrupt.
        unsafe { self.base.byte_add(IMSC).write_volatile(INT_RX | INT_RT) };
    }
}
