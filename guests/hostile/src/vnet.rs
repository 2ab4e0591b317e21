//! Part of `virtio`: hostile chains on virtio-net's transmit and receive queues and on
//! virtio-console's transmit queue, a ring-index TOCTOU from the second vCPU, and a flood of
//! the largest frames towards the healthy VM on the same network.
//!
//! Lines: `hostile: virtio-net <tx|rx>-<attack> -> needs-reset|ok`,
//! `hostile: virtio-console tx-<attack> -> ...`, `hostile: virtio-net toctou-<field> ->
//! absorbed <n> requests: <c> completed, <r> needs-reset`, `hostile: virtio-net flood 2000ms
//! starting` and `hostile: virtio-net flood <ms>ms -> absorbed <n> frames of <b> bytes`.
//!
//! Outcomes wanted: a chain that points outside RAM, loops, is too long or has a broken ring
//! entry puts the device in DEVICE_NEEDS_RESET; a well-formed chain with an unusable frame
//! (too short, too long, an offload not offered, a checksum outside the frame) completes (the
//! device counts an error); a receive buffer the device may not write is left alone.

use baremetal::console::Global;
use baremetal::cpu;
use baremetal::virtio_mmio::DEVICE_ID_CONSOLE;
use baremetal::virtio_mmio::Regs;
use baremetal::virtio_mmio::reg::QUEUE_NOTIFY;

use crate::Vm;
use crate::net::{self, F_INDIRECT_DESC, F_NEXT, F_WRITE, HDR, INDIRECT, Nic, area, desc, wr};
use crate::report::{self, Outcome};

/// A descriptor: address, length, flags, next.
type Desc = (u64, u32, u16, u16);

fn outcome(nic: &Nic, used: bool) -> Outcome {
    if nic.needs_reset() {
        Outcome::NeedsReset
    } else if used {
        Outcome::Ok
    } else {
        Outcome::Value(u64::from(nic.status()))
    }
}

/// Sets the device up afresh, lets `attack` write the chain (its head in descriptor 0 of the
/// transmit table) and returns the head to post; posts and notifies queue 1.
fn tx(kind: &str, base: u64, name: &str, want_reset: bool, attack: impl FnOnce() -> u16) {
    // virtio-console's queues hold 128 entries.
    let size = if kind == "virtio-net" { net::TX_SIZE } else { 128 };
    let Ok(mut nic) = Nic::open_sized(base, size) else {
        report::attempt(kind, name, "setup failed", false);
        return;
    };
    let a = area();
    let head = attack();
    wr::<u16>(a + net::TX_AVAIL + 4, head);
    cpu::dsb();
    nic.tx_next = 1;
    wr::<u16>(a + net::TX_AVAIL + 2, 1);
    cpu::dsb();
    nic.notify(1);
    let used = net::rd::<u16>(a + net::TX_USED + 2) == 1;
    let o = outcome(&nic, used);
    let confined = if want_reset { o == Outcome::NeedsReset } else { o == Outcome::Ok };
    report::attempt(kind, format_args!("tx-{name}"), o, confined);
    Regs(base).reset(1000);
}

/// The attacks on a transmit queue: `frame` is a readable buffer with a valid header.
fn tx_attacks(vm: &Vm, kind: &str, base: u64, frame: u64, flen: u32) {
    let t = area() + net::TX_DESC;
    let it = area() + INDIRECT;
    let end = vm.ram_end;
    tx(kind, base, "valid", false, || {
        desc(t, 0, frame, flen, 0, 0);
        0
    });
    let bad: [(&str, Desc); 10] = [
        ("buf-past-ram", (end, 64, 0, 0)),
        ("buf-straddles-ram-end", (end - 32, 64, 0, 0)),
        ("buf-other-vm-pa", (0x8000_0000, 64, 0, 0)),
        ("buf-hyp-heap-pa", ((end + 0x0400_0000) & !0xfff, 64, 0, 0)),
        ("buf-device", (0x0900_0000, 64, 0, 0)),
        ("buf-gicd", (0x0800_0000, 64, 0, 0)),
        ("buf-addr-wraps", (u64::MAX - 31, 64, 0, 0)),
        ("buf-ipa-top", ((1u64 << vm.ipa_bits) - 32, 64, 0, 0)),
        ("buf-len-max", (vm.ram_start, u32::MAX, 0, 0)),
        ("next-out-of-range", (frame, 16, F_NEXT, 0xffff)),
    ];
    for (name, (addr, len, flags, next)) in bad {
        tx(kind, base, name, true, || {
            desc(t, 0, addr, len, flags, next);
            0
        });
    }
    tx(kind, base, "desc-self-loop", true, || {
        desc(t, 0, frame, 16, F_NEXT, 0);
        0
    });
    tx(kind, base, "desc-loop", true, || {
        desc(t, 0, frame, 16, F_NEXT, 1);
        desc(t, 1, frame, 16, F_NEXT, 0);
        0
    });
    tx(kind, base, "head-out-of-range", true, || {
        desc(t, 0, frame, flen, 0, 0);
        0xffff
    });
    tx(kind, base, "chain-longer-than-queue", true, || {
        // One buffer more than the largest queue (256): longer than any.
        for i in 0..256 {
            desc(it, i, frame, 16, F_NEXT, (i + 1) as u16);
        }
        desc(it, 256, frame, 16, 0, 0);
        desc(t, 0, it, 16 * 257, F_INDIRECT_DESC, 0);
        0
    });
    for (name, (addr, len, flags)) in [
        ("indirect-past-ram", (end, 64, F_INDIRECT_DESC)),
        ("indirect-len-odd", (it, 17, F_INDIRECT_DESC)),
        ("indirect-with-next", (it, 32, F_INDIRECT_DESC | F_NEXT)),
        ("indirect-len-wraps", (u64::MAX - 15, 32, F_INDIRECT_DESC)),
    ] {
        tx(kind, base, name, true, || {
            desc(it, 0, frame, flen, 0, 0);
            desc(t, 0, addr, len, flags, 1);
            0
        });
    }
    tx(kind, base, "indirect-nested", true, || {
        desc(it, 0, it + 256, 32, F_INDIRECT_DESC, 0);
        desc(t, 0, it, 16, F_INDIRECT_DESC, 0);
        0
    });
    tx(kind, base, "indirect-loop", true, || {
        desc(it, 0, frame, 16, F_NEXT, 1);
        desc(it, 1, frame, 16, F_NEXT, 0);
        desc(t, 0, it, 32, F_INDIRECT_DESC, 0);
        0
    });
    tx(kind, base, "avail-idx-jump", true, || {
        desc(t, 0, frame, flen, 0, 0);
        wr::<u16>(area() + net::TX_AVAIL + 2, 1000);
        Regs(base).write(QUEUE_NOTIFY, 1);
        0
    });
    tx(kind, base, "valid-after", false, || {
        desc(t, 0, frame, flen, 0, 0);
        0
    });
}

/// Frames the device must refuse but complete (virtio-net only).
fn tx_bad_frames(vm: &Vm, base: u64, frame: u64) {
    let k = "virtio-net";
    let t = area() + net::TX_DESC;
    // flags, gso_type, csum_start, csum_offset.
    let hdr = |flags: u8, gso: u8, start: u16, offset: u16| {
        wr::<u8>(frame, flags);
        wr::<u8>(frame + 1, gso);
        wr::<u16>(frame + 6, start);
        wr::<u16>(frame + 8, offset);
    };
    for (name, len, flags, gso, start, offset) in [
        ("frame-too-short", (HDR + 10) as u32, 0, 0, 0, 0),
        ("hdr-only", HDR as u32, 0, 0, 0, 0),
        // A checksum for the device to complete whose field lies past the frame's end.
        ("hdr-csum-past-end", (HDR + 64) as u32, 1, 0, 60, 4),
        ("hdr-csum-start-max", (HDR + 64) as u32, 1, 0, u16::MAX, u16::MAX),
        ("hdr-gso-tcpv4", (HDR + 64) as u32, 0, 1, 0, 0),
    ] {
        tx(k, base, name, false, || {
            hdr(flags, gso, start, offset);
            desc(t, 0, frame, len, 0, 0);
            0
        });
    }
    hdr(0, 0, 0, 0);
    // 64 KiB + 15 bytes of frame: over the largest an MTU allows. From our own RAM.
    tx(k, base, "frame-too-long", false, || {
        desc(t, 0, vm.ram_start, (HDR + net::MAX_FRAME + 1) as u32, 0, 0);
        0
    });
    tx(k, base, "writable-only-chain", false, || {
        desc(t, 0, frame, (HDR + 64) as u32, F_WRITE, 0);
        0
    });
}

/// The receive queue: every buffer replaced by a hostile one, then a frame from the healthy
/// VM's beacon must make the device refuse it.
fn rx_attacks(vm: &Vm, base: u64) {
    let k = "virtio-net";
    let end = vm.ram_end;
    let rx = |name: &str, want_reset: bool, d: Desc| {
        let Ok(mut nic) = Nic::open(base) else {
            report::attempt(k, name, "setup failed", false);
            return;
        };
        let t = area() + net::RX_DESC;
        for i in 0..u64::from(net::RX_BUFS) {
            desc(t, i, d.0, d.1, d.2, d.3);
        }
        cpu::dsb();
        let deadline = baremetal::time::counter() + baremetal::time::ms_to_ticks(1500);
        let mut got = 0;
        while !nic.needs_reset() && !baremetal::time::passed(deadline) {
            got += nic.recv(|_| {});
            cpu::yield_now();
        }
        let o = if nic.needs_reset() { Outcome::NeedsReset } else { Outcome::Ok };
        let confined = if want_reset { o == Outcome::NeedsReset } else { got == 0 };
        report::attempt(k, format_args!("rx-{name}"), o, confined);
        Regs(base).reset(1000);
    };
    for (name, d) in [
        ("buf-past-ram", (end, 2048, F_WRITE, 0)),
        ("buf-other-vm-pa", (0x8000_0000, 2048, F_WRITE, 0)),
        ("buf-hyp-heap-pa", ((end + 0x0400_0000) & !0xfff, 2048, F_WRITE, 0)),
        ("buf-device", (0x0900_0000, 2048, F_WRITE, 0)),
        ("buf-addr-wraps", (u64::MAX - 1023, 2048, F_WRITE, 0)),
        ("buf-len-max", (vm.ram_start, u32::MAX, F_WRITE, 0)),
        ("next-out-of-range", (area() + 0x8000, 2048, F_WRITE | F_NEXT, 0x7fff)),
    ] {
        rx(name, true, d);
    }
    // A readable buffer: the device must not write into it (it drops the frame).
    let probe = area() + net::TX_BUF;
    for i in 0..64 {
        wr::<u8>(probe + i, 0x5a);
    }
    rx("readable-buffer", false, (probe, 2048, 0, 0));
    let untouched = (0..64).all(|i| net::rd::<u8>(probe + i) == 0x5a);
    let o = if untouched { Outcome::Ok } else { Outcome::Value(net::rd::<u64>(probe)) };
    report::attempt(k, "rx-readable-buffer-untouched", o, untouched);
}

/// The second vCPU's task: writes `FLIP[1]` and `FLIP[2]` in turn to the u16 at `FLIP[0]`,
/// until `FLIP[3]`.
static FLIP: [Global<u64>; 4] = [const { Global::new(0) }; 4];

pub fn flip16_loop() {
    let addr = FLIP[0].get();
    while FLIP[3].get() == 0 {
        wr::<u16>(addr, FLIP[1].get() as u16);
        wr::<u16>(addr, FLIP[2].get() as u16);
    }
}

/// Ring-index time of check against time of use: one vCPU posts valid frames again and again
/// while the other flips a field the device reads (the available index, the ring entry, a
/// descriptor's next) between a valid and an invalid value. Each notification must complete
/// its chains or end in DEVICE_NEEDS_RESET.
fn toctou(vm: &Vm, base: u64, frame: u64, flen: u32) {
    let k = "virtio-net";
    let Some((slot, mpidr)) = crate::irq::others(vm).next() else {
        baremetal::println!("hostile: {k} toctou needs 2 vCPUs");
        return;
    };
    let a = area();
    let rounds = 1000u64;
    let cases: [(&str, u64, u16, u16); 3] = [
        ("toctou-avail-idx", a + net::TX_AVAIL + 2, 1, 1000),
        ("toctou-ring-entry", a + net::TX_AVAIL + 4, 0, 0xffff),
        ("toctou-desc-next", a + net::TX_DESC + 14, 1, 0),
    ];
    for (name, addr, good, bad) in cases {
        let (mut done, mut resets, mut posted) = (0u64, 0u64, 0u64);
        FLIP[0].set(addr);
        FLIP[1].set(good.into());
        FLIP[2].set(bad.into());
        FLIP[3].set(0);
        if crate::irq::start(slot, mpidr, crate::irq::TASK_FLIP16) != 0 {
            return;
        }
        for _ in 0..rounds {
            let Ok(nic) = Nic::open(base) else { break };
            // The chain: header+frame in descriptor 0, continuing (F_NEXT) into descriptor 1
            // for the desc-next case.
            let t = a + net::TX_DESC;
            if name == "toctou-desc-next" {
                desc(t, 0, frame, 16, F_NEXT, 1);
                desc(t, 1, frame + 16, flen - 16, 0, 0);
            } else {
                desc(t, 0, frame, flen, 0, 0);
            }
            if name != "toctou-ring-entry" {
                wr::<u16>(a + net::TX_AVAIL + 4, 0);
            }
            if name != "toctou-avail-idx" {
                wr::<u16>(a + net::TX_AVAIL + 2, 1);
            }
            cpu::dsb();
            nic.notify(1);
            posted += 1;
            if nic.needs_reset() {
                resets += 1;
            } else {
                done += 1; // completed, or nothing was available at the moment it looked
            }
        }
        FLIP[3].set(1);
        cpu::dsb_sev();
        let _ = baremetal::psci::wait_off(mpidr, 1000);
        Regs(base).reset(1000);
        report::attempt(
            k,
            name,
            format_args!("absorbed {posted} requests: {done} completed, {resets} needs-reset"),
            posted == rounds && done + resets == posted,
        );
    }
}

/// The largest frames the device takes, a whole 256-entry ring of them per notification,
/// broadcast (to the healthy VM among others) for `ms`: 16 MiB handed to armhv at once.
fn flood(base: u64, ms: u64) {
    let k = "virtio-net";
    let Ok(mut nic) = Nic::open(base) else { return };
    let len = (HDR + net::MAX_FRAME) as u32;
    let big = area() + net::TX_BUF;
    write_header(big, nic.mac);
    baremetal::println!("hostile: {k} flood {ms}ms starting");
    let deadline = baremetal::time::counter() + baremetal::time::ms_to_ticks(ms);
    let (mut frames, mut notifies) = (0u64, 0u64);
    while !baremetal::time::passed(deadline) && !nic.needs_reset() {
        nic.send_chains(net::TX_SIZE, |_| (big, len));
        notifies += 1;
        frames += u64::from(net::TX_SIZE);
    }
    let o = outcome(&nic, true);
    Regs(base).reset(1000);
    report::attempt(
        k,
        format_args!("flood {ms}ms"),
        format_args!("absorbed {frames} frames of {len} bytes in {notifies} notifications"),
        o == Outcome::Ok,
    );
}

/// A virtio-net header of zeros and an Ethernet header at `at`: broadcast, from `src` (this
/// NIC's own MAC: armhv's switch drops frames with any other source), ethertype 0.
fn write_header(at: u64, src: [u8; 6]) {
    for i in 0..(HDR + 14) {
        let byte = match i.wrapping_sub(HDR) {
            0..6 => 0xff,
            j @ 6..12 => src[j - 6],
            _ => 0,
        };
        wr::<u8>(at + i as u64, byte);
    }
}

pub fn step(vm: &Vm) {
    // A valid frame in our area: header of zeros, broadcast from our MAC, ethertype, 64 bytes.
    let frame = area() + net::TX_BUF + 0x1000;
    let flen = (HDR + 14 + 64) as u32;
    let nic = net::find(vm);
    for i in 0..u64::from(flen) {
        wr::<u8>(frame + i, 0);
    }
    write_header(frame, nic.map_or([0; 6], Nic::mac_of));
    match nic {
        Some(base) => {
            tx_attacks(vm, "virtio-net", base, frame, flen);
            tx_bad_frames(vm, base, frame);
            rx_attacks(vm, base);
            toctou(vm, base, frame, flen);
            flood(base, 2000);
            // The device still works.
            let o = match Nic::open(base) {
                Ok(mut nic) => {
                    let sent = nic.send(net::BROADCAST, &[0; 64]);
                    outcome(&nic, sent)
                }
                Err(s) => Outcome::Value(u64::from(s)),
            };
            report::attempt("virtio-net", "valid-after-all", o, o == Outcome::Ok);
        }
        None => baremetal::println!("hostile: virtio virtio-net absent, skipped"),
    }
    match crate::virtio::find(vm, DEVICE_ID_CONSOLE) {
        // virtio-console's queue 1 is its transmit queue too: the same rings fit.
        Some(base) => console_attacks(vm, base, frame, flen),
        None => baremetal::println!("hostile: virtio virtio-console absent, skipped"),
    }
}

fn console_attacks(vm: &Vm, base: u64, text: u64, _len: u32) {
    // Printable output: "hostile-output\n".
    for (i, &b) in b"hostile-output\n".iter().enumerate() {
        wr::<u8>(text + i as u64, b);
    }
    tx_attacks(vm, "virtio-console", base, text, 15);
}
