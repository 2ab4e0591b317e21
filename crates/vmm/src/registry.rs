//! The VMs of the boot package by id, and the one life each is living, if any.
//!
//! An id is a VM's index in the boot package and is its for as long as armhv runs; the [`Vm`]
//! itself (RAM, Stage-2 table, devices, vCPUs) exists only from its start (`manage`) until its
//! stop has zeroed its RAM. Between two lives the slot is empty and the VM holds nothing.
//!
//! Whoever looks a VM up gets a counted reference for as long as it needs one. No CPU keeps one
//! from one step of its loop to the next (`cpu_loop` remembers ids, not VMs), so a VM ends, and
//! its frames and heap go back, within a step of its slot being emptied.

use super::vm::Vm;
use crate::sync::{Class, Lock};
use alloc::sync::Arc;
use alloc::vec::Vec;
use spin::Once;

static SLOTS: Once<Vec<Lock<Option<Arc<Vm>>>>> = Once::new();

/// Makes the `count` slots of the boot package's VMs, all empty (once, before any CPU
/// schedules).
pub fn define(count: usize) {
    SLOTS.call_once(|| (0..count).map(|_| Lock::new(Class::Registry, None)).collect());
}

fn slots() -> &'static [Lock<Option<Arc<Vm>>>] {
    SLOTS.get().map(|s| s.as_slice()).unwrap_or(&[])
}

/// How many VMs the boot package defines (running or not).
pub fn count() -> usize {
    slots().len()
}

/// VM `id`'s current life, if it has one.
pub fn get(id: usize) -> Option<Arc<Vm>> {
    slots().get(id)?.lock().clone()
}

/// Every VM that has a life now, by id.
pub fn live() -> Vec<Arc<Vm>> {
    slots().iter().filter_map(|s| s.lock().clone()).collect()
}

/// Calls `f` on every VM that has a life now, without collecting them (a CPU's scheduling path
/// walks them and allocates nothing).
pub fn for_each_live(mut f: impl FnMut(&Arc<Vm>)) {
    for slot in slots() {
        let vm = slot.lock().clone();
        if let Some(vm) = vm {
            f(&vm);
        }
    }
}

/// VM `vm.id` begins a life.
pub(crate) fn begin_life(vm: Arc<Vm>) {
    let previous = slots()[vm.id].lock().replace(vm);
    debug_assert!(previous.is_none(), "a VM started while its last life had not ended");
}

/// VM `id`'s life has ended: its slot is emptied. The VM is dropped when its last reference
/// goes, outside the slot's lock (dropping it takes other locks).
pub(crate) fn end_life(id: usize) -> Option<Arc<Vm>> {
    slots().get(id)?.lock().take()
}

/// `Vm` values not yet dropped (lives, and lives that ended but are still referenced): what
/// the final report waits for before it compares the heap with its baseline.
pub fn alive() -> usize {
    super::vm::alive()
}
