//! virtio-console and virtio-rng.

use std::sync::{Arc, Mutex};
use std::vec::Vec;

use vdev::{AccessWidth, MmioDevice};

use super::*;
use crate::console::F_EMERG_WRITE;
use crate::{Console, Rng, device_id};

type Out = Arc<Mutex<Vec<u8>>>;

fn console() -> (VirtioMmio<Console>, Out) {
    let out: Out = Arc::default();
    let o = out.clone();
    (VirtioMmio::new(Console::new(move |b: &[u8]| o.lock().unwrap().extend_from_slice(b))), out)
}

#[test]
fn console_transmit_goes_to_sink() {
    let mut g = Guest::new();
    let (mut m, out) = console();
    assert_eq!(r32(&mut m, regs::DEVICE_ID), device_id::CONSOLE);
    let mut qs = init(&mut m, &mut g, ALL, 8);
    let a = g.buf(b"hello, ");
    let b = g.straddling(6, 3);
    g.ram.write(Ipa(b), b"world\n").unwrap();
    qs[1].add(&mut g.ram, &[(a, 7, false), (b, 6, false)]);
    kick(&mut m, &mut g, Console::TX as u16);
    assert_eq!(&out.lock().unwrap()[..], b"hello, world\n");
    assert_eq!(qs[1].take_used(&g.ram), [(0, 0)]);
    assert_eq!(m.stats().device.bytes_from_guest, 13);
}

#[test]
fn console_transmit_longer_than_a_piece() {
    let mut g = Guest::new();
    let (mut m, out) = console();
    let mut qs = init(&mut m, &mut g, ALL, 8);
    let text: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let a = g.straddling(600, 100);
    g.ram.write(Ipa(a), &text[..600]).unwrap();
    let b = g.buf(&text[600..]);
    qs[1].add(&mut g.ram, &[(a, 600, false), (b, 400, false)]);
    kick(&mut m, &mut g, Console::TX as u16);
    // More than one round's output: the rest on the next poll.
    assert!(m.has_pending());
    m.poll(&mut g.ram);
    assert_eq!(&out.lock().unwrap()[..], &text[..]);
    assert_eq!(qs[1].take_used(&g.ram), [(0, 0)]);
}

#[test]
fn console_input_waits_for_buffers() {
    let mut g = Guest::new();
    let (mut m, _) = console();
    let mut qs = init(&mut m, &mut g, ALL, 8);
    assert_eq!(m.push_input(b"ls -l\n", &mut g.ram), 6);
    assert!(m.has_pending());
    assert_eq!(m.device().pending_input(), 6, "no receive buffers yet");
    // Two 4-byte buffers: the input is split over them, the rest waits.
    let b1 = g.alloc(4, 1);
    let b2 = g.alloc(4, 1);
    qs[0].add(&mut g.ram, &[(b1, 4, true)]);
    qs[0].add(&mut g.ram, &[(b2, 4, true)]);
    kick(&mut m, &mut g, Console::RX as u16);
    assert_eq!(qs[0].take_used(&g.ram), [(0, 4), (1, 2)]);
    assert_eq!((g.read(b1, 4), g.read(b2, 2)), (b"ls -".to_vec(), b"l\n".to_vec()));
    assert!(m.irq_level());
    assert!(!m.has_pending());
}

#[test]
fn console_input_is_bounded() {
    let (mut m, _) = console();
    let big = std::vec![b'x'; Console::INPUT_CAP + 10];
    assert_eq!(m.device_mut().push_input(&big), Console::INPUT_CAP);
    assert_eq!(m.device_mut().push_input(b"more"), 0);
}

#[test]
fn console_input_wraps_its_ring_buffer() {
    let mut g = Guest::new();
    let (mut m, _) = console();
    let mut qs = init(&mut m, &mut g, ALL, 8);
    let mut expect = Vec::new();
    for round in 0..6u8 {
        let chunk: Vec<u8> = (0..1500).map(|i| (i as u8).wrapping_mul(round)).collect();
        assert_eq!(m.device_mut().push_input(&chunk), 1500);
        expect.extend_from_slice(&chunk);
        let b = g.alloc(1500, 1);
        qs[0].add(&mut g.ram, &[(b, 1500, true)]);
        m.poll(&mut g.ram);
        let used = qs[0].take_used(&g.ram);
        assert_eq!(used.len(), 1);
        assert_eq!(g.read(b, 1500), expect[round as usize * 1500..][..1500]);
    }
}

#[test]
fn console_emergency_write() {
    let (mut m, out) = console();
    assert_ne!(m.offered_features() & F_EMERG_WRITE, 0);
    m.write(0x108, AccessWidth::Word, u64::from(b'!')).unwrap();
    assert_eq!(&out.lock().unwrap()[..], b"!");
    assert_eq!(m.read(0x104, AccessWidth::Word), Ok(1), "max_nr_ports");
}

#[test]
fn rng_fills_buffers_from_the_source() {
    let mut g = Guest::new();
    let mut counter = 0u8;
    let mut m = VirtioMmio::new(Rng::new(move |b: &mut [u8]| {
        for x in b {
            counter = counter.wrapping_add(1);
            *x = counter;
        }
    }));
    let mut qs = init(&mut m, &mut g, ALL, 8);
    // Two buffers, the first straddling a chunk: one stream of bytes.
    let a = g.straddling(10, 4);
    let b = g.alloc(3, 1);
    qs[0].add(&mut g.ram, &[(a, 10, true), (b, 3, true)]);
    kick(&mut m, &mut g, 0);
    assert_eq!(qs[0].take_used(&g.ram), [(0, 13)]);
    let mut got = g.read(a, 10);
    got.extend(g.read(b, 3));
    assert_eq!(got, (1..=13).collect::<Vec<u8>>());
}

#[test]
fn rng_caps_request_size() {
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Rng::new(|b: &mut [u8]| b.fill(3)));
    let mut qs = init(&mut m, &mut g, ALL, 8);
    let a = g.alloc(Rng::MAX_REQUEST as u64 + 100, 1);
    qs[0].add(&mut g.ram, &[(a, Rng::MAX_REQUEST + 100, true)]);
    kick(&mut m, &mut g, 0);
    // At most MAX_REQUEST, and no more than a round's work buys: a short answer.
    let [(0, n)] = qs[0].take_used(&g.ram)[..] else { panic!("one request completed") };
    let round = u64::from(crate::queue::ROUND_WORK) * Rng::BYTES_PER_UNIT;
    assert!(n >= 256 && u64::from(n) <= round.min(Rng::MAX_REQUEST.into()), "{n}");
    assert!(g.read(a, n as usize).iter().all(|&b| b == 3));
    assert_eq!(g.read(a + u64::from(n), 1), [0]);
}
