//! `console-rx`: hostile receive buffers for virtio-console while console input arrives (the
//! test types on the console, focused on this VM, and the VM's command line names `hvc0` as
//! its console, so armhv delivers the input through the device's receive queue).
//!
//! Receive chains that are read-only (the device must write), point outside RAM or at
//! armhv's and other VMs' addresses, loop, are longer than the queue, have zero or wrapping
//! lengths, sit behind bad indirect tables or broken rings, and ring fields rewritten by the
//! second vCPU while input is delivered. Each attempt waits until input has come (the device
//! used a chain or entered DEVICE_NEEDS_RESET) and must get a defined result: a chain outside
//! RAM, looping or too long puts the device in DEVICE_NEEDS_RESET; a chain the device cannot
//! write into comes back used with no byte written; a valid one receives typed bytes, and
//! nothing else. A canary at the end of our RAM shows no input landed past it.
//!
//! Lines: `hostile: virtio-console rx waiting for input` (the test starts typing),
//! `hostile: virtio-console rx-<attack> -> needs-reset|ok|value <status>`,
//! `hostile: virtio-console rx-toctou-<field> -> absorbed <n> deliveries: <c> completed, <r>
//! needs-reset`.

use baremetal::console::Global;
use baremetal::virtio_mmio::reg::{QUEUE_NOTIFY, QUEUE_NUM_MAX, QUEUE_SEL};
use baremetal::virtio_mmio::{DEVICE_ID_CONSOLE, DEVICE_NEEDS_RESET, Regs, VERSION_1_WORD1};
use baremetal::{cpu, time};

use crate::Vm;
use crate::report::{self, Outcome};
use crate::ring::{DmaArea, desc, rd, wr};

/// What the test types, over and over: every byte the device delivers must be one of these.
const TYPED: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz-";

/// `VIRTIO_F_INDIRECT_DESC` (feature word 0).
const F_INDIRECT_FEATURE: u32 = 1 << 28;
const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const F_INDIRECT: u16 = 4;

/// Receive queue size for most attempts (the device's maximum is 128).
const QSIZE: u32 = 16;
const BUF_LEN: u32 = 64;

// The area: the receive queue's rings (up to 128 entries), an indirect table (256 entries),
// receive buffers, a probe buffer the device may only read.
const DESC: u64 = 0x0000;
const AVAIL: u64 = 0x0800;
const USED: u64 = 0x1000;
const INDIRECT: u64 = 0x2000;
const BUF: u64 = 0x3000;
const PROBE: u64 = 0x4000;
const AREA: usize = 0x5000;

static AREA_MEM: DmaArea<{ AREA / 8 }> = DmaArea::new();

fn area() -> u64 {
    AREA_MEM.addr()
}

/// Ring addresses: (descriptor table, available ring, used ring).
type Rings = (u64, u64, u64);

fn rings() -> Rings {
    (area() + DESC, area() + AVAIL, area() + USED)
}

/// Resets the device and brings it up with receive queue 0 of `qsize` entries at `rings`
/// (the transmit queue stays unconfigured). Err: the status it stopped at.
fn open(base: u64, qsize: u32, r: Rings) -> Result<(), u32> {
    let regs = Regs(base);
    if !regs.reset(1000) {
        return Err(regs.status());
    }
    regs.acknowledge();
    regs.negotiate(regs.device_features(0) & F_INDIRECT_FEATURE, VERSION_1_WORD1)?;
    for off in (0..BUF).step_by(8) {
        wr::<u64>(area() + off, 0);
    }
    regs.start_queue0(qsize, r.0, r.1, r.2);
    Ok(())
}

fn needs_reset(base: u64) -> bool {
    Regs(base).status() & DEVICE_NEEDS_RESET != 0
}

/// Makes `heads` available (entries 0.., then the index) and notifies the receive queue.
fn post(base: u64, heads: &[u16]) {
    for (i, &h) in heads.iter().enumerate() {
        wr::<u16>(area() + AVAIL + 4 + 2 * i as u64, h);
    }
    cpu::dsb();
    wr::<u16>(area() + AVAIL + 2, heads.len() as u16);
    cpu::dsb();
    Regs(base).write(QUEUE_NOTIFY, 0);
    Regs(base).acknowledge_interrupt();
}

fn used_idx() -> u16 {
    rd::<u16>(area() + USED + 2)
}

/// The `i`-th used element: (id, len).
fn used(i: u16) -> (u32, u32) {
    let e = area() + USED + 4 + 8 * u64::from(i);
    (rd::<u32>(e), rd::<u32>(e + 4))
}

/// Waits until input came: the device used a chain or entered DEVICE_NEEDS_RESET. False after
/// `ms` without either.
fn wait_input(base: u64, ms: u64) -> bool {
    let deadline = time::counter() + time::ms_to_ticks(ms);
    while used_idx() == 0 && !needs_reset(base) {
        if time::passed(deadline) {
            return false;
        }
        cpu::yield_now();
    }
    true
}

/// Whether `[addr, addr + len)` holds only typed bytes.
fn typed(addr: u64, len: u32) -> bool {
    (0..u64::from(len)).all(|i| TYPED.contains(&rd::<u8>(addr + i)))
}

/// What an attempt must get.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    NeedsReset,
    /// Used, with nothing written: 0 bytes, the probe buffer untouched.
    Ignored,
    /// Used, with typed bytes in the buffer at this address, of this length.
    Delivered(u64, u32),
}

/// The probe: a device-readable buffer of a known pattern.
fn fill_probe() {
    for i in 0..u64::from(BUF_LEN) {
        wr::<u8>(area() + PROBE + i, 0x5a);
    }
}

fn probe_untouched() -> bool {
    (0..u64::from(BUF_LEN)).all(|i| rd::<u8>(area() + PROBE + i) == 0x5a)
}

/// One attempt: the device set up with `qsize` entries at `r`, `attack` writes the chain and
/// returns its head to post (None: it made the ring hostile itself); judged once input has come.
fn rx(
    base: u64,
    name: &str,
    qsize: u32,
    r: Rings,
    want: Want,
    attack: impl FnOnce() -> Option<u16>,
) {
    let k = "virtio-console";
    if let Err(status) = open(base, qsize, r) {
        let o = Outcome::Value(u64::from(status));
        report::attempt(k, format_args!("rx-{name}"), o, status & DEVICE_NEEDS_RESET != 0);
        return;
    }
    fill_probe();
    if let Some(head) = attack() {
        post(base, &[head]);
    }
    let came = wait_input(base, 5000);
    let o = if needs_reset(base) {
        Outcome::NeedsReset
    } else if came {
        Outcome::Ok
    } else {
        Outcome::Value(u64::from(Regs(base).status()))
    };
    let (_, len) = used(0);
    let confined = match want {
        Want::NeedsReset => o == Outcome::NeedsReset,
        Want::Ignored => o == Outcome::Ok && len == 0 && probe_untouched(),
        Want::Delivered(at, max) => o == Outcome::Ok && len > 0 && len <= max && typed(at, len),
    };
    report::attempt(k, format_args!("rx-{name}"), o, confined);
    Regs(base).reset(1000);
}

pub fn step(vm: &Vm) {
    let Some(base) = crate::virtio::find(vm, DEVICE_ID_CONSOLE) else {
        baremetal::println!("hostile: console-rx needs a virtio-console");
        return;
    };
    let t = area() + DESC;
    let it = area() + INDIRECT;
    let buf = area() + BUF;
    let probe = area() + PROBE;
    let end = vm.ram_end;
    let r = rings();
    let valid = || {
        desc(t, 0, buf, BUF_LEN, F_WRITE, 0);
        Some(0)
    };
    // The first valid attempt waits as long as the test takes to start typing.
    baremetal::println!("hostile: virtio-console rx waiting for input");
    if open(base, QSIZE, r).is_ok() {
        desc(t, 0, buf, BUF_LEN, F_WRITE, 0);
        post(base, &[0]);
        wait_input(base, 60_000);
    }
    rx(base, "valid", QSIZE, r, Want::Delivered(buf, BUF_LEN), valid);
    // Valid buffers across a 2 MiB boundary of our RAM (armhv's host memory behind it is not
    // contiguous there), and one of 32 MiB: in our free RAM, past our image.
    let boundary = vm.ram_start + (16 << 20) - 8;
    rx(base, "buf-straddles-2mib", QSIZE, r, Want::Delivered(boundary, BUF_LEN), || {
        desc(t, 0, boundary, BUF_LEN, F_WRITE, 0);
        Some(0)
    });
    let scratch = vm.ram_start + (16 << 20);
    if vm.in_ram(scratch, 32 << 20) && scratch + (32 << 20) <= vm.dt_addr {
        rx(base, "buf-32mib", QSIZE, r, Want::Delivered(scratch, 32 << 20), || {
            desc(t, 0, scratch, 32 << 20, F_WRITE, 0);
            Some(0)
        });
    }

    // Buffers the device must not write into.
    for (name, addr, len) in [
        ("buf-past-ram", end, BUF_LEN),
        ("buf-straddles-ram-end", end - 16, BUF_LEN),
        ("buf-other-vm-pa", 0x8000_0000, BUF_LEN),
        ("buf-hyp-heap-pa", (end + 0x0400_0000) & !0xfff, BUF_LEN),
        ("buf-uart", 0x0900_0000, BUF_LEN),
        ("buf-gicd", 0x0800_0000, BUF_LEN),
        ("buf-addr-wraps", u64::MAX - 15, BUF_LEN),
        ("buf-ipa-top", (1u64 << vm.ipa_bits) - 16, BUF_LEN),
        ("buf-len-max", vm.ram_start, u32::MAX),
    ] {
        rx(base, name, QSIZE, r, Want::NeedsReset, || {
            desc(t, 0, addr, len, F_WRITE, 0);
            Some(0)
        });
    }
    // Read-only buffers: nothing may be written into them.
    rx(base, "readable-buffer", QSIZE, r, Want::Ignored, || {
        desc(t, 0, probe, BUF_LEN, 0, 0);
        Some(0)
    });
    rx(base, "readable-chain", QSIZE, r, Want::Ignored, || {
        desc(t, 0, probe, 16, F_NEXT, 1);
        desc(t, 1, probe + 16, BUF_LEN - 16, 0, 0);
        Some(0)
    });
    rx(base, "zero-length", QSIZE, r, Want::Ignored, || {
        desc(t, 0, buf, 0, F_WRITE, 0);
        Some(0)
    });
    // Broken chains.
    for (name, d0, d1) in [
        ("desc-self-loop", (buf, BUF_LEN, F_WRITE | F_NEXT, 0), None),
        ("desc-loop", (buf, 16, F_WRITE | F_NEXT, 1), Some((buf + 16, 16, F_WRITE | F_NEXT, 0))),
        ("next-out-of-range", (buf, BUF_LEN, F_WRITE | F_NEXT, 0x7fff), None),
        ("readable-after-writable", (buf, 16, F_WRITE | F_NEXT, 1), Some((probe, 16, 0, 0))),
    ] {
        rx(base, name, QSIZE, r, Want::NeedsReset, || {
            desc(t, 0, d0.0, d0.1, d0.2, d0.3);
            if let Some(d) = d1 {
                desc(t, 1, d.0, d.1, d.2, d.3);
            }
            Some(0)
        });
    }
    rx(base, "head-out-of-range", QSIZE, r, Want::NeedsReset, || {
        valid();
        Some(0xffff)
    });
    // A chain of 17 buffers in a 16-entry queue, through an indirect table.
    rx(base, "chain-longer-than-queue", QSIZE, r, Want::NeedsReset, || {
        for i in 0..17 {
            let flags = if i < 16 { F_WRITE | F_NEXT } else { F_WRITE };
            desc(it, i, buf, 4, flags, (i + 1) as u16);
        }
        desc(t, 0, it, 16 * 17, F_INDIRECT, 0);
        Some(0)
    });
    // 128 buffers of 32 MiB each in a 128-entry queue: 4 GiB in all, one byte more than the
    // 32-bit lengths add up to. In our own RAM, past our image and before the device tree.
    let big = 32 << 20;
    if vm.in_ram(scratch, big.into())
        && scratch + u64::from(big) <= vm.dt_addr
        && queue_max(base) >= 128
    {
        rx(base, "chain-bytes-wrap-u32", 128, r, Want::NeedsReset, || {
            for i in 0..128 {
                let flags = if i < 127 { F_WRITE | F_NEXT } else { F_WRITE };
                desc(it, i, scratch, big, flags, (i + 1) as u16);
            }
            desc(t, 0, it, 16 * 128, F_INDIRECT, 0);
            Some(0)
        });
    }
    for (name, addr, len, flags) in [
        ("indirect-past-ram", end, 32, F_INDIRECT),
        ("indirect-other-vm-pa", 0x8000_0000, 32, F_INDIRECT),
        ("indirect-len-odd", it, 17, F_INDIRECT),
        ("indirect-len-zero", it, 0, F_INDIRECT),
        ("indirect-with-next", it, 32, F_INDIRECT | F_NEXT),
        ("indirect-len-wraps", u64::MAX - 15, 32, F_INDIRECT),
    ] {
        rx(base, name, QSIZE, r, Want::NeedsReset, || {
            desc(it, 0, buf, BUF_LEN, F_WRITE, 0);
            desc(t, 0, addr, len, flags, 1);
            Some(0)
        });
    }
    rx(base, "indirect-nested", QSIZE, r, Want::NeedsReset, || {
        desc(it, 0, it + 256, 32, F_INDIRECT, 0);
        desc(t, 0, it, 16, F_INDIRECT, 0);
        Some(0)
    });
    rx(base, "indirect-loop", QSIZE, r, Want::NeedsReset, || {
        desc(it, 0, buf, 16, F_WRITE | F_NEXT, 1);
        desc(it, 1, buf + 16, 16, F_WRITE | F_NEXT, 0);
        desc(t, 0, it, 32, F_INDIRECT, 0);
        Some(0)
    });
    // Rings in the wrong places.
    for (name, rings) in [
        ("desc-table-past-ram", (end, r.1, r.2)),
        ("desc-table-other-vm-pa", (0x8000_0000, r.1, r.2)),
        ("desc-table-at-uart", (0x0900_0000, r.1, r.2)),
        ("avail-ring-past-ram", (r.0, end - 2, r.2)),
        ("used-ring-past-ram", (r.0, r.1, end)),
        ("used-ring-at-gicd", (r.0, r.1, 0x0800_0000)),
    ] {
        rx(base, name, QSIZE, rings, Want::NeedsReset, valid);
    }
    // The available index ahead of the queue by more than its size.
    rx(base, "avail-idx-jump", QSIZE, r, Want::NeedsReset, || {
        valid();
        wr::<u16>(area() + AVAIL + 4, 0);
        cpu::dsb();
        wr::<u16>(area() + AVAIL + 2, 1000);
        cpu::dsb();
        Regs(base).write(QUEUE_NOTIFY, 0);
        None
    });
    toctou(vm, base);
    rx(base, "valid-after", QSIZE, r, Want::Delivered(buf, BUF_LEN), valid);
}

fn queue_max(base: u64) -> u32 {
    Regs(base).write(QUEUE_SEL, 0);
    Regs(base).read(QUEUE_NUM_MAX)
}

/// The second vCPU's task: writes `FLIP_VALUES[0]` and `[1]` in turn, `FLIP_WIDTH` bytes wide,
/// to `FLIP_AT`, until `FLIP_STOP`.
static FLIP_AT: Global<u64> = Global::new(0);
static FLIP_VALUES: [Global<u64>; 2] = [const { Global::new(0) }; 2];
static FLIP_WIDTH: Global<u64> = Global::new(8);
static FLIP_STOP: Global<bool> = Global::new(false);

pub fn flip_loop() {
    let (at, a, b) = (FLIP_AT.get(), FLIP_VALUES[0].get(), FLIP_VALUES[1].get());
    while !FLIP_STOP.get() {
        match FLIP_WIDTH.get() {
            2 => {
                wr::<u16>(at, a as u16);
                wr::<u16>(at, b as u16);
            }
            4 => {
                wr::<u32>(at, a as u32);
                wr::<u32>(at, b as u32);
            }
            _ => {
                wr::<u64>(at, a);
                wr::<u64>(at, b);
            }
        }
    }
}

/// The canary: the last 16 bytes of our RAM, where a buffer that straddles its end begins.
const CANARY: u8 = 0xa5;

/// Ring fields rewritten by the second vCPU while input is delivered: each chain the device
/// takes must be delivered into our buffer or put the device in DEVICE_NEEDS_RESET; no input
/// lands past our RAM (the canary before its end stays as it was).
fn toctou(vm: &Vm, base: u64) {
    let k = "virtio-console";
    let Some((slot, mpidr)) = crate::irq::others(vm).next() else {
        baremetal::println!("hostile: {k} rx-toctou needs 2 vCPUs");
        return;
    };
    let t = area() + DESC;
    let buf = area() + BUF;
    let canary = vm.ram_end - 16;
    if vm.dt_addr + vm.dt_size > canary {
        baremetal::println!("hostile: {k} rx-toctou: the device tree is at the end of RAM");
        return;
    }
    for i in 0..16 {
        wr::<u8>(canary + i, CANARY);
    }
    // (name, field, width, valid value, hostile value)
    let cases: [(&str, u64, u64, u64, u64); 6] = [
        ("toctou-avail-idx", area() + AVAIL + 2, 2, 1, 1000),
        ("toctou-ring-entry", area() + AVAIL + 4, 2, 0, 0xffff),
        ("toctou-desc-addr", t, 8, buf, canary),
        ("toctou-desc-len", t + 8, 4, u64::from(BUF_LEN), u64::from(u32::MAX)),
        ("toctou-desc-flags", t + 12, 2, F_WRITE.into(), (F_WRITE | F_NEXT).into()),
        ("toctou-desc-readable", t + 12, 2, F_WRITE.into(), 0),
    ];
    let rounds = 100u64;
    for (name, at, width, good, bad) in cases {
        FLIP_AT.set(at);
        FLIP_VALUES[0].set(good);
        FLIP_VALUES[1].set(bad);
        FLIP_WIDTH.set(width);
        FLIP_STOP.set(false);
        let (mut posted, mut delivered, mut ignored, mut resets, mut bad_bytes) = (0, 0, 0, 0, 0);
        let mut flipping = false;
        for _ in 0..rounds {
            if open(base, QSIZE, rings()).is_err() {
                break;
            }
            // The chain: one writable buffer in descriptor 0, entry 0, index 1; the flipper
            // rewrites one of these fields while the device may read it.
            desc(t, 0, buf, BUF_LEN, F_WRITE, 0);
            if !flipping {
                if crate::irq::start(slot, mpidr, crate::irq::TASK_FLIP_RX) != 0 {
                    break;
                }
                flipping = true;
            }
            post(base, &[0]);
            posted += 1;
            if !wait_input(base, 5000) {
                break;
            }
            if needs_reset(base) {
                resets += 1;
                continue;
            }
            let (id, len) = used(0);
            if len == 0 {
                ignored += 1; // the flipper made it read-only when the device looked
            } else if id == 0 && len <= BUF_LEN && typed(buf, len) {
                delivered += 1;
            } else {
                bad_bytes += 1;
            }
        }
        FLIP_STOP.set(true);
        cpu::dsb_sev();
        let _ = baremetal::psci::wait_off(mpidr, 1000);
        Regs(base).reset(1000);
        let intact = (0..16).all(|i| rd::<u8>(canary + i) == CANARY);
        report::attempt(
            k,
            format_args!("rx-{name}"),
            format_args!(
                "absorbed {posted} deliveries: {delivered} completed, {ignored} ignored, \
                 {resets} needs-reset{}",
                if intact { "" } else { ", canary overwritten" }
            ),
            posted == rounds && delivered + ignored + resets == posted && bad_bytes == 0 && intact,
        );
    }
}
