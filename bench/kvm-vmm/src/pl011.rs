//! The guest's console: a PL011 (ARM DDI 0183) emulated in user space, reached by a KVM MMIO
//! exit on every access. It transmits at once (so the flag register always shows an empty
//! transmit FIFO) and never receives; writes to other registers are accepted and ignored,
//! which is what vmbench's `pl011-write` (a store to UARTILPR) times.

use crate::layout::{UART_BASE, UART_SIZE};

pub const UARTDR: u64 = 0x000;
pub const UARTFR: u64 = 0x018;
pub const UARTILPR: u64 = 0x020;
/// UARTFR.TXFE (transmit FIFO empty) and RXFE (receive FIFO empty).
const FR_TXFE: u32 = 1 << 7;
const FR_RXFE: u32 = 1 << 4;
/// UARTPeriphID0..3 and UARTPCellID0..3 (0xFE0..0xFFC): a PL011 r1p5, as QEMU's.
const ID_BASE: u64 = 0xFE0;
const IDS: [u32; 8] = [0x11, 0x10, 0x14, 0x00, 0x0D, 0xF0, 0x05, 0xB1];

/// One decoded MMIO access to the UART page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Offset in the page.
    pub offset: u64,
    /// Bytes: 1, 2, 4 or 8.
    pub width: usize,
}

/// The UART register an exit at `addr` of `width` bytes touches, or why it is not one.
pub fn decode(addr: u64, width: usize) -> Result<Access, String> {
    if !(UART_BASE..UART_BASE + UART_SIZE).contains(&addr) {
        return Err(format!("{addr:#x} is outside the UART page at {UART_BASE:#x}"));
    }
    if !matches!(width, 1 | 2 | 4 | 8) {
        return Err(format!("a {width}-byte access at {addr:#x}"));
    }
    Ok(Access { offset: addr - UART_BASE, width })
}

/// What a read returns.
pub fn read(a: Access) -> u32 {
    match a.offset {
        UARTFR => FR_TXFE | FR_RXFE,
        o if (ID_BASE..ID_BASE + 32).contains(&o) && o % 4 == 0 => {
            IDS[((o - ID_BASE) / 4) as usize]
        }
        // UARTDR with nothing received, and the rest: reset values that matter to no one here.
        _ => 0,
    }
}

/// The byte a write transmits, if it is one (a write to UARTDR); other writes change nothing.
pub fn write(a: Access, data: &[u8]) -> Option<u8> {
    (a.offset == UARTDR).then(|| data.first().copied()).flatten()
}

/// Little-endian bytes of `value` for a read of `width` bytes.
pub fn fill(value: u32, out: &mut [u8]) {
    let bytes = u64::from(value).to_le_bytes();
    let n = out.len().min(8);
    out[..n].copy_from_slice(&bytes[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_offsets_inside_the_page_only() {
        assert_eq!(decode(UART_BASE + 0x20, 4), Ok(Access { offset: UARTILPR, width: 4 }));
        assert!(decode(UART_BASE + UART_SIZE, 4).unwrap_err().contains("outside"));
        assert!(decode(UART_BASE - 4, 4).is_err());
        assert!(decode(UART_BASE, 3).unwrap_err().contains("3-byte"));
    }

    #[test]
    fn transmits_data_register_bytes_and_ignores_the_rest() {
        let dr = decode(UART_BASE, 4).unwrap();
        assert_eq!(write(dr, &[b'v', 0, 0, 0]), Some(b'v'));
        assert_eq!(write(decode(UART_BASE + UARTILPR, 4).unwrap(), &[0; 4]), None);
        assert_eq!(write(dr, &[]), None);
    }

    #[test]
    fn flags_show_an_empty_transmitter_and_no_input() {
        let fr = read(decode(UART_BASE + UARTFR, 4).unwrap());
        assert_eq!(fr & FR_TXFE, FR_TXFE);
        assert_eq!(fr & (1 << 5), 0, "TXFF must be clear or a driver waits forever");
        assert_eq!(read(decode(UART_BASE + 0xFE0, 4).unwrap()), 0x11);
        assert_eq!(read(decode(UART_BASE + 0xFFC, 4).unwrap()), 0xB1);
        let mut out = [0xAA; 2];
        fill(0x1234_5678, &mut out);
        assert_eq!(out, [0x78, 0x56]);
    }
}
