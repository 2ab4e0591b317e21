//! A virtual machine: its RAM and Stage-2 table, its devices, its vCPUs and its life cycle.

use super::StopReason;
use super::memory::GuestMemory;
use super::stats::VmStats;
use super::uart::VmUart;
use super::vcpu::{Power, Vcpu, VcpuSlot};
use crate::arch::aarch64::cpu;
use crate::mm::frames::TablePages;
use addr::Ipa;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use spin::Mutex;
use spin::mutex::TicketMutex;
use stage2::Stage2Table;
use vdev::MmioBus;
use vmconfig::VmSpec;

pub struct Vm {
    pub id: usize,
    pub name: String,
    /// What the VM was built from (images point into the boot package): used again on reset.
    pub(super) spec: VmSpec<'static>,
    pub(super) device_tree: Vec<u8>,
    pub memory: GuestMemory,
    /// Kept alive for as long as the VM: VTTBR_EL2 points at its root.
    pub(super) _stage2: Stage2Table<TablePages>,
    pub vttbr: u64,
    /// CNTVOFF_EL2: the VM's virtual counter starts near zero when it boots.
    pub cntvoff: u64,
    /// MDCR_EL2 while it runs: whether it has the PMU (`el2_regs::mdcr`).
    pub mdcr: u64,
    /// When armhv last saw its virtio notifications and raised its virtio interrupts.
    pub io_stamps: Arc<super::bench::IoStamps>,
    /// A ticket lock, first come first served: other VMs deliver frames into this VM's
    /// devices under it, and with a plain spinlock a VM flooding frames can re-take it before
    /// this VM's own vCPUs, spinning for their UART, get a turn. (The hostile suite's healthy
    /// VM, ~40 heartbeats in 2 s unflooded: 21-28 during a flood with a spinlock, 26-33 with
    /// this, two QEMUs sharing the host's 2 cores; once 6, which failed the suite.)
    pub devices: TicketMutex<MmioBus>,
    /// The virtual GIC model; also reached through its MMIO frames on `devices`.
    pub vgic: Arc<Mutex<vgic::Vgic>>,
    /// Which vCPUs' last list-register flush still stands, readable without the vGIC lock.
    pub vgic_clean: Arc<vgic::CleanFlags>,
    pub vcpus: Vec<VcpuSlot>,
    /// The physical CPU each vCPU is pinned to; `None`: the scheduler places it.
    pub affinity: Vec<Option<usize>>,
    /// Its weight, cap and real-time server.
    pub sched: vmconfig::VmSched,
    /// Physical devices assigned to the VM, and the MPIDR of the CPU their interrupts go to.
    pub assigned: Vec<super::passthrough::AssignedDevice>,
    pub assigned_route: u64,
    /// Where typed console input goes (`None`: the VM has no console device).
    pub console_input: Option<super::console_mux::ConsoleInput>,
    /// The VM's network interfaces (virtio-net slots) as their networks see them.
    pub nics: Vec<super::virtio::NicPort>,
    pub stats: VmStats,
    /// Zeroing its RAM after a reset or its end, a piece at a time.
    pub scrub: super::scrub::Scrub,
    pub(super) stopped: AtomicBool,
    /// Set while SYSTEM_RESET rebuilds the VM: its vCPUs must not be entered.
    pub(super) resetting: AtomicBool,
    /// Bumped by every reset: state a CPU still holds in its registers is stale.
    pub(super) generation: AtomicUsize,
}

impl Vm {
    // SeqCst loads: a vCPU about to enter its guest publishes that it runs and then checks
    // these; a reset or stop sets them and then checks which vCPUs run (`leave_guests`).
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    pub fn is_resetting(&self) -> bool {
        self.resetting.load(Ordering::SeqCst)
    }

    pub fn generation(&self) -> usize {
        self.generation.load(Ordering::Acquire)
    }

    /// Copies the images and the device tree into RAM (at creation and at every reset).
    pub(super) fn load_guest(&self) -> Result<(), String> {
        for image in core::iter::once(&self.spec.kernel).chain(self.spec.initrd.as_ref()) {
            if !self.memory.write(image.load, image.bytes) {
                return Err(format!("image at {} does not fit in its RAM", image.load));
            }
        }
        let dt_area = self.spec.fdt_area();
        if self.device_tree.len() as u64 > dt_area.size
            || !self.memory.write(dt_area.start, &self.device_tree)
        {
            return Err(format!(
                "its device tree ({} bytes) does not fit at {}",
                self.device_tree.len(),
                dt_area.start
            ));
        }
        // What was written must reach a guest that starts with its caches off (the zeroed RAM
        // around it already has: `GuestMemory::zero_piece`, `GuestMemory::allocate`).
        for image in core::iter::once(&self.spec.kernel).chain(self.spec.initrd.as_ref()) {
            self.memory.clean_to_poc(image.load, image.bytes.len() as u64);
        }
        self.memory.clean_to_poc(dt_area.start, self.device_tree.len() as u64);
        Ok(())
    }

    /// Puts vCPU 0 at the kernel entry with x0 = the device tree, as the boot protocol requires.
    pub(super) fn boot_vcpu0(&self, vcpu: &mut Vcpu) {
        vcpu.reset(self.spec.entry.raw(), self.fdt_ipa().raw());
        self.vcpus[0].set_power(Power::On);
    }

    fn fdt_ipa(&self) -> Ipa {
        self.spec.fdt_area().start
    }

    /// PSCI SYSTEM_RESET from vCPU `caller`: the VM stops running and `caller`, in its turns on
    /// its CPU, zeroes its RAM (`scrub`) and then restarts it alone ([`Self::finish_reset`]). A
    /// vCPU that asks while another's reset is under way (both at once) joins that one.
    pub fn begin_reset(&self, caller: usize) {
        // SeqCst: paired with the check of a vCPU about to enter its guest (`Vcpu::run`).
        if self.resetting.swap(true, Ordering::SeqCst) {
            return;
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.leave_guests(Some(caller));
        // Devices write into the VM only under its device lock and not while it resets: once
        // the lock is free, a delivery that was under way has ended.
        drop(self.devices.lock());
        self.scrub.begin_reset(caller);
    }

    /// The end of a reset, once its RAM is zero (`caller` is the state of the vCPU that did
    /// it): fresh images and devices, vCPU 0 at the entry point and the others off, and the VM
    /// runs again.
    pub(super) fn finish_reset(&self, caller: &mut Vcpu) {
        if let Err(why) = self.load_guest() {
            log::error!("{}: reset failed: {why}", self.name);
        }
        // Queues set up by the old kernel point into RAM the new one owns: forgotten.
        super::usage::devices_to_power_on(self);
        super::passthrough::connect(self);
        for (i, slot) in self.vcpus.iter().enumerate() {
            slot.set_power(Power::Off);
            // A vCPU caught in WFI is not waiting any more: left set, the flag kept it from
            // ever being scheduled when CPU_ON started it again (Linux's secondaries).
            slot.set_wfi(false);
            if i != caller.id {
                let mut vcpu = slot.state.lock();
                vcpu.reset(0, 0);
                super::fpsimd::on_reset(self.id, i);
                if i == 0 {
                    self.boot_vcpu0(&mut vcpu);
                }
            }
        }
        caller.reset(0, 0);
        super::fpsimd::on_reset(self.id, caller.id);
        if caller.id == 0 {
            self.boot_vcpu0(caller);
        }
        super::stats::bump(&self.stats.resets);
        log::info!("{}: reset by the guest ({})", self.name, self.stats);
        self.resetting.store(false, Ordering::SeqCst);
        crate::vmm::sched::start(self, 0);
    }

    /// Makes every vCPU of the VM but `except` (the caller's own) leave its guest, and waits
    /// until none runs.
    fn leave_guests(&self, except: Option<usize>) {
        crate::vmm::sched::kick_vm(self);
        for (i, slot) in self.vcpus.iter().enumerate() {
            if Some(i) != except {
                while slot.is_running() {
                    cpu::wait_for_event();
                }
            }
        }
    }

    /// Ends the VM (once): its vCPUs leave their guests (the others notice at their next
    /// exit), and one of them zeroes its RAM (`scrub`), after which the stop is reported
    /// ([`Self::report_stop`]). Returns false if it had already stopped.
    pub fn stop(&self, reason: &StopReason) -> bool {
        // SeqCst: paired with the checks of a vCPU about to enter its guest (`Vcpu::run`) and
        // of a reset about to complete (`scrub`).
        if self.stopped.swap(true, Ordering::SeqCst) {
            return false;
        }
        if let Some(uart) = self.devices.lock().device_mut::<VmUart>() {
            uart.flush();
        }
        // Nothing of the guest may outlive it in memory that armhv could hand out again: once
        // no vCPU of it runs (nor a slice of a reset's zeroing), its RAM is zeroed.
        self.leave_guests(None);
        // After the vCPUs (a reset completing meanwhile connects them again).
        super::passthrough::release(self);
        // Another VM's frame in flight to this one, or console input, is delivered under the
        // device lock, and not to a stopped VM: once the lock is free, none is under way.
        drop(self.devices.lock());
        if let Some(owner) = self.scrub.begin_stop(reason.clone()) {
            crate::vmm::sched::start(self, owner);
        }
        true
    }

    /// The stopped VM's RAM is zero: says so, and ends it for the scheduler (the last one
    /// powers the machine off).
    pub(super) fn report_stop(&self, reason: StopReason) {
        log::info!("{}: {} ({}); RAM zeroed", self.name, reason, self.stats);
        // Before the final report compares the heap with its baseline.
        drop(reason);
        crate::vmm::sched::vm_ended();
    }
}
