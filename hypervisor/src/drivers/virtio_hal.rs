//! What `virtio-drivers` needs from armhv to drive the machine's own virtio devices (the
//! machine disk, the uplink NIC): DMA memory and the addresses devices use for it.

use core::ptr::NonNull;
use virtio_drivers::{BufferDirection, Hal, PhysAddr};
use vmm::frames::{self, Frames};

/// DMA memory from the frame pool, identity-mapped at EL2 (a physical address is the address
/// armhv reads and writes it at). The machine's virtio devices see memory coherently, as QEMU's
/// do.
pub struct FramePool;

// SAFETY: `dma_alloc` hands out zeroed frames that nothing else owns (`frames::alloc`) until
// `dma_dealloc` takes them back; `share` gives a buffer's own identity-mapped address, valid for
// as long as the driver keeps the buffer; MMIO addresses are identity-mapped as device memory
// (main.rs maps every virtio-mmio transport).
unsafe impl Hal for FramePool {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let Some(mut dma) = frames::alloc(pages.next_power_of_two()) else {
            panic!("no free frames for {pages} pages of a machine device's virtqueue");
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
