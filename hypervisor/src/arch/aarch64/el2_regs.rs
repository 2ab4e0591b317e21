//! The EL2 registers that put a guest in its box: the per-CPU trap configuration (HCR_EL2,
//! CPTR_EL2, MDCR_EL2, CNTHCTL_EL2, VTCR_EL2) and the running VM's own values (VTTBR_EL2,
//! CNTVOFF_EL2, MDCR_EL2), loaded when the CPU switches VMs.

use aarch64_cpu::registers::{
    CNTHCTL_EL2, CNTVOFF_EL2, CPTR_EL2, HCR_EL2, MDCR_EL2, ReadWriteable, Readable, VTCR_EL2,
    VTTBR_EL2, Writeable,
};
use vmm::arch::PmuMode;

/// HCR_EL2 for running a guest. Each trap is there because the guest must not do the thing
/// directly on a machine it shares:
/// - VM: Stage-2 translation on; RW: EL1 is AArch64.
/// - IMO/FMO/AMO: physical interrupts and SErrors go to EL2, virtual ones to the guest.
/// - FB, BSU=inner shareable: the guest's TLB/cache maintenance and barriers reach every CPU the
///   vCPU may have run on.
/// - PTW: a guest page-table walk that hits device memory faults instead of reading a device.
/// - TWI/TWE: an idle guest gives its CPU back instead of sleeping on it.
/// - TSC: SMC would reach the firmware (PSCI for the whole machine); armhv emulates it.
/// - TSW (+SWIO): set/way cache maintenance would act on caches shared with other VMs.
/// - TACR, TIDCP: ACTLR and implementation-defined registers control the physical CPU.
/// - TID3: the ID registers are sanitized so guests do not use what is not virtualized
///   (PMU, SME, SPE...; SVE where not every CPU has it).
/// - TERR: the RAS error records (ERRSELR_EL1, ERXSTATUS_EL1...) are the physical CPU's: a
///   guest could read other VMs' errors, clear or disable them. They are UNDEFINED for guests,
///   as ID_AA64PFR0_EL1.RAS = 0 says (`vmm::emulate::sysreg`).
/// - TLOR: the LORegion registers (LORSA_EL1...) are the physical CPU's and not switched: they
///   are UNDEFINED for guests, as ID_AA64MMFR1_EL1.LO = 0 says.
/// - API/APK clear: pointer authentication traps until the vCPU's keys are loaded
///   (`set_pauth_trap`).
/// - TEA: a synchronous external abort on a guest's access comes to EL2, which sees every
///   memory error a guest causes, and gives it back to that guest (`vmm::exits`).
///
/// And FWB (FEAT_S2FWB) where the CPUs have it: Stage-2 forces guest RAM to Normal Write-Back
/// (the tables' encoding, `stage2::Fwb`), so a guest with its MMU off sees what armhv wrote
/// through its caches (docs/design.md, "Guests with caches off").
pub fn configure_hcr() {
    let fwb = if super::cache::stage2_fwb() { HCR_EL2::FWB::SET } else { HCR_EL2::FWB::CLEAR };
    HCR_EL2.write(
        fwb + HCR_EL2::VM::Enable
            + HCR_EL2::RW::EL1IsAarch64
            + HCR_EL2::IMO::EnableVirtualIRQ
            + HCR_EL2::FMO::EnableVirtualFIQ
            + HCR_EL2::AMO::SET
            + HCR_EL2::FB::SET
            + HCR_EL2::BSU::InnerShareable
            + HCR_EL2::PTW::SET
            + HCR_EL2::TWI::SET
            + HCR_EL2::TWE::SET
            + HCR_EL2::TSC::EnableTrapEl1SmcToEl2
            + HCR_EL2::TSW::SET
            + HCR_EL2::SWIO::SET
            + HCR_EL2::TACR::SET
            + HCR_EL2::TIDCP::SET
            + HCR_EL2::TID3::SET
            + HCR_EL2::TERR::SET
            + HCR_EL2::TLOR::SET
            + HCR_EL2::TEA::SET,
    );
}

/// The rest of the per-CPU EL2 setup, done once on every CPU before it runs guests.
pub fn configure_cpu(vtcr: u64) {
    VTCR_EL2.set(vtcr);
    set_fp_traps(true, true);
    MDCR_EL2.set(mdcr(PmuMode::Off));
    super::debug::unlock_os_lock();
    // The guest reads the physical counter (EL1PCTEN) but its physical timer accesses trap
    // (EL1PCEN = 0): the physical timer belongs to armhv.
    CNTHCTL_EL2.write(CNTHCTL_EL2::EL1PCTEN::SET);
    // MIDR_EL1 as guests read it: this CPU's own, so that a guest applies the errata
    // workarounds of the core it runs on. Written, not left at its reset value, which is
    // architecturally UNKNOWN. (MPIDR_EL1 is each vCPU's own: VMPIDR_EL2, part of its EL1
    // state, `vmm::arch::El1State::reset`.)
    super::cpu::set_guest_midr(super::cpu::midr());
    configure_hcr();
}

/// RES1 bits of CPTR_EL2 (nVHE, HCR_EL2.E2H = 0, as armhv runs): 13, 12 (TSM with SME: SME
/// always traps, it is hidden), 9, 7..0.
const CPTR_EL2_RES1: u64 = 0x32ff;
/// CPTR_EL2.TFP: trap FP/SIMD (and SVE) use at EL0/EL1, and at EL2 itself.
const CPTR_EL2_TFP: u64 = 1 << 10;
/// CPTR_EL2.TZ: trap SVE instructions and ZCR_EL1/ZCR_EL2 accesses (EC 0x19), at EL2 too. RES1
/// on a CPU without SVE: the monitor lifts it only when every CPU has SVE.
const CPTR_EL2_TZ: u64 = 1 << 8;
/// CPTR_EL2.TAM: the activity monitors' registers trap (and are UNDEFINED for guests, as the ID
/// registers hide AMU): their counters are the physical CPU's, never switched. RES0 without
/// FEAT_AMUv1, where nothing can reach them anyway; set always, as KVM does.
const CPTR_EL2_TAM: u64 = 1 << 30;

/// Traps (or stops trapping) the guest's first FP/SIMD and SVE uses: the lazy switch.
pub fn set_fp_traps(fp: bool, sve: bool) {
    let fp = if fp { CPTR_EL2_TFP } else { 0 };
    let sve = if sve { CPTR_EL2_TZ } else { 0 };
    CPTR_EL2.set(CPTR_EL2_RES1 | CPTR_EL2_TAM | fp | sve);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// Traps (or stops trapping) the guest's pointer-authentication instructions (HCR_EL2.API
/// clear) and key registers (HCR_EL2.APK clear): the lazy key switch (`vmm::emulate::pauth`).
/// Takes effect at the next `eret`, a context synchronization event.
pub fn set_pauth_trap(trap: bool) {
    if trap {
        HCR_EL2.modify(HCR_EL2::API::CLEAR + HCR_EL2::APK::CLEAR);
    } else {
        HCR_EL2.modify(HCR_EL2::API::SET + HCR_EL2::APK::SET);
    }
}

/// MDCR_EL2.TDA (bit 9), as the monitor clears and sets it per vCPU.
pub const MDCR_TDA: u64 = 1 << 9;

/// MDCR_EL2 for a VM. TDE is never set: the guest's debug exceptions go to the guest.
/// TDOSA (OS lock, DBGPRCR_EL1) and TDRA (MDRAR_EL1) always trap: they control the physical
/// CPU's power and external debug. TDA traps the breakpoints, watchpoints and MDSCR_EL1 until
/// a vCPU uses them; the monitor then loads them and clears it for that vCPU
/// (`vmm::emulate::debug`). So do, where the CPU has them, the statistical profiling controls
/// (TPMS: PMSCR_EL1...; E2PB = 0 keeps the profiling buffer's PMB* registers EL2's) and the
/// trace filter (TTRF: TRFCR_EL1; E2TB = 0, the trace buffer's TRB*): the ID registers hide
/// SPE, TRF and TRBE, and their registers are UNDEFINED for guests (on CPUs without them these
/// bits are RES0, the registers do not exist).
///
/// Every event counter belongs to the guests (HPMN = PMCR_EL0.N); armhv itself uses only the
/// cycle counter, which HPMN does not partition.
/// - No PMU (`pmu = "off"`): every PMU register traps (TPM, TPMCR) and reads as zero.
/// - The raw PMU (`pmu = "raw"`, benchmarks): nothing traps and counting at EL2 is allowed.
/// - A virtual PMU: every access traps and is performed by `vmm::emulate::pmu`, which keeps
///   the guest's counters from counting at EL2 (their filters' NSH bit); HPMD prohibits it
///   as well where it exists (PMUv3p1), for the event counters.
pub fn mdcr(pmu: PmuMode) -> u64 {
    let debug = MDCR_EL2::TDRA::SET
        + MDCR_EL2::TDOSA::SET
        + MDCR_EL2::TDA::SET
        + MDCR_EL2::TPMS::SET
        + MDCR_EL2::TTRF::SET;
    let counters = MDCR_EL2::HPMN.val(super::pmu::event_counters());
    let trapped = MDCR_EL2::TPM::SET + MDCR_EL2::TPMCR::SET;
    match pmu {
        PmuMode::Off => (debug + counters + trapped).value,
        PmuMode::Raw => (debug + counters).value,
        PmuMode::Virtual if super::pmu::has_hpmd() => {
            (debug + counters + trapped).value | MDCR_EL2_HPMD
        }
        PmuMode::Virtual => (debug + counters + trapped).value,
    }
}

/// MDCR_EL2.HPMD (FEAT_PMUv3p1): event counting prohibited at EL2.
const MDCR_EL2_HPMD: u64 = 1 << 17;

/// Installs a VM's Stage-2 translation on this CPU (the `isb` is `load_vm_done`'s).
pub fn load_vttbr(vttbr: u64) {
    VTTBR_EL2.set(vttbr);
}

/// Installs a VM's virtual counter offset on this CPU.
pub fn load_cntvoff(cntvoff: u64) {
    CNTVOFF_EL2.set(cntvoff);
}

/// Installs a VM's debug and PMU traps on this CPU, if they differ from the last VM's.
pub fn load_mdcr(mdcr: u64) {
    if MDCR_EL2.get() != mdcr {
        MDCR_EL2.set(mdcr);
    }
}

/// Makes the VM's EL2 registers take effect before its first instruction.
pub fn load_vm_done() {
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}
