//! The switch alone: VM ports with configured MACs, and the uplink.

use std::vec::Vec;

use crate::switch::{Destinations, MAX_PORTS, PortError, Switch};

/// A frame to station `dst` from station `src` (MAC `mac(x)`).
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

fn with_dst(mut frame: Vec<u8>, dst: [u8; 6]) -> Vec<u8> {
    frame[..6].copy_from_slice(&dst);
    frame
}

const BCAST: [u8; 6] = [0xff; 6];
const MCAST: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 1];

/// VMs 1, 2 and 3 on ports 0, 1 and 2; with `uplink`, the uplink on port 3.
fn switch(uplink: bool) -> Switch {
    let mut sw = Switch::new(8, 4);
    for p in 0..3 {
        sw.connect_vm(p, mac(p as u8 + 1)).unwrap();
    }
    if uplink {
        sw.connect_uplink(3).unwrap();
    }
    sw
}

#[test]
fn vm_unicast_goes_to_the_configured_port_only() {
    for uplink in [false, true] {
        let mut sw = switch(uplink);
        assert_eq!(ports(sw.forward(0, &f(2, 1))), [1]);
        assert_eq!(ports(sw.forward(1, &f(1, 2))), [0]);
        assert_eq!(ports(sw.forward(2, &f(1, 3))), [0]);
        // Never to the uplink: traffic between VMs stays inside.
        assert_eq!(sw.stats().unicast, 3);
        // To itself: nowhere.
        assert!(sw.forward(0, &f(1, 1)).is_empty());
        assert_eq!(sw.stats().dropped, 1);
        assert_eq!(sw.learned(), 0, "VM ports never learn");
        assert_eq!(sw.lookup(&mac(2)), Some(1), "known from the configuration alone");
    }
}

#[test]
fn spoofed_source_is_dropped_and_counted() {
    let mut sw = switch(true);
    // VM 3 (port 2) sends as VM 1: dropped, and VM 1's entry stays.
    assert!(sw.forward(2, &f(2, 1)).is_empty());
    assert!(sw.forward(2, &with_dst(f(0, 1), BCAST)).is_empty());
    // Made-up sources: dropped too, nothing learned, nothing evicted.
    for s in 10..200 {
        assert!(sw.forward(2, &f(9, s)).is_empty());
    }
    assert_eq!(sw.stats().spoofed, 2 + 190);
    assert_eq!((sw.learned(), sw.stats().evicted), (0, 0));
    assert_eq!(sw.lookup(&mac(1)), Some(0));
    // Unicast between VMs 1 and 2 still reaches only VM 2.
    assert_eq!(ports(sw.forward(0, &f(2, 1))), [1]);
}

#[test]
fn broadcast_and_multicast_flood_to_every_other_port() {
    // Without an uplink: the other VMs.
    let mut sw = switch(false);
    assert_eq!(ports(sw.forward(1, &with_dst(f(0, 2), BCAST))), [0, 2]);
    assert_eq!(ports(sw.forward(2, &with_dst(f(0, 3), MCAST))), [0, 1]);
    // With one: the other VMs and the uplink.
    let mut sw = switch(true);
    assert_eq!(ports(sw.forward(0, &with_dst(f(0, 1), BCAST))), [1, 2, 3]);
    assert_eq!(ports(sw.forward(1, &with_dst(f(0, 2), MCAST))), [0, 2, 3]);
    assert_eq!(sw.stats().flooded, 2);
    // Free ports get nothing.
    assert!(!sw.forward(0, &with_dst(f(0, 1), BCAST)).contains(4));
}

#[test]
fn unknown_unicast_goes_to_the_uplink_or_nowhere() {
    let mut sw = switch(false);
    assert!(sw.forward(0, &f(99, 1)).is_empty(), "no uplink: nothing leaves the network");
    assert_eq!(sw.stats().unknown, 1);
    let mut sw = switch(true);
    assert_eq!(ports(sw.forward(0, &f(99, 1))), [3], "not flooded to the other VMs");
    assert_eq!(sw.stats().unknown, 1);
}

#[test]
fn uplink_learns_and_delivers_to_vms_by_configured_mac() {
    let mut sw = switch(true);
    // The gateway (station 50) answers VM 2.
    assert_eq!(ports(sw.forward(3, &f(2, 50))), [1]);
    assert_eq!(sw.lookup(&mac(50)), Some(3));
    assert_eq!(sw.learned(), 1);
    // Now VM 2's frames to the gateway are known unicast to the uplink.
    assert_eq!(ports(sw.forward(1, &f(50, 2))), [3]);
    assert_eq!(sw.stats().unknown, 0);
    // From outside, broadcast and multicast reach every VM, never back out.
    assert_eq!(ports(sw.forward(3, &with_dst(f(0, 50), BCAST))), [0, 1, 2]);
    assert_eq!(ports(sw.forward(3, &with_dst(f(0, 50), MCAST))), [0, 1, 2]);
    // Unicast from outside to no VM: dropped (not flooded to the VMs).
    assert!(sw.forward(3, &f(77, 50)).is_empty());
    assert_eq!(sw.stats().dropped, 1);
}

#[test]
fn uplink_cannot_take_or_evict_vm_entries() {
    let mut sw = switch(true);
    // A frame from outside with VM 1's source: dropped, VM 1's entry unchanged.
    assert!(sw.forward(3, &f(2, 1)).is_empty());
    assert_eq!(sw.stats().spoofed, 1);
    assert_eq!(sw.lookup(&mac(1)), Some(0));
    // Flooding the uplink's table (capacity 4) evicts learned stations only.
    for s in 100..140 {
        sw.forward(3, &f(2, s));
    }
    assert_eq!(sw.learned(), 4);
    assert_eq!(sw.stats().evicted, 36);
    for vm in 1..=3 {
        assert_eq!(sw.lookup(&mac(vm)), Some(usize::from(vm) - 1));
    }
    assert_eq!(ports(sw.forward(0, &f(2, 1))), [1]);
    assert_eq!(ports(sw.forward(1, &f(1, 2))), [0]);
}

#[test]
fn bounded_learned_table_evicts_least_recently_seen() {
    let mut sw = switch(true);
    for s in [50, 51, 52, 53] {
        sw.forward(3, &f(1, s));
    }
    sw.forward(3, &f(1, 50)); // 50 is fresh again, 51 is the stalest
    sw.forward(3, &f(1, 54));
    assert_eq!(sw.learned(), 4);
    assert_eq!(sw.lookup(&mac(51)), None);
    assert_eq!(sw.lookup(&mac(50)), Some(3));
    assert_eq!(sw.stats().evicted, 1);
    // An evicted station is still reached, through the uplink, as unknown unicast.
    assert_eq!(ports(sw.forward(0, &f(51, 1))), [3]);
}

#[test]
fn rejects_runts_and_unconnected_ports() {
    let mut sw = switch(true);
    assert!(sw.forward(0, &[0; 13]).is_empty());
    assert!(sw.forward(0, &[]).is_empty());
    assert!(sw.forward(5, &f(1, 2)).is_empty(), "port 5 is not connected");
    assert!(sw.forward(200, &f(1, 2)).is_empty());
    assert_eq!(sw.stats().dropped, 4);
    assert_eq!(sw.learned(), 0);
}

#[test]
fn connecting_ports() {
    let mut sw = Switch::new(4, 4);
    assert_eq!(sw.free_port(), Some(0));
    sw.connect_vm(0, mac(1)).unwrap();
    assert_eq!(sw.connect_vm(0, mac(2)), Err(PortError::InUse));
    assert_eq!(sw.connect_vm(1, mac(1)), Err(PortError::DuplicateMac));
    assert_eq!(sw.connect_vm(1, [3, 0, 0, 0, 0, 1]), Err(PortError::BadMac));
    assert_eq!(sw.connect_vm(1, [0; 6]), Err(PortError::BadMac));
    assert_eq!(sw.connect_vm(4, mac(2)), Err(PortError::NoSuchPort));
    sw.connect_uplink(1).unwrap();
    assert_eq!(sw.connect_uplink(2), Err(PortError::SecondUplink));
    assert_eq!((sw.free_port(), sw.uplink(), sw.vm_mac(0)), (Some(2), Some(1), Some(mac(1))));
    // A station learned outside that turns out to be a VM being connected is forgotten.
    sw.forward(1, &f(1, 7));
    assert_eq!(sw.lookup(&mac(7)), Some(1));
    sw.connect_vm(2, mac(7)).unwrap();
    assert_eq!((sw.lookup(&mac(7)), sw.learned()), (Some(2), 0));
    // Disconnecting the uplink forgets what it learned; a VM port's MAC leaves the table.
    sw.forward(1, &f(1, 8));
    sw.disconnect(1);
    assert_eq!((sw.uplink(), sw.learned(), sw.lookup(&mac(8))), (None, 0, None));
    sw.disconnect(0);
    assert_eq!(sw.lookup(&mac(1)), None);
    assert!(sw.forward(0, &f(7, 1)).is_empty());
    assert_eq!(sw.free_port(), Some(0));
}

#[test]
fn sixty_four_ports() {
    let mut sw = Switch::new(100, 8);
    assert_eq!(sw.ports(), MAX_PORTS);
    for p in 0..MAX_PORTS {
        sw.connect_vm(p, [2, 0, 0, 0, 1, p as u8]).unwrap();
    }
    let mut b = with_dst(f(0, 0), BCAST);
    b[6..12].copy_from_slice(&[2, 0, 0, 0, 1, 63]);
    let d = sw.forward(63, &b);
    assert_eq!(d.len(), 63);
    assert!(!d.contains(63) && d.contains(0) && d.contains(62));
    assert_eq!(Destinations::single(64), Destinations::none());
    assert_eq!(d.without(0).len(), 62);
}
