//! Reports: every VM's statistics (Ctrl-A s, the end), and what armhv itself holds — heap
//! bytes and physical frames — at two points of the machine's life that must agree, checked
//! when every VM has ended, before the power-off.
//!
//! A VM holds its RAM, Stage-2 table, disks and device models for one life, from its start to
//! the end of its stop (`vmm::manage`), and gives them all back then. So the leak check
//! compares the machine with no VM alive at both ends:
//!
//! - the **baseline**: every VM defined (networks, scheduler entries, assigned devices) and
//!   every CPU's scheduler list made, before any VM is built ([`cpu_ready`] is a start barrier;
//!   the VMs marked `autostart` start right after it);
//! - the **end**: every VM stopped and dropped.
//!
//! Whatever a run leaves allocated beyond that — a frame stuck in an outbox, a buffer grown
//! for good, a life that does not give everything back — shows as a difference in
//! [`final_report`]. The console's `list` shows the same figures at any time.

use crate::arch::aarch64::{cpu, firmware};
use crate::mm::heap;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use spin::Once;
use vdev::MmioDevice;
use vmm::emulate::virtio_slot::VirtioSlot;
use vmm::frames;
use vmm::{bench, irqdist, registry};

#[derive(Clone, Copy, PartialEq, Eq)]
struct Usage {
    heap_bytes: usize,
    frames: usize,
}

impl Usage {
    fn now() -> Self {
        Self { heap_bytes: heap::used_bytes(), frames: frames::used_frames() }
    }
}

/// CPUs that will enter the scheduler (set by the boot CPU once it has started the others).
static EXPECTED: AtomicUsize = AtomicUsize::new(usize::MAX);
/// CPUs that have made their scheduler lists.
static ARRIVED: AtomicUsize = AtomicUsize::new(0);
static BASELINE: Once<Usage> = Once::new();
/// Set by the CPU that takes the baseline and starts the VMs.
static LEADER: AtomicBool = AtomicBool::new(false);

/// The boot CPU: `n` CPUs (itself included) will call [`cpu_ready`].
pub fn cpus_started(n: usize) {
    EXPECTED.store(n, Ordering::Release);
    cpu::send_event();
}

/// Every CPU, once its scheduler state is allocated and before it runs a vCPU: waits for the
/// others, then the baseline is taken (once) and all go.
pub fn cpu_ready() {
    ARRIVED.fetch_add(1, Ordering::AcqRel);
    cpu::send_event();
    while ARRIVED.load(Ordering::Acquire) < EXPECTED.load(Ordering::Acquire) {
        cpu::wait_for_event();
    }
    // The other CPUs wait here until the VMs that start at boot are built: a VM that fails to
    // build can then be checked to have left the heap as it found it. They wait in `wfe`, not
    // in `Once::call_once`'s spin: under `-icount` QEMU runs the CPUs round-robin, and the
    // build's broadcast TLB invalidation completes only once every other CPU has left its
    // slice, which a spinning CPU does only at QEMU's 100 ms round-robin kick (measured: each
    // VM of configs/bench/micro.toml started 100 ms of virtual time after the one before,
    // 100 million instructions of this spin each).
    if LEADER.swap(true, Ordering::AcqRel) {
        while BASELINE.get().is_none() {
            cpu::wait_for_event();
        }
        return;
    }
    BASELINE.call_once(|| {
        let u = Usage::now();
        log::info!(
            "usage: baseline: {} bytes of heap, {} frames ({} VMs defined, none built)",
            u.heap_bytes,
            u.frames,
            registry::count()
        );
        vmm::manage::autostart();
        u
    });
    cpu::send_event();
}

/// Once every VM has stopped (`manage::when_all_stopped`): the final report, the
/// world-switch breakdown (benchmark builds) and the machine's power-off.
pub fn power_off() {
    final_report();
    bench::report();
    log::info!(
        "all VMs have stopped ({} KiB of heap in use): powering off",
        heap::used_bytes() / 1024
    );
    firmware::system_off();
}

/// Every VM's statistics, then heap and frame usage against the baseline, with every VM's
/// devices back in their power-on state.
fn final_report() {
    log_stats("end");
    irqdist::print_totals();
    let end = Usage::now();
    let Some(&base) = BASELINE.get() else {
        log::info!(
            "usage: end: {} bytes of heap, {} frames (no baseline)",
            end.heap_bytes,
            end.frames
        );
        return;
    };
    let verdict = if end == base { "back to the baseline" } else { "NOT back to the baseline" };
    log::info!(
        "usage: end: {} bytes of heap (baseline {}, {:+}), {} frames (baseline {}, {:+}): {verdict}",
        end.heap_bytes,
        base.heap_bytes,
        end.heap_bytes as i64 - base.heap_bytes as i64,
        end.frames,
        base.frames,
        end.frames as i64 - base.frames as i64,
    );
}

/// Logs every VM's counters and its virtio devices' ones, then every network's switch and
/// uplink counters, each line starting with `tag:`.
pub fn log_stats(tag: &str) {
    log_vm_stats(tag);
    for n in vmm::emulate::network::stats() {
        let s = n.switch;
        log::info!(
            "{tag}: network {}: {} unicast, {} flooded, {} unknown unicast, {} dropped, {} spoofed \
             source, {} stations learned behind the uplink ({} now, {} evicted)",
            n.name,
            s.unicast,
            s.flooded,
            s.unknown,
            s.dropped,
            s.spoofed,
            s.learned,
            n.learned,
            s.evicted
        );
        if let Some(u) = n.uplink {
            log::info!(
                "{tag}:   uplink: {} frames sent, {} dropped (transmit ring full or frame too \
                 large), {} received, {} receive errors",
                u.sent,
                u.send_dropped,
                u.received,
                crate::drivers::uplink::rx_errors().unwrap_or(0)
            );
        }
    }
}

fn log_vm_stats(tag: &str) {
    for vm in registry::live() {
        log_vm(tag, &vm);
    }
}

/// Logs VM `vm`'s counters and its virtio devices' ones, each line starting with `tag:` (every
/// VM's at Ctrl-A s; a VM's own as its life ends, tagged `end`).
pub fn log_vm(tag: &str, vm: &vmm::vm::Vm) {
    {
        let state = if vm.is_stopped() { "stopped" } else { "running" };
        log::info!("{tag}: vm {} ({}, {state}): {}", vm.id, vm.name, vm.stats);
        let outbox_dropped: u64 = vm.nics.iter().map(|n| n.outbox_dropped()).sum();
        if outbox_dropped > 0 {
            log::info!("{tag}:   {outbox_dropped} frames dropped: its NIC outbox was full");
        }
        let mut bus = vm.devices.lock();
        let slots: alloc::vec::Vec<_> = bus.ranges().map(|(r, _)| r.start).collect();
        for ipa in slots {
            if let Some(slot) = bus.device_at_mut::<VirtioSlot>(ipa) {
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
