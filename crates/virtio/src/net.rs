//! virtio-net (virtio 1.x §5.1), one queue pair, checksum offload.
//!
//! Offered: `VIRTIO_NET_F_MAC` (the MAC in configuration space),
//! `VIRTIO_NET_F_STATUS` (link state) and, when the NIC is given one,
//! `VIRTIO_NET_F_MTU` (an MTU other than Ethernet's 1500, up to 65535: a
//! Linux driver then sizes its receive buffers for it, and bulk transfers
//! take a fortieth of the frames at 64 KiB), and checksum offload both ways:
//! `VIRTIO_NET_F_CSUM` (a sent frame may leave its TCP/UDP checksum to the
//! device) and `VIRTIO_NET_F_GUEST_CSUM` (a received one may arrive so). A
//! frame's pending checksum ([`PartialCsum`]) travels with it through the
//! switch; it is computed only when a receiver did not take
//! `VIRTIO_NET_F_GUEST_CSUM`, so between two Linux guests no one sums the
//! bytes at all. No segmentation offload, no mergeable receive buffers, no
//! control queue. Every frame is preceded by the 12-byte
//! `struct virtio_net_hdr` of a VERSION_1 device; on receive its
//! `num_buffers` is 1.
//!
//! * **Transmit** (queue 1): each chain is a header and a frame. The frame
//!   (with its pending checksum, if any) goes to the caller's sink still in
//!   guest memory ([`GuestBytes`]), which the sink copies once to where it
//!   keeps frames, from however many buffers and chunks it spans.
//! * **Receive** (queue 0): the hypervisor calls
//!   [`VirtioMmio::<Net>::deliver`](crate::VirtioMmio::deliver) with a frame
//!   (from the [`Switch`](crate::switch::Switch)); it is copied into the
//!   next receive buffer, or dropped and counted when there is none, when
//!   it does not fit, or when the link is down. Nothing is queued inside
//!   the device: a switch must not be able to make one VM's NIC hold memory
//!   on behalf of another.

use alloc::boxed::Box;

use crate::device::{DeviceStats, VirtioDevice, copy_config, device_id};
use crate::error::VirtioError;
use crate::queue::{DescChain, GuestBytes, Queue};
use crate::ram::GuestRam;

/// `VIRTIO_NET_F_CSUM`: the device completes checksums of sent frames.
pub const F_CSUM: u64 = 1 << 0;
/// `VIRTIO_NET_F_GUEST_CSUM`: the driver takes received frames whose
/// checksum is still to be completed.
pub const F_GUEST_CSUM: u64 = 1 << 1;
/// `VIRTIO_NET_F_MAC`.
pub const F_MAC: u64 = 1 << 5;
/// `VIRTIO_NET_F_STATUS`.
pub const F_STATUS: u64 = 1 << 16;
/// `VIRTIO_NET_F_MTU`: `mtu` in configuration space is the MTU to use.
pub const F_MTU: u64 = 1 << 3;
/// `status` bit: link up.
pub const S_LINK_UP: u16 = 1;
/// Length of `struct virtio_net_hdr` with `VIRTIO_F_VERSION_1`.
pub const HDR_LEN: usize = 12;
/// `virtio_net_hdr.flags`: the checksum from `csum_start` on is still to
/// be completed.
pub const HDR_F_NEEDS_CSUM: u8 = 1;
/// `virtio_net_hdr.gso_type` for a plain frame.
const GSO_NONE: u8 = 0;

/// A frame's checksum left to be completed (`VIRTIO_NET_HDR_F_NEEDS_CSUM`):
/// the ones' complement sum of the frame from byte `start` to its end goes,
/// complemented, at `start + offset`. The field there already holds the
/// pseudo-header's sum, as the sender left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialCsum {
    pub start: u16,
    pub offset: u16,
}

impl PartialCsum {
    /// Where the checksum goes, if it and its summed range lie in a frame of
    /// `len` bytes.
    fn field(self, len: usize) -> Option<usize> {
        let at = usize::from(self.start) + usize::from(self.offset);
        (at + 2 <= len).then_some(at)
    }

    /// Stores the checksum in `frame` itself, for a receiver that cannot
    /// take it pending (the machine's NIC, driven without checksum
    /// offload); `false`, with `frame` untouched, if the field does not lie
    /// in it.
    pub fn apply(self, frame: &mut [u8]) -> bool {
        let Some(at) = self.field(frame.len()) else { return false };
        let sum = self.complete(frame);
        frame[at..at + 2].copy_from_slice(&sum);
        true
    }

    /// The checksum to store in `frame` (which must contain the field).
    pub fn complete(self, frame: &[u8]) -> [u8; 2] {
        let mut sum: u64 = 0;
        let mut words = frame[usize::from(self.start)..].chunks_exact(2);
        for w in &mut words {
            sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = words.remainder() {
            sum += u64::from(*last) << 8;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        // A computed 0 is sent as 0xffff, which means the same in ones'
        // complement and, for UDP, is not "no checksum" (RFC 768).
        let folded = !(sum as u16);
        (if folded == 0 { 0xffff } else { folded }).to_be_bytes()
    }
}

/// Where a NIC's transmitted frames go: the whole Ethernet frame (without
/// the virtio header), still in guest memory, and its pending checksum, once
/// per frame.
pub type FrameSink = Box<dyn FnMut(GuestBytes<'_>, Option<PartialCsum>) + Send>;

/// The network device.
pub struct Net {
    mac: [u8; 6],
    mtu: Option<u16>,
    link_up: bool,
    sink: FrameSink,
    chain: DescChain,
    stats: DeviceStats,
}

impl Net {
    /// Receive queue.
    pub const RX: usize = 0;
    /// Transmit queue.
    pub const TX: usize = 1;
    /// `QueueNumMax` of both queues.
    pub const QUEUE_SIZE: u16 = 256;
    /// Largest frame (without the virtio header) in either direction: a
    /// 64 KiB payload plus the Ethernet header. Without GSO a driver sends
    /// at most its MTU plus 14, and Linux allows an MTU up to 65535 when the
    /// device does not announce one.
    pub const MAX_FRAME: usize = 65535 + 14;
    /// Smallest frame worth forwarding: an Ethernet header.
    pub const MIN_FRAME: usize = 14;

    /// A NIC with address `mac`, link up, whose transmitted frames go to
    /// `sink`: one call per frame, the whole Ethernet frame without the
    /// virtio header, and its checksum if the driver left it to the device.
    /// The frame is in the guest's buffers, valid for the call only: the
    /// sink copies what it keeps.
    pub fn new(
        mac: [u8; 6],
        sink: impl FnMut(GuestBytes<'_>, Option<PartialCsum>) + Send + 'static,
    ) -> Self {
        Self {
            mac,
            mtu: None,
            link_up: true,
            sink: Box::new(sink),
            chain: DescChain::new(),
            stats: DeviceStats::default(),
        }
    }

    /// Announces `mtu` to the driver (`VIRTIO_NET_F_MTU`); `None`: none.
    /// Frames up to [`Self::MAX_FRAME`] pass either way: the MTU tells a
    /// driver what to send and how large to make its receive buffers.
    pub fn with_mtu(mut self, mtu: Option<u16>) -> Self {
        self.mtu = mtu;
        self
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    pub fn link_up(&self) -> bool {
        self.link_up
    }

    /// Changes the link state. Do it through
    /// [`VirtioMmio::update_config`](crate::VirtioMmio::update_config) so
    /// the driver gets a configuration-change interrupt.
    pub fn set_link_up(&mut self, up: bool) {
        self.link_up = up;
    }

    /// Counts a frame dropped before it reached the device (the transport
    /// was not live).
    pub(crate) fn count_drop(&mut self) {
        self.stats.dropped += 1;
    }

    /// Copies `frame` into the next receive buffer. Its pending checksum
    /// `csum` is passed on if the driver takes such frames (`guest_csum`:
    /// it negotiated `VIRTIO_NET_F_GUEST_CSUM`), else completed in the
    /// copy. `Ok(false)`: dropped (link down, no buffer, buffer too small,
    /// frame too short or long, or a checksum outside it).
    pub fn deliver(
        &mut self,
        frame: &[u8],
        csum: Option<PartialCsum>,
        guest_csum: bool,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<bool, VirtioError> {
        let Some(q) = queues.get_mut(Self::RX) else {
            return Ok(false);
        };
        let csum_field = csum.map(|c| c.field(frame.len()));
        if !self.link_up
            || !(Self::MIN_FRAME..=Self::MAX_FRAME).contains(&frame.len())
            || csum_field == Some(None)
        {
            self.stats.dropped += 1;
            return Ok(false);
        }
        if !q.pop(ram, &mut self.chain)? {
            self.stats.dropped += 1;
            return Ok(false);
        }
        let total = HDR_LEN + frame.len();
        if (self.chain.writable_len() as usize) < total {
            // Keep the buffer for a smaller frame.
            q.undo_pop();
            self.stats.dropped += 1;
            return Ok(false);
        }
        let mut hdr = [0u8; HDR_LEN];
        hdr[10..12].copy_from_slice(&1u16.to_le_bytes()); // num_buffers
        self.chain.write_at(ram, HDR_LEN as u64, frame)?;
        match (csum, csum_field.flatten()) {
            (Some(c), Some(_)) if guest_csum => {
                hdr[0] = HDR_F_NEEDS_CSUM;
                hdr[6..8].copy_from_slice(&c.start.to_le_bytes());
                hdr[8..10].copy_from_slice(&c.offset.to_le_bytes());
            }
            (Some(c), Some(at)) => {
                self.chain.write_at(ram, (HDR_LEN + at) as u64, &c.complete(frame))?;
            }
            _ => {}
        }
        self.chain.write_at(ram, 0, &hdr)?;
        q.add_used(ram, self.chain.head(), total as u32)?;
        self.stats.requests += 1;
        self.stats.bytes_to_guest += frame.len() as u64;
        Ok(true)
    }

    fn transmit(
        &mut self,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        let Some(q) = queues.get_mut(Self::TX) else {
            return Ok(());
        };
        while q.pop(ram, &mut self.chain)? {
            let copied = self.send_one(ram)?;
            q.charge_bytes(copied);
            q.add_used(ram, self.chain.head(), 0)?;
        }
        Ok(())
    }

    /// Hands the frame of the popped chain to the sink, or counts it as an
    /// error if its header asks for an offload that was not offered or its
    /// size is impossible. Device-writable buffers in the chain are ignored.
    /// Returns the bytes copied.
    fn send_one(&mut self, ram: &dyn GuestRam) -> Result<u64, VirtioError> {
        let chain = &self.chain;
        let total = chain.readable_len() as usize;
        let mut hdr = [0u8; HDR_LEN];
        let frame_len = total.saturating_sub(HDR_LEN);
        if total < HDR_LEN || !(Self::MIN_FRAME..=Self::MAX_FRAME).contains(&frame_len) {
            self.stats.errors += 1;
            return Ok(0);
        }
        chain.read_at(ram, 0, &mut hdr)?;
        let (flags, gso_type) = (hdr[0], hdr[1]);
        let u16_at = |i: usize| u16::from_le_bytes([hdr[i], hdr[i + 1]]);
        let csum = (flags & HDR_F_NEEDS_CSUM != 0)
            .then(|| PartialCsum { start: u16_at(6), offset: u16_at(8) });
        let bad_csum = csum.is_some_and(|c| c.field(frame_len).is_none());
        if flags & !HDR_F_NEEDS_CSUM != 0 || gso_type != GSO_NONE || bad_csum {
            self.stats.errors += 1;
            return Ok(HDR_LEN as u64);
        }
        let len = frame_len as u64;
        (self.sink)(chain.readable_bytes(ram, HDR_LEN as u64, len), csum);
        self.stats.requests += 1;
        self.stats.bytes_from_guest += len;
        Ok(HDR_LEN as u64 + len)
    }
}

impl VirtioDevice for Net {
    fn device_id(&self) -> u32 {
        device_id::NET
    }

    fn name(&self) -> &'static str {
        "virtio-net"
    }

    fn features(&self) -> u64 {
        F_CSUM | F_GUEST_CSUM | F_MAC | F_STATUS | if self.mtu.is_some() { F_MTU } else { 0 }
    }

    fn queue_max_sizes(&self) -> &[u16] {
        &[Self::QUEUE_SIZE, Self::QUEUE_SIZE]
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        // struct virtio_net_config: mac[6], le16 status,
        // le16 max_virtqueue_pairs (its feature is not offered), le16 mtu.
        let mut config = [0u8; 12];
        config[..6].copy_from_slice(&self.mac);
        let status = if self.link_up { S_LINK_UP } else { 0 };
        config[6..8].copy_from_slice(&status.to_le_bytes());
        config[10..].copy_from_slice(&self.mtu.unwrap_or(0).to_le_bytes());
        copy_config(&config, offset, data);
    }

    fn process(
        &mut self,
        queue: usize,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        match queue {
            // New receive buffers: nothing waits for them (frames are
            // dropped, not queued, when there are none).
            Self::RX => Ok(()),
            Self::TX => self.transmit(queues, ram),
            _ => Ok(()),
        }
    }

    fn reset(&mut self) {
        // The scratch chain grows to the longest chain seen: released with the driver.
        self.chain = DescChain::new();
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
