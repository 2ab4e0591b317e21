//! virtio-blk over a backend that completes later, in an order the test
//! chooses: requests in flight, out-of-order completion, multi-segment
//! requests, flush ordering, partitions, resets with requests in flight, and
//! the bound on what a driver can make the device hold.

use std::sync::{Arc, Mutex};
use std::vec::Vec;

use super::*;
use crate::blk::{F_RO, Op, Request, S_IOERR, S_OK, Submit, T_FLUSH, T_IN, T_OUT, Token};
use crate::{Blk, BlockBackend, BlockError, Partition, Segment};

const SECTORS: usize = 64;
/// What the driver leaves in a status byte, to tell "not written" apart.
const UNTOUCHED: u8 = 0xff;

fn image() -> Vec<u8> {
    (0..SECTORS * 512).map(|i| (i / 512) as u8 ^ (i as u8).rotate_left(3)).collect()
}

fn header(kind: u32, sector: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..4].copy_from_slice(&kind.to_le_bytes());
    h[8..].copy_from_slice(&sector.to_le_bytes());
    h
}

/// A request the fake backend has been handed and not yet completed.
#[derive(Clone, Debug)]
struct Submitted {
    token: Token,
    op: Op,
    offset: u64,
    segments: Vec<Segment>,
}

#[derive(Default)]
struct Shared {
    disk: Vec<u8>,
    pending: Vec<Submitted>,
    /// Every submission, in order: (op, offset, bytes).
    log: Vec<(Op, u64, u64)>,
    /// Most requests pending at once; beyond, `submit` answers `Busy`.
    room: Option<usize>,
}

/// An asynchronous disk: `submit` only records the request; the test does
/// the data movement (the DMA) and the completion when it wants, in any
/// order.
#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Shared>>);

impl Fake {
    fn new(disk: Vec<u8>) -> Self {
        Self(Arc::new(Mutex::new(Shared { disk, ..Shared::default() })))
    }

    fn pending(&self) -> Vec<Submitted> {
        self.0.lock().unwrap().pending.clone()
    }

    fn log(&self) -> Vec<(Op, u64, u64)> {
        self.0.lock().unwrap().log.clone()
    }

    fn disk(&self) -> Vec<u8> {
        self.0.lock().unwrap().disk.clone()
    }

    /// Carries out the pending request with operation `op` at `offset` as a
    /// device would (moves its data between the disk and guest memory) and
    /// takes it off the pending list: its token.
    fn carry_out(&self, ram: &mut VecRam, op: Op, offset: u64) -> Token {
        let mut sh = self.0.lock().unwrap();
        let i = sh
            .pending
            .iter()
            .position(|p| p.op == op && p.offset == offset)
            .unwrap_or_else(|| panic!("no pending {op:?} at {offset}: {:?}", sh.pending));
        let p = sh.pending.remove(i);
        let mut pos = p.offset as usize;
        for s in &p.segments {
            let n = s.len as usize;
            match p.op {
                Op::Read => ram.write(s.addr, &sh.disk[pos..pos + n]).unwrap(),
                Op::Write => ram.read(s.addr, &mut sh.disk[pos..pos + n]).unwrap(),
                Op::Flush => {}
            }
            pos += n;
        }
        p.token
    }
}

impl BlockBackend for Fake {
    fn size(&self) -> u64 {
        self.0.lock().unwrap().disk.len() as u64
    }

    fn submit(&mut self, req: &Request<'_>, _ram: &mut dyn GuestRam) -> Submit {
        let mut sh = self.0.lock().unwrap();
        if sh.room.is_some_and(|room| sh.pending.len() >= room) {
            return Submit::Busy;
        }
        sh.log.push((req.op, req.offset, req.len()));
        sh.pending.push(Submitted {
            token: req.token,
            op: req.op,
            offset: req.offset,
            segments: req.segments.to_vec(),
        });
        Submit::Pending
    }
}

struct Setup {
    g: Guest,
    m: VirtioMmio<Blk>,
    q: DriverQueue,
}

fn setup(blk: Blk, features: u64, qsize: u16) -> Setup {
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(blk);
    let q = init(&mut m, &mut g, features, qsize).remove(0);
    Setup { g, m, q }
}

/// The guest addresses of one read request: data and status.
struct Read {
    data: u64,
    len: usize,
    status: u64,
}

impl Setup {
    /// Posts a read of `sectors` sectors at `sector` into one buffer (not
    /// kicked).
    fn post_read(&mut self, sector: u64, sectors: usize) -> Read {
        let h = self.g.buf(&header(T_IN, sector));
        let len = sectors * 512;
        let data = self.g.buf(&std::vec![0xaa; len]);
        let status = self.g.buf(&[UNTOUCHED]);
        self.q.add(&mut self.g.ram, &[(h, 16, false), (data, len as u32, true), (status, 1, true)]);
        Read { data, len, status }
    }

    /// Posts a write of `bytes` at `sector`; returns its status byte's address.
    fn post_write(&mut self, sector: u64, bytes: &[u8]) -> u64 {
        let h = self.g.buf(&header(T_OUT, sector));
        let data = self.g.buf(bytes);
        let status = self.g.buf(&[UNTOUCHED]);
        let n = bytes.len() as u32;
        self.q.add(&mut self.g.ram, &[(h, 16, false), (data, n, false), (status, 1, true)]);
        status
    }

    fn post_flush(&mut self) -> u64 {
        let h = self.g.buf(&header(T_FLUSH, 0));
        let status = self.g.buf(&[UNTOUCHED]);
        self.q.add(&mut self.g.ram, &[(h, 16, false), (status, 1, true)]);
        status
    }

    fn kick(&mut self) {
        kick(&mut self.m, &mut self.g, 0);
        assert!(!self.m.needs_reset(), "{:?}", self.m.last_error());
    }

    fn complete(&mut self, token: Token, result: Result<(), BlockError>) -> bool {
        let done = self.m.complete(token, result, &mut self.g.ram);
        assert!(!self.m.needs_reset(), "{:?}", self.m.last_error());
        done
    }

    fn status(&self, at: u64) -> u8 {
        self.g.read(at, 1)[0]
    }
}

#[test]
fn several_in_flight_complete_out_of_order() {
    let fake = Fake::new(image());
    let mut s = setup(Blk::new(fake.clone()), ALL, 32);
    let reads: Vec<Read> = (0..4).map(|i| s.post_read(i * 4, 2)).collect();
    s.kick();
    assert_eq!(fake.pending().len(), 4, "all four handed to the backend at once");
    assert_eq!(s.m.device().in_flight(), 4);
    assert_eq!(s.q.take_used(&s.g.ram), [], "nothing completed yet");
    assert!(!s.m.irq_level());
    for r in &reads {
        assert_eq!(s.status(r.status), UNTOUCHED);
    }

    // The third, then the first: the used ring follows completion order.
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 8 * 512);
    assert!(s.complete(t, Ok(())));
    assert!(s.m.irq_level(), "a completion interrupts");
    ack(&mut s.m);
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 0);
    assert!(s.complete(t, Ok(())));
    // Heads: each request took three descriptors.
    assert_eq!(s.q.take_used(&s.g.ram), [(6, 1025), (0, 1025)]);
    assert_eq!((s.status(reads[2].status), s.status(reads[0].status)), (S_OK, S_OK));
    assert_eq!((s.status(reads[1].status), s.status(reads[3].status)), (UNTOUCHED, UNTOUCHED));
    assert_eq!(s.g.read(reads[2].data, reads[2].len), image()[8 * 512..][..1024]);
    assert_eq!(s.g.read(reads[0].data, reads[0].len), image()[..1024]);

    // One fails: IOERR, still a used element.
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 12 * 512);
    assert!(s.complete(t, Err(BlockError)));
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 4 * 512);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.q.take_used(&s.g.ram), [(9, 1025), (3, 1025)]);
    assert_eq!((s.status(reads[3].status), s.status(reads[1].status)), (S_IOERR, S_OK));
    assert_eq!(s.m.device().in_flight(), 0);
    let st = s.m.stats().device;
    assert_eq!((st.requests, st.errors, st.bytes_to_guest), (4, 1, 3 * 1024));

    // A second completion of the same token touches nothing.
    assert!(!s.complete(t, Ok(())));
    assert_eq!(s.q.used_idx(&s.g.ram), 4);
}

#[test]
fn completion_respects_notification_suppression() {
    let fake = Fake::new(image());
    let mut s = setup(Blk::new(fake.clone()), PLAIN, 32);
    s.q.set_avail_flags(&mut s.g.ram, crate::queue::VIRTQ_AVAIL_F_NO_INTERRUPT);
    let r = s.post_read(0, 1);
    s.kick();
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 0);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.q.take_used(&s.g.ram), [(0, 513)]);
    assert_eq!(s.status(r.status), S_OK);
    assert!(!s.m.irq_level(), "the driver asked for no interrupt");

    // With EVENT_IDX: no interrupt until the used index passes used_event.
    let mut s = setup(Blk::new(fake.clone()), ALL, 32);
    for i in 0..3 {
        s.post_read(i, 1);
    }
    s.q.set_used_event(&mut s.g.ram, 1);
    s.kick();
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 0);
    assert!(s.complete(t, Ok(())));
    assert!(s.m.irq_level(), "the first decision always notifies");
    ack(&mut s.m);
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 512);
    assert!(s.complete(t, Ok(())));
    assert!(s.m.irq_level(), "used.idx went past used_event = 1");
    ack(&mut s.m);
    s.q.set_used_event(&mut s.g.ram, 10);
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 1024);
    assert!(s.complete(t, Ok(())));
    assert!(!s.m.irq_level(), "used_event = 10 not reached");
    assert_eq!(s.q.used_idx(&s.g.ram), 3);
}

/// The backend is handed the guest's own buffers: a write gathered from
/// three buffers of an indirect table (the first shared with the header),
/// read back into three buffers (the last shared with the status byte).
#[test]
fn multi_segment_requests_reach_the_backend_as_the_guest_buffers() {
    let fake = Fake::new(image());
    let mut s = setup(Blk::new(fake.clone()), ALL, 32);
    let payload: Vec<u8> = (0..1536u32).map(|i| (i * 11) as u8).collect();
    let mut first = header(T_OUT, 5).to_vec();
    first.extend_from_slice(&payload[..100]);
    let a = s.g.buf(&first);
    let b = s.g.straddling(1000, 300);
    s.g.ram.write(Ipa(b), &payload[100..1100]).unwrap();
    let c = s.g.buf(&payload[1100..]);
    let st = s.g.buf(&[UNTOUCHED]);
    s.q.add_indirect(
        &mut s.g,
        &[(a, 116, false), (b, 1000, false), (c, 436, false), (st, 1, true)],
    );
    s.kick();
    let p = fake.pending();
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].op, p[0].offset), (Op::Write, 5 * 512));
    let want = [
        Segment { addr: Ipa(a + 16), len: 100 },
        Segment { addr: Ipa(b), len: 1000 },
        Segment { addr: Ipa(c), len: 436 },
    ];
    assert_eq!(p[0].segments, want, "the guest's buffers, header excluded: no copy");
    let t = fake.carry_out(&mut s.g.ram, Op::Write, 5 * 512);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.status(st), S_OK);
    assert_eq!(fake.disk()[5 * 512..][..1536], payload[..]);

    let h = s.g.buf(&header(T_IN, 5));
    let d1 = s.g.alloc(512, 1);
    let d2 = s.g.straddling(600, 200);
    let d3 = s.g.alloc(425, 1);
    s.q.add(&mut s.g.ram, &[(h, 16, false), (d1, 512, true), (d2, 600, true), (d3, 425, true)]);
    s.kick();
    let p = fake.pending();
    let want = [
        Segment { addr: Ipa(d1), len: 512 },
        Segment { addr: Ipa(d2), len: 600 },
        Segment { addr: Ipa(d3), len: 424 },
    ];
    assert_eq!(p[0].segments, want, "the status byte is not data");
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 5 * 512);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.q.take_used(&s.g.ram), [(0, 1), (1, 1537)]);
    let mut back = s.g.read(d1, 512);
    back.extend(s.g.read(d2, 600));
    back.extend(s.g.read(d3, 425));
    assert_eq!(back[1536], S_OK);
    assert_eq!(back[..1536], payload[..]);
    assert_eq!(s.m.stats().device.bytes_from_guest, 1536);
}

#[test]
fn flush_waits_for_earlier_writes_and_for_the_backend() {
    let fake = Fake::new(image());
    let mut s = setup(Blk::new(fake.clone()), ALL, 32);
    let w1 = s.post_write(1, &[1; 512]);
    let w2 = s.post_write(2, &[2; 512]);
    let fl = s.post_flush();
    let r = s.post_read(9, 1);
    let w3 = s.post_write(3, &[3; 512]);
    s.kick();
    let ops: Vec<Op> = fake.log().iter().map(|l| l.0).collect();
    assert_eq!(
        ops,
        [Op::Write, Op::Write, Op::Read, Op::Write],
        "the flush is held, the rest pass"
    );

    // A read completing does not let it go, nor the later write, nor one
    // of the two earlier writes.
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 9 * 512);
    assert!(s.complete(t, Ok(())));
    let t = fake.carry_out(&mut s.g.ram, Op::Write, 3 * 512);
    assert!(s.complete(t, Ok(())));
    let t = fake.carry_out(&mut s.g.ram, Op::Write, 2 * 512);
    assert!(s.complete(t, Ok(())));
    assert!(fake.log().iter().all(|l| l.0 != Op::Flush));
    assert_eq!(s.status(fl), UNTOUCHED);
    assert_eq!([s.status(r.status), s.status(w3), s.status(w2)], [S_OK; 3]);

    // The last earlier write completes: now the backend has the flush...
    let t = fake.carry_out(&mut s.g.ram, Op::Write, 512);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.status(w1), S_OK);
    assert_eq!(fake.log().last().map(|l| l.0), Some(Op::Flush));
    // ...and the guest sees it complete only when the backend's does.
    assert_eq!(s.status(fl), UNTOUCHED);
    assert_eq!(s.q.take_used(&s.g.ram).len(), 4);
    let t = fake.carry_out(&mut s.g.ram, Op::Flush, 0);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.status(fl), S_OK);
    assert_eq!(s.q.take_used(&s.g.ram), [(6, 1)]);

    // With no write in flight a flush goes at once.
    let fl = s.post_flush();
    s.kick();
    assert_eq!(fake.pending().len(), 1);
    let t = fake.carry_out(&mut s.g.ram, Op::Flush, 0);
    assert!(s.complete(t, Err(BlockError)));
    assert_eq!(s.status(fl), S_IOERR);
    assert_eq!(s.m.device().in_flight(), 0);
}

#[test]
fn a_busy_backend_gets_the_chains_again_when_it_has_room() {
    let fake = Fake::new(image());
    fake.0.lock().unwrap().room = Some(2);
    let mut s = setup(Blk::new(fake.clone()), ALL, 32);
    let reads: Vec<Read> = (0..3).map(|i| s.post_read(i, 1)).collect();
    s.kick();
    assert_eq!(fake.pending().len(), 2);
    assert_eq!(s.m.device().in_flight(), 2, "the third chain was given back, not held");
    assert!(!s.m.has_pending(), "the device waits for the backend to have room, it does not spin");
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 0);
    assert!(s.complete(t, Ok(())));
    assert_eq!(fake.pending().len(), 1, "a completion alone does not retry");
    s.m.backend_ready(&mut s.g.ram);
    assert_eq!(fake.pending().len(), 2, "the chain given back went to the backend");
    for sector in [1, 2] {
        let t = fake.carry_out(&mut s.g.ram, Op::Read, sector * 512);
        assert!(s.complete(t, Ok(())));
    }
    for (i, r) in reads.iter().enumerate() {
        assert_eq!(s.status(r.status), S_OK);
        assert_eq!(s.g.read(r.data, r.len), image()[i * 512..][..512]);
    }
    assert_eq!(s.q.take_used(&s.g.ram).len(), 3, "each chain completed once");

    // A flush let go by its write while the backend is busy stays held until it has room.
    let w = s.post_write(5, &[5; 512]);
    let fl = s.post_flush();
    s.kick();
    fake.0.lock().unwrap().room = Some(0);
    let t = fake.carry_out(&mut s.g.ram, Op::Write, 5 * 512);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.status(w), S_OK);
    assert!(fake.log().iter().all(|l| l.0 != Op::Flush));
    fake.0.lock().unwrap().room = None;
    s.m.backend_ready(&mut s.g.ram);
    let t = fake.carry_out(&mut s.g.ram, Op::Flush, 0);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.status(fl), S_OK);
    assert_eq!(s.m.device().in_flight(), 0);
}

/// A token for a held flush names nothing the backend was given.
#[test]
fn a_held_flush_cannot_be_completed_early() {
    let fake = Fake::new(image());
    let mut s = setup(Blk::new(fake.clone()), ALL, 32);
    s.post_write(0, &[7; 512]);
    let fl = s.post_flush();
    s.kick();
    let write = fake.pending()[0].token;
    // The flush went into the next slot with the next serial.
    let forged = Token { slot: write.slot + 1, serial: write.serial + 1 };
    assert_ne!(forged, write);
    assert!(!s.complete(forged, Ok(())));
    assert_eq!(s.status(fl), UNTOUCHED);
    let t = fake.carry_out(&mut s.g.ram, Op::Write, 0);
    assert!(s.complete(t, Ok(())));
    assert_eq!(fake.pending()[0].token, forged, "now it is the backend's");
}

/// A parent that records what reaches it, to show what does not.
fn partitioned(start_sector: u64, sectors: u64) -> (Fake, Partition<Fake>) {
    let fake = Fake::new(image());
    let part = Partition::new(fake.clone(), start_sector * 512, sectors * 512).unwrap();
    (fake, part)
}

#[test]
fn partition_bounds() {
    let (parent, part) = partitioned(8, 16);
    let mut s = setup(Blk::new(part), ALL, 32);
    assert_eq!(s.m.device().capacity(), 16);
    let inside = s.post_read(15, 1);
    let outside = s.post_read(16, 1);
    let straddling = s.post_read(15, 2);
    s.kick();
    assert_eq!(parent.log(), [(Op::Read, 23 * 512, 512)], "moved by the window's start");
    assert_eq!([s.status(outside.status), s.status(straddling.status)], [S_IOERR; 2]);
    let t = parent.carry_out(&mut s.g.ram, Op::Read, 23 * 512);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.g.read(inside.data, 512), image()[23 * 512..][..512]);

    // The partition checks by itself too, whatever the device above does.
    let (parent, mut part) = partitioned(8, 16);
    let mut ram = VecRam::new(Ipa(RAM_BASE), 4096);
    let seg = |len| [Segment { addr: Ipa(RAM_BASE), len }];
    let cases = [(Op::Read, 16 * 512, 512), (Op::Write, 15 * 512, 1024), (Op::Read, u64::MAX, 512)];
    for (op, offset, len) in cases {
        let segments = seg(len);
        let req = Request { token: Token::TEST, op, offset, segments: &segments };
        assert_eq!(part.submit(&req, &mut ram), Submit::Done(Err(BlockError)), "{op:?} {offset}");
    }
    assert_eq!(parent.log(), [], "the parent saw none of them");
    let segments = seg(1024);
    let req = Request { token: Token::TEST, op: Op::Write, offset: 14 * 512, segments: &segments };
    assert_eq!(part.submit(&req, &mut ram), Submit::Pending);
    assert_eq!(parent.log(), [(Op::Write, 22 * 512, 1024)]);

    assert!(Partition::new(Fake::new(image()), 60 * 512, 5 * 512).is_none(), "past the parent");
    assert!(Partition::new(Fake::new(image()), u64::MAX, 2).is_none());
}

#[test]
fn read_only_partition() {
    let (parent, part) = partitioned(4, 8);
    let mut s = setup(Blk::new(part.read_only(true)), ALL, 32);
    assert_ne!(s.m.offered_features() & F_RO, 0, "the driver is told");
    let w = s.post_write(0, &[9; 512]);
    let r = s.post_read(0, 1);
    s.kick();
    assert_eq!(s.status(w), S_IOERR);
    assert_eq!(parent.log(), [(Op::Read, 4 * 512, 512)], "only the read reached the parent");
    let t = parent.carry_out(&mut s.g.ram, Op::Read, 4 * 512);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.status(r.status), S_OK);
    assert_eq!(parent.disk(), image());

    // Refused by the partition itself, not only by the device.
    let (parent, mut part) = partitioned(4, 8);
    let mut part_ro = Partition::new(part.parent_mut().clone(), 0, 512).unwrap().read_only(true);
    let mut ram = VecRam::new(Ipa(RAM_BASE), 4096);
    let segments = [Segment { addr: Ipa(RAM_BASE), len: 512 }];
    let req = Request { token: Token::TEST, op: Op::Write, offset: 0, segments: &segments };
    assert_eq!(part_ro.submit(&req, &mut ram), Submit::Done(Err(BlockError)));
    assert_eq!(parent.log(), []);
}

#[test]
fn partition_of_a_ram_disk_completes_at_once() {
    let part = Partition::new(image(), 2 * 512, 4 * 512).unwrap();
    let mut s = setup(Blk::new(part), ALL, 32);
    let st = s.post_write(3, &[0x5a; 512]);
    let r = s.post_read(0, 1);
    s.kick();
    assert_eq!([s.status(st), s.status(r.status)], [S_OK; 2]);
    assert_eq!(s.g.read(r.data, 512), image()[2 * 512..][..512]);
    let disk = disk_bytes(s.m.device_mut().backend_mut(), 3 * 512, 512);
    assert_eq!(disk, [0x5a; 512]);
    assert_eq!(s.m.device().in_flight(), 0);
}

#[test]
fn reset_with_requests_in_flight() {
    let fake = Fake::new(image());
    let mut s = setup(Blk::new(fake.clone()), ALL, 32);
    let old_read = s.post_read(0, 1);
    let old_write = s.post_write(1, &[4; 512]);
    let old_flush = s.post_flush();
    s.kick();
    assert_eq!(s.m.device().in_flight(), 3);
    let old: Vec<Submitted> = fake.pending();

    // The driver resets the device and sets it up again; a new request takes
    // the first slot again.
    w32(&mut s.m, regs::STATUS, 0);
    assert_eq!(s.m.device().in_flight(), 0);
    s.q = init(&mut s.m, &mut s.g, ALL, 32).remove(0);
    let new_read = s.post_read(2, 1);
    s.kick();
    let new = fake.pending().last().unwrap().clone();
    assert_eq!(new.token.slot, old[0].token.slot, "the slot is reused");

    // The old requests' completions arrive late: nothing is written.
    for p in &old {
        assert!(!s.complete(p.token, Ok(())));
    }
    assert_eq!(s.q.used_idx(&s.g.ram), 0, "the new used ring is untouched");
    assert!(!s.m.irq_level());
    assert_eq!(s.status(old_read.status), UNTOUCHED);
    assert_eq!(s.status(old_write), UNTOUCHED);
    assert_eq!(s.status(old_flush), UNTOUCHED);
    assert_eq!(s.status(new_read.status), UNTOUCHED);

    let t = fake.carry_out(&mut s.g.ram, Op::Read, 2 * 512);
    assert!(s.complete(t, Ok(())));
    assert_eq!(s.q.take_used(&s.g.ram), [(0, 513)]);
    assert_eq!(s.status(new_read.status), S_OK);

    // The same after a reset by the hypervisor (the VM restarts).
    s.post_read(3, 1);
    s.kick();
    let t = fake.pending().last().unwrap().token;
    s.m.reset();
    assert!(!s.m.complete(t, Ok(()), &mut s.g.ram));
    assert_eq!(s.m.stats().device.requests, 1);
}

#[test]
fn a_device_needing_reset_only_forgets_completions() {
    let fake = Fake::new(image());
    let mut s = setup(Blk::new(fake.clone()), ALL, 32);
    let r = s.post_read(0, 1);
    s.kick();
    // A request without a status byte stops the device.
    let h = s.g.buf(&header(T_IN, 0));
    s.q.add(&mut s.g.ram, &[(h, 16, false)]);
    kick(&mut s.m, &mut s.g, 0);
    assert!(s.m.needs_reset());
    let t = fake.carry_out(&mut s.g.ram, Op::Read, 0);
    assert!(s.m.complete(t, Ok(()), &mut s.g.ram), "the request was in flight");
    assert_eq!(s.status(r.status), UNTOUCHED);
    assert_eq!(s.q.used_idx(&s.g.ram), 0);
    assert_eq!(s.m.device().in_flight(), 0);
}

/// A driver that keeps publishing chains, even chains the device still
/// holds, cannot make it hold more requests than the queue has entries; the
/// rest wait in the ring until completions free room.
#[test]
fn a_flooding_driver_is_bounded_by_the_queue_size() {
    const QSIZE: u16 = 8;
    let fake = Fake::new(image());
    let mut s = setup(Blk::new(fake.clone()), ALL, QSIZE);
    let h = s.g.buf(&header(T_IN, 0));
    let data = s.g.alloc(512, 1);
    let st = s.g.alloc(1, 1);
    // One descriptor each (indirect), so the driver can publish a whole
    // queue's worth twice over: the second round names heads still in flight.
    for _ in 0..QSIZE {
        s.q.add_indirect(&mut s.g, &[(h, 16, false), (data, 512, true), (st, 1, true)]);
    }
    s.kick();
    assert_eq!(fake.pending().len(), usize::from(QSIZE));
    for _ in 0..QSIZE {
        s.q.add_indirect(&mut s.g, &[(h, 16, false), (data, 512, true), (st, 1, true)]);
    }
    s.kick();
    assert_eq!(fake.pending().len(), usize::from(QSIZE), "no more than the queue size");
    assert_eq!(s.m.device().in_flight(), usize::from(QSIZE));
    assert!(!s.m.has_pending(), "nothing to do until a completion: no busy polling");

    // Each completion lets exactly one more in.
    for done in 1..=u64::from(QSIZE) {
        let t = fake.carry_out(&mut s.g.ram, Op::Read, 0);
        assert!(s.complete(t, Ok(())));
        assert_eq!(fake.pending().len(), usize::from(QSIZE));
        assert_eq!(s.m.stats().device.requests, done);
    }
    for done in 1..=u64::from(QSIZE) {
        let t = fake.carry_out(&mut s.g.ram, Op::Read, 0);
        assert!(s.complete(t, Ok(())));
        assert_eq!(fake.pending().len(), usize::from(QSIZE) - done as usize);
    }
    assert_eq!(s.m.device().in_flight(), 0);
    assert_eq!(s.q.take_used(&s.g.ram).len(), 2 * usize::from(QSIZE));
    assert_eq!(fake.log().len(), 2 * usize::from(QSIZE));
}
