//! Turns the boot package into running VMs: RAM, Stage-2 map, images, devices, device tree,
//! vCPUs. A VM that cannot be built is reported and skipped; the others still start.

use crate::mm::frames::TablePages;
use crate::platform::Platform;
use crate::sync::{Class, Lock, TicketLock};
use crate::vmm::bench::IoStamps;
use crate::vmm::emulate::uart::VmUart;
use crate::vmm::emulate::vgic::GicWindow;
use crate::vmm::emulate::{network, passthrough, virtio};
use crate::vmm::memory::GuestMemory;
use crate::vmm::sched;
use crate::vmm::scrub::Scrub;
use crate::vmm::stats::VmStats;
use crate::vmm::vcpu::{Vcpu, VcpuSlot};
use crate::vmm::vm::{ConsoleInput, Vm};
use addr::{BLOCK_2M, Ipa, IpaRange};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize};
use guest_abi::map::{
    self, GICD_BASE, GICD_SIZE, GICR_BASE, UART_BASE, UART_SIZE, UART_SPI, VIRTIO_BASE,
    VIRTIO_SLOT_SIZE, VIRTIO_SLOTS,
};
use stage2::{MemAttr, S2Perms, Stage2Table};
use vdev::MmioBus;
use vmconfig::{DeviceKind, VirtioDevice, VmSpec};

/// The virtio-mmio window (QEMU virt's), kept free of assigned devices.
const VIRTIO_WINDOW: u64 = VIRTIO_SLOTS as u64 * VIRTIO_SLOT_SIZE;

/// VTCR_EL2 for the IPA size every VM uses.
pub fn vtcr(ipa_bits: u8, pa_range: u8) -> u64 {
    match Stage2Table::new(ipa_bits, TablePages) {
        Ok(t) => t.vtcr(pa_range),
        Err(e) => panic!("cannot build a Stage-2 table for {ipa_bits}-bit IPAs: {e}"),
    }
}

pub fn create_vms(package: &'static [u8], platform: &Platform, ipa_bits: u8) {
    let machine =
        vmconfig::Machine { ram_bytes: platform.ram_bytes(), cpus: platform.cpus.len() as u32 };
    let pkg = match vmconfig::decode_package(package, &machine) {
        Ok(p) => p,
        Err(e) => {
            log::error!("the boot package is invalid ({e}): rebuild it with `cargo xtask build`");
            return;
        }
    };
    let mut vms = Vec::new();
    for spec in pkg.vms.iter() {
        let id = vms.len();
        match build_vm(id, spec, platform, ipa_bits) {
            Ok(vm) => {
                log::info!(
                    "{}: {} vCPU(s) on CPU(s) {}, {} MiB RAM at {}, entry {}",
                    vm.name,
                    vm.vcpus.len(),
                    Affinity(&vm.affinity),
                    spec.memory.size >> 20,
                    spec.memory.start,
                    spec.entry
                );
                vms.push(Arc::new(vm));
            }
            Err(why) => log::error!("{}: not started: {why}", spec.name),
        }
    }
    if vms.is_empty() {
        log::error!("no VM could be started");
    }
    crate::arch::aarch64::cache::flush_guest_tlbs();
    sched::install(vms, platform.cpus.len(), &pkg.scheduler);
}

/// vCPU placement as the boot log shows it: `[0, 1]`, `any` for a vCPU the scheduler places.
struct Affinity<'a>(&'a [Option<usize>]);

impl core::fmt::Display for Affinity<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("[")?;
        for (i, a) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            match a {
                Some(c) => write!(f, "{sep}{c}")?,
                None => write!(f, "{sep}any")?,
            }
        }
        f.write_str("]")
    }
}

fn build_vm(
    id: usize,
    spec: &VmSpec<'static>,
    platform: &Platform,
    ipa_bits: u8,
) -> Result<Vm, String> {
    let cpus = platform.cpus.len();
    let mut affinity = Vec::new();
    for aff in spec.affinity() {
        match aff {
            Some(c) if (*c as usize) < cpus => affinity.push(Some(*c as usize)),
            Some(c) => {
                return Err(format!("cpu_affinity names CPU {c}, but the machine has {cpus}"));
            }
            None => affinity.push(None),
        }
    }

    let memory = GuestMemory::allocate(spec.memory).map_err(|_| {
        format!(
            "not enough free RAM for its {} MiB (give QEMU more with -m)",
            spec.memory.size >> 20
        )
    })?;
    let mut s2 = Stage2Table::new(ipa_bits, TablePages).map_err(|e| e.to_string())?;
    for (ipa, pa) in memory.chunks() {
        s2.map(ipa, pa, BLOCK_2M, S2Perms::RWX, MemAttr::Normal)
            .map_err(|e| format!("Stage-2 map of {ipa:?}: {e}"))?;
    }

    let mut bus = MmioBus::new();
    let vgic_clean = Arc::new(vgic::CleanFlags::new());
    let vgic_config = vgic::VgicConfig { vcpus: spec.vcpus as usize, ..Default::default() };
    let vgic = vgic::Vgic::with_clean_flags(vgic_config, vgic_clean.clone())
        .map_err(|e| format!("virtual GIC: {e:?}"))?;
    let redist_size = vgic.redist_region_size();
    let spi_limit = 32 + vgic.spis();
    let vgic = Lock::new(Class::Vgic, vgic);
    bus.insert(IpaRange::new(GICD_BASE, GICD_SIZE), Box::new(GicWindow(vgic::Frame::Dist)))
        .map_err(|e| format!("gicd: {e:?}"))?;
    bus.insert(IpaRange::new(GICR_BASE, redist_size), Box::new(GicWindow(vgic::Frame::Redist)))
        .map_err(|e| format!("gicr: {e:?}"))?;
    let mut uart = None;
    for dev in &spec.devices {
        match dev {
            DeviceKind::Pl011 => {
                bus.insert(
                    IpaRange::new(UART_BASE, UART_SIZE),
                    Box::new(VmUart::new(id, spec.name, 32 + UART_SPI)),
                )
                .map_err(|e| format!("pl011: {e:?}"))?;
                uart = Some(vmfdt::Uart { base: UART_BASE, spi: UART_SPI });
            }
            // Built below with the other virtio devices, in slot order.
            DeviceKind::VirtioConsole | DeviceKind::VirtioRng => {}
        }
    }
    let cntvoff = crate::arch::aarch64::timer::now();
    let io_stamps = Arc::new(IoStamps::new(spec.pmu, cntvoff));
    let mut join_network = |name: &str, slot| network::join(name, id, slot);
    let virtio = virtio::build(id, spec, &memory, &io_stamps, &mut join_network)?;
    let console_input = spec.input_console().map(|kind| match kind {
        DeviceKind::VirtioConsole => {
            let n = spec.virtio_devices().position(|d| d == VirtioDevice::Console).unwrap_or(0);
            ConsoleInput::Virtio(map::virtio_slot(n))
        }
        _ => ConsoleInput::Uart,
    });
    let mut dt_virtio = Vec::new();
    for (range, spi, slot) in virtio.slots {
        bus.insert(range, Box::new(slot)).map_err(|e| format!("virtio slot: {e:?}"))?;
        dt_virtio.push(vmfdt::VirtioSlot { base: range.start, spi });
    }

    let virtio_intids: Vec<u32> = core::iter::once(32 + UART_SPI)
        .chain((0..VIRTIO_SLOTS).map(|n| map::spi_intid(map::virtio_spi(n))))
        .collect();
    let occupied = passthrough::Occupied {
        regions: &[
            spec.memory,
            IpaRange::new(GICD_BASE, GICD_SIZE),
            IpaRange::new(GICR_BASE, redist_size),
            IpaRange::new(UART_BASE, UART_SIZE),
            IpaRange::new(VIRTIO_BASE, VIRTIO_WINDOW),
        ],
        intids: &virtio_intids,
        spi_limit,
    };
    let mut assigned = Vec::new();
    for path in &spec.passthrough {
        assigned.push(passthrough::assign(id, path, platform, &occupied, &mut s2)?);
    }
    let dt_irqs: Vec<Vec<(u32, u32)>> = assigned.iter().map(|d| d.dt_interrupts()).collect();
    let dt_assigned: Vec<vmfdt::AssignedDevice> = assigned
        .iter()
        .zip(&dt_irqs)
        .map(|(d, irqs)| vmfdt::AssignedDevice {
            node_name: d.node_name,
            compatible: d.compatible,
            reg: IpaRange::new(Ipa(d.reg.start), d.reg.size),
            interrupts: irqs,
        })
        .collect();

    let device_tree = vmfdt::build(&vmfdt::GuestDt {
        vm_name: spec.name,
        vcpus: spec.vcpus as u32,
        ram: spec.memory,
        uart,
        gic: Some(vmfdt::Gic { dist: GICD_BASE, redist: GICR_BASE }),
        timer: true,
        virtio: &dt_virtio,
        assigned: &dt_assigned,
        bootargs: spec.cmdline,
        initrd: spec.initrd.as_ref().map(|i| i.data_range()),
        psci_method: "hvc",
    })
    .map_err(|e| format!("device tree: {e}"))?;
    let vcpus: Vec<Vcpu> = (0..spec.vcpus as usize).map(Vcpu::new).collect();
    let vmid = (id + 1) as u16;
    let vttbr = s2.vttbr(vmid);
    let vm = Vm {
        id,
        name: spec.name.into(),
        spec: spec.clone(),
        device_tree,
        memory,
        _stage2: s2,
        vttbr,
        cntvoff,
        mdcr: crate::arch::aarch64::el2_regs::mdcr(spec.pmu),
        io_stamps,
        devices: TicketLock::new(Class::Devices, bus),
        vgic,
        vgic_clean,
        vcpus: vcpus.into_iter().map(VcpuSlot::new).collect(),
        // An unpinned vCPU 0 may run anywhere: its physical interrupts go to CPU 0.
        assigned_route: platform.cpus[affinity[0].unwrap_or(0)],
        affinity,
        sched: spec.sched,
        assigned,
        nics: virtio.nics,
        console_input,
        stats: VmStats::default(),
        scrub: Scrub::new(),
        stopped: AtomicBool::new(false),
        resetting: AtomicBool::new(false),
        generation: AtomicUsize::new(0),
    };
    vm.load_guest()?;
    passthrough::connect(&vm);
    vm.boot_vcpu0(&mut vm.vcpus[0].state.lock());
    Ok(vm)
}
