//! One physical console for every VM. Output lines are tagged with the VM's name
//! (`crate::console`); input goes to the focused VM's console device: its PL011, or its
//! virtio-console when the guest's kernel uses that (`VmSpec::input_console`). Ctrl-A starts a command:
//! Ctrl-A then a digit n focuses VM n, `s` prints per-VM statistics, `d` switches the interrupt
//! distributor on or off, `t` prints its interrupt trace, `q` stops every VM (the
//! final report follows and armhv powers off), `h` prints help, and a second Ctrl-A sends a
//! Ctrl-A to the VM.

use crate::drivers::gic;
use ::vgic::VcpuSet;
use core::sync::atomic::{AtomicBool, Ordering};
use vdev::MmioDevice;
use vmm::emulate::uart::{self, VmUart};
use vmm::emulate::{vgic, virtio};
use vmm::vm::{ConsoleInput, Vm};
use vmm::{Action, StopReason, irq, irqdist, lifecycle, registry, sched, stats};

const CTRL_A: u8 = 0x01;

/// Ctrl-A was typed: the next byte is a command.
static COMMAND: AtomicBool = AtomicBool::new(false);

/// Takes console input by interrupt on the CPU with affinity `mpidr`.
pub fn init(intid: Option<u32>, mpidr: u64) {
    let Some(intid) = intid else {
        log::warn!("the console UART has no interrupt in the device tree: no console input");
        return;
    };
    match gic::route_spi(intid, mpidr, true) {
        Ok(()) => {
            irq::set_console_input(intid, on_input);
            uart::set_focus(0);
            crate::console::enable_input_interrupt();
        }
        Err(e) => log::warn!("console input disabled: its interrupt {intid}: {e}"),
    }
}

/// The UART interrupt: handles every byte waiting. Returns what the vCPU this CPU is running
/// (if any) must do, if that changes.
fn on_input() -> Option<Action> {
    let mut action = None;
    loop {
        let bytes = crate::console::read_input::<64>();
        if bytes.is_empty() {
            return action;
        }
        for b in bytes {
            action = handle(b).or(action);
        }
    }
}

/// One byte typed. Returns what the vCPU running on this CPU must do (Ctrl-A q stops its VM).
fn handle(byte: u8) -> Option<Action> {
    if !COMMAND.swap(false, Ordering::Relaxed) {
        if byte == CTRL_A {
            COMMAND.store(true, Ordering::Relaxed);
        } else {
            deliver(byte);
        }
        return None;
    }
    match byte {
        CTRL_A => deliver(CTRL_A),
        b'0'..=b'9' => focus(usize::from(byte - b'0')),
        b's' => crate::reports::log_stats("console"),
        b'd' => irqdist::toggle(),
        b't' => irqdist::print_trace(),
        b'q' => return shutdown(),
        b'h' | b'?' => help(),
        _ => log::info!("console: unknown command after Ctrl-A; Ctrl-A h for help"),
    }
    None
}

/// Ctrl-A q: stops every VM, as if each had powered off. The last one to stop ends armhv with
/// the final report (`usage::final_report`) and powers the machine off. The VM whose vCPU this
/// CPU is running (the input interrupt came in its exit) cannot be stopped from inside that
/// exit (stopping waits until none of its vCPUs runs): that vCPU is told to stop instead.
fn shutdown() -> Option<Action> {
    log::info!("console: stopping every VM (Ctrl-A q)");
    if registry::vms().is_empty() {
        // No VM to stop, so none whose end powers the machine off: do it now.
        crate::reports::power_off();
    }
    let mut running_here = false;
    for vm in registry::vms() {
        if (0..vm.vcpus.len()).any(|i| sched::is_running_here(vm.id, i)) {
            running_here = true;
        } else {
            lifecycle::stop(vm, &StopReason::Shutdown);
        }
    }
    running_here.then_some(Action::Stop(StopReason::Shutdown))
}

fn focus(id: usize) {
    match registry::get(id) {
        Some(vm) => {
            uart::set_focus(id);
            log::info!("console: input goes to vm {id} ({})", vm.name);
        }
        None => log::info!("console: there is no VM {id} ({} VMs)", registry::vms().len()),
    }
}

fn help() {
    log::info!(
        "console: typing goes to the focused VM. Ctrl-A then: 0-9 focus that VM, \
         s statistics, d interrupt distributor on/off, t interrupt trace, q stop every VM and \
         power off, h this help, Ctrl-A a literal Ctrl-A"
    );
}

fn deliver(byte: u8) {
    let Some(vm) = uart::focused().and_then(registry::get) else { return };
    if vm.is_stopped() {
        return;
    }
    let (taken, woken) = match vm.console_input {
        Some(ConsoleInput::Uart) => uart_input(vm, byte),
        Some(ConsoleInput::Virtio(slot)) => virtio::console_input(vm, slot, byte),
        None => (false, VcpuSet::EMPTY),
    };
    sched::notify(vm.id, woken);
    if !taken {
        stats::bump(&vm.stats.input_dropped);
    }
}

/// A byte for `vm`'s PL011: whether it was taken, and the vCPUs to wake.
fn uart_input(vm: &Vm, byte: u8) -> (bool, VcpuSet) {
    let mut bus = vm.devices.lock();
    let Some(uart) = bus.device_mut::<VmUart>() else { return (false, VcpuSet::EMPTY) };
    let taken = uart.input(byte);
    (taken, vgic::set_device_irq(vm, uart.irq_change()))
}
