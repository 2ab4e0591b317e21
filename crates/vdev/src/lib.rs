//! Emulated MMIO devices and the bus that routes guest accesses to them, and the line
//! discipline of the console the VMs share ([`console`]).
//!
//! A guest load or store to an IPA with no Stage-2 mapping traps to EL2 as a
//! data abort; `trap::decode` turns it into an `MmioAccess`. The hypervisor
//! then asks the VM's [`MmioBus`] which device owns the IPA and calls the
//! device's [`MmioDevice::read`] or [`MmioDevice::write`] with the offset
//! inside the device's region. A device answers `Err` for accesses real
//! hardware would reject on the bus; the hypervisor reflects those into the
//! guest as a synchronous external abort (`trap::inject_abort`), just as a
//! bus error would.
//!
//! Devices are portable state machines: no EL2 code, no locks, no interrupt
//! controller. A device exposes its interrupt line as a level
//! ([`Pl011::irq_level`]) for the vGIC to sample.
//!
//! [`AccessWidth`] is defined in `trap` and re-exported here: the decoder is
//! where widths come from, and `vdev -> trap` keeps the dependency one-way.
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

use core::any::Any;
use core::fmt;

pub mod bus;
pub mod console;
pub mod pl011;

pub use bus::{InsertError, MmioBus};
pub use pl011::Pl011;
pub use trap::AccessWidth;

/// Why an emulated access failed. The hypervisor injects a synchronous
/// external data abort into the guest for every variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MmioError {
    /// The address is not a multiple of the access size.
    Unaligned,
    /// The device does not support accesses of this size at this offset.
    BadWidth,
    /// No device (or no register block) at this address.
    Unmapped,
}

impl fmt::Display for MmioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unaligned => "unaligned access",
            Self::BadWidth => "unsupported access width",
            Self::Unmapped => "no device at address",
        })
    }
}

/// An emulated memory-mapped device.
///
/// `offset` is relative to the start of the device's region on the bus and
/// `width` is one of 1, 2, 4, 8 bytes. `read` returns the value zero-extended
/// to 64 bits; `write` receives the value already truncated to `width`.
/// Sign extension and register write-back are the caller's business
/// (`trap::MmioAccess::load_value`).
///
/// `Any` is a supertrait so that the hypervisor can get its concrete device
/// back from the bus (see [`MmioBus::device_mut`]) to feed input or collect
/// output between traps.
pub trait MmioDevice: Any + Send {
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError>;
    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError>;
    /// Short name for diagnostics ("pl011").
    fn name(&self) -> &'static str;
    /// The device's interrupt output, if it changed since the last call, as (INTID, level). The
    /// hypervisor asks after every access and forwards a change to the virtual GIC; devices
    /// without an interrupt keep the default.
    fn irq_change(&mut self) -> Option<(u32, bool)> {
        None
    }
    /// Whether the last write started more work than one access may do at EL2 and the device
    /// left the rest for later: the hypervisor then does not complete the guest's store but
    /// lets it execute again, so that the rest is done in the guest's own time, a bounded
    /// piece per trap, with the CPU's interrupts and the scheduler in between. Devices that
    /// finish every access keep the default.
    fn write_unfinished(&self) -> bool {
        false
    }
}

impl dyn MmioDevice {
    /// The device as its concrete type, if it is a `T`.
    pub fn downcast_mut<T: MmioDevice>(&mut self) -> Option<&mut T> {
        (self as &mut dyn Any).downcast_mut::<T>()
    }

    /// The device as its concrete type, if it is a `T`.
    pub fn downcast_ref<T: MmioDevice>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref::<T>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn error_display() {
        assert_eq!(format!("{}", MmioError::Unaligned), "unaligned access");
        assert_eq!(format!("{}", MmioError::BadWidth), "unsupported access width");
        assert_eq!(format!("{}", MmioError::Unmapped), "no device at address");
    }

    #[test]
    fn downcast() {
        let mut uart = Pl011::new();
        let dev: &mut dyn MmioDevice = &mut uart;
        assert!(dev.downcast_mut::<Pl011>().is_some());
        assert_eq!(dev.downcast_ref::<Pl011>().unwrap().unknown_accesses(), 0);
    }
}
