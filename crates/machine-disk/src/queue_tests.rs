//! The request queue against a model of a virtio-blk device that reads the same memory: the
//! rings and tables the queue writes are decoded the way a device decodes them (§2.7.5, §2.7.6).

use crate::queue::{
    BusSegment, DeviceError, Kind, MAX_SEGMENTS, RequestQueue, RingMemory, SubmitError,
};
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;
use std::rc::Rc;

/// "Physical memory": the queue's area at 0, data buffers above it.
#[derive(Clone)]
struct Phys(Rc<RefCell<Vec<u8>>>);

const QUEUE_AT: u64 = 0;

impl Phys {
    fn new(bytes: usize) -> Self {
        Self(Rc::new(RefCell::new(vec![0; bytes])))
    }
    fn get(&self, at: u64, len: usize) -> Vec<u8> {
        self.0.borrow()[at as usize..at as usize + len].to_vec()
    }
    fn put(&self, at: u64, bytes: &[u8]) {
        self.0.borrow_mut()[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
    }
    fn u16(&self, at: u64) -> u16 {
        u16::from_le_bytes(self.get(at, 2).try_into().unwrap())
    }
    fn u32(&self, at: u64) -> u32 {
        u32::from_le_bytes(self.get(at, 4).try_into().unwrap())
    }
    fn u64(&self, at: u64) -> u64 {
        u64::from_le_bytes(self.get(at, 8).try_into().unwrap())
    }
}

impl RingMemory for Phys {
    fn bus_address(&self) -> u64 {
        QUEUE_AT
    }
    fn size(&self) -> usize {
        self.0.borrow().len()
    }
    fn read_u8(&self, offset: usize) -> u8 {
        self.0.borrow()[offset]
    }
    fn read_u16(&self, offset: usize) -> u16 {
        self.u16(offset as u64)
    }
    fn read_u32(&self, offset: usize) -> u32 {
        self.u32(offset as u64)
    }
    fn write_u8(&self, offset: usize, value: u8) {
        self.put(offset as u64, &[value]);
    }
    fn write_u16(&self, offset: usize, value: u16) {
        self.put(offset as u64, &value.to_le_bytes());
    }
    fn write_u32(&self, offset: usize, value: u32) {
        self.put(offset as u64, &value.to_le_bytes());
    }
    fn write_u64(&self, offset: usize, value: u64) {
        self.put(offset as u64, &value.to_le_bytes());
    }
}

/// A virtio-blk device model: takes what the available ring offers, serves it from `disk`, and
/// completes in whatever order the test says.
struct Device {
    mem: Phys,
    size: u16,
    rings: (u64, u64, u64),
    disk: Vec<u8>,
    next_avail: u16,
    next_used: u16,
    /// Heads taken and not yet completed, with their status byte's address.
    taken: Vec<(u32, u64, u32)>,
    flushes: usize,
}

impl Device {
    fn new<M: RingMemory>(mem: &Phys, q: &RequestQueue<M, u64>, disk_bytes: usize) -> Self {
        Self {
            mem: mem.clone(),
            size: q.size(),
            rings: q.rings(),
            disk: (0..disk_bytes).map(|i| (i / 512) as u8).collect(),
            next_avail: 0,
            next_used: 0,
            taken: Vec::new(),
            flushes: 0,
        }
    }

    /// Serves every request made available, leaving it uncompleted.
    fn take_all(&mut self) {
        let (desc, avail, _) = self.rings;
        while self.mem.u16(avail + 2) != self.next_avail {
            let head = self.mem.u16(avail + 4 + 2 * u64::from(self.next_avail % self.size));
            self.next_avail = self.next_avail.wrapping_add(1);
            let d = desc + u64::from(head) * 16;
            assert_eq!(self.mem.u16(d + 12), 4, "each ring descriptor is indirect");
            let (table, len) = (self.mem.u64(d), self.mem.u32(d + 8));
            let n = len as u64 / 16;
            let entry = |i: u64| {
                let e = table + i * 16;
                (self.mem.u64(e), self.mem.u32(e + 8), self.mem.u16(e + 12), self.mem.u16(e + 14))
            };
            let (hdr, hdr_len, hdr_flags, _) = entry(0);
            assert_eq!((hdr_len, hdr_flags & 2), (16, 0), "a device-readable 16-byte header");
            let kind = self.mem.u32(hdr);
            let mut pos = self.mem.u64(hdr + 8) as usize * 512;
            let (status, status_len, status_flags, _) = entry(n - 1);
            assert_eq!((status_len, status_flags), (1, 2), "a last, writable status byte");
            let mut ok = true;
            for i in 1..n - 1 {
                let (addr, len, flags, next) = entry(i);
                assert_eq!(next as u64, i + 1);
                assert_eq!(flags & 1, 1, "data descriptors chain on");
                let len = len as usize;
                if pos + len > self.disk.len() {
                    ok = false;
                    break;
                }
                match kind {
                    0 => {
                        assert_eq!(flags & 2, 2, "read data is device-writable");
                        self.mem.put(addr, &self.disk[pos..pos + len]);
                    }
                    1 => {
                        assert_eq!(flags & 2, 0, "write data is device-readable");
                        let data = self.mem.get(addr, len);
                        self.disk[pos..pos + len].copy_from_slice(&data);
                    }
                    other => panic!("data on a request of type {other}"),
                }
                pos += len;
            }
            if kind == 4 {
                self.flushes += 1;
            }
            self.mem.put(status, &[if ok { 0 } else { 1 }]);
            self.taken.push((u32::from(head), status, 0));
        }
    }

    /// Puts taken request `i` (in the order taken) in the used ring.
    fn complete(&mut self, i: usize) {
        let (head, _, len) = self.taken.remove(i);
        self.used(head, len);
    }

    fn used(&mut self, id: u32, len: u32) {
        let used = self.rings.2;
        let at = used + 4 + 8 * u64::from(self.next_used % self.size);
        self.mem.put(at, &id.to_le_bytes());
        self.mem.put(at + 4, &len.to_le_bytes());
        self.next_used = self.next_used.wrapping_add(1);
        self.mem.put(used + 2, &self.next_used.to_le_bytes());
    }
}

const DATA_AT: u64 = 0x10_0000;

fn setup(size: u16) -> (Phys, RequestQueue<Phys, u64>, Device) {
    let phys = Phys::new(0x20_0000);
    assert!(RequestQueue::<Phys, u64>::memory_size(size) as u64 <= DATA_AT);
    let q = RequestQueue::new(phys.clone(), size).expect("a valid queue");
    let dev = Device::new(&phys, &q, 64 << 10);
    (phys, q, dev)
}

#[test]
fn multi_segment_read_and_write_reach_the_right_sectors_and_buffers() {
    let (phys, mut q, mut dev) = setup(8);
    // A write of 3 segments (1.5 KiB) at sector 4, from scattered buffers.
    phys.put(DATA_AT, &[0xa1; 512]);
    phys.put(DATA_AT + 0x3000, &[0xa2; 1024]);
    let segs = [
        BusSegment { addr: DATA_AT, len: 512 },
        BusSegment { addr: DATA_AT + 0x3000, len: 512 },
        BusSegment { addr: DATA_AT + 0x3200, len: 512 },
    ];
    q.submit(7, Kind::Write, 4, &segs).unwrap();
    dev.take_all();
    dev.complete(0);
    assert_eq!(q.pop_completion(), Some((7, Ok(()))));
    assert_eq!(q.pop_completion(), None);
    assert_eq!(&dev.disk[4 * 512..5 * 512], &[0xa1; 512]);
    assert_eq!(&dev.disk[5 * 512..7 * 512], &[0xa2; 1024]);
    assert_eq!(dev.disk[7 * 512], 7, "the sector after is untouched");

    // Read it back into two other buffers.
    let back = [
        BusSegment { addr: DATA_AT + 0x8000, len: 1024 },
        BusSegment { addr: DATA_AT + 0x9000, len: 512 },
    ];
    q.submit(8, Kind::Read, 4, &back).unwrap();
    dev.take_all();
    dev.complete(0);
    assert_eq!(q.pop_completion(), Some((8, Ok(()))));
    assert_eq!(phys.get(DATA_AT + 0x8000, 512), vec![0xa1; 512]);
    assert_eq!(phys.get(DATA_AT + 0x8200, 512), vec![0xa2; 512]);
    assert_eq!(phys.get(DATA_AT + 0x9000, 512), vec![0xa2; 512]);
}

#[test]
fn completions_in_any_order_name_their_own_requests_and_free_their_slots() {
    let (_, mut q, mut dev) = setup(4);
    for tag in 0..4 {
        let seg = [BusSegment { addr: DATA_AT + tag * 512, len: 512 }];
        q.submit(100 + tag, Kind::Read, tag, &seg).unwrap();
    }
    assert_eq!(q.submit(9, Kind::Flush, 0, &[]), Err(SubmitError::Full));
    assert_eq!(q.in_flight(), 4);
    dev.take_all();
    dev.complete(2); // tag 102
    dev.complete(0); // tag 100
    assert_eq!(q.pop_completion(), Some((102, Ok(()))));
    assert_eq!(q.pop_completion(), Some((100, Ok(()))));
    assert_eq!(q.free_slots(), 2);
    let mut left: Vec<u64> = q.tags_in_flight().collect();
    left.sort();
    assert_eq!(left, [101, 103]);

    // The ring wraps: many more requests than slots, through the freed ones.
    for round in 0..20u64 {
        q.submit(round, Kind::Flush, 0, &[]).unwrap();
        dev.take_all();
        let last = dev.taken.len() - 1;
        dev.complete(last);
        assert_eq!(q.pop_completion(), Some((round, Ok(()))));
    }
    assert_eq!(dev.flushes, 20);
}

#[test]
fn a_device_error_or_an_unwritten_status_fails_the_request() {
    let (phys, mut q, mut dev) = setup(4);
    // Past the end of the 64 KiB disk: the model answers IOERR.
    q.submit(1, Kind::Read, 200, &[BusSegment { addr: DATA_AT, len: 512 }]).unwrap();
    dev.take_all();
    dev.complete(0);
    assert_eq!(q.pop_completion(), Some((1, Err(DeviceError { status: 1 }))));

    // A device that puts a request in the used ring without writing its status.
    q.submit(2, Kind::Flush, 0, &[]).unwrap();
    dev.take_all();
    let (head, status, _) = dev.taken.remove(0);
    phys.put(status, &[0xff]);
    dev.used(head, 0);
    assert_eq!(q.pop_completion(), Some((2, Err(DeviceError { status: 0xff }))));
}

#[test]
fn a_used_entry_naming_no_request_in_flight_is_dropped_and_counted() {
    let (_, mut q, mut dev) = setup(4);
    q.submit(5, Kind::Flush, 0, &[]).unwrap();
    dev.take_all();
    dev.used(3, 0); // slot 3: never submitted
    dev.used(999, 0); // beyond the queue
    dev.complete(0);
    dev.used(0, 0); // slot 0 again, already completed
    assert_eq!(q.pop_completion(), Some((5, Ok(()))));
    assert_eq!(q.pop_completion(), None);
    assert_eq!(q.bogus_completions(), 3);
    assert_eq!(q.free_slots(), 4);
}

#[test]
fn a_request_of_the_most_segments_fits_and_one_more_is_refused() {
    let (phys, mut q, mut dev) = setup(2);
    let most: Vec<BusSegment> =
        (0..MAX_SEGMENTS as u64).map(|i| BusSegment { addr: DATA_AT + i * 8, len: 8 }).collect();
    phys.put(DATA_AT, &[0x5a; MAX_SEGMENTS * 8]);
    // 448 segments of 8 bytes: 7 whole sectors, the same way the model serves any request.
    q.submit(1, Kind::Write, 0, &most[..448]).unwrap();
    dev.take_all();
    dev.complete(0);
    assert_eq!(q.pop_completion(), Some((1, Ok(()))));
    assert_eq!(&dev.disk[..448 * 8], &[0x5a; 448 * 8][..]);
    q.submit(2, Kind::Write, 0, &most).unwrap();
    let mut too_many = most.clone();
    too_many.push(BusSegment { addr: DATA_AT, len: 8 });
    assert_eq!(q.submit(3, Kind::Write, 0, &too_many), Err(SubmitError::TooManySegments));
    assert_eq!(q.in_flight(), 1, "the refused request took no slot");
}

#[test]
fn a_queue_refuses_memory_it_cannot_use() {
    let small = Phys::new(RequestQueue::<Phys, u64>::memory_size(8) - 1);
    assert!(RequestQueue::<_, u64>::new(small, 8).is_none());
    let phys = Phys::new(0x20_0000);
    assert!(RequestQueue::<_, u64>::new(phys, 6).is_none(), "not a power of two");
}
