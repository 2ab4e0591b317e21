//! Turns the boot package into running VMs (`vmm::create`) and hands them to the scheduler. A
//! VM that cannot be built is reported and skipped; the others still start.

use crate::platform::{Platform, Range};
use addr::{Ipa, IpaRange};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use vmm::emulate::passthrough;
use vmm::sched;
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
    // The networks' table gets its room once: building a VM (and failing to) never grows it,
    // so a VM that fails leaves the heap as it found it.
    let mut networks: Vec<&str> = Vec::new();
    for nic in pkg.vms.iter().flat_map(|spec| spec.nics.iter()) {
        if !networks.contains(&nic.network) {
            networks.push(nic.network);
        }
    }
    vmm::emulate::network::reserve(networks.len());
    drop(networks);
    let mut vms = Vec::new();
    for spec in pkg.vms.iter() {
        // A VM's id is its index among the VMs built: a VM that fails gives its id to the next.
        let id = vms.len();
        let before = Usage::now();
        match vmm::create::vm(id, spec, &platform.cpus, ipa_bits, &mut |path| {
            host_device(platform, path)
        }) {
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
            Err(why) => {
                log::error!("{}: not started: {why}", spec.name);
                drop(why);
                released(spec.name, before);
            }
        }
    }
    if vms.is_empty() {
        log::error!("no VM could be started");
    }
    crate::arch::aarch64::cache::flush_guest_tlbs();
    sched::install(vms, platform.cpus.len(), &pkg.scheduler);
    // After the VMs: the uplink joins a network their NICs made. Its interrupt goes to this,
    // the boot CPU.
    if let Some(name) = pkg.uplink {
        let mpidr = crate::arch::aarch64::cpu::mpidr_affinity();
        crate::drivers::uplink::start(platform, name, mpidr);
    }
}

/// No VMs to build: the CPUs still get a scheduler, with nothing to run, and wait.
pub fn run_nothing(platform: &Platform) {
    sched::install(Vec::new(), platform.cpus.len(), &vmconfig::SchedSpec::default());
}

/// Heap bytes and frames in use (only the boot CPU runs while VMs are built).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Usage {
    heap: usize,
    frames: usize,
}

impl Usage {
    fn now() -> Self {
        Self { heap: crate::mm::heap::used_bytes(), frames: vmm::frames::used_frames() }
    }
}

/// Says whether VM `name`, which could not be built, gave back everything it took since
/// `before`: its RAM, tables and device models, and its NICs' network ports.
fn released(name: &str, before: Usage) {
    let now = Usage::now();
    if now == before {
        log::info!("{name}: everything it held is released (heap and frames as before it)");
    } else {
        log::error!(
            "{name}: still holds {:+} bytes of heap and {:+} frames after it failed: a leak in \
             vmm::create, please report it",
            now.heap as i64 - before.heap as i64,
            now.frames as i64 - before.frames as i64
        );
    }
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
        .chain(platform.gic_dist)
        .chain(platform.gic_redist);
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
