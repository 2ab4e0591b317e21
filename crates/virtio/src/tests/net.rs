//! virtio-net: transmit to the sink, receive from the hypervisor, and two
//! NICs joined by the switch.

use std::sync::{Arc, Mutex};
use std::vec;
use std::vec::Vec;

use vdev::{AccessWidth, MmioDevice};

use super::*;
use crate::PartialCsum;
use crate::net::{F_CSUM, F_GUEST_CSUM, F_MAC, F_MTU, F_STATUS, HDR_F_NEEDS_CSUM, HDR_LEN};
use crate::switch::Switch;
use crate::{Net, device_id};

type Frames = Arc<Mutex<Vec<Vec<u8>>>>;
/// The pending checksum of each sent frame, in order.
type Csums = Arc<Mutex<Vec<Option<PartialCsum>>>>;

struct Nic {
    g: Guest,
    m: VirtioMmio<Net>,
    rx: DriverQueue,
    tx: DriverQueue,
    sent: Frames,
    csums: Csums,
}

fn nic(mac: [u8; 6]) -> Nic {
    let sent: Frames = Arc::default();
    let s = sent.clone();
    let mut g = Guest::new();
    let csums: Csums = Arc::default();
    let c = csums.clone();
    let mut m = VirtioMmio::new(Net::new(mac, move |f: GuestBytes<'_>, csum| {
        s.lock().unwrap().push(f.to_vec().unwrap());
        c.lock().unwrap().push(csum);
    }));
    let mut qs = init(&mut m, &mut g, ALL, 16);
    let tx = qs.remove(1);
    let rx = qs.remove(0);
    Nic { g, m, rx, tx, sent, csums }
}

fn frame(dst: [u8; 6], src: [u8; 6], payload: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(payload);
    f
}

impl Nic {
    /// Posts a frame for transmission with the header in its own buffer.
    fn send(&mut self, f: &[u8]) {
        let h = self.g.buf(&[0; HDR_LEN]);
        let d = self.g.buf(f);
        self.tx.add(&mut self.g.ram, &[(h, HDR_LEN as u32, false), (d, f.len() as u32, false)]);
        kick(&mut self.m, &mut self.g, Net::TX as u16);
    }

    /// Posts `n` receive buffers of `len` bytes; returns their addresses.
    fn post_rx(&mut self, n: usize, len: u32) -> Vec<u64> {
        let bufs: Vec<u64> = (0..n).map(|_| self.g.alloc(len.into(), 2)).collect();
        for &b in &bufs {
            self.rx.add(&mut self.g.ram, &[(b, len, true)]);
        }
        kick(&mut self.m, &mut self.g, Net::RX as u16);
        bufs
    }

    fn take_sent(&self) -> Vec<Vec<u8>> {
        core::mem::take(&mut *self.sent.lock().unwrap())
    }

    /// Frames received so far: (header, frame) of each used RX buffer.
    fn received(&mut self, bufs: &[u64]) -> Vec<([u8; HDR_LEN], Vec<u8>)> {
        self.rx
            .take_used(&self.g.ram)
            .into_iter()
            .map(|(id, len)| {
                let b = bufs[id as usize % bufs.len()];
                let all = self.g.read(b, len as usize);
                (all[..HDR_LEN].try_into().unwrap(), all[HDR_LEN..].to_vec())
            })
            .collect()
    }
}

const A: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xa];
const B: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xb];
const C: [u8; 6] = [0x52, 0x54, 0, 0, 0, 0xc];
const BCAST: [u8; 6] = [0xff; 6];

#[test]
fn config_space() {
    let mut n = nic(A);
    assert_eq!(r32(&mut n.m, regs::DEVICE_ID), device_id::NET);
    for (i, &b) in A.iter().enumerate() {
        assert_eq!(n.m.read(0x100 + i as u64, AccessWidth::Byte), Ok(b.into()));
    }
    assert_eq!(n.m.read(0x106, AccessWidth::Half), Ok(1));
    let f = n.m.negotiated_features().unwrap();
    assert_eq!(f & (F_MAC | F_STATUS), F_MAC | F_STATUS);
    assert_eq!(f & 0x3fff, (F_CSUM | F_GUEST_CSUM | F_MAC) & 0x3fff, "checksums, no GSO");
}

/// An MTU given to the NIC is announced; without one, none is.
#[test]
fn mtu_is_announced_only_when_given() {
    let mut n = nic(A);
    assert_eq!(n.m.offered_features() & F_MTU, 0);
    assert_eq!(n.m.read(0x10a, AccessWidth::Half), Ok(0));
    let mut m = VirtioMmio::new(Net::new(A, |_: GuestBytes<'_>, _| {}).with_mtu(Some(65535)));
    assert_ne!(m.offered_features() & F_MTU, 0);
    assert_eq!(m.read(0x10a, AccessWidth::Half), Ok(65535));
    assert_eq!(m.read(0x106, AccessWidth::Half), Ok(1), "status stays where it was");
    // A frame of that MTU reaches a receive buffer made of pages, as Linux
    // posts them for a large MTU.
    let mut g = Guest::new();
    let mut rx = init(&mut m, &mut g, ALL, 32).remove(0);
    let f = frame(A, B, &[0x5a; 65535]); // an IP packet of the MTU
    assert_eq!(f.len(), Net::MAX_FRAME);
    let pages: Vec<u64> = (0..17).map(|_| g.alloc(4096, 4096)).collect();
    let bufs: Vec<_> = pages.iter().map(|&p| (p, 4096, true)).collect();
    rx.add(&mut g.ram, &bufs);
    assert!(m.deliver(&f, None, &mut g.ram));
    let total = (HDR_LEN + f.len()) as u32;
    assert_eq!(rx.take_used(&g.ram), [(0, total)]);
    let back: Vec<u8> = pages.iter().flat_map(|&p| g.read(p, 4096)).collect();
    assert_eq!(&back[HDR_LEN..total as usize], &f[..]);
}

#[test]
fn transmit() {
    let mut n = nic(A);
    let f = frame(B, A, b"hello");
    n.send(&f);
    assert_eq!(n.take_sent(), core::slice::from_ref(&f));
    assert_eq!(n.tx.take_used(&n.g.ram), [(0, 0)]);
    assert!(n.m.irq_level());
    // Header and frame in one descriptor straddling a chunk.
    let mut buf = std::vec![0u8; HDR_LEN];
    buf.extend_from_slice(&f);
    let a = n.g.straddling(buf.len() as u64, 20);
    n.g.ram.write(Ipa(a), &buf).unwrap();
    n.tx.add(&mut n.g.ram, &[(a, buf.len() as u32, false)]);
    kick(&mut n.m, &mut n.g, 1);
    assert_eq!(n.take_sent(), [f]);
    let st = n.m.stats().device;
    assert_eq!((st.requests, st.bytes_from_guest, st.errors), (2, 38, 0));
}

#[test]
fn transmit_with_offload_or_bad_size_is_counted_not_sent() {
    let mut n = nic(A);
    let f = frame(B, A, b"x");
    for hdr in [[1u8, 0, 0, 0, 0, 0, 14, 0, 6, 0], [0, 1, 0, 0, 0, 0, 0, 0, 0, 0], [2; 10]] {
        // NEEDS_CSUM with the checksum field past the frame's end, GSO_TCPV4 (not offered),
        // and DATA_VALID (a receive flag) with garbage.
        let mut h = [0u8; HDR_LEN];
        h[..10].copy_from_slice(&hdr);
        let hb = n.g.buf(&h);
        let d = n.g.buf(&f);
        n.tx.add(&mut n.g.ram, &[(hb, HDR_LEN as u32, false), (d, f.len() as u32, false)]);
    }
    let short = n.g.buf(&[0; 8]);
    n.tx.add(&mut n.g.ram, &[(short, 8, false)]);
    kick(&mut n.m, &mut n.g, 1);
    assert!(n.take_sent().is_empty());
    assert_eq!(n.tx.take_used(&n.g.ram).len(), 4, "buffers returned all the same");
    assert_eq!(n.m.stats().device.errors, 4);
    assert!(!n.m.needs_reset());
}

/// An IPv4/UDP frame from B to A whose checksum field holds the pseudo-header's sum, as a
/// Linux sender leaves it with the checksum offloaded, and its pending checksum.
fn udp_partial(payload: &[u8]) -> (Vec<u8>, PartialCsum) {
    let udp_len = 8 + payload.len() as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1];
    ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
    let mut udp = vec![0x30, 0x39, 0x00, 0x35];
    udp.extend_from_slice(&udp_len.to_be_bytes());
    // Pseudo-header: addresses, protocol, UDP length; stored folded, not complemented.
    let words = [0x0a00, 0x0002, 0x0a00, 0x0001, 17, u32::from(udp_len)];
    let mut sum: u32 = words.iter().sum();
    sum = (sum & 0xffff) + (sum >> 16);
    udp.extend_from_slice(&(sum as u16).to_be_bytes());
    udp.extend_from_slice(payload);
    ip.extend_from_slice(&udp);
    (frame(A, B, &ip), PartialCsum { start: 14 + 20, offset: 6 })
}

/// The Internet checksum of `bytes` (RFC 1071), 0 when they include a correct one.
fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A UDP datagram's checksum over its pseudo-header and itself (0 when correct).
fn udp_check(f: &[u8]) -> u16 {
    let udp = &f[34..];
    let mut pseudo = f[26..34].to_vec(); // source and destination addresses
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
    pseudo.extend_from_slice(udp);
    internet_checksum(&pseudo)
}

/// A frame whose checksum the driver left to the device reaches the sink with it.
#[test]
fn transmit_with_checksum_left_to_the_device() {
    let mut n = nic(B);
    let (f, csum) = udp_partial(b"odd length!");
    let mut h = [0u8; HDR_LEN];
    h[0] = HDR_F_NEEDS_CSUM;
    h[6..8].copy_from_slice(&csum.start.to_le_bytes());
    h[8..10].copy_from_slice(&csum.offset.to_le_bytes());
    let hb = n.g.buf(&h);
    let d = n.g.buf(&f);
    n.tx.add(&mut n.g.ram, &[(hb, HDR_LEN as u32, false), (d, f.len() as u32, false)]);
    kick(&mut n.m, &mut n.g, 1);
    assert_eq!(n.take_sent(), [f]);
    assert_eq!(*n.csums.lock().unwrap(), [Some(csum)]);
}

/// A frame with a pending checksum arrives as it is for a driver that takes such frames
/// (GUEST_CSUM), and with its checksum completed for one that does not.
#[test]
fn receive_with_a_pending_checksum() {
    for payload in [&b"even"[..], b"odd length!", &[0xff; 1000]] {
        let (f, csum) = udp_partial(payload);
        assert_ne!(udp_check(&f), 0, "the frame's checksum is pending");

        let mut n = nic(A);
        let bufs = n.post_rx(1, 1526);
        assert!(n.m.deliver(&f, Some(csum), &mut n.g.ram));
        let (hdr, got) = n.received(&bufs).remove(0);
        assert_eq!(hdr[0], HDR_F_NEEDS_CSUM);
        assert_eq!(hdr[6..10], [34, 0, 6, 0], "csum_start, csum_offset");
        assert_eq!(got, f, "left to the guest");

        let mut g = Guest::new();
        let mut m = VirtioMmio::new(Net::new(A, |_: GuestBytes<'_>, _| {}));
        let mut rx = init(&mut m, &mut g, ALL & !F_GUEST_CSUM, 16).remove(0);
        let buf = g.alloc(1526, 2);
        rx.add(&mut g.ram, &[(buf, 1526, true)]);
        assert!(m.deliver(&f, Some(csum), &mut g.ram));
        let got = g.read(buf, HDR_LEN + f.len());
        assert_eq!(got[0], 0, "no flags: the checksum is complete");
        let got = &got[HDR_LEN..];
        assert_eq!(udp_check(got), 0, "completed checksum verifies");
        assert_eq!((&got[..40], &got[42..]), (&f[..40], &f[42..]), "only the field changed");
    }
    // A checksum field outside the frame: dropped, not written past it.
    let mut n = nic(A);
    n.post_rx(1, 1526);
    let f = frame(A, B, &[0; 10]);
    assert!(!n.m.deliver(&f, Some(PartialCsum { start: 20, offset: 4 }), &mut n.g.ram));
}

#[test]
fn receive() {
    let mut n = nic(A);
    let bufs = n.post_rx(2, 1526);
    let f = frame(A, B, &[0x33; 100]);
    assert!(n.m.deliver(&f, None, &mut n.g.ram));
    assert!(n.m.irq_level());
    let got = n.received(&bufs);
    assert_eq!(got.len(), 1);
    let mut hdr = [0u8; HDR_LEN];
    hdr[10] = 1; // num_buffers
    assert_eq!(got[0], (hdr, f));
    assert_eq!(n.m.stats().device.bytes_to_guest, 114);
}

#[test]
fn receive_drops_without_buffers_link_or_room() {
    let mut n = nic(A);
    let f = frame(A, B, &[1; 200]);
    assert!(!n.m.deliver(&f, None, &mut n.g.ram), "no buffers");
    let bufs = n.post_rx(1, 100);
    assert!(!n.m.deliver(&f, None, &mut n.g.ram), "too small");
    let small = frame(A, B, &[2; 40]);
    assert!(n.m.deliver(&small, None, &mut n.g.ram), "the small buffer stayed posted");
    assert_eq!(n.received(&bufs)[0].1, small);
    n.post_rx(1, 1526);
    n.m.update_config(|net| net.set_link_up(false));
    assert!(!n.m.deliver(&small, None, &mut n.g.ram), "link down");
    assert!(!n.m.deliver(&[0; 10], None, &mut n.g.ram), "runt");
    assert_eq!(n.m.stats().device.dropped, 4);
    // Not live: dropped too.
    w32(&mut n.m, regs::STATUS, 0);
    assert!(!n.m.deliver(&small, None, &mut n.g.ram));
    assert_eq!(n.m.stats().device.dropped, 5);
}

#[test]
fn receive_into_chained_buffers_across_chunks() {
    let mut n = nic(A);
    let h = n.g.alloc(HDR_LEN as u64, 2);
    let d = n.g.straddling(1514, 700);
    n.rx.add(&mut n.g.ram, &[(h, HDR_LEN as u32, true), (d, 1514, true)]);
    let f = frame(A, B, &[9; 1500]);
    assert!(n.m.deliver(&f, None, &mut n.g.ram));
    assert_eq!(n.rx.take_used(&n.g.ram), [(0, 1526)]);
    assert_eq!(n.g.read(d, 1514), f);
}

/// Moves every frame sent by `nics[i]` through the switch to the others.
fn pump(sw: &mut Switch, nics: &mut [Nic], rx: &[Vec<u64>]) -> Vec<Vec<(usize, Vec<u8>)>> {
    let mut got: Vec<Vec<(usize, Vec<u8>)>> = (0..nics.len()).map(|_| Vec::new()).collect();
    for from in 0..nics.len() {
        for f in nics[from].take_sent() {
            for to in sw.forward(from, &f).iter() {
                assert_ne!(to, from, "never back to the source");
                let n = &mut nics[to];
                assert!(n.m.deliver(&f, None, &mut n.g.ram));
            }
        }
    }
    for (i, n) in nics.iter_mut().enumerate() {
        for (_, f) in n.received(&rx[i]) {
            got[i].push((i, f));
        }
    }
    got
}

#[test]
fn two_vms_through_the_switch() {
    let mut nics = std::vec![nic(A), nic(B), nic(C)];
    let rx: Vec<Vec<u64>> = nics.iter_mut().map(|n| n.post_rx(8, 1526)).collect();
    let mut sw = Switch::new(3, 16);
    for (port, mac) in [A, B, C].into_iter().enumerate() {
        sw.connect_vm(port, mac).unwrap();
    }

    // A broadcasts (ARP-like): B and C get it, A does not.
    let arp = frame(BCAST, A, b"who has B");
    nics[0].send(&arp);
    let got = pump(&mut sw, &mut nics, &rx);
    assert!(got[0].is_empty());
    assert_eq!(got[1], [(1, arp.clone())]);
    assert_eq!(got[2], [(2, arp)]);

    // B answers A by unicast: only A gets it.
    let reply = frame(A, B, b"B is here");
    nics[1].send(&reply);
    let got = pump(&mut sw, &mut nics, &rx);
    assert_eq!(got[0], [(0, reply)]);
    assert!(got[2].is_empty(), "C does not see unicast between A and B");

    // A to B.
    let data = frame(B, A, b"data");
    nics[0].send(&data);
    let got = pump(&mut sw, &mut nics, &rx);
    assert_eq!((got[1].len(), got[2].len()), (1, 0));

    // Unknown unicast goes nowhere: the network has no uplink and no VM has the address.
    let unknown = frame([0x52, 0x54, 0, 0, 0, 0xd], C, b"?");
    nics[2].send(&unknown);
    let got = pump(&mut sw, &mut nics, &rx);
    assert_eq!((got[0].len(), got[1].len(), got[2].len()), (0, 0, 0));

    // C sending as A takes nothing of A's: its frame is dropped.
    let spoof = frame(B, A, b"I am A");
    nics[2].send(&spoof);
    let got = pump(&mut sw, &mut nics, &rx);
    assert!(got.iter().all(|g| g.is_empty()));
    let st = sw.stats();
    assert_eq!((st.unicast, st.flooded, st.unknown, st.spoofed), (2, 1, 1, 1));
}

#[test]
fn partial_checksum_applied_in_place() {
    use crate::net::PartialCsum;
    // A checksum over bytes 20.. stored at 20 + 6, its field zero (no pseudo-header here).
    let mut f = frame(
        B,
        A,
        &[0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0, 0, 0xde, 0xf0, 0x11, 0x22, 0x33, 0x44, 0x55],
    );
    let csum = PartialCsum { start: 20, offset: 6 };
    let field = 26;
    f[field..field + 2].copy_from_slice(&[0, 0]);
    assert!(csum.apply(&mut f));
    // Summed again with the checksum in place, the ones'-complement sum is all ones.
    let mut sum: u32 = 0;
    let mut words = f[20..].chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    assert_eq!(sum, 0xffff);
    // A field past the frame's end: refused, the frame untouched.
    let before = f.clone();
    assert!(!PartialCsum { start: 20, offset: 200 }.apply(&mut f));
    assert_eq!(f, before);
}
