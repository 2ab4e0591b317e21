//! The PMU: its cycle counter, for benchmark VMs (`pmu = "raw"`) and for armhv's own
//! world-switch breakdown (feature `ws-breakdown`), and the save and restore of the guests'
//! virtual PMUs (`vmm::emulate::pmu`). Under QEMU with `-icount shift=0` the cycle counter
//! counts one per instruction at every exception level, which makes path lengths exact.

use aarch64_cpu::registers::{ID_AA64DFR0_EL1, Readable};
use core::sync::atomic::{AtomicU8, Ordering};
use vmm::arch::{MAX_CPUS, PmuReg, PmuState};

/// PMCR_EL0.N: event counters this CPU implements (MDCR_EL2.HPMN hands all of them to a VM);
/// 0 without an architected PMU.
pub fn event_counters() -> u64 {
    if !present() {
        return 0;
    }
    let pmcr: u64;
    // SAFETY: reading PMCR_EL0 at EL2 has no side effects.
    unsafe { core::arch::asm!("mrs {}, pmcr_el0", out(reg) pmcr, options(nomem, nostack)) };
    (pmcr >> 11) & 0x1f
}

const UNKNOWN: u8 = 0xff;
/// ID_AA64DFR0_EL1.PMUVer, read once.
static VERSION: AtomicU8 = AtomicU8::new(UNKNOWN);

fn version() -> u8 {
    match VERSION.load(Ordering::Relaxed) {
        UNKNOWN => {
            let ver = ((ID_AA64DFR0_EL1.get() >> 8) & 0xf) as u8;
            VERSION.store(ver, Ordering::Relaxed);
            ver
        }
        v => v,
    }
}

/// An architected PMU (PMUVer 0 is none, 0xf an IMPLEMENTATION DEFINED one): without it
/// every PMU register is UNDEFINED, at EL2 too, and the guests' PMUs are left alone.
fn present() -> bool {
    (1..0xf).contains(&version())
}

/// Whether MDCR_EL2.HPMD exists (FEAT_PMUv3p1: PMUVer 4 or more): counting at EL2 can then
/// be prohibited.
pub fn has_hpmd() -> bool {
    (4..0xf).contains(&version())
}

/// The cycle counter now. The `isb` keeps the read from moving across the code being timed.
#[inline(always)]
pub fn cycles() -> u64 {
    let v: u64;
    // SAFETY: reading PMCCNTR_EL0 at EL2 has no side effects.
    unsafe { core::arch::asm!("isb", "mrs {}, pmccntr_el0", out(reg) v, options(nomem, nostack)) };
    v
}

/// Starts the 64-bit cycle counter, counting at EL2 too (PMCCFILTR_EL0.NSH).
pub fn enable_cycle_counter() {
    const PMCR_E: u64 = 1 << 0;
    const PMCR_LC: u64 = 1 << 6;
    const PMCNTEN_C: u64 = 1 << 31;
    const PMCCFILTR_NSH: u64 = 1 << 27;
    // SAFETY: programming this CPU's PMU affects only what its counters count.
    unsafe {
        core::arch::asm!(
            "mrs {t}, pmcr_el0",
            "orr {t}, {t}, {e}",
            "msr pmcr_el0, {t}",
            "msr pmcntenset_el0, {c}",
            "msr pmccfiltr_el0, {f}",
            "isb",
            t = out(reg) _,
            e = in(reg) PMCR_E | PMCR_LC,
            c = in(reg) PMCNTEN_C,
            f = in(reg) PMCCFILTR_NSH,
            options(nostack),
        );
    }
}

macro_rules! mrs {
    ($reg:literal) => {{
        let v: u64;
        // SAFETY: reading a PMU register at EL2 has no side effects.
        unsafe { core::arch::asm!(concat!("mrs {}, ", $reg), out(reg) v, options(nomem, nostack)) };
        v
    }};
}

macro_rules! msr {
    ($reg:literal, $v:expr) => {{
        let v: u64 = $v;
        // SAFETY: the PMU's registers control only what its counters count and when its
        // overflow interrupt (a PPI armhv handles) is raised; armhv's own use of the PMU is
        // its state saved by `load` and given back by `put`.
        unsafe { core::arch::asm!(concat!("msr ", $reg, ", {}"), in(reg) v, options(nomem, nostack)) };
    }};
}

/// Selects event counter `n` for PMXEVTYPER_EL0 and PMXEVCNTR_EL0 (the caller restores
/// PMSELR_EL0 where it matters).
fn select(n: u8) {
    msr!("pmselr_el0", u64::from(n));
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// Reads a PMU register of the loaded state.
pub fn read(reg: PmuReg) -> u64 {
    if !present() {
        return 0;
    }
    match reg {
        PmuReg::Pmcr => mrs!("pmcr_el0"),
        PmuReg::CntenSet | PmuReg::CntenClr => mrs!("pmcntenset_el0"),
        PmuReg::OvsSet | PmuReg::OvsClr => mrs!("pmovsset_el0"),
        PmuReg::IntenSet | PmuReg::IntenClr => mrs!("pmintenset_el1"),
        PmuReg::SwInc => 0,
        PmuReg::Selr => mrs!("pmselr_el0"),
        PmuReg::Ceid0 => mrs!("pmceid0_el0"),
        PmuReg::Ceid1 => mrs!("pmceid1_el0"),
        PmuReg::Ccntr => mrs!("pmccntr_el0"),
        PmuReg::UserEnr => mrs!("pmuserenr_el0"),
        PmuReg::EvTyper(31) => mrs!("pmccfiltr_el0"),
        PmuReg::EvCntr(n) | PmuReg::EvTyper(n) => {
            let sel = mrs!("pmselr_el0");
            select(n);
            let v = if matches!(reg, PmuReg::EvCntr(_)) {
                mrs!("pmxevcntr_el0")
            } else {
                mrs!("pmxevtyper_el0")
            };
            msr!("pmselr_el0", sel);
            v
        }
    }
}

/// Writes a PMU register of the loaded state.
pub fn write(reg: PmuReg, value: u64) {
    if !present() {
        return;
    }
    match reg {
        PmuReg::Pmcr => msr!("pmcr_el0", value),
        PmuReg::CntenSet => msr!("pmcntenset_el0", value),
        PmuReg::CntenClr => msr!("pmcntenclr_el0", value),
        PmuReg::OvsSet => msr!("pmovsset_el0", value),
        PmuReg::OvsClr => msr!("pmovsclr_el0", value),
        PmuReg::IntenSet => msr!("pmintenset_el1", value),
        PmuReg::IntenClr => msr!("pmintenclr_el1", value),
        PmuReg::SwInc => msr!("pmswinc_el0", value),
        PmuReg::Selr => msr!("pmselr_el0", value),
        PmuReg::Ceid0 | PmuReg::Ceid1 => {}
        PmuReg::Ccntr => msr!("pmccntr_el0", value),
        PmuReg::UserEnr => msr!("pmuserenr_el0", value),
        PmuReg::EvTyper(31) => msr!("pmccfiltr_el0", value),
        PmuReg::EvCntr(n) | PmuReg::EvTyper(n) => {
            let sel = mrs!("pmselr_el0");
            select(n);
            if matches!(reg, PmuReg::EvCntr(_)) {
                msr!("pmxevcntr_el0", value);
            } else {
                msr!("pmxevtyper_el0", value);
            }
            msr!("pmselr_el0", sel);
        }
    }
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// Per CPU: armhv's own PMU state while a vCPU's is loaded. Only its own CPU touches it,
/// with interrupts masked at EL2, so the locks are never contended.
static HOST: [spin::Mutex<PmuState>; MAX_CPUS] =
    [const { spin::Mutex::new(PmuState::RESET) }; MAX_CPUS];

/// PMCR_EL0.P and .C: reset the counters (and read as zero).
const PMCR_RESETS: u64 = 0b110;

fn save(s: &mut PmuState) {
    s.pmcr = mrs!("pmcr_el0") & 0xff & !PMCR_RESETS;
    s.pmselr = mrs!("pmselr_el0");
    s.pmcntenset = mrs!("pmcntenset_el0");
    s.pmintenset = mrs!("pmintenset_el1");
    s.pmovsset = mrs!("pmovsset_el0");
    s.pmuserenr = mrs!("pmuserenr_el0");
    s.pmccntr = mrs!("pmccntr_el0");
    s.pmccfiltr = mrs!("pmccfiltr_el0");
    for n in 0..event_counters() as u8 {
        select(n);
        s.pmevtyper[n as usize] = mrs!("pmxevtyper_el0");
        s.pmevcntr[n as usize] = mrs!("pmxevcntr_el0");
    }
}

fn restore(s: &PmuState) {
    // Nothing counts or interrupts until the whole state is in.
    msr!("pmcr_el0", 0);
    msr!("pmcntenclr_el0", u64::from(u32::MAX));
    msr!("pmintenclr_el1", u64::from(u32::MAX));
    msr!("pmovsclr_el0", u64::from(u32::MAX));
    for n in 0..event_counters() as u8 {
        select(n);
        msr!("pmxevtyper_el0", s.pmevtyper[n as usize]);
        msr!("pmxevcntr_el0", s.pmevcntr[n as usize]);
    }
    msr!("pmselr_el0", s.pmselr);
    msr!("pmccfiltr_el0", s.pmccfiltr);
    msr!("pmccntr_el0", s.pmccntr);
    msr!("pmuserenr_el0", s.pmuserenr);
    msr!("pmovsset_el0", s.pmovsset);
    msr!("pmintenset_el1", s.pmintenset);
    msr!("pmcntenset_el0", s.pmcntenset);
    msr!("pmcr_el0", s.pmcr & !PMCR_RESETS);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// Saves armhv's own state on this CPU and loads a vCPU's.
pub fn load(state: &PmuState) {
    if !present() {
        return;
    }
    save(&mut HOST[super::cpu::current()].lock());
    restore(state);
}

/// Saves the loaded vCPU's state and gives armhv its own back.
pub fn put(state: &mut PmuState) {
    if !present() {
        return;
    }
    save(state);
    restore(&HOST[super::cpu::current()].lock());
}
