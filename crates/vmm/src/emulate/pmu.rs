//! Each vCPU's own PMU (`pmu = "virtual"`, the default): the physical counters, handed to the
//! vCPU while it runs, with its configuration and counts switched with it.
//!
//! - Lazily: a vCPU's PMU state goes into the hardware at its first PMU access (trapped by
//!   MDCR_EL2.TPM, like the first FP/SIMD instruction by CPTR_EL2.TFP), and from then on at
//!   every load for as long as it may count or interrupt ([`dormant`] says when not). While
//!   loaded it leaves the hardware at every put, and armhv's own state (its cycle counter, a
//!   raw-PMU VM's counters) comes back: nothing counts for a vCPU while another runs.
//! - Never armhv: every access traps (MDCR_EL2.TPM) and is performed here on the loaded
//!   state, with the filters' NSH bit (count at EL2) cleared, so no counter of a guest counts
//!   at EL2. Giving the guest the counters untrapped would need the hardware to keep EL2 out
//!   by itself: MDCR_EL2.HPMD does for the event counters, but for the cycle counter only
//!   with PMCR_EL0.DP, which armhv could own only by trapping PMCR_EL0 alone
//!   (MDCR_EL2.TPMCR); QEMU before 10.1 ignores TPMCR, and PMUv3 (ARMv8.0: Cortex-A57) has
//!   no HPMD at all. HPMD is still set where it exists (`el2_regs::mdcr`): a second guard.
//! - The overflow interrupt, the physical PMU PPI, arrives at EL2 while the vCPU runs: its
//!   virtual PPI is asserted and the physical one silenced until the guest has cleared the
//!   overflow (or masked or disabled it), checked before every entry, as the virtual timer's.

use crate::arch::{PMU_MAX_COUNTERS, PmuMode, PmuReg, PmuState};
use crate::arch::{cpu, gic, pmu};
use crate::exit_ctx::ExitCtx;
use crate::vcpu::Vcpu;
use crate::vm::Vm;
use crate::{registry, stats};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use trap::sysreg::SysReg;
use vgic::VcpuSet;

/// The guest sees its PMU's overflow on the PPI QEMU `virt` uses, the physical one's INTID.
const PMU_INTID: u32 = guest_abi::map::PMU_INTID;
const _: () = assert!(PMU_INTID == gic::PPI_PMU);

const PMCR_E: u64 = 1 << 0;
/// What a guest may write to PMCR_EL0: E, P, C, D, X, DP, LC, LP.
const PMCR_WRITABLE: u64 = 0xff;
/// PMCR_EL0.P and .C reset the counters and read as zero.
const PMCR_WRITE_ONLY: u64 = 0b110;
/// PMEVTYPER<n>_EL0 and PMCCFILTR_EL0 as a guest may set them: P, U, NSK, NSU (filtering at
/// EL1 and EL0) and the event number. Never NSH (count at EL2), nor the Secure and EL3
/// filters (M, SH), nor MT (count other threads' events).
const FILTER_EL1_EL0: u64 = 0xf << 28;
const EVENT_NUMBER: u64 = 0xffff;

const NOBODY: usize = 0;

/// Per physical CPU: the vCPU whose PMU state the hardware holds, as `encode(vm, vcpu)`.
static OWNER: [AtomicUsize; cpu::MAX_CPUS] = [const { AtomicUsize::new(NOBODY) }; cpu::MAX_CPUS];
/// CPUs whose hardware holds some vCPU's PMU state: while none does, a load has nothing to
/// release (the common case, kept to one load on the VM-switch path).
static OWNED: AtomicUsize = AtomicUsize::new(0);
/// Per physical CPU: the PMU PPI is silenced (an overflow was handed to a guest).
static SILENCED: [AtomicBool; cpu::MAX_CPUS] = [const { AtomicBool::new(false) }; cpu::MAX_CPUS];

fn encode(vm: usize, vcpu: usize) -> usize {
    ((vm + 1) << 8) | vcpu
}

/// Neither counting nor able to interrupt, nor letting EL0 at the PMU: the state may stay
/// in memory until the guest's next PMU access.
pub fn dormant(p: &PmuState) -> bool {
    let enabled = p.pmcr & PMCR_E != 0;
    p.pmuserenr == 0 && !(enabled && (p.pmcntenset != 0 || p.pmintenset & p.pmovsset != 0))
}

/// Counters that exist: the event counters below PMCR_EL0.N and the cycle counter (bit 31).
fn counter_mask() -> u64 {
    ((1u64 << pmu::counters()) - 1) | (1 << 31)
}

/// `vcpu` of `vm` is about to run on this CPU: its PMU state goes into the hardware if it
/// may count; otherwise its first access (trapped, as all are) will bring it. Whatever
/// vCPU's state the hardware still holds is stale by now (a vCPU switched out is put), and
/// goes first, whatever this VM's PMU: a raw-PMU VM gets armhv's state, not another guest's.
#[inline(always)]
pub fn on_load(vm: &Vm, vcpu: &mut Vcpu) {
    if OWNED.load(Ordering::Relaxed) != 0 {
        release_stale(vm, vcpu);
    }
    if vm.spec.pmu == PmuMode::Virtual && !dormant(&vcpu.pmu.regs) {
        take(vm, vcpu);
    }
}

/// Puts `vcpu`'s PMU state into this CPU's hardware, saving armhv's.
fn take(vm: &Vm, vcpu: &mut Vcpu) {
    if vcpu.pmu.live {
        return;
    }
    release_stale(vm, vcpu);
    let this_cpu = cpu::current();
    pmu::load(&vcpu.pmu.regs);
    set_owner(this_cpu, encode(vm.id, vcpu.id));
    vcpu.pmu.live = true;
    // Its overflow must get through, whoever's was silenced (a raw-PMU VM's, nobody's).
    unsilence(this_cpu);
    stats::bump(&vm.stats.pmu_switches);
}

/// The hardware holds the PMU state of a vCPU that is no longer loaded here: its VM was
/// reset or stopped, or CPU_ON restarted it, without a put (`me`, reset, has its `live`
/// cleared). Its state goes back to it if it still wants it (not reset since), and armhv's
/// comes back.
fn release_stale(vm: &Vm, me: &Vcpu) {
    if OWNED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let this_cpu = cpu::current();
    let owner = OWNER[this_cpu].load(Ordering::Relaxed);
    if owner == NOBODY || (owner == encode(vm.id, me.id) && me.pmu.live) {
        return;
    }
    let mut scratch = PmuState::default();
    let other = registry::get((owner >> 8) - 1);
    match other.as_ref().and_then(|vm| vm.vcpus.get(owner & 0xff)) {
        // Not running anywhere (this CPU holds its PMU, so it ran here last and was not
        // put), so its lock is free; `me`'s is held by the caller.
        Some(slot) if owner != encode(vm.id, me.id) => {
            let mut vcpu = slot.state.lock();
            if vcpu.pmu.live {
                pmu::put(&mut vcpu.pmu.regs);
                vcpu.pmu.live = false;
            } else {
                pmu::put(&mut scratch);
            }
        }
        _ => pmu::put(&mut scratch),
    }
    set_owner(this_cpu, NOBODY);
    unsilence(this_cpu);
}

/// `vcpu` leaves this CPU's hardware (another vCPU runs next, or it may run elsewhere).
#[inline(always)]
pub fn put(vcpu: &mut Vcpu) {
    if vcpu.pmu.live {
        put_live(vcpu);
    }
}

fn put_live(vcpu: &mut Vcpu) {
    let this_cpu = cpu::current();
    pmu::put(&mut vcpu.pmu.regs);
    vcpu.pmu.live = false;
    set_owner(this_cpu, NOBODY);
    unsilence(this_cpu);
}

/// Only this CPU changes its own owner.
fn set_owner(this_cpu: usize, owner: usize) {
    let before = OWNER[this_cpu].swap(owner, Ordering::Relaxed);
    match (before == NOBODY, owner == NOBODY) {
        (true, false) => OWNED.fetch_add(1, Ordering::Relaxed),
        (false, true) => OWNED.fetch_sub(1, Ordering::Relaxed),
        _ => 0,
    };
}

fn unsilence(this_cpu: usize) {
    if SILENCED[this_cpu].swap(false, Ordering::Relaxed) {
        gic::set_local_ppi(this_cpu, gic::PPI_PMU, true);
    }
}

/// The physical PMU interrupt fired while `vcpu` ran: its counters overflowed, if its PMU is
/// the loaded one. Returns the vCPUs to wake.
pub fn fired(vm: &Vm, vcpu: &mut Vcpu) -> VcpuSet {
    silence();
    if !vcpu.pmu.live || vm.spec.pmu != PmuMode::Virtual {
        return VcpuSet::default();
    }
    vcpu.pmu.irq = true;
    stats::bump(&vm.stats.pmu_irqs);
    vm.vgic.lock().set_level(PMU_INTID, vcpu.id, true)
}

/// Keeps the physical PMU PPI quiet until the state that raised it has left the hardware or
/// cleared its overflow (an interrupt nobody is running to take, or the guest's to handle).
pub fn silence() {
    let this_cpu = cpu::current();
    SILENCED[this_cpu].store(true, Ordering::Relaxed);
    gic::set_local_ppi(this_cpu, gic::PPI_PMU, false);
}

/// Before entry: once the guest has dealt with its overflow, drop the virtual line and let
/// the physical interrupt through again.
#[inline(always)]
pub fn sync(vm: &Vm, vcpu: &mut Vcpu) {
    if vcpu.pmu.irq && vcpu.pmu.live {
        sync_line(vm, vcpu);
    }
}

fn sync_line(vm: &Vm, vcpu: &mut Vcpu) {
    let asserting = pmu::read(PmuReg::Pmcr) & PMCR_E != 0
        && pmu::read(PmuReg::IntenSet) & pmu::read(PmuReg::OvsSet) & counter_mask() != 0;
    if !asserting {
        vcpu.pmu.irq = false;
        vm.vgic.lock().set_level(PMU_INTID, vcpu.id, false);
        unsilence(cpu::current());
    }
}

/// PMU registers: PMCR_EL0... (op0=3, CRn=9, CRm=12..14) and PMEV* (op1=3, CRn=14, CRm=8..15).
pub fn is_pmu(r: SysReg) -> bool {
    r.op0() == 3
        && ((r.crn() == 9 && (12..=14).contains(&r.crm()))
            || (r.op1() == 3 && r.crn() == 14 && r.crm() >= 8))
}

/// A trapped access to PMU register `r` (`value`: what a write writes). `Some(value read)`,
/// or `None` for an access that is UNDEFINED on this PMU.
pub fn access(ctx: &mut ExitCtx, r: SysReg, read: bool, value: u64) -> Option<u64> {
    match ctx.vm.spec.pmu {
        // No PMU: nothing to observe or program (the raw PMU's accesses do not trap).
        PmuMode::Off | PmuMode::Raw => return Some(0),
        PmuMode::Virtual => {}
    }
    take(ctx.vm, ctx.vcpu);
    let reg = decode(r)?;
    let n = pmu::counters() as u8;
    let mask = counter_mask();
    // The selected-counter views act on the counter PMSELR_EL0 selects; one that does not
    // exist reads as zero and ignores writes (the architecture leaves it UNPREDICTABLE).
    let reg = match reg {
        Decoded::Xev { typer } => {
            let sel = (pmu::read(PmuReg::Selr) & 0x1f) as u8;
            match (sel, typer) {
                (31, true) => PmuReg::EvTyper(31),
                (s, true) if s < n => PmuReg::EvTyper(s),
                (s, false) if s < n => PmuReg::EvCntr(s),
                _ => return Some(0),
            }
        }
        Decoded::Reg(reg) => reg,
    };
    match reg {
        PmuReg::EvCntr(i) | PmuReg::EvTyper(i) if i >= n && i != 31 => return None,
        PmuReg::EvCntr(31) => return None,
        PmuReg::SwInc if read => return None, // write-only
        PmuReg::Ceid0 | PmuReg::Ceid1 if !read => return None, // read-only
        _ => {}
    }
    if read {
        let v = pmu::read(reg);
        return Some(match reg {
            PmuReg::Pmcr => v & !PMCR_WRITE_ONLY,
            PmuReg::CntenSet
            | PmuReg::CntenClr
            | PmuReg::OvsSet
            | PmuReg::OvsClr
            | PmuReg::IntenSet
            | PmuReg::IntenClr => v & mask,
            _ => v,
        });
    }
    let value = match reg {
        PmuReg::Pmcr => value & PMCR_WRITABLE,
        PmuReg::CntenSet
        | PmuReg::CntenClr
        | PmuReg::OvsSet
        | PmuReg::OvsClr
        | PmuReg::IntenSet
        | PmuReg::IntenClr => value & mask,
        PmuReg::SwInc => value & mask & !(1 << 31),
        PmuReg::Selr => value & 0x1f,
        PmuReg::UserEnr => value & 0xf,
        PmuReg::EvTyper(31) => value & FILTER_EL1_EL0,
        PmuReg::EvTyper(_) => value & (FILTER_EL1_EL0 | EVENT_NUMBER),
        _ => value,
    };
    pmu::write(reg, value);
    Some(0)
}

enum Decoded {
    Reg(PmuReg),
    /// PMXEVTYPER_EL0 (`typer`) or PMXEVCNTR_EL0.
    Xev {
        typer: bool,
    },
}

/// Which PMU register an encoding names, if any this PMU has (PMMIR_EL1, of PMUv3p4, is not).
fn decode(r: SysReg) -> Option<Decoded> {
    let reg = match (r.op1(), r.crn(), r.crm(), r.op2()) {
        (3, 9, 12, 0) => PmuReg::Pmcr,
        (3, 9, 12, 1) => PmuReg::CntenSet,
        (3, 9, 12, 2) => PmuReg::CntenClr,
        (3, 9, 12, 3) => PmuReg::OvsClr,
        (3, 9, 12, 4) => PmuReg::SwInc,
        (3, 9, 12, 5) => PmuReg::Selr,
        (3, 9, 12, 6) => PmuReg::Ceid0,
        (3, 9, 12, 7) => PmuReg::Ceid1,
        (3, 9, 13, 0) => PmuReg::Ccntr,
        (3, 9, 13, 1) => return Some(Decoded::Xev { typer: true }),
        (3, 9, 13, 2) => return Some(Decoded::Xev { typer: false }),
        (3, 9, 14, 0) => PmuReg::UserEnr,
        (0, 9, 14, 1) => PmuReg::IntenSet,
        (0, 9, 14, 2) => PmuReg::IntenClr,
        (3, 9, 14, 3) => PmuReg::OvsSet,
        (3, 14, crm @ 8..=11, op2) => PmuReg::EvCntr(((crm & 3) << 3) | op2),
        (3, 14, crm @ 12..=15, op2) => PmuReg::EvTyper(((crm & 3) << 3) | op2),
        _ => return None,
    };
    const _: () = assert!(PMU_MAX_COUNTERS == 31);
    Some(Decoded::Reg(reg))
}
