//! The virtio-mmio transport, version 2 (virtio 1.x §4.2): the register
//! file of one device slot, 0x200 bytes, with one interrupt line.
//!
//! [`VirtioMmio`] wraps any [`VirtioDevice`] and implements
//! [`vdev::MmioDevice`], so it goes on the VM's MMIO bus like the PL011.
//! MMIO accesses never touch guest memory: a write to `QueueNotify` only
//! marks the queue, and the hypervisor then calls [`VirtioMmio::poll`] with
//! the VM's RAM (see the crate documentation for the whole sequence). That
//! keeps `MmioDevice` free of a RAM parameter and lets the hypervisor
//! decide when queue work runs.
//!
//! # Status and negotiation (§2.1, §3.1)
//!
//! * Writing 0 to `Status` resets the device: queues, features, interrupt
//!   status, the device's in-flight state.
//! * Other writes may only add bits (the driver never clears one without a
//!   reset). `FEATURES_OK` is refused — left clear for the driver to read
//!   back — unless the driver took only offered features, took
//!   `VIRTIO_F_VERSION_1` (this is a modern-only device), wrote nothing to
//!   feature words above 1, and the device agrees. `DRIVER_OK` without
//!   `FEATURES_OK` is likewise ignored.
//! * Driver features are frozen once `FEATURES_OK` is set.
//! * `DEVICE_NEEDS_RESET` is the device's: set on a [`VirtioError`], never
//!   by the driver, cleared only by a reset. While it is set (or `FAILED`,
//!   or before `DRIVER_OK`) the device does not touch the queues;
//!   notifications wait in the pending mask until the device is live.
//!
//! # Accesses
//!
//! Registers below 0x100 take aligned 32-bit accesses only (§4.2.2.2);
//! anything else is refused and becomes an external abort in the guest, as
//! the PL011 does. Configuration space (0x100..0x200) takes 8-, 16-, 32- and
//! 64-bit accesses. Write-only registers read as 0, read-only ones ignore
//! writes.

use alloc::vec::Vec;

use vdev::{AccessWidth, MmioDevice, MmioError};

use crate::blk::{Blk, BlockError, Token};
use crate::console::Console;
use crate::device::{DeviceStats, VirtioDevice};
use crate::error::VirtioError;
use crate::features;
use crate::net::{Net, PartialCsum};
use crate::queue::Queue;
use crate::ram::GuestRam;

/// Register offsets (§4.2.2, Table "MMIO Device Register Layout").
pub mod regs {
    pub const MAGIC_VALUE: u64 = 0x000;
    pub const VERSION: u64 = 0x004;
    pub const DEVICE_ID: u64 = 0x008;
    pub const VENDOR_ID: u64 = 0x00c;
    pub const DEVICE_FEATURES: u64 = 0x010;
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    pub const DRIVER_FEATURES: u64 = 0x020;
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    pub const QUEUE_SEL: u64 = 0x030;
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    pub const QUEUE_NUM: u64 = 0x038;
    pub const QUEUE_READY: u64 = 0x044;
    pub const QUEUE_NOTIFY: u64 = 0x050;
    pub const INTERRUPT_STATUS: u64 = 0x060;
    pub const INTERRUPT_ACK: u64 = 0x064;
    pub const STATUS: u64 = 0x070;
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    pub const QUEUE_DESC_HIGH: u64 = 0x084;
    pub const QUEUE_DRIVER_LOW: u64 = 0x090;
    pub const QUEUE_DRIVER_HIGH: u64 = 0x094;
    pub const QUEUE_DEVICE_LOW: u64 = 0x0a0;
    pub const QUEUE_DEVICE_HIGH: u64 = 0x0a4;
    pub const SHM_SEL: u64 = 0x0ac;
    pub const SHM_LEN_LOW: u64 = 0x0b0;
    pub const SHM_LEN_HIGH: u64 = 0x0b4;
    pub const SHM_BASE_LOW: u64 = 0x0b8;
    pub const SHM_BASE_HIGH: u64 = 0x0bc;
    pub const QUEUE_RESET: u64 = 0x0c0;
    pub const CONFIG_GENERATION: u64 = 0x0fc;
    /// Start of the device-specific configuration space.
    pub const CONFIG: u64 = 0x100;
}

/// Device status bits (§2.1).
pub mod status {
    pub const ACKNOWLEDGE: u32 = 1;
    pub const DRIVER: u32 = 2;
    pub const DRIVER_OK: u32 = 4;
    pub const FEATURES_OK: u32 = 8;
    pub const DEVICE_NEEDS_RESET: u32 = 64;
    pub const FAILED: u32 = 128;
}

/// `InterruptStatus` bits.
pub mod interrupt {
    /// Used Buffer Notification.
    pub const USED_BUFFER: u32 = 1;
    /// Configuration Change Notification.
    pub const CONFIG_CHANGE: u32 = 2;
}

/// `MagicValue`: "virt" in little-endian.
pub const MAGIC: u32 = 0x7472_6976;
/// `Version` of the non-legacy interface.
pub const VERSION: u32 = 2;
/// `VendorID`: "armh" in little-endian. Drivers match on the device ID.
pub const VENDOR_ID: u32 = u32::from_le_bytes(*b"armh");
/// Size of one device's register window.
pub const REGION_SIZE: u64 = 0x200;
/// Most queues a device may have (the pending-notification mask is 64-bit).
pub const MAX_QUEUES: usize = 64;

/// Transport counters for the statistics screen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Writes to `QueueNotify` naming an existing queue.
    pub notifications: u64,
    /// Times the interrupt line went from low to high.
    pub interrupts: u64,
    /// Times the device entered `DEVICE_NEEDS_RESET`.
    pub needs_reset: u64,
    /// Device resets (driver writing 0 to `Status`, or the hypervisor).
    pub resets: u64,
    /// MMIO accesses refused (bad width, alignment, offset).
    pub bad_accesses: u64,
}

/// Everything the statistics screen shows for one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub transport: TransportStats,
    pub device: DeviceStats,
}

/// One virtio-mmio device slot.
pub struct VirtioMmio<D: VirtioDevice> {
    device: D,
    queues: Vec<Queue>,
    /// Features offered: the device's plus the transport's ring features.
    offered: u64,
    status: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    /// The driver set a bit in a feature word above 1: no such features.
    driver_features_beyond_64: bool,
    queue_sel: u32,
    interrupt_status: u32,
    config_generation: u32,
    /// Queues notified and not yet processed (bit i = queue i).
    pending: u64,
    /// Why the device is in `DEVICE_NEEDS_RESET` (or last was).
    error: Option<VirtioError>,
    /// `error` not yet taken by [`VirtioMmio::take_error`].
    error_unreported: bool,
    stats: TransportStats,
}

impl<D: VirtioDevice> VirtioMmio<D> {
    /// The transport features offered by default.
    pub const RING_FEATURES: u64 =
        features::VERSION_1 | features::INDIRECT_DESC | features::EVENT_IDX;

    /// A device slot in reset state.
    pub fn new(device: D) -> Self {
        let queues =
            device.queue_max_sizes().iter().take(MAX_QUEUES).map(|&m| Queue::new(m)).collect();
        let offered = device.features() | Self::RING_FEATURES;
        Self {
            device,
            queues,
            offered,
            status: 0,
            device_features_sel: 0,
            driver_features_sel: 0,
            driver_features: 0,
            driver_features_beyond_64: false,
            queue_sel: 0,
            interrupt_status: 0,
            config_generation: 0,
            pending: 0,
            error: None,
            error_unreported: false,
            stats: TransportStats::default(),
        }
    }

    /// Stops offering some of the transport's optional features
    /// (`VIRTIO_F_EVENT_IDX`, `VIRTIO_F_INDIRECT_DESC`), e.g. to measure
    /// what they gain. `VIRTIO_F_VERSION_1` stays.
    pub fn without_features(mut self, mask: u64) -> Self {
        self.offered &= !(mask & !features::VERSION_1);
        self
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, e.g. to push console input. A change to what its
    /// configuration space shows should go through
    /// [`VirtioMmio::update_config`] instead.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    pub fn queue(&self, index: usize) -> Option<&Queue> {
        self.queues.get(index)
    }

    /// Features offered to the driver.
    pub fn offered_features(&self) -> u64 {
        self.offered
    }

    /// Features the driver accepted, once `FEATURES_OK` is set.
    pub fn negotiated_features(&self) -> Option<u64> {
        (self.status & status::FEATURES_OK != 0).then_some(self.driver_features)
    }

    /// The `Status` register.
    pub fn status(&self) -> u32 {
        self.status
    }

    pub fn interrupt_status(&self) -> u32 {
        self.interrupt_status
    }

    /// The level of the device's interrupt line: for the vGIC to sample
    /// after every MMIO access, poll or delivery (an SPI, level-sensitive).
    pub fn irq_level(&self) -> bool {
        self.interrupt_status != 0
    }

    /// Whether the device is in `DEVICE_NEEDS_RESET`.
    pub fn needs_reset(&self) -> bool {
        self.status & status::DEVICE_NEEDS_RESET != 0
    }

    /// The error that put the device in `DEVICE_NEEDS_RESET`, kept after a
    /// reset too (for the statistics screen).
    pub fn last_error(&self) -> Option<VirtioError> {
        self.error
    }

    /// The error that just put the device in `DEVICE_NEEDS_RESET`, once:
    /// what the hypervisor logs.
    pub fn take_error(&mut self) -> Option<VirtioError> {
        if self.error_unreported {
            self.error_unreported = false;
            self.error
        } else {
            None
        }
    }

    pub fn stats(&self) -> Stats {
        Stats { transport: self.stats, device: self.device.stats() }
    }

    /// Whether the device accepts queue work: `DRIVER_OK`, and neither
    /// `DEVICE_NEEDS_RESET` nor `FAILED`.
    pub fn is_live(&self) -> bool {
        self.status & (status::DRIVER_OK | status::DEVICE_NEEDS_RESET | status::FAILED)
            == status::DRIVER_OK
    }

    /// Whether a round left notified work undone (a queue's budget ran out): the next
    /// [`VirtioMmio::poll`] goes on with it. Input waiting for the driver's buffers is not
    /// such work: the driver's notification brings it.
    pub fn has_leftover(&self) -> bool {
        self.is_live() && self.pending != 0
    }

    /// Whether [`VirtioMmio::poll`] has something to do.
    pub fn has_pending(&self) -> bool {
        self.is_live() && (self.pending != 0 || self.device.has_pending_work())
    }

    /// Processes notified queues and device-originated work (console input).
    /// Call after an MMIO write, and again while [`VirtioMmio::has_pending`]
    /// says so: each queue is served for at most one queue's worth of
    /// chains per call.
    pub fn poll(&mut self, ram: &mut dyn GuestRam) {
        let pending = core::mem::take(&mut self.pending);
        for q in (0..self.queues.len()).filter(|q| pending & (1 << q) != 0) {
            if !self.is_live() {
                // Not live: keep the notification for later.
                self.pending |= 1 << q;
                continue;
            }
            self.run(ram, |dev, queues, ram| dev.process(q, queues, ram));
        }
        if self.device.has_pending_work() {
            self.run(ram, |dev, queues, ram| dev.poll(queues, ram));
        }
    }

    /// A notification of `queue` delivered by other means than the
    /// `QueueNotify` register (or right after it): processes it now.
    pub fn notify(&mut self, queue: u16, ram: &mut dyn GuestRam) {
        if usize::from(queue) < self.queues.len() {
            self.pending |= 1 << queue;
            self.stats.notifications += 1;
        }
        self.poll(ram);
    }

    /// Runs `f` on the device and its queues if the device is live, then
    /// raises the used-buffer interrupt if a queue needs it, or enters
    /// `DEVICE_NEEDS_RESET` if `f` (or the notification check) failed.
    /// `None` if the device was not live or failed. This is how
    /// device-specific entry points such as [`VirtioMmio::deliver`] get at
    /// the queues.
    pub fn with_device<R>(
        &mut self,
        ram: &mut dyn GuestRam,
        f: impl FnOnce(&mut D, &mut [Queue], &mut dyn GuestRam) -> Result<R, VirtioError>,
    ) -> Option<R> {
        self.run(ram, f)
    }

    fn run<R>(
        &mut self,
        ram: &mut dyn GuestRam,
        f: impl FnOnce(&mut D, &mut [Queue], &mut dyn GuestRam) -> Result<R, VirtioError>,
    ) -> Option<R> {
        if !self.is_live() {
            return None;
        }
        for q in &mut self.queues {
            q.start_round();
        }
        let result = f(&mut self.device, &mut self.queues, ram);
        let mut notify = false;
        for (i, q) in self.queues.iter_mut().enumerate() {
            if q.round_exhausted() {
                self.pending |= 1 << i;
            }
            match q.needs_notification(ram) {
                Ok(n) => notify |= n,
                Err(e) => {
                    self.fail(e);
                    return None;
                }
            }
        }
        if notify {
            self.raise(interrupt::USED_BUFFER);
        }
        match result {
            Ok(r) => Some(r),
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// Changes the device's configuration through `f` and tells the driver:
    /// a new `ConfigGeneration` and a configuration-change interrupt
    /// (§2.5). E.g. `mmio.update_config(|net| net.set_link_up(false))`.
    pub fn update_config<R>(&mut self, f: impl FnOnce(&mut D) -> R) -> R {
        let r = f(&mut self.device);
        self.config_generation = self.config_generation.wrapping_add(1);
        if self.status & status::DRIVER_OK != 0 {
            self.raise(interrupt::CONFIG_CHANGE);
        }
        r
    }

    /// Resets the device as a driver write of 0 to `Status` does (the VM
    /// restarts).
    pub fn reset(&mut self) {
        self.device.reset();
        for q in &mut self.queues {
            q.reset();
        }
        self.status = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.driver_features = 0;
        self.driver_features_beyond_64 = false;
        self.queue_sel = 0;
        self.interrupt_status = 0;
        self.pending = 0;
        self.error_unreported = false;
        self.stats.resets += 1;
    }

    fn raise(&mut self, bit: u32) {
        if self.interrupt_status == 0 {
            self.stats.interrupts += 1;
        }
        self.interrupt_status |= bit;
    }

    /// Enters `DEVICE_NEEDS_RESET` for `err` (the first error is kept).
    fn fail(&mut self, err: VirtioError) {
        if self.needs_reset() {
            return;
        }
        self.status |= status::DEVICE_NEEDS_RESET;
        self.error = Some(err);
        self.error_unreported = true;
        self.stats.needs_reset += 1;
        // §2.1.2: once DRIVER_OK is set, a configuration change
        // notification tells the driver to look at the status.
        if self.status & status::DRIVER_OK != 0 {
            self.raise(interrupt::CONFIG_CHANGE);
        }
    }

    fn features_acceptable(&self) -> bool {
        let f = self.driver_features;
        !self.driver_features_beyond_64
            && f & !self.offered == 0
            && f & features::VERSION_1 != 0
            && self.device.validate_features(f)
    }

    fn write_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        let mut add = value & 0xff & !self.status & !status::DEVICE_NEEDS_RESET;
        if add & status::FEATURES_OK != 0 && !self.features_acceptable() {
            add &= !status::FEATURES_OK;
        }
        if add & status::DRIVER_OK != 0 && (self.status | add) & status::FEATURES_OK == 0 {
            add &= !status::DRIVER_OK;
        }
        self.status |= add;
        if add & status::DRIVER_OK != 0 {
            for q in &mut self.queues {
                q.set_ring_features(self.driver_features);
            }
            self.device.activate(self.driver_features);
        }
    }

    fn selected(&mut self) -> Option<&mut Queue> {
        self.queues.get_mut(self.queue_sel as usize)
    }

    fn read_reg(&mut self, offset: u64) -> u32 {
        let q = self.queues.get(self.queue_sel as usize);
        match offset {
            regs::MAGIC_VALUE => MAGIC,
            regs::VERSION => VERSION,
            regs::DEVICE_ID => self.device.device_id(),
            regs::VENDOR_ID => VENDOR_ID,
            regs::DEVICE_FEATURES => match self.device_features_sel {
                0 => self.offered as u32,
                1 => (self.offered >> 32) as u32,
                _ => 0,
            },
            regs::QUEUE_NUM_MAX => q.map_or(0, |q| q.max_size().into()),
            regs::QUEUE_READY => q.is_some_and(Queue::is_ready).into(),
            regs::INTERRUPT_STATUS => self.interrupt_status,
            regs::STATUS => self.status,
            // No shared memory regions: a length of all ones says so.
            regs::SHM_LEN_LOW | regs::SHM_LEN_HIGH | regs::SHM_BASE_LOW | regs::SHM_BASE_HIGH => {
                u32::MAX
            }
            regs::CONFIG_GENERATION => self.config_generation,
            _ => 0,
        }
    }

    fn write_reg(&mut self, offset: u64, value: u32) {
        // Replaces the low or high half of a 64-bit register.
        let half = |old: u64, high: bool| {
            if high {
                (old & 0xffff_ffff) | (u64::from(value) << 32)
            } else {
                (old & !0xffff_ffff) | u64::from(value)
            }
        };
        match offset {
            regs::DEVICE_FEATURES_SEL => self.device_features_sel = value,
            regs::DRIVER_FEATURES_SEL => self.driver_features_sel = value,
            regs::DRIVER_FEATURES if self.status & status::FEATURES_OK == 0 => {
                match self.driver_features_sel {
                    0 | 1 => {
                        self.driver_features =
                            half(self.driver_features, self.driver_features_sel == 1)
                    }
                    _ => self.driver_features_beyond_64 |= value != 0,
                }
            }
            regs::QUEUE_SEL => self.queue_sel = value,
            regs::QUEUE_NUM => {
                if let Some(q) = self.selected() {
                    q.set_size(value);
                }
            }
            regs::QUEUE_READY => self.write_queue_ready(value),
            regs::QUEUE_NOTIFY => {
                // Without VIRTIO_F_NOTIFICATION_DATA the value is the index.
                let q = value as usize;
                if q < self.queues.len() {
                    self.pending |= 1 << q;
                    self.stats.notifications += 1;
                }
            }
            regs::INTERRUPT_ACK => self.interrupt_status &= !value,
            regs::STATUS => self.write_status(value),
            regs::QUEUE_DESC_LOW | regs::QUEUE_DESC_HIGH => {
                if let Some(q) = self.selected() {
                    q.set_desc_addr(half(q.desc_addr(), offset == regs::QUEUE_DESC_HIGH));
                }
            }
            regs::QUEUE_DRIVER_LOW | regs::QUEUE_DRIVER_HIGH => {
                if let Some(q) = self.selected() {
                    q.set_avail_addr(half(q.avail_addr(), offset == regs::QUEUE_DRIVER_HIGH));
                }
            }
            regs::QUEUE_DEVICE_LOW | regs::QUEUE_DEVICE_HIGH => {
                if let Some(q) = self.selected() {
                    q.set_used_addr(half(q.used_addr(), offset == regs::QUEUE_DEVICE_HIGH));
                }
            }
            // Read-only registers, SHMSel with no regions, QueueReset
            // without VIRTIO_F_RING_RESET, and holes: ignored.
            _ => {}
        }
    }

    fn write_queue_ready(&mut self, value: u32) {
        let features = self.driver_features;
        let sel = self.queue_sel as usize;
        let Some(q) = self.queues.get_mut(sel) else {
            return;
        };
        if value == 0 {
            q.disable();
            self.pending &= !(1 << sel);
        } else if !q.is_ready()
            && let Err(e) = q.enable(features)
        {
            self.fail(e);
        }
    }

    /// Checks an access: inside the window, naturally aligned, 32-bit below
    /// the configuration space.
    fn check(&mut self, offset: u64, width: AccessWidth) -> Result<(), MmioError> {
        let res = if offset.checked_add(width.bytes()).is_none_or(|end| end > REGION_SIZE) {
            Err(MmioError::Unmapped)
        } else if !offset.is_multiple_of(width.bytes()) {
            Err(MmioError::Unaligned)
        } else if offset < regs::CONFIG && width != AccessWidth::Word {
            Err(MmioError::BadWidth)
        } else {
            Ok(())
        };
        if res.is_err() {
            self.stats.bad_accesses += 1;
        }
        res
    }
}

impl VirtioMmio<Net> {
    /// Delivers a received frame to the guest (from the switch), with the
    /// checksum its sender left to be completed, if any. `false` when it was
    /// dropped: device not live, link down, no receive buffer or one too
    /// small. Sample [`VirtioMmio::irq_level`] afterwards.
    pub fn deliver(
        &mut self,
        frame: &[u8],
        csum: Option<PartialCsum>,
        ram: &mut dyn GuestRam,
    ) -> bool {
        if !self.is_live() {
            self.device.count_drop();
            return false;
        }
        let guest_csum = self.negotiated_features().unwrap_or(0) & crate::net::F_GUEST_CSUM != 0;
        self.run(ram, |net, queues, ram| net.deliver(frame, csum, guest_csum, queues, ram))
            .unwrap_or(false)
    }
}

impl VirtioMmio<Blk> {
    /// The block backend finished the request of `token` (from the physical
    /// device's interrupt): its status and used element now, the interrupt
    /// if the driver wants one, and the chains that waited for a free slot.
    /// `false` if the token names no request in flight (submitted before a
    /// reset, or completed already): then nothing of the guest's is
    /// touched. While the device is in `DEVICE_NEEDS_RESET` the request is
    /// only forgotten. Sample [`VirtioMmio::irq_level`] afterwards.
    pub fn complete(
        &mut self,
        token: Token,
        result: Result<(), BlockError>,
        ram: &mut dyn GuestRam,
    ) -> bool {
        let done = if self.is_live() {
            self.run(ram, |blk, queues, ram| blk.complete(token, result, queues, ram))
                .unwrap_or(false)
        } else {
            self.device.discard(token)
        };
        if self.has_pending() {
            self.poll(ram);
        }
        done
    }
}

impl VirtioMmio<Blk> {
    /// The backend, which answered [`Submit::Busy`](crate::blk::Submit::Busy), has room
    /// again: the device takes the chains it gave back and those that came since.
    pub fn backend_ready(&mut self, ram: &mut dyn GuestRam) {
        self.run(ram, |dev, queues, ram| dev.process(0, queues, ram));
    }
}

impl VirtioMmio<Console> {
    /// Queues console input ([`Console::push_input`]) and delivers what
    /// fits into the driver's receive buffers now. Returns how many bytes
    /// were taken; the caller keeps the rest for later.
    pub fn push_input(&mut self, bytes: &[u8], ram: &mut dyn GuestRam) -> usize {
        let n = self.device.push_input(bytes);
        self.poll(ram);
        n
    }
}

impl<D: VirtioDevice> MmioDevice for VirtioMmio<D> {
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.check(offset, width)?;
        if offset >= regs::CONFIG {
            let mut buf = [0u8; 8];
            let n = width.bytes() as usize;
            self.device.read_config(offset - regs::CONFIG, &mut buf[..n]);
            return Ok(u64::from_le_bytes(buf));
        }
        Ok(self.read_reg(offset).into())
    }

    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.check(offset, width)?;
        if offset >= regs::CONFIG {
            let bytes = value.to_le_bytes();
            let n = width.bytes() as usize;
            self.device.write_config(offset - regs::CONFIG, &bytes[..n]);
            return Ok(());
        }
        self.write_reg(offset, value as u32);
        Ok(())
    }

    fn name(&self) -> &'static str {
        self.device.name()
    }
}

/// A run of virtio-mmio transports with no device behind them, as QEMU's `virt` board answers
/// for its unused slots: the magic value, version 2, the vendor, and device ID 0, which drivers
/// read as "nothing here" and skip. Everything else reads as 0 and writes are ignored, so a
/// program that probes every slot of the machine it was written for runs unchanged. Stateless:
/// one bus entry serves the whole run, at one trap per access, like any device register.
#[derive(Debug, Default)]
pub struct EmptyTransports;

impl MmioDevice for EmptyTransports {
    fn read(&mut self, offset: u64, _width: AccessWidth) -> Result<u64, MmioError> {
        Ok(match offset % REGION_SIZE {
            regs::MAGIC_VALUE => MAGIC,
            regs::VERSION => VERSION,
            regs::VENDOR_ID => VENDOR_ID,
            _ => 0,
        }
        .into())
    }

    fn write(&mut self, _offset: u64, _width: AccessWidth, _value: u64) -> Result<(), MmioError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "virtio-mmio (empty)"
    }
}

/// What the hypervisor needs from any virtio slot, whatever its device
/// type: keep slots as `Box<dyn VirtioTransport>`, use them as
/// [`MmioDevice`]s on the bus, and get the concrete type back with
/// `downcast_mut` (on `dyn VirtioTransport`) for
/// device-specific calls.
pub trait VirtioTransport: MmioDevice {
    /// See [`VirtioMmio::poll`].
    fn poll(&mut self, ram: &mut dyn GuestRam);
    /// See [`VirtioMmio::notify`].
    fn notify(&mut self, queue: u16, ram: &mut dyn GuestRam);
    /// See [`VirtioMmio::has_pending`].
    fn has_pending(&self) -> bool;
    /// See [`VirtioMmio::has_leftover`].
    fn has_leftover(&self) -> bool;
    /// See [`VirtioMmio::irq_level`].
    fn irq_level(&self) -> bool;
    /// See [`VirtioMmio::stats`].
    fn stats(&self) -> Stats;
    /// See [`VirtioMmio::take_error`].
    fn take_error(&mut self) -> Option<VirtioError>;
    /// See [`VirtioMmio::reset`].
    fn reset(&mut self);
    /// The device ID.
    fn device_id(&self) -> u32;
    /// Queue `index`'s progress, for diagnostics: (next available entry to take, `used.idx`),
    /// `None` past the last queue.
    fn queue_progress(&self, index: usize) -> Option<(u16, u16)>;
}

impl<D: VirtioDevice> VirtioTransport for VirtioMmio<D> {
    fn poll(&mut self, ram: &mut dyn GuestRam) {
        VirtioMmio::poll(self, ram)
    }
    fn notify(&mut self, queue: u16, ram: &mut dyn GuestRam) {
        VirtioMmio::notify(self, queue, ram)
    }
    fn has_pending(&self) -> bool {
        VirtioMmio::has_pending(self)
    }
    fn has_leftover(&self) -> bool {
        VirtioMmio::has_leftover(self)
    }
    fn irq_level(&self) -> bool {
        VirtioMmio::irq_level(self)
    }
    fn stats(&self) -> Stats {
        VirtioMmio::stats(self)
    }
    fn take_error(&mut self) -> Option<VirtioError> {
        VirtioMmio::take_error(self)
    }
    fn reset(&mut self) {
        VirtioMmio::reset(self)
    }
    fn device_id(&self) -> u32 {
        self.device.device_id()
    }
    fn queue_progress(&self, index: usize) -> Option<(u16, u16)> {
        self.queue(index).map(|q| (q.next_avail(), q.used_idx()))
    }
}

impl dyn VirtioTransport {
    /// The slot as its concrete type, if it is a `T` (e.g.
    /// `VirtioMmio<Console>`).
    pub fn downcast_mut<T: VirtioTransport>(&mut self) -> Option<&mut T> {
        (self as &mut dyn core::any::Any).downcast_mut::<T>()
    }

    /// The slot as its concrete type, if it is a `T`.
    pub fn downcast_ref<T: VirtioTransport>(&self) -> Option<&T> {
        (self as &dyn core::any::Any).downcast_ref::<T>()
    }
}
