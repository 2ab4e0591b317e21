//! The machine disk (crate `machine-disk`): the machine's own virtio-blk device, found among
//! its virtio-mmio transports. At boot `virtio-drivers` reads its GPT; then the device gets the
//! request queue through which VM disks on its partitions reach it with the guests' own
//! buffers (`vmm::emulate::machine_disk`), and its interrupt completes their requests.

use super::virtio_hal::FramePool;
use crate::platform::{Platform, VirtioWindow};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use core::ptr::NonNull;
use machine_disk::{BLOCK, BlockIo};
use virtio_drivers::PhysAddr;
use virtio_drivers::device::blk::VirtIOBlk;
use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
use virtio_drivers::transport::{DeviceStatus, DeviceType, Transport};
use vmm::arch::gic;
use vmm::emulate::machine_disk::{self as backend, Doorbell, QueueAddresses};

/// The machine disk as the GPT reader sees it: 512-byte blocks, read-only at boot.
struct Disk(VirtIOBlk<FramePool, MmioTransport<'static>>);

impl BlockIo for Disk {
    type Error = virtio_drivers::Error;

    fn block_size(&self) -> machine_disk::BlockSize {
        machine_disk::BlockSize::BS_512
    }

    fn num_blocks(&mut self) -> Result<u64, Self::Error> {
        Ok(self.0.capacity())
    }

    fn read_blocks(&mut self, start: machine_disk::Lba, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.0.read_blocks(start.0 as usize, dst)
    }

    fn write_blocks(&mut self, _start: machine_disk::Lba, _src: &[u8]) -> Result<(), Self::Error> {
        Err(virtio_drivers::Error::Unsupported)
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// `VIRTIO_BLK_F_FLUSH` and `VIRTIO_RING_F_INDIRECT_DESC`: the request queue needs both.
const F_FLUSH: u64 = 1 << 9;
const F_INDIRECT_DESC: u64 = 1 << 28;
/// `VIRTIO_F_VERSION_1`: accepted when offered (a modern transport), as the spec requires.
const F_VERSION_1: u64 = 1 << 32;

/// Finds the machine disk, the first virtio-blk device among the machine's virtio-mmio
/// transports, reads its GPT and makes its partitions available to VM disks; or says why they
/// are not (VMs with partition disks are then not started). No disk is not an error: most
/// machines run their VMs on RAM disks.
pub fn init(platform: &Platform, mpidr: u64) {
    for window in &platform.virtio_mmio {
        // SAFETY: the device tree names this window a virtio-mmio transport; main.rs maps it as
        // device memory for good, and nothing else in armhv drives it.
        let Some(transport) = (unsafe { open_transport(window) }) else { continue };
        if transport.device_type() != DeviceType::Block {
            continue;
        }
        if let Err(why) = start(window, transport, mpidr) {
            log::error!("machine disk at {:#x}: {why}", window.reg.start);
            backend::unusable(format!(
                "the machine disk at {:#x} is unusable: {why}",
                window.reg.start
            ));
        }
        return;
    }
    log::debug!("no machine disk (no virtio-blk device among the virtio-mmio transports)");
}

/// The transport at `window`, if a device is behind it.
///
/// # Safety
///
/// `window` must be a virtio-mmio transport mapped as device memory for good, that nothing
/// else drives while the value lives.
unsafe fn open_transport(window: &VirtioWindow) -> Option<MmioTransport<'static>> {
    let header = NonNull::new(window.reg.start as *mut VirtIOHeader)?;
    // SAFETY: the caller's.
    // An empty transport (device ID 0) or an unsupported version is no device.
    unsafe { MmioTransport::new(header, window.reg.size as usize) }.ok()
}

/// Reads the GPT, then gives the device its request queue and takes its interrupt.
fn start(
    window: &VirtioWindow,
    transport: MmioTransport<'static>,
    mpidr: u64,
) -> Result<(), String> {
    let (intid, flags) = window.interrupt.ok_or("it has no interrupt in the device tree")?;
    let blk = VirtIOBlk::<FramePool, _>::new(transport)
        .map_err(|e| format!("the virtio-blk driver failed ({e})"))?;
    let bytes = blk.capacity() * BLOCK;
    // The boot-time driver goes with the table read: dropped, it resets the device.
    let parts = machine_disk::read_table(Disk(blk)).map_err(|e| format!("{e}"))?;
    let mut list = String::new();
    for p in &parts {
        use core::fmt::Write;
        let sep = if list.is_empty() { "" } else { ", " };
        let _ = write!(list, "{sep}{} ({} KiB)", p.name, p.size() >> 10);
    }
    log::info!(
        "machine disk at {:#x}: {} MiB, {} partition(s): {list}",
        window.reg.start,
        bytes >> 20,
        parts.len()
    );

    // SAFETY: as in `init`; the boot-time driver, the only other user, is gone.
    let mut transport =
        unsafe { open_transport(window) }.ok_or("it vanished after its GPT was read")?;
    transport.set_status(DeviceStatus::empty());
    transport.set_status(DeviceStatus::ACKNOWLEDGE | DeviceStatus::DRIVER);
    let offered = transport.read_device_features();
    for (bit, what) in [(F_FLUSH, "flush requests"), (F_INDIRECT_DESC, "indirect descriptors")] {
        if offered & bit == 0 {
            return Err(format!("its device does not offer {what}, which armhv needs"));
        }
    }
    transport.write_driver_features(F_FLUSH | F_INDIRECT_DESC | (offered & F_VERSION_1));
    let negotiated = DeviceStatus::ACKNOWLEDGE | DeviceStatus::DRIVER | DeviceStatus::FEATURES_OK;
    transport.set_status(negotiated);
    if !transport.get_status().contains(DeviceStatus::FEATURES_OK) {
        return Err("its device refused the features armhv needs".into());
    }
    transport.set_guest_page_size(4096);
    let max = u16::try_from(transport.max_queue_size(0)).unwrap_or(u16::MAX);
    backend::install(parts, Box::new(Device(transport)), max)?;
    vmm::irq::set_device_handler(intid, backend::on_interrupt)
        .map_err(|e| format!("its interrupt {intid}: {e}"))?;
    gic::route_spi(intid, mpidr, VirtioWindow::level(flags))
        .map_err(|e| format!("its interrupt {intid}: {e}"))?;
    Ok(())
}

/// The device behind the request queue.
struct Device(MmioTransport<'static>);

// SAFETY: the transport is the device's MMIO registers, mapped for good; the value is used only
// under the machine disk's lock (`vmm::emulate::machine_disk`), so by one CPU at a time.
unsafe impl Send for Device {}

impl Doorbell for Device {
    fn attach_queue(&mut self, q: QueueAddresses) -> Result<(), String> {
        let t = &mut self.0;
        if t.queue_used(0) {
            return Err("its queue is already in use".into());
        }
        t.queue_set(
            0,
            u32::from(q.size),
            q.descriptors as PhysAddr,
            q.available as PhysAddr,
            q.used as PhysAddr,
        );
        t.finish_init();
        Ok(())
    }

    fn notify(&mut self) {
        self.0.notify(0);
    }

    fn acknowledge(&mut self) {
        self.0.ack_interrupt();
    }
}
