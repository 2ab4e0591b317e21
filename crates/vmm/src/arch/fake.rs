//! A fake machine for the host tests (Hafnium's `arch/fake`): the monitor runs unchanged on
//! it, in `cargo test`. Each test thread has a machine of its own ([`with`]): a clock the
//! test moves, CPUs the test switches between, a physical GIC whose pending interrupts the
//! test raises, list registers, and a guest that is a script: each entry into the guest runs
//! the next [`Trap`] the test queued, which may change the guest's registers and list
//! registers the way guest code would, and then traps.
//!
//! Memory is the host's: the frame pool ([`crate::frames`]) is fed a host allocation, and a
//! "physical address" is a host address, as the EL2 binary's identity map makes it.

use super::{
    Arch, DebugRegs, El1State, ExitKind, FpState, GuestRegs, IdReg, MAX_CPUS, MAX_LRS, MDCR_TPM,
    PauthKeys, PmuMode, PmuReg, PmuState, SVE_MAX_VQ, SveState,
};
use std::boxed::Box;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::string::String;
use std::vec::Vec;

/// The fake hardware.
pub struct Fake;

/// List registers each fake CPU implements.
pub const LR_COUNT: usize = 4;

/// What the scripted guest does before a trap, to its registers and its CPU's list registers.
pub type GuestCode = dyn FnOnce(&mut GuestRegs, &mut [u64; MAX_LRS]);

/// One trap of the scripted guest: what it did before trapping (`run`, given its registers and
/// this CPU's list registers), and the trap itself.
pub struct Trap {
    pub kind: ExitKind,
    pub esr: u64,
    pub far: u64,
    pub hpfar: u64,
    pub run: Option<Box<GuestCode>>,
}

impl Trap {
    /// A synchronous trap with syndrome `esr` (and `far`, `hpfar` for aborts).
    pub fn sync(esr: u64, far: u64, hpfar: u64) -> Self {
        Self { kind: ExitKind::Sync, esr, far, hpfar, run: None }
    }

    /// A physical interrupt taken while the guest ran.
    pub fn irq() -> Self {
        Self { kind: ExitKind::Irq, esr: 0, far: 0, hpfar: 0, run: None }
    }

    /// What the guest does before this trap.
    pub fn after(
        mut self,
        run: impl FnOnce(&mut GuestRegs, &mut [u64; MAX_LRS]) + 'static,
    ) -> Self {
        self.run = Some(Box::new(run));
        self
    }
}

/// A cache maintenance operation armhv asked of the fake machine, over `(start, len)` (host
/// addresses: the fake's physical addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOp {
    /// DC CVAC and an instruction-cache invalidation (`clean_to_poc`).
    CleanCode(u64, u64),
    /// DC CVAC (`clean_data_to_poc`).
    Clean(u64, u64),
    /// DC CIVAC (`clean_invalidate_to_poc`).
    CleanInvalidate(u64, u64),
}

/// Bytes of the longest Z register, and of a predicate register at that length.
const ZBYTES: usize = SVE_MAX_VQ * 16;
const PBYTES: usize = SVE_MAX_VQ * 2;

/// One fake CPU's FP/SIMD and SVE registers, at the longest vector length. V*n* is the first
/// 16 bytes of Z*n*, as in the architecture.
#[derive(Clone, PartialEq, Eq)]
pub struct FpRegs {
    pub z: [[u8; ZBYTES]; 32],
    pub p: [[u8; PBYTES]; 16],
    pub ffr: [u8; PBYTES],
    pub fpsr: u64,
    pub fpcr: u64,
    pub zcr_el1: u64,
}

impl Default for FpRegs {
    fn default() -> Self {
        Self {
            z: [[0; ZBYTES]; 32],
            p: [[0; PBYTES]; 16],
            ffr: [0; PBYTES],
            fpsr: 0,
            fpcr: 0,
            zcr_el1: 0,
        }
    }
}

impl FpRegs {
    /// V*n*, as an FP/SIMD instruction reads it.
    pub fn v(&self, n: usize) -> u128 {
        u128::from_le_bytes(self.z[n][..16].try_into().unwrap())
    }

    /// Writes V*n* as an FP/SIMD instruction does: the rest of Z*n* becomes zero.
    pub fn set_v(&mut self, n: usize, value: u128) {
        self.z[n] = [0; ZBYTES];
        self.z[n][..16].copy_from_slice(&value.to_le_bytes());
    }

    /// The predicate registers and FFR at `vq` quadwords, as fpsimd.S lays them out.
    fn predicates(&self, vq: usize) -> Vec<u8> {
        let pl = vq * 2;
        self.p.iter().chain([&self.ffr]).flat_map(|p| p[..pl].iter().copied()).collect()
    }
}

/// The state of one thread's fake machine.
pub struct Machine {
    /// The CPU the monitor runs on now.
    pub cpu: usize,
    /// The physical counter, which only the test moves.
    pub now: u64,
    pub frequency: u64,
    /// Per CPU: when armhv's EL2 timer fires, if armed.
    pub hyp_timer: [Option<u64>; MAX_CPUS],
    /// The loaded guest's virtual timer: asserting its line, and its compare value.
    pub vtimer_asserted: bool,
    pub vtimer_compare: u64,
    /// Per CPU: physical interrupts pending, acknowledged in order.
    pub pending: [VecDeque<u32>; MAX_CPUS],
    /// Physical interrupts whose handling ended (priority drop and deactivation), in order.
    pub ended: Vec<u32>,
    /// Masks of CPUs kicked, in order.
    pub kicks: Vec<credit::CpuSet>,
    /// SPIs whose physical line is high (`gic_spi_pending`).
    pub spi_lines_high: Vec<u32>,
    /// SPIs deactivated at the distributor (`gic_deactivate_spi`), in order.
    pub deactivated_spis: Vec<u32>,
    /// Per CPU: PPIs disabled (`gic_set_local_ppi`), as INTID bit masks.
    pub ppis_disabled: [u32; MAX_CPUS],
    /// SPIs routed (INTID, MPIDR, level) and disabled.
    pub routed: Vec<(u32, u64, bool)>,
    pub disabled_spis: Vec<u32>,
    /// Per CPU: the virtual CPU interface.
    pub lrs: [[u64; MAX_LRS]; MAX_CPUS],
    pub ich_hcr: [u64; MAX_CPUS],
    pub ich_vmcr: [u64; MAX_CPUS],
    pub ich_ap1r0: [u64; MAX_CPUS],
    /// Per CPU: the VM registers loaded (VTTBR, CNTVOFF, MDCR), whether FP/SIMD and SVE trap,
    /// and ZCR_EL2.LEN as the last SVE save or restore set it.
    pub vttbr: [u64; MAX_CPUS],
    pub cntvoff: [u64; MAX_CPUS],
    pub fp_trap: [bool; MAX_CPUS],
    pub sve_trap: [bool; MAX_CPUS],
    pub zcr_el2_len: [Option<u64>; MAX_CPUS],
    /// Per CPU: whether pointer authentication traps (HCR_EL2.API/APK clear, as at boot),
    /// and the key registers.
    pub pauth_trap: [bool; MAX_CPUS],
    pub pauth: [PauthKeys; MAX_CPUS],
    /// Per CPU: MDCR_EL2 as last loaded.
    pub mdcr: [u64; MAX_CPUS],
    /// Per CPU: the live debug registers, and how many times they were saved and restored.
    pub debug: [DebugRegs; MAX_CPUS],
    pub debug_saves: u64,
    pub debug_restores: u64,
    /// Per CPU: the live EL1 state, and the FP/SIMD and SVE registers.
    pub el1: [El1State; MAX_CPUS],
    /// (On the heap: SVE registers at the longest vector length, for every CPU.)
    pub fpregs: Box<[FpRegs]>,
    /// Per CPU: the live exception registers an injected exception wrote (ESR, FAR, ELR, SPSR).
    pub injected: [Option<(u64, u64, u64, u64)>; MAX_CPUS],
    /// The guest's script, and the current trap's syndrome.
    pub script: VecDeque<Trap>,
    pub syndrome: (u64, u64, u64),
    /// Guest entries so far.
    pub entries: u64,
    /// Lines the VMs printed, as `name: text`.
    pub console: Vec<String>,
    /// Register writes to assigned devices (host physical address, value), in order.
    pub device_writes: Vec<(u64, u32)>,
    /// Per CPU: the physical PMU's registers, and armhv's own state while a vCPU's is loaded
    /// (`pmu_load` saved it).
    pub pmu: [PmuState; MAX_CPUS],
    pub pmu_host: [Option<PmuState>; MAX_CPUS],
    /// PMCR_EL0.N of the fake CPUs.
    pub pmu_counters: usize,
    /// Whether the fake CPUs have FEAT_S2FWB (and run guests with HCR_EL2.FWB).
    pub fwb: bool,
    /// Cache maintenance by address, in order, once a test starts recording it (`Some`): not
    /// by default, so that what the fake keeps does not grow with every VM built.
    pub cache_ops: Option<Vec<CacheOp>>,
}

impl Default for Machine {
    fn default() -> Self {
        Self {
            cpu: 0,
            now: 1_000_000,
            frequency: 1_000_000_000,
            hyp_timer: [None; MAX_CPUS],
            vtimer_asserted: false,
            vtimer_compare: 0,
            pending: Default::default(),
            ended: Vec::new(),
            kicks: Vec::new(),
            spi_lines_high: Vec::new(),
            deactivated_spis: Vec::new(),
            ppis_disabled: [0; MAX_CPUS],
            routed: Vec::new(),
            disabled_spis: Vec::new(),
            lrs: [[0; MAX_LRS]; MAX_CPUS],
            ich_hcr: [0; MAX_CPUS],
            ich_vmcr: [0; MAX_CPUS],
            ich_ap1r0: [0; MAX_CPUS],
            vttbr: [0; MAX_CPUS],
            cntvoff: [0; MAX_CPUS],
            fp_trap: [false; MAX_CPUS],
            sve_trap: [false; MAX_CPUS],
            zcr_el2_len: [None; MAX_CPUS],
            pauth_trap: [true; MAX_CPUS],
            pauth: [PauthKeys::default(); MAX_CPUS],
            mdcr: [0; MAX_CPUS],
            debug: Default::default(),
            debug_saves: 0,
            debug_restores: 0,
            el1: Default::default(),
            fpregs: (0..MAX_CPUS).map(|_| FpRegs::default()).collect(),
            injected: [None; MAX_CPUS],
            script: VecDeque::new(),
            syndrome: (0, 0, 0),
            entries: 0,
            console: Vec::new(),
            device_writes: Vec::new(),
            pmu: std::array::from_fn(|_| PmuState::default()),
            pmu_host: std::array::from_fn(|_| None),
            pmu_counters: 6,
            fwb: false,
            cache_ops: None,
        }
    }
}

std::thread_local! {
    static MACHINE: RefCell<Machine> = RefCell::new(Machine::default());
}

/// Runs `f` on this thread's fake machine (not from inside a scripted guest's trap).
pub fn with<R>(f: impl FnOnce(&mut Machine) -> R) -> R {
    MACHINE.with(|m| f(&mut m.borrow_mut()))
}

fn record(op: CacheOp) {
    with(|m| m.cache_ops.as_mut().map(|ops| ops.push(op)));
}

fn cpu() -> usize {
    with(|m| m.cpu)
}

impl Arch for Fake {
    fn current_cpu() -> usize {
        cpu()
    }

    fn send_event() {}

    fn wait_for_event() {
        // Nothing else runs on this thread: a wait would never end. The monitor waits only
        // for another CPU's vCPU to leave its guest, which on the fake has always happened.
        std::thread::yield_now();
    }

    fn wait_for_interrupt() {}

    fn relax() {
        std::hint::spin_loop();
    }

    fn now() -> u64 {
        with(|m| m.now)
    }

    fn counter_frequency() -> u64 {
        with(|m| m.frequency)
    }

    fn hyp_timer_set(deadline: Option<u64>) {
        with(|m| m.hyp_timer[m.cpu] = deadline);
    }

    fn vtimer_asserted() -> bool {
        with(|m| m.vtimer_asserted)
    }

    fn vtimer_compare() -> u64 {
        with(|m| m.vtimer_compare)
    }

    fn gic_acknowledge() -> Option<u32> {
        with(|m| {
            let cpu = m.cpu;
            m.pending[cpu].pop_front()
        })
    }

    fn gic_end(intid: u32) {
        with(|m| m.ended.push(intid));
    }

    fn gic_drop_priority(_intid: u32) {}

    fn gic_deactivate_spi(intid: u32) {
        with(|m| m.deactivated_spis.push(intid));
    }

    fn gic_spi_pending(intid: u32) -> bool {
        with(|m| m.spi_lines_high.contains(&intid))
    }

    fn gic_disable_spi(intid: u32) {
        with(|m| m.disabled_spis.push(intid));
    }

    fn gic_route_spi(intid: u32, mpidr: u64, level: bool) -> Result<(), &'static str> {
        with(|m| m.routed.push((intid, mpidr, level)));
        Ok(())
    }

    fn gic_set_local_ppi(cpu: usize, ppi: u32, enable: bool) {
        with(|m| {
            if enable {
                m.ppis_disabled[cpu] &= !(1 << ppi);
            } else {
                m.ppis_disabled[cpu] |= 1 << ppi;
            }
        });
    }

    fn gic_kick(cpus: credit::CpuSet) {
        if !cpus.is_empty() {
            with(|m| m.kicks.push(cpus));
        }
    }

    fn lr_count() -> usize {
        LR_COUNT
    }

    fn read_lr(n: usize) -> u64 {
        with(|m| m.lrs[m.cpu][n])
    }

    fn write_lr(n: usize, value: u64) {
        with(|m| m.lrs[m.cpu][n] = value);
    }

    fn write_ich_hcr(value: u64) {
        with(|m| m.ich_hcr[m.cpu] = value);
    }

    fn read_ich_vmcr() -> u64 {
        with(|m| m.ich_vmcr[m.cpu])
    }

    fn write_ich_vmcr(value: u64) {
        with(|m| m.ich_vmcr[m.cpu] = value);
    }

    fn read_ich_ap1r0() -> u64 {
        with(|m| m.ich_ap1r0[m.cpu])
    }

    fn write_ich_ap1r0(value: u64) {
        with(|m| m.ich_ap1r0[m.cpu] = value);
    }

    fn load_vttbr(vttbr: u64) {
        with(|m| m.vttbr[m.cpu] = vttbr);
    }

    fn load_cntvoff(cntvoff: u64) {
        with(|m| m.cntvoff[m.cpu] = cntvoff);
    }

    fn load_mdcr(mdcr: u64) {
        with(|m| m.mdcr[m.cpu] = mdcr);
    }

    fn load_vm_done() {}

    fn mdcr_for(pmu: PmuMode) -> u64 {
        let pmu = match pmu {
            PmuMode::Raw => 0,
            PmuMode::Virtual | PmuMode::Off => MDCR_TPM,
        };
        pmu | super::MDCR_EL2_TDA
    }

    fn set_fp_traps(fp: bool, sve: bool) {
        with(|m| {
            m.fp_trap[m.cpu] = fp;
            m.sve_trap[m.cpu] = sve;
        });
    }

    fn set_pauth_trap(trap: bool) {
        with(|m| m.pauth_trap[m.cpu] = trap);
    }

    fn enter_guest(regs: &mut GuestRegs) -> ExitKind {
        with(|m| m.entries += 1);
        loop {
            let (trap, cpu) = with(|m| (m.script.pop_front(), m.cpu));
            let Some(trap) = trap else {
                panic!("the fake guest on CPU {cpu} ran out of script at PC {:#x}", regs.elr);
            };
            if let Some(run) = trap.run {
                let mut lrs = with(|m| m.lrs[cpu]);
                run(regs, &mut lrs);
                with(|m| m.lrs[cpu] = lrs);
            }
            // The EL2 vector's hypercall fast path (vectors.S): `hvc #0` with a call of
            // `FAST_CALLS` is answered there, and the guest goes on without an exit.
            const HVC_IMM_0: u64 = 0x5a00_0000;
            let fast = crate::emulate::hypercall::FAST_CALLS
                .iter()
                .find(|&&(fid, _)| fid == regs.x[0] as u32);
            if let (ExitKind::Sync, HVC_IMM_0, Some(&(_, answer))) = (trap.kind, trap.esr, fast) {
                regs.x[0] = answer;
                regs.fast_calls += 1;
                continue;
            }
            with(|m| m.syndrome = (trap.esr, trap.far, trap.hpfar));
            return trap.kind;
        }
    }

    fn el1_save(state: &mut El1State) {
        *state = with(|m| m.el1[m.cpu].clone());
    }

    fn el1_restore(state: &El1State) {
        with(|m| m.el1[m.cpu] = state.clone());
    }

    // EL2's own accesses trap like the guest's: the monitor must lift the traps first.
    fn fp_save(state: &mut FpState) {
        with(|m| {
            assert!(!m.fp_trap[m.cpu], "FP/SIMD registers saved while CPTR_EL2.TFP traps");
            let r = &m.fpregs[m.cpu];
            for (n, q) in state.q.iter_mut().enumerate() {
                *q = r.v(n);
            }
            (state.fpsr, state.fpcr) = (r.fpsr, r.fpcr);
        });
    }

    fn fp_restore(state: &FpState) {
        with(|m| {
            assert!(!m.fp_trap[m.cpu], "FP/SIMD registers loaded while CPTR_EL2.TFP traps");
            let r = &mut m.fpregs[m.cpu];
            for (n, q) in state.q.iter().enumerate() {
                r.set_v(n, *q);
            }
            (r.fpsr, r.fpcr) = (state.fpsr, state.fpcr);
        });
    }

    fn sve_save(state: &mut SveState, vq: usize) {
        assert!(vq <= state.capacity_vq(), "SVE save area too small for {vq} quadwords");
        with(|m| {
            let cpu = m.cpu;
            assert!(!m.fp_trap[cpu] && !m.sve_trap[cpu], "SVE saved while CPTR_EL2 traps it");
            m.zcr_el2_len[cpu] = Some(vq as u64 - 1);
            let r = &m.fpregs[cpu];
            let regs = state.regs_mut();
            for (n, z) in r.z.iter().enumerate() {
                for (j, chunk) in z[..vq * 16].chunks(16).enumerate() {
                    regs[n * vq + j] = u128::from_le_bytes(chunk.try_into().unwrap());
                }
            }
            for (j, chunk) in r.predicates(vq).chunks(16).enumerate() {
                let mut q = [0u8; 16];
                q[..chunk.len()].copy_from_slice(chunk);
                regs[32 * vq + j] = u128::from_le_bytes(q);
            }
            state.ctrl = [r.fpsr, r.fpcr, r.zcr_el1];
        });
    }

    fn sve_restore(state: &SveState, vq: usize) {
        assert!(vq <= state.capacity_vq(), "SVE save area too small for {vq} quadwords");
        with(|m| {
            let cpu = m.cpu;
            assert!(!m.fp_trap[cpu] && !m.sve_trap[cpu], "SVE loaded while CPTR_EL2 traps it");
            m.zcr_el2_len[cpu] = Some(vq as u64 - 1);
            let r = &mut m.fpregs[cpu];
            let regs = state.regs();
            for (n, z) in r.z.iter_mut().enumerate() {
                *z = [0; ZBYTES];
                for j in 0..vq {
                    z[j * 16..j * 16 + 16].copy_from_slice(&regs[n * vq + j].to_le_bytes());
                }
            }
            let bytes: Vec<u8> = regs[32 * vq..].iter().flat_map(|q| q.to_le_bytes()).collect();
            let pl = vq * 2;
            for (i, p) in r.p.iter_mut().chain([&mut r.ffr]).enumerate() {
                *p = [0; PBYTES];
                p[..pl].copy_from_slice(&bytes[i * pl..(i + 1) * pl]);
            }
            [r.fpsr, r.fpcr, r.zcr_el1] = state.ctrl;
        });
    }

    fn pauth_save(keys: &mut PauthKeys) {
        *keys = with(|m| m.pauth[m.cpu]);
    }

    fn pauth_restore(keys: &PauthKeys) {
        with(|m| m.pauth[m.cpu] = *keys);
    }

    fn debug_save(state: &mut DebugRegs) {
        *state = with(|m| {
            m.debug_saves += 1;
            m.debug[m.cpu].clone()
        });
    }

    fn debug_restore(state: &DebugRegs) {
        with(|m| {
            m.debug_restores += 1;
            m.debug[m.cpu] = state.clone();
        });
    }

    fn live_sctlr() -> u64 {
        with(|m| m.el1[m.cpu].sctlr_el1)
    }

    fn live_vbar() -> u64 {
        with(|m| m.el1[m.cpu].vbar_el1)
    }

    fn write_live_fault(esr: u64, far: u64, elr: u64, spsr: u64) {
        with(|m| m.injected[m.cpu] = Some((esr, far, elr, spsr)));
    }

    fn device_write32(pa: u64, value: u32) -> Result<(), &'static str> {
        with(|m| m.device_writes.push((pa, value)));
        Ok(())
    }

    fn esr() -> u64 {
        with(|m| m.syndrome.0)
    }

    fn far() -> u64 {
        with(|m| m.syndrome.1)
    }

    fn hpfar() -> u64 {
        with(|m| m.syndrome.2)
    }

    fn read_id_reg(_reg: IdReg) -> u64 {
        // Every feature field of every ID register says "implemented" (0xf would be "not"
        // for some: 1 is the common "present"), so the policy's hiding shows.
        0x1111_1111_1111_1111
    }

    fn clean_to_poc(start: u64, len: u64) {
        record(CacheOp::CleanCode(start, len));
    }

    fn clean_data_to_poc(start: u64, len: u64) {
        record(CacheOp::Clean(start, len));
    }

    fn clean_invalidate_to_poc(start: u64, len: u64) {
        record(CacheOp::CleanInvalidate(start, len));
    }

    fn stage2_fwb() -> bool {
        with(|m| m.fwb)
    }

    fn clean_invalidate_set_way(_operand: u64) {}

    fn flush_guest_tlbs() {}

    fn cycles() -> u64 {
        with(|m| m.now)
    }

    fn enable_cycle_counter() {}

    fn pmu_counters() -> usize {
        with(|m| m.pmu_counters)
    }

    fn pmu_load(state: &PmuState) {
        with(|m| {
            let cpu = m.cpu;
            assert!(m.pmu_host[cpu].is_none(), "a vCPU's PMU loaded over another's on CPU {cpu}");
            m.pmu_host[cpu] = Some(std::mem::replace(&mut m.pmu[cpu], state.clone()));
        });
    }

    fn pmu_put(state: &mut PmuState) {
        with(|m| {
            let cpu = m.cpu;
            let host = m.pmu_host[cpu].take().expect("a vCPU's PMU put that was not loaded");
            *state = std::mem::replace(&mut m.pmu[cpu], host);
        });
    }

    fn pmu_read(reg: PmuReg) -> u64 {
        with(|m| {
            let p = &m.pmu[m.cpu];
            match reg {
                PmuReg::Pmcr => p.pmcr | ((m.pmu_counters as u64) << 11),
                PmuReg::CntenSet | PmuReg::CntenClr => p.pmcntenset,
                PmuReg::OvsSet | PmuReg::OvsClr => p.pmovsset,
                PmuReg::IntenSet | PmuReg::IntenClr => p.pmintenset,
                PmuReg::SwInc => 0,
                PmuReg::Selr => p.pmselr,
                PmuReg::Ceid0 | PmuReg::Ceid1 => 0x0002_0101,
                PmuReg::Ccntr => p.pmccntr,
                PmuReg::UserEnr => p.pmuserenr,
                PmuReg::EvCntr(n) => p.pmevcntr[n as usize],
                PmuReg::EvTyper(31) => p.pmccfiltr,
                PmuReg::EvTyper(n) => p.pmevtyper[n as usize],
            }
        })
    }

    fn pmu_write(reg: PmuReg, value: u64) {
        with(|m| {
            let cpu = m.cpu;
            let p = &mut m.pmu[cpu];
            match reg {
                PmuReg::Pmcr => p.pmcr = value & 0xff & !0b110, // P and C act, read as 0
                PmuReg::CntenSet => p.pmcntenset |= value,
                PmuReg::CntenClr => p.pmcntenset &= !value,
                PmuReg::OvsSet => p.pmovsset |= value,
                PmuReg::OvsClr => p.pmovsset &= !value,
                PmuReg::IntenSet => p.pmintenset |= value,
                PmuReg::IntenClr => p.pmintenset &= !value,
                PmuReg::SwInc | PmuReg::Ceid0 | PmuReg::Ceid1 => {}
                PmuReg::Selr => p.pmselr = value,
                PmuReg::Ccntr => p.pmccntr = value,
                PmuReg::UserEnr => p.pmuserenr = value,
                PmuReg::EvCntr(n) => p.pmevcntr[n as usize] = value,
                PmuReg::EvTyper(31) => p.pmccfiltr = value,
                PmuReg::EvTyper(n) => p.pmevtyper[n as usize] = value,
            }
        });
    }

    fn console_line(_vm: usize, vm_name: &str, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        with(|m| m.console.push(std::format!("{vm_name}: {text}")));
    }

    fn console_partial(vm: usize, vm_name: &str, text: &[u8]) {
        Self::console_line(vm, vm_name, text);
    }

    fn provoke_fault(kind: u32) {
        panic!("armhv's fault injection ({kind}) on the fake machine");
    }
}
