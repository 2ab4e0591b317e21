//! What armhv itself holds — heap bytes and physical frames — at two points of the machine's
//! life that must agree, and the report when every VM has ended.
//!
//! A VM keeps its RAM, Stage-2 table, disks and device models for as long as armhv runs: the
//! scheduler's per-CPU lists and the console refer to it, and nothing frees a VM. So the leak
//! check compares equal points of the VMs' life cycle, not "before" and "after" them:
//!
//! - the **baseline**: every VM built and every CPU's scheduler list made, before any guest
//!   instruction runs ([`cpu_ready`] is a start barrier);
//! - the **end**: every VM stopped and its devices back in their power-on state, which is what a
//!   SYSTEM_RESET leaves ([`devices_to_power_on`]: queues and scratch buffers forgotten,
//!   outboxes emptied, the switch's addresses of its ports forgotten, a fresh vGIC).
//!
//! Whatever a run leaves allocated beyond that — a frame stuck in an outbox, a buffer grown
//! for good, a reset that allocates without freeing — shows as a difference in [`final_report`].

use super::sched;
use super::uart::VmUart;
use super::vm::Vm;
use crate::arch::aarch64::cpu;
use crate::mm::{frames, heap};
use core::sync::atomic::{AtomicUsize, Ordering};
use spin::Once;

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
    BASELINE.call_once(|| {
        let u = Usage::now();
        log::info!(
            "usage: baseline: {} bytes of heap, {} frames ({} VMs built)",
            u.heap_bytes,
            u.frames,
            sched::vms().len()
        );
        u
    });
}

/// Puts `vm`'s devices back in their power-on state (a reset; the end of the VM). Its vCPUs
/// must not be running. A disk keeps its contents.
pub fn devices_to_power_on(vm: &Vm) {
    {
        let mut devices = vm.devices.lock();
        if let Some(uart) = devices.device_mut::<VmUart>() {
            uart.reset();
        }
        super::virtio::reset_all(&mut devices);
    }
    for nic in &vm.nics {
        nic.reset();
    }
    let mut gic = vm.vgic.lock();
    let config = vgic::VgicConfig { vcpus: gic.vcpus(), spis: gic.spis() };
    if let Ok(fresh) = vgic::Vgic::with_clean_flags(config, vm.vgic_clean.clone()) {
        *gic = fresh;
        super::irqdist::reapply(vm, &mut gic);
    }
}

/// When the last VM has stopped: every VM's statistics, then heap and frame usage against the
/// baseline, with every VM's devices back in their power-on state.
pub fn final_report() {
    super::stats::log_all("end");
    super::irqdist::print_totals();
    for vm in sched::vms() {
        devices_to_power_on(vm);
    }
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
