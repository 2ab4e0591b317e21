//! The VMs armhv runs, installed once when the loader has built them and never freed (a
//! stopped VM keeps its slot: its id stays its index).

use super::vm::Vm;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use spin::Once;

static VMS: Once<Vec<Arc<Vm>>> = Once::new();
/// VMs that have not ended (`lifecycle`: stopped and their RAM zeroed).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Publishes the VMs (once, before any CPU schedules).
pub fn install(vms: Vec<Arc<Vm>>) {
    LIVE.store(vms.len(), Ordering::Release);
    VMS.call_once(|| vms);
}

/// A VM has ended; returns whether it was the last one.
pub fn vm_ended() -> bool {
    LIVE.fetch_sub(1, Ordering::AcqRel) == 1
}

/// Every VM, by id; empty until [`install`].
pub fn vms() -> &'static [Arc<Vm>] {
    VMS.get().map(|v| v.as_slice()).unwrap_or(&[])
}

/// VM `id`, if installed.
pub fn get(id: usize) -> Option<&'static Arc<Vm>> {
    vms().get(id)
}
