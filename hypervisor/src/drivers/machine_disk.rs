//! The machine disk (crate `machine-disk`): the machine's own virtio-blk device, found among
//! its virtio-mmio transports and driven with `virtio-drivers`, whose GPT armhv reads at boot.
//! armhv reports its partitions, or why it cannot use the disk; serving each VM disk from its
//! partition is the next step of persistent disks (issue 15).

use crate::platform::Platform;
use core::ptr::NonNull;
use machine_disk::{BLOCK, BlockIo};
use virtio_drivers::device::blk::VirtIOBlk;
use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
use virtio_drivers::transport::{DeviceType, Transport};
use virtio_drivers::{BufferDirection, Hal, PhysAddr};
use vmm::frames::{self, Frames};

/// DMA memory from the frame pool, identity-mapped at EL2 (a physical address is the address
/// armhv reads and writes it at). The machine's virtio devices see memory coherently, as QEMU's
/// do.
struct FramePool;

// SAFETY: `dma_alloc` hands out zeroed frames that nothing else owns (`frames::alloc`) until
// `dma_dealloc` takes them back; `share` gives a buffer's own identity-mapped address, valid for
// as long as the driver keeps the buffer; MMIO addresses are identity-mapped as device memory
// (main.rs maps every virtio-mmio transport).
unsafe impl Hal for FramePool {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let Some(mut dma) = frames::alloc(pages.next_power_of_two()) else {
            panic!("no free frames for {pages} pages of the machine disk's virtqueue");
        };
        dma.zero();
        let pa = dma.leak().0;
        (pa, NonNull::new(pa as *mut u8).expect("frame 0 is never allocated"))
    }

    unsafe fn dma_dealloc(paddr: PhysAddr, _vaddr: NonNull<u8>, pages: usize) -> i32 {
        // SAFETY: `paddr` and `pages` are what `dma_alloc` leaked (virtio-drivers' contract),
        // and the driver no longer uses the memory.
        drop(unsafe { Frames::from_raw(addr::PhysAddr(paddr), pages.next_power_of_two()) });
        0
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _size: usize) -> NonNull<u8> {
        NonNull::new(paddr as *mut u8).expect("an MMIO region at address 0")
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        buffer.as_ptr() as *mut u8 as PhysAddr
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}
}

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
