//! A virtual CPU: its register state, and what other CPUs see of it (power, WFI, where it
//! runs). Its run loop is `run`.

use crate::arch::PauthKeys;
use crate::arch::vgic_hw;
use crate::arch::{DebugRegs, El1State};
use crate::arch::{FpState, SveState};
use crate::arch::{GuestRegs, SPSR_EL1H_MASKED};
use crate::sync::{Class, Lock};
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// How many vCPUs, over all VMs, have their `wfi` flag set (`VcpuSlot::set_wfi` counts the
/// transitions).
static IN_WFI: AtomicUsize = AtomicUsize::new(0);

/// A vCPU as the rest of the machine sees it. `state` is locked by the physical CPU running
/// the vCPU for as long as it runs, so everything other CPUs need (power state, a pending
/// CPU_ON) lives outside it.
pub struct VcpuSlot {
    power: AtomicU8,
    /// A physical CPU is inside `run::run` (or a zeroing slice) for this vCPU.
    running: AtomicBool,
    /// The vCPU executed WFI and waits for an interrupt.
    wfi: AtomicBool,
    /// The physical CPU that runs it or, when it is not running, whose run queue holds it.
    cpu: AtomicUsize,
    boot: Lock<(u64, u64)>,
    pub state: Lock<Vcpu>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Power {
    Off = 0,
    On = 1,
    /// CPU_ON accepted; the vCPU starts when its physical CPU next schedules.
    Starting = 2,
}

impl VcpuSlot {
    pub fn new(vcpu: Vcpu) -> Self {
        Self {
            power: AtomicU8::new(Power::Off as u8),
            running: AtomicBool::new(false),
            wfi: AtomicBool::new(false),
            cpu: AtomicUsize::new(0),
            boot: Lock::new(Class::VcpuBoot, (0, 0)),
            state: Lock::new(Class::VcpuState, vcpu),
        }
    }

    pub fn power(&self) -> Power {
        match self.power.load(Ordering::Acquire) {
            1 => Power::On,
            2 => Power::Starting,
            _ => Power::Off,
        }
    }

    pub fn in_wfi(&self) -> bool {
        self.wfi.load(Ordering::Acquire)
    }

    pub fn set_wfi(&self, waiting: bool) {
        if self.wfi.swap(waiting, Ordering::AcqRel) != waiting {
            if waiting {
                IN_WFI.fetch_add(1, Ordering::AcqRel);
            } else {
                IN_WFI.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Whether any vCPU of any VM waits in WFI: when none does, the scheduler has no
    /// blocked vCPU's timers to watch and skips walking every vCPU for them on each switch.
    pub fn any_in_wfi() -> bool {
        IN_WFI.load(Ordering::Acquire) != 0
    }

    pub fn cpu(&self) -> usize {
        self.cpu.load(Ordering::Acquire)
    }

    pub fn set_cpu(&self, cpu: usize) {
        self.cpu.store(cpu, Ordering::Release);
    }

    // SeqCst: see `Vm::is_stopped`.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    pub fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::SeqCst);
        if !running {
            crate::arch::cpu::send_event();
        }
    }

    pub fn set_power(&self, p: Power) {
        self.power.store(p as u8, Ordering::Release);
    }

    /// Asks for the vCPU to start at `entry` with x0 = `arg`; false if it is not off.
    pub fn request_start(&self, entry: u64, arg: u64) -> bool {
        let mut boot = self.boot.lock();
        if self
            .power
            .compare_exchange(
                Power::Off as u8,
                Power::Starting as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return false;
        }
        *boot = (entry, arg);
        true
    }

    /// Called by the CPU that owns the vCPU: performs a requested start. Returns whether it
    /// did (the vCPU's registers are fresh: what a CPU still holds of it is stale).
    pub fn take_start(&self, vcpu: &mut Vcpu) -> bool {
        if self.power() != Power::Starting {
            return false;
        }
        let (entry, arg) = *self.boot.lock();
        vcpu.reset(entry, arg);
        self.set_wfi(false);
        self.set_power(Power::On);
        true
    }
}

pub struct Vcpu {
    pub id: usize,
    pub regs: GuestRegs,
    /// Saved EL1 state; only meaningful while the vCPU is not loaded on a CPU.
    pub el1: El1State,
    /// Saved FP/SIMD state; only meaningful while another vCPU owns this CPU's FP registers.
    pub fp: FpState,
    /// Its SVE save area, in a VM with SVE; once it has used SVE, its FP state lives there
    /// instead of in `fp` (`emulate::fpsimd`).
    pub sve: Option<SveState>,
    /// Saved pointer-authentication keys; only meaningful while they are not in this CPU's key
    /// registers (`emulate::pauth`).
    pub pauth: PauthKeys,
    /// Saved debug registers; only meaningful while `debug_live` is false.
    pub debug: DebugRegs,
    /// The CPU the vCPU is loaded on holds its debug registers, and lets the guest at them
    /// without trapping (`emulate::debug`).
    pub debug_live: bool,
    pub vgic: VgicCpu,
    /// armhv holds the virtual timer line asserted (and the physical PPI silenced).
    pub vtimer_asserted: bool,
    /// While `vtimer_asserted`: the compare value whose expiry was last reported.
    pub vtimer_compare: u64,
    /// The emulated EL1 physical timer, and whether its virtual PPI is asserted.
    pub ptimer: gtimer::EmulatedTimer,
    pub ptimer_asserted: bool,
    /// The vCPU's last exit was ARMHV_YIELD: its x1 tells whether another vCPU ran meanwhile.
    pub yielded: bool,
    /// SCTLR_EL1.M and .C as armhv last saw them (`coherency::Coherency::observe_live`).
    pub caches_seen: u64,
    /// Its virtual PMU (`emulate::pmu`).
    pub pmu: Vpmu,
}

impl Vcpu {
    /// A vCPU in its reset state, powered off, with an SVE save area in a VM with SVE.
    pub fn new(id: usize, sve: Option<SveState>) -> Self {
        Self {
            id,
            regs: GuestRegs::default(),
            el1: El1State::reset(id as u64),
            fp: FpState::default(),
            sve,
            pauth: PauthKeys::default(),
            debug: DebugRegs::default(),
            debug_live: false,
            vgic: Default::default(),
            vtimer_asserted: false,
            vtimer_compare: 0,
            ptimer: Default::default(),
            ptimer_asserted: false,
            yielded: false,
            caches_seen: crate::coherency::UNSEEN,
            pmu: Vpmu::default(),
        }
    }

    /// Resets the vCPU to start at `entry` with `x0 = arg`, as the boot protocol and PSCI
    /// CPU_ON require (EL1h, MMU off, interrupts masked).
    pub fn reset(&mut self, entry: u64, arg: u64) {
        self.regs = GuestRegs::default();
        self.regs.x[0] = arg;
        self.regs.elr = entry;
        self.regs.spsr = SPSR_EL1H_MASKED;
        self.el1 = El1State::reset(self.id as u64);
        self.fp = FpState::default();
        if let Some(sve) = &mut self.sve {
            // Back to FP/SIMD state until its next SVE instruction, which rebuilds the rest.
            sve.in_use = false;
        }
        self.pauth = PauthKeys::default();
        self.debug = DebugRegs::default();
        self.debug_live = false;
        self.vgic = Default::default();
        self.vtimer_asserted = false;
        self.ptimer = Default::default();
        self.ptimer_asserted = false;
        self.yielded = false;
        self.caches_seen = crate::coherency::UNSEEN;
        // What a CPU's PMU still holds of it is stale now (`emulate::pmu` discards it).
        self.pmu = Vpmu::default();
    }
}

/// A vCPU's virtual PMU.
#[derive(Clone, Debug, Default)]
pub struct Vpmu {
    /// Its registers while they are not in the hardware.
    pub regs: crate::arch::PmuState,
    /// Its registers are in this CPU's PMU (it is `OWNER` there).
    pub live: bool,
    /// Its overflow interrupt line, as armhv drives the virtual PPI.
    pub irq: bool,
}

/// Per-vCPU virtual CPU interface state (`emulate::vgic` programs it into the hardware).
#[derive(Default)]
pub struct VgicCpu {
    pub lrs: [u64; vgic_hw::MAX_LRS],
    /// LRs 0..used hold this vCPU's interrupts after the last entry.
    pub used: usize,
    /// This CPU's list registers and ICH_HCR_EL2 hold what this vCPU's last flush wrote (it has
    /// not been put since).
    pub live: bool,
    /// `lrs[..used]` and `more_pending` are this vCPU's last flush as the model made it (set by
    /// every flush; a fresh vCPU state has none): while the model's clean flag says nothing
    /// changed since, they are what a flush would return, and a vCPU switched back in is
    /// entered from them without the model.
    pub flushed: bool,
    /// The last flush found more candidates than list registers (ICH_HCR_EL2.UIE).
    pub more_pending: bool,
    /// ICH_VMCR_EL2 and ICH_AP1R0_EL2, saved while the vCPU is not loaded.
    pub vmcr: u64,
    pub ap1r0: u64,
}
