//! A virtual CPU: its register state and its run loop.

use super::bench::{self, Class};
use super::vm::Vm;
use super::{Action, StopReason, exits, stats};
use crate::arch::aarch64::el1_state::El1State;
use crate::arch::aarch64::fpsimd::FpState;
use crate::arch::aarch64::timer;
use crate::arch::aarch64::world_switch::{ExitKind, GuestRegs, SPSR_EL1H_MASKED};
use alloc::format;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use spin::Mutex;

/// How many vCPUs, over all VMs, have their `wfi` flag set (`VcpuSlot::set_wfi` counts the
/// transitions).
static IN_WFI: AtomicUsize = AtomicUsize::new(0);

/// A vCPU as the rest of the machine sees it. `state` is locked by the physical CPU running
/// the vCPU for as long as it runs, so everything other CPUs need (power state, a pending
/// CPU_ON) lives outside it.
pub struct VcpuSlot {
    power: AtomicU8,
    /// A physical CPU is inside `Vcpu::run` for this vCPU.
    running: AtomicBool,
    /// The vCPU executed WFI and waits for an interrupt.
    wfi: AtomicBool,
    /// The physical CPU that runs it or, when it is not running, whose run queue holds it.
    cpu: AtomicUsize,
    boot: Mutex<(u64, u64)>,
    pub state: Mutex<Vcpu>,
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
            boot: Mutex::new((0, 0)),
            state: Mutex::new(vcpu),
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
            crate::arch::aarch64::cpu::send_event();
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

    /// Called by the CPU that owns the vCPU: performs a requested start.
    pub fn take_start(&self, vm_id: usize, vcpu: &mut Vcpu) {
        if self.power() == Power::Starting {
            let (entry, arg) = *self.boot.lock();
            vcpu.reset(entry, arg);
            super::fpsimd::on_reset(vm_id, vcpu.id);
            self.set_wfi(false);
            self.set_power(Power::On);
        }
    }
}

pub struct Vcpu {
    pub id: usize,
    pub regs: GuestRegs,
    /// Saved EL1 state; only meaningful while the vCPU is not loaded on a CPU.
    pub el1: El1State,
    /// Saved FP/SIMD state; only meaningful while another vCPU owns this CPU's FP registers.
    pub fp: FpState,
    pub vgic: super::vgic::VgicCpu,
    /// armhv holds the virtual timer line asserted (and the physical PPI silenced).
    pub vtimer_asserted: bool,
    /// While `vtimer_asserted`: the compare value whose expiry was last reported.
    pub vtimer_compare: u64,
    /// The emulated EL1 physical timer, and whether its virtual PPI is asserted.
    pub ptimer: gtimer::EmulatedTimer,
    pub ptimer_asserted: bool,
    /// The vCPU's last exit was ARMHV_YIELD: its x1 tells whether another vCPU ran meanwhile.
    pub yielded: bool,
}

impl Vcpu {
    /// A vCPU in its reset state, powered off.
    pub fn new(id: usize) -> Self {
        Self {
            id,
            regs: GuestRegs::default(),
            el1: El1State::reset(id as u64),
            fp: FpState::default(),
            vgic: Default::default(),
            vtimer_asserted: false,
            vtimer_compare: 0,
            ptimer: Default::default(),
            ptimer_asserted: false,
            yielded: false,
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
        self.vgic = Default::default();
        self.vtimer_asserted = false;
        self.ptimer = Default::default();
        self.ptimer_asserted = false;
        self.yielded = false;
    }

    /// Puts this vCPU's EL1 state into the hardware (FP/SIMD follows lazily: vmm::fpsimd).
    pub fn load(&self, vm_id: usize) {
        bench::timed(Class::El1, || self.el1.restore());
        bench::timed(Class::Vgic, || super::vgic::load(self));
        bench::timed(Class::Timer, || super::vtimer::on_load(self));
        bench::timed(Class::FpSimd, || super::fpsimd::on_load(vm_id, self.id, &self.fp));
    }

    /// Takes this vCPU's EL1 state out of the hardware.
    pub fn put(&mut self) {
        bench::timed(Class::El1, || self.el1.save());
        bench::timed(Class::Vgic, || super::vgic::put(self));
    }

    /// Runs the (loaded) vCPU until it yields, blocks or its VM stops. Exits that can be handled
    /// without leaving the vCPU return here straight into the guest. armhv's timer is kept armed
    /// for the end of the time slice, if any, or the emulated physical timer's deadline.
    pub fn run(&mut self, vm: &Vm, slice_end: Option<u64>) -> Action {
        // armhv's timer is armed for `slice_end` and nothing has touched it since: only an
        // interrupt (its own firing) or the emulated physical timer change what it must be.
        let mut armed_for_slice = false;
        // The scheduler chose this vCPU before its VM began a reset or stopped, which then
        // found it not running yet and did not wait for it: its RAM may be being zeroed.
        if vm.is_stopped() || vm.is_resetting() {
            return Action::Block;
        }
        loop {
            bench::timed(Class::Timer, || {
                super::vtimer::sync(vm, self);
                if self.ptimer.enabled() || self.ptimer_asserted {
                    timer::hyp_timer_set(earliest(slice_end, super::ptimer::sync(vm, self)));
                    armed_for_slice = false;
                } else if !armed_for_slice {
                    // The guest does not use its physical timer.
                    timer::hyp_timer_set(slice_end);
                    armed_for_slice = true;
                }
            });
            bench::timed(Class::Vgic, || super::vgic::flush(vm, self));
            let kind = self.regs.enter();
            bench::on_exit(&self.regs.stamps);
            stats::bump(&vm.stats.exits);
            bench::timed(Class::Vgic, || super::vgic::sync(vm, self));
            let action = match kind {
                ExitKind::Sync => exits::handle_sync(vm, self),
                ExitKind::Irq | ExitKind::Fiq => {
                    armed_for_slice = false;
                    stats::bump(&vm.stats.irq);
                    super::irq::handle_pending(Some((vm, &mut *self)))
                }
                ExitKind::SError => Action::Stop(StopReason::Fault(format!(
                    "SError from the guest at PC {:#x}",
                    self.regs.elr
                ))),
                ExitKind::AArch32 => Action::Stop(StopReason::Fault(format!(
                    "exception from AArch32 state at PC {:#x}: armhv runs AArch64 guests only",
                    self.regs.elr
                ))),
            };
            if vm.is_stopped() {
                return Action::Stop(StopReason::PoweredOff);
            }
            if vm.is_resetting() {
                return Action::Block;
            }
            if !matches!(action, Action::Resume) {
                return action;
            }
        }
    }
}

/// The earlier of two optional deadlines.
pub fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
