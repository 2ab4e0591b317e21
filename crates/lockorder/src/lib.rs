//! armhv's lock order, the one place it is written down: every lock of the hypervisor belongs
//! to a [`Class`], and a CPU may take a lock only if every lock it holds is of an earlier
//! class (outermost first). The hypervisor's lock types (`crates/vmm/src/sync.rs`) check each
//! acquisition against this order when built with the `lock-check` feature, which the QEMU
//! integration tests use, and in every host build of the monitor (its `cargo test`): a wrong
//! order panics there, naming both classes.
//!
//! | class | the lock | taken, for example, |
//! |---|---|---|
//! | `VcpuState` | a vCPU's register state (`VcpuSlot::state`) | by the CPU that runs it, for the whole run |
//! | `VcpuBoot` | a vCPU's pending CPU_ON (`VcpuSlot::boot`) | by PSCI CPU_ON in the caller's exit |
//! | `Scrub` | a VM's RAM-zeroing job (`Scrub::state`) | when a reset or stop starts or moves the job |
//! | `Uplink` | the machine's NIC, a network's uplink (`hypervisor/src/drivers/uplink.rs`) | by its interrupt, which delivers what it received into VMs (`Networks`, `Devices`) straight from its DMA buffers; by a transmit, with nothing else held |
//! | `Devices` | a VM's MMIO device bus (`Vm::devices`) | by an MMIO exit, a frame or console byte delivered to the VM |
//! | `Outbox` | a NIC's frames waiting for the switch | by virtio-net transmit, under `Devices` |
//! | `MachineDisk` | the machine disk's request queue | by virtio-blk submitting to a partition, under `Devices`; by the disk's interrupt alone |
//! | `Scheduler` | the credit scheduler | by a wake-up, a decision of the per-CPU loop |
//! | `Vgic` | a VM's virtual GIC model (`Vm::vgic`) | under `Devices` (a device's line), `Scheduler` (is a vCPU's interrupt pending) |
//! | `IrqDist` | the interrupt distributor's profile | under `Vgic` (a device interrupt is recorded) |
//! | `Networks` | the virtual switches | when frames are forwarded, a port is reset |
//! | `PhysGic` | the physical GIC driver | routing and enabling physical SPIs |
//! | `Frames` | the physical frame pool | allocating guest RAM and disks |
//! | `Lifecycle` | the VMs' life-cycle states and the queue of commands (`vmm::manage`); the console's command line | by a command (a control VM's, under its `Devices`), a guest's power event or a fault, never while its actions are carried out |
//! | `Registry` | the slot of a VM's current life (`vmm::registry`) | to look a VM up by id, under anything; nothing is taken under it |
//! | `Console` | the physical console | by every log line, under anything |
//!
//! The heap allocator's lock (inside `buddy_system_allocator`) comes after all of them: any
//! code may allocate while holding a lock, and the allocator takes none of these.
//!
//! One class may be held twice: `VcpuState`, when the CPU running a vCPU takes the state of
//! another vCPU that no CPU runs (to save its registers, which this CPU still holds, or to
//! reset it with its VM). Nobody waits for the running vCPU's state while holding that one: a
//! CPU only ever holds the state of the vCPU it runs, or one that nobody runs and try-locks.
//!
//! A try-lock (which never waits) is not checked against the order, but counts as held while
//! its guard lives, so that what is taken under it is.
#![no_std]

#[cfg(test)]
extern crate std;

use core::fmt;

/// A lock class; the declaration order is the lock order, outermost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Class {
    VcpuState,
    VcpuBoot,
    Scrub,
    Uplink,
    Devices,
    Outbox,
    MachineDisk,
    Scheduler,
    Vgic,
    IrqDist,
    Networks,
    PhysGic,
    Frames,
    Lifecycle,
    Registry,
    Console,
}

impl Class {
    /// Every class, outermost first.
    pub const ALL: [Class; 16] = [
        Class::VcpuState,
        Class::VcpuBoot,
        Class::Scrub,
        Class::Uplink,
        Class::Devices,
        Class::Outbox,
        Class::MachineDisk,
        Class::Scheduler,
        Class::Vgic,
        Class::IrqDist,
        Class::Networks,
        Class::PhysGic,
        Class::Frames,
        Class::Lifecycle,
        Class::Registry,
        Class::Console,
    ];

    /// How many locks of this class one CPU may hold at once.
    const fn max_held(self) -> u64 {
        match self {
            Class::VcpuState => 2,
            _ => 1,
        }
    }

    const fn shift(self) -> u32 {
        self as u32 * BITS
    }
}

/// Bits per class in [`Held`].
const BITS: u32 = 4;
const MASK: u64 = (1 << BITS) - 1;

/// The locks one CPU holds: a count per class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held(u64);

/// Taking a lock of class `taking` while holding one of class `holding` breaks the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Violation {
    pub taking: Class,
    pub holding: Class,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.taking == self.holding {
            write!(f, "a lock of class {:?} taken while holding as many as allowed", self.taking)
        } else {
            write!(
                f,
                "a lock of class {:?} taken while holding one of class {:?}, which comes after it \
                 in the lock order (crates/lockorder)",
                self.taking, self.holding
            )
        }
    }
}

impl Held {
    pub const NONE: Held = Held(0);

    /// The record as one word (a CPU keeps it in an atomic), and back.
    pub const fn bits(self) -> u64 {
        self.0
    }

    pub const fn from_bits(bits: u64) -> Held {
        Held(bits)
    }

    /// How many locks of `class` are held.
    pub const fn count(self, class: Class) -> u64 {
        (self.0 >> class.shift()) & MASK
    }

    /// The innermost class held, if any.
    pub fn innermost(self) -> Option<Class> {
        Class::ALL.iter().rev().copied().find(|&c| self.count(c) > 0)
    }

    /// Takes a lock of `class`, waiting for it if need be: allowed if nothing of a later class
    /// is held, nor as many of this class as it allows.
    pub fn acquire(self, class: Class) -> Result<Held, Violation> {
        if let Some(holding) = self.innermost()
            && (holding > class || (holding == class && self.count(class) >= class.max_held()))
        {
            return Err(Violation { taking: class, holding });
        }
        Ok(self.add(class))
    }

    /// Takes a lock of `class` without waiting (a try-lock that succeeded): never a deadlock,
    /// so not checked, but held from now on.
    pub fn acquire_without_waiting(self, class: Class) -> Held {
        self.add(class)
    }

    /// Releases a lock of `class`.
    pub fn release(self, class: Class) -> Held {
        debug_assert!(self.count(class) > 0, "releasing {class:?}, which is not held");
        Held(self.0 - (1 << class.shift()))
    }

    fn add(self, class: Class) -> Held {
        debug_assert!(self.count(class) < MASK, "too many {class:?} locks held");
        Held(self.0 + (1 << class.shift()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_is_the_declaration_order() {
        for pair in Class::ALL.windows(2) {
            assert!(pair[0] < pair[1], "{:?} before {:?}", pair[0], pair[1]);
        }
        assert!((Class::ALL.len() as u32) * BITS <= 64);
    }

    #[test]
    fn outer_then_inner_is_allowed() {
        let held = Held::NONE.acquire(Class::Devices).unwrap();
        let held = held.acquire(Class::Vgic).unwrap();
        let held = held.acquire(Class::IrqDist).unwrap();
        let held = held.acquire(Class::Console).unwrap();
        assert_eq!(held.innermost(), Some(Class::Console));
        let held = held
            .release(Class::Console)
            .release(Class::IrqDist)
            .release(Class::Vgic)
            .release(Class::Devices);
        assert_eq!(held, Held::NONE);
    }

    #[test]
    fn inner_then_outer_is_a_violation() {
        let held = Held::NONE.acquire(Class::Vgic).unwrap();
        assert_eq!(
            held.acquire(Class::Devices),
            Err(Violation { taking: Class::Devices, holding: Class::Vgic })
        );
        // What the check caught in the code before the order was written down: the scheduler
        // asked under a vGIC lock.
        assert!(held.acquire(Class::Scheduler).is_err());
    }

    #[test]
    fn a_class_taken_twice_only_where_allowed() {
        let held = Held::NONE.acquire(Class::Vgic).unwrap();
        assert_eq!(
            held.acquire(Class::Vgic),
            Err(Violation { taking: Class::Vgic, holding: Class::Vgic })
        );
        let held = Held::NONE.acquire(Class::VcpuState).unwrap();
        let held = held.acquire(Class::VcpuState).unwrap();
        assert_eq!(held.count(Class::VcpuState), 2);
        assert!(held.acquire(Class::VcpuState).is_err());
        assert!(held.acquire(Class::Scheduler).is_ok());
    }

    #[test]
    fn releasing_lets_an_outer_class_be_taken_again() {
        let held = Held::NONE.acquire(Class::Console).unwrap().release(Class::Console);
        assert!(held.acquire(Class::VcpuState).is_ok());
    }

    #[test]
    fn try_locks_are_held_but_not_checked() {
        let held = Held::NONE.acquire(Class::Vgic).unwrap();
        let held = held.acquire_without_waiting(Class::VcpuState);
        assert_eq!(held.count(Class::VcpuState), 1);
        // Under it, the order holds as usual.
        assert!(held.acquire(Class::Scheduler).is_err());
        assert!(held.acquire(Class::Console).is_ok());
    }

    #[test]
    fn violations_name_both_classes() {
        let v = Violation { taking: Class::Devices, holding: Class::Vgic };
        let text = std::format!("{v}");
        assert!(text.contains("Devices") && text.contains("Vgic"), "{text}");
    }
}
