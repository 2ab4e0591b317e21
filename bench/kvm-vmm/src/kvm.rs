//! The VMM proper: one KVM VM with RAM, an in-kernel vGICv3, PSCI in the kernel, vCPU threads
//! pinned one per host CPU, and two devices trapped to user space, the PL011 and a virtio-mmio
//! entropy device. And, as process 1, the little init around it.

use std::io::Write;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use kvm_bindings::{
    KVM_ARM_IRQ_TYPE_SHIFT, KVM_ARM_IRQ_TYPE_SPI, KVM_ARM_VCPU_POWER_OFF, KVM_ARM_VCPU_PSCI_0_2,
    KVM_DEV_ARM_VGIC_CTRL_INIT, KVM_DEV_ARM_VGIC_GRP_ADDR, KVM_DEV_ARM_VGIC_GRP_CTRL,
    KVM_DEV_ARM_VGIC_GRP_NR_IRQS, KVM_REG_ARM_CORE, KVM_REG_ARM64, KVM_REG_SIZE_U64,
    KVM_SYSTEM_EVENT_SHUTDOWN, KVM_VGIC_V3_ADDR_TYPE_DIST, KVM_VGIC_V3_ADDR_TYPE_REDIST,
    kvm_create_device, kvm_device_attr, kvm_device_type_KVM_DEV_TYPE_ARM_VGIC_V3,
    kvm_userspace_memory_region, kvm_vcpu_init,
};
use kvm_ioctls::{DeviceFd, Kvm, VcpuExit, VcpuFd, VmFd};
use kvm_vmm::layout::{GIC_NR_IRQS, GICD_BASE, GICR_BASE, RAM_BASE, VIRTIO_SPI, dtb_addr};
use kvm_vmm::virtio::{self, Line};
use kvm_vmm::{Args, fdt, image, pl011};

/// KVM_REG_ARM64_SYSREG: system registers by their encoding.
const REG_SYSREG: u64 = 0x0013 << 16;
/// MPIDR_EL1: op0 3, op1 0, CRn 0, CRm 0, op2 5.
const MPIDR_EL1: u64 = KVM_REG_ARM64 | KVM_REG_SIZE_U64 | REG_SYSREG | (3 << 14) | 5;
/// MPIDR_EL1's affinity fields (Aff3, Aff2..Aff0).
const MPIDR_AFFINITY: u64 = 0xFF_00FF_FFFF;

/// A core register's id: its offset in `struct kvm_regs` in 32-bit words.
const fn core_reg(offset_bytes: u64) -> u64 {
    KVM_REG_ARM64 | KVM_REG_SIZE_U64 | KVM_REG_ARM_CORE as u64 | (offset_bytes / 4)
}
/// `kvm_regs.regs.regs[0]` and `.pc` (after x0..x30 and sp).
const REG_X0: u64 = core_reg(0);
const REG_PC: u64 = core_reg(32 * 8);

type Outcome = Result<(), String>;

/// KVM_IRQ_LINE's number for the entropy device's SPI on the in-kernel GIC.
const VIRTIO_IRQ: u32 = (KVM_ARM_IRQ_TYPE_SPI << KVM_ARM_IRQ_TYPE_SHIFT) | (32 + VIRTIO_SPI);

/// What the vCPU threads share: the devices emulated here, and what they reach.
struct Devices {
    vm: VmFd,
    ram: Ram,
    rng: Mutex<virtio::Rng>,
}

/// Process 1: mounts devtmpfs for /dev/kvm, runs the VMM as a child, powers off.
pub fn init(args: &[String]) -> Result<(), String> {
    // SAFETY: the strings are NUL-terminated literals and the data pointer may be null for
    // devtmpfs; mount(2) only reads them.
    let rc = unsafe {
        libc::mount(
            c"devtmpfs".as_ptr(),
            c"/dev".as_ptr(),
            c"devtmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        // Already mounted (CONFIG_DEVTMPFS_MOUNT with an initramfs does not, but a kernel might).
        if e.raw_os_error() != Some(libc::EBUSY) {
            eprintln!("kvm-vmm: init: mounting devtmpfs on /dev failed: {e}");
        }
    }
    println!("kvm-vmm: init: starting the VMM: {}", args.join(" "));
    let status = std::process::Command::new("/init").args(args).status();
    match status {
        Ok(s) => println!("kvm-vmm: init: VMM {s}"),
        Err(e) => println!("kvm-vmm: init: could not start the VMM: {e}"),
    }
    let _ = std::io::stdout().flush();
    // SAFETY: sync(2) and reboot(2) take no pointers; powering off is what init is for here.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_POWER_OFF);
    }
    Err(format!("reboot(RB_POWER_OFF) failed: {}", std::io::Error::last_os_error()))
}

pub fn vmm(args: Vec<String>) -> Result<(), String> {
    let args = Args::parse(args)?;
    let img = std::fs::read(&args.image).map_err(|e| format!("reading {}: {e}", args.image))?;
    let ram = args.ram_bytes();
    let dtb_at = dtb_addr(ram);
    let load =
        image::placement(&img, dtb_at - RAM_BASE).map_err(|e| format!("{}: {e}", args.image))?;

    let kvm = Kvm::new().map_err(|e| {
        format!(
            "opening /dev/kvm: {e}: KVM did not start (the kernel must be entered at EL2: QEMU \
             -M virt,virtualization=on; see the boot log's \"kvm [1]:\" lines)"
        )
    })?;
    let vm = kvm.create_vm().map_err(|e| format!("KVM_CREATE_VM: {e}"))?;
    let mem = Ram::new(ram)?;
    mem.write(load, &img)?;
    let region = kvm_userspace_memory_region {
        slot: 0,
        flags: 0,
        guest_phys_addr: RAM_BASE,
        memory_size: ram,
        userspace_addr: mem.host as u64,
    };
    // SAFETY: the region is our own anonymous mapping of `ram` bytes, which lives until the
    // process exits (`mem` is never unmapped while the VM runs: the process ends first).
    unsafe { vm.set_user_memory_region(region) }
        .map_err(|e| format!("KVM_SET_USER_MEMORY_REGION: {e}"))?;

    let mut kvi = kvm_vcpu_init::default();
    vm.get_preferred_target(&mut kvi).map_err(|e| format!("KVM_ARM_PREFERRED_TARGET: {e}"))?;
    // No KVM_ARM_VCPU_PMU_V3: a guest PMU's cycle counter stops while the host runs, so
    // vmbench would miss KVM's own path; without one it times with CNTVCT_EL0.
    kvi.features[0] |= 1 << KVM_ARM_VCPU_PSCI_0_2;
    let mut vcpus = Vec::new();
    let mut mpidrs = Vec::new();
    for id in 0..args.vcpus {
        let vcpu =
            vm.create_vcpu(u64::from(id)).map_err(|e| format!("KVM_CREATE_VCPU {id}: {e}"))?;
        let mut init = kvi;
        if id > 0 {
            // Secondaries wait for the guest's PSCI CPU_ON, as on QEMU.
            init.features[0] |= 1 << KVM_ARM_VCPU_POWER_OFF;
        }
        vcpu.vcpu_init(&init).map_err(|e| format!("KVM_ARM_VCPU_INIT {id}: {e}"))?;
        let mut mpidr = [0u8; 8];
        vcpu.get_one_reg(MPIDR_EL1, &mut mpidr)
            .map_err(|e| format!("MPIDR_EL1 of vCPU {id}: {e}"))?;
        mpidrs.push(u64::from_le_bytes(mpidr) & MPIDR_AFFINITY);
        vcpus.push(vcpu);
    }
    // After the vCPUs: KVM sizes the redistributors by the vCPUs that exist at init.
    let _gic = vgic_v3(&vm)?;

    let dtb =
        fdt::build(&fdt::Machine { ram_size: ram, mpidrs: &mpidrs, bootargs: &args.bootargs })
            .map_err(|e| format!("building the device tree: {e}"))?;
    mem.write(dtb_at - RAM_BASE, &dtb)?;
    let boot = &vcpus[0];
    boot.set_one_reg(REG_PC, &(RAM_BASE + load).to_le_bytes())
        .map_err(|e| format!("setting PC: {e}"))?;
    boot.set_one_reg(REG_X0, &dtb_at.to_le_bytes()).map_err(|e| format!("setting x0: {e}"))?;
    eprintln!(
        "kvm-vmm: {} vCPU(s), {} MiB at {RAM_BASE:#x}, image at {:#x}, device tree at \
         {dtb_at:#x}, bootargs \"{}\"",
        args.vcpus,
        args.mem_mib,
        RAM_BASE + load,
        args.bootargs
    );

    let devices = Arc::new(Devices { vm, ram: mem, rng: Mutex::new(virtio::Rng::default()) });
    let (tx, rx) = mpsc::channel::<Outcome>();
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (id, vcpu) in vcpus.into_iter().enumerate() {
        let tx = tx.clone();
        let devices = devices.clone();
        std::thread::Builder::new()
            .name(format!("vcpu{id}"))
            .spawn(move || {
                pin(id % host_cpus);
                let _ = tx.send(run_vcpu(id, vcpu, &devices));
            })
            .map_err(|e| format!("starting vCPU thread {id}: {e}"))?;
    }
    let outcome = rx
        .recv_timeout(Duration::from_secs(args.timeout_secs))
        .map_err(|_| format!("the guest did not power off within {} s", args.timeout_secs))?;
    let _ = std::io::stdout().flush();
    // The other vCPU threads may be asleep in KVM_RUN (powered off by the guest's SYSTEM_OFF):
    // ending the process ends them.
    outcome
}

/// The in-kernel GICv3 at QEMU `virt`'s addresses.
fn vgic_v3(vm: &VmFd) -> Result<DeviceFd, String> {
    let mut dev =
        kvm_create_device { type_: kvm_device_type_KVM_DEV_TYPE_ARM_VGIC_V3, fd: 0, flags: 0 };
    let gic = vm.create_device(&mut dev).map_err(|e| {
        format!("KVM_CREATE_DEVICE (vGICv3): {e}: the host's GIC must be a GICv3 (gic-version=3)")
    })?;
    let set = |group: u32, attr: u32, addr: u64, what: &str| {
        let a = kvm_device_attr { flags: 0, group, attr: u64::from(attr), addr };
        gic.set_device_attr(&a).map_err(|e| format!("vGICv3 {what}: {e}"))
    };
    let (dist, redist, nr_irqs) = (GICD_BASE, GICR_BASE, GIC_NR_IRQS);
    // The attributes' values are read by the kernel from these addresses during the calls.
    set(
        KVM_DEV_ARM_VGIC_GRP_ADDR,
        KVM_VGIC_V3_ADDR_TYPE_DIST,
        &dist as *const u64 as u64,
        "distributor",
    )?;
    set(
        KVM_DEV_ARM_VGIC_GRP_ADDR,
        KVM_VGIC_V3_ADDR_TYPE_REDIST,
        &redist as *const u64 as u64,
        "redistributors",
    )?;
    set(KVM_DEV_ARM_VGIC_GRP_NR_IRQS, 0, &nr_irqs as *const u32 as u64, "interrupts")?;
    set(KVM_DEV_ARM_VGIC_GRP_CTRL, KVM_DEV_ARM_VGIC_CTRL_INIT, 0, "init")?;
    Ok(gic)
}

/// Pins the calling thread to host CPU `cpu`, so that each vCPU has a CPU of its own (the
/// study pinned its vCPUs too); a failure only costs determinism, so it is reported, not fatal.
fn pin(cpu: usize) {
    // SAFETY: `set` is a local cpu_set_t that CPU_ZERO/CPU_SET write in bounds (cpu < the
    // host's CPUs, far below CPU_SETSIZE), and sched_setaffinity only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        eprintln!("kvm-vmm: pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
    }
}

fn run_vcpu(id: usize, mut vcpu: VcpuFd, dev: &Devices) -> Outcome {
    loop {
        match vcpu.run() {
            Ok(VcpuExit::MmioWrite(addr, data)) => {
                if let Some(offset) = virtio::offset(addr) {
                    let value = le_u32(data);
                    let mut rng = dev.rng.lock().map_err(|_| "a vCPU thread panicked")?;
                    let line = rng.write(offset, value, &dev.ram, &mut entropy);
                    // Raised before the vCPU re-enters the guest: the interrupt is pending
                    // when the notifying store completes, as with a device model in the kernel.
                    set_line(dev, line).map_err(|e| format!("vCPU {id}: {e}"))?;
                    continue;
                }
                let a = pl011::decode(addr, data.len())
                    .map_err(|e| format!("vCPU {id}: write: {e}: no device there"))?;
                if let Some(byte) = pl011::write(a, data) {
                    // Line-buffered: vmbench's lines reach the console whole.
                    let _ = std::io::stdout().lock().write_all(&[byte]);
                }
            }
            Ok(VcpuExit::MmioRead(addr, data)) => {
                if let Some(offset) = virtio::offset(addr) {
                    let value = dev.rng.lock().map_err(|_| "a vCPU thread panicked")?.read(offset);
                    pl011::fill(value, data);
                    continue;
                }
                let a = pl011::decode(addr, data.len())
                    .map_err(|e| format!("vCPU {id}: read: {e}: no device there"))?;
                pl011::fill(pl011::read(a), data);
            }
            Ok(VcpuExit::SystemEvent(kind, _)) if kind == KVM_SYSTEM_EVENT_SHUTDOWN => {
                return Ok(());
            }
            Ok(VcpuExit::SystemEvent(kind, data)) => {
                return Err(format!(
                    "vCPU {id}: the guest asked for system event {kind} ({data:?}), not a power-off"
                ));
            }
            Ok(VcpuExit::Intr) => {}
            Err(e) if e.errno() == libc::EINTR => {}
            Ok(other) => return Err(format!("vCPU {id}: unexpected exit {other:?}")),
            Err(e) => return Err(format!("vCPU {id}: KVM_RUN: {e}")),
        }
    }
}

/// A little-endian register value from an MMIO write of up to 4 bytes.
fn le_u32(data: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    let n = data.len().min(4);
    w[..n].copy_from_slice(&data[..n]);
    u32::from_le_bytes(w)
}

fn set_line(dev: &Devices, line: Line) -> Result<(), String> {
    let level = match line {
        Line::Unchanged => return Ok(()),
        Line::Raise => true,
        Line::Lower => false,
    };
    dev.vm.set_irq_line(VIRTIO_IRQ, level).map_err(|e| format!("KVM_IRQ_LINE {VIRTIO_IRQ:#x}: {e}"))
}

/// The entropy device's source: the host kernel's, as QEMU's default backend uses.
fn entropy(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled rest of `buf`, which getrandom
        // writes at most that many bytes into.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n <= 0 {
            // Interrupted, or no entropy: nothing a benchmark's bytes depend on; leave zeros.
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        filled += n as usize;
    }
}

impl virtio::Memory for Ram {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), String> {
        let src = self.host(gpa, buf.len())?;
        // SAFETY: `host` checked the range; the guest may write it concurrently, which the
        // virtio protocol orders (the driver publishes before it notifies).
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn write(&self, gpa: u64, buf: &[u8]) -> Result<(), String> {
        let dst = self.host(gpa, buf.len())?;
        // SAFETY: `host` checked the range; the device writes only buffers the driver gave it
        // and the used ring, which the driver reads only after the index that publishes them.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, buf.len()) };
        Ok(())
    }
}

/// The guest's RAM: an anonymous private mapping, never unmapped (the process ends first).
struct Ram {
    host: *mut u8,
    size: u64,
}

// SAFETY: the mapping is valid for the process's life; the threads reach it only through
// `write` (before any vCPU runs) and the bounds-checked copies of `Memory`, whose concurrent
// accesses with the guest are the virtio protocol's (the device reads what the driver
// published, and publishes what it wrote after writing it).
unsafe impl Send for Ram {}
// SAFETY: as for Send: no method hands out a reference into the mapping.
unsafe impl Sync for Ram {}

impl Ram {
    /// The host address of `len` bytes at guest-physical `gpa`, checked to lie in RAM.
    fn host(&self, gpa: u64, len: usize) -> Result<*mut u8, String> {
        let off = gpa
            .checked_sub(RAM_BASE)
            .filter(|o| o.checked_add(len as u64).is_some_and(|end| end <= self.size));
        match off {
            // SAFETY: the offset was checked to lie in the mapping.
            Some(o) => Ok(unsafe { self.host.add(o as usize) }),
            None => Err(format!("{len} bytes at {gpa:#x} are outside the guest's RAM")),
        }
    }

    fn new(size: u64) -> Result<Self, String> {
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choice; nothing else
        // is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "mapping {} MiB of guest RAM: {}",
                size >> 20,
                std::io::Error::last_os_error()
            ));
        }
        Ok(Self { host: p.cast(), size })
    }

    /// Copies `bytes` to `offset` from the start of RAM, before any vCPU runs.
    fn write(&self, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let end = offset.checked_add(bytes.len() as u64).filter(|e| *e <= self.size);
        if end.is_none() {
            return Err(format!(
                "{} bytes at RAM offset {offset:#x} do not fit in RAM",
                bytes.len()
            ));
        }
        // SAFETY: the range was checked to lie inside the mapping, and no vCPU runs yet, so
        // nothing else accesses it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.host.add(offset as usize),
                bytes.len(),
            )
        };
        Ok(())
    }
}
