//! `mem`: loads, stores and jumps outside the VM's RAM, all over the IPA space;
//! `mem-exhaust`: every free byte of its own RAM written, then a push below it;
//! `abort-flood=MS`: stage-2 aborts as fast as the vCPU can take them.
//!
//! Lines: `hostile: mem-read|mem-write|mem-exec <hex> -> <outcome>`. Outside the
//! VM's device windows (`own=` of the boot line) only a refusal is confined;
//! inside them (its own emulated GIC, PL011, virtio slots) data is fine.

use baremetal::{println, time};
use guest_abi::map;

use crate::report::{self, Outcome};
use crate::trap::{self, Width};
use crate::{Vm, image_end};

const MAX_TARGETS: usize = 192;
/// Stored where a store is not expected to land: "HOST".
const POISON: u64 = 0x484f_5354;

struct Targets {
    addr: [u64; MAX_TARGETS],
    n: usize,
}

impl Targets {
    fn push(&mut self, vm: &Vm, addr: u64) {
        // Its own RAM is not a target (the attacks there are `mem-exhaust`).
        if vm.in_ram(addr, 4) || self.addr[..self.n].contains(&addr) || self.n == MAX_TARGETS {
            return;
        }
        self.addr[self.n] = addr;
        self.n += 1;
    }
}

/// QEMU virt's physical map (hw/arm/virt.c) and the GIC frames of other
/// versions: what a VM might hope to reach.
const BOARD: [u64; 26] = [
    0x0000_0000,    // flash 0
    0x0400_0000,    // flash 1
    0x0801_0000,    // GICv2 CPU interface (GICC), just past GICD
    0x0802_0000,    // GICv2m
    0x0803_0000,    // GICv2 hypervisor interface (GICH)
    0x0804_0000,    // GICv2 virtual CPU interface (GICV)
    0x0808_0000,    // GICv3 ITS
    0x0809_0000,    // ITS translater frame
    0x0901_0000,    // PL031 RTC
    0x0902_0000,    // fw_cfg
    0x0903_0000,    // PL061 GPIO
    0x0904_0000,    // secure UART
    0x0905_0000,    // SMMUv3
    0x0907_0000,    // secure GPIO
    0x0908_0000,    // platform bus / NVDIMM
    0x0A00_0E00,    // virtio-mmio slot 7 (armhv's last for devices)
    0x0A00_1000,    // virtio-mmio slot 8 (an empty transport, as on QEMU)
    0x0A00_3E00,    // QEMU's last virtio-mmio slot (empty too)
    0x0C00_0000,    // platform bus
    0x0E00_0000,    // secure memory
    0x1000_0000,    // PCIe MMIO
    0x3EFF_0000,    // PCIe PIO
    0x3F00_0000,    // PCIe ECAM
    0x40_1000_0000, // high PCIe ECAM
    0x80_0000_0000, // high PCIe MMIO
    0xFFFF_FFFF_FFFF_F000,
];

fn targets(vm: &Vm) -> Targets {
    let mut t = Targets { addr: [0; MAX_TARGETS], n: 0 };
    for &a in &BOARD {
        t.push(vm, a);
    }
    // Own device windows and what lies right after them: read-only
    // identification registers inside (writing back what was read is harmless).
    t.push(vm, map::GICD_BASE.0 + 0x8); // GICD_IIDR
    t.push(vm, map::UART_BASE.0 + 0xfe0); // UARTPeriphID0
    t.push(vm, map::GICR_BASE.0 + 0x8); // GICR_TYPER of vCPU 0
    t.push(vm, map::GICR_BASE.0 + map::gicr_size(vm.ncpus)); // no such vCPU's redistributor
    t.push(vm, map::UART_BASE.0 + map::UART_SIZE);
    for &(base, size) in &vm.own[..vm.nown] {
        t.push(vm, base + size);
    }
    // Every 256 MiB of the first 4 GiB.
    for i in 0..16u64 {
        t.push(vm, i << 28);
    }
    // QEMU puts RAM (armhv, its heap, every VM's RAM) at 0x4000_0000 on:
    // those physical addresses as IPAs, from our end to the end of 2 GiB.
    t.push(vm, vm.ram_end);
    t.push(vm, vm.ram_end + 0x1000);
    let mut a = (vm.ram_end + 0x1ff_ffff) & !0x1ff_ffff;
    while a < 0xC000_0000 {
        t.push(vm, a);
        a += 32 << 20;
    }
    t.push(vm, 0xBFFF_F000);
    t.push(vm, 0xC000_0000);
    // Every power of two up to the IPA size, the last page below it and
    // what lies beyond.
    for bit in 32..=vm.ipa_bits.min(52) {
        t.push(vm, 1 << bit);
    }
    let top = 1u64 << vm.ipa_bits;
    t.push(vm, top - 0x1000);
    t.push(vm, top + 0x4000_0000);
    t.push(vm, (1 << 48) - 0x1000);
    t
}

/// What a word read at `addr` must give if it is the start of an empty virtio-mmio transport
/// of the VM's window (guest ABI: the slots after its devices answer "no device"): the magic.
fn empty_transport(vm: &Vm, addr: u64) -> Option<u64> {
    let window = map::VIRTIO_BASE.0..map::VIRTIO_BASE.0 + map::VIRTIO_WINDOW_SIZE;
    let slot_start = addr.is_multiple_of(map::VIRTIO_SLOT_SIZE);
    (window.contains(&addr) && slot_start && !vm.in_own_device(addr, 4)).then_some(0x7472_6976)
}

/// Reads, writes and (for some) jumps to every target.
pub fn step(vm: &Vm) {
    let t = targets(vm);
    for &addr in &t.addr[..t.n] {
        let read = trap::load(addr, Width::W);
        // An empty virtio transport of our own window answers as on QEMU, and only that.
        let empty = empty_transport(vm, addr);
        let own = vm.in_own_device(addr, 4) || (empty.is_some() && read.ok() == empty);
        let outcome = match read {
            Ok(v) => Outcome::Value(v),
            Err(f) => Outcome::from_esr(f.esr),
        };
        let confined = own || outcome.refused();
        if !confined {
            report::leaked(4);
        }
        report::attempt("mem-read", format_args!("{addr:#x}"), outcome, confined);

        let value = read.unwrap_or(POISON);
        let outcome = match trap::store(addr, Width::W, value) {
            Ok(()) => Outcome::Ok,
            Err(f) => Outcome::from_esr(f.esr),
        };
        report::attempt("mem-write", format_args!("{addr:#x}"), outcome, own || outcome.refused());
    }
    // Instruction fetches: outside RAM, and from its own devices.
    let mut jumps = [0x0, 0x0900_0000, 0x0800_0000, vm.ram_end, 0x8000_0000, 1 << 32, 0];
    let last = jumps.len() - 1;
    jumps[last] = (1u64 << vm.ipa_bits) - 0x1000;
    for addr in jumps {
        let outcome = match trap::jump(addr) {
            Ok(()) => Outcome::Ok,
            Err(f) => Outcome::from_esr(f.esr),
        };
        report::attempt("mem-exec", format_args!("{addr:#x}"), outcome, outcome.refused());
    }
}

/// Fills its free RAM (all but image, stacks and device tree), checks it,
/// then pushes with the stack pointer at the bottom of RAM.
pub fn exhaust(vm: &Vm) {
    const PATTERN: u64 = 0x5a5a_0000_0000_0000;
    let dt_end = (vm.dt_addr + vm.dt_size + 0xfff) & !0xfff;
    let start = (image_end() + 0xfff) & !0xfff;
    let ranges = [(start, vm.dt_addr & !0xfff), (dt_end, vm.ram_end)];
    let t0 = time::counter();
    let mut bytes = 0;
    for &(from, to) in &ranges {
        let mut a = from;
        while a < to {
            // SAFETY: free RAM of ours: no Rust object lives above the image
            // (there is no allocator) and the device tree is skipped.
            unsafe { (a as *mut u64).write_volatile(PATTERN | a) };
            a += 8;
        }
        bytes += to.saturating_sub(from);
    }
    let mut bad = 0u64;
    for &(from, to) in &ranges {
        let mut a = from;
        while a < to {
            // SAFETY: as above.
            if unsafe { (a as *const u64).read_volatile() } != PATTERN | a {
                bad += 1;
            }
            a += 8;
        }
    }
    let ms = time::ticks_to_ms(time::counter() - t0);
    report::attempt(
        "mem-exhaust",
        format_args!("fill {bytes} bytes"),
        format_args!("absorbed in {ms} ms, {bad} words read back wrong"),
        bad == 0,
    );

    // A push with the stack pointer (SP_EL0, selected) at the bottom of RAM:
    // the store lands below it. The handler runs on SP_EL1.
    let below = vm.ram_start;
    let r = trap::probe(|| {
        // SAFETY: switches to SP_EL0 for one store that faults (it is below
        // our RAM), then back to SP_EL1; no Rust code runs in between.
        unsafe {
            core::arch::asm!(
                "msr spsel, #0",
                "mov {old}, sp",
                "mov sp, {below}",
                "str {old}, [sp, #-16]!",
                "mov sp, {old}",
                "msr spsel, #1",
                below = in(reg) below,
                old = out(reg) _,
                options(nostack),
            )
        }
    });
    let outcome = match r {
        Ok(()) => Outcome::Ok,
        Err(f) => Outcome::from_esr(f.esr),
    };
    report::attempt("mem-push", format_args!("{:#x}", below - 16), outcome, outcome.refused());

    // A very long line without a newline: armhv must cut it, not keep it all.
    for i in 0..16 * 1024 {
        baremetal::console::print(format_args!("{}", (b'a' + (i % 26) as u8) as char));
    }
    println!("");
    // Nothing here can fail: whether the others kept their console is the host test's check.
    report::sweep("console-flood", "16384 bytes", "ok");
}

/// `abort-flood=MS`: loads from an IPA that is nobody's, as fast as it can.
pub fn abort_flood(ms: u64) {
    let addr = 0x0;
    println!("hostile: abort-flood {ms}ms starting");
    let deadline = time::counter() + time::ms_to_ticks(ms);
    let (mut n, mut refused) = (0u64, 0u64);
    while !time::passed(deadline) {
        n += 1;
        if trap::load(addr, Width::W).is_err() {
            refused += 1;
        }
    }
    report::attempt(
        "abort-flood",
        format_args!("{addr:#x}"),
        format_args!("absorbed {n} loads in {ms} ms, {refused} aborted"),
        n == refused,
    );
}
