//! Fuzzes the split-queue parser and the four devices with arbitrary guest
//! memory and an arbitrary sequence of driver actions.
//!
//! Input layout: 16 control bytes (device type, features, chunk size,
//! queue size, ring placement), then up to 64 action bytes, then the
//! initial contents of guest RAM (64 KiB; missing bytes are zero). The
//! rings live inside that RAM, so the fuzzer writes descriptors, ring
//! indices, block headers and frames directly.
//!
//! Checked on every input, besides "no panic": a chain the parser accepts
//! lies entirely in RAM with readable before writable and consistent
//! lengths; a device in DEVICE_NEEDS_RESET has recorded why; a queue never
//! returns more chains than it took. virtio-blk runs on a RAM disk or on a
//! disk that completes when an action says so, in any order, across resets:
//! what reaches that backend lies in the disk and in RAM, and the device
//! never holds more requests than its queue.
#![no_main]

use addr::Ipa;
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, Mutex};
use vdev::{AccessWidth, MmioDevice};
use virtio::mmio::{regs, status};
use virtio::{
    Blk, BlockBackend, BlockError, Console, DescChain, GuestBytes, GuestRam, Net, Op, PartialCsum,
    Queue, Request, Rng, Segment, Submit, Token, VecRam, VirtioDevice, VirtioMmio, features,
};

const RAM_BASE: u64 = 0x4000_0000;
const RAM_SIZE: usize = 64 * 1024;
const CTL: usize = 16;
const MAX_OPS: usize = 64;

struct Input<'a> {
    ctl: &'a [u8],
    ops: &'a [u8],
    mem: &'a [u8],
}

fn split(data: &[u8]) -> Option<Input<'_>> {
    let (ctl, rest) = data.split_at_checked(CTL)?;
    let n_ops = usize::from(ctl[15]) % (MAX_OPS + 1);
    let (ops, mem) = rest.split_at(n_ops.min(rest.len()));
    Some(Input { ctl, ops, mem })
}

fn ram(inp: &Input) -> VecRam {
    let chunk = [64, 512, 4096, 2 << 20][usize::from(inp.ctl[2]) % 4];
    let mut ram = VecRam::with_chunk_size(Ipa(RAM_BASE), RAM_SIZE, chunk);
    let n = inp.mem.len().min(RAM_SIZE);
    ram.write(Ipa(RAM_BASE), &inp.mem[..n]).unwrap();
    ram
}

fn u16_at(b: &[u8], i: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Ring addresses from the control bytes: usually 16-aligned offsets in the
/// first 2 KiB of RAM, raw (possibly misaligned or outside RAM) when a bit of
/// `ctl[10]` says so.
fn rings(ctl: &[u8]) -> [u64; 3] {
    let mut out = [0; 3];
    for (k, a) in out.iter_mut().enumerate() {
        let v = u16_at(ctl, 4 + 2 * k);
        *a = if ctl[10] & (1 << k) != 0 {
            RAM_BASE + v * 4 - 0x1000 // may fall below RAM, unaligned after wraps
        } else {
            // Near the start, where even a short input supplies the bytes.
            RAM_BASE + (v % 0x800) / 16 * 16
        };
    }
    out
}

/// The parser alone, on a `Queue` set up directly.
fn parse_only(inp: &Input) {
    let mut ram = ram(inp);
    let size = 1u32 << (inp.ctl[3] % 9);
    let [desc, avail, used] = rings(inp.ctl);
    let mut q = Queue::new(256);
    q.set_size(size);
    q.set_desc_addr(desc);
    q.set_avail_addr(avail);
    q.set_used_addr(used);
    let f = features::VERSION_1 | (u64::from(inp.ctl[1] & 3) << 28);
    if q.enable(f).is_err() {
        return;
    }
    let mut chain = DescChain::new();
    for _ in 0..64 {
        q.start_round();
        match q.pop(&mut ram, &mut chain) {
            Ok(true) => {
                let mut r = 0u64;
                for s in chain.readable() {
                    assert!(ram.check(s.addr, s.len.into()).is_ok());
                    r += u64::from(s.len);
                }
                let mut w = 0u64;
                for s in chain.writable() {
                    assert!(ram.check(s.addr, s.len.into()).is_ok());
                    w += u64::from(s.len);
                }
                assert_eq!(r, u64::from(chain.readable_len()));
                assert_eq!(w, u64::from(chain.writable_len()));
                assert!(r + w <= u64::from(u32::MAX));
                assert!(chain.readable().len() + chain.writable().len() <= size as usize);
                if q.add_used(&mut ram, chain.head(), chain.writable_len()).is_err() {
                    return;
                }
            }
            Ok(false) | Err(_) => return,
        }
    }
}

fn w32<D: VirtioDevice>(m: &mut VirtioMmio<D>, off: u64, v: u32) {
    m.write(off, AccessWidth::Word, v.into()).unwrap();
}

/// A driver that sets the device up from the control bytes and then
/// performs the actions.
fn drive<D: VirtioDevice>(
    mut m: VirtioMmio<D>,
    inp: &Input,
    extra: &mut dyn FnMut(&mut VirtioMmio<D>, &mut VecRam, u8),
) {
    let mut ram = ram(inp);
    let ctl = inp.ctl;
    w32(&mut m, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    // Mostly a subset of what is offered, so that FEATURES_OK succeeds.
    let mut f = u32::from_le_bytes([ctl[11], ctl[12], ctl[13], ctl[1]]);
    if ctl[14] & 1 == 0 {
        f &= m.offered_features() as u32;
    }
    w32(&mut m, regs::DRIVER_FEATURES_SEL, 0);
    w32(&mut m, regs::DRIVER_FEATURES, f);
    w32(&mut m, regs::DRIVER_FEATURES_SEL, 1);
    w32(&mut m, regs::DRIVER_FEATURES, 1);
    w32(&mut m, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK);
    let [desc, avail, used] = rings(ctl);
    let nq = m.device().queue_max_sizes().len();
    for q in 0..nq {
        // A second queue sits 2 KiB further on.
        let shift = 0x800 * q as u64;
        w32(&mut m, regs::QUEUE_SEL, q as u32);
        w32(&mut m, regs::QUEUE_NUM, 1 << (ctl[3] % 9));
        for (reg, a) in [
            (regs::QUEUE_DESC_LOW, desc + shift),
            (regs::QUEUE_DRIVER_LOW, avail + shift),
            (regs::QUEUE_DEVICE_LOW, used + shift),
        ] {
            w32(&mut m, reg, a as u32);
            w32(&mut m, reg + 4, (a >> 32) as u32);
        }
        w32(&mut m, regs::QUEUE_READY, 1);
    }
    let s = m.status();
    w32(&mut m, regs::STATUS, s | status::DRIVER_OK);

    let mut ops = inp.ops.iter().copied();
    while let Some(op) = ops.next() {
        let arg = ops.next().unwrap_or(0);
        match op % 8 {
            0 | 1 => {
                let q = u32::from(arg) % (nq as u32 + 1);
                w32(&mut m, regs::QUEUE_NOTIFY, q);
                m.poll(&mut ram);
            }
            2 => m.poll(&mut ram),
            3 => {
                let off = u64::from(arg) * 2;
                let width = [AccessWidth::Byte, AccessWidth::Half, AccessWidth::Word]
                    [usize::from(op >> 6) % 3];
                let _ = m.read(off, width);
            }
            4 => {
                // Any register write, including Status (a reset) and QueueReady.
                let off = u64::from(arg) & !3;
                let _ = m.write(off, AccessWidth::Word, u64::from(op) * 0x0101_0101);
            }
            5 => {
                let s = m.interrupt_status();
                w32(&mut m, regs::INTERRUPT_ACK, s);
            }
            _ => extra(&mut m, &mut ram, arg),
        }
        if m.needs_reset() {
            assert!(m.last_error().is_some());
        }
        for q in 0..nq {
            let q = m.queue(q).unwrap();
            assert!(q.used_idx() <= q.next_avail(), "returned more than taken");
        }
    }
}

const DISK: u64 = 16 * 512;

/// A request the disk holds: its token, what it asks and the guest buffers it names.
type Held = (Token, Op, Vec<Segment>);

/// A disk whose requests complete when the fuzzer's actions say.
#[derive(Clone, Default)]
struct Later(Arc<Mutex<Vec<Held>>>);

impl BlockBackend for Later {
    fn size(&self) -> u64 {
        DISK
    }
    fn submit(&mut self, req: &Request<'_>, ram: &mut dyn GuestRam) -> Submit {
        assert!(req.offset + req.len() <= DISK, "a request outside the disk reached the backend");
        for s in req.segments {
            assert!(ram.check(s.addr, s.len.into()).is_ok(), "a segment outside RAM");
        }
        self.0.lock().unwrap().push((req.token, req.op, req.segments.to_vec()));
        Submit::Pending
    }
}

/// Completes the pending request `arg` picks, after "reading" into its
/// buffers; the high bit makes it fail.
fn complete_one(later: &Later, m: &mut VirtioMmio<Blk>, ram: &mut VecRam, arg: u8) {
    let mut pending = later.0.lock().unwrap();
    if pending.is_empty() {
        return;
    }
    let pick = usize::from(arg) % pending.len();
    let (token, op, segs) = pending.remove(pick);
    drop(pending);
    if op == Op::Read {
        for s in &segs {
            ram.fill(s.addr, s.len.into(), arg).unwrap();
        }
    }
    let result = if arg & 0x80 == 0 { Ok(()) } else { Err(BlockError) };
    m.complete(token, result, ram);
    assert!(m.device().in_flight() <= usize::from(Blk::QUEUE_SIZE));
}

fuzz_target!(|data: &[u8]| {
    let Some(inp) = split(data) else {
        return;
    };
    parse_only(&inp);
    let mut rng_state = 0x1234_5678u32;
    match inp.ctl[0] % 4 {
        0 => drive(
            VirtioMmio::new(Rng::new(move |b: &mut [u8]| {
                for x in b {
                    rng_state = rng_state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    *x = (rng_state >> 16) as u8;
                }
            })),
            &inp,
            &mut |_, _, _| {},
        ),
        1 => drive(VirtioMmio::new(Console::new(|_: &[u8]| {})), &inp, &mut |m, _, arg| {
            m.device_mut().push_input(&[arg; 37]);
        }),
        2 if inp.ctl[14] & 2 == 0 => {
            drive(VirtioMmio::new(Blk::new(vec![0u8; DISK as usize])), &inp, &mut |_, _, _| {})
        }
        2 => {
            let later = Later::default();
            drive(VirtioMmio::new(Blk::new(later.clone())), &inp, &mut |m, ram, arg| {
                complete_one(&later, m, ram, arg)
            })
        }
        _ => drive(
            VirtioMmio::new(Net::new([2, 0, 0, 0, 0, 1], |f: GuestBytes<'_>, csum| {
                assert!(f.len() >= 14);
                assert_eq!(f.to_vec().map(|v| v.len()), Ok(f.len()), "a sent frame is in RAM");
                // A pending checksum the device accepted lies in its frame.
                if let Some(c) = csum {
                    assert!(usize::from(c.start) + usize::from(c.offset) + 2 <= f.len());
                }
            })),
            &inp,
            &mut |m, ram, arg| {
                let frame = vec![arg; usize::from(arg) * 8];
                // Every other frame with a checksum to complete (or pass on), sometimes
                // reaching past the frame's end.
                let csum = (arg & 1 != 0)
                    .then(|| PartialCsum { start: u16::from(arg) * 3, offset: u16::from(arg) });
                m.deliver(&frame, csum, ram);
            },
        ),
    }
});
