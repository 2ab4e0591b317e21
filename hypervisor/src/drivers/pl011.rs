//! Transmit-only driver for the physical PL011 UART, the machine's one console.

const DR: usize = 0x000;
const FR: usize = 0x018;
/// FR.TXFF: transmit FIFO full.
const FR_TXFF: u32 = 1 << 5;

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
}
