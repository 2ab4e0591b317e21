//! Notification suppression (VIRTIO_F_EVENT_IDX and the flags), and the
//! per-poll budget.

use super::*;
use crate::queue::VIRTQ_AVAIL_F_NO_INTERRUPT;
use crate::{Rng, need_event};

fn rng() -> VirtioMmio<Rng> {
    VirtioMmio::new(Rng::new(|b: &mut [u8]| b.fill(9)))
}

#[test]
fn need_event_rule() {
    // Notify iff event is in [old, new), in wrapping arithmetic.
    assert!(need_event(0, 1, 0));
    assert!(!need_event(1, 1, 0));
    assert!(need_event(4, 6, 3));
    assert!(!need_event(6, 6, 3));
    assert!(!need_event(2, 6, 3));
    assert!(need_event(0xffff, 2, 0xfffe));
    assert!(need_event(1, 2, 0xfffe));
    assert!(!need_event(2, 2, 0xfffe));
    assert!(!need_event(5, 5, 5), "nothing new, nothing to say");
}

/// Posts one 4-byte request and kicks.
fn one(m: &mut VirtioMmio<Rng>, g: &mut Guest, q: &mut DriverQueue) {
    let b = g.alloc(4, 1);
    q.add(&mut g.ram, &[(b, 4, true)]);
    kick(m, g, 0);
}

#[test]
fn used_event_suppresses_interrupts() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, ALL, 16);
    let q = &mut qs[0];
    // used_event = 0: the first completion interrupts.
    one(&mut m, &mut g, q);
    assert!(m.irq_level());
    ack(&mut m);
    // The driver wants to hear only once used.idx passes 3.
    q.set_used_event(&mut g.ram, 3);
    one(&mut m, &mut g, q); // used.idx 2
    assert!(!m.irq_level(), "suppressed");
    one(&mut m, &mut g, q); // used.idx 3
    assert!(!m.irq_level(), "suppressed");
    one(&mut m, &mut g, q); // used.idx 4: entry 3 written
    assert!(m.irq_level());
    ack(&mut m);
    // A batch that jumps over used_event still notifies once.
    q.set_used_event(&mut g.ram, 5);
    for _ in 0..3 {
        let b = g.alloc(4, 1);
        q.add(&mut g.ram, &[(b, 4, true)]);
    }
    kick(&mut m, &mut g, 0);
    assert_eq!(q.used_idx(&g.ram), 7);
    assert!(m.irq_level());
    assert_eq!(m.stats().transport.interrupts, 3);
}

#[test]
fn avail_event_is_published_when_the_ring_runs_dry() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, ALL, 16);
    let q = &mut qs[0];
    for _ in 0..3 {
        let b = g.alloc(4, 1);
        q.add(&mut g.ram, &[(b, 4, true)]);
    }
    kick(&mut m, &mut g, 0);
    // The device consumed 3 entries and asks to be notified at the next.
    assert_eq!(q.avail_event(&g.ram), 3);
    // By the driver's own rule, adding entry 3 must notify.
    assert!(need_event(q.avail_event(&g.ram), 4, 3));
}

#[test]
fn without_event_idx_the_flag_suppresses() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, PLAIN, 16);
    let q = &mut qs[0];
    q.set_avail_flags(&mut g.ram, VIRTQ_AVAIL_F_NO_INTERRUPT);
    one(&mut m, &mut g, q);
    assert!(!m.irq_level());
    q.set_avail_flags(&mut g.ram, 0);
    one(&mut m, &mut g, q);
    assert!(m.irq_level());
    // used_event is ignored without the feature.
    ack(&mut m);
    q.set_used_event(&mut g.ram, 100);
    one(&mut m, &mut g, q);
    assert!(m.irq_level());
    assert_eq!(q.avail_event(&g.ram), 0, "avail_event not written");
}

#[test]
fn event_idx_offered_but_not_taken_behaves_plainly() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, PLAIN, 16);
    qs[0].set_used_event(&mut g.ram, 50);
    one(&mut m, &mut g, &mut qs[0]);
    assert!(m.irq_level());
}

#[test]
fn indices_wrap_around_16_bits() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, ALL, 4);
    let q = &mut qs[0];
    let b = g.alloc(4, 1);
    for i in 0..70_000u32 {
        q.add(&mut g.ram, &[(b, 4, true)]);
        // Ask for an interrupt at every completion.
        q.set_used_event(&mut g.ram, q.avail_idx.wrapping_sub(1));
        kick(&mut m, &mut g, 0);
        assert!(m.irq_level(), "completion {i}");
        ack(&mut m);
        assert_eq!(q.take_used(&g.ram).len(), 1);
    }
    assert!(!m.needs_reset());
}

#[test]
fn one_poll_serves_at_most_a_queue_worth() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, PLAIN, 4);
    let q = &mut qs[0];
    let b = g.alloc(4, 1);
    for _ in 0..4 {
        q.add(&mut g.ram, &[(b, 4, true)]);
    }
    kick(&mut m, &mut g, 0);
    assert_eq!(q.take_used(&g.ram).len(), 4);
    // The driver refills while the device works: here, between polls. The
    // budget ran out exactly at 4, so the device asks for another poll.
    for _ in 0..2 {
        q.add(&mut g.ram, &[(b, 4, true)]);
    }
    assert!(m.has_pending(), "budget exhausted: more may be waiting");
    m.poll(&mut g.ram);
    assert_eq!(q.take_used(&g.ram).len(), 2);
    assert!(!m.has_pending());
}

#[test]
fn queue_enabled_before_negotiation_gets_the_final_features() {
    let mut g = Guest::new();
    let mut m = rng();
    w32(&mut m, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    let (desc, avail, used) = (g.alloc(16 * 4, 16), g.alloc(6 + 8, 2), g.alloc(6 + 32, 4));
    w32(&mut m, regs::QUEUE_NUM, 4);
    w32(&mut m, regs::QUEUE_DESC_LOW, desc as u32);
    w32(&mut m, regs::QUEUE_DRIVER_LOW, avail as u32);
    w32(&mut m, regs::QUEUE_DEVICE_LOW, used as u32);
    w32(&mut m, regs::QUEUE_READY, 1);
    w32(&mut m, regs::DRIVER_FEATURES_SEL, 0);
    w32(&mut m, regs::DRIVER_FEATURES, features::EVENT_IDX as u32);
    w32(&mut m, regs::DRIVER_FEATURES_SEL, 1);
    w32(&mut m, regs::DRIVER_FEATURES, 1);
    add_status(&mut m, status::FEATURES_OK);
    add_status(&mut m, status::DRIVER_OK);
    let mut q = DriverQueue::new(4, desc, avail, used);
    one(&mut m, &mut g, &mut q);
    assert!(m.irq_level());
    ack(&mut m);
    q.set_used_event(&mut g.ram, 10);
    one(&mut m, &mut g, &mut q);
    assert!(!m.irq_level(), "EVENT_IDX is in force");
}
