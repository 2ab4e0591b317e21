//! virtio-console with a single port (virtio 1.x §5.3), no
//! `VIRTIO_CONSOLE_F_MULTIPORT`: queue 0 is port 0's receive queue, queue 1
//! its transmit queue, and there is no control queue.
//!
//! * **Transmit**: the readable buffers go to the caller's sink, copied out
//!   of guest memory a piece of up to [`Console::OUT_PIECE`] bytes at a
//!   time. The hypervisor tags and prints them like PL011 output. Output
//!   is slow (a shared UART), so it costs [`Console::OUT_BYTES_PER_UNIT`]
//!   bytes per unit of a round's work: a long chain is sent over several
//!   rounds, in the VM's own time, and the next chain waits for it.
//! * **Receive**: the hypervisor pushes input bytes with
//!   [`Console::push_input`]; they wait in a bounded buffer until the driver
//!   has posted receive buffers, and are copied into them on the next poll
//!   of the transport (or when the driver notifies the receive queue).
//! * **Emergency write** (`VIRTIO_CONSOLE_F_EMERG_WRITE`): a byte written to
//!   `emerg_wr` in configuration space goes straight to the sink, so a
//!   driver can print before its queues exist.

use alloc::boxed::Box;
use alloc::collections::VecDeque;

use crate::device::{ByteSink, DeviceStats, VirtioDevice, copy_config, device_id};
use crate::error::VirtioError;
use crate::queue::{BYTES_PER_UNIT, DescChain, Queue};
use crate::ram::GuestRam;

/// `VIRTIO_CONSOLE_F_EMERG_WRITE`.
pub const F_EMERG_WRITE: u64 = 1 << 2;

/// Offset of `emerg_wr` in `struct virtio_console_config` (after `cols`,
/// `rows`, `max_nr_ports`).
const EMERG_WR: u64 = 8;

/// The console device.
pub struct Console {
    sink: ByteSink,
    input: VecDeque<u8>,
    /// The receive chain being filled.
    chain: DescChain,
    /// The transmit chain being sent, and how far: `Some` while a chain is
    /// only partly sent.
    tx_chain: DescChain,
    tx_sent: Option<u64>,
    /// Output copied out of guest memory on its way to the sink.
    out: [u8; Self::OUT_PIECE],
    stats: DeviceStats,
}

impl Console {
    /// Receive queue (port 0).
    pub const RX: usize = 0;
    /// Transmit queue (port 0).
    pub const TX: usize = 1;
    /// `QueueNumMax` of both queues.
    pub const QUEUE_SIZE: u16 = 128;
    /// Most input bytes waiting for receive buffers; beyond it
    /// [`Console::push_input`] takes nothing more.
    pub const INPUT_CAP: usize = 4096;
    /// Most output bytes handed to the sink in one call: what is copied out
    /// of guest memory at a time.
    pub const OUT_PIECE: usize = 256;
    /// Output bytes per unit of a round's work
    /// ([`crate::queue::ROUND_WORK`]): 512 bytes per round. Each byte is a write to the
    /// shared UART, under the console lock every VM's output needs.
    pub const OUT_BYTES_PER_UNIT: u64 = 1;

    /// A console whose output goes to `sink`.
    pub fn new(sink: impl FnMut(&[u8]) + Send + 'static) -> Self {
        Self {
            sink: Box::new(sink),
            input: VecDeque::new(),
            chain: DescChain::new(),
            tx_chain: DescChain::new(),
            tx_sent: None,
            out: [0; Self::OUT_PIECE],
            stats: DeviceStats::default(),
        }
    }

    /// Queues console input for the guest. Returns how many bytes were
    /// taken: fewer than `bytes.len()` when the buffer is full, and the
    /// caller keeps the rest for later (as with `Pl011::push_input`). The
    /// bytes reach the guest on the transport's next poll.
    pub fn push_input(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(Self::INPUT_CAP - self.input.len());
        self.input.extend(&bytes[..n]);
        n
    }

    /// Input bytes not yet delivered.
    pub fn pending_input(&self) -> usize {
        self.input.len()
    }

    /// Copies waiting input into receive buffers while both last.
    fn deliver_input(
        &mut self,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        let Some(q) = queues.get_mut(Self::RX) else {
            return Ok(());
        };
        while !self.input.is_empty() && q.pop(ram, &mut self.chain)? {
            let n = self.input.len().min(self.chain.writable_len() as usize);
            let (a, b) = self.input.as_slices();
            let na = n.min(a.len());
            self.chain.write_at(ram, 0, &a[..na])?;
            self.chain.write_at(ram, na as u64, &b[..n - na])?;
            self.input.drain(..n);
            q.add_used(ram, self.chain.head(), n as u32)?;
            self.stats.requests += 1;
            self.stats.bytes_to_guest += n as u64;
        }
        Ok(())
    }

    fn transmit(
        &mut self,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        let Some(q) = queues.get_mut(Self::TX) else {
            return Ok(());
        };
        loop {
            let mut at = match self.tx_sent.take() {
                Some(at) => at,
                None if q.pop(ram, &mut self.tx_chain)? => 0,
                None => return Ok(()),
            };
            let len = self.tx_chain.readable_len().into();
            while at < len {
                if q.work_left() == 0 {
                    self.tx_sent = Some(at);
                    q.defer();
                    return Ok(());
                }
                // Through a small copy: the sink never sees guest memory itself.
                let n = self.tx_chain.read_at(ram, at, &mut self.out)?;
                if n == 0 {
                    break; // not reached: `at` is inside the readable part
                }
                (self.sink)(&self.out[..n]);
                q.charge_bytes(n as u64 * (BYTES_PER_UNIT / Self::OUT_BYTES_PER_UNIT));
                at += n as u64;
            }
            q.add_used(ram, self.tx_chain.head(), 0)?;
            self.stats.requests += 1;
            self.stats.bytes_from_guest += len;
        }
    }
}

impl VirtioDevice for Console {
    fn device_id(&self) -> u32 {
        device_id::CONSOLE
    }

    fn name(&self) -> &'static str {
        "virtio-console"
    }

    fn features(&self) -> u64 {
        F_EMERG_WRITE
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[Self::QUEUE_SIZE, Self::QUEUE_SIZE]
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // cols, rows: 0 (no VIRTIO_CONSOLE_F_SIZE); max_nr_ports: 1;
        // emerg_wr: reads as 0.
        let mut config = [0u8; 12];
        config[4..8].copy_from_slice(&1u32.to_le_bytes());
        copy_config(&config, offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        // The character is the low byte of the 32-bit `emerg_wr`.
        if offset == EMERG_WR
            && let Some(&byte) = data.first()
        {
            (self.sink)(&[byte]);
            self.stats.bytes_from_guest += 1;
        }
    }

    fn process(
        &mut self,
        queue: usize,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        match queue {
            Self::RX => self.deliver_input(queues, ram),
            Self::TX => self.transmit(queues, ram),
            _ => Ok(()),
        }
    }

    fn has_pending_work(&self) -> bool {
        !self.input.is_empty()
    }

    fn poll(&mut self, queues: &mut [Queue], ram: &mut dyn GuestRam) -> Result<(), VirtioError> {
        self.deliver_input(queues, ram)
    }

    fn reset(&mut self) {
        // Input typed for the previous driver instance is stale; its buffers are released.
        self.input = VecDeque::new();
        self.chain = DescChain::new();
        self.tx_chain = DescChain::new();
        self.tx_sent = None;
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
