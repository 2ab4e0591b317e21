//! The machine disk (crate `machine-disk`): the machine's own virtio-blk device, found among
//! its virtio-mmio transports and driven with `virtio-drivers`, whose GPT armhv reads at boot.
//! armhv reports its partitions, or why it cannot use the disk; serving each VM disk from its
//! partition is the next step of persistent disks (issue 15).

use super::virtio_hal::FramePool;
use crate::platform::Platform;
use core::ptr::NonNull;
use machine_disk::{BLOCK, BlockIo};
use virtio_drivers::device::blk::VirtIOBlk;
use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
use virtio_drivers::transport::{DeviceType, Transport};

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

/// Finds the machine disk, the first virtio-blk device among the machine's virtio-mmio
/// transports, and reports its GPT partitions or why they cannot be used. No disk is not an
/// error: most machines run their VMs on RAM disks.
pub fn report(platform: &Platform) {
    for window in &platform.virtio_mmio {
        let Some(header) = NonNull::new(window.start as *mut VirtIOHeader) else { continue };
        // SAFETY: the device tree names this window a virtio-mmio transport; main.rs maps it as
        // device memory for good, and nothing else in armhv drives it.
        let Ok(transport) = (unsafe { MmioTransport::new(header, window.size as usize) }) else {
            continue; // an empty transport (device ID 0) or an unsupported version
        };
        if transport.device_type() != DeviceType::Block {
            continue;
        }
        let blk = match VirtIOBlk::<FramePool, _>::new(transport) {
            Ok(blk) => blk,
            Err(e) => {
                log::error!(
                    "machine disk at {:#x}: the virtio-blk driver failed ({e})",
                    window.start
                );
                return;
            }
        };
        let bytes = blk.capacity() * BLOCK;
        match machine_disk::read_table(Disk(blk)) {
            Ok(parts) => {
                let mut list = alloc::string::String::new();
                for p in &parts {
                    use core::fmt::Write;
                    let sep = if list.is_empty() { "" } else { ", " };
                    let _ = write!(list, "{sep}{} ({} KiB)", p.name, p.size() >> 10);
                }
                log::info!(
                    "machine disk at {:#x}: {} MiB, {} partition(s): {list}",
                    window.start,
                    bytes >> 20,
                    parts.len()
                );
            }
            Err(e) => log::error!("machine disk at {:#x}: {e}", window.start),
        }
        return;
    }
    log::debug!("no machine disk (no virtio-blk device among the virtio-mmio transports)");
}
