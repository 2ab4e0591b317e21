//! SMCCC calls through the conduit the device tree names, and the PSCI and
//! SMCCC function IDs the guests use (armhv's own are `guest_abi::hypercall`).

use crate::console::Global;
use crate::{boot, cpu, time};
use guest_abi::hypercall::{self, ARMHV_VM_EXITS, ARMHV_VM_INFO};

pub const SMCCC_VERSION: u32 = 0x8000_0000;
pub const PSCI_VERSION: u32 = 0x8400_0000;
pub const PSCI_FEATURES: u32 = 0x8400_000A;
pub const PSCI_CPU_OFF: u32 = 0x8400_0002;
pub const PSCI_CPU_ON: u32 = 0xC400_0003;
pub const PSCI_AFFINITY_INFO: u32 = 0xC400_0004;
pub const PSCI_SYSTEM_OFF: u32 = 0x8400_0008;
pub const PSCI_SYSTEM_RESET: u32 = 0x8400_0009;
/// In armhv's vendor range but not assigned: must return NOT_SUPPORTED.
pub const ARMHV_UNKNOWN: u32 = hypercall::PREFIX | 0x0FFF;
const _: () =
    assert!(!hypercall::is_call(ARMHV_UNKNOWN) && ARMHV_UNKNOWN != hypercall::ARMHV_TEST_HYP_FAULT);

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Conduit {
    Hvc,
    Smc,
}

static CONDUIT: Global<Conduit> = Global::new(Conduit::Hvc);

pub fn set_conduit(conduit: Conduit) {
    CONDUIT.set(conduit);
}

pub fn conduit() -> Conduit {
    CONDUIT.get()
}

/// An SMC64/SMC32 fast call: function ID in w0, arguments in x1..x3, results x0..x3.
pub fn call(fid: u32, a1: u64, a2: u64, a3: u64) -> [u64; 4] {
    let (mut r0, mut r1, mut r2, mut r3) = (u64::from(fid), a1, a2, a3);
    // SAFETY: an SMCCC call changes no Rust-visible memory; x4..x17 are declared
    // clobbered because SMCCC 1.0 allowed the callee to use them.
    unsafe {
        match conduit() {
            Conduit::Hvc => core::arch::asm!(
                "hvc #0",
                inout("x0") r0, inout("x1") r1, inout("x2") r2, inout("x3") r3,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
                out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                options(nostack),
            ),
            Conduit::Smc => core::arch::asm!(
                "smc #0",
                inout("x0") r0, inout("x1") r1, inout("x2") r2, inout("x3") r3,
                out("x4") _, out("x5") _, out("x6") _, out("x7") _, out("x8") _,
                out("x9") _, out("x10") _, out("x11") _, out("x12") _, out("x13") _,
                out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                options(nostack),
            ),
        }
    }
    [r0, r1, r2, r3]
}

/// AFFINITY_INFO's answer for a CPU that is off (0: on, 2: on pending).
pub const AFFINITY_OFF: i64 = 1;

/// PSCI AFFINITY_INFO of one CPU (lowest affinity level 0).
pub fn affinity_info(mpidr: u64) -> i64 {
    call(PSCI_AFFINITY_INFO, mpidr, 0, 0)[0] as i64
}

/// PSCI CPU_ON of the CPU with affinity `mpidr` at the guest's secondary entry,
/// on stack slot `slot` (1..MAX_CPUS). Returns PSCI's status.
pub fn cpu_on(mpidr: u64, slot: usize) -> i64 {
    call(PSCI_CPU_ON, mpidr, boot::secondary_entry_point(), slot as u64)[0] as i64
}

/// Waits up to `ms` for `mpidr` to be off; returns the last AFFINITY_INFO answer.
pub fn wait_off(mpidr: u64, ms: u64) -> i64 {
    let deadline = time::counter() + time::ms_to_ticks(ms);
    loop {
        let state = affinity_info(mpidr);
        if state == AFFINITY_OFF || time::passed(deadline) {
            return state;
        }
        cpu::wfe();
    }
}

/// True when running under armhv (ARMHV_VM_INFO answers; plain QEMU says NOT_SUPPORTED).
pub fn under_armhv() -> bool {
    call(ARMHV_VM_INFO, 0, 0, 0)[0] == 0
}

/// The VM's total exit count so far (ARMHV_VM_EXITS), `None` outside armhv.
pub fn vm_exits() -> Option<u64> {
    let [status, exits, ..] = call(ARMHV_VM_EXITS, 0, 0, 0);
    (status == 0).then_some(exits)
}

/// PSCI SYSTEM_OFF; if the call returns, says so and parks the CPU.
pub fn system_off() -> ! {
    call(PSCI_SYSTEM_OFF, 0, 0, 0);
    crate::println!("{}: SYSTEM_OFF returned", crate::name());
    halt()
}

/// Parks this CPU for good.
pub fn halt() -> ! {
    loop {
        // SAFETY: `wfi` only waits; DAIF stays masked, so nothing is taken.
        unsafe { core::arch::asm!("wfi", options(nomem, nostack)) }
    }
}
