//! `virtio`: a virtio-mmio (version 2) driver that posts hostile descriptor
//! chains to the VM's virtio-blk and virtio-rng devices: buffers outside RAM
//! or at other VMs' and armhv's physical addresses, loops, chains longer than
//! the queue, lengths that wrap, bad indirect tables, broken rings. Each must
//! end with the device in DEVICE_NEEDS_RESET (or, for a well-formed request
//! the disk cannot serve, an error status); the driver then resets it and goes
//! on. A valid request before and after shows the device still works.
//!
//! Lines: `hostile: virtio-<blk|rng> <attack> -> needs-reset|error <status>|ok`.
//!
//! Also the block I/O that `reset-storm` keeps its count in.
//!
//! With the MMU off every access here is Device-nGnRnE, so the device (which
//! works on our RAM directly) sees each write in order.

use baremetal::console::Global;
use baremetal::{cpu, time};

use crate::Vm;
use crate::report::{self, Outcome};

use crate::ring::{DmaArea, desc, rd, wr};
use baremetal::virtio_mmio::reg::*;
use baremetal::virtio_mmio::{ACKNOWLEDGE, DRIVER, FEATURES_OK, Regs, VERSION_1_WORD1};

pub use baremetal::virtio_mmio::DEVICE_ID_BLOCK as ID_BLOCK;
pub use baremetal::virtio_mmio::DEVICE_ID_ENTROPY as ID_ENTROPY;
pub use baremetal::virtio_mmio::DEVICE_NEEDS_RESET as NEEDS_RESET;

/// Feature word 0, bit 28: VIRTIO_F_INDIRECT_DESC.
const INDIRECT_LO: u32 = 1 << 28;

const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const F_INDIRECT: u16 = 4;

const BLK_T_IN: u32 = 0;
const BLK_T_OUT: u32 = 1;

/// The queue area: descriptor table (up to 256 entries), available ring,
/// used ring, an indirect table (256 entries) and request buffers.
const DESC: u64 = 0x0000;
const AVAIL: u64 = 0x1000;
const USED: u64 = 0x2000;
const INDIRECT: u64 = 0x3000;
const HEADER: u64 = 0x4000;
const DATA: u64 = 0x4200;
const STATUS_BYTE: u64 = 0x4800;
const AREA: usize = 0x5000;

static AREA_MEM: DmaArea<{ AREA / 8 }> = DmaArea::new();

fn area() -> u64 {
    AREA_MEM.addr()
}

fn reg_read(base: u64, off: u64) -> u32 {
    Regs(base).read(off)
}

/// Any register, any value: attacks write what a driver never would.
fn reg_write(base: u64, off: u64, v: u32) {
    Regs(base).write(off, v)
}

/// The virtio-mmio slots of the device tree with this device ID.
pub fn find(vm: &Vm, id: u32) -> Option<u64> {
    vm.fdt
        .all_nodes()
        .filter(|n| n.compatible().is_some_and(|c| c.all().any(|s| s == "virtio,mmio")))
        .filter_map(|n| n.reg()?.next().map(|r| r.starting_address as u64))
        .find(|&base| Regs(base).probe() == Some(id))
}

/// One device slot driven through queue 0.
pub struct Dev {
    pub base: u64,
    pub qsize: u16,
    next: u16,
}

/// Ring addresses for `setup`: (descriptor table, available ring, used ring).
type Rings = (u64, u64, u64);

fn default_rings() -> Rings {
    (area() + DESC, area() + AVAIL, area() + USED)
}

impl Dev {
    pub fn status(&self) -> u32 {
        Regs(self.base).status()
    }

    pub fn reset(&self) -> bool {
        Regs(self.base).reset(1000)
    }

    /// Reset, negotiation (VERSION_1, INDIRECT_DESC if offered), queue 0 of
    /// `qsize` entries at `rings`, DRIVER_OK. Err: the status it got stuck at.
    fn setup(base: u64, qsize: u32, rings: Rings) -> Result<Dev, u32> {
        let dev = Dev { base, qsize: qsize as u16, next: 0 };
        if reg_read(base, VERSION) != 2 || !dev.reset() {
            return Err(dev.status());
        }
        let regs = Regs(base);
        regs.acknowledge();
        let lo = regs.device_features(0) & INDIRECT_LO;
        regs.negotiate(lo, VERSION_1_WORD1)?;
        // Clean rings: the device's cursors start at 0.
        for off in (0..AREA as u64).step_by(8) {
            wr::<u64>(area() + off, 0);
        }
        regs.start_queue0(qsize, rings.0, rings.1, rings.2);
        Ok(dev)
    }

    pub fn open(base: u64, qsize: u32) -> Result<Dev, u32> {
        Dev::setup(base, qsize, default_rings())
    }

    pub fn queue_max(base: u64) -> u32 {
        reg_write(base, QUEUE_SEL, 0);
        reg_read(base, QUEUE_NUM_MAX)
    }

    /// Makes chain `head` available (avail ring entry, then the index) and
    /// notifies queue 0. armhv serves the queue in the notify trap; a disk on the machine disk
    /// completes the request later, by the physical disk's interrupt, so this waits (bounded)
    /// for the used ring or the device's refusal.
    fn post(&mut self, head: u16) {
        let slot = u64::from(self.next % self.qsize);
        wr::<u16>(area() + AVAIL + 4 + 2 * slot, head);
        cpu::dsb();
        self.next = self.next.wrapping_add(1);
        wr::<u16>(area() + AVAIL + 2, self.next);
        cpu::dsb();
        reg_write(self.base, QUEUE_NOTIFY, 0);
        let deadline = time::counter() + time::ms_to_ticks(COMPLETION_MS);
        while !self.all_used() && self.status() & NEEDS_RESET == 0 && !time::passed(deadline) {
            core::hint::spin_loop();
        }
        // Acknowledge whatever it raised, so the line does not stay up.
        Regs(self.base).acknowledge_interrupt();
    }

    /// Whether every posted chain came back in the used ring.
    fn all_used(&self) -> bool {
        rd::<u16>(area() + USED + 2) == self.next
    }
}

fn blk_header(kind: u32, sector: u64) {
    wr::<u32>(area() + HEADER, kind);
    wr::<u32>(area() + HEADER + 4, 0);
    wr::<u64>(area() + HEADER + 8, sector);
}

/// A well-formed block request in descriptors 0..2: header, `len` bytes of
/// data at `data` (device-writable for a read), status byte.
fn blk_request(kind: u32, sector: u64, data: u64, len: u32) {
    let t = area() + DESC;
    blk_header(kind, sector);
    wr::<u8>(area() + STATUS_BYTE, 0xff);
    desc(t, 0, area() + HEADER, 16, F_NEXT, 1);
    let write = if kind == BLK_T_IN { F_WRITE } else { 0 };
    desc(t, 1, data, len, F_NEXT | write, 2);
    desc(t, 2, area() + STATUS_BYTE, 1, F_WRITE, 0);
}

/// What a device did with an attack.
fn verdict(dev: &Dev) -> Outcome {
    if dev.status() & NEEDS_RESET != 0 {
        Outcome::NeedsReset
    } else if dev.all_used() {
        match rd::<u8>(area() + STATUS_BYTE) {
            0 => Outcome::Ok,
            s => Outcome::Error(i64::from(s)),
        }
    } else {
        Outcome::Ok
    }
}

/// Expected result of an attack.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    NeedsReset,
    /// The request completes with a non-zero virtio-blk status.
    BlkError,
    /// Nothing happens (the device ignores it) or it completes normally.
    Fine,
}

fn judge(o: Outcome, want: Want) -> bool {
    match want {
        Want::NeedsReset => o == Outcome::NeedsReset,
        Want::BlkError => matches!(o, Outcome::Error(e) if e > 0),
        Want::Fine => matches!(o, Outcome::Ok),
    }
}

/// Sets up the device (with `rings` and `qsize`), lets `attack` write the
/// descriptors and return the head to post (None: nothing to post), posts,
/// reports and resets.
fn run(
    kind: &str,
    base: u64,
    name: &str,
    qsize: u32,
    rings: Rings,
    want: Want,
    attack: impl FnOnce(&Dev) -> Option<u16>,
) {
    let o = match Dev::setup(base, qsize, rings) {
        Ok(mut dev) => {
            if dev.status() & NEEDS_RESET == 0
                && let Some(head) = attack(&dev)
            {
                dev.post(head);
            }
            let o = verdict(&dev);
            if !dev.reset() {
                report::attempt(kind, format_args!("{name}-reset"), "stuck", false);
            }
            o
        }
        Err(status) if status & NEEDS_RESET != 0 => Outcome::NeedsReset,
        Err(status) => {
            report::attempt(kind, name, format_args!("setup failed, status {status:#x}"), false);
            return;
        }
    };
    report::attempt(kind, name, o, judge(o, want));
}

const SMALL: u32 = 8;
/// Longest a request may take to complete: a disk on the machine disk completes by interrupt.
const COMPLETION_MS: u64 = 500;

pub fn step(vm: &Vm) {
    match find(vm, ID_BLOCK) {
        Some(base) => blk_attacks(vm, base),
        None => println_skip("virtio-blk"),
    }
    match find(vm, ID_ENTROPY) {
        Some(base) => rng_attacks(vm, base),
        None => println_skip("virtio-rng"),
    }
    crate::vnet::step(vm);
}

fn println_skip(what: &str) {
    baremetal::println!("hostile: virtio {what} absent, skipped");
}

fn blk_attacks(vm: &Vm, base: u64) {
    let k = "virtio-blk";
    let t = area() + DESC;
    let r = default_rings();
    let data = area() + DATA;
    let end = vm.ram_end;
    let valid = |_: &Dev| {
        blk_request(BLK_T_IN, 0, data, 512);
        Some(0)
    };
    run(k, base, "valid-read", SMALL, r, Want::Fine, valid);

    // Buffers the device must not touch.
    for (name, addr, len) in [
        ("buf-past-ram", end, 512),
        ("buf-straddles-ram-end", end - 256, 512),
        ("buf-other-vm-pa", 0x8000_0000, 512),
        ("buf-hyp-heap-pa", (end + 0x0400_0000) & !0xfff, 512),
        ("buf-device", 0x0900_0000, 512),
        ("buf-gicd", 0x0800_0000, 512),
        ("buf-addr-wraps", u64::MAX - 255, 512),
        ("buf-ipa-top", (1u64 << vm.ipa_bits) - 256, 512),
        ("buf-len-max", vm.ram_start, u32::MAX),
    ] {
        run(k, base, name, SMALL, r, Want::NeedsReset, |_| {
            blk_request(BLK_T_IN, 0, addr, len);
            Some(0)
        });
        // The same address as the source of a disk write.
        run(k, base, &name_w(name), SMALL, r, Want::NeedsReset, |_| {
            blk_request(BLK_T_OUT, 0, addr, len);
            Some(0)
        });
    }
    run(k, base, "desc-loop", SMALL, r, Want::NeedsReset, |_| {
        blk_request(BLK_T_IN, 0, data, 512);
        desc(t, 2, area() + STATUS_BYTE, 1, F_WRITE | F_NEXT, 1);
        Some(0)
    });
    run(k, base, "desc-self-loop", SMALL, r, Want::NeedsReset, |_| {
        desc(t, 0, area() + HEADER, 16, F_NEXT, 0);
        Some(0)
    });
    run(k, base, "next-out-of-range", SMALL, r, Want::NeedsReset, |_| {
        blk_request(BLK_T_IN, 0, data, 512);
        desc(t, 1, data, 512, F_NEXT | F_WRITE, 0xffff);
        Some(0)
    });
    run(k, base, "head-out-of-range", SMALL, r, Want::NeedsReset, |_| {
        blk_request(BLK_T_IN, 0, data, 512);
        Some(0xffff)
    });
    run(k, base, "avail-idx-jump", SMALL, r, Want::NeedsReset, |dev| {
        blk_request(BLK_T_IN, 0, data, 512);
        wr::<u16>(area() + AVAIL + 4, 0);
        wr::<u16>(area() + AVAIL + 2, 1000);
        reg_write(dev.base, QUEUE_NOTIFY, 0);
        None
    });
    run(k, base, "readable-after-writable", SMALL, r, Want::NeedsReset, |_| {
        blk_request(BLK_T_IN, 0, data, 512);
        desc(t, 1, data, 512, F_NEXT | F_WRITE, 3);
        desc(t, 3, data, 16, F_NEXT, 2);
        Some(0)
    });
    run(k, base, "no-status-byte", SMALL, r, Want::NeedsReset, |_| {
        blk_header(BLK_T_OUT, 0);
        desc(t, 0, area() + HEADER, 16, 0, 0);
        Some(0)
    });
    // A chain of 9 buffers in an 8-entry queue, through an indirect table.
    run(k, base, "chain-longer-than-queue", SMALL, r, Want::NeedsReset, |_| {
        let it = area() + INDIRECT;
        blk_header(BLK_T_IN, 0);
        desc(it, 0, area() + HEADER, 16, F_NEXT, 1);
        for i in 1..9 {
            desc(it, i, data + 8 * i, 8, F_NEXT | F_WRITE, (i + 1) as u16);
        }
        desc(it, 9, area() + STATUS_BYTE, 1, F_WRITE, 0);
        desc(t, 0, it, 16 * 10, F_INDIRECT, 0);
        Some(0)
    });
    // Up to 255 buffers of 24 MiB in a 256-entry queue: their lengths add up
    // past 4 GiB (a u32 wraps) after 171 of them.
    if u64::from(Dev::queue_max(base)) >= 256 && vm.ram_end - vm.ram_start >= 32 << 20 {
        run(k, base, "chain-bytes-wrap-u32", 256, r, Want::NeedsReset, |_| {
            let it = area() + INDIRECT;
            blk_header(BLK_T_IN, 0);
            desc(it, 0, area() + HEADER, 16, F_NEXT, 1);
            for i in 1..256 {
                desc(it, i, vm.ram_start, 24 << 20, F_NEXT | F_WRITE, (i + 1) as u16);
            }
            desc(t, 0, it, 16 * 256, F_INDIRECT, 0);
            Some(0)
        });
    }
    for (name, addr, len, flags) in [
        ("indirect-past-ram", end, 64, F_INDIRECT),
        ("indirect-other-vm-pa", 0x8000_0000, 64, F_INDIRECT),
        ("indirect-len-odd", area() + INDIRECT, 17, F_INDIRECT),
        ("indirect-len-zero", area() + INDIRECT, 0, F_INDIRECT),
        ("indirect-with-next", area() + INDIRECT, 48, F_INDIRECT | F_NEXT),
        ("indirect-len-wraps", u64::MAX - 15, 32, F_INDIRECT),
    ] {
        run(k, base, name, SMALL, r, Want::NeedsReset, |_| {
            let it = area() + INDIRECT;
            blk_header(BLK_T_IN, 0);
            desc(it, 0, area() + HEADER, 16, F_NEXT, 1);
            desc(it, 1, data, 512, F_NEXT | F_WRITE, 2);
            desc(it, 2, area() + STATUS_BYTE, 1, F_WRITE, 0);
            desc(t, 0, addr, len, flags, 1);
            Some(0)
        });
    }
    run(k, base, "indirect-nested", SMALL, r, Want::NeedsReset, |_| {
        let it = area() + INDIRECT;
        desc(it, 0, it + 256, 48, F_INDIRECT, 0);
        desc(t, 0, it, 16, F_INDIRECT, 0);
        Some(0)
    });
    run(k, base, "indirect-loop", SMALL, r, Want::NeedsReset, |_| {
        let it = area() + INDIRECT;
        desc(it, 0, area() + HEADER, 16, F_NEXT, 1);
        desc(it, 1, data, 512, F_NEXT | F_WRITE, 0);
        desc(t, 0, it, 32, F_INDIRECT, 0);
        Some(0)
    });

    // Rings in the wrong places.
    let ring_attacks: [(&str, Rings); 8] = [
        ("desc-table-past-ram", (end, r.1, r.2)),
        ("desc-table-at-uart", (0x0900_0000, r.1, r.2)),
        ("desc-table-other-vm-pa", (0x8000_0000, r.1, r.2)),
        ("desc-table-wraps", (!0xf, r.1, r.2)),
        ("desc-table-misaligned", (r.0 + 8, r.1, r.2)),
        ("avail-ring-past-ram", (r.0, end - 2, r.2)),
        ("used-ring-past-ram", (r.0, r.1, end)),
        ("used-ring-at-gicd", (r.0, r.1, 0x0800_0000)),
    ];
    for (name, rings) in ring_attacks {
        run(k, base, name, SMALL, rings, Want::NeedsReset, |_| {
            blk_request(BLK_T_IN, 0, data, 512);
            Some(0)
        });
    }
    for (name, size) in
        [("queue-size-3", 3), ("queue-size-over-max", 0x1_0000), ("queue-size-0", 0)]
    {
        run(k, base, name, size, r, Want::NeedsReset, |_| {
            blk_request(BLK_T_IN, 0, data, 512);
            Some(0)
        });
    }

    // Well-formed requests the disk cannot serve: an error status, no reset.
    let capacity =
        u64::from(reg_read(base, CONFIG)) | (u64::from(reg_read(base, CONFIG + 4)) << 32);
    for (name, kind, sector) in [
        ("sector-past-end", BLK_T_IN, capacity),
        ("sector-max", BLK_T_IN, u64::MAX),
        ("sector-wraps-bytes", BLK_T_OUT, u64::MAX / 512 + 1),
        ("type-unknown", 0xdead, 0),
    ] {
        run(k, base, name, SMALL, r, Want::BlkError, |_| {
            blk_request(kind, sector, data, 512);
            Some(0)
        });
    }
    // Registers: DEVICE_NEEDS_RESET is the device's to set; features it does
    // not offer are refused; a notification of a queue that does not exist.
    let o = match Dev::open(base, SMALL) {
        Ok(dev) => {
            reg_write(base, STATUS, 0x7f);
            reg_write(base, QUEUE_NOTIFY, 0xffff);
            let s = dev.status();
            dev.reset();
            Outcome::Value(u64::from(s))
        }
        Err(s) => Outcome::Value(u64::from(s)),
    };
    report::attempt(k, "status-sets-needs-reset", o, matches!(o, Outcome::Value(s) if s & 64 == 0));
    let o = {
        let dev = Dev { base, qsize: 0, next: 0 };
        dev.reset();
        reg_write(base, STATUS, ACKNOWLEDGE | DRIVER);
        for sel in 0..4 {
            reg_write(base, DRIVER_FEATURES_SEL, sel);
            reg_write(base, DRIVER_FEATURES, u32::MAX);
        }
        reg_write(base, STATUS, ACKNOWLEDGE | DRIVER | FEATURES_OK);
        let s = dev.status();
        dev.reset();
        Outcome::Value(u64::from(s))
    };
    report::attempt(k, "features-not-offered", o, matches!(o, Outcome::Value(s) if s & 8 == 0));

    run(k, base, "valid-read-after", SMALL, r, Want::Fine, valid);
}

fn name_w(name: &str) -> crate::Line {
    use core::fmt::Write;
    let mut l = crate::Line::new();
    let _ = write!(l, "{name}-w");
    l
}

/// Where the flipping vCPU writes, and when it stops.
static FLIP: [Global<u64>; 3] = [const { Global::new(0) }; 3];

/// A second vCPU's task for `toctou`: rewrites descriptor 0's address between
/// FLIP[0] (valid) and FLIP[1] (outside RAM) as fast as it can, until FLIP[2].
pub fn flip_loop() {
    let d = area() + DESC;
    while FLIP[2].get() == 0 {
        wr::<u64>(d, FLIP[0].get());
        wr::<u64>(d, FLIP[1].get());
    }
    wr::<u64>(d, FLIP[0].get());
}

/// Time of check against time of use: one vCPU posts the same request again and again
/// while another flips its buffer address between ours and one outside RAM. The device
/// copies each descriptor once before it checks it: every request must either complete
/// into our buffer or put the device in DEVICE_NEEDS_RESET, never reach the other address.
fn toctou(vm: &Vm, base: u64, kind: &str, rounds: u64) {
    let Some((slot, mpidr)) = crate::irq::others(vm).next() else {
        baremetal::println!("hostile: {kind} toctou needs 2 vCPUs");
        return;
    };
    let data = area() + DATA;
    let Ok(mut dev) = Dev::open(base, SMALL) else { return };
    FLIP[0].set(data);
    FLIP[1].set(vm.ram_end - 32);
    FLIP[2].set(0);
    desc(area() + DESC, 0, data, 64, F_WRITE, 0);
    if crate::irq::start(slot, mpidr, crate::irq::TASK_FLIP) != 0 {
        return;
    }
    let (mut ok, mut resets) = (0u64, 0u64);
    for _ in 0..rounds {
        dev.post(0);
        if dev.status() & NEEDS_RESET != 0 {
            resets += 1;
            match Dev::open(base, SMALL) {
                Ok(d) => {
                    dev = d;
                    desc(area() + DESC, 0, data, 64, F_WRITE, 0);
                }
                Err(_) => break,
            }
        } else if dev.all_used() {
            ok += 1;
        }
    }
    FLIP[2].set(1);
    cpu::dsb_sev();
    let _ = baremetal::psci::wait_off(mpidr, 1000);
    dev.reset();
    report::attempt(
        kind,
        "toctou-buffer-address",
        format_args!("absorbed {rounds} requests: {ok} completed, {resets} needs-reset"),
        ok + resets == rounds,
    );
}

fn rng_attacks(vm: &Vm, base: u64) {
    let k = "virtio-rng";
    let t = area() + DESC;
    let r = default_rings();
    let data = area() + DATA;
    let end = vm.ram_end;
    let fine = |_: &Dev| {
        desc(t, 0, data, 64, F_WRITE, 0);
        Some(0)
    };
    run(k, base, "valid", SMALL, r, Want::Fine, fine);
    for (name, addr, len, flags, next) in [
        ("buf-past-ram", end, 64, F_WRITE, 0),
        ("buf-other-vm-pa", 0x8000_0000, 64, F_WRITE, 0),
        ("buf-len-max", vm.ram_start, u32::MAX, F_WRITE, 0),
        ("buf-addr-wraps", u64::MAX - 31, 64, F_WRITE, 0),
        ("desc-self-loop", data, 64, F_WRITE | F_NEXT, 0),
        ("next-out-of-range", data, 64, F_WRITE | F_NEXT, 0x8000),
        ("indirect-past-ram", end, 64, F_INDIRECT, 0),
    ] {
        run(k, base, name, SMALL, r, Want::NeedsReset, |_| {
            desc(t, 0, addr, len, flags, next);
            Some(0)
        });
    }
    // A device-readable buffer: the entropy device only writes; it must
    // ignore it (or refuse the chain), never write into it.
    let mut o = Outcome::Ok;
    run(k, base, "readable-buffer", SMALL, r, Want::Fine, |_| {
        for i in 0..8 {
            wr::<u64>(data + 8 * i, 0x5245_4144_4f4e_4c59);
        }
        desc(t, 0, data, 64, 0, 0);
        Some(0)
    });
    for i in 0..8 {
        if rd::<u64>(data + 8 * i) != 0x5245_4144_4f4e_4c59 {
            o = Outcome::Value(rd::<u64>(data + 8 * i));
        }
    }
    report::attempt(k, "readable-buffer-untouched", o, o == Outcome::Ok);
    run(k, base, "valid-after", SMALL, r, Want::Fine, fine);
    toctou(vm, base, k, 2000);
}

/// Plain block I/O: `reset-storm`'s persistent counter in sector 0, `soak`'s data.
pub struct Disk {
    dev: Dev,
}

impl Disk {
    pub fn open(base: u64) -> Option<Disk> {
        Dev::open(base, SMALL).ok().map(|dev| Disk { dev })
    }

    fn io(&mut self, kind: u32, sector: u64) -> bool {
        blk_request(kind, sector, area() + DATA, 512);
        self.dev.post(0);
        self.dev.all_used() && rd::<u8>(area() + STATUS_BYTE) == 0
    }

    /// Reads sector 0 as 8 words.
    pub fn read0(&mut self) -> Option<[u64; 8]> {
        let mut s = [0u64; 64];
        if !self.read_sector(0, &mut s) {
            return None;
        }
        let mut w = [0; 8];
        w.copy_from_slice(&s[..8]);
        Some(w)
    }

    /// Writes sector 0: `w`, then zeros.
    pub fn write0(&mut self, w: &[u64; 8]) -> bool {
        let mut s = [0u64; 64];
        s[..8].copy_from_slice(w);
        self.write_sector(0, &s)
    }

    /// Reads sector `sector` as 64 words.
    pub fn read_sector(&mut self, sector: u64, buf: &mut [u64; 64]) -> bool {
        if !self.io(BLK_T_IN, sector) {
            return false;
        }
        for (i, v) in buf.iter_mut().enumerate() {
            *v = rd::<u64>(area() + DATA + 8 * i as u64);
        }
        true
    }

    pub fn write_sector(&mut self, sector: u64, buf: &[u64; 64]) -> bool {
        for (i, &v) in buf.iter().enumerate() {
            wr::<u64>(area() + DATA + 8 * i as u64, v);
        }
        self.io(BLK_T_OUT, sector)
    }
}
