//! A machine for the monitor's host tests: VMs built from a config as the EL2 binary builds
//! them, installed in the scheduler, on the fake hardware (`vmm::arch::fake`), whose guests are
//! scripts of traps. Each test file is its own process with one machine (the monitor's
//! registry is installed once), driven by one `#[test]` function, CPU by CPU, step by step.
#![allow(dead_code)] // each test file uses its own part

use std::alloc::{Layout, alloc_zeroed};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use vmm::arch::fake::{self, Trap};
use vmm::cpu_loop::{Cpu, Step};
use vmm::emulate::vgic::HostGic;
use vmm::vm::Vm;

/// Host memory handed to the frame pool: guest RAM, Stage-2 tables and disks come from it.
const POOL: usize = 512 << 20;
/// The fake machine's CPUs' MPIDRs.
pub const MPIDRS: [u64; 4] = [0, 1, 2, 3];

/// Two single-vCPU VMs, `a` and `b`, sharing [`SHARED_CPU`]: where lazily switched state
/// (FP/SIMD, SVE, keys, the PMU) must move between VMs on one CPU.
pub const TWO_VMS_SHARING_A_CPU: &str = r#"
[[vm]]
name = "a"
vcpus = 1
cpu_affinity = [3]
memory_size = "16M"
kernel = "@testguest"

[[vm]]
name = "b"
vcpus = 1
cpu_affinity = [3]
memory_size = "16M"
kernel = "@testguest"
"#;
/// The CPU [`TWO_VMS_SHARING_A_CPU`]'s VMs share.
pub const SHARED_CPU: usize = 3;

static ALL_STOPPED: AtomicBool = AtomicBool::new(false);

/// The defined VMs' names (by id) and one loop per physical CPU.
pub struct Machine {
    pub names: Vec<&'static str>,
    cpus: Vec<Cpu>,
}

/// Builds the VMs of `config` (TOML, as in `configs/`; every kernel is a small blob: the
/// guests are the tests' scripts) and installs them on a fake machine of 4 CPUs.
pub fn install(config: &str) -> Machine {
    install_with(config, &mut |path: &str| Err(format!("no host device {path} in tests")))
}

/// As [`install`], with `host_device` finding the devices the config assigns (`passthrough`).
pub fn install_with(config: &str, host_device: &mut vmm::create::HostDevice) -> Machine {
    install_on(config, host_device, HOST_GICV3)
}

/// A GICv3 host, as QEMU's `virt` with `gic-version=3`.
pub const HOST_GICV3: HostGic =
    HostGic { version: guest_abi::map::GicVersion::V3, virtual_cpu_interface: None };

/// As [`install_with`], on a host with the GIC `host`. (Once per test process: a process's
/// VMs share one host.)
pub fn install_on(
    config: &str,
    host_device: &mut vmm::create::HostDevice,
    host: HostGic,
) -> Machine {
    let _ = log::set_logger(&StderrLog).map(|()| log::set_max_level(log::LevelFilter::Info));
    // SAFETY: a valid, non-zero layout; the memory is leaked to the frame pool for good.
    let pool = unsafe { alloc_zeroed(Layout::from_size_align(POOL, 2 << 20).unwrap()) } as u64;
    assert_ne!(pool, 0, "no host memory for the frame pool");
    vmm::frames::add_range(pool, pool + POOL as u64);

    let machine = vmconfig::Machine { ram_bytes: 4 << 30, cpus: MPIDRS.len() as u32 };
    let cfg = vmconfig::parse(config, Path::new("host-test.toml"), &machine)
        .unwrap_or_else(|e| panic!("the test's config: {e}"));
    let kernel: &'static [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
    let mut specs = Vec::new();
    for (i, vm) in cfg.vms.iter().enumerate() {
        let disks: Vec<Option<&[u8]>> = vm.disks.iter().map(|_| None).collect();
        specs.push(cfg.spec(i, kernel, None, &disks).expect("the test's VM spec"));
    }
    let package = vmconfig::encode_package(&specs, &cfg.scheduler, cfg.uplink(), &cfg.machine)
        .unwrap_or_else(|v| panic!("{}: {}", v.path(), v.message));
    let package: &'static [u8] = Box::leak(package.into_boxed_slice());
    let pkg = vmconfig::decode_package(package, &machine).expect("the test's package");

    vmm::emulate::vgic::init(host);
    vmm::manage::when_all_stopped(|| ALL_STOPPED.store(true, Ordering::SeqCst));
    vmm::emulate::network::define(pkg.vms.iter().flat_map(|s| s.nics.iter().map(|n| n.network)));
    let machine = vmm::manage::Machine { cpu_mpidrs: MPIDRS.to_vec(), ipa_bits: 40, usage: None };
    vmm::manage::define(&pkg.vms, machine, host_device, &pkg.scheduler);
    on_cpu(0, vmm::manage::autostart);
    let names = pkg.vms.iter().map(|s| s.name).collect();
    let cpus = (0..MPIDRS.len()).map(|c| on_cpu(c, || Cpu::new(c))).collect();
    Machine { names, cpus }
}

/// Whether every VM has stopped (what the EL2 binary powers off on).
pub fn all_stopped() -> bool {
    ALL_STOPPED.load(Ordering::SeqCst)
}

/// Runs `f` as physical CPU `cpu`.
pub fn on_cpu<R>(cpu: usize, f: impl FnOnce() -> R) -> R {
    fake::with(|m| m.cpu = cpu);
    f()
}

impl Machine {
    /// VM `name`'s current life.
    pub fn vm(&self, name: &str) -> Arc<Vm> {
        let id =
            self.names.iter().position(|n| *n == name).unwrap_or_else(|| panic!("no VM {name}"));
        vmm::registry::get(id).unwrap_or_else(|| panic!("VM {name} is stopped"))
    }

    /// VM `id`'s current life.
    pub fn vm_by_id(&self, id: usize) -> Arc<Vm> {
        vmm::registry::get(id).unwrap_or_else(|| panic!("VM {id} is stopped"))
    }

    /// One step of CPU `cpu`: with `traps` queued for the guest it enters, which must all be
    /// taken (the last one ending the run: a block, a yield, a stop).
    pub fn step(&mut self, cpu: usize, traps: Vec<Trap>) -> Step {
        fake::with(|m| {
            assert!(m.script.is_empty(), "a previous script was not used up");
            m.script.extend(traps);
        });
        let cpus = &mut self.cpus;
        let step = on_cpu(cpu, || cpus[cpu].step());
        let left = fake::with(|m| std::mem::take(&mut m.script).len());
        assert_eq!(left, 0, "CPU {cpu} took {step:?} before the guest's last {left} traps");
        step
    }

    /// Steps CPU `cpu` with no script: it must have nothing to run.
    pub fn idle(&mut self, cpu: usize) {
        assert_eq!(self.step(cpu, vec![]), Step::Idled, "CPU {cpu} ran a vCPU");
    }

    /// vCPU `index` of `vm`: its registers, saved or as the last exit left them.
    pub fn regs(&self, vm: &str, index: usize) -> vmm::arch::GuestRegs {
        self.vm(vm).vcpus[index].state.lock().regs.clone()
    }
}

/// A syndrome of exception class `ec` for a 32-bit instruction.
pub fn esr(ec: u8, iss: u32) -> u64 {
    (u64::from(ec) << 26) | (1 << 25) | u64::from(iss)
}

/// `hvc #0` with SMCCC function `fid` and arguments in x1...
pub fn hvc(fid: u32, args: &[u64]) -> Trap {
    let args = args.to_vec();
    Trap::sync(esr(0x16, 0), 0, 0).after(move |regs, _| {
        regs.x[0] = u64::from(fid);
        for (i, a) in args.iter().enumerate() {
            regs.x[1 + i] = *a;
        }
        regs.elr += 4; // the trap's ELR_EL2 points past an HVC
    })
}

/// WFI (`wfe`: WFE).
pub fn wfx(wfe: bool) -> Trap {
    Trap::sync(esr(0x01, u32::from(wfe)), 0, 0)
}

/// A load of `bytes` (1, 2, 4 or 8) from `ipa` into x`reg`, trapped as a Stage-2 abort.
pub fn load(ipa: u64, bytes: u32, reg: u32) -> Trap {
    Trap::sync(esr(0x24, data_abort_iss(bytes, reg, false)), ipa, ipa >> 8)
}

/// A store of `value` in x`reg`, `bytes` wide, to `ipa`.
pub fn store(ipa: u64, bytes: u32, reg: u32, value: u64) -> Trap {
    Trap::sync(esr(0x24, data_abort_iss(bytes, reg, true)), ipa, ipa >> 8)
        .after(move |regs, _| regs.x[reg as usize] = value)
}

/// The ISS of a data abort with a valid syndrome: ISV, SAS, SRT, SF for doublewords, WnR, and a
/// level-3 translation fault.
fn data_abort_iss(bytes: u32, reg: u32, write: bool) -> u32 {
    let sas = bytes.trailing_zeros();
    (1 << 24)
        | (sas << 22)
        | (reg << 16)
        | (u32::from(bytes == 8) << 15)
        | (u32::from(write) << 6)
        | 0b00_0111
}

/// The EL1 physical timer's registers (op0, op1, CRn, CRm, op2), which armhv emulates.
pub const CNTP_CTL_EL0: (u32, u32, u32, u32, u32) = (3, 3, 14, 2, 1);
pub const CNTP_CVAL_EL0: (u32, u32, u32, u32, u32) = (3, 3, 14, 2, 2);

/// `msr`/`mrs` of system register (op0, op1, CRn, CRm, op2) with x`rt`.
pub fn sysreg(enc: (u32, u32, u32, u32, u32), rt: u32, read: bool, value: u64) -> Trap {
    let (op0, op1, crn, crm, op2) = enc;
    let iss = (op0 << 20) | (op2 << 17) | (op1 << 14) | (crn << 10) | (rt << 5) | (crm << 1);
    Trap::sync(esr(0x18, iss | u32::from(read)), 0, 0).after(move |regs, _| {
        if !read {
            regs.x[rt as usize] = value
        }
    })
}

struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }

    fn log(&self, record: &log::Record) {
        eprintln!("[{}] {}", record.level(), record.args());
    }

    fn flush(&self) {}
}

/// What the guest saw in x0..x3 after each call of a script made by [`calls`].
pub type Results = std::rc::Rc<std::cell::RefCell<Vec<[u64; 4]>>>;

/// A script making each SMCCC call of `calls` in turn, then a WFE (the run yields); the
/// results, x0..x3 after each call, are recorded as the guest sees them.
pub fn calls(calls: &[(u32, &[u64])]) -> (Vec<Trap>, Results) {
    let results = Results::default();
    let mut traps = Vec::new();
    for (i, &(fid, args)) in calls.iter().enumerate() {
        let args = args.to_vec();
        let seen = results.clone();
        traps.push(Trap::sync(esr(0x16, 0), 0, 0).after(move |regs, _| {
            if i > 0 {
                seen.borrow_mut().push([regs.x[0], regs.x[1], regs.x[2], regs.x[3]]);
            }
            regs.x[0] = u64::from(fid);
            for (n, a) in args.iter().enumerate() {
                regs.x[1 + n] = *a;
            }
            regs.elr += 4;
        }));
    }
    let seen = results.clone();
    traps.push(wfx(true).after(move |regs, _| {
        seen.borrow_mut().push([regs.x[0], regs.x[1], regs.x[2], regs.x[3]]);
    }));
    (traps, results)
}

/// `len` bytes of `vm`'s RAM at `ipa`.
pub fn read_ram(vm: &Vm, ipa: u64, len: usize) -> Vec<u8> {
    use virtio::GuestRam;
    let mut buf = vec![0xa5; len];
    vm.memory.view().read(addr::Ipa(ipa), &mut buf).expect("an address in the VM's RAM");
    buf
}

/// The guest's stores that bring up the virtio-mmio device at `slot` as a driver does
/// (VERSION_1 only) with queue 0 of 8 entries at these ring addresses, ending in DRIVER_OK.
pub fn virtio_queue0_setup(slot: u64, desc: u64, avail: u64, used: u64) -> Vec<Trap> {
    use virtio::mmio::regs as vio;
    let regs = [
        (vio::STATUS, 1),
        (vio::STATUS, 3),
        (vio::DRIVER_FEATURES_SEL, 1),
        (vio::DRIVER_FEATURES, 1), // VIRTIO_F_VERSION_1
        (vio::STATUS, 11),
        (vio::QUEUE_SEL, 0),
        (vio::QUEUE_NUM, 8),
        (vio::QUEUE_DESC_LOW, desc & 0xffff_ffff),
        (vio::QUEUE_DESC_HIGH, desc >> 32),
        (vio::QUEUE_DRIVER_LOW, avail & 0xffff_ffff),
        (vio::QUEUE_DRIVER_HIGH, avail >> 32),
        (vio::QUEUE_DEVICE_LOW, used & 0xffff_ffff),
        (vio::QUEUE_DEVICE_HIGH, used >> 32),
        (vio::QUEUE_READY, 1),
        (vio::STATUS, 15),
    ];
    regs.iter().map(|&(r, v)| store(slot + r, 4, 4, v)).collect()
}
