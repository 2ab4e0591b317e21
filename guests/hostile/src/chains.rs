//! `chains=MS`: requests that name as much work as a virtio chain can, on every virtio device
//! the VM has, while a healthy VM shares the CPU and another sends frames to this one.
//!
//! A chain may hold queue-size buffers of any length below 4 GiB in all. Each chain here is
//! an indirect table of up to 254 buffers of 16 MiB, every one over the same 16 MiB of scratch
//! RAM: to virtio-blk, reads too long for `size_max`, `GET_ID` and an unknown type, all with
//! nearly 4 GiB of writable data (a device that zero-fills what a failed request did not
//! write, as armhv's once did, writes 4 GiB per chain); to virtio-rng, 1 GiB of writable
//! buffers; to virtio-net, 4 GiB to transmit. Its second vCPU posts, on virtio-console's
//! transmit queue, chains of 2 GiB of output: that one never finishes, and the vCPU that
//! notified keeps coming back for it until the VM ends.
//!
//! It first spins for MS/2 ms with both vCPUs (the others' undisturbed pace, with the same
//! competition for the CPU), then attacks for MS ms, then goes on to its next step.
//!
//! Lines: `hostile: chains-baseline <ms>ms starting`, `hostile: chains <ms>ms starting`,
//! `hostile: chains <device> -> absorbed <n> chains` (sweeps: whether the other VMs kept
//! their pace is what the test judges, from their heartbeats).

use baremetal::console::Global;
use baremetal::cpu::{self, dsb_sev};
use baremetal::println;
use baremetal::virtio_mmio::{
    DEVICE_ID_BLOCK, DEVICE_ID_CONSOLE, DEVICE_ID_ENTROPY, DEVICE_ID_NET, Regs, VERSION_1_WORD1,
    reg,
};

use crate::ring::{DmaArea, desc, rd, wr};
use crate::{Vm, irq, report};

const SCRATCH: u64 = 16 << 20;
const VIRTQ_DESC_F_NEXT: u16 = 1;
const VIRTQ_DESC_F_WRITE: u16 = 2;
const VIRTQ_DESC_F_INDIRECT: u16 = 4;
/// Feature word 0: VIRTIO_F_INDIRECT_DESC (bit 28).
const INDIRECT: u32 = 1 << 28;
/// virtio-blk request types: a read, GET_ID, and one no device knows.
const BLK_KINDS: [u32; 3] = [0, 8, 99];

/// One queue's memory: descriptor table (256), available ring, used ring, the indirect
/// table, a request header and status bytes.
const DESC: u64 = 0x0000;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
const TABLE: u64 = 0x3000;
const HEADER: u64 = 0x4000;
const STATUS: u64 = 0x4100;
const QUEUE_AREA: u64 = 0x5000;
const QUEUES: usize = 4;

static AREA: DmaArea<{ QUEUES * QUEUE_AREA as usize / 8 }> = DmaArea::new();
/// Where the scratch RAM starts, for the second vCPU.
static SCRATCH_AT: Global<u64> = Global::new(0);
/// Set by the first vCPU when the attack begins: the second switches from spinning to it.
static ATTACK: Global<bool> = Global::new(false);

/// A queue of a device, set up for this attack.
struct Queue {
    regs: Regs,
    index: u32,
    area: u64,
    size: u16,
    avail_idx: u16,
}

impl Queue {
    /// Resets the device at `base`, negotiates INDIRECT_DESC, and makes queue `index` (the
    /// others stay unused) ready with up to 256 entries at area `slot`.
    fn open(base: u64, index: u32, slot: usize) -> Option<Queue> {
        let regs = Regs(base);
        if !regs.reset(1000) {
            return None;
        }
        regs.acknowledge();
        if regs.device_features(0) & INDIRECT == 0 {
            return None;
        }
        regs.negotiate(INDIRECT, VERSION_1_WORD1).ok()?;
        regs.write(reg::QUEUE_SEL, index);
        let size = regs.read(reg::QUEUE_NUM_MAX).min(256);
        if size == 0 {
            return None;
        }
        let area = AREA.addr() + slot as u64 * QUEUE_AREA;
        for off in (0..QUEUE_AREA).step_by(8) {
            wr::<u64>(area + off, 0);
        }
        regs.setup_queue(index, size, area + DESC, area + AVAIL, area + USED);
        regs.driver_ok();
        Some(Queue { regs, index, area, size: size as u16, avail_idx: 0 })
    }

    /// Fills the indirect table: `buffers` of 16 MiB over the scratch RAM, `writable` or not,
    /// after a 16-byte header if `header`, and a status byte at the end if `status`.
    fn table(&self, scratch: u64, buffers: u64, writable: bool, header: bool, status: bool) -> u32 {
        let table = self.area + TABLE;
        let mut n = 0u64;
        let mut put = |addr: u64, len: u32, flags: u16| {
            desc(table, n, addr, len, flags | VIRTQ_DESC_F_NEXT, n as u16 + 1);
            n += 1;
        };
        if header {
            put(self.area + HEADER, 16, 0);
        }
        let data = if writable { VIRTQ_DESC_F_WRITE } else { 0 };
        for _ in 0..buffers {
            put(scratch, SCRATCH as u32, data);
        }
        if status {
            put(self.area + STATUS, 1, VIRTQ_DESC_F_WRITE);
        }
        // The last one ends the chain.
        let last = table + 16 * (n - 1);
        wr::<u16>(last + 12, rd::<u16>(last + 12) & !VIRTQ_DESC_F_NEXT);
        (16 * n) as u32
    }

    /// Posts a whole ring of chains, each the indirect table, and notifies. Returns once the
    /// device has returned them (never, for the console's).
    fn post_ring(&mut self, table_len: u32) -> u64 {
        let size = u64::from(self.size);
        for i in 0..size {
            desc(self.area + DESC, i, self.area + TABLE, table_len, VIRTQ_DESC_F_INDIRECT, 0);
            let slot = self.avail_idx.wrapping_add(i as u16) % self.size;
            wr::<u16>(self.area + AVAIL + 4 + 2 * u64::from(slot), i as u16);
        }
        self.avail_idx = self.avail_idx.wrapping_add(self.size);
        cpu::dsb();
        wr::<u16>(self.area + AVAIL + 2, self.avail_idx);
        cpu::dsb();
        self.regs.write(reg::QUEUE_NOTIFY, self.index);
        // armhv serves the notification before the store completes; what is left over it
        // serves in this VM's time, so wait (bounded) for the used ring.
        for _ in 0..100_000 {
            if rd::<u16>(self.area + USED + 2) == self.avail_idx {
                break;
            }
            cpu::yield_now();
        }
        size
    }
}

/// The first virtio-mmio slot holding device `id`.
fn find(vm: &Vm, id: u32) -> Option<u64> {
    crate::virtio::find(vm, id)
}

/// The second vCPU: spins until the attack, then floods the console's transmit queue.
pub fn console_task() {
    while !ATTACK.get() {
        cpu::yield_now();
    }
    let Some(base) = CONSOLE.get().checked_sub(1) else { return };
    let Some(mut q) = Queue::open(base, 1, 3) else { return };
    // Console buffers are device-readable: 2 GiB of output per chain.
    let len = q.table(SCRATCH_AT.get(), u64::from(q.size), false, false, false);
    loop {
        q.post_ring(len);
    }
}

/// The console's slot + 1 (0: none), for the second vCPU.
static CONSOLE: Global<u64> = Global::new(0);

pub fn run(vm: &Vm, ms: u64) {
    let scratch = (crate::image_end() + (2 << 20) - 1) & !((2 << 20) - 1);
    let dt_start = vm.dt_addr & !0xfff;
    let below_dt = dt_start < scratch || dt_start >= scratch + SCRATCH;
    if scratch + SCRATCH > vm.ram_end || !below_dt {
        println!("hostile: chains needs 16 MiB of free RAM after its image");
        return;
    }
    SCRATCH_AT.set(scratch);
    CONSOLE.set(find(vm, DEVICE_ID_CONSOLE).map_or(0, |b| b + 1));
    let second = (vm.ncpus > 1).then(|| irq::start(1, vm.cpus[1], irq::TASK_CHAINS));
    if second != Some(0) {
        println!("hostile: chains needs a second vCPU");
        return;
    }
    println!("hostile: chains-baseline {}ms starting", ms / 2);
    crate::spin_ms(ms / 2);
    println!("hostile: chains {ms}ms starting");
    ATTACK.set(true);
    dsb_sev();
    let deadline = baremetal::time::counter() + baremetal::time::ms_to_ticks(ms);
    let mut devices = [
        (DEVICE_ID_BLOCK, 0u32, "virtio-blk", None, 0u64),
        (DEVICE_ID_ENTROPY, 0, "virtio-rng", None, 0),
        (DEVICE_ID_NET, 1, "virtio-net", None, 0),
    ];
    for (slot, (id, queue, _, q, _)) in devices.iter_mut().enumerate() {
        *q = find(vm, *id).and_then(|base| Queue::open(base, *queue, slot));
    }
    let mut round = 0usize;
    while !baremetal::time::passed(deadline) {
        for (id, _, _, q, posted) in devices.iter_mut() {
            let Some(q) = q else { continue };
            let len = match *id {
                DEVICE_ID_BLOCK => {
                    let kind = BLK_KINDS[round % BLK_KINDS.len()];
                    wr::<u32>(q.area + HEADER, kind);
                    wr::<u64>(q.area + HEADER + 8, 0);
                    q.table(scratch, u64::from(q.size) - 3, true, true, true)
                }
                DEVICE_ID_ENTROPY => q.table(scratch, u64::from(q.size), true, false, false),
                // A virtio-net header and then 4 GiB, all device-readable.
                _ => q.table(scratch, u64::from(q.size) - 2, false, true, false),
            };
            *posted += q.post_ring(len);
        }
        round += 1;
    }
    for (_, _, name, q, posted) in devices {
        if q.is_some() {
            report::sweep("chains", name, format_args!("absorbed {posted} chains"));
        }
    }
    if CONSOLE.get() != 0 {
        report::sweep("chains", "virtio-console", "absorbed its transmit queue");
    }
}
