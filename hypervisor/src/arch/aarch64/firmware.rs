//! Calls from armhv (at EL2) into the platform firmware's PSCI (at EL3, or QEMU's emulation).
//!
//! The conduit must be `smc`: an `hvc` from EL2 would trap to armhv itself.

use core::sync::atomic::{AtomicBool, Ordering};
use smccc::Smc;
use smccc::psci;

static USABLE: AtomicBool = AtomicBool::new(false);

/// Records that the device tree named an SMC conduit; returns an explanation if it did not.
pub fn init(method: Option<&str>) -> Result<(), &'static str> {
    match method {
        Some("smc") => {
            USABLE.store(true, Ordering::Relaxed);
            Ok(())
        }
        Some("hvc") => {
            Err("the firmware's PSCI conduit is hvc, which from EL2 would trap to armhv itself; \
             start QEMU with -M virt,virtualization=on so PSCI is reached through smc")
        }
        _ => Err("the device tree has no /psci node with a method: cannot start other CPUs"),
    }
}

pub fn cpu_on(mpidr: u64, entry: u64, context: u64) -> Result<(), psci::error::Error> {
    if !USABLE.load(Ordering::Relaxed) {
        return Err(psci::error::Error::NotSupported);
    }
    psci::cpu_on::<Smc>(mpidr, entry, context)
}

/// Turns this CPU off; returns only if the firmware refused.
pub fn cpu_off() {
    if USABLE.load(Ordering::Relaxed) {
        let _ = psci::cpu_off::<Smc>();
    }
}

/// Powers the machine off; QEMU exits with status 0. Returns only if the firmware refused.
pub fn system_off() {
    if USABLE.load(Ordering::Relaxed) {
        let _ = psci::system_off::<Smc>();
    }
}
