//! Calls from armhv (at EL2) into the platform firmware's PSCI (at EL3, or QEMU's emulation).
//!
//! The conduit must be `smc`: an `hvc` from EL2 would trap to armhv itself.

use core::sync::atomic::{AtomicBool, Ordering};
use smccc::Smc;
use smccc::psci;
use trap::speculation::{Firmware, FwAnswer};

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

/// Asks the firmware, on this CPU, about the Spectre workarounds (`SMCCC_ARCH_FEATURES`).
///
/// Only calls the firmware is known to have: an SMC whose function the firmware does not
/// implement may be UNDEFINED at EL2 (QEMU's PSCI emulation without EL3 knows only PSCI's
/// IDs). So PSCI_VERSION first (every PSCI has it), PSCI_FEATURES only from PSCI 1.0, and
/// SMCCC_VERSION only if PSCI_FEATURES says it exists; ARCH_FEATURES needs SMCCC 1.1.
pub fn spectre_workarounds() -> Firmware {
    if !USABLE.load(Ordering::Relaxed) {
        return Firmware::NONE;
    }
    let Ok(version) = psci::version::<Smc>() else {
        return Firmware::NONE;
    };
    if version.major < 1 {
        return Firmware::NONE;
    }
    if psci::psci_features::<Smc>(smccc::arch::SMCCC_VERSION).is_err() {
        return Firmware::NONE;
    }
    match smccc::arch::version::<Smc>() {
        Ok(v) if (v.major, v.minor) >= (1, 1) => {}
        _ => return Firmware::NONE,
    }
    let ask = |fid: u32| {
        let w0 = smccc::smc32(smccc::arch::SMCCC_ARCH_FEATURES, [fid, 0, 0, 0, 0, 0, 0])[0];
        FwAnswer::from_w0(w0 as i32)
    };
    Firmware {
        wa1: ask(smccc::arch::SMCCC_ARCH_WORKAROUND_1),
        wa3: ask(smccc::arch::SMCCC_ARCH_WORKAROUND_3),
    }
}
