//! Virtio devices inside the hypervisor: the device side of virtio-mmio
//! version 2 (virtio 1.x, split virtqueues), working directly on guest
//! memory.
//!
//! ```text
//!  guest MMIO trap ──> VirtioMmio (MmioDevice): registers, status, features,
//!                      queue setup; QueueNotify only marks the queue
//!                          │
//!  hypervisor ── poll(&mut ram) ──> VirtioDevice::process(queue)
//!                          │          Queue::pop ─> DescChain (validated)
//!                          │          data copied straight between guest
//!                          │          buffers and the backend / the switch
//!                          │          Queue::add_used
//!                          v
//!                      used-buffer interrupt if the driver wants one
//!                      (EVENT_IDX / NO_INTERRUPT) ─> irq_level() ─> vGIC SPI
//! ```
//!
//! * [`ram`]: the [`GuestRam`] trait — copies to and from guest-physical
//!   ranges, every access bounds-checked, never a Rust reference into guest
//!   memory (why: the module's documentation) — and [`VecRam`] for tests.
//! * [`queue`]: split virtqueues and descriptor-chain validation. Any
//!   driver error becomes a [`VirtioError`], never a panic and never an
//!   access outside RAM.
//! * [`mmio`]: the register file ([`VirtioMmio`]); driver errors put the
//!   device in `DEVICE_NEEDS_RESET`.
//! * Devices: [`Blk`], [`Net`], [`Console`], [`Rng`], each a
//!   [`VirtioDevice`]; and [`Switch`], the Ethernet switch that connects
//!   the VMs' NICs (each with its configured MAC) and an uplink.
//! * [`BlockBackend`]: what a disk behind [`Blk`] implements, one trait
//!   for every kind (RAM disks complete a request during its submission, a
//!   physical disk later); [`Partition`] is a window of another backend.
//!
//! Section numbers (§) are those of the virtio 1.2 specification.
//!
//! # Wiring a device into the hypervisor
//!
//! One slot is a 0x200-byte MMIO window and one level-sensitive SPI (QEMU
//! `virt` puts slot *n* at `0x0a00_0000 + n * 0x200` with SPI 16 + *n*).
//!
//! 1. Build it: `VirtioMmio::new(Blk::new(disk))`, `VirtioMmio::new(Net::new(mac,
//!    sink))`, ... and put it on the VM's `MmioBus` with a [`REGION_SIZE`]
//!    range — directly, or inside a hypervisor wrapper that also holds the
//!    VM's memory.
//! 2. On every guest access: `read` / `write` ([`vdev::MmioDevice`]). After
//!    a write, if [`VirtioMmio::has_pending`], call
//!    [`VirtioMmio::poll`]`(&mut ram)` — now, before resuming the vCPU, or
//!    from a later point of the hypervisor's choosing; and again while
//!    `has_pending` stays true (work is served a queue's worth at a time).
//! 3. After every access, poll or delivery: sample
//!    [`VirtioMmio::irq_level`] and set the SPI's level in the vGIC. If
//!    [`VirtioMmio::take_error`] returns an error, log it: the device is in
//!    `DEVICE_NEEDS_RESET` until the guest resets it.
//! 4. Asynchronous input: [`Console::push_input`] through
//!    [`VirtioMmio::device_mut`] then `poll`; a frame from the [`Switch`]
//!    with [`VirtioMmio::deliver`]; link changes with
//!    [`VirtioMmio::update_config`]; a block request that a backend
//!    completes later (its [`Submit::Pending`]) with
//!    [`VirtioMmio::complete`] and the request's [`Token`], from the
//!    physical device's interrupt handler (see [`blk`]).
//! 5. [`VirtioMmio::stats`] for the statistics screen; [`VirtioMmio::reset`]
//!    when the VM restarts.
//!
//! [`VirtioTransport`] is the same interface as an object-safe trait, for a
//! list of slots of different device types.
//!
//! ```
//! use addr::Ipa;
//! use vdev::{AccessWidth, MmioDevice};
//! use virtio::{Blk, VecRam, VirtioMmio};
//!
//! // The hypervisor's RAM view would go here; VecRam stands in for it.
//! let mut ram = VecRam::new(Ipa(0x4000_0000), 2 << 20);
//! let mut slot = VirtioMmio::new(Blk::new(vec![0u8; 1 << 20]));
//! // A trapped guest read of MagicValue, then a write to QueueNotify.
//! assert_eq!(slot.read(0x000, AccessWidth::Word), Ok(0x7472_6976));
//! slot.write(0x050, AccessWidth::Word, 0).unwrap();
//! if slot.has_pending() {
//!     slot.poll(&mut ram); // nothing happens: the driver has not set DRIVER_OK
//! }
//! let level = slot.irq_level(); // -> the vGIC's SPI level
//! assert!(!level);
//! if let Some(err) = slot.take_error() {
//!     // log::warn!("virtio-blk needs reset: {err}");
//!     let _ = err;
//! }
//! ```
//!
//! # Locking
//!
//! Every method takes `&self` or `&mut self`; the hypervisor keeps a slot
//! behind its VM's device-bus lock. A [`GuestRam`] is borrowed for one call.
#![no_std]
// Nothing here needs `unsafe`: guest memory is reached only through the
// `GuestRam` implementation's copies, which is where the hypervisor's
// raw-pointer accesses live.
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod blk;
pub mod console;
pub mod device;
pub mod error;
pub mod mmio;
pub mod net;
pub mod queue;
pub mod ram;
pub mod rng;
pub mod switch;
#[cfg(test)]
mod tests;

pub use blk::{Blk, BlockBackend, BlockError, Op, Partition, Request, Submit, Token};
pub use console::Console;
pub use device::{ByteSink, DeviceStats, VirtioDevice, device_id};
pub use error::{Area, VirtioError};
pub use mmio::{EmptyTransports, REGION_SIZE, Stats, TransportStats, VirtioMmio, VirtioTransport};
pub use net::{FrameSink, Net, PartialCsum};
pub use queue::{DescChain, GuestBytes, Queue, Segment, need_event};
pub use ram::{
    ChunkMap, GuestRam, GuestRamExt, GuestSlice, GuestSliceMut, MemError, Piece, VecRam,
};
pub use rng::{EntropySource, Rng};
pub use switch::{Destinations, Mac, PortError, PortId, Switch, SwitchStats};

/// Device-independent feature bits (virtio 1.x §6).
pub mod features {
    /// `VIRTIO_F_INDIRECT_DESC` (28): indirect descriptor tables.
    pub const INDIRECT_DESC: u64 = 1 << 28;
    /// `VIRTIO_F_EVENT_IDX` (29): `used_event` / `avail_event`.
    pub const EVENT_IDX: u64 = 1 << 29;
    /// `VIRTIO_F_VERSION_1` (32): a modern (non-legacy) device.
    pub const VERSION_1: u64 = 1 << 32;
}
