//! What one round of a device may cost (`queue::ROUND_WORK`): chains that name much work are
//! served over several rounds, each a separate, short visit to EL2, and nothing is lost.

use std::sync::{Arc, Mutex};
use std::vec::Vec;

use super::*;
use crate::blk::{S_IOERR, S_OK, T_GET_ID, T_IN, T_OUT};
use crate::queue::ROUND_WORK;
use crate::{Blk, Console, Rng};

fn header(kind: u32, sector: u64) -> Vec<u8> {
    let mut h = std::vec![0u8; 16];
    h[..4].copy_from_slice(&kind.to_le_bytes());
    h[8..].copy_from_slice(&sector.to_le_bytes());
    h
}

/// Polls until the device has nothing left; how many polls that took.
fn drain<D: VirtioDevice>(m: &mut VirtioMmio<D>, g: &mut Guest) -> usize {
    let mut polls = 0;
    while m.has_pending() {
        m.poll(&mut g.ram);
        polls += 1;
        assert!(polls < 10_000, "the device never finishes");
    }
    polls
}

#[test]
fn a_large_ram_disk_request_takes_several_rounds_and_completes_whole() {
    let disk: Vec<u8> = (0..3 << 20).map(|i: u32| (i >> 9) as u8 ^ i as u8).collect();
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Blk::new(disk.clone()));
    let mut q = init(&mut m, &mut g, ALL, 32).remove(0);
    let h = g.buf(&header(T_IN, 0));
    let data = g.alloc(3 << 20, 1);
    let st = g.alloc(1, 1);
    let mib = Blk::SIZE_MAX;
    q.add(
        &mut g.ram,
        &[
            (h, 16, false),
            (data, mib, true),
            (data + (1 << 20), mib, true),
            (data + (2 << 20), mib, true),
            (st, 1, true),
        ],
    );
    // A second request behind it waits until it is done.
    let h2 = g.buf(&header(T_GET_ID, 0));
    let id = g.alloc(20, 1);
    let st2 = g.alloc(1, 1);
    q.add(&mut g.ram, &[(h2, 16, false), (id, 20, true), (st2, 1, true)]);
    kick(&mut m, &mut g, 0);
    assert!(q.take_used(&g.ram).is_empty(), "3 MiB is more than one round's work");
    assert!(m.has_pending(), "the rest is left for the next round");
    assert!(drain(&mut m, &mut g) >= 1);
    assert_eq!(q.take_used(&g.ram), [(0, (3 << 20) + 1), (5, 21)], "in order, each once");
    assert_eq!(g.read(st, 1), [S_OK]);
    assert_eq!(g.read(st2, 1), [S_OK]);
    assert!(g.read(data, 3 << 20) == disk, "every piece in its place");
    assert_eq!(m.stats().device.bytes_to_guest, 3 << 20);
}

#[test]
fn a_large_write_in_pieces_lands_whole_and_a_reset_drops_the_rest() {
    const LEN: u32 = 3 << 20;
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Blk::new(std::vec![0u8; LEN as usize]));
    let mut q = init(&mut m, &mut g, ALL, 32).remove(0);
    let mut req = header(T_OUT, 0);
    req.extend((0..LEN).map(|i| (i % 251) as u8));
    let r = g.buf(&req);
    let st = g.alloc(1, 1);
    let mib = 1u32 << 20;
    let chain = [
        (r, 16, false),
        (r + 16, mib, false),
        (r + 16 + u64::from(mib), mib, false),
        (r + 16 + 2 * u64::from(mib), mib, false),
        (st, 1, true),
    ];
    q.add(&mut g.ram, &chain);
    kick(&mut m, &mut g, 0);
    drain(&mut m, &mut g);
    assert_eq!(g.read(st, 1), [S_OK]);
    assert!(disk_bytes(m.device_mut().backend_mut(), 0, LEN as usize) == req[16..]);

    // Reset in the middle of one: nothing more of it is done, nothing reaches the used ring.
    let mut q = init(&mut m, &mut g, ALL, 32).remove(0);
    g.ram.write(Ipa(r + 16), &std::vec![0xee; LEN as usize]).unwrap();
    q.add(&mut g.ram, &chain);
    kick(&mut m, &mut g, 0);
    assert!(m.has_pending());
    w32(&mut m, regs::STATUS, 0);
    assert!(!m.has_pending());
    assert_eq!(q.take_used(&g.ram), []);
    let disk = disk_bytes(m.device_mut().backend_mut(), 0, LEN as usize);
    assert!(disk[(2 << 20)..] == req[16 + (2 << 20)..], "the last MiB was never written");
}

#[test]
fn a_failed_request_writes_its_status_byte_only() {
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Blk::new(std::vec![0u8; 4096]));
    let mut q = init(&mut m, &mut g, ALL, 32).remove(0);
    // Past the end of the disk, an unknown type, and a write with a writable data area: the
    // writable bytes the driver named are not the device's to zero, however many.
    let big = g.alloc(2 << 20, 1);
    g.ram.write(Ipa(big), &std::vec![0x5a; 2 << 20]).unwrap();
    for kind in [T_IN, 99, T_OUT] {
        let h = g.buf(&header(kind, 1 << 20));
        let st = g.alloc(1, 1);
        q.add(
            &mut g.ram,
            &[
                (h, 16, false),
                (big, 1 << 20, true),
                (big + (1 << 20), 1 << 20, true),
                (st, 1, true),
            ],
        );
        kick(&mut m, &mut g, 0);
        assert_eq!(q.take_used(&g.ram).len(), 1);
        assert_ne!(g.read(st, 1), [S_OK]);
    }
    assert!(g.read(big, 2 << 20).iter().all(|&b| b == 0x5a));
    // A data segment over size_max: refused at once.
    let h = g.buf(&header(T_IN, 0));
    let st = g.alloc(1, 1);
    q.add(&mut g.ram, &[(h, 16, false), (big, Blk::SIZE_MAX + 512, true), (st, 1, true)]);
    kick(&mut m, &mut g, 0);
    assert_eq!(g.read(st, 1), [S_IOERR]);
    assert!(g.read(big, 2 << 20).iter().all(|&b| b == 0x5a));
}

#[test]
fn a_long_console_transmit_is_sent_over_several_rounds_in_order() {
    let mut g = Guest::new();
    let out: Arc<Mutex<Vec<u8>>> = Arc::default();
    let o = out.clone();
    let mut m =
        VirtioMmio::new(Console::new(move |b: &[u8]| o.lock().unwrap().extend_from_slice(b)));
    let mut qs = init(&mut m, &mut g, ALL, 8);
    let text: Vec<u8> = (0..64u32 << 10).map(|i| b'a' + (i % 26) as u8).collect();
    let a = g.buf(&text);
    qs[1].add(&mut g.ram, &[(a, 32 << 10, false), (a + (32 << 10), 32 << 10, false)]);
    let b = g.buf(b"next\n");
    qs[1].add(&mut g.ram, &[(b, 5, false)]);
    kick(&mut m, &mut g, Console::TX as u16);
    let round = (ROUND_WORK as usize) * Console::OUT_BYTES_PER_UNIT as usize;
    assert!(out.lock().unwrap().len() <= round, "one round sends at most {round} bytes");
    assert!(m.has_pending());
    assert!(drain(&mut m, &mut g) >= (64 << 10) / round - 1);
    let mut want = text.clone();
    want.extend_from_slice(b"next\n");
    assert!(*out.lock().unwrap() == want);
    assert_eq!(qs[1].take_used(&g.ram), [(0, 0), (2, 0)]);
}

#[test]
fn chains_of_many_descriptors_spend_a_round_before_a_ring_does() {
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Rng::new(|b: &mut [u8]| b.fill(1)));
    let mut q = init(&mut m, &mut g, ALL, 64).remove(0);
    let n = 16;
    let per_chain = 64;
    for _ in 0..n {
        let bufs: Vec<(u64, u32, bool)> =
            (0..per_chain).map(|_| (g.alloc(4, 1), 4, true)).collect();
        q.add_indirect(&mut g, &bufs);
    }
    kick(&mut m, &mut g, 0);
    let first = q.take_used(&g.ram).len();
    // Each chain reads its 64 descriptors and the one naming the table.
    assert_eq!(first, ROUND_WORK.div_ceil(per_chain + 1) as usize);
    assert!(m.has_pending());
    drain(&mut m, &mut g);
    assert_eq!(first + q.take_used(&g.ram).len(), n);
}
