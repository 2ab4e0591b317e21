//! virtio-net (virtio 1.x §5.1), one queue pair, no offloads.
//!
//! Offered: `VIRTIO_NET_F_MAC` (the MAC in configuration space),
//! `VIRTIO_NET_F_STATUS` (link state) and, when the NIC is given one,
//! `VIRTIO_NET_F_MTU` (an MTU other than Ethernet's 1500, up to 65535: a
//! Linux driver then sizes its receive buffers for it, and bulk transfers
//! take a fortieth of the frames at 64 KiB); no checksum or segmentation offload,
//! no mergeable receive buffers, no control queue. So every frame is
//! preceded by the 12-byte `struct virtio_net_hdr` of a VERSION_1 device
//! with all fields zero except `num_buffers`, which is 1 on receive.
//!
//! * **Transmit** (queue 1): each chain is a header and a frame. The frame
//!   goes to the caller's sink as a host slice of guest memory when it lies
//!   in one piece (the common case: Linux puts header and frame in one
//!   buffer or the frame in one page); only a frame scattered over several
//!   buffers or chunks is gathered into a reusable buffer first.
//! * **Receive** (queue 0): the hypervisor calls
//!   [`VirtioMmio::<Net>::deliver`](crate::VirtioMmio::deliver) with a frame
//!   (from the [`Switch`](crate::switch::Switch)); it is copied into the
//!   next receive buffer, or dropped and counted when there is none, when
//!   it does not fit, or when the link is down. Nothing is queued inside
//!   the device: a switch must not be able to make one VM's NIC hold memory
//!   on behalf of another.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::device::{ByteSink, DeviceStats, VirtioDevice, copy_config, device_id};
use crate::error::VirtioError;
use crate::queue::{DescChain, Queue};
use crate::ram::GuestRam;

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
/// `virtio_net_hdr.flags`: the driver wants a checksum filled in.
const HDR_F_NEEDS_CSUM: u8 = 1;
/// `virtio_net_hdr.gso_type` for a plain frame.
const GSO_NONE: u8 = 0;

/// The network device.
pub struct Net {
    mac: [u8; 6],
    mtu: Option<u16>,
    link_up: bool,
    sink: ByteSink,
    chain: DescChain,
    /// Gather buffer for frames not contiguous in host memory; kept to
    /// avoid an allocation per frame.
    tx_buf: Vec<u8>,
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
    /// virtio header. The slice is guest memory or the gather buffer, valid
    /// for the call only: a sink that forwards later must copy.
    pub fn new(mac: [u8; 6], sink: impl FnMut(&[u8]) + Send + 'static) -> Self {
        Self {
            mac,
            mtu: None,
            link_up: true,
            sink: Box::new(sink),
            chain: DescChain::new(),
            tx_buf: Vec::new(),
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

    /// Copies `frame` into the next receive buffer. `Ok(false)`: dropped
    /// (link down, no buffer, buffer too small, frame too short or long).
    pub fn deliver(
        &mut self,
        frame: &[u8],
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<bool, VirtioError> {
        let Some(q) = queues.get_mut(Self::RX) else {
            return Ok(false);
        };
        if !self.link_up || !(Self::MIN_FRAME..=Self::MAX_FRAME).contains(&frame.len()) {
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
        self.chain.write_at(ram, 0, &hdr)?;
        self.chain.write_at(ram, HDR_LEN as u64, frame)?;
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
            self.send_one(ram)?;
            q.add_used(ram, self.chain.head(), 0)?;
        }
        Ok(())
    }

    /// Hands the frame of the popped chain to the sink, or counts it as an
    /// error if its header asks for an offload that was not offered or its
    /// size is impossible. Device-writable buffers in the chain are ignored.
    fn send_one(&mut self, ram: &dyn GuestRam) -> Result<(), VirtioError> {
        let chain = &self.chain;
        let total = chain.readable_len() as usize;
        let mut hdr = [0u8; HDR_LEN];
        let frame_len = total.saturating_sub(HDR_LEN);
        if total < HDR_LEN || !(Self::MIN_FRAME..=Self::MAX_FRAME).contains(&frame_len) {
            self.stats.errors += 1;
            return Ok(());
        }
        chain.read_at(ram, 0, &mut hdr)?;
        let (flags, gso_type) = (hdr[0], hdr[1]);
        if flags & HDR_F_NEEDS_CSUM != 0 || gso_type != GSO_NONE {
            self.stats.errors += 1;
            return Ok(());
        }
        let (off, len) = (HDR_LEN as u64, frame_len as u64);
        if let Some(frame) = chain.readable_slice(ram, off, len) {
            (self.sink)(frame);
        } else {
            let buf = &mut self.tx_buf;
            buf.clear();
            chain.for_each_readable(ram, off, len, &mut |s| buf.extend_from_slice(s))?;
            (self.sink)(buf);
        }
        self.stats.requests += 1;
        self.stats.bytes_from_guest += len;
        Ok(())
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
        F_MAC | F_STATUS | if self.mtu.is_some() { F_MTU } else { 0 }
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
        // Scratch space grown for the previous driver instance is released with it.
        self.tx_buf = Vec::new();
        self.chain = DescChain::new();
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
