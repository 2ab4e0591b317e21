//! What a device type implements: [`VirtioDevice`].
//!
//! The transport ([`crate::VirtioMmio`]) owns everything common to all
//! devices — status, feature negotiation, queue configuration, interrupts,
//! resets — and calls the device for the parts that differ: its ID, its
//! feature bits and configuration space, and what a buffer on each queue
//! means. A device never sees an MMIO access and never raises an interrupt;
//! it pops chains, does the work, and returns them with
//! [`Queue::add_used`](crate::Queue::add_used). Whether that warrants an
//! interrupt is decided by the transport afterwards, from the ring's
//! notification-suppression fields.

use alloc::boxed::Box;

use crate::error::VirtioError;
use crate::queue::Queue;
use crate::ram::GuestRam;

/// Where a device sends bytes that leave the VM (console output): called
/// once per piece, in order, with a copy the device made.
pub type ByteSink = Box<dyn FnMut(&[u8]) + Send>;

/// Device IDs (virtio 1.x §5).
pub mod device_id {
    pub const NET: u32 = 1;
    pub const BLOCK: u32 = 2;
    pub const CONSOLE: u32 = 3;
    pub const ENTROPY: u32 = 4;
}

/// Per-device counters for the hypervisor's statistics screen.
///
/// "From guest" and "to guest" are the direction of the data: bytes a
/// block write or a transmitted frame took out of guest buffers, bytes a
/// block read, a received frame, console input or entropy put into them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Requests completed (chains returned to the driver, frames delivered).
    pub requests: u64,
    /// Payload bytes taken from guest buffers.
    pub bytes_from_guest: u64,
    /// Payload bytes written into guest buffers.
    pub bytes_to_guest: u64,
    /// Requests that completed with an error (block I/O error or
    /// unsupported request, a transmitted frame with an unusable header).
    pub errors: u64,
    /// Frames or input bytes dropped: no receive buffer, buffer too small,
    /// link down, input buffer full.
    pub dropped: u64,
}

/// One virtio device type behind a transport.
///
/// `process` and `poll` return `Err` only for driver errors the device
/// cannot carry on from; the transport then sets `DEVICE_NEEDS_RESET`. Work
/// completed before the error stays completed.
pub trait VirtioDevice: Send + 'static {
    /// Device ID (see [`device_id`]).
    fn device_id(&self) -> u32;

    /// Short name for diagnostics ("virtio-blk").
    fn name(&self) -> &'static str;

    /// Device-type feature bits offered to the driver. The transport adds
    /// `VIRTIO_F_VERSION_1`, `VIRTIO_F_INDIRECT_DESC` and
    /// `VIRTIO_F_EVENT_IDX` itself.
    fn features(&self) -> u64;

    /// `QueueNumMax` of each queue; the number of queues is the length.
    fn queue_max_sizes(&self) -> &[u16];

    /// Reads configuration space bytes `[offset, offset + data.len())`.
    /// `data` arrives zeroed; bytes past the device's configuration stay 0.
    fn read_config(&self, offset: u64, data: &mut [u8]);

    /// A driver write to configuration space. Most fields are read-only;
    /// the default ignores the write.
    fn write_config(&mut self, offset: u64, data: &[u8]) {
        let _ = (offset, data);
    }

    /// Last word on the driver's feature choice at `FEATURES_OK`: `false`
    /// refuses it. The transport has already checked that only offered
    /// features were taken and that `VIRTIO_F_VERSION_1` is among them.
    fn validate_features(&self, features: u64) -> bool {
        let _ = features;
        true
    }

    /// The driver set `DRIVER_OK` having negotiated `features`.
    fn activate(&mut self, features: u64) {
        let _ = features;
    }

    /// The driver notified `queue` (an index into `queues`): consume what it
    /// made available. Called only while the device is live (`DRIVER_OK`,
    /// no `DEVICE_NEEDS_RESET`); queues that are not ready pop nothing.
    fn process(
        &mut self,
        queue: usize,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError>;

    /// Whether the device has work of its own to push to the driver (input
    /// waiting for receive buffers): the transport then calls `poll`.
    fn has_pending_work(&self) -> bool {
        false
    }

    /// Moves device-originated work into the queues.
    fn poll(&mut self, queues: &mut [Queue], ram: &mut dyn GuestRam) -> Result<(), VirtioError> {
        let _ = (queues, ram);
        Ok(())
    }

    /// Device reset (the driver wrote 0 to `Status`, or the VM restarts):
    /// drop in-flight state. Statistics are kept.
    fn reset(&mut self);

    /// Counters so far.
    fn stats(&self) -> DeviceStats;
}

/// Copies the part of `config` (a device's configuration structure, as
/// little-endian bytes) that overlaps `[offset, offset + data.len())` into
/// `data`; the rest of `data` is left as it is (zero).
pub fn copy_config(config: &[u8], offset: u64, data: &mut [u8]) {
    let Ok(start) = usize::try_from(offset) else {
        return;
    };
    if let Some(src) = config.get(start..) {
        let n = src.len().min(data.len());
        data[..n].copy_from_slice(&src[..n]);
    }
}
