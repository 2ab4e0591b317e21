//! A virtual machine: its RAM and Stage-2 table, its devices, its vCPUs and its life cycle.

use super::StopReason;
use super::memory::GuestMemory;
use super::stats::VmStats;
use super::uart::VmUart;
use super::vcpu::{Vcpu, VcpuSlot};
use crate::mm::frames::TablePages;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use spin::Mutex;
use stage2::Stage2Table;
use vdev::MmioBus;

pub struct Vm {
    pub id: usize,
    pub name: String,
    pub memory: GuestMemory,
    /// Kept alive for as long as the VM: VTTBR_EL2 points at its root.
    _stage2: Stage2Table<TablePages>,
    pub vttbr: u64,
    /// CNTVOFF_EL2: the VM's virtual counter starts near zero when it boots.
    pub cntvoff: u64,
    pub devices: Mutex<MmioBus>,
    pub vcpus: Vec<VcpuSlot>,
    /// Physical CPU each vCPU runs on.
    pub placement: Vec<usize>,
    pub stats: VmStats,
    stopped: AtomicBool,
}

impl Vm {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: usize,
        name: String,
        memory: GuestMemory,
        stage2: Stage2Table<TablePages>,
        vttbr: u64,
        cntvoff: u64,
        devices: MmioBus,
        vcpus: Vec<Vcpu>,
        placement: Vec<usize>,
    ) -> Self {
        Self {
            id,
            name,
            memory,
            _stage2: stage2,
            vttbr,
            cntvoff,
            devices: Mutex::new(devices),
            vcpus: vcpus.into_iter().map(VcpuSlot::new).collect(),
            placement,
            stats: VmStats::default(),
            stopped: AtomicBool::new(false),
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Ends the VM (once): reports why, with its statistics. Its other vCPUs notice at their
    /// next exit. Returns false if it had already stopped.
    pub fn stop(&self, reason: &StopReason) -> bool {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let Some(uart) = self.devices.lock().device_mut::<VmUart>() {
            uart.flush();
        }
        log::info!("{}: {} ({})", self.name, reason, self.stats);
        crate::arch::aarch64::cpu::send_event();
        true
    }
}
