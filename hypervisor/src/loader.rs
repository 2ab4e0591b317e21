//! Turns the boot package into defined VMs (`vmm::manage`): their networks, scheduler entries
//! and assigned host devices. Those marked to start at boot start once every CPU is ready
//! (`reports::cpu_ready`); a VM that cannot be built is reported and the others still start.

use crate::platform::{Platform, Range};
use addr::{Ipa, IpaRange};
use alloc::string::String;
use vmm::emulate::{network, passthrough};
use vmm::manage;
use vmm::vm::AssignedDevice;

pub fn create_vms(package: &'static [u8], platform: &Platform, ipa_bits: u8) {
    let machine =
        vmconfig::Machine { ram_bytes: platform.ram_bytes(), cpus: platform.cpus.len() as u32 };
    let pkg = match vmconfig::decode_package(package, &machine) {
        Ok(p) => p,
        Err(e) => {
            log::error!("the boot package is invalid ({e}): rebuild it with `cargo xtask build`");
            return run_nothing(platform);
        }
    };
    network::define(pkg.vms.iter().flat_map(|spec| spec.nics.iter().map(|nic| nic.network)));
    let machine = manage::Machine {
        cpu_mpidrs: platform.cpus.to_vec(),
        ipa_bits,
        usage: Some(|| (crate::mm::heap::used_bytes(), vmm::frames::used_frames())),
    };
    manage::define(&pkg.vms, machine, &mut |path| host_device(platform, path), &pkg.scheduler);
    // The uplink joins its network now, whether or not a VM on it starts at boot. Its
    // interrupt goes to this, the boot CPU.
    if let Some(name) = pkg.uplink {
        let mpidr = crate::arch::aarch64::cpu::mpidr_affinity();
        crate::drivers::uplink::start(platform, name, mpidr);
    }
}

/// No VMs to build: the CPUs still get a scheduler, with nothing to run, and wait.
pub fn run_nothing(platform: &Platform) {
    let machine = manage::Machine { cpu_mpidrs: platform.cpus.to_vec(), ipa_bits: 40, usage: None };
    manage::define(&[], machine, &mut |_| Err(String::new()), &vmconfig::SchedSpec::default());
}

/// The host device at `path`, to assign to a VM: refused if it overlaps RAM or a device armhv
/// itself uses (the monitor checks it against the VM's own map).
fn host_device(platform: &Platform, path: &str) -> Result<AssignedDevice, String> {
    let dev = platform.host_device(path)?;
    let reg = dev.reg;
    let overlaps = |a: &Range| reg.start < a.end() && a.start < reg.end();
    let hypervisor_owned = platform
        .ram
        .iter()
        .copied()
        .chain([platform.uart, platform.dtb])
        .chain(platform.gic.iter().flat_map(|g| g.frames()));
    if hypervisor_owned.into_iter().any(|r| overlaps(&r)) {
        return Err("it overlaps RAM or a device armhv itself uses".into());
    }
    if platform.virtio_mmio.iter().any(|w| overlaps(&w.reg)) {
        return Err("it is one of the machine's virtio-mmio transports: their devices reach any \
                    memory by DMA, and one may be armhv's machine disk"
            .into());
    }
    // A kind armhv knows how to quiesce: its registers are mapped at EL2 for that (the first
    // window, whole pages, as the VM's Stage-2 maps it).
    if passthrough::dma_free_kind(dev.compatible).is_some() {
        let end = reg.end().next_multiple_of(addr::PAGE_SIZE);
        crate::arch::aarch64::device::map(reg.start, end)?;
    }
    Ok(AssignedDevice {
        node_name: dev.node_name,
        compatible: dev.compatible,
        reg: IpaRange::new(Ipa(reg.start), reg.size),
        interrupts: dev.interrupts,
        properties: dev.properties,
        // Decided by `passthrough::assign`, which every assigned device goes through.
        dma: vmm::vm::DmaVerdict::Free,
    })
}
