//! Per-VM counters of what its guests made armhv do.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use vdev::MmioDevice;

macro_rules! counters {
    ($($name:ident: $label:literal),* $(,)?) => {
        #[derive(Default)]
        pub struct VmStats {
            $(pub $name: AtomicU64,)*
        }

        impl core::fmt::Display for VmStats {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut first = true;
                $(
                    let v = self.$name.load(Relaxed);
                    if v != 0 {
                        if !first { f.write_str(", ")?; }
                        write!(f, concat!($label, " {}"), v)?;
                        first = false;
                    }
                )*
                if first { f.write_str("no exits")?; }
                Ok(())
            }
        }
    };
}

counters!(
    resets: "resets",
    exits: "exits",
    hypercalls: "hypercalls",
    smc: "smc",
    mmio: "mmio",
    aborts_injected: "aborts-injected",
    sysreg: "sysreg",
    sgi: "sgi",
    undef_injected: "undef-injected",
    wfx: "wfi/wfe",
    fp_switches: "fp-switches",
    irq: "irq",
    passthrough_irqs: "assigned-irqs",
    device_irqs: "emulated-irqs",
    input_dropped: "input-dropped",
    frames_in: "frames-in",
);

pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

/// Logs every VM's counters and its virtio devices' ones, each line starting with `tag:`.
pub fn log_all(tag: &str) {
    for vm in super::sched::vms() {
        let state = if vm.is_stopped() { "stopped" } else { "running" };
        log::info!("{tag}: vm {} ({}, {state}): {}", vm.id, vm.name, vm.stats);
        let outbox_dropped: u64 = vm.nics.iter().map(|n| n.outbox_dropped()).sum();
        if outbox_dropped > 0 {
            log::info!("{tag}:   {outbox_dropped} frames dropped: its NIC outbox was full");
        }
        let mut bus = vm.devices.lock();
        let slots: alloc::vec::Vec<_> = bus.ranges().map(|(r, _)| r.start).collect();
        for ipa in slots {
            if let Some(slot) = bus.device_at_mut::<super::virtio::VirtioSlot>(ipa) {
                let s = slot.stats();
                log::info!(
                    "{tag}:   {} at {ipa}: {} requests, {} bytes in, {} bytes out, {} errors, \
                     {} dropped, {} interrupts",
                    slot.name(),
                    s.device.requests,
                    s.device.bytes_from_guest,
                    s.device.bytes_to_guest,
                    s.device.errors,
                    s.device.dropped,
                    s.transport.interrupts
                );
                log::info!("{tag}:     {}", slot.progress(&vm.vgic.lock()));
            }
        }
    }
}
