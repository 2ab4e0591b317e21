//! The vCPUs an event concerns beyond the one it happened on: emulation records them here and
//! returns, and the run loop hands them to the scheduler (`sched::wake`) once no device lock
//! is held. So device models and exit handlers never call the scheduler themselves.

use vgic::VcpuSet;
use vmconfig::MAX_VMS;

/// Per VM: the vCPUs to which interrupts became deliverable, and those PSCI CPU_ON started.
#[derive(Default)]
pub struct Wakeups {
    interrupts: [VcpuSet; MAX_VMS],
    started: [VcpuSet; MAX_VMS],
    any: bool,
}

impl Wakeups {
    /// Interrupts became deliverable to `set` of VM `vm`: each must see them soon.
    #[inline]
    pub fn interrupts(&mut self, vm: usize, set: VcpuSet) {
        if set.is_empty() {
            return;
        }
        if let Some(s) = self.interrupts.get_mut(vm) {
            *s = VcpuSet(s.0 | set.0);
            self.any = true;
        }
    }

    /// vCPU `index` of VM `vm` was made runnable (PSCI CPU_ON).
    pub fn started(&mut self, vm: usize, index: usize) {
        if let Some(s) = self.started.get_mut(vm) {
            s.insert(index);
            self.any = true;
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.any
    }

    /// Each VM's interrupt set and started set, for the VMs that have either.
    pub fn iter(&self) -> impl Iterator<Item = (usize, VcpuSet, VcpuSet)> + '_ {
        let vms = if self.any { MAX_VMS } else { 0 };
        (0..vms)
            .map(|vm| (vm, self.interrupts[vm], self.started[vm]))
            .filter(|(_, i, s)| !i.is_empty() || !s.is_empty())
    }
}
