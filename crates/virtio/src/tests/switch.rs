//! The learning switch alone.

use std::vec::Vec;

use crate::switch::{Destinations, MAX_PORTS, Switch};

fn f(dst: u8, src: u8) -> Vec<u8> {
    let mut v = std::vec![2, 0, 0, 0, 0, dst, 2, 0, 0, 0, 0, src, 0x08, 0x00];
    v.extend_from_slice(&[0; 46]);
    v
}

fn mac(x: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, x]
}

fn ports(d: Destinations) -> Vec<usize> {
    d.iter().collect()
}

#[test]
fn learns_and_forwards() {
    let mut sw = Switch::new(4, 8);
    assert_eq!(ports(sw.forward(0, &f(2, 1))), [1, 2, 3], "unknown: flooded");
    assert_eq!(sw.lookup(&mac(1)), Some(0));
    assert_eq!(ports(sw.forward(2, &f(1, 2))), [0]);
    assert_eq!(ports(sw.forward(0, &f(2, 1))), [2]);
    // Station 1 moves to port 3.
    sw.forward(3, &f(9, 1));
    assert_eq!(sw.lookup(&mac(1)), Some(3));
    assert_eq!(ports(sw.forward(2, &f(1, 2))), [3]);
}

#[test]
fn broadcast_and_multicast_flood_except_source() {
    let mut sw = Switch::new(3, 8);
    let mut b = f(0, 1);
    b[..6].copy_from_slice(&[0xff; 6]);
    assert_eq!(ports(sw.forward(1, &b)), [0, 2]);
    let mut m = f(0, 1);
    m[..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0, 0, 1]);
    assert_eq!(ports(sw.forward(2, &m)), [0, 1]);
    // A multicast source is never learned.
    let mut bogus = f(1, 0);
    bogus[6] = 0x01;
    sw.forward(0, &bogus);
    assert_eq!(sw.learned(), 1);
}

#[test]
fn never_back_out_of_the_ingress_port() {
    let mut sw = Switch::new(2, 8);
    sw.forward(0, &f(9, 1));
    sw.forward(0, &f(9, 2));
    // 2 talks to 1, both behind port 0: filtered.
    assert!(sw.forward(0, &f(1, 2)).is_empty());
    assert_eq!(sw.stats().dropped, 1);
}

#[test]
fn bounded_table_evicts_least_recently_seen() {
    let mut sw = Switch::new(2, 3);
    for s in 1..=3 {
        sw.forward(0, &f(99, s));
    }
    sw.forward(0, &f(99, 1)); // 1 is fresh again, 2 is the stalest
    sw.forward(0, &f(99, 4));
    assert_eq!(sw.learned(), 3);
    assert_eq!(sw.lookup(&mac(2)), None);
    assert_eq!(sw.lookup(&mac(1)), Some(0));
    assert_eq!(sw.stats().evicted, 1);
    // An evicted station is flooded to, then relearned when it speaks.
    assert_eq!(ports(sw.forward(1, &f(2, 5))), [0]);
}

#[test]
fn rejects_runts_and_unknown_ports() {
    let mut sw = Switch::new(2, 4);
    assert!(sw.forward(0, &[0; 13]).is_empty());
    assert!(sw.forward(0, &[]).is_empty());
    assert!(sw.forward(2, &f(1, 2)).is_empty());
    assert_eq!(sw.stats().dropped, 3);
    assert_eq!(sw.learned(), 0);
}

#[test]
fn forget_port() {
    let mut sw = Switch::new(3, 8);
    sw.forward(0, &f(9, 1));
    sw.forward(1, &f(9, 2));
    sw.forget_port(0);
    assert_eq!((sw.lookup(&mac(1)), sw.lookup(&mac(2))), (None, Some(1)));
}

#[test]
fn sixty_four_ports() {
    let mut sw = Switch::new(100, 8);
    assert_eq!(sw.ports(), MAX_PORTS);
    let d = sw.forward(63, &f(1, 2));
    assert_eq!(d.len(), 63);
    assert!(!d.contains(63) && d.contains(0) && d.contains(62));
    assert_eq!(Destinations::single(64), Destinations::none());
}
