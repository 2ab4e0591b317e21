//! One physical console for every VM. Output lines are tagged with the VM's name
//! (`crate::console`); input goes to the focused VM's console device: its PL011, or its
//! virtio-console when the guest's kernel uses that (`VmSpec::input_console`). Ctrl-A starts a command:
//! Ctrl-A then a digit n focuses VM n, `s` prints per-VM statistics, `h` prints help, and a
//! second Ctrl-A sends a Ctrl-A to the VM.

use super::sched;
use super::uart::VmUart;
use crate::drivers::gic;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use vdev::MmioDevice;

const CTRL_A: u8 = 0x01;

/// Where a VM's console input goes.
#[derive(Clone, Copy, Debug)]
pub enum ConsoleInput {
    Uart,
    /// The virtio-console at this slot.
    Virtio(addr::Ipa),
}

static FOCUS: AtomicUsize = AtomicUsize::new(0);
/// Ctrl-A was typed: the next byte is a command.
static COMMAND: AtomicBool = AtomicBool::new(false);
/// The physical UART's interrupt (0: none, input not taken).
static UART_INTID: AtomicU32 = AtomicU32::new(0);

/// Takes console input by interrupt on the CPU with affinity `mpidr`.
pub fn init(intid: Option<u32>, mpidr: u64) {
    let Some(intid) = intid else {
        log::warn!("the console UART has no interrupt in the device tree: no console input");
        return;
    };
    match gic::route_spi(intid, mpidr, true) {
        Ok(()) => {
            UART_INTID.store(intid, Ordering::Release);
            crate::console::enable_input_interrupt();
        }
        Err(e) => log::warn!("console input disabled: its interrupt {intid}: {e}"),
    }
}

pub fn is_input_interrupt(intid: u32) -> bool {
    intid != 0 && UART_INTID.load(Ordering::Relaxed) == intid
}

/// The VM whose UART gets console input (and whose partial lines are shown at once).
pub fn focused() -> Option<usize> {
    (UART_INTID.load(Ordering::Relaxed) != 0).then(|| FOCUS.load(Ordering::Relaxed))
}

/// The UART interrupt: handles every byte waiting.
pub fn on_input() {
    loop {
        let bytes = crate::console::read_input::<64>();
        if bytes.is_empty() {
            return;
        }
        for b in bytes {
            handle(b);
        }
    }
}

fn handle(byte: u8) {
    if !COMMAND.swap(false, Ordering::Relaxed) {
        if byte == CTRL_A {
            COMMAND.store(true, Ordering::Relaxed);
        } else {
            deliver(byte);
        }
        return;
    }
    match byte {
        CTRL_A => deliver(CTRL_A),
        b'0'..=b'9' => focus(usize::from(byte - b'0')),
        b's' => print_stats(),
        b'h' | b'?' => help(),
        _ => log::info!("console: unknown command after Ctrl-A; Ctrl-A h for help"),
    }
}

fn focus(id: usize) {
    match sched::vms().get(id) {
        Some(vm) => {
            FOCUS.store(id, Ordering::Relaxed);
            log::info!("console: input goes to vm {id} ({})", vm.name);
        }
        None => log::info!("console: there is no VM {id} ({} VMs)", sched::vms().len()),
    }
}

fn help() {
    log::info!(
        "console: typing goes to the focused VM. Ctrl-A then: 0-9 focus that VM, \
         s statistics, h this help, Ctrl-A a literal Ctrl-A"
    );
}

fn print_stats() {
    for vm in sched::vms() {
        let state = if vm.is_stopped() { "stopped" } else { "running" };
        log::info!("console: vm {} ({}, {state}): {}", vm.id, vm.name, vm.stats);
        let mut bus = vm.devices.lock();
        let slots: alloc::vec::Vec<_> = bus.ranges().map(|(r, _)| r.start).collect();
        for ipa in slots {
            if let Some(slot) = bus.device_at_mut::<super::virtio::VirtioSlot>(ipa) {
                let s = slot.stats();
                log::info!(
                    "console:   {} at {ipa}: {} requests, {} bytes in, {} bytes out, {} errors, \
                     {} dropped, {} interrupts",
                    slot.name(),
                    s.device.requests,
                    s.device.bytes_from_guest,
                    s.device.bytes_to_guest,
                    s.device.errors,
                    s.device.dropped,
                    s.transport.interrupts
                );
            }
        }
    }
}

fn deliver(byte: u8) {
    let id = FOCUS.load(Ordering::Relaxed);
    let Some(vm) = sched::vms().get(id) else { return };
    if vm.is_stopped() {
        return;
    }
    let taken = match vm.console_input {
        Some(ConsoleInput::Uart) => uart_input(vm, byte),
        Some(ConsoleInput::Virtio(slot)) => super::virtio::console_input(vm, slot, byte),
        None => false,
    };
    if !taken {
        super::stats::bump(&vm.stats.input_dropped);
    }
}

fn uart_input(vm: &super::vm::Vm, byte: u8) -> bool {
    let mut bus = vm.devices.lock();
    let Some(uart) = bus.device_mut::<VmUart>() else { return false };
    let taken = uart.input(byte);
    if let Some((intid, level)) = uart.irq_change() {
        drop(bus);
        super::vgic::set_device_irq(vm, intid, level);
    }
    taken
}
