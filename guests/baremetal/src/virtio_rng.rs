//! A minimal virtio-mmio (version 2) driver: enough to hand an entropy device
//! (DeviceID 4) one buffer at a time on queue 0 (virtio 1.2, 4.2.2 and 4.2.3.1).
//! `vmbench` times its I/O round trips with it; `testguest` makes interrupt streams.
//!
//! The split virtqueue lives in our RAM (a static); with the MMU off every
//! access to it is a Device-memory access, so the device, which reads and
//! writes that RAM directly, always sees what we wrote (on QEMU's TCG, which
//! models no caches; see vmbench's `main.rs` for hardware). Its fields are `Global`s:
//! volatile accesses, which the device may change behind our back.

use core::fmt;

use crate::console::Global;
use crate::cpu;
use crate::virtio_mmio::{DEVICE_NEEDS_RESET, Regs, VERSION_1_WORD1, reg};

pub use crate::virtio_mmio::DEVICE_ID_ENTROPY;
pub const QUEUE_NOTIFY: u64 = reg::QUEUE_NOTIFY;

/// The device writes the buffer (VIRTQ_DESC_F_WRITE).
const DESC_F_WRITE: u16 = 2;

const QUEUE_SIZE: usize = 4;
pub const BUFFER_LEN: u32 = 16;

#[repr(C, align(16))]
struct Desc {
    addr: Global<u64>,
    len: Global<u32>,
    flags: Global<u16>,
    next: Global<u16>,
}

#[repr(C, align(2))]
struct Avail {
    flags: Global<u16>,
    idx: Global<u16>,
    ring: [Global<u16>; QUEUE_SIZE],
    used_event: Global<u16>,
}

#[repr(C, align(4))]
struct UsedElem {
    id: Global<u32>,
    len: Global<u32>,
}

#[repr(C, align(4))]
struct Used {
    flags: Global<u16>,
    idx: Global<u16>,
    ring: [UsedElem; QUEUE_SIZE],
    avail_event: Global<u16>,
}

/// Queue 0 and the one buffer the device fills.
#[repr(C, align(4096))]
struct Queue {
    desc: [Desc; QUEUE_SIZE],
    avail: Avail,
    used: Used,
    buffer: [Global<u64>; 2],
}

static QUEUE: Queue = Queue {
    desc: [const {
        Desc {
            addr: Global::new(0),
            len: Global::new(0),
            flags: Global::new(0),
            next: Global::new(0),
        }
    }; QUEUE_SIZE],
    avail: Avail {
        flags: Global::new(0),
        idx: Global::new(0),
        ring: [const { Global::new(0) }; QUEUE_SIZE],
        used_event: Global::new(0),
    },
    used: Used {
        flags: Global::new(0),
        idx: Global::new(0),
        ring: [const { UsedElem { id: Global::new(0), len: Global::new(0) } }; QUEUE_SIZE],
        avail_event: Global::new(0),
    },
    buffer: [const { Global::new(0) }; 2],
};

fn address<T>(field: &T) -> u64 {
    field as *const T as u64
}

/// The device's DeviceID if `base` holds a virtio-mmio device (0: an empty slot).
pub fn probe(base: u64) -> Option<u32> {
    Regs(base).probe()
}

/// Why a device could not be used.
pub enum Error {
    /// Not virtio-mmio version 2 (QEMU's default is legacy version 1).
    Version(u32),
    NoVersion1,
    FeaturesRefused(u32),
    QueueUnavailable,
    NeedsReset(u32),
}

impl Error {
    /// A device that misbehaves, as opposed to one we cannot drive.
    pub fn is_failure(&self) -> bool {
        matches!(self, Error::FeaturesRefused(_) | Error::NeedsReset(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Error::Version(v) => write!(
                f,
                "virtio-mmio version {v}, not 2 (QEMU: -global virtio-mmio.force-legacy=false)"
            ),
            Error::NoVersion1 => f.write_str("device does not offer VIRTIO_F_VERSION_1"),
            Error::FeaturesRefused(s) => write!(f, "device refused our features (status {s:#x})"),
            Error::QueueUnavailable => f.write_str("queue 0 unavailable or already in use"),
            Error::NeedsReset(s) => write!(f, "device set DEVICE_NEEDS_RESET (status {s:#x})"),
        }
    }
}

/// A virtio-mmio device with queue 0 set up.
pub struct Device {
    base: u64,
    /// Our next avail index (free-running, wraps at 2^16).
    next: u16,
}

impl Device {
    /// Resets the device and brings it to DRIVER_OK with VIRTIO_F_VERSION_1
    /// only and queue 0 in `QUEUE` (virtio 1.2, 3.1.1 and 4.2.3.2).
    pub fn init(base: u64) -> Result<Device, Error> {
        let regs = Regs(base);
        let version = regs.read(reg::VERSION);
        if version != 2 {
            return Err(Error::Version(version));
        }
        regs.reset(u32::MAX);
        regs.acknowledge();
        if regs.device_features(1) & VERSION_1_WORD1 == 0 {
            regs.reset(u32::MAX);
            return Err(Error::NoVersion1);
        }
        regs.negotiate(0, VERSION_1_WORD1).map_err(Error::FeaturesRefused)?;
        regs.write(reg::QUEUE_SEL, 0);
        if regs.read(reg::QUEUE_READY) != 0 || (regs.read(reg::QUEUE_NUM_MAX) as usize) < QUEUE_SIZE
        {
            regs.reset(u32::MAX);
            return Err(Error::QueueUnavailable);
        }
        let q = &QUEUE;
        q.avail.flags.set(0);
        q.avail.idx.set(0);
        q.used.idx.set(0);
        regs.start_queue0(QUEUE_SIZE as u32, address(&q.desc), address(&q.avail), address(&q.used));
        let dev = Device { base, next: 0 };
        dev.check()?;
        Ok(dev)
    }

    /// Puts the buffer in the ring as descriptor 0, device-writable, and makes
    /// it available (not yet notified).
    pub fn offer_buffer(&mut self) {
        let q = &QUEUE;
        let d = &q.desc[0];
        d.addr.set(address(&q.buffer));
        d.len.set(BUFFER_LEN);
        d.flags.set(DESC_F_WRITE);
        d.next.set(0);
        q.avail.ring[usize::from(self.next) % QUEUE_SIZE].set(0);
        // The descriptor and ring entry before the index that publishes them.
        cpu::dsb();
        self.next = self.next.wrapping_add(1);
        q.avail.idx.set(self.next);
    }

    /// The address to write 0 to for "queue 0 has buffers" (QueueNotify).
    pub fn notify_address(&self) -> u64 {
        self.base + QUEUE_NOTIFY
    }

    /// True once the device has returned every buffer offered.
    pub fn all_used(&self) -> bool {
        QUEUE.used.idx.get() == self.next
    }

    /// Fails if the device has set DEVICE_NEEDS_RESET.
    pub fn check(&self) -> Result<(), Error> {
        let status = Regs(self.base).status();
        if status & DEVICE_NEEDS_RESET != 0 {
            return Err(Error::NeedsReset(status));
        }
        Ok(())
    }

    /// Resets the device: it forgets the queue and stops using our memory.
    pub fn reset(self) {
        Regs(self.base).reset(u32::MAX);
    }
}

/// Clears the device's interrupt (from the IRQ handler): InterruptACK of
/// every InterruptStatus bit set, so the level-sensitive line drops.
pub fn acknowledge_interrupt(base: u64) {
    Regs(base).acknowledge_interrupt();
}

/// The first virtio-rng device of a device tree.
#[derive(Clone, Copy)]
pub struct Rng {
    pub base: u64,
    /// Its SPI's INTID, if the node has one.
    pub intid: Option<u32>,
}

/// The first enabled virtio-mmio node whose device is an entropy source (DeviceID 4).
pub fn find(fdt: &fdt::Fdt) -> Option<Rng> {
    let nodes = fdt.all_nodes().filter(|n| {
        n.compatible().is_some_and(|c| c.all().any(|s| s == "virtio,mmio"))
            && n.property("status").and_then(|p| p.as_str()).is_none_or(|s| s == "okay")
    });
    for node in nodes {
        let Some(base) = node.reg().and_then(|mut r| r.next()) else { continue };
        let base = base.starting_address as u64;
        if probe(base) != Some(DEVICE_ID_ENTROPY) {
            continue;
        }
        let cell = |i| crate::machine::interrupt_cell(&node, i);
        let intid = match (cell(0), cell(1)) {
            (Some(0), Some(number)) => crate::machine::gic_intid(0, number),
            _ => None,
        };
        return Some(Rng { base, intid });
    }
    None
}
