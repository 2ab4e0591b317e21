//! The register file: identification, negotiation, status, queue setup,
//! interrupts, resets, access rules.

use std::boxed::Box;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use vdev::{AccessWidth, MmioDevice, MmioError};

use super::*;
use crate::mmio::{VENDOR_ID, interrupt};
use crate::{Console, Net, Rng, VirtioError, VirtioTransport, device_id};

fn rng() -> VirtioMmio<Rng> {
    VirtioMmio::new(Rng::new(|b: &mut [u8]| b.fill(0xa5)))
}

#[test]
fn identification_registers() {
    let mut m = rng();
    assert_eq!(r32(&mut m, regs::MAGIC_VALUE), 0x7472_6976);
    assert_eq!(r32(&mut m, regs::VERSION), 2);
    assert_eq!(r32(&mut m, regs::DEVICE_ID), device_id::ENTROPY);
    assert_eq!(r32(&mut m, regs::VENDOR_ID), VENDOR_ID);
    w32(&mut m, regs::DEVICE_FEATURES_SEL, 1);
    assert_eq!(r32(&mut m, regs::DEVICE_FEATURES), 1, "VERSION_1 is bit 32");
    w32(&mut m, regs::DEVICE_FEATURES_SEL, 0);
    let lo = r32(&mut m, regs::DEVICE_FEATURES);
    assert_eq!(u64::from(lo), features::INDIRECT_DESC | features::EVENT_IDX);
    w32(&mut m, regs::DEVICE_FEATURES_SEL, 2);
    assert_eq!(r32(&mut m, regs::DEVICE_FEATURES), 0);
    w32(&mut m, regs::QUEUE_SEL, 0);
    assert_eq!(r32(&mut m, regs::QUEUE_NUM_MAX), u32::from(Rng::QUEUE_SIZE));
    w32(&mut m, regs::QUEUE_SEL, 1);
    assert_eq!(r32(&mut m, regs::QUEUE_NUM_MAX), 0, "no such queue");
    assert_eq!(r32(&mut m, regs::SHM_LEN_LOW), u32::MAX, "no shared memory");
    assert_eq!(m.name(), "virtio-rng");
}

#[test]
fn access_rules() {
    let mut m = rng();
    assert_eq!(m.read(regs::STATUS, AccessWidth::Half), Err(MmioError::BadWidth));
    assert_eq!(m.read(regs::STATUS, AccessWidth::Double), Err(MmioError::BadWidth));
    assert_eq!(m.read(regs::STATUS + 2, AccessWidth::Word), Err(MmioError::Unaligned));
    assert_eq!(m.write(regs::STATUS, AccessWidth::Byte, 1), Err(MmioError::BadWidth));
    assert_eq!(m.read(0x200, AccessWidth::Word), Err(MmioError::Unmapped));
    assert_eq!(m.read(0x1f4, AccessWidth::Double), Err(MmioError::Unaligned));
    assert_eq!(m.read(u64::MAX - 1, AccessWidth::Word), Err(MmioError::Unmapped));
    // Configuration space takes every width.
    assert_eq!(m.read(0x100, AccessWidth::Byte), Ok(0));
    assert_eq!(m.read(0x1f8, AccessWidth::Double), Ok(0));
    assert_eq!(m.stats().transport.bad_accesses, 7);
    // Write-only registers read as 0; read-only ones ignore writes.
    assert_eq!(r32(&mut m, regs::QUEUE_NOTIFY), 0);
    w32(&mut m, regs::MAGIC_VALUE, 0);
    assert_eq!(r32(&mut m, regs::MAGIC_VALUE), 0x7472_6976);
}

/// Walks the status register up to DRIVER with `features` written.
fn offer(m: &mut VirtioMmio<Rng>, lo: u32, hi: u32) {
    w32(m, regs::STATUS, 0);
    w32(m, regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    w32(m, regs::DRIVER_FEATURES_SEL, 0);
    w32(m, regs::DRIVER_FEATURES, lo);
    w32(m, regs::DRIVER_FEATURES_SEL, 1);
    w32(m, regs::DRIVER_FEATURES, hi);
}

fn features_ok(m: &mut VirtioMmio<Rng>) -> bool {
    add_status(m, status::FEATURES_OK);
    r32(m, regs::STATUS) & status::FEATURES_OK != 0
}

#[test]
fn feature_negotiation() {
    let mut m = rng();
    // Legacy driver (no VERSION_1): refused.
    offer(&mut m, 0, 0);
    assert!(!features_ok(&mut m));
    // A feature that was not offered (bit 0): refused.
    offer(&mut m, 1, 1);
    assert!(!features_ok(&mut m));
    // A bit in a feature word that does not exist: refused.
    offer(&mut m, 0, 1);
    w32(&mut m, regs::DRIVER_FEATURES_SEL, 2);
    w32(&mut m, regs::DRIVER_FEATURES, 1);
    assert!(!features_ok(&mut m));
    // DRIVER_OK without FEATURES_OK is ignored.
    add_status(&mut m, status::DRIVER_OK);
    assert!(!m.is_live());
    // VERSION_1 + EVENT_IDX: accepted, and frozen afterwards.
    offer(&mut m, features::EVENT_IDX as u32, 1);
    assert!(features_ok(&mut m));
    assert_eq!(m.negotiated_features(), Some(features::VERSION_1 | features::EVENT_IDX));
    w32(&mut m, regs::DRIVER_FEATURES_SEL, 0);
    w32(&mut m, regs::DRIVER_FEATURES, 0);
    assert_eq!(m.negotiated_features(), Some(features::VERSION_1 | features::EVENT_IDX));
    // The driver cannot clear bits or set DEVICE_NEEDS_RESET.
    w32(&mut m, regs::STATUS, status::ACKNOWLEDGE | status::DEVICE_NEEDS_RESET);
    assert_eq!(
        r32(&mut m, regs::STATUS),
        status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK
    );
}

#[test]
fn withdrawn_ring_features() {
    let mut m = rng().without_features(features::EVENT_IDX | features::VERSION_1);
    assert_eq!(m.offered_features(), features::VERSION_1 | features::INDIRECT_DESC);
    offer(&mut m, features::EVENT_IDX as u32, 1);
    assert!(!features_ok(&mut m));
}

#[test]
fn queue_registers() {
    let mut g = Guest::new();
    let mut m = rng();
    let qs = init(&mut m, &mut g, ALL, 16);
    let q = m.queue(0).unwrap();
    assert!(q.is_ready());
    assert_eq!(
        (q.size(), q.desc_addr(), q.avail_addr(), q.used_addr()),
        (16, qs[0].desc, qs[0].avail, qs[0].used)
    );
    // A live queue's configuration cannot change.
    w32(&mut m, regs::QUEUE_NUM, 8);
    w32(&mut m, regs::QUEUE_DESC_LOW, 0);
    let q = m.queue(0).unwrap();
    assert_eq!((q.size(), q.desc_addr()), (16, qs[0].desc));
    // Disabling stops it and keeps the configuration.
    w32(&mut m, regs::QUEUE_READY, 0);
    assert_eq!(r32(&mut m, regs::QUEUE_READY), 0);
    w32(&mut m, regs::QUEUE_NUM, 8);
    w32(&mut m, regs::QUEUE_READY, 1);
    assert_eq!(m.queue(0).unwrap().size(), 8);
    assert!(!m.needs_reset());
}

#[test]
fn bad_queue_setup_needs_reset() {
    for (size, desc_off, what) in [
        (0u32, 0u64, "size 0"),
        (12, 0, "not a power of two"),
        (128, 0, "above max"),
        (8, 8, "misaligned"),
    ] {
        let mut g = Guest::new();
        let mut m = rng();
        init(&mut m, &mut g, ALL, 16);
        w32(&mut m, regs::QUEUE_READY, 0);
        w32(&mut m, regs::QUEUE_NUM, size);
        let desc = g.alloc(0x1000, 16) + desc_off;
        w32(&mut m, regs::QUEUE_DESC_LOW, desc as u32);
        w32(&mut m, regs::QUEUE_READY, 1);
        assert!(m.needs_reset(), "{what}");
        assert_eq!(r32(&mut m, regs::QUEUE_READY), 0, "{what}");
        assert!(m.take_error().is_some());
        assert!(m.take_error().is_none(), "reported once");
        // DRIVER_OK was set: the driver hears about it.
        assert_eq!(r32(&mut m, regs::INTERRUPT_STATUS), interrupt::CONFIG_CHANGE);
    }
}

#[test]
fn ring_wrapping_the_address_space_is_refused() {
    let mut g = Guest::new();
    let mut m = rng();
    init(&mut m, &mut g, ALL, 16);
    w32(&mut m, regs::QUEUE_READY, 0);
    w32(&mut m, regs::QUEUE_DEVICE_LOW, 0xffff_fff0);
    w32(&mut m, regs::QUEUE_DEVICE_HIGH, 0xffff_ffff);
    w32(&mut m, regs::QUEUE_READY, 1);
    assert!(matches!(m.take_error(), Some(VirtioError::OutOfRam { .. })));
}

#[test]
fn notification_before_driver_ok_waits() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = setup_queues(&mut m, &mut g, ALL, 16);
    let b = g.alloc(16, 1);
    qs[0].add(&mut g.ram, &[(b, 16, true)]);
    w32(&mut m, regs::QUEUE_NOTIFY, 0);
    assert!(!m.has_pending(), "not live yet");
    m.poll(&mut g.ram);
    assert_eq!(qs[0].used_idx(&g.ram), 0, "no queue access before DRIVER_OK");
    add_status(&mut m, status::DRIVER_OK);
    assert!(m.has_pending());
    m.poll(&mut g.ram);
    assert_eq!(qs[0].take_used(&g.ram), [(0, 16)]);
    assert_eq!(g.read(b, 16), [0xa5; 16]);
}

#[test]
fn notify_of_unknown_queue_is_ignored() {
    let mut g = Guest::new();
    let mut m = rng();
    init(&mut m, &mut g, ALL, 16);
    w32(&mut m, regs::QUEUE_NOTIFY, 5);
    w32(&mut m, regs::QUEUE_NOTIFY, 0xffff_ffff);
    assert!(!m.has_pending());
    assert_eq!(m.stats().transport.notifications, 0);
}

#[test]
fn interrupt_and_ack() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, PLAIN, 16);
    let b = g.alloc(8, 1);
    qs[0].add(&mut g.ram, &[(b, 8, true)]);
    assert!(!m.irq_level());
    kick(&mut m, &mut g, 0);
    assert!(m.irq_level());
    assert_eq!(r32(&mut m, regs::INTERRUPT_STATUS), interrupt::USED_BUFFER);
    w32(&mut m, regs::INTERRUPT_ACK, interrupt::CONFIG_CHANGE);
    assert!(m.irq_level(), "acking another bit leaves it");
    w32(&mut m, regs::INTERRUPT_ACK, interrupt::USED_BUFFER);
    assert!(!m.irq_level());
    assert_eq!(m.stats().transport.interrupts, 1);
    assert_eq!(m.stats().transport.notifications, 1);
}

#[test]
fn reset_clears_state() {
    let mut g = Guest::new();
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    let mut m =
        VirtioMmio::new(Console::new(move |b: &[u8]| o.lock().unwrap().extend_from_slice(b)));
    let mut qs = init(&mut m, &mut g, ALL, 8);
    let b = g.buf(b"hi");
    qs[1].add(&mut g.ram, &[(b, 2, false)]);
    kick(&mut m, &mut g, 1);
    assert!(m.irq_level());
    m.device_mut().push_input(b"pending");
    // Break the device so that the reset also has an error to clear.
    w32(&mut m, regs::QUEUE_SEL, 0);
    w32(&mut m, regs::QUEUE_READY, 0);
    w32(&mut m, regs::QUEUE_NUM, 3);
    w32(&mut m, regs::QUEUE_READY, 1);
    assert!(m.needs_reset());

    w32(&mut m, regs::STATUS, 0);
    assert_eq!(r32(&mut m, regs::STATUS), 0);
    assert!(!m.irq_level());
    assert!(!m.needs_reset());
    assert_eq!(m.negotiated_features(), None);
    for q in 0..2 {
        w32(&mut m, regs::QUEUE_SEL, q);
        assert_eq!(r32(&mut m, regs::QUEUE_READY), 0);
        assert_eq!(m.queue(q as usize).unwrap().size(), 0);
    }
    assert_eq!(m.device().pending_input(), 0, "device state reset");
    assert!(m.last_error().is_some(), "kept for the statistics screen");
    assert_eq!(m.stats().transport.resets, 2, "init's own reset and this one");
    // And the device works again from scratch, with indices from 0.
    let mut qs = init(&mut m, &mut g, ALL, 8);
    let b = g.buf(b"again");
    qs[1].add(&mut g.ram, &[(b, 5, false)]);
    kick(&mut m, &mut g, 1);
    assert_eq!(qs[1].take_used(&g.ram), [(0, 0)]);
    assert_eq!(&out.lock().unwrap()[..], b"hiagain");
}

#[test]
fn config_change_bumps_generation() {
    let mut g = Guest::new();
    let mut m = VirtioMmio::new(Net::new([2, 0, 0, 0, 0, 1], |_: GuestBytes<'_>, _| {}));
    let gen0 = r32(&mut m, regs::CONFIG_GENERATION);
    m.update_config(|n| n.set_link_up(false));
    assert_ne!(r32(&mut m, regs::CONFIG_GENERATION), gen0);
    assert!(!m.irq_level(), "no interrupt before DRIVER_OK");
    init(&mut m, &mut g, ALL, 8);
    m.update_config(|n| n.set_link_up(true));
    assert_eq!(r32(&mut m, regs::INTERRUPT_STATUS), interrupt::CONFIG_CHANGE);
    assert_eq!(m.read(0x106, AccessWidth::Half), Ok(1), "link up");
}

#[test]
fn transport_trait_objects() {
    let mut g = Guest::new();
    let mut slots: Vec<Box<dyn VirtioTransport>> =
        std::vec![Box::new(rng()), Box::new(VirtioMmio::new(Console::new(|_: &[u8]| {}))),];
    let m = slots[0].downcast_mut::<VirtioMmio<Rng>>().unwrap();
    let mut qs = init(m, &mut g, ALL, 8);
    let b = g.alloc(4, 1);
    qs[0].add(&mut g.ram, &[(b, 4, true)]);
    let slot = &mut slots[0];
    slot.write(regs::QUEUE_NOTIFY, AccessWidth::Word, 0).unwrap();
    assert!(slot.has_pending());
    slot.poll(&mut g.ram);
    assert!(slot.irq_level());
    assert_eq!(slot.device_id(), device_id::ENTROPY);
    assert_eq!(slot.stats().device.bytes_to_guest, 4);
    assert!(slots[1].downcast_ref::<VirtioMmio<Rng>>().is_none());
    assert!(slots[1].downcast_ref::<VirtioMmio<Console>>().is_some());
    slots[0].reset();
    assert!(!slots[0].irq_level());
}

#[test]
fn notify_method_processes_directly() {
    let mut g = Guest::new();
    let mut m = rng();
    let mut qs = init(&mut m, &mut g, ALL, 8);
    let b = g.alloc(4, 1);
    qs[0].add(&mut g.ram, &[(b, 4, true)]);
    m.notify(0, &mut g.ram);
    assert_eq!(qs[0].take_used(&g.ram), [(0, 4)]);
}
