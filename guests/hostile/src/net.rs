//! A small virtio-net driver (virtio 1.2 §5.1) with rings of its own: receive queue 0 with
//! [`RX_BUFS`] buffers, transmit queue 1. Polled (the device's interrupt is never enabled);
//! armhv transmits in the QueueNotify trap, so a sent chain is used when `notify` returns.
//!
//! Used by `soak` (frames between the soak VMs), `healthy` (a beacon per heartbeat, frames
//! counted) and the virtio-net attacks, which also write hostile chains into these rings
//! (`raw_*`).

use crate::ring::DmaArea;
pub use crate::ring::{desc, rd, wr};
use baremetal::cpu;
use baremetal::virtio_mmio::reg::{CONFIG, QUEUE_NOTIFY};
use baremetal::virtio_mmio::{DEVICE_NEEDS_RESET, Regs, VERSION_1_WORD1};

/// `VIRTIO_NET_F_MAC`.
const F_MAC: u32 = 1 << 5;
/// `VIRTIO_F_INDIRECT_DESC` (feature word 0).
const F_INDIRECT: u32 = 1 << 28;
/// The device's header before every frame (VERSION_1, no offloads).
pub const HDR: usize = 12;
/// Receive buffers (and the receive queue's size).
pub const RX_BUFS: u16 = 16;
const RX_BUF_LEN: u64 = 2048;
/// Transmit queue size: the device's maximum, so one notification can hand it a whole ring.
pub const TX_SIZE: u16 = 256;
/// The largest frame the device takes: a 64 KiB payload and the Ethernet header.
pub const MAX_FRAME: usize = 65535 + 14;

/// Ethertype of the frames armhv's guests exchange (IEEE "local experimental").
pub const ETHERTYPE: u16 = 0x88b5;
pub const BROADCAST: [u8; 6] = [0xff; 6];

// The area: rings, then buffers.
pub const RX_DESC: u64 = 0x0000;
pub const RX_AVAIL: u64 = 0x0100;
pub const RX_USED: u64 = 0x0200;
pub const TX_DESC: u64 = 0x1000;
pub const TX_AVAIL: u64 = 0x2000;
pub const TX_USED: u64 = 0x3000;
/// An indirect table (256 entries) for the attacks.
pub const INDIRECT: u64 = 0x4000;
const RX_BUF: u64 = 0x5000;
pub const TX_BUF: u64 = RX_BUF + RX_BUFS as u64 * RX_BUF_LEN;
const AREA: usize = TX_BUF as usize + HDR + MAX_FRAME + 0x10;

static AREA_MEM: DmaArea<{ AREA.div_ceil(8) }> = DmaArea::new();

pub fn area() -> u64 {
    AREA_MEM.addr()
}

pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_INDIRECT_DESC: u16 = 4;

pub struct Nic {
    pub base: u64,
    pub mac: [u8; 6],
    /// Receive: used entries consumed so far; chains made available so far.
    rx_seen: u16,
    rx_avail: u16,
    /// Transmit: chains made available so far.
    pub tx_next: u16,
}

impl Nic {
    /// Resets the device and brings it up with both queues; every receive buffer posted.
    /// Err: the status it got stuck at.
    pub fn open(base: u64) -> Result<Nic, u32> {
        Nic::open_sized(base, TX_SIZE)
    }

    /// [`Nic::open`] with a transmit queue of `tx_size` entries (virtio-console takes 128).
    pub fn open_sized(base: u64, tx_size: u16) -> Result<Nic, u32> {
        let regs = Regs(base);
        if !regs.reset(1000) {
            return Err(regs.status());
        }
        regs.acknowledge();
        regs.negotiate((F_MAC | F_INDIRECT) & regs.device_features(0), VERSION_1_WORD1)?;
        for off in (0..TX_BUF).step_by(8) {
            wr::<u64>(area() + off, 0);
        }
        let a = area();
        regs.setup_queue(0, RX_BUFS.into(), a + RX_DESC, a + RX_AVAIL, a + RX_USED);
        regs.setup_queue(1, tx_size.into(), a + TX_DESC, a + TX_AVAIL, a + TX_USED);
        regs.driver_ok();
        let lo = regs.read(CONFIG).to_le_bytes();
        let hi = regs.read(CONFIG + 4).to_le_bytes();
        let mac = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1]];
        let mut nic = Nic { base, mac, rx_seen: 0, rx_avail: 0, tx_next: 0 };
        for i in 0..RX_BUFS {
            desc(a + RX_DESC, i.into(), rx_buf(i), RX_BUF_LEN as u32, F_WRITE, 0);
            nic.post_rx(i);
        }
        Ok(nic)
    }

    /// The device's MAC (its config space), without touching its state: frames this VM
    /// builds by hand carry it as their source, or armhv's switch drops them as spoofed.
    pub fn mac_of(base: u64) -> [u8; 6] {
        let regs = Regs(base);
        let (lo, hi) = (regs.read(CONFIG).to_le_bytes(), regs.read(CONFIG + 4).to_le_bytes());
        [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1]]
    }

    pub fn status(&self) -> u32 {
        Regs(self.base).status()
    }

    pub fn needs_reset(&self) -> bool {
        self.status() & DEVICE_NEEDS_RESET != 0
    }

    fn post_rx(&mut self, i: u16) {
        let slot = u64::from(self.rx_avail % RX_BUFS);
        wr::<u16>(area() + RX_AVAIL + 4 + 2 * slot, i);
        cpu::dsb();
        self.rx_avail = self.rx_avail.wrapping_add(1);
        wr::<u16>(area() + RX_AVAIL + 2, self.rx_avail);
    }

    /// Sends one frame: `dst`, our address, [`ETHERTYPE`], `payload`. Whether the device
    /// took it (armhv transmits in the notify trap).
    pub fn send(&mut self, dst: [u8; 6], payload: &[u8]) -> bool {
        self.send_from(self.mac, dst, payload)
    }

    /// [`Nic::send`] with `src` as the source address, whoever's it is (the switch attacks).
    pub fn send_from(&mut self, src: [u8; 6], dst: [u8; 6], payload: &[u8]) -> bool {
        let b = area() + TX_BUF;
        for i in 0..HDR as u64 {
            wr::<u8>(b + i, 0);
        }
        let f = b + HDR as u64;
        for (i, &x) in dst.iter().chain(src.iter()).enumerate() {
            wr::<u8>(f + i as u64, x);
        }
        wr::<u8>(f + 12, (ETHERTYPE >> 8) as u8);
        wr::<u8>(f + 13, ETHERTYPE as u8);
        for (i, &x) in payload.iter().enumerate() {
            wr::<u8>(f + 14 + i as u64, x);
        }
        let len = (HDR + 14 + payload.len()) as u32;
        self.send_chains(1, |_| (b, len))
    }

    /// Posts `n` single-buffer chains on the transmit queue, chain `i` at `buf(i)`, with one
    /// notification. Whether all came back used.
    pub fn send_chains(&mut self, n: u16, buf: impl Fn(u16) -> (u64, u32)) -> bool {
        let a = area();
        for i in 0..n {
            let d = (self.tx_next.wrapping_add(i) % TX_SIZE) as u64;
            let (addr, len) = buf(i);
            desc(a + TX_DESC, d, addr, len, 0, 0);
            wr::<u16>(a + TX_AVAIL + 4 + 2 * d, d as u16);
        }
        cpu::dsb();
        self.tx_next = self.tx_next.wrapping_add(n);
        wr::<u16>(a + TX_AVAIL + 2, self.tx_next);
        cpu::dsb();
        self.notify(1);
        rd::<u16>(a + TX_USED + 2) == self.tx_next
    }

    pub fn notify(&self, queue: u32) {
        Regs(self.base).write(QUEUE_NOTIFY, queue);
        Regs(self.base).acknowledge_interrupt();
    }

    /// Calls `f` with every frame received since the last call (without the virtio header)
    /// and gives its buffer back to the device. Returns how many there were.
    pub fn recv(&mut self, mut f: impl FnMut(&[u8])) -> u32 {
        let mut n = 0;
        let mut frame = [0u8; RX_BUF_LEN as usize];
        while rd::<u16>(area() + RX_USED + 2) != self.rx_seen {
            let e = area() + RX_USED + 4 + 8 * u64::from(self.rx_seen % RX_BUFS);
            let (id, len) = (rd::<u32>(e) as u16 % RX_BUFS, rd::<u32>(e + 4) as usize);
            let len = len.clamp(HDR, RX_BUF_LEN as usize);
            for (i, b) in frame[..len - HDR].iter_mut().enumerate() {
                *b = rd::<u8>(rx_buf(id) + (HDR + i) as u64);
            }
            f(&frame[..len - HDR]);
            self.rx_seen = self.rx_seen.wrapping_add(1);
            self.post_rx(id);
            n += 1;
        }
        n
    }
}

fn rx_buf(i: u16) -> u64 {
    area() + RX_BUF + u64::from(i) * RX_BUF_LEN
}

/// The net slot of the device tree, if any.
pub fn find(vm: &crate::Vm) -> Option<u64> {
    crate::virtio::find(vm, baremetal::virtio_mmio::DEVICE_ID_NET)
}
