//! virtio-net: transmit to the sink, receive from the hypervisor, and two
//! NICs joined by the switch.

use std::sync::{Arc, Mutex};
use std::vec::Vec;

use vdev::{AccessWidth, MmioDevice};

use super::*;
use crate::net::{F_MAC, F_MTU, F_STATUS, HDR_LEN};
use crate::switch::Switch;
use crate::{Net, device_id};

type Frames = Arc<Mutex<Vec<Vec<u8>>>>;

struct Nic {
    g: Guest,
    m: VirtioMmio<Net>,
    rx: DriverQueue,
    tx: DriverQueue,
    sent: Frames,
}

fn nic(mac: [u8; 6]) -> Nic {
    let sent: Frames = Arc::default();
    let s = sent.clone();
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Net::new(mac, move |f: &[u8]| s.lock().unwrap().push(f.to_vec())));
    let mut qs = init(&mut m, &mut g, ALL, 16);
    let tx = qs.remove(1);
    let rx = qs.remove(0);
    Nic { g, m, rx, tx, sent }
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
    assert_eq!(f & 0x3fff, F_MAC & 0x3fff, "no checksum or GSO offloads");
}

/// An MTU given to the NIC is announced; without one, none is.
#[test]
fn mtu_is_announced_only_when_given() {
    let mut n = nic(A);
    assert_eq!(n.m.offered_features() & F_MTU, 0);
    assert_eq!(n.m.read(0x10a, AccessWidth::Half), Ok(0));
    let mut m = VirtioMmio::new(Net::new(A, |_: &[u8]| {}).with_mtu(Some(65535)));
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
    assert!(m.deliver(&f, &mut g.ram));
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
    // Header and frame in one descriptor straddling a chunk (gathered).
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
    for hdr0 in [[1u8, 0], [0, 1]] {
        // NEEDS_CSUM, then GSO_TCPV4: neither was negotiated.
        let mut h = [0u8; HDR_LEN];
        h[..2].copy_from_slice(&hdr0);
        let hb = n.g.buf(&h);
        let d = n.g.buf(&f);
        n.tx.add(&mut n.g.ram, &[(hb, HDR_LEN as u32, false), (d, f.len() as u32, false)]);
    }
    let short = n.g.buf(&[0; 8]);
    n.tx.add(&mut n.g.ram, &[(short, 8, false)]);
    kick(&mut n.m, &mut n.g, 1);
    assert!(n.take_sent().is_empty());
    assert_eq!(n.tx.take_used(&n.g.ram).len(), 3, "buffers returned all the same");
    assert_eq!(n.m.stats().device.errors, 3);
    assert!(!n.m.needs_reset());
}

#[test]
fn receive() {
    let mut n = nic(A);
    let bufs = n.post_rx(2, 1526);
    let f = frame(A, B, &[0x33; 100]);
    assert!(n.m.deliver(&f, &mut n.g.ram));
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
    assert!(!n.m.deliver(&f, &mut n.g.ram), "no buffers");
    let bufs = n.post_rx(1, 100);
    assert!(!n.m.deliver(&f, &mut n.g.ram), "too small");
    let small = frame(A, B, &[2; 40]);
    assert!(n.m.deliver(&small, &mut n.g.ram), "the small buffer stayed posted");
    assert_eq!(n.received(&bufs)[0].1, small);
    n.post_rx(1, 1526);
    n.m.update_config(|net| net.set_link_up(false));
    assert!(!n.m.deliver(&small, &mut n.g.ram), "link down");
    assert!(!n.m.deliver(&[0; 10], &mut n.g.ram), "runt");
    assert_eq!(n.m.stats().device.dropped, 4);
    // Not live: dropped too.
    w32(&mut n.m, regs::STATUS, 0);
    assert!(!n.m.deliver(&small, &mut n.g.ram));
    assert_eq!(n.m.stats().device.dropped, 5);
}

#[test]
fn receive_into_chained_buffers_across_chunks() {
    let mut n = nic(A);
    let h = n.g.alloc(HDR_LEN as u64, 2);
    let d = n.g.straddling(1514, 700);
    n.rx.add(&mut n.g.ram, &[(h, HDR_LEN as u32, true), (d, 1514, true)]);
    let f = frame(A, B, &[9; 1500]);
    assert!(n.m.deliver(&f, &mut n.g.ram));
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
                assert!(n.m.deliver(&f, &mut n.g.ram));
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

    // A broadcasts (ARP-like): B and C get it, A does not.
    let arp = frame(BCAST, A, b"who has B");
    nics[0].send(&arp);
    let got = pump(&mut sw, &mut nics, &rx);
    assert!(got[0].is_empty());
    assert_eq!(got[1], [(1, arp.clone())]);
    assert_eq!(got[2], [(2, arp)]);
    assert_eq!(sw.lookup(&A), Some(0), "learned from the broadcast");

    // B answers A by unicast: A was learned, so only A gets it.
    let reply = frame(A, B, b"B is here");
    nics[1].send(&reply);
    let got = pump(&mut sw, &mut nics, &rx);
    assert_eq!(got[0], [(0, reply)]);
    assert!(got[2].is_empty(), "C does not see unicast between A and B");

    // A to B: B is known now too.
    let data = frame(B, A, b"data");
    nics[0].send(&data);
    let got = pump(&mut sw, &mut nics, &rx);
    assert_eq!((got[1].len(), got[2].len()), (1, 0));

    // Unknown unicast is flooded.
    let unknown = frame([0x52, 0x54, 0, 0, 0, 0xd], C, b"?");
    nics[2].send(&unknown);
    let got = pump(&mut sw, &mut nics, &rx);
    assert_eq!((got[0].len(), got[1].len(), got[2].len()), (1, 1, 0));
    let st = sw.stats();
    assert_eq!((st.unicast, st.flooded), (2, 2));
}
