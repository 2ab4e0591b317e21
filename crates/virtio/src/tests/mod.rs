//! Host tests: a simulated virtio driver drives the transport and devices
//! through MMIO registers and rings in a [`VecRam`] with small (4 KiB)
//! chunks, so buffers routinely straddle host chunks.

use std::vec::Vec;

use addr::Ipa;
use vdev::{AccessWidth, MmioDevice};

use crate::mmio::{regs, status};
use crate::queue::{VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
use crate::{GuestBytes, GuestRam, GuestRamExt, VecRam, VirtioDevice, VirtioMmio, features};

mod blk;
mod blk_async;
mod bounded;
mod console_rng;
mod events;
mod malformed;
mod net;
mod random;
mod switch;
mod transport;

pub const RAM_BASE: u64 = 0x4000_0000;
pub const RAM_SIZE: usize = 4 << 20;
pub const CHUNK: usize = 4096;

/// Guest RAM plus a bump allocator for the driver's rings and buffers.
pub struct Guest {
    pub ram: VecRam,
    next: u64,
}

impl Guest {
    pub fn new() -> Self {
        Self { ram: VecRam::with_chunk_size(Ipa(RAM_BASE), RAM_SIZE, CHUNK), next: RAM_BASE }
    }

    /// `len` bytes aligned to `align`.
    pub fn alloc(&mut self, len: u64, align: u64) -> u64 {
        let a = self.next.next_multiple_of(align);
        self.next = a + len;
        assert!(self.next <= RAM_BASE + RAM_SIZE as u64, "test RAM exhausted");
        a
    }

    /// A buffer holding `data`.
    pub fn buf(&mut self, data: &[u8]) -> u64 {
        let a = self.alloc(data.len() as u64, 1);
        self.ram.write(Ipa(a), data).unwrap();
        a
    }

    /// A buffer ending `before` bytes before a chunk boundary, so that a
    /// longer access straddles it.
    pub fn straddling(&mut self, len: u64, before: u64) -> u64 {
        let boundary = (self.next + before).next_multiple_of(CHUNK as u64);
        self.next = boundary - before;
        self.alloc(len, 1)
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = std::vec![0; len];
        self.ram.read(Ipa(addr), &mut v).unwrap();
        v
    }
}

/// Bytes `[offset, offset + len)` of a block backend's disk, read through a
/// scratch RAM (backends copy into guest memory only). The backend must
/// complete the read at once.
pub fn disk_bytes(disk: &mut dyn crate::BlockBackend, offset: u64, len: usize) -> Vec<u8> {
    let mut ram = VecRam::new(Ipa(RAM_BASE), len);
    let segments = [crate::Segment { addr: Ipa(RAM_BASE), len: len as u32 }];
    let req = crate::Request {
        token: crate::blk::Token::TEST,
        op: crate::Op::Read,
        offset,
        segments: &segments,
    };
    assert_eq!(disk.submit(&req, &mut ram), crate::Submit::Done(Ok(())));
    let mut v = std::vec![0; len];
    ram.read(Ipa(RAM_BASE), &mut v).unwrap();
    v
}

pub fn r32<D: VirtioDevice>(m: &mut VirtioMmio<D>, off: u64) -> u32 {
    m.read(off, AccessWidth::Word).unwrap() as u32
}

pub fn w32<D: VirtioDevice>(m: &mut VirtioMmio<D>, off: u64, v: u32) {
    m.write(off, AccessWidth::Word, v.into()).unwrap()
}

/// Sets `bits` in `Status` on top of what is there, as a driver does.
pub fn add_status<D: VirtioDevice>(m: &mut VirtioMmio<D>, bits: u32) {
    let s = r32(m, regs::STATUS);
    w32(m, regs::STATUS, s | bits);
}

/// The driver's view of one split queue.
pub struct DriverQueue {
    pub size: u16,
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    next_desc: u16,
    pub avail_idx: u16,
    last_used: u16,
}

impl DriverQueue {
    /// The driver's side of a queue it set up by hand.
    pub fn new(size: u16, desc: u64, avail: u64, used: u64) -> Self {
        Self { size, desc, avail, used, next_desc: 0, avail_idx: 0, last_used: 0 }
    }

    pub fn write_desc(&self, ram: &mut VecRam, idx: u16, d: (u64, u32, u16, u16)) {
        write_desc(ram, self.desc, idx, d);
    }

    /// Puts `head` in the next available slot and publishes it.
    pub fn publish(&mut self, ram: &mut VecRam, head: u16) {
        let slot = u64::from(self.avail_idx % self.size);
        ram.write_obj(Ipa(self.avail + 4 + 2 * slot), head).unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        ram.write_obj(Ipa(self.avail + 2), self.avail_idx).unwrap();
    }

    /// Posts a chain of `(addr, len, device_writable)` buffers in
    /// consecutive descriptors; returns its head.
    pub fn add(&mut self, ram: &mut VecRam, bufs: &[(u64, u32, bool)]) -> u16 {
        let head = self.next_desc;
        let n = bufs.len() as u16;
        for (i, &(addr, len, w)) in bufs.iter().enumerate() {
            let idx = (head + i as u16) % self.size;
            let last = i as u16 + 1 == n;
            let flags =
                if w { VIRTQ_DESC_F_WRITE } else { 0 } | if last { 0 } else { VIRTQ_DESC_F_NEXT };
            self.write_desc(ram, idx, (addr, len, flags, (idx + 1) % self.size));
        }
        self.next_desc = (head + n) % self.size;
        self.publish(ram, head);
        head
    }

    /// Posts the buffers through one indirect table.
    pub fn add_indirect(&mut self, g: &mut Guest, bufs: &[(u64, u32, bool)]) -> u16 {
        let table = g.alloc(16 * bufs.len() as u64, 16);
        for (i, &(addr, len, w)) in bufs.iter().enumerate() {
            let last = i + 1 == bufs.len();
            let flags =
                if w { VIRTQ_DESC_F_WRITE } else { 0 } | if last { 0 } else { VIRTQ_DESC_F_NEXT };
            write_desc(&mut g.ram, table, i as u16, (addr, len, flags, i as u16 + 1));
        }
        let head = self.next_desc;
        let len = 16 * bufs.len() as u32;
        self.write_desc(&mut g.ram, head, (table, len, VIRTQ_DESC_F_INDIRECT, 0));
        self.next_desc = (head + 1) % self.size;
        self.publish(&mut g.ram, head);
        head
    }

    pub fn used_idx(&self, ram: &VecRam) -> u16 {
        ram.read_obj(Ipa(self.used + 2)).unwrap()
    }

    /// Used elements `(id, len)` returned since the last call.
    pub fn take_used(&mut self, ram: &VecRam) -> Vec<(u32, u32)> {
        let idx = self.used_idx(ram);
        let mut out = Vec::new();
        while self.last_used != idx {
            let e = self.used + 4 + 8 * u64::from(self.last_used % self.size);
            out.push((ram.read_obj(Ipa(e)).unwrap(), ram.read_obj(Ipa(e + 4)).unwrap()));
            self.last_used = self.last_used.wrapping_add(1);
        }
        out
    }

    pub fn set_used_event(&self, ram: &mut VecRam, v: u16) {
        ram.write_obj(Ipa(self.avail + 4 + 2 * u64::from(self.size)), v).unwrap();
    }

    pub fn avail_event(&self, ram: &VecRam) -> u16 {
        ram.read_obj(Ipa(self.used + 4 + 8 * u64::from(self.size))).unwrap()
    }

    pub fn set_avail_flags(&self, ram: &mut VecRam, flags: u16) {
        ram.write_obj(Ipa(self.avail), flags).unwrap();
    }
}

/// Writes descriptor `idx` of the table at `table`: (addr, len, flags, next).
pub fn write_desc(ram: &mut VecRam, table: u64, idx: u16, d: (u64, u32, u16, u16)) {
    let at = table + 16 * u64::from(idx);
    ram.write_obj(Ipa(at), d.0).unwrap();
    ram.write_obj(Ipa(at + 8), d.1).unwrap();
    ram.write_obj(Ipa(at + 12), d.2).unwrap();
    ram.write_obj(Ipa(at + 14), d.3).unwrap();
}

/// The Linux-style initialization sequence (§3.1.1): reset, ACKNOWLEDGE,
/// DRIVER, negotiate `want & offered`, FEATURES_OK, set up every queue with
/// at most `qsize` entries, DRIVER_OK.
pub fn init<D: VirtioDevice>(
    m: &mut VirtioMmio<D>,
    g: &mut Guest,
    want: u64,
    qsize: u16,
) -> Vec<DriverQueue> {
    let queues = setup_queues(m, g, want, qsize);
    add_status(m, status::DRIVER_OK);
    assert!(m.is_live());
    queues
}

/// [`init`] without the final DRIVER_OK.
pub fn setup_queues<D: VirtioDevice>(
    m: &mut VirtioMmio<D>,
    g: &mut Guest,
    want: u64,
    qsize: u16,
) -> Vec<DriverQueue> {
    assert_eq!(r32(m, regs::MAGIC_VALUE), 0x7472_6976);
    assert_eq!(r32(m, regs::VERSION), 2);
    w32(m, regs::STATUS, 0);
    w32(m, regs::STATUS, status::ACKNOWLEDGE);
    w32(m, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    w32(m, regs::DEVICE_FEATURES_SEL, 0);
    let lo = r32(m, regs::DEVICE_FEATURES);
    w32(m, regs::DEVICE_FEATURES_SEL, 1);
    let hi = r32(m, regs::DEVICE_FEATURES);
    let f = (u64::from(hi) << 32 | u64::from(lo)) & want;
    w32(m, regs::DRIVER_FEATURES_SEL, 0);
    w32(m, regs::DRIVER_FEATURES, f as u32);
    w32(m, regs::DRIVER_FEATURES_SEL, 1);
    w32(m, regs::DRIVER_FEATURES, (f >> 32) as u32);
    let s = status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK;
    w32(m, regs::STATUS, s);
    assert_eq!(r32(m, regs::STATUS), s, "FEATURES_OK refused");
    let mut queues = Vec::new();
    for index in 0.. {
        w32(m, regs::QUEUE_SEL, index);
        let max = r32(m, regs::QUEUE_NUM_MAX) as u16;
        if max == 0 {
            break;
        }
        assert_eq!(r32(m, regs::QUEUE_READY), 0);
        let size = max.min(qsize);
        let n = u64::from(size);
        let desc = g.alloc(16 * n, 16);
        let avail = g.alloc(6 + 2 * n, 2);
        let used = g.alloc(6 + 8 * n, 4);
        w32(m, regs::QUEUE_NUM, size.into());
        for (lo, addr) in [
            (regs::QUEUE_DESC_LOW, desc),
            (regs::QUEUE_DRIVER_LOW, avail),
            (regs::QUEUE_DEVICE_LOW, used),
        ] {
            w32(m, lo, addr as u32);
            w32(m, lo + 4, (addr >> 32) as u32);
        }
        w32(m, regs::QUEUE_READY, 1);
        assert_eq!(r32(m, regs::QUEUE_READY), 1);
        queues.push(DriverQueue::new(size, desc, avail, used));
    }
    // Leave queue 0 selected, for tests that poke at its registers.
    w32(m, regs::QUEUE_SEL, 0);
    queues
}

/// Everything a driver would take.
pub const ALL: u64 = u64::MAX;
/// VERSION_1 and the device's own features, no ring extras.
pub const PLAIN: u64 = !(features::EVENT_IDX | features::INDIRECT_DESC);

/// Notifies `q` through `QueueNotify` and lets the hypervisor poll.
pub fn kick<D: VirtioDevice>(m: &mut VirtioMmio<D>, g: &mut Guest, q: u16) {
    w32(m, regs::QUEUE_NOTIFY, q.into());
    assert!(m.has_pending() || !m.is_live());
    m.poll(&mut g.ram);
}

/// Acknowledges every pending interrupt, as a driver's handler does.
pub fn ack<D: VirtioDevice>(m: &mut VirtioMmio<D>) {
    let s = r32(m, regs::INTERRUPT_STATUS);
    w32(m, regs::INTERRUPT_ACK, s);
    assert!(!m.irq_level());
}
