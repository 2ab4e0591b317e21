//! armhv: a bare-metal hypervisor for ARMv8-A, running entirely at EL2.
//!
//! Boot order (the boot CPU): read the machine from the device tree, start the console, build
//! and enable the EL2 page tables, set up the heap and the frame pool, create the VMs described
//! in the boot package, start the other CPUs, then every CPU runs its vCPUs.
#![no_std]
#![no_main]

extern crate alloc;

mod arch;
mod console;
mod console_mux;
mod drivers;
mod loader;
mod mm;
mod monitor;
mod package;
mod platform;
mod reports;
mod time;

use arch::aarch64::{cache, cpu, el2_regs, exception, firmware, fpsimd, mmu, speculation};
use core::sync::atomic::{AtomicUsize, Ordering};
use platform::{Platform, Range};

/// The heap: VM and device bookkeeping, device trees being built. Guest RAM is not on it.
const HEAP_SIZE: u64 = 16 << 20;

unsafe extern "C" {
    static __hyp_start: u8;
    static __text_end: u8;
    static __rodata_end: u8;
    static __hyp_end: u8;
    fn secondary_entry();
}

static ONLINE_CPUS: AtomicUsize = AtomicUsize::new(0);
static VTCR: spin::Once<u64> = spin::Once::new();

#[unsafe(no_mangle)]
extern "C" fn primary_main(dtb: usize, load_offset: u64) -> ! {
    // SAFETY: x0 from the loader; the blob's range is reserved below and never reused.
    let platform = match unsafe { Platform::from_device_tree(dtb) } {
        Ok(p) => p,
        Err(_) => cpu::park(), // no console to say why
    };
    // SAFETY: the device tree names this PL011 as the console; armhv is its only driver.
    unsafe { console::init(platform.uart.start as usize) };
    console::init_logger();
    log::info!(
        "armhv {} starting on the CPU of MPIDR {:#x} (MIDR {:#x}, PARange {}, VHE {})",
        env!("CARGO_PKG_VERSION"),
        cpu::mpidr_affinity(),
        cpu::midr(),
        cpu::pa_range(),
        if cpu::has_vhe() { "available, not needed: armhv runs wholly at EL2" } else { "absent" }
    );

    // Linker-script symbols: only their addresses are taken, no reference to what lies there
    // (after `__hyp_end`, the package or free RAM).
    let (hyp_start, text_end, rodata_end, hyp_end) = (
        (&raw const __hyp_start).addr() as u64,
        (&raw const __text_end).addr() as u64,
        (&raw const __rodata_end).addr() as u64,
        (&raw const __hyp_end).addr() as u64,
    );
    let package = package::locate(hyp_end);
    let image_end = hyp_end + package.map_or(0, |p| p.len() as u64);
    // Where the loader put armhv (boot.S relocated it there): QEMU's -kernel at the link
    // address, a board's U-Boot anywhere 2 MiB-aligned (docs/boards.md).
    log::info!(
        "armhv at {hyp_start:#x} (linked at {:#x}), image and boot package up to {image_end:#x}",
        hyp_start.wrapping_sub(load_offset)
    );

    if platform.reserved_beyond > 0 {
        fatal_args(format_args!(
            "the device tree has {} firmware reservations (/memreserve/ entries and /reserved-memory \
             regions); armhv honours at most {}, and would hand out the rest as free memory: merge \
             adjacent reservations, or raise platform::MAX_RESERVED",
            platform::MAX_RESERVED + platform.reserved_beyond,
            platform::MAX_RESERVED
        ));
    }
    let reserved = reserved_ranges(&platform, hyp_start, image_end);
    log::info!(
        "firmware reservations: {} range(s), never used for the heap or guest memory:{}",
        platform.reserved.len(),
        Ranges(&platform.reserved)
    );
    let heap = match carve(&platform, &reserved, HEAP_SIZE) {
        Some(h) => h,
        None => {
            fatal("not enough free RAM for the 16 MiB hypervisor heap: give QEMU more memory (-m)")
        }
    };

    // The heap (first the page tables) and the device tree (its NOPs removed) are written with
    // the MMU, and so the data cache, off: drop any line the firmware left over them, which
    // would hide those writes once the caches are on (boot.S does the same for the image).
    cache::clean_invalidate_to_poc(heap.start, heap.size);
    cache::clean_invalidate_to_poc(platform.dtb.start, platform.dtb.size);
    // The page-table builder allocates from the heap, so the heap comes first (MMU still off).
    // SAFETY: `heap` is free RAM, outside every reserved range; it is mapped read-write below.
    unsafe { mm::heap::init(heap.start as usize, heap.size as usize) };

    let mut map = mmu::Builder::new();
    let mut ok = true;
    for r in &platform.ram {
        ok &= map_ram_around_image(&mut map, r, hyp_start, text_end, rodata_end).is_ok();
    }
    ok &= map.map(platform.uart.start, platform.uart.end(), mmu::Region::Device).is_ok();
    for gic in platform.gic.iter().flat_map(|g| g.frames()) {
        ok &= map.map(gic.start, gic.end(), mmu::Region::Device).is_ok();
    }
    // The virtio-mmio transports (the machine disk), as one span: they share pages.
    let virtio = &platform.virtio_mmio;
    if let (Some(first), Some(last)) =
        (virtio.iter().map(|w| w.reg.start).min(), virtio.iter().map(|w| w.reg.end()).max())
    {
        ok &= map.map(first, last, mmu::Region::Device).is_ok();
    }
    if !ok {
        fatal("could not build the EL2 page tables for the memory map in the device tree");
    }
    map.activate();

    let mut free = alloc::vec::Vec::new();
    let mut excluded = reserved.clone();
    let _ = excluded.push(heap);
    for r in &platform.ram {
        subtract(*r, &excluded, &mut free);
    }
    for r in &free {
        vmm::frames::add_range(r.start, r.end());
    }
    log::info!("frame pool:{}", Ranges(&free));
    vmm::frames::prime();
    let free_bytes: u64 = free.iter().map(|r| r.size).sum();
    log::info!(
        "{} MiB RAM, {} CPUs, console at {:#x}; {} MiB free for guests",
        platform.ram_bytes() >> 20,
        platform.cpus.len(),
        platform.uart.start,
        free_bytes >> 20
    );
    log::info!(
        "CPUs by MPIDR, in the device tree's order (their logical numbers):{}",
        Mpidrs(&platform.cpus)
    );
    if platform.cpus_ignored > 0 {
        log::warn!(
            "{} CPUs beyond the first {} are not used",
            platform.cpus_ignored,
            cpu::MAX_CPUS
        );
    }
    if let Err(why) = firmware::init(platform.psci_method) {
        log::warn!("{why}; running on the boot CPU only");
    }

    match platform.gic {
        Some(frames) => {
            let boot = boot_index(&platform);
            // SAFETY: the GIC's frames from the device tree, mapped as device memory above.
            if let Err(why) = unsafe { drivers::gic::init(frames, &platform.cpus, boot) } {
                fatal_args(format_args!("{why}"));
            }
            match platform.gic_maintenance {
                Some(intid) if intid != drivers::gic::PPI_MAINTENANCE => fatal_args(format_args!(
                    "the device tree gives the GIC's maintenance interrupt as INTID {intid}; \
                     armhv takes it at INTID {} (PPI {}), as the Server Base System \
                     Architecture and QEMU place it",
                    drivers::gic::PPI_MAINTENANCE,
                    drivers::gic::PPI_MAINTENANCE - 16
                )),
                Some(_) => {}
                None => log::warn!(
                    "the device tree names no maintenance interrupt for the GIC: assuming \
                     INTID {}",
                    drivers::gic::PPI_MAINTENANCE
                ),
            }
        }
        None => fatal(
            "the device tree has no interrupt controller armhv drives (arm,gic-v3, or a GICv2: \
             arm,gic-400 / arm,cortex-a15-gic): on QEMU use -M virt,gic-version=3 or 2",
        ),
    }

    let ipa_bits = ::stage2::ipa_bits_from_parange(cpu::pa_range());
    if cache::decide_fwb() {
        log::info!("stage-2: FWB on");
    } else {
        log::info!("stage-2: no FWB, cache maintenance for guests with caches off");
    }
    let vtcr = *VTCR.call_once(|| vmm::create::vtcr(ipa_bits, cpu::pa_range()));
    el2_regs::configure_cpu(vtcr);
    vmm::bench::init_cpu();
    vmm::bench::calibrate();

    let boot_mpidr = cpu::mpidr_affinity();
    let boot_index = boot_index(&platform);
    cpu::set_current(boot_index);
    speculation::init_cpu(boot_index);
    fpsimd::init_cpu(boot_index);
    drivers::gic::init_cpu(boot_index);
    if let Some(frames) = &platform.gic {
        vmm::emulate::vgic::init(drivers::gic::host(frames));
        let name = match drivers::gic::version() {
            guest_abi::map::GicVersion::V2 => "GICv2",
            guest_abi::map::GicVersion::V3 => "GICv3",
        };
        log::info!("interrupt controller: {name}; the VMs get a virtual {name}");
    }
    console_mux::init(platform.uart_intid, boot_mpidr);
    drivers::machine_disk::init(&platform, boot_mpidr);
    vmm::manage::when_all_stopped(reports::power_off);
    vmm::manage::set_sinks(vmm::manage::Sinks {
        reply: console_mux::reply,
        event: console_mux::event,
    });

    match package {
        Some(p) => loader::create_vms(p, &platform, ipa_bits),
        None => {
            log::error!(
                "no boot package after the hypervisor image: boot the image that `make run` \
                 (cargo xtask build) produces, which carries the VMs; nothing to run"
            );
            loader::run_nothing(&platform);
        }
    }

    ONLINE_CPUS.store(1, Ordering::Release);
    let mut started = 1;
    for (index, &mpidr) in platform.cpus.iter().enumerate() {
        if index == boot_index {
            continue;
        }
        match firmware::cpu_on(mpidr, secondary_entry as *const () as u64, index as u64) {
            Ok(()) => started += 1,
            Err(e) => log::warn!("CPU {index} (MPIDR {mpidr:#x}) did not start: {e}"),
        }
    }
    log::info!("{started} of {} CPUs started", platform.cpus.len());
    reports::cpus_started(started);
    log::info!("CPU {boot_index} (the boot CPU) entering the scheduler");
    reports::cpu_ready(); // the baseline is taken once every CPU is ready
    fpsimd::report();
    vmm::cpu_loop::run_cpu(boot_index)
}

#[unsafe(no_mangle)]
extern "C" fn secondary_main(index: usize) -> ! {
    mmu::enable_secondary();
    if let Err(why) = cache::check_fwb() {
        fatal_args(format_args!("CPU {index}: {why}"));
    }
    el2_regs::configure_cpu(*VTCR.get().unwrap_or(&0));
    vmm::bench::init_cpu();
    speculation::init_cpu(index);
    fpsimd::init_cpu(index);
    drivers::gic::init_cpu(index);
    ONLINE_CPUS.fetch_add(1, Ordering::AcqRel);
    log::debug!("CPU {index} online");
    reports::cpu_ready();
    vmm::cpu_loop::run_cpu(index)
}

/// MPIDRs as the boot log shows them: ` 0:0x0 1:0x1 ...`.
struct Mpidrs<'a>(&'a [u64]);

impl core::fmt::Display for Mpidrs<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.iter().enumerate().try_for_each(|(i, m)| write!(f, " {i}:{m:#x}"))
    }
}

/// Ranges as the boot log shows them: ` start..end` each, or ` none`.
struct Ranges<'a>(&'a [Range]);

impl core::fmt::Display for Ranges<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0.is_empty() {
            return f.write_str(" none");
        }
        for r in self.0 {
            write!(f, " {:#x}..{:#x}", r.start, r.end())?;
        }
        Ok(())
    }
}

/// The hypervisor image from its 2 MiB-aligned base (the arm64 Image's: with QEMU's `-kernel`
/// the RAM base, where QEMU's boot stub lives; wherever a boot loader such as U-Boot put it
/// otherwise, the RAM below being free), the device tree and the firmware's reservations
/// (every one: the vector has room for all of them).
fn reserved_ranges(
    p: &Platform,
    hyp_start: u64,
    image_end: u64,
) -> heapless::Vec<Range, { platform::MAX_RESERVED + 2 }> {
    const IMAGE_BASE_ALIGN: u64 = 2 << 20;
    let mut v = heapless::Vec::new();
    let ram_base =
        p.ram.iter().map(|r| r.start).filter(|&s| s <= hyp_start).max().unwrap_or(hyp_start);
    let base = ram_base.max(hyp_start & !(IMAGE_BASE_ALIGN - 1));
    let _ = v.push(Range { start: base, size: image_end - base });
    let _ = v.push(p.dtb);
    for r in &p.reserved {
        let _ = v.push(*r);
    }
    v
}

/// Removes the `excluded` ranges from `r`, appending the pieces left to `out`.
fn subtract(r: Range, excluded: &[Range], out: &mut alloc::vec::Vec<Range>) {
    let mut pieces = alloc::vec![r];
    for x in excluded {
        let mut next = alloc::vec::Vec::new();
        for p in pieces {
            if x.end() <= p.start || x.start >= p.end() {
                next.push(p);
                continue;
            }
            if x.start > p.start {
                next.push(Range { start: p.start, size: x.start - p.start });
            }
            if x.end() < p.end() {
                next.push(Range { start: x.end(), size: p.end() - x.end() });
            }
        }
        pieces = next;
    }
    out.extend(pieces.into_iter().filter(|p| p.size > 0));
}

/// Finds `size` bytes (2 MiB aligned) of RAM outside the reserved ranges, before the heap exists.
fn carve(p: &Platform, reserved: &[Range], size: u64) -> Option<Range> {
    for r in &p.ram {
        let mut start = r.start.next_multiple_of(addr::BLOCK_2M);
        while start + size <= r.end() {
            let cand = Range { start, size };
            match reserved.iter().find(|x| x.start < cand.end() && cand.start < x.end()) {
                None => return Some(cand),
                Some(x) => start = x.end().next_multiple_of(addr::BLOCK_2M),
            }
        }
    }
    None
}

fn map_ram_around_image(
    map: &mut mmu::Builder,
    r: &Range,
    hyp_start: u64,
    text_end: u64,
    rodata_end: u64,
) -> Result<(), aarch64_paging::MapError> {
    if hyp_start < r.start || rodata_end > r.end() {
        return map.map(r.start, r.end(), mmu::Region::ReadWrite);
    }
    if r.start < hyp_start {
        map.map(r.start, hyp_start, mmu::Region::ReadWrite)?;
    }
    map.map(hyp_start, text_end, mmu::Region::Text)?;
    map.map(text_end, rodata_end, mmu::Region::ReadOnly)?;
    map.map(rodata_end, r.end(), mmu::Region::ReadWrite)
}

/// The boot CPU's logical index: its place among the device tree's CPUs, which
/// `Platform::parse` keeps it in.
fn boot_index(platform: &Platform) -> usize {
    let mpidr = cpu::mpidr_affinity();
    match platform.cpus.iter().position(|&m| m == mpidr) {
        Some(index) => index,
        None => fatal_args(format_args!(
            "the boot CPU (MPIDR {mpidr:#x}) is not among the device tree's enabled CPUs"
        )),
    }
}

fn fatal(msg: &str) -> ! {
    fatal_args(format_args!("{msg}"))
}

fn fatal_args(msg: core::fmt::Arguments) -> ! {
    let mut out = console::fatal_output();
    out.line(format_args!("FATAL: {msg}"));
    exception::stop_this_cpu(out)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    // Not `log`: a panic inside the console's critical section holds its lock for good.
    let mut out = console::fatal_output();
    out.line(format_args!("PANIC on CPU {}: {}", cpu::current(), info));
    exception::stop_this_cpu(out)
}
