//! Every way a driver can break the ring rules ends in DEVICE_NEEDS_RESET
//! with a reason, no panic, no access outside RAM, and no used entry for
//! the bad chain.

use std::string::ToString;

use super::*;
use crate::mmio::interrupt;
use crate::queue::{DescChain, Queue};
use crate::{Area, Blk, Rng, VirtioError};

fn rng() -> VirtioMmio<Rng> {
    VirtioMmio::new(Rng::new(|b: &mut [u8]| b.fill(1)))
}

/// Sets up an rng with a 16-entry queue, lets `build` put a chain in it,
/// notifies, and returns the error the device reported.
fn run_rng(want: u64, build: impl FnOnce(&mut Guest, &mut DriverQueue)) -> VirtioError {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, want, 16);
    build(&mut g, &mut qs[0]);
    kick(&mut m, &mut g, 0);
    assert!(m.needs_reset(), "status {:#x}", r32(&mut m, regs::STATUS));
    assert_ne!(r32(&mut m, regs::STATUS) & status::DEVICE_NEEDS_RESET, 0);
    assert_ne!(r32(&mut m, regs::INTERRUPT_STATUS) & interrupt::CONFIG_CHANGE, 0);
    assert_eq!(qs[0].used_idx(&g.ram), 0, "the bad chain was not returned");
    let err = m.take_error().expect("error recorded");
    assert!(!err.to_string().is_empty());
    // Stopped: further notifications do nothing.
    let b = g.alloc(4, 1);
    qs[0].add(&mut g.ram, &[(b, 4, true)]);
    kick(&mut m, &mut g, 0);
    assert_eq!(qs[0].used_idx(&g.ram), 0);
    assert_eq!(m.stats().transport.needs_reset, 1);
    err
}

const OUTSIDE: u64 = RAM_BASE + RAM_SIZE as u64;

#[test]
fn buffer_outside_ram() {
    for (addr, len) in
        [(OUTSIDE, 1), (OUTSIDE - 4, 8), (RAM_BASE - 1, 2), (u64::MAX - 2, 8), (0, 16)]
    {
        let e = run_rng(ALL, |g, q| {
            q.add(&mut g.ram, &[(addr, len, true)]);
        });
        assert!(matches!(e, VirtioError::OutOfRam { area: Area::Buffer, .. }), "{e}");
    }
}

#[test]
fn descriptor_table_outside_ram() {
    let mut g = Guest::new();
    let mut m = rng();
    init(&mut m, &mut g, ALL, 16);
    w32(&mut m, regs::QUEUE_READY, 0);
    w32(&mut m, regs::QUEUE_DESC_LOW, (OUTSIDE - 16 * 4) as u32);
    w32(&mut m, regs::QUEUE_READY, 1);
    // avail ring is still in RAM; post head 8, which lies past the end.
    let avail = m.queue(0).unwrap().avail_addr();
    g.ram.write_obj(Ipa(avail + 4), 8u16).unwrap();
    g.ram.write_obj(Ipa(avail + 2), 1u16).unwrap();
    kick(&mut m, &mut g, 0);
    assert!(matches!(m.take_error(), Some(VirtioError::OutOfRam { area: Area::DescTable, .. })));
}

#[test]
fn rings_outside_ram() {
    for reg in [regs::QUEUE_DRIVER_LOW, regs::QUEUE_DEVICE_LOW] {
        let mut g = Guest::new();
        let mut m = rng();
        let mut qs = init(&mut m, &mut g, ALL, 16);
        let b = g.alloc(4, 1);
        qs[0].add(&mut g.ram, &[(b, 4, true)]);
        w32(&mut m, regs::QUEUE_READY, 0);
        // The available ring entirely outside; the used ring's elements.
        let addr = if reg == regs::QUEUE_DRIVER_LOW { OUTSIDE } else { OUTSIDE - 8 };
        w32(&mut m, reg, addr as u32);
        w32(&mut m, regs::QUEUE_READY, 1);
        kick(&mut m, &mut g, 0);
        let area = if reg == regs::QUEUE_DRIVER_LOW { Area::AvailRing } else { Area::UsedRing };
        assert_eq!(
            m.take_error().map(|e| matches!(e, VirtioError::OutOfRam { area: a, .. } if a == area)),
            Some(true)
        );
    }
}

#[test]
fn descriptor_loop() {
    let e = run_rng(ALL, |g, q| {
        let b = g.alloc(8, 1);
        q.write_desc(&mut g.ram, 0, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 1));
        q.write_desc(&mut g.ram, 1, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 0));
        q.publish(&mut g.ram, 0);
    });
    assert_eq!(e, VirtioError::DescriptorLoop { table_len: 16 });
    // A descriptor pointing at itself.
    let e = run_rng(ALL, |g, q| {
        let b = g.alloc(8, 1);
        q.write_desc(&mut g.ram, 3, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 3));
        q.publish(&mut g.ram, 3);
    });
    assert_eq!(e, VirtioError::DescriptorLoop { table_len: 16 });
}

#[test]
fn loop_inside_indirect_table() {
    let e = run_rng(ALL, |g, q| {
        let b = g.alloc(8, 1);
        let t = g.alloc(64, 16);
        for i in 0..4 {
            write_desc(
                &mut g.ram,
                t,
                i,
                (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, (i + 1) % 4),
            );
        }
        q.write_desc(&mut g.ram, 0, (t, 64, VIRTQ_DESC_F_INDIRECT, 0));
        q.publish(&mut g.ram, 0);
    });
    assert_eq!(e, VirtioError::DescriptorLoop { table_len: 4 });
}

#[test]
fn chain_longer_than_queue() {
    // 16-entry queue: 2 direct buffers and an indirect table of 15.
    let e = run_rng(ALL, |g, q| {
        let b = g.alloc(8, 1);
        let t = g.alloc(16 * 15, 16);
        for i in 0..15 {
            let flags = VIRTQ_DESC_F_WRITE | if i < 14 { VIRTQ_DESC_F_NEXT } else { 0 };
            write_desc(&mut g.ram, t, i, (b, 8, flags, i + 1));
        }
        q.write_desc(&mut g.ram, 0, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 1));
        q.write_desc(&mut g.ram, 1, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2));
        q.write_desc(&mut g.ram, 2, (t, 16 * 15, VIRTQ_DESC_F_INDIRECT, 0));
        q.publish(&mut g.ram, 0);
    });
    assert_eq!(e, VirtioError::ChainTooLong { max: 16 });
}

#[test]
fn long_but_legal_chain_works() {
    // Exactly queue-size buffers (2 direct + 14 indirect) is allowed.
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, ALL, 16);
    let b = g.alloc(8, 1);
    let t = g.alloc(16 * 14, 16);
    for i in 0..14 {
        let flags = VIRTQ_DESC_F_WRITE | if i < 13 { VIRTQ_DESC_F_NEXT } else { 0 };
        write_desc(&mut g.ram, t, i, (b, 8, flags, i + 1));
    }
    let q = &mut qs[0];
    q.write_desc(&mut g.ram, 0, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 1));
    q.write_desc(&mut g.ram, 1, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2));
    // The WRITE flag on the indirect descriptor itself is ignored.
    q.write_desc(&mut g.ram, 2, (t, 16 * 14, VIRTQ_DESC_F_INDIRECT | VIRTQ_DESC_F_WRITE, 0));
    q.publish(&mut g.ram, 0);
    kick(&mut m, &mut g, 0);
    assert!(!m.needs_reset(), "{:?}", m.last_error());
    assert_eq!(qs[0].take_used(&g.ram), [(0, 16 * 8)]);
}

#[test]
fn next_out_of_range() {
    let e = run_rng(ALL, |g, q| {
        let b = g.alloc(8, 1);
        q.write_desc(&mut g.ram, 0, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 16));
        q.publish(&mut g.ram, 0);
    });
    assert_eq!(e, VirtioError::NextOutOfRange { next: 16, table_len: 16 });
    let e = run_rng(ALL, |g, q| {
        let b = g.alloc(8, 1);
        let t = g.alloc(32, 16);
        write_desc(&mut g.ram, t, 0, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 2));
        q.write_desc(&mut g.ram, 0, (t, 32, VIRTQ_DESC_F_INDIRECT, 0));
        q.publish(&mut g.ram, 0);
    });
    assert_eq!(e, VirtioError::NextOutOfRange { next: 2, table_len: 2 });
}

#[test]
fn head_out_of_range() {
    let e = run_rng(ALL, |g, q| q.publish(&mut g.ram, 16));
    assert_eq!(e, VirtioError::HeadOutOfRange { head: 16, size: 16 });
}

#[test]
fn available_index_jump() {
    let e = run_rng(ALL, |g, q| {
        g.ram.write_obj(Ipa(q.avail + 2), 17u16).unwrap();
    });
    assert_eq!(e, VirtioError::AvailIndexJump { avail_idx: 17, last_seen: 0, size: 16 });
}

#[test]
fn writable_before_readable() {
    let e = run_rng(ALL, |g, q| {
        let b = g.alloc(8, 1);
        q.add(&mut g.ram, &[(b, 8, true), (b, 8, false)]);
    });
    assert_eq!(e, VirtioError::ReadableAfterWritable);
    // Also across the direct/indirect boundary.
    let e = run_rng(ALL, |g, q| {
        let b = g.alloc(8, 1);
        let t = g.alloc(16, 16);
        write_desc(&mut g.ram, t, 0, (b, 8, 0, 0));
        q.write_desc(&mut g.ram, 0, (b, 8, VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT, 1));
        q.write_desc(&mut g.ram, 1, (t, 16, VIRTQ_DESC_F_INDIRECT, 0));
        q.publish(&mut g.ram, 0);
    });
    assert_eq!(e, VirtioError::ReadableAfterWritable);
}

#[test]
fn bad_indirect_tables() {
    type Build = fn(&mut Guest, &mut DriverQueue);
    let cases: [(u64, Build, VirtioError); 6] = [
        (
            PLAIN,
            |g, q| {
                let t = g.alloc(16, 16);
                q.write_desc(&mut g.ram, 0, (t, 16, VIRTQ_DESC_F_INDIRECT, 0));
                q.publish(&mut g.ram, 0);
            },
            VirtioError::IndirectNotNegotiated,
        ),
        (
            ALL,
            |g, q| {
                let t = g.alloc(24, 16);
                q.write_desc(&mut g.ram, 0, (t, 24, VIRTQ_DESC_F_INDIRECT, 0));
                q.publish(&mut g.ram, 0);
            },
            VirtioError::BadIndirectLength { len: 24 },
        ),
        (
            ALL,
            |g, q| {
                q.write_desc(&mut g.ram, 0, (RAM_BASE, 0, VIRTQ_DESC_F_INDIRECT, 0));
                q.publish(&mut g.ram, 0);
            },
            VirtioError::BadIndirectLength { len: 0 },
        ),
        (
            ALL,
            |g, q| {
                let t = g.alloc(16, 16);
                let b = g.alloc(4, 1);
                write_desc(&mut g.ram, t, 0, (b, 4, VIRTQ_DESC_F_WRITE, 0));
                q.write_desc(&mut g.ram, 0, (t, 16, VIRTQ_DESC_F_INDIRECT | VIRTQ_DESC_F_NEXT, 1));
                q.write_desc(&mut g.ram, 1, (b, 4, VIRTQ_DESC_F_WRITE, 0));
                q.publish(&mut g.ram, 0);
            },
            VirtioError::IndirectWithNext,
        ),
        (
            ALL,
            |g, q| {
                let t = g.alloc(32, 16);
                let inner = g.alloc(16, 16);
                write_desc(&mut g.ram, t, 0, (inner, 16, VIRTQ_DESC_F_INDIRECT, 0));
                q.write_desc(&mut g.ram, 0, (t, 32, VIRTQ_DESC_F_INDIRECT, 0));
                q.publish(&mut g.ram, 0);
            },
            VirtioError::NestedIndirect,
        ),
        (
            ALL,
            |g, q| {
                let t = OUTSIDE - 16;
                q.write_desc(&mut g.ram, 0, (t, 32, VIRTQ_DESC_F_INDIRECT, 0));
                q.publish(&mut g.ram, 0);
            },
            VirtioError::OutOfRam {
                area: Area::IndirectTable,
                err: crate::MemError { ipa: Ipa(OUTSIDE - 16), len: 32 },
            },
        ),
    ];
    for (want, build, expected) in cases {
        let e = run_rng(want, build);
        assert_eq!(e, expected, "{e}");
    }
}

#[test]
fn chain_of_4gib_or_more() {
    // 65 descriptors of 64 MiB each add up to more than 4 GiB; every one
    // is inside RAM, so only the total can refuse them.
    const BIG: usize = 64 << 20;
    let mut ram = VecRam::new(Ipa(RAM_BASE), BIG + 0x10000);
    let mut q = Queue::new(128);
    let (desc, avail, used) =
        (RAM_BASE + BIG as u64, RAM_BASE + BIG as u64 + 0x1000, RAM_BASE + BIG as u64 + 0x2000);
    q.set_size(128);
    q.set_desc_addr(desc);
    q.set_avail_addr(avail);
    q.set_used_addr(used);
    q.enable(features::VERSION_1).unwrap();
    for i in 0..65u16 {
        write_desc(&mut ram, desc, i, (RAM_BASE, BIG as u32, VIRTQ_DESC_F_NEXT, i + 1));
    }
    write_desc(&mut ram, desc, 65, (RAM_BASE, 1, 0, 0));
    ram.write_obj(Ipa(avail + 2), 1u16).unwrap();
    let mut chain = DescChain::new();
    assert_eq!(q.pop(&mut ram, &mut chain), Err(VirtioError::ChainBytesOverflow));
}

#[test]
fn block_request_without_status_byte() {
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Blk::new(std::vec![0u8; 4096]));
    let mut qs = init(&mut m, &mut g, ALL, 16);
    let h = g.buf(&[0; 16]);
    qs[0].add(&mut g.ram, &[(h, 16, false)]);
    kick(&mut m, &mut g, 0);
    assert_eq!(m.take_error(), Some(VirtioError::Malformed("block request without a status byte")));
    assert_eq!(qs[0].used_idx(&g.ram), 0);
}

#[test]
fn good_chains_before_a_bad_one_complete() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, PLAIN, 16);
    let b = g.alloc(4, 1);
    qs[0].add(&mut g.ram, &[(b, 4, true)]);
    qs[0].add(&mut g.ram, &[(OUTSIDE, 4, true)]);
    kick(&mut m, &mut g, 0);
    assert!(m.needs_reset());
    assert_eq!(qs[0].take_used(&g.ram), [(0, 4)]);
    assert!(m.irq_level());
}
