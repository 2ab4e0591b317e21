//! Spectre-v2 and Spectre-BHB on this CPU: reads what the portable policy
//! (`trap::speculation`) decides from, hands its exit work to the exception vectors and its
//! states to the hypercall layer, which answers guests' `SMCCC_ARCH_FEATURES`.

use aarch64_cpu::registers::{ID_AA64MMFR1_EL1, ID_AA64PFR0_EL1, Readable};
use core::sync::atomic::{AtomicU64, Ordering};
use trap::speculation::{CpuIds, Options, Plan, core_name};

use super::cpu::MAX_CPUS;

/// Per CPU (indexed by TPIDR_EL2), what vectors.S does on every exit from a guest, as
/// `ExitWork::encode` packs it; zero: nothing. Written once per CPU before it runs a guest.
#[unsafe(no_mangle)]
static SPECTRE_EXIT_WORK: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// The MIDRs already described in the log: one line per core type, not per CPU.
static LOGGED: spin::Mutex<heapless::Vec<u64, 8>> = spin::Mutex::new(heapless::Vec::new());

const OPTIONS: Options = Options { bhb_off: cfg!(feature = "no-spectre-bhb") };

/// ID_AA64ISAR2_EL1, which `aarch64-cpu` does not name. Its encoding lies in the ID register
/// space, which reads as zero where a CPU predates the register.
fn id_aa64isar2() -> u64 {
    let v: u64;
    // SAFETY: reading an ID register has no side effects.
    unsafe { core::arch::asm!("mrs {}, s3_0_c0_c6_2", out(reg) v, options(nomem, nostack)) };
    v
}

/// Decides this CPU's mitigations and puts them in place; called on every CPU (after
/// `cpu::set_current`) before it runs a guest.
pub fn init_cpu(index: usize) {
    let ids = CpuIds {
        midr: super::cpu::midr(),
        pfr0: ID_AA64PFR0_EL1.get(),
        mmfr1: ID_AA64MMFR1_EL1.get(),
        isar2: id_aa64isar2(),
    };
    let firmware = super::firmware::spectre_workarounds();
    let plan = Plan::decide(ids, firmware, OPTIONS);
    if let Some(slot) = SPECTRE_EXIT_WORK.get(index) {
        slot.store(plan.exit_work().encode(), Ordering::Relaxed);
    }
    vmm::emulate::hypercall::record_speculation(&plan);

    let mut logged = LOGGED.lock();
    if logged.contains(&ids.midr) {
        return;
    }
    let _ = logged.push(ids.midr);
    drop(logged);
    log::debug!(
        "speculation: CPU {index}: MIDR {:#x}, ID_AA64PFR0 {:#x}, ID_AA64MMFR1 {:#x}, \
         ID_AA64ISAR2 {:#x}, firmware {firmware:?}",
        ids.midr,
        ids.pfr0,
        ids.mmfr1,
        ids.isar2
    );
    let name = core_name(ids.midr).unwrap_or("this core");
    if plan.v2_state() == trap::speculation::State::Vulnerable
        || plan.bhb_state() == trap::speculation::State::Vulnerable
    {
        log::warn!("speculation: {name} (MIDR {:#x}): {plan}", ids.midr);
    } else {
        log::info!("speculation: {name} (MIDR {:#x}): {plan}", ids.midr);
    }
}
