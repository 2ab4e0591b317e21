//! `mmio`: the VM's own emulated devices (GIC distributor and redistributors,
//! or a GICv2's distributor and CPU interface, PL011, virtio-mmio slots)
//! hammered with accesses a driver would never make:
//! wrong widths, load/store pairs, writeback addressing, exclusives, atomics,
//! SIMD loads, offsets in holes and at the end of each window, registers that
//! name vCPUs, interrupts and LPI tables that do not exist; then, with the MMU
//! on and everything mapped Normal, unaligned accesses and accesses that
//! straddle the end of a window (into the next device, or into nothing).
//!
//! Lines: `hostile: mmio-<kind> <device>+<offset> -> <outcome>`. Confined:
//! anything but a hang or a value from outside the VM's windows; whether a
//! device answers or aborts is its model's business, armhv must only stay up.

use core::arch::asm;

use baremetal::console::Global;
use baremetal::gic::{self, Version, v2};
use guest_abi::map;

use crate::Vm;
use crate::report::{self, Outcome};
use crate::trap::{self, Width};

const GICD: u64 = map::GICD_BASE.0;
const GICR: u64 = map::GICR_BASE.0;
const UART: u64 = map::UART_BASE.0;

fn o_load(r: Result<u64, trap::Fault>) -> Outcome {
    match r {
        Ok(v) => Outcome::Value(v),
        Err(f) => Outcome::from_esr(f.esr),
    }
}

fn o_done(r: Result<(), trap::Fault>) -> Outcome {
    match r {
        Ok(()) => Outcome::Ok,
        Err(f) => Outcome::from_esr(f.esr),
    }
}

/// Reports an access at `addr` (named `dev`+offset): confined if it was
/// refused, or if the whole access stayed inside the VM's own windows.
fn report_at(vm: &Vm, kind: &str, dev: &str, base: u64, addr: u64, len: u64, o: Outcome) {
    let confined = o.refused() || vm.in_own_device(addr, len) || vm.in_own_device(addr, 1);
    if !confined && matches!(o, Outcome::Value(_)) {
        report::leaked(len);
    }
    report::attempt(kind, format_args!("{dev}+{:#x}", addr - base), o, confined);
}

/// One instruction of a kind that yields no (or a partial) syndrome.
fn odd_access(addr: u64, kind: &str) -> Result<(), trap::Fault> {
    trap::probe(|| {
        // SAFETY: one access to an emulated device register (or one that
        // faults); the handler skips it. Outputs are discarded.
        unsafe {
            match kind {
                "ldp" => {
                    asm!("ldp {a:w}, {b:w}, [{x}]", x = in(reg) addr, a = out(reg) _, b = out(reg) _, options(nostack))
                }
                "stp" => asm!("stp wzr, wzr, [{x}]", x = in(reg) addr, options(nostack)),
                "ldnp" => {
                    asm!("ldnp {a:w}, {b:w}, [{x}]", x = in(reg) addr, a = out(reg) _, b = out(reg) _, options(nostack))
                }
                "ldr-post" => {
                    asm!("ldr {a:w}, [{x}], #4", x = inout(reg) addr => _, a = out(reg) _, options(nostack))
                }
                "str-pre" => {
                    asm!("str wzr, [{x}, #0]!", x = inout(reg) addr => _, options(nostack))
                }
                "ldxr" => {
                    asm!("ldxr {a:w}, [{x}]", x = in(reg) addr, a = out(reg) _, options(nostack))
                }
                "stxr" => {
                    asm!("stxr {s:w}, wzr, [{x}]", x = in(reg) addr, s = out(reg) _, options(nostack))
                }
                "ldar" => {
                    asm!("ldar {a:w}, [{x}]", x = in(reg) addr, a = out(reg) _, options(nostack))
                }
                "stlr" => asm!("stlr wzr, [{x}]", x = in(reg) addr, options(nostack)),
                "ldtr" => {
                    asm!("ldtr {a:w}, [{x}]", x = in(reg) addr, a = out(reg) _, options(nostack))
                }
                "ldr-q" => asm!("ldr q16, [{x}]", x = in(reg) addr, out("v16") _, options(nostack)),
                "str-q" => {
                    asm!("movi v16.16b, #0", "str q16, [{x}]", x = in(reg) addr, out("v16") _, options(nostack))
                }
                "ldadd" => {
                    asm!(".arch_extension lse", "ldadd wzr, {a:w}, [{x}]", x = in(reg) addr, a = out(reg) _, options(nostack))
                }
                "swp" => {
                    asm!(".arch_extension lse", "swp wzr, {a:w}, [{x}]", x = in(reg) addr, a = out(reg) _, options(nostack))
                }
                "dc-zva" => asm!("dc zva, {x}", x = in(reg) addr, options(nostack)),
                "dc-civac" => asm!("dc civac, {x}", x = in(reg) addr, options(nostack)),
                "prfm" => asm!("prfm pldl1keep, [{x}]", x = in(reg) addr, options(nostack)),
                _ => {}
            }
        }
    })
}

fn has_lse() -> bool {
    let isar0: u64;
    // SAFETY: reading an ID register has no side effects.
    unsafe { asm!("mrs {v}, id_aa64isar0_el1", v = out(reg) isar0, options(nomem, nostack)) };
    (isar0 >> 20) & 0xf >= 2
}

/// A GICv2's CPU interface: (base, size) of its window in the device tree
/// (8 KiB, the architected size, if `own` could not hold it). None on a
/// GICv3, whose redistributors are attacked in its stead.
fn gicc(vm: &Vm) -> Option<(u64, u64)> {
    if gic::version() != Some(Version::V2) {
        return None;
    }
    let base = gic::cpu_interface();
    let size = vm.own[..vm.nown].iter().find(|&&(b, _)| b == base).map_or(0x2000, |&(_, s)| s);
    Some((base, size))
}

pub fn step(vm: &Vm) {
    let mut windows: [(&str, u64, u64); 12] = [("", 0, 0); 12];
    let mut n = 0;
    windows[n] = ("gicd", GICD, map::GICD_SIZE);
    n += 1;
    windows[n] = match gicc(vm) {
        Some((base, size)) => ("gicc", base, size),
        None => ("gicr", GICR, map::gicr_size(vm.ncpus)),
    };
    n += 1;
    windows[n] = ("uart", UART, map::UART_SIZE);
    n += 1;
    for &(base, size) in &vm.own[..vm.nown] {
        if (0x0A00_0000..0x0A00_4000).contains(&base) && n < windows.len() {
            windows[n] = ("virtio", base, size);
            n += 1;
        }
    }
    let windows = &windows[..n];

    widths(vm, windows);
    odd_kinds(vm, windows);
    holes(vm, windows);
    gic_semantics(vm);
    unaligned(vm, windows);
}

/// Every width at a register that exists, reads and (for read-only ones) writes.
fn widths(vm: &Vm, windows: &[(&str, u64, u64)]) {
    for &(dev, base, _) in windows {
        // A read-only identification register of each.
        let reg = match dev {
            "gicd" => base + 0x8,   // GICD_IIDR
            "gicr" => base + 0x8,   // GICR_TYPER
            "gicc" => base + 0xfc,  // GICC_IIDR
            "uart" => base + 0xfe0, // UARTPeriphID0
            _ => base + 0x8,        // virtio DeviceID
        };
        for w in [Width::B, Width::H, Width::W, Width::X] {
            let o = o_load(trap::load(reg, w));
            report_at(vm, &width_name("mmio-read", w), dev, base, reg, w.bytes(), o);
            let o = o_done(trap::store(reg, w, 0));
            report_at(vm, &width_name("mmio-write", w), dev, base, reg, w.bytes(), o);
        }
    }
}

fn width_name(kind: &str, w: Width) -> crate::Line {
    use core::fmt::Write;
    let mut l = crate::Line::new();
    let s = match w {
        Width::B => "8",
        Width::H => "16",
        Width::W => "32",
        Width::X => "64",
    };
    let _ = write!(l, "{kind}{s}");
    l
}

fn odd_kinds(vm: &Vm, windows: &[(&str, u64, u64)]) {
    let mut kinds: [&str; 17] = [
        "ldp", "stp", "ldnp", "ldr-post", "str-pre", "ldxr", "stxr", "ldar", "stlr", "ldtr",
        "ldr-q", "str-q", "dc-zva", "dc-civac", "prfm", "ldadd", "swp",
    ];
    let count = if has_lse() { kinds.len() } else { kinds.len() - 2 };
    for &(dev, base, _) in windows {
        // A register where a stray write does no harm: read-only or ignored
        // (and, for the GICC, not GICC_IAR, which a read would acknowledge).
        let reg = match dev {
            "uart" => base + 0xfe0,
            "gicc" => base + 0xfc,
            _ => base + 0x8,
        };
        for kind in &mut kinds[..count] {
            let o = o_done(odd_access(reg, kind));
            let mut name = crate::Line::new();
            use core::fmt::Write;
            let _ = write!(name, "mmio-{kind}");
            report_at(vm, &name, dev, base, reg, 8, o);
        }
    }
}

/// Offsets in holes and at the very end of each window, and in the
/// windows of vCPUs and slots that do not exist.
fn holes(vm: &Vm, windows: &[(&str, u64, u64)]) {
    for &(dev, base, size) in windows {
        let offsets: [u64; 5] = match dev {
            "gicd" => [0xc000, 0xfffc, 0x8000, 0x0f00, 0x0040],
            "gicr" => [0xfffc, 0x1_fffc, 0x1_0f00, 0x0070, 0x0040],
            "gicc" => [0x1ffc, 0x1004, 0x0f00, 0x00f0, 0x0040],
            "uart" => [0x100, 0xffc, 0xf00, 0x90, 0x4c],
            _ => [0x0fc, 0x1fc, 0x0b0, 0x0c0, 0x1f8],
        };
        for off in offsets {
            let addr = base + off;
            if off >= size {
                continue;
            }
            let o = o_load(trap::load(addr, Width::W));
            report_at(vm, "mmio-read", dev, base, addr, 4, o);
            let o = o_done(trap::store(addr, Width::W, 0xffff_ffff));
            report_at(vm, "mmio-write", dev, base, addr, 4, o);
        }
    }
}

/// A write `gic_semantics` tries: (window, its base, address, width, value).
type Write = (&'static str, u64, u64, Width, u64);

/// Distributor and redistributor (GICv2: CPU interface) writes that name what
/// does not exist.
fn gic_semantics(vm: &Vm) {
    let common: [Write; 9] = [
        // SPIs routed to affinities no vCPU has (GICv2: reserved offsets).
        ("gicd", GICD, GICD + 0x6000 + 8 * 33, Width::X, 0xff_00ff_ffff),
        ("gicd", GICD, GICD + 0x6000 + 8 * 48, Width::X, u64::MAX),
        ("gicd", GICD, GICD + 0x6000 + 8 * 1019, Width::X, 7),
        // Set/clear SPI by number, out of range (GICv2: reserved offsets).
        ("gicd", GICD, GICD + 0x40, Width::W, 0xffff_ffff),
        ("gicd", GICD, GICD + 0x40, Width::W, 1019),
        ("gicd", GICD, GICD + 0x48, Width::W, 0x8000_0000),
        // Every SPI pending and active at once (its own, but all of them).
        ("gicd", GICD, GICD + 0x204, Width::W, 0xffff_ffff),
        ("gicd", GICD, GICD + 0x304, Width::W, 0xffff_ffff),
        // Legacy GICD_SGIR with affinity routing on (GICv2: SGI 15 to all
        // eight CPU interfaces, those of no vCPU included).
        ("gicd", GICD, GICD + 0xf00, Width::W, 0x00ff_000f),
    ];
    match gicc(vm) {
        Some((gicc, _)) => {
            for (dev, base, addr, w, v) in common.into_iter().chain(v2_writes(vm, gicc)) {
                let o = o_done(trap::store(addr, w, v));
                report_at(vm, &width_name("mmio-write", w), dev, base, addr, w.bytes(), o);
            }
            // Put things back where the next steps would notice: clear pending
            // and active SPIs, and the SGIs pending here from any CPU.
            let _ = trap::store(GICD + 0x284, Width::W, 0xffff_ffff);
            let _ = trap::store(GICD + 0x384, Width::W, 0xffff_ffff);
            for i in 0..4 {
                let _ = trap::store(GICD + v2::GICD_CPENDSGIR + 4 * i, Width::W, 0xffff_ffff);
            }
        }
        None => {
            let gicr_last = GICR + (vm.ncpus as u64 - 1) * map::GICR_STRIDE;
            for (dev, base, addr, w, v) in common.into_iter().chain(v3_writes(gicr_last)) {
                let o = o_done(trap::store(addr, w, v));
                report_at(vm, &width_name("mmio-write", w), dev, base, addr, w.bytes(), o);
            }
            // What the LPI registers read back: nothing was taken.
            for off in [0x70u64, 0x78, 0x0] {
                let o = o_load(trap::load(GICR + off, Width::X));
                report_at(vm, "mmio-read64", "gicr", GICR, GICR + off, 8, o);
            }
            // Put things back where the next steps would notice: clear pending and
            // active SPIs, wake the redistributor.
            let _ = trap::store(GICD + 0x284, Width::W, 0xffff_ffff);
            let _ = trap::store(GICD + 0x384, Width::W, 0xffff_ffff);
            let _ = trap::store(gicr_last + 0x1_0280, Width::W, 0xffff_ffff);
            let _ = trap::store(gicr_last + 0x14, Width::W, 0);
        }
    }
}

/// The redistributors' part: LPIs, and the last vCPU's SGIs and PPIs.
fn v3_writes(gicr_last: u64) -> [Write; 7] {
    [
        // LPIs: property and pending tables at other VMs' memory, then on.
        ("gicr", GICR, GICR + 0x70, Width::X, 0x8000_0000 | 0x1f),
        ("gicr", GICR, GICR + 0x78, Width::X, 0x8800_0000),
        ("gicr", GICR, GICR, Width::W, 1),
        ("gicr", GICR, GICR + 0x40, Width::X, 0xffff_ffff),
        // Every SGI/PPI of the last vCPU pending, and its priorities zeroed.
        ("gicr", GICR, gicr_last + 0x1_0200, Width::W, 0xffff_ffff),
        ("gicr", GICR, gicr_last + 0x1_0400, Width::W, 0),
        // Its redistributor asleep.
        ("gicr", GICR, gicr_last + 0x14, Width::W, 0x2),
    ]
}

/// A GICv2's part: CPU interfaces no vCPU has as targets, GICD_SGIR's odd
/// forms, SGIs pending from every CPU, and the CPU interface's completion
/// registers with interrupts that are not active (what `sysregs` tries with
/// ICC_EOIR1_EL1, ICC_DIR_EL1 and ICC_EOIR0_EL1 on a GICv3).
fn v2_writes(vm: &Vm, gicc: u64) -> [Write; 10] {
    let targets = GICD + v2::GICD_ITARGETSR;
    let sgir = GICD + v2::GICD_SGIR;
    let no_vcpu = 0xff & !((1u64 << vm.ncpus) - 1);
    [
        // SPIs 32..35 and 1016..1019 to all eight CPU interfaces.
        ("gicd", GICD, targets + 32, Width::W, 0xffff_ffff),
        ("gicd", GICD, targets + 1016, Width::W, 0xffff_ffff),
        // The read-only targets of SGIs 0..3.
        ("gicd", GICD, targets, Width::W, 0xffff_ffff),
        // TargetListFilter 3 (reserved), to every CPU interface.
        ("gicd", GICD, sgir, Width::W, (3 << 24) | (0xff << 16) | 0xf),
        // Only CPU interfaces no vCPU has (none if it has all eight).
        ("gicd", GICD, sgir, Width::W, (no_vcpu << 16) | 0xe),
        // NSATT (Group 1 only, from a Secure access), to every other CPU.
        ("gicd", GICD, sgir, Width::W, (1 << 15) | (1 << 24) | 0xd),
        // SGIs 0..3 pending here from every CPU, those of no vCPU included.
        ("gicd", GICD, GICD + v2::GICD_SPENDSGIR, Width::W, 0xffff_ffff),
        ("gicc", gicc, gicc + v2::GICC_EOIR, Width::W, 27),
        ("gicc", gicc, gicc + v2::GICC_DIR, Width::W, 1020),
        ("gicc", gicc, gicc + v2::GICC_AEOIR, Width::W, 5),
    ]
}

/// Level-1 table: four 1 GiB blocks, identity, Normal non-cacheable.
#[repr(C, align(4096))]
struct Table([Global<u64>; 512]);

static TABLE: Table = Table([const { Global::new(0) }; 512]);

/// Block descriptor: valid block, AttrIndx 0, AF.
const BLOCK: u64 = 1 | (1 << 10);

/// Runs `f` with the stage-1 MMU on: VA = IPA for the first 4 GiB, all of it
/// Normal memory (MAIR attr 0 = 0x44), so unaligned accesses are allowed
/// and reach armhv with their real address.
fn with_mmu(f: impl FnOnce()) {
    for (i, e) in TABLE.0.iter().enumerate() {
        e.set(if i < 4 { ((i as u64) << 30) | BLOCK } else { 0 });
    }
    let table = TABLE.0.as_ptr() as u64;
    // T0SZ = 25 (39-bit VA, level-1 start), 4 KiB granule, non-cacheable
    // walks, no TTBR1 walks (EPD1), 32-bit IPS.
    let tcr: u64 = 25 | (1 << 23);
    let (old_tcr, old_mair, old_ttbr, sctlr): (u64, u64, u64, u64);
    // SAFETY: the identity map covers all code, data and stacks, so turning
    // the MMU on (and off again) changes no address the program uses; the
    // old translation registers are restored after.
    unsafe {
        asm!(
            "mrs {ot}, tcr_el1", "mrs {om}, mair_el1", "mrs {ob}, ttbr0_el1", "mrs {s}, sctlr_el1",
            "msr mair_el1, {m}", "msr tcr_el1, {t}", "msr ttbr0_el1, {b}", "isb",
            "tlbi vmalle1", "dsb nsh", "isb",
            "orr {x}, {s}, #1", "msr sctlr_el1, {x}", "isb",
            ot = out(reg) old_tcr, om = out(reg) old_mair, ob = out(reg) old_ttbr, s = out(reg) sctlr,
            m = in(reg) 0x44u64, t = in(reg) tcr, b = in(reg) table, x = out(reg) _,
            options(nostack),
        );
    }
    f();
    // SAFETY: as above, back to the MMU off.
    unsafe {
        asm!(
            "msr sctlr_el1, {s}", "isb",
            "msr tcr_el1, {ot}", "msr mair_el1, {om}", "msr ttbr0_el1, {ob}", "isb",
            "tlbi vmalle1", "dsb nsh", "isb",
            s = in(reg) sctlr, ot = in(reg) old_tcr, om = in(reg) old_mair, ob = in(reg) old_ttbr,
            options(nostack),
        );
    }
}

fn unaligned(vm: &Vm, windows: &[(&str, u64, u64)]) {
    let mut tries: [(&str, u64, u64, Width); 24] = [("", 0, 0, Width::B); 24];
    let mut n = 0;
    for &(dev, base, size) in windows {
        for (off, w) in [
            (1, Width::W),
            (2, Width::W),
            (4, Width::X),
            (3, Width::H),
            (size - 4, Width::X),
            (size - 2, Width::W),
        ] {
            if n < tries.len() {
                tries[n] = (dev, base, base + off, w);
                n += 1;
            }
        }
    }
    with_mmu(|| {
        for &(dev, base, addr, w) in &tries[..n] {
            let o = o_load(trap::load(addr, w));
            report_at(vm, &width_name("mmio-unaligned-read", w), dev, base, addr, w.bytes(), o);
            // Stores only at the ends of the windows (identification
            // registers and holes), never at the registers at the start.
            if addr - base < 0x10 {
                continue;
            }
            let o = o_done(trap::store(addr, w, 0));
            report_at(vm, &width_name("mmio-unaligned-write", w), dev, base, addr, w.bytes(), o);
        }
        // Straddling the end of RAM: half ours, half nobody's.
        let addr = vm.ram_end - 4;
        let o = o_load(trap::load(addr, Width::X));
        let confined = o.refused();
        if !confined {
            report::leaked(4);
        }
        report::attempt("mmio-unaligned-read64", format_args!("ram-end-4 {addr:#x}"), o, confined);
        // dc zva on a device (Normal at stage 1, a device at stage 2).
        for &(dev, base, _) in windows {
            let addr = base + 0x40;
            if dev == "uart" {
                continue;
            }
            let o = o_done(odd_access(addr, "dc-zva"));
            report_at(vm, "mmio-dc-zva-normal", dev, base, addr, 64, o);
        }
    });
}
