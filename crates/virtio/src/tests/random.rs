//! Randomized robustness with a deterministic xorshift generator (no
//! external crates): garbage rings never panic and always end in a clean
//! state; random but valid block traffic matches a model disk.

use std::vec::Vec;

use vdev::{AccessWidth, MmioDevice};

use super::*;
use crate::blk::{S_OK, T_IN, T_OUT};
use crate::queue::VIRTQ_DESC_F_INDIRECT;
use crate::{Blk, Console, Net, Rng};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

const SMALL_RAM: usize = 64 * 1024;

/// An address mostly inside the small RAM, sometimes just outside or wild.
fn addr(r: &mut XorShift) -> u64 {
    match r.below(16) {
        0 => r.next(),
        1 => RAM_BASE + SMALL_RAM as u64 - r.below(64),
        2 => RAM_BASE - r.below(64),
        _ => RAM_BASE + r.below(SMALL_RAM as u64),
    }
}

/// Sets up every queue of `m` at random (mostly valid) places, fills the
/// rings with random descriptors, kicks, polls; checks the invariants.
fn garbage_round<D: VirtioDevice>(m: &mut VirtioMmio<D>, r: &mut XorShift) -> VecRam {
    let chunk = [4096, 512, 64][r.below(3) as usize];
    let mut ram = VecRam::with_chunk_size(Ipa(RAM_BASE), SMALL_RAM, chunk);
    // Random bytes everywhere, so headers and payloads are arbitrary too.
    let mut junk = std::vec![0u8; SMALL_RAM];
    junk.iter_mut().for_each(|b| *b = r.next() as u8);
    ram.write(Ipa(RAM_BASE), &junk).unwrap();

    w32(m, regs::STATUS, 0);
    w32(m, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    w32(m, regs::DRIVER_FEATURES_SEL, 0);
    w32(m, regs::DRIVER_FEATURES, r.next() as u32 & (3 << 28));
    w32(m, regs::DRIVER_FEATURES_SEL, 1);
    w32(m, regs::DRIVER_FEATURES, 1);
    w32(m, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
    let mut queues = Vec::new();
    for q in 0..4u32 {
        w32(m, regs::QUEUE_SEL, q);
        let max = r32(m, regs::QUEUE_NUM_MAX);
        if max == 0 {
            break;
        }
        let size = if r.chance(20) { r.below(300) as u32 } else { 1 << r.below(6) };
        let n = u64::from(size);
        let (desc, avail, used) = if r.chance(10) {
            (addr(r), addr(r), addr(r))
        } else {
            let base = RAM_BASE + r.below(SMALL_RAM as u64 / 2) / 16 * 16;
            (base, base + 16 * n, (base + 16 * n + 6 + 2 * n + 2).next_multiple_of(4))
        };
        w32(m, regs::QUEUE_NUM, size);
        for (lo, a) in [
            (regs::QUEUE_DESC_LOW, desc),
            (regs::QUEUE_DRIVER_LOW, avail),
            (regs::QUEUE_DEVICE_LOW, used),
        ] {
            w32(m, lo, a as u32);
            w32(m, lo + 4, (a >> 32) as u32);
        }
        w32(m, regs::QUEUE_READY, 1);
        queues.push((desc, avail, used, size));
    }
    add_status(m, status::DRIVER_OK);

    // Plausible descriptors in the table (the random bytes make the rest).
    for &(desc, avail, _, size) in &queues {
        for i in 0..size.min(64) {
            let flags = match r.below(8) {
                0 => r.next() as u16,
                1 => VIRTQ_DESC_F_INDIRECT,
                2..=4 => VIRTQ_DESC_F_WRITE,
                5 => VIRTQ_DESC_F_NEXT,
                _ => VIRTQ_DESC_F_WRITE | VIRTQ_DESC_F_NEXT,
            };
            let len = if r.chance(8) { r.next() as u32 } else { r.below(600) as u32 };
            let next = r.below(u64::from(size) + 2) as u16;
            let at = desc + 16 * u64::from(i);
            let _ = ram.write_obj(Ipa(at), addr(r));
            let _ = ram.write_obj(Ipa(at + 8), len);
            let _ = ram.write_obj(Ipa(at + 12), flags);
            let _ = ram.write_obj(Ipa(at + 14), next);
        }
        let _ = ram.write_obj(Ipa(avail), 0u16);
        let _ = ram.write_obj(Ipa(avail + 2), r.below(u64::from(size) + 3) as u16);
    }
    for _ in 0..3 {
        for q in 0..queues.len() as u32 {
            w32(m, regs::QUEUE_NOTIFY, q);
        }
        m.poll(&mut ram);
        // Random config-space and register traffic must not disturb either.
        let off = r.below(0x200);
        let w = [AccessWidth::Byte, AccessWidth::Half, AccessWidth::Word, AccessWidth::Double]
            [r.below(4) as usize];
        let _ = m.read(off, w);
        if off != regs::STATUS && off != regs::QUEUE_READY {
            let _ = m.write(off, w, r.next());
        }
    }

    // Invariants: a device in NEEDS_RESET says why; otherwise every queue
    // returned at most what was made available.
    if m.needs_reset() {
        assert!(m.take_error().is_some());
    }
    for i in 0..queues.len() {
        let q = m.queue(i).unwrap();
        assert!(q.used_idx() <= q.next_avail(), "queue {i} returned more than it took");
    }
    ram
}

#[test]
fn garbage_rings_never_panic() {
    let mut r = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut resets = 0;
    for round in 0..400 {
        match round % 4 {
            0 => {
                let mut m = VirtioMmio::new(Rng::new(|b: &mut [u8]| b.fill(1)));
                garbage_round(&mut m, &mut r);
                resets += m.stats().transport.needs_reset;
            }
            1 => {
                let mut m = VirtioMmio::new(Console::new(|_: &[u8]| {}));
                m.device_mut().push_input(b"input");
                garbage_round(&mut m, &mut r);
                resets += m.stats().transport.needs_reset;
            }
            2 => {
                let mut m = VirtioMmio::new(Blk::new(std::vec![0u8; 8192]));
                garbage_round(&mut m, &mut r);
                resets += m.stats().transport.needs_reset;
            }
            _ => {
                let mut m =
                    VirtioMmio::new(Net::new([2, 0, 0, 0, 0, 1], |_: GuestBytes<'_>, _| {}));
                let mut ram = garbage_round(&mut m, &mut r);
                let frame = std::vec![0x42u8; r.below(2000) as usize];
                m.deliver(&frame, None, &mut ram);
                resets += m.stats().transport.needs_reset;
            }
        }
    }
    // The generator must actually reach the error paths.
    assert!(resets > 100, "only {resets} rounds ended in NEEDS_RESET");
}

#[test]
fn random_block_traffic_matches_a_model() {
    const SECTORS: u64 = 32;
    let mut r = XorShift(12345);
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Blk::new(std::vec![0u8; SECTORS as usize * 512]));
    let mut q = init(&mut m, &mut g, ALL, 64).remove(0);
    let mut model = std::vec![0u8; SECTORS as usize * 512];
    // Reusable guest memory for requests.
    let hdr = g.alloc(16, 8);
    let data = g.alloc(8 * 512 + 1, 1);
    for _ in 0..500 {
        let n = 1 + r.below(8);
        let sector = r.below(SECTORS - n + 1);
        let len = n * 512;
        let write = r.chance(2);
        let mut h = [0u8; 16];
        h[..4].copy_from_slice(&(if write { T_OUT } else { T_IN }).to_le_bytes());
        h[8..].copy_from_slice(&sector.to_le_bytes());
        g.ram.write(Ipa(hdr), &h).unwrap();
        let off = sector as usize * 512..(sector * 512 + len) as usize;
        if write {
            let bytes: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
            g.ram.write(Ipa(data), &bytes).unwrap();
            model[off.clone()].copy_from_slice(&bytes);
        }
        // Cut [data, data + len + 1) into random descriptors; the status
        // byte is the last writable byte.
        let mut bufs = std::vec![(hdr, 16u32, false)];
        let total = len + 1;
        let mut at = 0;
        let mut cuts = Vec::new();
        while at < total {
            let piece = (1 + r.below(1200)).min(total - at);
            cuts.push((data + at, piece as u32));
            at += piece;
        }
        if write {
            // Payload readable, status writable: split at len.
            let mut at = 0;
            while at < len {
                let piece = (1 + r.below(1200)).min(len - at);
                bufs.push((data + at, piece as u32, false));
                at += piece;
            }
            bufs.push((data + len, 1, true));
        } else {
            bufs.extend(cuts.iter().map(|&(a, l)| (a, l, true)));
        }
        let indirect = r.chance(2) && bufs.len() <= 64;
        if indirect {
            q.add_indirect(&mut g, &bufs);
        } else if bufs.len() <= 64 {
            q.add(&mut g.ram, &bufs);
        } else {
            continue;
        }
        kick(&mut m, &mut g, 0);
        assert!(!m.needs_reset(), "{:?}", m.last_error());
        let used = q.take_used(&g.ram);
        assert_eq!(used.len(), 1);
        assert_eq!(g.read(data + len, 1), [S_OK]);
        if !write {
            assert_eq!(g.read(data, len as usize), model[off]);
            assert_eq!(used[0].1, total as u32);
        }
    }
    let disk = disk_bytes(m.device_mut().backend_mut(), 0, SECTORS as usize * 512);
    assert_eq!(disk, model);
}
