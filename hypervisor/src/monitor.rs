//! The monitor's hardware interface (`vmm::arch::Arch`) on this machine: the EL2 hardware
//! layer (`arch::aarch64`), the physical GIC driver and armhv's console, bound to the calls
//! the monitor makes (`vmm::bind_arch!`).

#[cfg(feature = "fault-injection")]
use crate::arch::aarch64::exception;
use crate::arch::aarch64::{
    cache, cpu, debug, el1_state, el2_regs, fpsimd, id_regs, pauth, pmu, syndrome, timer,
    world_switch,
};
use crate::console;
use crate::drivers::gic::{self, vif};
use vmm::arch::{
    Arch, DebugRegs, El1State, ExitKind, FpState, GuestRegs, IdReg, PauthKeys, PmuMode, PmuReg,
    PmuState, SveState,
};

/// armhv at EL2 on an ARMv8-A CPU with a GICv3 or a GICv2.
pub struct El2;

// The monitor writes ICH_HCR_EL2 with its own bit values: they are the register's fields.
const _: () = assert!(crate::arch::aarch64::vgic_hw::HCR_EN == vmm::arch::ICH_HCR_EN);
const _: () = assert!(crate::arch::aarch64::vgic_hw::HCR_UIE == vmm::arch::ICH_HCR_UIE);
// ... and MDCR_EL2.TDA, which it clears for a vCPU whose debug registers are loaded.
const _: () = assert!(el2_regs::MDCR_TDA == vmm::arch::MDCR_EL2_TDA);

vmm::bind_arch!(El2);

impl Arch for El2 {
    #[inline(always)]
    fn current_cpu() -> usize {
        cpu::current()
    }

    #[inline(always)]
    fn send_event() {
        cpu::send_event()
    }

    #[inline(always)]
    fn wait_for_event() {
        cpu::wait_for_event()
    }

    #[inline(always)]
    fn wait_for_interrupt() {
        cpu::wait_for_interrupt()
    }

    #[inline(always)]
    fn relax() {
        cpu::relax()
    }

    #[inline(always)]
    fn now() -> u64 {
        timer::now()
    }

    #[inline(always)]
    fn counter_frequency() -> u64 {
        timer::frequency()
    }

    #[inline(always)]
    fn hyp_timer_set(deadline: Option<u64>) {
        timer::hyp_timer_set(deadline)
    }

    #[inline(always)]
    fn vtimer_asserted() -> bool {
        timer::vtimer_asserted()
    }

    #[inline(always)]
    fn vtimer_compare() -> u64 {
        timer::vtimer_compare()
    }

    #[inline(always)]
    fn gic_acknowledge() -> Option<u32> {
        gic::acknowledge()
    }

    #[inline(always)]
    fn gic_end(intid: u32) {
        gic::end(intid)
    }

    #[inline(always)]
    fn gic_drop_priority(intid: u32) {
        gic::drop_priority(intid)
    }

    #[inline(always)]
    fn gic_deactivate_spi(intid: u32) {
        gic::deactivate_spi(intid)
    }

    fn gic_spi_pending(intid: u32) -> bool {
        gic::spi_pending(intid)
    }

    #[inline(always)]
    fn gic_disable_spi(intid: u32) {
        gic::disable_spi(intid)
    }

    #[inline(always)]
    fn gic_route_spi(intid: u32, mpidr: u64, level: bool) -> Result<(), &'static str> {
        gic::route_spi(intid, mpidr, level)
    }

    #[inline(always)]
    fn gic_set_local_ppi(cpu: usize, ppi: u32, enable: bool) {
        gic::set_local_ppi(cpu, ppi, enable)
    }

    #[inline(always)]
    fn gic_kick(cpus: credit::CpuSet) {
        gic::kick(cpus)
    }

    #[inline(always)]
    fn lr_count() -> usize {
        vif::lr_count()
    }

    #[inline(always)]
    fn read_lr(n: usize) -> u64 {
        vif::read_lr(n)
    }

    #[inline(always)]
    fn write_lr(n: usize, value: u64) {
        vif::write_lr(n, value)
    }

    #[inline(always)]
    fn write_ich_hcr(value: u64) {
        vif::write_hcr(value)
    }

    #[inline(always)]
    fn read_ich_vmcr() -> u64 {
        vif::read_vmcr()
    }

    #[inline(always)]
    fn write_ich_vmcr(value: u64) {
        vif::write_vmcr(value)
    }

    #[inline(always)]
    fn read_ich_ap1r0() -> u64 {
        vif::read_apr()
    }

    #[inline(always)]
    fn write_ich_ap1r0(value: u64) {
        vif::write_apr(value)
    }

    #[inline(always)]
    fn load_vttbr(vttbr: u64) {
        el2_regs::load_vttbr(vttbr)
    }

    #[inline(always)]
    fn load_cntvoff(cntvoff: u64) {
        el2_regs::load_cntvoff(cntvoff)
    }

    #[inline(always)]
    fn load_mdcr(mdcr: u64) {
        el2_regs::load_mdcr(mdcr)
    }

    #[inline(always)]
    fn load_vm_done() {
        el2_regs::load_vm_done()
    }

    #[inline(always)]
    fn mdcr_for(pmu: PmuMode) -> u64 {
        el2_regs::mdcr(pmu)
    }

    #[inline(always)]
    fn set_fp_traps(fp: bool, sve: bool) {
        el2_regs::set_fp_traps(fp, sve)
    }

    #[inline(always)]
    fn set_pauth_trap(trap: bool) {
        el2_regs::set_pauth_trap(trap)
    }

    #[inline(always)]
    fn enter_guest(regs: &mut GuestRegs) -> ExitKind {
        world_switch::enter(regs)
    }

    #[inline(always)]
    fn el1_save(state: &mut El1State) {
        el1_state::save(state)
    }

    #[inline(always)]
    fn el1_restore(state: &El1State) {
        el1_state::restore(state)
    }

    #[inline(always)]
    fn fp_save(state: &mut FpState) {
        fpsimd::save(state)
    }

    #[inline(always)]
    fn fp_restore(state: &FpState) {
        fpsimd::restore(state)
    }

    #[inline(always)]
    fn sve_save(state: &mut SveState, vq: usize) {
        fpsimd::sve_save(state, vq)
    }

    #[inline(always)]
    fn sve_restore(state: &SveState, vq: usize) {
        fpsimd::sve_restore(state, vq)
    }

    #[inline(always)]
    fn pauth_save(keys: &mut PauthKeys) {
        pauth::save(keys)
    }

    #[inline(always)]
    fn pauth_restore(keys: &PauthKeys) {
        pauth::restore(keys)
    }

    #[inline(always)]
    fn debug_save(state: &mut DebugRegs) {
        debug::save(state)
    }

    #[inline(always)]
    fn debug_restore(state: &DebugRegs) {
        debug::restore(state)
    }

    #[inline(always)]
    fn live_sctlr() -> u64 {
        el1_state::live_sctlr()
    }

    #[inline(always)]
    fn live_vbar() -> u64 {
        el1_state::live_vbar()
    }

    #[inline(always)]
    fn write_live_fault(esr: u64, far: u64, elr: u64, spsr: u64) {
        el1_state::write_live_fault(esr, far, elr, spsr)
    }

    #[inline(always)]
    fn esr() -> u64 {
        syndrome::esr()
    }

    #[inline(always)]
    fn far() -> u64 {
        syndrome::far()
    }

    #[inline(always)]
    fn hpfar() -> u64 {
        syndrome::hpfar()
    }

    #[inline(always)]
    fn read_id_reg(reg: IdReg) -> u64 {
        id_regs::read(reg)
    }

    #[inline(always)]
    fn device_write32(pa: u64, value: u32) -> Result<(), &'static str> {
        crate::arch::aarch64::device::write32(pa, value)
    }

    fn clean_to_poc(start: u64, len: u64) {
        cache::clean_to_poc(start, len)
    }

    #[inline(always)]
    fn clean_data_to_poc(start: u64, len: u64) {
        cache::clean_data_to_poc(start, len)
    }

    #[inline(always)]
    fn clean_invalidate_to_poc(start: u64, len: u64) {
        cache::clean_invalidate_to_poc(start, len)
    }

    #[inline(always)]
    fn stage2_fwb() -> bool {
        cache::stage2_fwb()
    }

    #[inline(always)]
    fn clean_invalidate_set_way(operand: u64) {
        cache::clean_invalidate_set_way(operand)
    }

    #[inline(always)]
    fn flush_guest_tlbs() {
        cache::flush_guest_tlbs()
    }

    #[inline(always)]
    fn cycles() -> u64 {
        pmu::cycles()
    }

    #[inline(always)]
    fn enable_cycle_counter() {
        pmu::enable_cycle_counter()
    }

    fn pmu_counters() -> usize {
        pmu::event_counters() as usize
    }

    fn pmu_load(state: &PmuState) {
        pmu::load(state)
    }

    fn pmu_put(state: &mut PmuState) {
        pmu::put(state)
    }

    fn pmu_read(reg: PmuReg) -> u64 {
        pmu::read(reg)
    }

    fn pmu_write(reg: PmuReg, value: u64) {
        pmu::write(reg, value)
    }

    fn console_line(vm: usize, vm_name: &str, line: &[u8]) {
        console::print_vm_line(vm, vm_name, line)
    }

    fn console_partial(vm: usize, vm_name: &str, text: &[u8]) {
        console::print_vm_partial(vm, vm_name, text)
    }

    fn provoke_fault(kind: u32) {
        #[cfg(feature = "fault-injection")]
        match kind {
            0 => exception::provoke_fault(),
            1 => console::provoke_panic_in_console(),
            _ => panic!("test: armhv panics holding a VM's device lock"),
        }
        // Other builds have no hypercall that asks for it.
        #[cfg(not(feature = "fault-injection"))]
        let _ = kind;
    }
}
