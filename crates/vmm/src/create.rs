//! A VM from its spec: RAM, Stage-2 map, devices, device tree, images, vCPUs. The EL2
//! binary's loader creates every VM of the boot package this way, and the host tests theirs.

use crate::arch::{PmuMode, cache, el2_regs, timer};
use crate::bench::IoStamps;
use crate::emulate::uart::VmUart;
use crate::emulate::vgic::GicWindow;
use crate::emulate::{self, fpsimd, network, passthrough, virtio};
use crate::frames::TablePages;
use crate::memory::GuestMemory;
use crate::scrub::Scrub;
use crate::stats::VmStats;
use crate::sync::{Class, Lock, TicketLock};
use crate::vcpu::{Vcpu, VcpuSlot};
use crate::vm::{AssignedDevice, Backlog, ConsoleInput, Vm};
use addr::{BLOCK_2M, IpaRange, PhysAddr};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, AtomicUsize};
use guest_abi::map::{
    self, GICD_BASE, GICD_SIZE, GICR_BASE, GicVersion, UART_BASE, UART_SIZE, UART_SPI, VIRTIO_BASE,
    VIRTIO_SLOTS, VIRTIO_WINDOW_SIZE,
};
use stage2::{Fwb, MemAttr, S2Perms, Stage2Table};
use vdev::MmioBus;
use vmconfig::{DeviceKind, VirtioDevice, VmSpec};

/// Finds a host device to assign by its device-tree path: its register window, interrupts and
/// names, or why it cannot be assigned.
pub type HostDevice<'a> = dyn FnMut(&str) -> Result<AssignedDevice, String> + 'a;

/// VTCR_EL2 for the IPA size every VM uses.
pub fn vtcr(ipa_bits: u8, pa_range: u8) -> u64 {
    // VTCR_EL2 does not depend on how the leaves encode memory types.
    match Stage2Table::new(ipa_bits, Fwb::Off, TablePages) {
        Ok(t) => t.vtcr(pa_range),
        Err(e) => panic!("cannot build a Stage-2 table for {ipa_bits}-bit IPAs: {e}"),
    }
}

/// Builds VM `id` from `spec`: RAM (zeroed), its Stage-2 map, the vGIC, the UART and virtio
/// devices, the devices assigned to it (each found by `host_device` from its path), its device
/// tree, images and vCPUs (vCPU 0 at the entry point), for a machine whose CPUs have the
/// MPIDRs `cpu_mpidrs` and whose VMs use `ipa_bits`-bit IPAs.
///
/// A VM that cannot be built holds nothing afterwards: what it allocated is dropped, and its
/// NICs leave the networks they joined. Its id is then the next VM's (ids are the registry's
/// indexes), so a port left behind would lead that VM's NIC at the same slot onto this VM's
/// network (issue 16, item 3).
pub fn vm(
    id: usize,
    spec: &VmSpec<'static>,
    cpu_mpidrs: &[u64],
    ipa_bits: u8,
    host_device: &mut HostDevice,
) -> Result<Vm, String> {
    let mut joined = Vec::new();
    let built = build(id, spec, cpu_mpidrs, ipa_bits, host_device, &mut joined);
    if built.is_err() {
        for (network, port) in joined {
            network::leave(network, port);
        }
    }
    built
}

/// [`vm`], recording in `joined` each (network, port) its NICs took, for [`vm`] to give back if
/// a later step fails.
fn build(
    id: usize,
    spec: &VmSpec<'static>,
    cpu_mpidrs: &[u64],
    ipa_bits: u8,
    host_device: &mut HostDevice,
    joined: &mut Vec<(usize, usize)>,
) -> Result<Vm, String> {
    let cpus = cpu_mpidrs.len();
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

    // One answer for the Stage-2 encoding of RAM and for armhv's accesses to it.
    let fwb = cache::stage2_fwb();
    let memory = GuestMemory::allocate(spec.memory, fwb).map_err(|_| {
        format!(
            "not enough free RAM for its {} MiB (give QEMU more with -m)",
            spec.memory.size >> 20
        )
    })?;
    let encoding = if fwb { Fwb::On } else { Fwb::Off };
    let mut s2 = Stage2Table::new(ipa_bits, encoding, TablePages).map_err(|e| e.to_string())?;
    for (ipa, pa) in memory.chunks() {
        s2.map(ipa, pa, BLOCK_2M, S2Perms::RWX, MemAttr::Normal)
            .map_err(|e| format!("Stage-2 map of {ipa:?}: {e}"))?;
    }

    let mut bus = MmioBus::new();
    let gic_version = emulate::vgic::version_for(spec.gic)?;
    let vgic_clean = Arc::new(vgic::CleanFlags::new());
    let vgic_config =
        vgic::VgicConfig { vcpus: spec.vcpus as usize, version: gic_version, ..Default::default() };
    let vgic = vgic::Vgic::with_clean_flags(vgic_config, vgic_clean.clone())
        .map_err(|e| format!("virtual GIC: {e:?}"))?;
    let spi_limit = 32 + vgic.spis();
    let vgic = Lock::new(Class::Vgic, vgic);
    bus.insert(IpaRange::new(GICD_BASE, GICD_SIZE), Box::new(GicWindow(vgic::Frame::Dist)))
        .map_err(|e| format!("gicd: {e:?}"))?;
    // The second GIC window: a GICv3's redistributors (trapped, emulated), or a GICv2's CPU
    // interface (the hardware's virtual one, mapped: the guest's acknowledge and EOI never
    // trap).
    let (gic_window, dt_gic) = match gic_version {
        GicVersion::V3 => {
            let window = IpaRange::new(GICR_BASE, map::gicr_size(spec.vcpus as usize));
            bus.insert(window, Box::new(GicWindow(vgic::Frame::Redist)))
                .map_err(|e| format!("gicr: {e:?}"))?;
            (window, vmfdt::Gic::V3 { dist: GICD_BASE, redist: GICR_BASE })
        }
        GicVersion::V2 => {
            let gicv = emulate::vgic::host()
                .virtual_cpu_interface
                .ok_or("the host's GICv2 has no virtual CPU interface")?;
            let window = IpaRange::new(map::GICC_BASE, map::GICC_SIZE);
            s2.map(window.start, PhysAddr(gicv), window.size, S2Perms::RW, MemAttr::Device)
                .map_err(|e| format!("Stage-2 map of the GICv2 CPU interface: {e}"))?;
            (window, vmfdt::Gic::V2 { dist: GICD_BASE, cpu: map::GICC_BASE })
        }
    };
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
    let cntvoff = timer::now();
    let io_stamps = Arc::new(IoStamps::new(spec.pmu == PmuMode::Raw, cntvoff));
    let mut join_network = |name: &str, slot, mac| {
        let port = network::join(name, id, slot, mac)?;
        joined.push(port);
        Ok(port)
    };
    let device_backlog = Arc::new(Backlog::default());
    let virtio = virtio::build(id, spec, &memory, &io_stamps, &device_backlog, &mut join_network)?;
    let console_input = spec.input_console().map(|kind| match kind {
        DeviceKind::VirtioConsole => {
            let n = spec.virtio_devices().position(|d| d == VirtioDevice::Console).unwrap_or(0);
            ConsoleInput::Virtio(map::virtio_slot(n))
        }
        _ => ConsoleInput::Uart,
    });
    let mut dt_virtio = Vec::new();
    let mut empty_from = VIRTIO_BASE;
    let control_slot = virtio.control.as_ref().map(|port| port.slot);
    for (range, spi, slot) in virtio.slots {
        empty_from = empty_from.max(addr::Ipa(range.start.0 + range.size));
        bus.insert(range, Box::new(slot)).map_err(|e| format!("virtio slot: {e:?}"))?;
        let control = control_slot == Some(range.start);
        dt_virtio.push(vmfdt::VirtioSlot { base: range.start, spi, control });
    }
    let empty = IpaRange::new(empty_from, VIRTIO_BASE.0 + VIRTIO_WINDOW_SIZE - empty_from.0);
    bus.insert(empty, Box::new(::virtio::EmptyTransports))
        .map_err(|e| format!("empty virtio slots: {e:?}"))?;

    let virtio_intids: Vec<u32> = core::iter::once(32 + UART_SPI)
        .chain((0..VIRTIO_SLOTS).map(|n| map::spi_intid(map::virtio_spi(n))))
        .collect();
    let occupied = passthrough::Occupied {
        regions: &[
            spec.memory,
            IpaRange::new(GICD_BASE, GICD_SIZE),
            gic_window,
            IpaRange::new(UART_BASE, UART_SIZE),
            IpaRange::new(VIRTIO_BASE, VIRTIO_WINDOW_SIZE),
        ],
        intids: &virtio_intids,
        spi_limit,
    };
    let mut assigned = Vec::new();
    for pt in &spec.passthrough {
        let path = pt.path;
        let dev = host_device(path).map_err(|e| format!("passthrough {path}: {e}"))?;
        assigned.push(passthrough::assign(id, pt, dev, &occupied, &mut s2)?);
    }
    let dt_irqs: Vec<Vec<(u32, u32)>> = assigned.iter().map(|d| d.dt_interrupts()).collect();
    let dt_assigned: Vec<vmfdt::AssignedDevice> = assigned
        .iter()
        .zip(&dt_irqs)
        .map(|(d, irqs)| vmfdt::AssignedDevice {
            node_name: d.node_name,
            compatible: d.compatible,
            reg: d.reg,
            interrupts: irqs,
        })
        .collect();

    let device_tree = vmfdt::build(&vmfdt::GuestDt {
        vm_name: spec.name,
        vcpus: spec.vcpus as u32,
        ram: spec.memory,
        uart,
        gic: Some(dt_gic),
        timer: true,
        pmu: spec.pmu == PmuMode::Virtual && has_pmu(),
        virtio: &dt_virtio,
        assigned: &dt_assigned,
        bootargs: spec.cmdline,
        initrd: spec.initrd.as_ref().map(|i| i.data_range()),
        psci_method: "hvc",
    })
    .map_err(|e| format!("device tree: {e}"))?;
    let vcpus: Vec<Vcpu> =
        (0..spec.vcpus as usize).map(|i| Vcpu::new(i, fpsimd::new_sve_state())).collect();
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
        mdcr: el2_regs::mdcr(spec.pmu),
        io_stamps,
        device_backlog,
        devices: TicketLock::new(Class::Devices, bus),
        vgic,
        vgic_clean,
        gicr_size: if gic_version == GicVersion::V3 { gic_window.size } else { 0 },
        vcpus: vcpus.into_iter().map(VcpuSlot::new).collect(),
        // An unpinned vCPU 0 may run anywhere: its physical interrupts go to CPU 0.
        assigned_route: cpu_mpidrs[affinity[0].unwrap_or(0)],
        affinity,
        sched: spec.sched,
        assigned,
        nics: virtio.nics,
        control: virtio.control,
        console_input,
        stats: VmStats::default(),
        scrub: Scrub::new(),
        flags: AtomicU8::new(0),
        generation: AtomicUsize::new(crate::vm::first_generation()),
    };
    crate::vm::vm_created();
    vm.load_guest()?;
    passthrough::connect(&vm);
    vm.boot_vcpu0(&mut vm.vcpus[0].state.lock());
    Ok(vm)
}

/// The CPUs have an architected PMU to give the guests (ID_AA64DFR0_EL1.PMUVer neither 0, none,
/// nor 0xf, an IMPLEMENTATION DEFINED one): else the device tree describes none.
fn has_pmu() -> bool {
    let version = (crate::arch::id_regs::read(crate::arch::IdReg::IdAa64Dfr0) >> 8) & 0xf;
    (1..0xf).contains(&version)
}
