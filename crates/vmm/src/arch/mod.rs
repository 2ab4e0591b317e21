//! What the monitor needs from the machine, and nothing else: the [`Arch`] trait. The EL2
//! binary implements it on the hardware (`hypervisor/src/arch/aarch64/monitor.rs`) and binds
//! it with [`bind_arch!`](crate::bind_arch); the host tests run the same monitor on
//! [`fake::Fake`] (Hafnium's `arch/fake`). The monitor calls the functions below (grouped as
//! the hardware is: `cpu`, `timer`, `gic`, ...), never the trait directly.
//!
//! On the target, each call goes to a symbol the binary's [`bind_arch!`](crate::bind_arch)
//! defines, generated from the same list as the trait ([`with_arch_fns!`](crate::with_arch_fns)),
//! so that a declaration and its definition cannot disagree; link-time optimization inlines
//! them across the crate boundary.

mod state;
pub use state::*;
pub use trap::id_regs::IdReg;
pub use vmconfig::PmuMode;

#[cfg(not(target_os = "none"))]
pub mod fake;

/// Calls `$callback!` with armhv's hardware interface: one list for the [`Arch`] trait, the
/// monitor's calls and the EL2 binary's definitions. Paths are absolute so that the list reads
/// the same in every crate that expands it.
#[doc(hidden)]
#[macro_export]
macro_rules! with_arch_fns {
    ($callback:path $(, $arg:ty)?) => {
        $callback! {
            [$($arg)?]
            // The physical CPU.
            /// This CPU's index (0 = the boot CPU).
            fn current_cpu() -> usize;
            /// Wakes CPUs waiting in `wait_for_event`.
            fn send_event();
            fn wait_for_event();
            /// Sleeps until an interrupt is pending (EL2 runs with them masked).
            fn wait_for_interrupt();
            /// A busy wait's pause (for a lock, for another CPU): a hint to the hardware, and
            /// on QEMU's round-robin TCG (`-icount`) a switch to the next CPU, which may be the
            /// one waited for.
            fn relax();
            // The counter and timers.
            /// The physical counter: armhv's clock.
            fn now() -> u64;
            /// Counter ticks per second.
            fn counter_frequency() -> u64;
            /// armhv's EL2 timer (PPI 26) fires at `deadline`; `None` disarms it.
            fn hyp_timer_set(deadline: Option<u64>);
            /// The loaded guest's virtual timer drives its line (enabled, fired, not masked).
            fn vtimer_asserted() -> bool;
            /// The loaded guest's virtual timer compare value.
            fn vtimer_compare() -> u64;
            // The physical GIC.
            /// The highest-priority pending interrupt, acknowledged.
            fn gic_acknowledge() -> Option<u32>;
            /// Priority drop and deactivation.
            fn gic_end(intid: u32);
            /// Priority drop only: the guest's EOI deactivates it (hardware-linked).
            fn gic_drop_priority(intid: u32);
            fn gic_deactivate_spi(intid: u32);
            /// Whether SPI `intid` is pending at the distributor (GICD_ISPENDR): for a
            /// level-sensitive one, active or not, whether its line is high.
            fn gic_spi_pending(intid: u32) -> bool;
            fn gic_disable_spi(intid: u32);
            /// Routes SPI `intid` to the CPU of `mpidr`, level- or edge-triggered, and enables it.
            fn gic_route_spi(intid: u32, mpidr: u64, level: bool) -> Result<(), &'static str>;
            /// Enables or disables PPI `ppi` of CPU `cpu`.
            fn gic_set_local_ppi(cpu: usize, ppi: u32, enable: bool);
            /// Sends the kick SGI to the CPUs in the mask `cpus`.
            fn gic_kick(cpus: credit::CpuSet);
            // The GIC's virtual CPU interface (ICH_*_EL2).
            fn lr_count() -> usize;
            fn read_lr(n: usize) -> u64;
            fn write_lr(n: usize, value: u64);
            fn write_ich_hcr(value: u64);
            fn read_ich_vmcr() -> u64;
            fn write_ich_vmcr(value: u64);
            fn read_ich_ap1r0() -> u64;
            fn write_ich_ap1r0(value: u64);
            // A VM's EL2 registers.
            /// Stage-2 translation: the VM's table and VMID.
            fn load_vttbr(vttbr: u64);
            fn load_cntvoff(cntvoff: u64);
            fn load_mdcr(mdcr: u64);
            /// After the loads above: they take effect.
            fn load_vm_done();
            /// MDCR_EL2 for a VM with this kind of PMU.
            fn mdcr_for(pmu: $crate::arch::PmuMode) -> u64;
            /// Traps the guest's FP/SIMD (CPTR_EL2.TFP) and SVE (CPTR_EL2.TZ) or not. The SVE
            /// trap is lifted only on CPUs with SVE.
            fn set_fp_traps(fp: bool, sve: bool);
            /// Traps pointer-authentication instructions and key registers (HCR_EL2.API and
            /// APK clear) or not.
            fn set_pauth_trap(trap: bool);
            // A vCPU's state.
            /// Runs the loaded guest until it traps to EL2.
            fn enter_guest(regs: &mut $crate::arch::GuestRegs) -> $crate::arch::ExitKind;
            fn el1_save(state: &mut $crate::arch::El1State);
            fn el1_restore(state: &$crate::arch::El1State);
            fn fp_save(state: &mut $crate::arch::FpState);
            fn fp_restore(state: &$crate::arch::FpState);
            /// The SVE registers at `vq` quadwords (ZCR_EL2.LEN = `vq` - 1 from then on), with
            /// FPSR, FPCR and ZCR_EL1. FP/SIMD and SVE must not trap.
            fn sve_save(state: &mut $crate::arch::SveState, vq: usize);
            fn sve_restore(state: &$crate::arch::SveState, vq: usize);
            /// Only on CPUs with pointer authentication.
            fn pauth_save(keys: &mut $crate::arch::PauthKeys);
            fn pauth_restore(keys: &$crate::arch::PauthKeys);
            /// The breakpoints, watchpoints, claim tags and MDCCINT_EL1, as many slots as this
            /// CPU implements.
            fn debug_save(state: &mut $crate::arch::DebugRegs);
            fn debug_restore(state: &$crate::arch::DebugRegs);
            /// The loaded guest's live SCTLR_EL1 and VBAR_EL1.
            fn live_sctlr() -> u64;
            fn live_vbar() -> u64;
            /// Makes an injected exception visible to the loaded guest (ESR, FAR, ELR, SPSR_EL1).
            fn write_live_fault(esr: u64, far: u64, elr: u64, spsr: u64);
            /// The trap's syndrome: ESR_EL2, FAR_EL2, HPFAR_EL2.
            fn esr() -> u64;
            fn far() -> u64;
            fn hpfar() -> u64;
            /// An ID register as the hardware has it.
            fn read_id_reg(reg: $crate::arch::IdReg) -> u64;
            // Caches and TLBs.
            fn clean_to_poc(start: u64, len: u64);
            fn clean_data_to_poc(start: u64, len: u64);
            /// DC CIVAC over the range: armhv's next read of it comes from memory.
            fn clean_invalidate_to_poc(start: u64, len: u64);
            /// Whether guests run with HCR_EL2.FWB (FEAT_S2FWB on every CPU): Stage-2 forces
            /// their RAM to Normal Write-Back, whatever their MMU and caches do.
            fn stage2_fwb() -> bool;
            fn clean_invalidate_set_way(operand: u64);
            fn flush_guest_tlbs();
            // Devices assigned to VMs.
            /// Writes `value` to the 32-bit register at host physical address `pa` of a device
            /// assigned to a VM, to quiesce it at the VM's stop or reset. Refused for an address
            /// outside the windows the binary mapped for that purpose.
            fn device_write32(pa: u64, value: u32) -> Result<(), &'static str>;
            // The PMU, for the guests' virtual PMUs.
            /// Event counters this CPU implements (PMCR_EL0.N).
            fn pmu_counters() -> usize;
            /// Saves armhv's own PMU state (its cycle counter, a raw-PMU VM's counters) on
            /// this CPU and loads a vCPU's.
            fn pmu_load(state: &$crate::arch::PmuState);
            /// Saves the loaded vCPU's PMU state and gives armhv its own back.
            fn pmu_put(state: &mut $crate::arch::PmuState);
            /// A PMU register as the hardware holds it.
            fn pmu_read(reg: $crate::arch::PmuReg) -> u64;
            fn pmu_write(reg: $crate::arch::PmuReg, value: u64);
            // Measurement.
            /// The cycle counter (PMCCNTR_EL0).
            fn cycles() -> u64;
            fn enable_cycle_counter();
            // armhv's own console.
            /// A whole line of VM `vm`'s console output, tagged with its name.
            fn console_line(vm: usize, vm_name: &str, line: &[u8]);
            /// The start of a line not finished yet (a prompt of the VM typed at).
            fn console_partial(vm: usize, vm_name: &str, text: &[u8]);
            // Test builds (`fault-injection`).
            /// armhv faults: 0 an exception at EL2, 1 a panic inside the console's lock.
            fn provoke_fault(kind: u32);
        }
    };
}

macro_rules! declare_trait {
    ([] $($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        /// The hardware interface of the monitor.
        pub trait Arch {
            $($(#[$doc])* fn $name($($arg: $ty),*) $(-> $ret)?;)*
        }
    };
}

with_arch_fns!(declare_trait);

/// Defines, in the EL2 binary, the symbols through which the monitor calls `$arch`'s
/// implementation of [`Arch`].
#[macro_export]
macro_rules! bind_arch {
    ($arch:ty) => {
        $crate::with_arch_fns!($crate::__define_arch_symbols, $arch);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __define_arch_symbols {
    ([$arch:ty] $($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        $(
            #[unsafe(export_name = concat!("armhv_arch_", stringify!($name)))]
            #[inline]
            fn $name($($arg: $ty),*) $(-> $ret)? {
                <$arch as $crate::arch::Arch>::$name($($arg),*)
            }
        )*
    };
}

/// The monitor's calls: to the binary's symbols on the target, to the fake on the host.
#[cfg(target_os = "none")]
mod imp {
    macro_rules! declare_calls {
        ([] $($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
            mod symbols {
                // The EL2 binary defines each of these with `bind_arch!`, which expands the
                // same list into functions of exactly these signatures that call its `Arch`
                // implementation: calling one is calling a safe trait function, so they are
                // declared `safe`. A binary that does not bind an implementation fails to link.
                unsafe extern "Rust" {
                    $(
                        #[link_name = concat!("armhv_arch_", stringify!($name))]
                        pub safe fn $name($($arg: $ty),*) $(-> $ret)?;
                    )*
                }
            }
            $(
                #[inline(always)]
                pub fn $name($($arg: $ty),*) $(-> $ret)? {
                    symbols::$name($($arg),*)
                }
            )*
        };
    }
    with_arch_fns!(declare_calls);
}

#[cfg(not(target_os = "none"))]
mod imp {
    macro_rules! declare_calls {
        ([] $($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
            $(
                #[inline(always)]
                pub fn $name($($arg: $ty),*) $(-> $ret)? {
                    <super::fake::Fake as super::Arch>::$name($($arg),*)
                }
            )*
        };
    }
    with_arch_fns!(declare_calls);
}

impl GuestRegs {
    /// Runs the loaded guest until it traps to EL2.
    #[inline(always)]
    pub fn enter(&mut self) -> ExitKind {
        imp::enter_guest(self)
    }
}

impl El1State {
    /// Copies the live hardware registers into `self`.
    #[inline(always)]
    pub fn save(&mut self) {
        imp::el1_save(self)
    }

    /// Loads `self` into the hardware, for the guest's next entry.
    #[inline(always)]
    pub fn restore(&self) {
        imp::el1_restore(self)
    }

    /// The loaded guest's live SCTLR_EL1.
    #[inline(always)]
    pub fn live_sctlr() -> u64 {
        imp::live_sctlr()
    }

    /// The loaded guest's live VBAR_EL1.
    #[inline(always)]
    pub fn live_vbar() -> u64 {
        imp::live_vbar()
    }

    /// Makes an injected exception visible to the loaded guest.
    #[inline(always)]
    pub fn write_live_fault(esr: u64, far: u64, elr: u64, spsr: u64) {
        imp::write_live_fault(esr, far, elr, spsr)
    }
}

impl FpState {
    #[inline(always)]
    pub fn save(&mut self) {
        imp::fp_save(self)
    }

    #[inline(always)]
    pub fn restore(&self) {
        imp::fp_restore(self)
    }
}

impl SveState {
    #[inline(always)]
    pub fn save(&mut self, vq: usize) {
        imp::sve_save(self, vq)
    }

    #[inline(always)]
    pub fn restore(&self, vq: usize) {
        imp::sve_restore(self, vq)
    }
}

impl PauthKeys {
    /// Copies the live key registers into `self` (a CPU with pointer authentication only).
    #[inline(always)]
    pub fn save(&mut self) {
        imp::pauth_save(self)
    }

    /// Loads `self` into the key registers (a CPU with pointer authentication only).
    #[inline(always)]
    pub fn restore(&self) {
        imp::pauth_restore(self)
    }
}

impl DebugRegs {
    /// Copies the live hardware registers into `self`.
    #[inline(always)]
    pub fn save(&mut self) {
        imp::debug_save(self)
    }

    /// Loads `self` into the hardware, for the guest's next entry.
    #[inline(always)]
    pub fn restore(&self) {
        imp::debug_restore(self)
    }
}

/// The physical CPU.
pub mod cpu {
    pub use super::MAX_CPUS;
    pub use super::imp::{
        current_cpu as current, relax, send_event, wait_for_event, wait_for_interrupt,
    };
}

/// The counter, armhv's EL2 timer and the loaded guest's virtual timer.
pub mod timer {
    pub use super::imp::{
        counter_frequency as frequency, hyp_timer_set, now, vtimer_asserted, vtimer_compare,
    };

    /// Disarms armhv's timer after it fired.
    #[inline]
    pub fn hyp_timer_cancel() {
        hyp_timer_set(None);
    }

    pub fn micros_to_ticks(us: u64) -> u64 {
        us * frequency() / 1_000_000
    }
}

/// The physical GIC.
pub mod gic {
    pub use super::imp::{
        gic_acknowledge as acknowledge, gic_deactivate_spi as deactivate_spi,
        gic_disable_spi as disable_spi, gic_drop_priority as drop_priority, gic_end as end,
        gic_kick as kick, gic_route_spi as route_spi, gic_set_local_ppi as set_local_ppi,
        gic_spi_pending as spi_pending,
    };
    pub use super::{PPI_HYP_TIMER, PPI_MAINTENANCE, PPI_PMU, PPI_VIRT_TIMER, SGI_KICK};
}

/// The GIC's virtual CPU interface.
pub mod vgic_hw {
    pub use super::imp::{
        lr_count, read_ich_ap1r0 as read_ap1r0, read_ich_vmcr as read_vmcr, read_lr,
        write_ich_ap1r0 as write_ap1r0, write_ich_hcr as write_hcr, write_ich_vmcr as write_vmcr,
        write_lr,
    };
    pub use super::{ICH_HCR_EN as HCR_EN, ICH_HCR_UIE as HCR_UIE, MAX_LRS};
}

/// A VM's EL2 registers.
pub mod el2_regs {
    pub use super::imp::{
        load_cntvoff, load_mdcr, load_vm_done, load_vttbr, mdcr_for as mdcr, set_fp_traps,
        set_pauth_trap,
    };
}

/// The trap's syndrome.
pub mod syndrome {
    pub use super::imp::{esr, far, hpfar};
}

pub mod id_regs {
    pub use super::imp::read_id_reg as read;
}

/// Cache and TLB maintenance.
pub mod cache {
    pub use super::imp::{
        clean_data_to_poc, clean_invalidate_set_way, clean_invalidate_to_poc, clean_to_poc,
        flush_guest_tlbs, stage2_fwb,
    };
}

pub mod pmu {
    pub use super::imp::{
        cycles, enable_cycle_counter, pmu_counters as counters, pmu_load as load, pmu_put as put,
        pmu_read as read, pmu_write as write,
    };
}

/// The registers of devices assigned to VMs.
pub mod device {
    pub use super::imp::device_write32 as write32;
}

/// armhv's own console.
pub mod console {
    pub use super::imp::{console_line as print_vm_line, console_partial as print_vm_partial};
}

/// Test builds: armhv's own faults.
pub mod fault {
    pub use super::imp::provoke_fault;
}
