//! Why a device stopped: [`VirtioError`].
//!
//! Every violation of the ring rules by the driver — and every request a
//! device cannot even complete — ends in one of these. The transport then
//! sets `DEVICE_NEEDS_RESET` in the status register, raises a configuration
//! change interrupt (virtio 1.x §2.1.2: required once `DRIVER_OK` is set),
//! stops touching the queues until the driver resets the device, and keeps
//! the error for the hypervisor to log ([`crate::VirtioMmio::take_error`]).
//! The `Display` text is that log line's reason.

use core::fmt;

use crate::ram::MemError;

/// Which guest structure an out-of-RAM access was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area {
    DescTable,
    IndirectTable,
    AvailRing,
    UsedRing,
    Buffer,
}

impl Area {
    fn name(self) -> &'static str {
        match self {
            Self::DescTable => "descriptor table",
            Self::IndirectTable => "indirect descriptor table",
            Self::AvailRing => "available ring",
            Self::UsedRing => "used ring",
            Self::Buffer => "buffer",
        }
    }
}

/// A driver error that puts the device in `DEVICE_NEEDS_RESET`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtioError {
    /// A ring, table or buffer is not (entirely) in guest RAM.
    OutOfRam { area: Area, err: MemError },
    /// `QueueReady` was set with a size that is 0, above `QueueNumMax` or not
    /// a power of two (split rings require one).
    BadQueueSize { size: u32, max: u16 },
    /// `QueueReady` was set with a ring area not aligned as §2.7 requires
    /// (descriptors 16, available ring 2, used ring 4).
    Misaligned { area: Area, addr: u64 },
    /// The driver's available index ran more than a queue's worth ahead of
    /// the entries the device has consumed.
    AvailIndexJump { avail_idx: u16, last_seen: u16, size: u16 },
    /// An available-ring entry names a descriptor past the table.
    HeadOutOfRange { head: u16, size: u16 },
    /// A descriptor's `next` is past the end of its table.
    NextOutOfRange { next: u16, table_len: u32 },
    /// Following `next` visited more descriptors than the table holds: the
    /// chain loops.
    DescriptorLoop { table_len: u32 },
    /// The chain has more descriptors than the queue size (§2.7.5.3.1).
    ChainTooLong { max: u16 },
    /// The chain's buffers add up to 4 GiB or more (§2.7.5.2 forbids it).
    ChainBytesOverflow,
    /// A device-readable descriptor follows a device-writable one (§2.7.4.2).
    ReadableAfterWritable,
    /// `VIRTQ_DESC_F_INDIRECT` without `VIRTIO_F_INDIRECT_DESC` negotiated.
    IndirectNotNegotiated,
    /// An indirect table refers to another one (no nesting).
    NestedIndirect,
    /// `VIRTQ_DESC_F_INDIRECT` and `VIRTQ_DESC_F_NEXT` both set.
    IndirectWithNext,
    /// Indirect table length 0 or not a multiple of 16.
    BadIndirectLength { len: u32 },
    /// A request the device cannot complete (e.g. a block request without a
    /// status byte).
    Malformed(&'static str),
}

impl From<MemError> for VirtioError {
    /// Buffers are the default: ring accesses map their own area.
    fn from(err: MemError) -> Self {
        Self::OutOfRam { area: Area::Buffer, err }
    }
}

impl fmt::Display for VirtioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::OutOfRam { area, err } => write!(f, "{}: {err}", area.name()),
            Self::BadQueueSize { size, max } => {
                write!(f, "queue size {size} is not a power of two in 1..={max}")
            }
            Self::Misaligned { area, addr } => write!(f, "{} at {addr:#x} misaligned", area.name()),
            Self::AvailIndexJump { avail_idx, last_seen, size } => write!(
                f,
                "available index {avail_idx} is more than {size} entries past {last_seen}"
            ),
            Self::HeadOutOfRange { head, size } => {
                write!(f, "available ring names descriptor {head} of a {size}-entry table")
            }
            Self::NextOutOfRange { next, table_len } => {
                write!(f, "descriptor next {next} is outside its {table_len}-entry table")
            }
            Self::DescriptorLoop { table_len } => {
                write!(f, "descriptor chain loops (visits more than {table_len} entries)")
            }
            Self::ChainTooLong { max } => {
                write!(f, "descriptor chain longer than the queue size {max}")
            }
            Self::ChainBytesOverflow => f.write_str("descriptor chain of 4 GiB or more"),
            Self::ReadableAfterWritable => {
                f.write_str("device-readable descriptor after a device-writable one")
            }
            Self::IndirectNotNegotiated => {
                f.write_str("indirect descriptor without VIRTIO_F_INDIRECT_DESC")
            }
            Self::NestedIndirect => f.write_str("indirect descriptor inside an indirect table"),
            Self::IndirectWithNext => f.write_str("descriptor with both INDIRECT and NEXT"),
            Self::BadIndirectLength { len } => {
                write!(f, "indirect table length {len} is not a non-zero multiple of 16")
            }
            Self::Malformed(what) => f.write_str(what),
        }
    }
}
