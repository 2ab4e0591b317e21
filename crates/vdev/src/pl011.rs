//! Emulated Arm PrimeCell UART (PL011), as on QEMU's `virt` board.
//!
//! Enough of the PL011 TRM (DDI 0183) for a bare-metal guest and for Linux's
//! `amba-pl011` driver, with two simplifications that follow from the UART
//! not being a real wire:
//!
//! * **Transmission is instant.** A byte written to `UARTDR` leaves at once,
//!   so the transmit FIFO is always empty: `UARTFR.TXFE`=1, `TXFF`=0,
//!   `BUSY`=0. The bytes are collected into lines because the hypervisor
//!   prefixes every output line with the VM's name; the hypervisor takes them
//!   with [`Pl011::drain_lines`] and, when the VM stops,
//!   [`Pl011::flush_partial`].
//! * **Receive interrupts are levels.** `RXRIS` and `RTRIS` are both set
//!   while the receive FIFO holds anything (QEMU does the same with a
//!   trigger level of 1). The hardware's "FIFO crossed the trigger level" and
//!   "32 bit periods without data" are edges that a guest can miss if it
//!   acknowledges through `UARTICR` while data remains; a level cannot be
//!   missed, and draining the FIFO — what every driver does — clears it.
//!
//! The transmit interrupt keeps the hardware's edge flavour: `TXRIS` is set
//! when the transmitter is enabled (`UARTCR.UARTEN` and `TXE` going to 1)
//! and after every byte written to `UARTDR` (the empty FIFO has dropped to
//! its trigger level again), and cleared by `UARTICR.TXIC`. Linux fills the
//! FIFO while `TXFF` is clear and only unmasks `TXIM` if characters remain,
//! which never happens here; from its interrupt handler it writes half a
//! FIFO without checking `TXFF` and relies on `TXIS` firing again, which the
//! per-write edge provides; it masks `TXIM` when its buffer is empty. A guest
//! that instead acknowledges `TXIS` through `UARTICR` is not flooded, unlike
//! with a pure level.
//!
//! Like QEMU's model, the UART transmits and receives whatever the
//! `UARTCR` enable bits say: programs written for QEMU `virt` print through
//! `UARTDR` without ever initialising the UART, and must keep working.
//!
//! Accesses: 32-bit, and 16-bit at any register (Linux's `amba-pl011` uses
//! `readw`/`writew` for the Arm vendor variant, which does not set
//! `access_32b`), plus 8-bit at `UARTDR` (Linux `earlycon` writes bytes).
//! Anything else is refused with an error that the hypervisor turns into an
//! external abort.

use alloc::vec::Vec;

use crate::{AccessWidth, MmioDevice, MmioError};

/// Register offsets in the 4 KiB frame.
pub mod regs {
    /// Data register: write transmits, read pops the receive FIFO.
    pub const DR: u64 = 0x000;
    /// Receive status (read) / error clear (write).
    pub const RSR_ECR: u64 = 0x004;
    /// Flag register.
    pub const FR: u64 = 0x018;
    /// IrDA low-power counter.
    pub const ILPR: u64 = 0x020;
    /// Integer baud rate divisor.
    pub const IBRD: u64 = 0x024;
    /// Fractional baud rate divisor.
    pub const FBRD: u64 = 0x028;
    /// Line control.
    pub const LCR_H: u64 = 0x02c;
    /// Control.
    pub const CR: u64 = 0x030;
    /// Interrupt FIFO level select.
    pub const IFLS: u64 = 0x034;
    /// Interrupt mask set/clear.
    pub const IMSC: u64 = 0x038;
    /// Raw interrupt status.
    pub const RIS: u64 = 0x03c;
    /// Masked interrupt status.
    pub const MIS: u64 = 0x040;
    /// Interrupt clear (write-one-to-clear).
    pub const ICR: u64 = 0x044;
    /// DMA control.
    pub const DMACR: u64 = 0x048;
    /// `UARTPeriphID0`; `PeriphID1..3` and `PCellID0..3` follow at 4-byte
    /// steps up to 0xffc.
    pub const PERIPH_ID0: u64 = 0xfe0;
}

/// `UARTFR` bits.
pub mod fr {
    pub const CTS: u32 = 1 << 0;
    pub const DSR: u32 = 1 << 1;
    pub const DCD: u32 = 1 << 2;
    pub const BUSY: u32 = 1 << 3;
    pub const RXFE: u32 = 1 << 4;
    pub const TXFF: u32 = 1 << 5;
    pub const RXFF: u32 = 1 << 6;
    pub const TXFE: u32 = 1 << 7;
    pub const RI: u32 = 1 << 8;
}

/// `UARTCR` bits.
pub mod cr {
    pub const UARTEN: u32 = 1 << 0;
    pub const LBE: u32 = 1 << 7;
    pub const TXE: u32 = 1 << 8;
    pub const RXE: u32 = 1 << 9;
    /// Reset value: TXE | RXE, UART disabled.
    pub const RESET: u32 = TXE | RXE;
}

/// `UARTLCR_H` bits.
pub mod lcr_h {
    /// FIFO enable: 16-entry FIFOs instead of 1-character holding registers.
    pub const FEN: u32 = 1 << 4;
}

/// Interrupt bits, shared by `UARTIMSC`, `UARTRIS`, `UARTMIS`, `UARTICR`.
pub mod int {
    pub const RIM: u32 = 1 << 0;
    pub const CTSM: u32 = 1 << 1;
    pub const DCDM: u32 = 1 << 2;
    pub const DSRM: u32 = 1 << 3;
    pub const RX: u32 = 1 << 4;
    pub const TX: u32 = 1 << 5;
    pub const RT: u32 = 1 << 6;
    pub const FE: u32 = 1 << 7;
    pub const PE: u32 = 1 << 8;
    pub const BE: u32 = 1 << 9;
    pub const OE: u32 = 1 << 10;
    pub const ALL: u32 = (1 << 11) - 1;
}

/// `UARTPeriphID0..3` then `UARTPCellID0..3`: part 0x011, designer 0x41
/// (Arm), revision 1 — the values QEMU's `pl011` reports, so Linux picks the
/// same FIFO size (16) and driver variant as under QEMU.
const ID: [u8; 8] = [0x11, 0x10, 0x14, 0x00, 0x0d, 0xf0, 0x05, 0xb1];

const FRAME_SIZE: u64 = 0x1000;

/// The emulated PL011. Put it on an [`MmioBus`](crate::MmioBus) with a 4 KiB
/// range.
pub struct Pl011 {
    ilpr: u32,
    ibrd: u32,
    fbrd: u32,
    lcr_h: u32,
    cr: u32,
    ifls: u32,
    imsc: u32,
    dmacr: u32,
    /// Latched `TXRIS` (see the module documentation).
    tx_ris: bool,
    rx_fifo: [u8; Self::FIFO_DEPTH],
    rx_head: usize,
    rx_len: usize,
    /// Transmitted bytes, `\r` removed: complete lines each end in `\n`,
    /// possibly followed by the start of the next line.
    out: Vec<u8>,
    /// Length of the line being assembled at the end of `out`.
    line_len: usize,
    /// Number of `\n` in `out`.
    complete_lines: usize,
    dropped: u64,
    unknown: u64,
}

impl Default for Pl011 {
    fn default() -> Self {
        Self::new()
    }
}

impl Pl011 {
    /// Receive FIFO depth with `UARTLCR_H.FEN` set: 16, what Linux assumes
    /// for the revision in `UARTPeriphID2`. With the FIFO disabled the UART
    /// holds a single character.
    pub const FIFO_DEPTH: usize = 16;
    /// Longest output line; a longer one is emitted in pieces of this size.
    pub const LINE_MAX: usize = 256;
    /// Most transmitted bytes kept between two drains; beyond it bytes are
    /// dropped and counted ([`Pl011::dropped_output`]).
    pub const OUTPUT_CAP: usize = 16 * 1024;

    /// A UART in its reset state.
    pub fn new() -> Self {
        Self {
            ilpr: 0,
            ibrd: 0,
            fbrd: 0,
            lcr_h: 0,
            cr: cr::RESET,
            ifls: 0x12,
            imsc: 0,
            dmacr: 0,
            tx_ris: false,
            rx_fifo: [0; Self::FIFO_DEPTH],
            rx_head: 0,
            rx_len: 0,
            out: Vec::new(),
            line_len: 0,
            complete_lines: 0,
            dropped: 0,
            unknown: 0,
        }
    }

    /// Resets the registers and the receive FIFO (guest reboot). Output not
    /// yet drained is kept: it was already "sent".
    pub fn reset(&mut self) {
        let out = core::mem::take(&mut self.out);
        let (line_len, lines, dropped) = (self.line_len, self.complete_lines, self.dropped);
        *self = Self::new();
        // Drained already (the usual case): the buffer grown for the old kernel is released.
        if !out.is_empty() {
            self.out = out;
        }
        self.line_len = line_len;
        self.complete_lines = lines;
        self.dropped = dropped;
    }

    /// Current receive FIFO capacity: 16 with `FEN`, else 1.
    fn rx_depth(&self) -> usize {
        if self.lcr_h & lcr_h::FEN != 0 { Self::FIFO_DEPTH } else { 1 }
    }

    fn rx_full(&self) -> bool {
        self.rx_len >= self.rx_depth()
    }

    fn rx_push(&mut self, byte: u8) -> bool {
        if self.rx_full() {
            return false;
        }
        let slot = (self.rx_head + self.rx_len) % Self::FIFO_DEPTH;
        self.rx_fifo[slot] = byte;
        self.rx_len += 1;
        true
    }

    fn rx_pop(&mut self) -> Option<u8> {
        if self.rx_len == 0 {
            return None;
        }
        let b = self.rx_fifo[self.rx_head];
        self.rx_head = (self.rx_head + 1) % Self::FIFO_DEPTH;
        self.rx_len -= 1;
        Some(b)
    }

    /// Delivers one byte of console input. Returns `false` if the receive
    /// FIFO is full (or the UART is in loopback, which disconnects the
    /// receive pin); the caller keeps the byte and retries after the guest
    /// has read some, so nothing is lost and no overrun error is raised.
    pub fn push_input(&mut self, byte: u8) -> bool {
        if self.cr & cr::LBE != 0 {
            return false;
        }
        self.rx_push(byte)
    }

    /// Whether a complete line is waiting for [`Pl011::drain_lines`].
    pub fn has_output(&self) -> bool {
        self.complete_lines > 0
    }

    /// Calls `emit` once per complete output line, without its `\n`, and
    /// forgets them. A trailing partial line stays for later.
    pub fn drain_lines(&mut self, emit: &mut dyn FnMut(&[u8])) {
        // Every register write asks: most find no line to scan for.
        if self.complete_lines == 0 {
            return;
        }
        let Some(last) = self.out.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        for line in self.out[..last].split(|&b| b == b'\n') {
            emit(line);
        }
        self.out.drain(..=last);
        self.complete_lines = 0;
    }

    /// Emits the complete lines and then the unterminated remainder, if any:
    /// for when the VM stops.
    pub fn flush_partial(&mut self, emit: &mut dyn FnMut(&[u8])) {
        self.drain_lines(emit);
        if !self.out.is_empty() {
            emit(&self.out);
            self.out.clear();
        }
        self.line_len = 0;
    }

    /// Output bytes dropped because more than [`Pl011::OUTPUT_CAP`] bytes
    /// accumulated between drains.
    pub fn dropped_output(&self) -> u64 {
        self.dropped
    }

    /// The UART's interrupt output (`UARTINTR`, the OR of all masked
    /// interrupts) — the level the vGIC samples for SPI 1 (INTID 33).
    pub fn irq_level(&self) -> bool {
        self.ris() & self.imsc != 0
    }

    /// Accesses to offsets with no register (read as zero, writes ignored).
    pub fn unknown_accesses(&self) -> u64 {
        self.unknown
    }

    fn ris(&self) -> u32 {
        let mut ris = 0;
        if self.rx_len > 0 {
            ris |= int::RX | int::RT;
        }
        if self.tx_ris {
            ris |= int::TX;
        }
        ris
    }

    fn fr(&self) -> u32 {
        let mut fr = fr::TXFE;
        if self.rx_len == 0 {
            fr |= fr::RXFE;
        }
        if self.rx_full() {
            fr |= fr::RXFF;
        }
        fr
    }

    fn tx_enabled(&self) -> bool {
        self.cr & (cr::UARTEN | cr::TXE) == cr::UARTEN | cr::TXE
    }

    fn push_out(&mut self, byte: u8) {
        if self.out.len() < Self::OUTPUT_CAP {
            self.out.push(byte);
            if byte == b'\n' {
                self.complete_lines += 1;
            }
        } else {
            self.dropped += 1;
        }
    }

    fn transmit(&mut self, byte: u8) {
        // The empty transmit FIFO passes its trigger level again.
        self.tx_ris = true;
        if self.cr & cr::LBE != 0 {
            // Loopback: the byte comes back on the receive side instead of
            // leaving (Linux once used this to provoke TXIS at startup).
            self.rx_push(byte);
            return;
        }
        match byte {
            b'\r' => {}
            b'\n' => {
                self.push_out(b'\n');
                self.line_len = 0;
            }
            _ => {
                if self.line_len == Self::LINE_MAX {
                    self.push_out(b'\n');
                    self.line_len = 0;
                }
                self.push_out(byte);
                self.line_len += 1;
            }
        }
    }

    /// Checks an access against the rules in the module documentation.
    fn check(offset: u64, width: AccessWidth) -> Result<(), MmioError> {
        if offset >= FRAME_SIZE {
            return Err(MmioError::Unmapped);
        }
        if !offset.is_multiple_of(width.bytes()) {
            return Err(MmioError::Unaligned);
        }
        match width {
            AccessWidth::Word | AccessWidth::Half if offset & 3 == 0 => Ok(()),
            AccessWidth::Byte if offset == regs::DR => Ok(()),
            _ => Err(MmioError::BadWidth),
        }
    }

    fn read_reg(&mut self, offset: u64) -> u32 {
        match offset {
            // Data in [7:0]; the error flags FE/PE/BE/OE [11:8] are never set.
            regs::DR => self.rx_pop().map_or(0, u32::from),
            regs::RSR_ECR => 0,
            regs::FR => self.fr(),
            regs::ILPR => self.ilpr,
            regs::IBRD => self.ibrd,
            regs::FBRD => self.fbrd,
            regs::LCR_H => self.lcr_h,
            regs::CR => self.cr,
            regs::IFLS => self.ifls,
            regs::IMSC => self.imsc,
            regs::RIS => self.ris(),
            regs::MIS => self.ris() & self.imsc,
            regs::ICR => 0, // write-only
            regs::DMACR => self.dmacr,
            0xfe0..=0xffc => ID[((offset - regs::PERIPH_ID0) / 4) as usize].into(),
            _ => {
                self.unknown += 1;
                0
            }
        }
    }

    fn write_reg(&mut self, offset: u64, value: u32) {
        match offset {
            regs::DR => self.transmit(value as u8),
            regs::RSR_ECR => {} // clears error flags, of which there are none
            regs::ILPR => self.ilpr = value & 0xff,
            regs::IBRD => self.ibrd = value & 0xffff,
            regs::FBRD => self.fbrd = value & 0x3f,
            regs::LCR_H => self.lcr_h = value & 0xff,
            regs::CR => {
                let was_enabled = self.tx_enabled();
                self.cr = value & 0xffff;
                if !was_enabled && self.tx_enabled() {
                    // Enabling the transmitter with an empty FIFO.
                    self.tx_ris = true;
                }
            }
            regs::IFLS => self.ifls = value & 0x3f,
            regs::IMSC => self.imsc = value & int::ALL,
            regs::ICR => {
                // Only TXRIS is latched; the receive interrupts are levels
                // that follow the FIFO and there are no error or modem
                // interrupts to clear.
                if value & int::TX != 0 {
                    self.tx_ris = false;
                }
            }
            regs::DMACR => self.dmacr = value & 0x7,
            // Read-only registers: writes are ignored, as on hardware.
            regs::FR | regs::RIS | regs::MIS | 0xfe0..=0xffc => {}
            _ => self.unknown += 1,
        }
    }
}

impl MmioDevice for Pl011 {
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        Self::check(offset, width)?;
        Ok(width.truncate(self.read_reg(offset).into()))
    }

    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        Self::check(offset, width)?;
        self.write_reg(offset, width.truncate(value) as u32);
        Ok(())
    }

    fn name(&self) -> &'static str {
        "pl011"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use std::string::String;

    use AccessWidth::*;

    fn rd(u: &mut Pl011, off: u64) -> u32 {
        u.read(off, Word).unwrap() as u32
    }

    fn wr(u: &mut Pl011, off: u64, v: u32) {
        u.write(off, Word, v.into()).unwrap();
    }

    fn send(u: &mut Pl011, s: &[u8]) {
        for &b in s {
            u.write(regs::DR, Byte, b.into()).unwrap();
        }
    }

    fn lines(u: &mut Pl011) -> Vec<String> {
        let mut v = Vec::new();
        u.drain_lines(&mut |l| v.push(String::from_utf8(l.to_vec()).unwrap()));
        v
    }

    fn flush(u: &mut Pl011) -> Vec<String> {
        let mut v = Vec::new();
        u.flush_partial(&mut |l| v.push(String::from_utf8(l.to_vec()).unwrap()));
        v
    }

    #[test]
    fn reset_values() {
        let mut u = Pl011::new();
        assert_eq!(rd(&mut u, regs::CR), 0x300);
        assert_eq!(rd(&mut u, regs::IFLS), 0x12);
        assert_eq!(rd(&mut u, regs::FR), fr::TXFE | fr::RXFE);
        for off in [
            regs::DR,
            regs::RSR_ECR,
            regs::ILPR,
            regs::IBRD,
            regs::FBRD,
            regs::LCR_H,
            regs::IMSC,
            regs::RIS,
            regs::MIS,
            regs::ICR,
            regs::DMACR,
        ] {
            assert_eq!(rd(&mut u, off), 0, "{off:#x}");
        }
        assert!(!u.irq_level());
        assert_eq!(u.unknown_accesses(), 0);
    }

    #[test]
    fn line_assembly() {
        let mut u = Pl011::new();
        send(&mut u, b"hello\r\nworld\n\nthird");
        assert!(u.has_output());
        assert_eq!(lines(&mut u), ["hello", "world", ""]);
        assert!(!u.has_output());
        // The partial line stays until terminated or flushed.
        assert!(lines(&mut u).is_empty());
        send(&mut u, b" line\r");
        assert!(!u.has_output());
        send(&mut u, b"\n");
        assert_eq!(lines(&mut u), ["third line"]);
        // Lone CRs vanish; a bare LF ends a line.
        send(&mut u, b"a\rb\n");
        assert_eq!(lines(&mut u), ["ab"]);
        // 16- and 32-bit writes to DR transmit the low byte.
        u.write(regs::DR, Half, 0x0141).unwrap();
        u.write(regs::DR, Word, 0xffff_ff42).unwrap();
        u.write(regs::DR, Word, 0x0a).unwrap();
        assert_eq!(lines(&mut u), ["AB"]);
    }

    #[test]
    fn partial_flush() {
        let mut u = Pl011::new();
        send(&mut u, b"one\ntwo\nthr");
        assert_eq!(flush(&mut u), ["one", "two", "thr"]);
        assert!(flush(&mut u).is_empty());
        send(&mut u, b"x\n");
        assert_eq!(flush(&mut u), ["x"]);
    }

    #[test]
    fn long_lines_are_split() {
        let mut u = Pl011::new();
        let long = vec![b'a'; Pl011::LINE_MAX * 2 + 10];
        send(&mut u, &long);
        send(&mut u, b"\n");
        let l = lines(&mut u);
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].len(), Pl011::LINE_MAX);
        assert_eq!(l[1].len(), Pl011::LINE_MAX);
        assert_eq!(l[2].len(), 10);
        // Exactly LINE_MAX followed by CRLF is one line, not two.
        send(&mut u, &vec![b'b'; Pl011::LINE_MAX]);
        send(&mut u, b"\r\n");
        let l = lines(&mut u);
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].len(), Pl011::LINE_MAX);
        // An over-long unterminated line: full pieces drain, the rest flushes.
        send(&mut u, &vec![b'c'; Pl011::LINE_MAX + 1]);
        send(&mut u, b"d");
        let l = lines(&mut u);
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].len(), Pl011::LINE_MAX);
        assert_eq!(flush(&mut u), ["cd"]);
    }

    #[test]
    fn output_cap_drops_and_counts() {
        let mut u = Pl011::new();
        let chunk = [b'z'; 100];
        while u.out.len() < Pl011::OUTPUT_CAP {
            send(&mut u, &chunk);
        }
        assert_eq!(u.out.len(), Pl011::OUTPUT_CAP);
        let before = u.dropped_output();
        send(&mut u, b"lost\n");
        assert_eq!(u.dropped_output(), before + 5);
        let mut n = 0;
        u.flush_partial(&mut |l| n += l.len());
        // Every kept byte except the inserted line breaks comes out.
        assert_eq!(n, Pl011::OUTPUT_CAP - Pl011::OUTPUT_CAP / (Pl011::LINE_MAX + 1));
        assert!(!u.has_output());
        send(&mut u, b"ok\n");
        assert_eq!(lines(&mut u), ["ok"]);
    }

    #[test]
    fn flag_register() {
        let mut u = Pl011::new();
        wr(&mut u, regs::LCR_H, lcr_h::FEN | 0x60);
        let fr = rd(&mut u, regs::FR);
        assert_eq!(fr & (fr::TXFE | fr::TXFF | fr::BUSY), fr::TXFE);
        assert_eq!(fr & (fr::RXFE | fr::RXFF), fr::RXFE);
        assert!(u.push_input(b'a'));
        assert_eq!(rd(&mut u, regs::FR) & (fr::RXFE | fr::RXFF), 0);
        for _ in 1..Pl011::FIFO_DEPTH {
            assert!(u.push_input(b'b'));
        }
        assert_eq!(rd(&mut u, regs::FR) & (fr::RXFE | fr::RXFF), fr::RXFF);
        // Transmitting never makes the TX side busy or full.
        send(&mut u, b"xyz");
        let fr = rd(&mut u, regs::FR);
        assert_eq!(fr & (fr::TXFE | fr::TXFF | fr::BUSY), fr::TXFE);
        // FR is read-only.
        wr(&mut u, regs::FR, 0);
        assert_eq!(rd(&mut u, regs::FR), fr);
    }

    #[test]
    fn rx_fifo_fill_overflow_drain() {
        let mut u = Pl011::new();
        wr(&mut u, regs::LCR_H, lcr_h::FEN);
        for i in 0..Pl011::FIFO_DEPTH as u8 {
            assert!(u.push_input(b'0' + i));
        }
        assert!(!u.push_input(b'!'), "17th byte must be refused");
        for i in 0..Pl011::FIFO_DEPTH as u8 {
            assert_eq!(rd(&mut u, regs::DR), (b'0' + i) as u32);
        }
        assert_eq!(rd(&mut u, regs::FR) & fr::RXFE, fr::RXFE);
        // Reading an empty FIFO returns 0 and changes nothing.
        assert_eq!(rd(&mut u, regs::DR), 0);
        // Wrap-around of the ring.
        for round in 0..3u8 {
            for i in 0..10 {
                assert!(u.push_input(round * 10 + i));
            }
            for i in 0..10 {
                assert_eq!(u.read(regs::DR, Byte), Ok((round * 10 + i) as u64));
            }
        }
        assert_eq!(u.read(regs::RSR_ECR, Word), Ok(0));
    }

    #[test]
    fn rx_without_fifo_holds_one_byte() {
        let mut u = Pl011::new();
        // Reset: LCR_H.FEN = 0, a single holding register.
        assert!(u.push_input(b'a'));
        assert!(!u.push_input(b'b'));
        assert_eq!(rd(&mut u, regs::FR) & fr::RXFF, fr::RXFF);
        // Enabling the FIFO keeps the held byte and makes room.
        wr(&mut u, regs::LCR_H, lcr_h::FEN);
        assert!(u.push_input(b'b'));
        wr(&mut u, regs::LCR_H, 0);
        assert!(!u.push_input(b'c'));
        assert_eq!(rd(&mut u, regs::DR), b'a' as u32);
        assert_eq!(rd(&mut u, regs::DR), b'b' as u32);
        assert!(u.push_input(b'c'));
    }

    #[test]
    fn rx_interrupt_follows_fifo() {
        let mut u = Pl011::new();
        wr(&mut u, regs::LCR_H, lcr_h::FEN);
        assert!(u.push_input(b'k'));
        assert_eq!(rd(&mut u, regs::RIS), int::RX | int::RT);
        assert_eq!(rd(&mut u, regs::MIS), 0);
        assert!(!u.irq_level(), "masked");
        wr(&mut u, regs::IMSC, int::RX | int::RT);
        assert!(u.irq_level());
        assert_eq!(rd(&mut u, regs::MIS), int::RX | int::RT);
        // Clearing through ICR does not lose data that is still there.
        wr(&mut u, regs::ICR, int::RX | int::RT);
        assert!(u.irq_level());
        // Draining the FIFO deasserts it.
        assert_eq!(rd(&mut u, regs::DR), b'k' as u32);
        assert!(!u.irq_level());
        assert_eq!(rd(&mut u, regs::RIS), 0);
        // Only RXIM unmasked (a driver that ignores the timeout): one byte
        // still interrupts.
        wr(&mut u, regs::IMSC, int::RX);
        assert!(u.push_input(b'q'));
        assert!(u.irq_level());
        assert_eq!(rd(&mut u, regs::MIS), int::RX);
    }

    #[test]
    fn tx_interrupt() {
        let mut u = Pl011::new();
        assert_eq!(rd(&mut u, regs::RIS) & int::TX, 0, "UART disabled at reset");
        wr(&mut u, regs::IMSC, int::TX);
        assert!(!u.irq_level());
        // Enabling the transmitter raises TXRIS.
        wr(&mut u, regs::CR, cr::UARTEN | cr::TXE | cr::RXE);
        assert_eq!(rd(&mut u, regs::RIS), int::TX);
        assert!(u.irq_level());
        // Acknowledged through ICR: quiet until the next transmission.
        wr(&mut u, regs::ICR, int::TX);
        assert!(!u.irq_level());
        // Rewriting CR with TX already enabled is not a new edge.
        wr(&mut u, regs::CR, cr::UARTEN | cr::TXE | cr::RXE);
        assert!(!u.irq_level());
        // Every byte written re-raises it (Linux's interrupt handler writes
        // half a FIFO and waits for TXIS again).
        send(&mut u, b"x");
        assert!(u.irq_level());
        assert_eq!(rd(&mut u, regs::MIS), int::TX);
        // Masking TXIM (Linux's stop_tx) silences the line.
        wr(&mut u, regs::IMSC, 0);
        assert!(!u.irq_level());
        assert_eq!(rd(&mut u, regs::RIS), int::TX);
        // Disable then enable again: another edge.
        wr(&mut u, regs::ICR, int::ALL);
        wr(&mut u, regs::CR, 0);
        wr(&mut u, regs::CR, cr::UARTEN | cr::TXE);
        assert_eq!(rd(&mut u, regs::RIS), int::TX);
    }

    #[test]
    fn linux_style_tx_from_irq_handler_terminates() {
        // Model amba-pl011: start_tx writes while TXFF is clear (everything),
        // so TXIM never gets unmasked; the ISR path writes fifosize/2 bytes
        // per TXIS and masks TXIM when done.
        let mut u = Pl011::new();
        wr(&mut u, regs::CR, cr::UARTEN | cr::TXE | cr::RXE);
        wr(&mut u, regs::IMSC, int::RX | int::RT | int::TX);
        let mut pending: Vec<u8> = b"0123456789abcdefghijklmnopqrstuvwxyz\n".to_vec();
        let mut passes = 0;
        while u.irq_level() {
            passes += 1;
            assert!(passes < 100, "interrupt storm");
            let mis = rd(&mut u, regs::MIS);
            if mis & int::TX != 0 {
                for _ in 0..8 {
                    if pending.is_empty() {
                        break;
                    }
                    let b = pending.remove(0);
                    u.write(regs::DR, Half, b.into()).unwrap();
                }
                if pending.is_empty() {
                    wr(&mut u, regs::IMSC, int::RX | int::RT);
                }
            }
        }
        assert_eq!(lines(&mut u), ["0123456789abcdefghijklmnopqrstuvwxyz"]);
    }

    #[test]
    fn interrupt_mask_and_clear() {
        let mut u = Pl011::new();
        wr(&mut u, regs::IMSC, 0xffff_ffff);
        assert_eq!(rd(&mut u, regs::IMSC), int::ALL);
        assert!(!u.irq_level(), "nothing raised");
        // RIS and MIS are read-only.
        wr(&mut u, regs::RIS, int::ALL);
        wr(&mut u, regs::MIS, int::ALL);
        assert_eq!(rd(&mut u, regs::RIS), 0);
        send(&mut u, b"a");
        assert!(u.push_input(b'b'));
        assert_eq!(rd(&mut u, regs::MIS), int::TX | int::RX | int::RT);
        wr(&mut u, regs::IMSC, int::TX);
        assert_eq!(rd(&mut u, regs::MIS), int::TX);
        wr(&mut u, regs::ICR, int::TX);
        assert_eq!(rd(&mut u, regs::MIS), 0);
        assert!(!u.irq_level());
        assert_eq!(rd(&mut u, regs::RIS), int::RX | int::RT);
    }

    #[test]
    fn id_registers() {
        let mut u = Pl011::new();
        let ids: Vec<u32> = (0..8).map(|i| rd(&mut u, 0xfe0 + 4 * i)).collect();
        assert_eq!(ids, [0x11, 0x10, 0x14, 0x00, 0x0d, 0xf0, 0x05, 0xb1]);
        // 16-bit reads work too (Linux's readw), writes are ignored.
        assert_eq!(u.read(0xfe8, Half), Ok(0x14));
        wr(&mut u, 0xfe0, 0x55);
        assert_eq!(rd(&mut u, 0xfe0), 0x11);
        assert_eq!(u.unknown_accesses(), 0);
    }

    #[test]
    fn registers_store_their_width() {
        let mut u = Pl011::new();
        for (off, mask) in [
            (regs::ILPR, 0xff),
            (regs::IBRD, 0xffff),
            (regs::FBRD, 0x3f),
            (regs::LCR_H, 0xff),
            (regs::CR, 0xffff),
            (regs::IFLS, 0x3f),
            (regs::IMSC, 0x7ff),
            (regs::DMACR, 0x7),
        ] {
            // All ones except LBE, so that CR does not enter loopback.
            wr(&mut u, off, !cr::LBE);
            assert_eq!(rd(&mut u, off), mask & !cr::LBE, "{off:#x}");
            // 16-bit accesses see the same register.
            u.write(off, Half, 0x1).unwrap();
            assert_eq!(u.read(off, Half), Ok(1), "{off:#x}");
        }
    }

    #[test]
    fn loopback() {
        let mut u = Pl011::new();
        wr(&mut u, regs::LCR_H, lcr_h::FEN);
        wr(&mut u, regs::CR, cr::UARTEN | cr::TXE | cr::RXE | cr::LBE);
        send(&mut u, b"\0");
        assert!(!u.has_output());
        assert!(flush(&mut u).is_empty(), "looped-back bytes never leave");
        assert_eq!(rd(&mut u, regs::FR) & fr::RXFE, 0);
        assert!(!u.push_input(b'x'), "RX pin disconnected in loopback");
        assert_eq!(rd(&mut u, regs::DR), 0);
        assert_eq!(rd(&mut u, regs::FR) & fr::RXFE, fr::RXFE);
        wr(&mut u, regs::CR, cr::UARTEN | cr::TXE | cr::RXE);
        assert!(u.push_input(b'x'));
    }

    #[test]
    fn width_and_alignment_errors() {
        let mut u = Pl011::new();
        // Unaligned for the width.
        assert_eq!(u.read(0x1, Half), Err(MmioError::Unaligned));
        assert_eq!(u.read(0x2, Word), Err(MmioError::Unaligned));
        assert_eq!(u.write(0x19, Word, 0), Err(MmioError::Unaligned));
        assert_eq!(u.read(0x4, Double), Err(MmioError::Unaligned));
        // 64-bit never; bytes only at DR; no sub-register accesses.
        assert_eq!(u.read(0x0, Double), Err(MmioError::BadWidth));
        assert_eq!(u.write(0x0, Double, 0x41), Err(MmioError::BadWidth));
        assert_eq!(u.read(regs::FR, Byte), Err(MmioError::BadWidth));
        assert_eq!(u.write(regs::CR, Byte, 0), Err(MmioError::BadWidth));
        assert_eq!(u.read(0x1, Byte), Err(MmioError::BadWidth));
        assert_eq!(u.read(0x1a, Half), Err(MmioError::BadWidth));
        assert_eq!(u.read(0xfe0, Byte), Err(MmioError::BadWidth));
        // Outside the 4 KiB frame.
        assert_eq!(u.read(0x1000, Word), Err(MmioError::Unmapped));
        // Valid forms.
        assert_eq!(u.read(regs::DR, Byte), Ok(0));
        assert_eq!(u.read(regs::DR, Half), Ok(0));
        assert_eq!(u.read(regs::FR, Half), Ok((fr::TXFE | fr::RXFE).into()));
        // Rejected writes have no effect.
        assert!(!u.has_output());
        assert!(flush(&mut u).is_empty());
        assert_eq!(u.unknown_accesses(), 0);
    }

    #[test]
    fn unknown_offsets() {
        let mut u = Pl011::new();
        for off in [0x008, 0x00c, 0x010, 0x014, 0x01c, 0x04c, 0x080, 0xf00, 0xfdc] {
            assert_eq!(rd(&mut u, off), 0, "{off:#x}");
            wr(&mut u, off, 0xffff_ffff);
            assert_eq!(rd(&mut u, off), 0, "{off:#x}");
        }
        assert_eq!(u.unknown_accesses(), 27);
        assert!(flush(&mut u).is_empty());
        assert_eq!(rd(&mut u, regs::CR), 0x300);
    }

    #[test]
    fn reset_keeps_pending_output() {
        let mut u = Pl011::new();
        wr(&mut u, regs::CR, cr::UARTEN | cr::TXE);
        wr(&mut u, regs::IMSC, int::ALL);
        send(&mut u, b"before\nreb");
        assert!(u.push_input(b'x'));
        u.reset();
        assert_eq!(rd(&mut u, regs::CR), 0x300);
        assert_eq!(rd(&mut u, regs::IMSC), 0);
        assert_eq!(rd(&mut u, regs::FR) & fr::RXFE, fr::RXFE);
        send(&mut u, b"oot\n");
        assert_eq!(lines(&mut u), ["before", "reboot"]);
    }
}
