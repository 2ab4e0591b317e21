//! A vCPU's architectural state as the monitor keeps it in memory: the general-purpose
//! registers the vector code saves on every trap, the EL1 system registers and the FP/SIMD
//! registers that move only when a physical CPU changes hands. The hardware layer reads and
//! writes these (`Arch::enter`, `Arch::el1_save`, ...); the monitor only reads fields.

/// The most physical CPUs armhv manages (the EL2 binary's build script reads this line to size
/// its boot stacks: keep it a literal). 32 covers
/// today's boards and small servers; the scheduler's CPU sets (`credit::CpuSet`) hold 64.
pub const MAX_CPUS: usize = 32;

/// Most list registers the architecture allows (ICH_VTR_EL2.ListRegs + 1 <= 16).
pub const MAX_LRS: usize = 16;

/// ICH_HCR_EL2.En (bit 0): the virtual CPU interface is on.
pub const ICH_HCR_EN: u64 = 1 << 0;
/// ICH_HCR_EL2.UIE (bit 1), underflow maintenance: at most one list register is valid (so
/// more pending interrupts can be brought in).
pub const ICH_HCR_UIE: u64 = 1 << 1;

/// SPSR value for a vCPU's first entry: EL1h with D, A, I, F masked (arm64 boot protocol).
pub const SPSR_EL1H_MASKED: u64 = 0x3c5;

/// The physical interrupts armhv itself uses: its kick between CPUs (an SGI of its choosing)
/// and the architected PPIs of the GIC's maintenance interrupt and the EL2 and virtual timers.
pub const SGI_KICK: u32 = 0;
pub const PPI_MAINTENANCE: u32 = 25;
pub const PPI_HYP_TIMER: u32 = 26;
pub const PPI_VIRT_TIMER: u32 = 27;

/// The guest state that the vector code saves on every trap. Its layout is fixed by the EL2
/// binary's vectors.S.
#[repr(C)]
#[derive(Clone, Default, Debug)]
pub struct GuestRegs {
    pub x: [u64; 31],
    /// The guest PC: where `eret` resumes.
    pub elr: u64,
    /// The guest PSTATE.
    pub spsr: u64,
    /// Cycle-counter probes of the vector code, written only by a `ws-breakdown` build: the
    /// trap's vector entry, its registers saved; the next entry's call, its `eret`.
    pub stamps: [u64; 4],
    /// Hypercalls the vector answered itself since the run loop last looked (the fast path
    /// of `hypercall::FAST_CALLS`): each was an exit that the VM's statistics count.
    pub fast_calls: u64,
}

const _: () = assert!(core::mem::offset_of!(GuestRegs, elr) == 248);
const _: () = assert!(core::mem::offset_of!(GuestRegs, spsr) == 256);
const _: () = assert!(core::mem::offset_of!(GuestRegs, stamps) == 264);
const _: () = assert!(core::mem::offset_of!(GuestRegs, fast_calls) == 296);

/// Instructions of the exit path before its first probe (the vector's `stp`), and of the entry
/// path after its last probe (`ldp`, `eret`): the world-switch breakdown adds them back.
pub const STAMP_EXIT_HEAD: u64 = 1;
pub const STAMP_ENTRY_TAIL: u64 = 2;

impl GuestRegs {
    /// Reads general-purpose register `n` as an instruction operand: 31 is the zero register.
    pub fn get(&self, n: u8) -> u64 {
        if n < 31 { self.x[n as usize] } else { 0 }
    }

    /// Writes general-purpose register `n`; writes to the zero register are discarded.
    pub fn set(&mut self, n: u8, value: u64) {
        if n < 31 {
            self.x[n as usize] = value;
        }
    }
}

/// Why the guest stopped running: which vector was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    Sync,
    Irq,
    Fiq,
    SError,
    /// An exception from AArch32 state: armhv only runs AArch64 guests.
    AArch32,
}

/// Calls `$callback!` with the EL1 (and EL0) system registers a vCPU owns, named as in the ARM
/// ARM: the one list behind [`El1State`]'s fields and the hardware layer's save and restore.
#[macro_export]
macro_rules! el1_registers {
    ($callback:path) => {
        $callback! {
            sctlr_el1,
            cpacr_el1,
            ttbr0_el1,
            ttbr1_el1,
            tcr_el1,
            mair_el1,
            amair_el1,
            vbar_el1,
            contextidr_el1,
            esr_el1,
            far_el1,
            afsr0_el1,
            afsr1_el1,
            par_el1,
            elr_el1,
            spsr_el1,
            sp_el0,
            sp_el1,
            tpidr_el0,
            tpidrro_el0,
            tpidr_el1,
            cntkctl_el1,
            csselr_el1,
            mdscr_el1,
            cntv_ctl_el0,
            cntv_cval_el0,
            vmpidr_el2,
        }
    };
}

macro_rules! el1_state {
    ($($reg:ident),* $(,)?) => {
        /// EL1 (and EL0) system registers of one vCPU, saved while it is not loaded on a CPU.
        #[derive(Clone, Default, Debug)]
        pub struct El1State {
            $(pub $reg: u64,)*
            /// VDISR_EL2: with HCR_EL2.AMO set, the guest's DISR_EL1 (FEAT_RAS). Only on CPUs
            /// that have it.
            pub vdisr_el2: u64,
            /// TPIDR2_EL0 (FEAT_SME), only on CPUs that have it. SME is hidden from guests
            /// (its instructions and SMCR_EL1 trap, CPTR_EL2.TSM) but this register does not
            /// trap without fine-grained traps: not switched, it would carry values between
            /// VMs.
            pub tpidr2_el0: u64,
        }
    };
}

el1_registers!(el1_state);

/// SCTLR_EL1 at reset with the MMU, caches and alignment checks off (RES1 bits set).
pub const SCTLR_EL1_RESET: u64 = 0x30d0_0800;

impl El1State {
    /// The architectural state a vCPU starts with: MMU off, nothing enabled.
    pub fn reset(vcpu_affinity: u64) -> Self {
        Self {
            sctlr_el1: SCTLR_EL1_RESET,
            // MPIDR_EL1 as the guest reads it: bit 31 RES1, Aff0 = vCPU index.
            vmpidr_el2: (1 << 31) | vcpu_affinity,
            ..Self::default()
        }
    }
}

/// A vCPU's FP/SIMD register file. Its layout is fixed by the EL2 binary's fpsimd.S.
#[repr(C, align(16))]
#[derive(Clone, Default)]
pub struct FpState {
    pub q: [u128; 32],
    pub fpsr: u64,
    pub fpcr: u64,
}

const _: () = assert!(core::mem::offset_of!(FpState, fpsr) == 512);

/// The longest SVE vector length armhv gives guests, in quadwords (128 bits): 16, 2048 bits,
/// the architecture's maximum. A vCPU's save area at this length is [`SveState::bytes`]`(16)`,
/// 8,736 bytes of armhv's heap.
pub const SVE_MAX_VQ: usize = 16;

/// A vCPU's SVE register file, for VMs with SVE: Z0..Z31, P0..P15 and FFR at the machine's
/// vector length (the layout the EL2 binary's fpsimd.S writes), and FPSR, FPCR, ZCR_EL1.
/// The Z registers hold the FP/SIMD registers too (V*n* is the low 128 bits of Z*n*): once a
/// vCPU's state is kept here, [`FpState`] is not used for it.
pub struct SveState {
    /// Z*n* at quadword `n * vq`, then P0..P15 and FFR, `vq * 2` bytes each.
    regs: alloc::boxed::Box<[u128]>,
    /// FPSR, FPCR and ZCR_EL1, in the order fpsimd.S stores them.
    pub ctrl: [u64; 3],
    /// The vCPU has used SVE since its reset: its state lives here, not in its [`FpState`].
    pub in_use: bool,
}

/// ZCR_EL1 of a vCPU that has not written it: LEN all ones, the longest vector length armhv
/// allows (the register's reset value is UNKNOWN; this is what firmware usually leaves).
pub const ZCR_EL1_RESET: u64 = 0xf;

impl SveState {
    /// Bytes of Z0..Z31, P0..P15 and FFR at `vq` quadwords.
    pub const fn bytes(vq: usize) -> usize {
        32 * vq * 16 + 17 * vq * 2
    }

    /// A save area for vector lengths up to `vq` quadwords.
    pub fn new(vq: usize) -> Self {
        let quads = Self::bytes(vq).div_ceil(16);
        Self { regs: alloc::vec![0; quads].into_boxed_slice(), ctrl: [0; 3], in_use: false }
    }

    /// The vector length (quadwords) the area has room for.
    pub fn capacity_vq(&self) -> usize {
        (1..=SVE_MAX_VQ).rev().find(|&vq| Self::bytes(vq) <= self.regs.len() * 16).unwrap_or(0)
    }

    /// The area fpsimd.S reads and writes: [`Self::bytes`]`(vq)` at least.
    pub fn regs(&self) -> &[u128] {
        &self.regs
    }

    pub fn regs_mut(&mut self) -> &mut [u128] {
        &mut self.regs
    }

    /// Z*n*'s first quadword at `vq` quadwords per register: where V*n* lives.
    pub fn v(&self, n: usize, vq: usize) -> u128 {
        self.regs[n * vq]
    }

    /// The state a vCPU that used only FP/SIMD so far has in SVE terms, at `vq` quadwords:
    /// its V registers in the low 128 bits of the Z registers, everything else zero, as the
    /// architecture leaves the upper bits after an FP/SIMD write.
    pub fn load_fp(&mut self, fp: &FpState, vq: usize) {
        let used = Self::bytes(vq).div_ceil(16);
        self.regs[..used].fill(0);
        for (n, q) in fp.q.iter().enumerate() {
            self.regs[n * vq] = *q;
        }
        self.ctrl = [fp.fpsr, fp.fpcr, ZCR_EL1_RESET];
    }
}

/// A vCPU's pointer-authentication keys (FEAT_PAuth): APIAKey, APIBKey, APDAKey, APDBKey and
/// APGAKey_EL1, each 128 bits as its Lo and Hi registers. Switched lazily
/// (`emulate::pauth`): in memory while another vCPU's keys are in the hardware.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PauthKeys {
    pub apia: [u64; 2],
    pub apib: [u64; 2],
    pub apda: [u64; 2],
    pub apdb: [u64; 2],
    pub apga: [u64; 2],
}

/// Most breakpoints and watchpoints the architecture allows (ID_AA64DFR0_EL1.BRPs and .WRPs
/// + 1 <= 16).
pub const MAX_DEBUG_SLOTS: usize = 16;

/// MDCR_EL2.TDA (bit 9): EL1's accesses to the debug registers (breakpoints, watchpoints,
/// MDSCR_EL1, claim tags, DCC) trap to EL2. Clear only while the running vCPU's own debug
/// registers are in the hardware (`emulate::debug`).
pub const MDCR_EL2_TDA: u64 = 1 << 9;

/// MDSCR_EL1.MDE (bit 15): breakpoints and watchpoints generate debug exceptions. None can
/// fire without it, whatever DBGBCR/DBGWCR hold.
pub const MDSCR_EL1_MDE: u64 = 1 << 15;

/// A vCPU's self-hosted debug registers (not the claim tags: `emulate::debug`), apart from MDSCR_EL1 (part of [`El1State`], switched
/// with every vCPU): saved and restored only for a vCPU that uses them (`emulate::debug`).
/// Slots beyond the hardware's breakpoint and watchpoint counts stay zero.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct DebugRegs {
    pub bvr: [u64; MAX_DEBUG_SLOTS],
    pub bcr: [u64; MAX_DEBUG_SLOTS],
    pub wvr: [u64; MAX_DEBUG_SLOTS],
    pub wcr: [u64; MAX_DEBUG_SLOTS],
    /// MDCCINT_EL1: the DCC interrupt enables.
    pub mdccint: u64,
}

/// The PMU's overflow interrupt: PPI 7 on QEMU `virt` and in the guest's machine alike.
pub const PPI_PMU: u32 = 23;

/// MDCR_EL2.TPM: EL0/EL1 accesses to the PMU registers trap to EL2.
pub const MDCR_TPM: u64 = 1 << 6;

/// Most event counters the architecture allows (PMCR_EL0.N <= 31).
pub const PMU_MAX_COUNTERS: usize = 31;

/// A PMU register, as the hardware layer reads and writes it for the monitor. The event
/// counters' selected-counter views (PMXEVTYPER_EL0, PMXEVCNTR_EL0) are resolved by the
/// monitor into [`PmuReg::EvTyper`] and [`PmuReg::EvCntr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmuReg {
    Pmcr,
    CntenSet,
    CntenClr,
    OvsClr,
    OvsSet,
    SwInc,
    Selr,
    Ceid0,
    Ceid1,
    Ccntr,
    UserEnr,
    IntenSet,
    IntenClr,
    /// PMEVCNTR<n>_EL0, n < PMCR_EL0.N.
    EvCntr(u8),
    /// PMEVTYPER<n>_EL0, n < PMCR_EL0.N; n = 31 is PMCCFILTR_EL0.
    EvTyper(u8),
}

/// One vCPU's PMU, as the physical registers hold it while its state is loaded.
#[derive(Clone, Debug)]
pub struct PmuState {
    pub pmcr: u64,
    pub pmselr: u64,
    pub pmcntenset: u64,
    pub pmintenset: u64,
    pub pmovsset: u64,
    pub pmuserenr: u64,
    pub pmccntr: u64,
    pub pmccfiltr: u64,
    pub pmevcntr: [u64; PMU_MAX_COUNTERS],
    pub pmevtyper: [u64; PMU_MAX_COUNTERS],
}

impl Default for PmuState {
    fn default() -> Self {
        Self::RESET
    }
}

impl PmuState {
    /// The architected reset: every counter disabled, nothing counting, no interrupt.
    pub const RESET: Self = Self {
        pmcr: 0,
        pmselr: 0,
        pmcntenset: 0,
        pmintenset: 0,
        pmovsset: 0,
        pmuserenr: 0,
        pmccntr: 0,
        pmccfiltr: 0,
        pmevcntr: [0; PMU_MAX_COUNTERS],
        pmevtyper: [0; PMU_MAX_COUNTERS],
    };
}
