//! VM disks on partitions of the machine disk (`vmm::emulate::machine_disk`), against a model
//! of the physical device that reads the request queue where the device would: what reaches
//! the disk is the guest's own buffers at their host-physical addresses, split where guest
//! RAM's 2 MiB chunks split them, at the partition's sectors; what falls outside the partition
//! or writes a read-only disk never reaches it; a full queue makes a VM disk wait.

use ::machine_disk::Partition;
use addr::{Ipa, IpaRange};
use std::alloc::{Layout, alloc_zeroed};
use std::sync::{Arc, Mutex};
use virtio::blk::{Op, Request, Submit, Token};
use virtio::{BlockBackend, GuestRam, Segment};
use vmm::emulate::machine_disk::{self, Doorbell, QUEUE_SLOTS, QueueAddresses};
use vmm::memory::GuestMemory;
use vmm::wakeups::Wakeups;

const RAM: u64 = 0x4000_0000;
const CHUNK: u64 = 2 << 20;
/// The partition: 1 MiB at byte 64 KiB of the disk.
const PART_START: u64 = 64 << 10;
const PART_BYTES: u64 = 1 << 20;

/// One request as the device found it: (type, sector, data segments (address, length,
/// device-writable)).
type Seen = (u32, u64, Vec<(u64, u32, bool)>);

#[derive(Default)]
struct Device {
    queue: Option<QueueAddresses>,
    notified: usize,
    next_avail: u16,
    next_used: u16,
}

/// The device model: what `Doorbell` calls reach, shared with the test.
#[derive(Clone, Default)]
struct Model(Arc<Mutex<Device>>);

impl Doorbell for Model {
    fn attach_queue(&mut self, queue: QueueAddresses) -> Result<(), String> {
        self.0.lock().unwrap().queue = Some(queue);
        Ok(())
    }
    fn notify(&mut self) {
        self.0.lock().unwrap().notified += 1;
    }
    fn acknowledge(&mut self) {}
}

fn rd<T: Copy>(addr: u64) -> T {
    // SAFETY: the addresses are inside the queue's memory (frames of the pool, host memory in
    // these tests) or the guest RAM the test allocated; the monitor writes them only during
    // the calls this test makes, on this thread.
    unsafe { (addr as *const T).read_volatile() }
}

fn wr<T: Copy>(addr: u64, v: T) {
    // SAFETY: as in `rd`.
    unsafe { (addr as *mut T).write_volatile(v) }
}

impl Model {
    /// Takes every request made available, in order, as the device would decode them.
    fn take(&self) -> Vec<(u16, Seen)> {
        let mut d = self.0.lock().unwrap();
        let q = d.queue.expect("the queue was given to the device");
        let mut seen = Vec::new();
        while rd::<u16>(q.available + 2) != d.next_avail {
            let head = rd::<u16>(q.available + 4 + 2 * u64::from(d.next_avail % q.size));
            d.next_avail = d.next_avail.wrapping_add(1);
            let desc = q.descriptors + 16 * u64::from(head);
            assert_eq!(rd::<u16>(desc + 12), 4, "an indirect ring descriptor");
            let (table, n) = (rd::<u64>(desc), u64::from(rd::<u32>(desc + 8)) / 16);
            let entry = |i: u64| {
                let e = table + 16 * i;
                (rd::<u64>(e), rd::<u32>(e + 8), rd::<u16>(e + 12) & 2 != 0)
            };
            let (header, _, _) = entry(0);
            let data = (1..n - 1).map(entry).collect();
            seen.push((head, (rd::<u32>(header), rd::<u64>(header + 8), data)));
        }
        seen
    }

    /// Completes request `head` with `status`.
    fn complete(&self, head: u16, status: u8) {
        let mut d = self.0.lock().unwrap();
        let q = d.queue.unwrap();
        let desc = q.descriptors + 16 * u64::from(head);
        let (table, n) = (rd::<u64>(desc), u64::from(rd::<u32>(desc + 8)) / 16);
        wr::<u8>(rd::<u64>(table + 16 * (n - 1)), status);
        let at = q.used + 4 + 8 * u64::from(d.next_used % q.size);
        wr::<u32>(at, u32::from(head));
        wr::<u32>(at + 4, 0);
        d.next_used = d.next_used.wrapping_add(1);
        wr::<u16>(q.used + 2, d.next_used);
    }
}

fn request(op: Op, offset: u64, segments: &[Segment]) -> Request<'_> {
    Request { token: Token::detached(0), op, offset, segments }
}

#[test]
fn requests_reach_the_disk_with_the_guests_buffers_inside_their_partition() {
    // SAFETY: a valid, non-zero layout; the memory is leaked to the frame pool for good.
    let pool = unsafe { alloc_zeroed(Layout::from_size_align(64 << 20, 2 << 20).unwrap()) } as u64;
    vmm::frames::add_range(pool, pool + (64 << 20));
    let model = Model::default();
    let part = Partition {
        name: "data".into(),
        first_lba: PART_START / 512,
        last_lba: (PART_START + PART_BYTES) / 512 - 1,
    };
    machine_disk::install(vec![part], Box::new(model.clone()), 256).unwrap();
    let memory = GuestMemory::allocate(IpaRange::new(Ipa(RAM), 2 * CHUNK), false).unwrap();
    let chunk_pa: Vec<u64> = memory.chunks().map(|(_, pa)| pa.0).collect();
    let slot = Ipa(0x0a00_0000);

    // A partition that does not exist, or is smaller than the disk wants: refused, with why.
    let err = machine_disk::open(0, slot, "nope", 512, false, memory.view()).err().unwrap();
    assert!(err.contains("no partition nope (it has: data)"), "{err}");
    let err = machine_disk::open(0, slot, "data", 2 * PART_BYTES, false, memory.view()).err();
    assert!(err.unwrap().contains("holds 1024 KiB, the config wants 2048 KiB"));

    let mut disk = machine_disk::open(0, slot, "data", PART_BYTES, false, memory.view()).unwrap();
    let mut ram = memory.view();
    let ram: &mut dyn GuestRam = &mut ram;

    // A read whose second buffer straddles the two chunks of guest RAM: three pieces, each at
    // its own host address; the sector is the partition's plus the request's.
    let segs = [
        Segment { addr: Ipa(RAM + 0x1000), len: 512 },
        Segment { addr: Ipa(RAM + CHUNK - 0x200), len: 0x400 },
    ];
    assert_eq!(disk.submit(&request(Op::Read, 4096, &segs), ram), Submit::Pending);
    let taken = model.take();
    assert_eq!(taken.len(), 1);
    let (head, (kind, sector, data)) = &taken[0];
    assert_eq!((*kind, *sector), (0, (PART_START + 4096) / 512));
    assert_eq!(
        data,
        &[
            (chunk_pa[0] + 0x1000, 512, true),
            (chunk_pa[0] + CHUNK - 0x200, 0x200, true),
            (chunk_pa[1], 0x200, true),
        ]
    );
    assert!(machine_disk::in_flight_for(0));
    model.complete(*head, 0);
    machine_disk::on_interrupt(&mut Wakeups::default());
    assert!(!machine_disk::in_flight_for(0), "the completion freed the request's slot");

    // A write: device-readable data; a flush: none.
    let one = [Segment { addr: Ipa(RAM), len: 512 }];
    assert_eq!(disk.submit(&request(Op::Write, 0, &one), ram), Submit::Pending);
    assert_eq!(disk.submit(&request(Op::Flush, 0, &[]), ram), Submit::Pending);
    let taken = model.take();
    assert_eq!(taken[0].1, (1, PART_START / 512, vec![(chunk_pa[0], 512, false)]));
    assert_eq!(taken[1].1, (4, 0, vec![]));
    for (head, _) in &taken {
        model.complete(*head, 0);
    }
    machine_disk::on_interrupt(&mut Wakeups::default());

    // Outside the partition, unaligned, or a write to a read-only disk: failed at once,
    // nothing reaches the device.
    let notified = model.0.lock().unwrap().notified;
    for (op, offset) in [(Op::Read, PART_BYTES), (Op::Write, PART_BYTES - 256), (Op::Read, 100)] {
        let r = disk.submit(&request(op, offset, &one), ram);
        assert!(matches!(r, Submit::Done(Err(_))), "{op:?} at {offset}: {r:?}");
    }
    let mut ro = machine_disk::open(0, slot, "data", PART_BYTES, true, memory.view()).unwrap();
    assert!(ro.read_only());
    assert!(matches!(ro.submit(&request(Op::Write, 0, &one), ram), Submit::Done(Err(_))));
    assert!(model.take().is_empty());
    assert_eq!(model.0.lock().unwrap().notified, notified);

    // A full queue: the next request waits (Busy) instead of failing.
    let size = usize::from(QUEUE_SLOTS);
    for _ in 0..size {
        assert_eq!(disk.submit(&request(Op::Read, 0, &one), ram), Submit::Pending);
    }
    assert_eq!(disk.submit(&request(Op::Read, 0, &one), ram), Submit::Busy);
    let taken = model.take();
    assert_eq!(taken.len(), size);
    model.complete(taken[0].0, 1); // and a device error is only the request's
    machine_disk::on_interrupt(&mut Wakeups::default());
    assert_eq!(machine_disk::errors(), 1);
    assert_eq!(disk.submit(&request(Op::Read, 0, &one), ram), Submit::Pending);
}
