//! virtio-blk: reads, writes, flush, ID, errors, buffers across chunks.

use std::sync::{Arc, Mutex};
use std::vec::Vec;

use vdev::{AccessWidth, MmioDevice};

use super::*;
use crate::blk::{
    BlockBackend, F_FLUSH, F_RO, F_SEG_MAX, F_SIZE_MAX, Op, Request, S_IOERR, S_OK, S_UNSUPP,
    Submit, T_FLUSH, T_GET_ID, T_IN, T_OUT,
};
use crate::{Blk, device_id};

const SECTORS: usize = 64;

fn disk() -> Vec<u8> {
    (0..SECTORS * 512).map(|i| (i / 512) as u8 ^ (i as u8)).collect()
}

fn header(kind: u32, sector: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(&kind.to_le_bytes());
    h[8..].copy_from_slice(&sector.to_le_bytes());
    h
}

struct Setup {
    g: Guest,
    m: VirtioMmio<Blk>,
    q: DriverQueue,
}

fn setup(blk: Blk) -> Setup {
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(blk);
    let q = init(&mut m, &mut g, ALL, 32).remove(0);
    Setup { g, m, q }
}

impl Setup {
    /// Submits `bufs`, kicks, and returns the (head, used len) completed.
    fn submit(&mut self, bufs: &[(u64, u32, bool)]) -> Vec<(u32, u32)> {
        self.q.add(&mut self.g.ram, bufs);
        kick(&mut self.m, &mut self.g, 0);
        assert!(!self.m.needs_reset(), "{:?}", self.m.last_error());
        self.q.take_used(&self.g.ram)
    }

    fn status(&mut self) -> u64 {
        self.g.alloc(1, 1)
    }
}

#[test]
fn config_and_features() {
    let mut s = setup(Blk::new(disk()));
    assert_eq!(r32(&mut s.m, regs::DEVICE_ID), device_id::BLOCK);
    assert_eq!(s.m.read(0x100, AccessWidth::Word), Ok(SECTORS as u64));
    assert_eq!(s.m.read(0x104, AccessWidth::Word), Ok(0));
    assert_eq!(s.m.read(0x100, AccessWidth::Double), Ok(SECTORS as u64));
    assert_eq!(s.m.offered_features() & (F_FLUSH | F_RO), F_FLUSH);
    // seg_max: a request of queue-size buffers, less the header and the status.
    assert_ne!(s.m.offered_features() & F_SEG_MAX, 0);
    assert_eq!(s.m.read(0x10c, AccessWidth::Word), Ok(u64::from(Blk::QUEUE_SIZE) - 2));
    assert_ne!(s.m.offered_features() & F_SIZE_MAX, 0);
    assert_eq!(s.m.read(0x108, AccessWidth::Word), Ok(u64::from(Blk::SIZE_MAX)));
    let ro = VirtioMmio::new(Blk::new(disk()).read_only(true));
    assert_ne!(ro.offered_features() & F_RO, 0);
    // A partial last sector is not exposed.
    let odd = VirtioMmio::new(Blk::new(std::vec![0u8; 1000]));
    assert_eq!(odd.device().capacity(), 1);
}

#[test]
fn a_segment_longer_than_size_max_fails_before_the_backend() {
    let mut s = setup(Blk::new(std::vec![7u8; 4 << 20]));
    let h = s.g.buf(&header(T_IN, 0));
    let len = Blk::SIZE_MAX + 512;
    let data = s.g.alloc(u64::from(len), 1);
    let st = s.status();
    let used = s.submit(&[(h, 16, false), (data, len, true), (st, 1, true)]);
    assert_eq!(used, [(0, len + 1)]);
    assert_eq!(s.g.read(st, 1), [S_IOERR]);
    assert!(s.g.read(data, len as usize).iter().all(|&b| b != 7), "nothing of the disk read");
    // At the limit it is served.
    let h = s.g.buf(&header(T_IN, 0));
    let data = s.g.alloc(u64::from(Blk::SIZE_MAX), 1);
    let st = s.status();
    s.submit(&[(h, 16, false), (data, Blk::SIZE_MAX, true), (st, 1, true)]);
    assert_eq!(s.g.read(st, 1), [S_OK]);
}

#[test]
fn read_sectors() {
    let mut s = setup(Blk::new(disk()));
    let h = s.g.buf(&header(T_IN, 3));
    let data = s.g.alloc(1024, 1);
    let st = s.status();
    let used = s.submit(&[(h, 16, false), (data, 1024, true), (st, 1, true)]);
    assert_eq!(used, [(0, 1025)]);
    assert_eq!(s.g.read(st, 1), [S_OK]);
    assert_eq!(s.g.read(data, 1024), disk()[3 * 512..5 * 512]);
    let st = s.m.stats().device;
    assert_eq!((st.requests, st.bytes_to_guest, st.errors), (1, 1024, 0));
}

#[test]
fn write_then_read_back_across_chunks_and_descriptors() {
    let mut s = setup(Blk::new(disk()));
    // Header and data in one descriptor, straddling a 4 KiB chunk boundary.
    let payload: Vec<u8> = (0..1536u32).map(|i| (i * 7) as u8).collect();
    let mut req = header(T_OUT, 10).to_vec();
    req.extend_from_slice(&payload);
    let a = s.g.straddling(req.len() as u64, 100);
    s.g.ram.write(Ipa(a), &req).unwrap();
    let st = s.status();
    assert_eq!(s.submit(&[(a, req.len() as u32, false), (st, 1, true)]), [(0, 1)]);
    assert_eq!(s.g.read(st, 1), [S_OK]);
    // Read it back into three writable descriptors, the status byte sharing
    // the last one, which straddles a chunk.
    let h = s.g.buf(&header(T_IN, 10));
    let d1 = s.g.alloc(512, 1);
    let d2 = s.g.alloc(100, 1);
    let d3 = s.g.straddling(925, 300);
    let used = s.submit(&[(h, 16, false), (d1, 512, true), (d2, 100, true), (d3, 925, true)]);
    assert_eq!(used, [(2, 1537)]);
    let mut back = s.g.read(d1, 512);
    back.extend(s.g.read(d2, 100));
    back.extend(s.g.read(d3, 925));
    assert_eq!(back[1536], S_OK, "status is the last writable byte");
    assert_eq!(&back[..1536], &payload[..]);
    let on_disk = disk_bytes(s.m.device_mut().backend_mut(), 10 * 512, 1536);
    assert_eq!(on_disk, payload);
}

#[test]
fn requests_through_indirect_tables() {
    let mut s = setup(Blk::new(disk()));
    let h = s.g.buf(&header(T_IN, 0));
    let data = s.g.alloc(512, 1);
    let st = s.status();
    s.q.add_indirect(&mut s.g, &[(h, 16, false), (data, 512, true), (st, 1, true)]);
    kick(&mut s.m, &mut s.g, 0);
    assert_eq!(s.q.take_used(&s.g.ram), [(0, 513)]);
    assert_eq!(s.g.read(data, 512), disk()[..512]);
}

/// What `seg_max` promises holds: a read scattered over `seg_max` buffers
/// (Linux's direct I/O into pages that are not contiguous) is one request.
#[test]
fn a_request_of_seg_max_segments() {
    const SEG: u32 = 256; // 254 x 256 bytes = 127 whole sectors
    let image: Vec<u8> = (0..128 * 512).map(|i| (i * 13 / 7) as u8).collect();
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Blk::new(image.clone()));
    let mut q = init(&mut m, &mut g, ALL, Blk::QUEUE_SIZE).remove(0);
    let h = g.buf(&header(T_IN, 1));
    let segs: Vec<u64> = (0..Blk::SEG_MAX).map(|_| g.alloc(u64::from(SEG), 64)).collect();
    let st = g.alloc(1, 1);
    let mut bufs = std::vec![(h, 16, false)];
    bufs.extend(segs.iter().map(|&a| (a, SEG, true)));
    bufs.push((st, 1, true));
    assert_eq!(bufs.len(), usize::from(Blk::QUEUE_SIZE), "a chain of queue-size buffers");
    q.add_indirect(&mut g, &bufs);
    kick(&mut m, &mut g, 0);
    assert!(!m.needs_reset(), "{:?}", m.last_error());
    let len = Blk::SEG_MAX * SEG;
    assert_eq!(q.take_used(&g.ram), [(0, len + 1)]);
    assert_eq!(g.read(st, 1), [S_OK]);
    let back: Vec<u8> = segs.iter().flat_map(|&a| g.read(a, SEG as usize)).collect();
    assert_eq!(back, image[512..512 + len as usize]);
}

#[test]
fn flush_and_get_id() {
    struct Counting(Vec<u8>, Arc<Mutex<u32>>);
    impl BlockBackend for Counting {
        fn size(&self) -> u64 {
            self.0.len() as u64
        }
        fn submit(&mut self, req: &Request<'_>, ram: &mut dyn GuestRam) -> Submit {
            if req.op == Op::Flush {
                *self.1.lock().unwrap() += 1;
            }
            self.0.submit(req, ram)
        }
    }
    let flushes = Arc::new(Mutex::new(0));
    let mut s = setup(Blk::new(Counting(disk(), flushes.clone())).with_id(b"armhv-disk0"));
    let h = s.g.buf(&header(T_FLUSH, 0));
    let st = s.status();
    assert_eq!(s.submit(&[(h, 16, false), (st, 1, true)]), [(0, 1)]);
    assert_eq!((s.g.read(st, 1)[0], *flushes.lock().unwrap()), (S_OK, 1));

    let h = s.g.buf(&header(T_GET_ID, 0));
    let id = s.g.buf(&[0xff; 20]);
    let st = s.status();
    assert_eq!(s.submit(&[(h, 16, false), (id, 20, true), (st, 1, true)]), [(2, 21)]);
    assert_eq!(s.g.read(st, 1), [S_OK]);
    let mut want = b"armhv-disk0".to_vec();
    want.resize(20, 0);
    assert_eq!(s.g.read(id, 20), want);
}

#[test]
fn errors_complete_with_status() {
    let mut s = setup(Blk::new(disk()));
    let cases: [(u32, u64, u32, u8); 6] = [
        (T_IN, SECTORS as u64 - 1, 1024, S_IOERR), // runs past the end
        (T_IN, SECTORS as u64, 512, S_IOERR),      // starts at the end
        (T_IN, u64::MAX / 256, 512, S_IOERR),      // sector * 512 overflows
        (T_IN, 0, 100, S_IOERR),                   // not whole sectors
        (T_OUT, SECTORS as u64, 512, S_IOERR),
        (99, 0, 512, S_UNSUPP),
    ];
    for (i, (kind, sector, len, want)) in cases.into_iter().enumerate() {
        let mut req = header(kind, sector).to_vec();
        let writable = kind != T_OUT;
        if !writable {
            req.resize(16 + len as usize, 0xee);
        }
        let h = s.g.buf(&req);
        let data = s.g.buf(&std::vec![0x55; len as usize]);
        let st = s.g.buf(&[0xff]);
        let bufs: Vec<(u64, u32, bool)> = if writable {
            std::vec![(h, 16, false), (data, len, true), (st, 1, true)]
        } else {
            std::vec![(h, req.len() as u32, false), (st, 1, true)]
        };
        let used = s.submit(&bufs);
        assert_eq!(used.len(), 1, "case {i}");
        assert_eq!(s.g.read(st, 1), [want], "case {i}");
        if writable {
            // Only the status byte is written: a failed request costs the same whatever
            // writable memory its chain names.
            assert_eq!(s.g.read(data, len as usize), std::vec![0x55; len as usize], "case {i}");
        }
    }
    assert_eq!(s.m.stats().device.errors, cases.len() as u64);
    assert_eq!(s.m.device_mut().backend_mut().size(), (SECTORS * 512) as u64, "disk untouched");
}

#[test]
fn short_header_is_an_io_error() {
    let mut s = setup(Blk::new(disk()));
    let h = s.g.buf(&[0; 8]);
    let st = s.g.buf(&[0xff]);
    s.submit(&[(h, 8, false), (st, 1, true)]);
    assert_eq!(s.g.read(st, 1), [S_IOERR]);
}

#[test]
fn read_only_disk_refuses_writes() {
    let mut s = setup(Blk::new(disk()).read_only(true));
    let mut req = header(T_OUT, 0).to_vec();
    req.extend_from_slice(&[0; 512]);
    let h = s.g.buf(&req);
    let st = s.status();
    s.submit(&[(h, req.len() as u32, false), (st, 1, true)]);
    assert_eq!(s.g.read(st, 1), [S_IOERR]);
    let first = disk_bytes(s.m.device_mut().backend_mut(), 0, 512);
    assert_eq!(&first[..], &disk()[..512]);
}

#[test]
fn static_slice_backend() {
    let image: &'static mut [u8] = std::vec![7u8; 4096].leak();
    let mut s = setup(Blk::new(image));
    let h = s.g.buf(&header(T_IN, 7));
    let data = s.g.alloc(512, 1);
    let st = s.status();
    s.submit(&[(h, 16, false), (data, 512, true), (st, 1, true)]);
    assert_eq!((s.g.read(data, 512), s.g.read(st, 1)), (std::vec![7; 512], std::vec![S_OK]));
}

#[test]
fn many_requests_in_one_kick() {
    let mut s = setup(Blk::new(disk()));
    let mut expect = Vec::new();
    for i in 0..8u64 {
        let h = s.g.buf(&header(T_IN, i));
        let d = s.g.alloc(512, 1);
        let st = s.status();
        s.q.add(&mut s.g.ram, &[(h, 16, false), (d, 512, true), (st, 1, true)]);
        expect.push((d, i));
    }
    kick(&mut s.m, &mut s.g, 0);
    assert_eq!(s.q.take_used(&s.g.ram).len(), 8);
    for (d, i) in expect {
        assert_eq!(s.g.read(d, 512), disk()[i as usize * 512..][..512]);
    }
    assert_eq!(s.m.stats().transport.interrupts, 1, "one interrupt for the batch");
}
