//! The vCPUs an event concerns beyond the one it happened on: emulation records them here and
//! returns, and the run loop hands them to the scheduler (`sched::wake`) once no device lock
//! is held. So device models and exit handlers never call the scheduler themselves (but for
//! the vGIC's emulation, the SGI register's and the GIC frames', which hold no lock then and
//! whose kick is an IPI's latency: `emulate::sysreg`, `emulate::mmio`).

use vgic::VcpuSet;
use vmconfig::MAX_VMS;

const _: () = assert!(MAX_VMS <= 16);

/// Per VM: the vCPUs to which interrupts became deliverable, and those PSCI CPU_ON started.
/// The VMs concerned are a bit mask, so that the check on every exit is one compare and the
/// scheduler visits only those VMs. Aligned so that making one is a few paired stores of zero,
/// not a call to memset (one per run of a vCPU).
#[derive(Default)]
#[repr(align(16))]
pub struct Wakeups {
    vms: u16,
    interrupts: [VcpuSet; MAX_VMS],
    started: [VcpuSet; MAX_VMS],
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
            self.vms |= 1 << vm;
        }
    }

    /// vCPU `index` of VM `vm` was made runnable (PSCI CPU_ON).
    pub fn started(&mut self, vm: usize, index: usize) {
        if let Some(s) = self.started.get_mut(vm) {
            s.insert(index);
            self.vms |= 1 << vm;
        }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.vms == 0
    }

    /// Each VM concerned, with its interrupt set and its started set.
    pub fn iter(&self) -> impl Iterator<Item = (usize, VcpuSet, VcpuSet)> + '_ {
        let mut vms = self.vms;
        core::iter::from_fn(move || {
            (vms != 0).then(|| {
                let vm = vms.trailing_zeros() as usize;
                vms &= vms - 1;
                (vm, self.interrupts[vm], self.started[vm])
            })
        })
    }

    /// Empties it (once the scheduler was told), touching only the VMs it held.
    pub fn clear(&mut self) {
        let mut vms = self.vms;
        while vms != 0 {
            let vm = vms.trailing_zeros() as usize;
            vms &= vms - 1;
            self.interrupts[vm] = VcpuSet::EMPTY;
            self.started[vm] = VcpuSet::EMPTY;
        }
        self.vms = 0;
    }
}
