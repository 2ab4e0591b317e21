//! A virtio entropy device (virtio 1.x, section 5.4) on a virtio-mmio transport (version 2,
//! section 4.2.2), emulated in the VMM as QEMU or kvmtool would: every register access is a
//! KVM MMIO exit, and a QueueNotify is served at once on the notifying vCPU's thread, then the
//! interrupt is raised through the in-kernel vGIC. This gives vmbench's `io-roundtrip` a
//! device under KVM: a request's exit to user space and its interrupt back.
//!
//! The guest's memory is reached through [`Memory`], so the register file and the queue walk
//! are tested on the host against a plain buffer.

use crate::layout::{VIRTIO_BASE, VIRTIO_SIZE};

const MAGIC: u32 = 0x7472_6976; // "virt"
const VERSION: u32 = 2;
const DEVICE_ID_ENTROPY: u32 = 4;
/// "QEMU" in little-endian ASCII is what QEMU answers; this is not QEMU, so "armh".
const VENDOR_ID: u32 = 0x686D_7261;
/// VIRTIO_F_VERSION_1: feature bit 32, bit 0 of feature word 1.
const VERSION_1_WORD1: u32 = 1;
/// Largest queue the device accepts.
pub const QUEUE_NUM_MAX: u32 = 256;
const DESC_F_NEXT: u16 = 1;
const DESC_F_WRITE: u16 = 2;
/// Device status bits (section 2.1).
const STATUS_FAILED: u32 = 128;
const STATUS_NEEDS_RESET: u32 = 64;
/// InterruptStatus: the used buffer notification.
const INT_VRING: u32 = 1;

/// The register map is the one armhv's own virtio-mmio devices use (`crates/virtio`).
pub use virtio::mmio::regs as reg;

/// The guest's memory, by guest-physical address.
pub trait Memory {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), String>;
    fn write(&self, gpa: u64, buf: &[u8]) -> Result<(), String>;

    fn read_u16(&self, gpa: u64) -> Result<u16, String> {
        let mut b = [0; 2];
        self.read(gpa, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }
}

/// What the VMM must do with the interrupt line after a register write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    Unchanged,
    Raise,
    Lower,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Queue {
    num: u32,
    ready: bool,
    desc: u64,
    avail: u64,
    used: u64,
    /// The next avail ring entry to serve.
    next_avail: u16,
    /// The used ring's index as the device last wrote it.
    used_idx: u16,
}

/// The device's whole state: one request queue (queue 0) and no configuration space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rng {
    status: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: [u32; 2],
    queue_sel: u32,
    queue: Queue,
    interrupt_status: u32,
}

fn set_low(v: &mut u64, low: u32) {
    *v = (*v & !0xFFFF_FFFF) | u64::from(low);
}

fn set_high(v: &mut u64, high: u32) {
    *v = (*v & 0xFFFF_FFFF) | (u64::from(high) << 32);
}

/// The register offset of an MMIO exit at `addr`, if it is in the device's window.
pub fn offset(addr: u64) -> Option<u64> {
    (VIRTIO_BASE..VIRTIO_BASE + VIRTIO_SIZE).contains(&addr).then(|| addr - VIRTIO_BASE)
}

impl Rng {
    pub fn read(&self, offset: u64) -> u32 {
        let q0 = self.queue_sel == 0;
        match offset {
            reg::MAGIC_VALUE => MAGIC,
            reg::VERSION => VERSION,
            reg::DEVICE_ID => DEVICE_ID_ENTROPY,
            reg::VENDOR_ID => VENDOR_ID,
            reg::DEVICE_FEATURES if self.device_features_sel == 1 => VERSION_1_WORD1,
            reg::QUEUE_NUM_MAX if q0 => QUEUE_NUM_MAX,
            reg::QUEUE_READY if q0 => u32::from(self.queue.ready),
            reg::INTERRUPT_STATUS => self.interrupt_status,
            reg::STATUS => self.status,
            // One configuration generation: the device has no configuration to change.
            _ => 0,
        }
    }

    /// A register write; `fill` supplies the entropy for a request.
    pub fn write(
        &mut self,
        offset: u64,
        value: u32,
        mem: &dyn Memory,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Line {
        let q0 = self.queue_sel == 0;
        let q = &mut self.queue;
        match offset {
            reg::DEVICE_FEATURES_SEL => self.device_features_sel = value,
            reg::DRIVER_FEATURES_SEL => self.driver_features_sel = value,
            reg::DRIVER_FEATURES => {
                if let Some(w) = self.driver_features.get_mut(self.driver_features_sel as usize) {
                    *w = value;
                }
            }
            reg::QUEUE_SEL => self.queue_sel = value,
            reg::QUEUE_NUM if q0 => q.num = value,
            reg::QUEUE_DESC_LOW if q0 => set_low(&mut q.desc, value),
            reg::QUEUE_DESC_HIGH if q0 => set_high(&mut q.desc, value),
            reg::QUEUE_DRIVER_LOW if q0 => set_low(&mut q.avail, value),
            reg::QUEUE_DRIVER_HIGH if q0 => set_high(&mut q.avail, value),
            reg::QUEUE_DEVICE_LOW if q0 => set_low(&mut q.used, value),
            reg::QUEUE_DEVICE_HIGH if q0 => set_high(&mut q.used, value),
            reg::QUEUE_READY if q0 => {
                let valid = q.num.is_power_of_two() && q.num <= QUEUE_NUM_MAX;
                q.ready = value == 1 && valid;
                if value == 1 && !valid {
                    self.status |= STATUS_NEEDS_RESET;
                }
            }
            reg::QUEUE_NOTIFY if value == 0 && self.queue.ready => {
                return match self.serve(mem, fill) {
                    Ok(0) => Line::Unchanged,
                    Ok(_) => {
                        self.interrupt_status |= INT_VRING;
                        Line::Raise
                    }
                    Err(_) => {
                        // A malformed ring: the driver must reset the device (section 2.1.2).
                        self.status |= STATUS_NEEDS_RESET;
                        Line::Unchanged
                    }
                };
            }
            reg::INTERRUPT_ACK => {
                let was = self.interrupt_status;
                self.interrupt_status &= !value;
                if was != 0 && self.interrupt_status == 0 {
                    return Line::Lower;
                }
            }
            reg::STATUS if value == 0 => {
                let raised = self.interrupt_status != 0;
                *self = Self::default();
                return if raised { Line::Lower } else { Line::Unchanged };
            }
            reg::STATUS => {
                // FEATURES_OK is refused unless the driver took VIRTIO_F_VERSION_1, the one
                // feature offered (a transitional interface is not emulated).
                const FEATURES_OK: u32 = 8;
                let mut v = value;
                if v & FEATURES_OK != 0 && self.driver_features != [0, VERSION_1_WORD1] {
                    v &= !FEATURES_OK;
                }
                self.status = v | (self.status & (STATUS_NEEDS_RESET | STATUS_FAILED));
            }
            _ => {}
        }
        Line::Unchanged
    }

    /// Serves every available request of queue 0; returns how many.
    fn serve(&mut self, mem: &dyn Memory, fill: &mut dyn FnMut(&mut [u8])) -> Result<u32, String> {
        let q = &mut self.queue;
        let num = q.num as u16;
        let avail_idx = mem.read_u16(q.avail + 2)?;
        let mut served = 0;
        while q.next_avail != avail_idx {
            let slot = u64::from(q.next_avail % num);
            let head = mem.read_u16(q.avail + 4 + 2 * slot)?;
            let written = fill_chain(mem, q.desc, num, head, fill)?;
            let elem = q.used + 4 + 8 * u64::from(q.used_idx % num);
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&u32::from(head).to_le_bytes());
            bytes[4..].copy_from_slice(&written.to_le_bytes());
            mem.write(elem, &bytes)?;
            q.used_idx = q.used_idx.wrapping_add(1);
            // The element is written before the index that publishes it (section 2.7.8.2).
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            mem.write(q.used + 2, &q.used_idx.to_le_bytes())?;
            q.next_avail = q.next_avail.wrapping_add(1);
            served += 1;
        }
        Ok(served)
    }
}

/// Fills the device-writable buffers of the descriptor chain at `head` with entropy; returns
/// the bytes written.
fn fill_chain(
    mem: &dyn Memory,
    table: u64,
    num: u16,
    head: u16,
    fill: &mut dyn FnMut(&mut [u8]),
) -> Result<u32, String> {
    let mut index = head;
    let mut written = 0u32;
    // A chain longer than the table loops.
    for _ in 0..num {
        if index >= num {
            return Err(format!("descriptor {index} outside a table of {num}"));
        }
        let mut d = [0u8; 16];
        mem.read(table + 16 * u64::from(index), &mut d)?;
        let addr = u64::from_le_bytes(d[0..8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(d[8..12].try_into().expect("4 bytes"));
        let flags = u16::from_le_bytes(d[12..14].try_into().expect("2 bytes"));
        let next = u16::from_le_bytes(d[14..16].try_into().expect("2 bytes"));
        if flags & DESC_F_WRITE != 0 {
            // Entropy requests are small (vmbench's 16 bytes); a cap keeps a bad length from
            // allocating the guest's whole address space.
            let mut buf = vec![0u8; len.min(64 << 10) as usize];
            fill(&mut buf);
            mem.write(addr, &buf)?;
            written += buf.len() as u32;
        }
        if flags & DESC_F_NEXT == 0 {
            return Ok(written);
        }
        index = next;
    }
    Err(format!("descriptor chain from {head} loops"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Guest memory: a buffer standing for guest-physical 0..len.
    struct Buf(RefCell<Vec<u8>>);

    impl Memory for Buf {
        fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), String> {
            let m = self.0.borrow();
            let s = m.get(gpa as usize..gpa as usize + buf.len()).ok_or("outside")?;
            buf.copy_from_slice(s);
            Ok(())
        }
        fn write(&self, gpa: u64, buf: &[u8]) -> Result<(), String> {
            let mut m = self.0.borrow_mut();
            let s = m.get_mut(gpa as usize..gpa as usize + buf.len()).ok_or("outside")?;
            s.copy_from_slice(buf);
            Ok(())
        }
    }

    const DESC: u64 = 0x000;
    const AVAIL: u64 = 0x100;
    const USED: u64 = 0x200;
    const DATA: u64 = 0x300;

    fn ones(b: &mut [u8]) {
        b.fill(0xA5);
    }

    /// The driver's side as vmbench does it: negotiate VERSION_1, set up a 4-entry queue 0.
    fn ready_device(mem: &Buf) -> Rng {
        let mut d = Rng::default();
        assert_eq!(
            (d.read(reg::MAGIC_VALUE), d.read(reg::VERSION), d.read(reg::DEVICE_ID)),
            (MAGIC, 2, 4)
        );
        let w = |d: &mut Rng, o, v| d.write(o, v, mem, &mut ones);
        w(&mut d, reg::STATUS, 0);
        w(&mut d, reg::STATUS, 1 | 2);
        w(&mut d, reg::DEVICE_FEATURES_SEL, 1);
        assert_eq!(d.read(reg::DEVICE_FEATURES), VERSION_1_WORD1);
        w(&mut d, reg::DRIVER_FEATURES_SEL, 1);
        w(&mut d, reg::DRIVER_FEATURES, VERSION_1_WORD1);
        w(&mut d, reg::STATUS, 1 | 2 | 8);
        assert_eq!(d.read(reg::STATUS) & 8, 8, "FEATURES_OK kept");
        w(&mut d, reg::QUEUE_SEL, 0);
        assert_eq!((d.read(reg::QUEUE_READY), d.read(reg::QUEUE_NUM_MAX)), (0, QUEUE_NUM_MAX));
        w(&mut d, reg::QUEUE_NUM, 4);
        for (lo, hi, at) in [
            (reg::QUEUE_DESC_LOW, reg::QUEUE_DESC_HIGH, DESC),
            (reg::QUEUE_DRIVER_LOW, reg::QUEUE_DRIVER_HIGH, AVAIL),
            (reg::QUEUE_DEVICE_LOW, reg::QUEUE_DEVICE_HIGH, USED),
        ] {
            w(&mut d, lo, at as u32);
            w(&mut d, hi, 0);
        }
        w(&mut d, reg::QUEUE_READY, 1);
        w(&mut d, reg::STATUS, 1 | 2 | 8 | 4);
        assert_eq!(d.read(reg::QUEUE_READY), 1);
        d
    }

    /// Offers one 16-byte write-only buffer as avail entry `n`.
    fn offer(mem: &Buf, n: u16) {
        let mut desc = [0u8; 16];
        desc[0..8].copy_from_slice(&DATA.to_le_bytes());
        desc[8..12].copy_from_slice(&16u32.to_le_bytes());
        desc[12..14].copy_from_slice(&DESC_F_WRITE.to_le_bytes());
        mem.write(DESC, &desc).unwrap();
        mem.write(AVAIL + 4 + 2 * u64::from(n % 4), &0u16.to_le_bytes()).unwrap();
        mem.write(AVAIL + 2, &(n + 1).to_le_bytes()).unwrap();
    }

    #[test]
    fn a_request_is_filled_published_and_interrupts_until_acknowledged() {
        let mem = Buf(RefCell::new(vec![0; 0x400]));
        let mut d = ready_device(&mem);
        for n in 0..6u16 {
            offer(&mem, n);
            mem.write(DATA, &[0; 16]).unwrap();
            assert_eq!(d.write(reg::QUEUE_NOTIFY, 0, &mem, &mut ones), Line::Raise);
            assert_eq!(mem.0.borrow()[DATA as usize..DATA as usize + 16], [0xA5; 16]);
            assert_eq!(mem.read_u16(USED + 2).unwrap(), n + 1, "used idx");
            let elem = USED + 4 + 8 * u64::from(n % 4);
            let mut e = [0u8; 8];
            mem.read(elem, &mut e).unwrap();
            assert_eq!(e, [0, 0, 0, 0, 16, 0, 0, 0], "id 0, 16 bytes");
            assert_eq!(d.read(reg::INTERRUPT_STATUS), INT_VRING);
            assert_eq!(d.write(reg::INTERRUPT_ACK, INT_VRING, &mem, &mut ones), Line::Lower);
            assert_eq!(d.read(reg::INTERRUPT_STATUS), 0);
        }
        // Nothing new offered: nothing served, no interrupt.
        assert_eq!(d.write(reg::QUEUE_NOTIFY, 0, &mem, &mut ones), Line::Unchanged);
    }

    #[test]
    fn bad_queues_and_features_are_refused() {
        let mem = Buf(RefCell::new(vec![0; 0x400]));
        let mut d = Rng::default();
        d.write(reg::STATUS, 1 | 2 | 8, &mem, &mut ones);
        assert_eq!(d.read(reg::STATUS) & 8, 0, "FEATURES_OK without VERSION_1");
        d.write(reg::QUEUE_NUM, 3, &mem, &mut ones);
        d.write(reg::QUEUE_READY, 1, &mem, &mut ones);
        assert_eq!(d.read(reg::QUEUE_READY), 0);
        assert_ne!(d.read(reg::STATUS) & STATUS_NEEDS_RESET, 0);
        d.write(reg::STATUS, 0, &mem, &mut ones);
        assert_eq!(d, Rng::default());

        // A chain that loops sets DEVICE_NEEDS_RESET instead of spinning.
        let mut d = ready_device(&mem);
        let mut desc = [0u8; 16];
        desc[12..14].copy_from_slice(&(DESC_F_WRITE | DESC_F_NEXT).to_le_bytes());
        mem.write(DESC, &desc).unwrap();
        mem.write(AVAIL + 2, &1u16.to_le_bytes()).unwrap();
        assert_eq!(d.write(reg::QUEUE_NOTIFY, 0, &mem, &mut ones), Line::Unchanged);
        assert_ne!(d.read(reg::STATUS) & STATUS_NEEDS_RESET, 0);
    }

    #[test]
    fn the_window_is_one_transport() {
        assert_eq!(offset(VIRTIO_BASE + 0x50), Some(0x50));
        assert_eq!(offset(VIRTIO_BASE + VIRTIO_SIZE), None);
    }
}
