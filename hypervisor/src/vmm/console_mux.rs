//! One physical console for every VM. Output lines are tagged with the VM's name
//! (`crate::console`); input goes to the focused VM's console device: its PL011, or its
//! virtio-console when the guest's kernel uses that (`VmSpec::input_console`). Ctrl-A starts a command:
//! Ctrl-A then a digit n focuses VM n, `s` prints per-VM statistics, `d` switches the interrupt
//! distributor on or off, `t` prints its interrupt trace, `q` stops every VM (the
//! final report follows and armhv powers off), `h` prints help, and a second Ctrl-A sends a
//! Ctrl-A to the VM.

use super::uart::VmUart;
use super::{Action, StopReason, sched};
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

/// The UART interrupt: handles every byte waiting. Returns what the vCPU this CPU is running
/// (if any) must do, if that changes.
pub fn on_input() -> Option<Action> {
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
        b's' => super::stats::log_all("console"),
        b'd' => super::irqdist::toggle(),
        b't' => super::irqdist::print_trace(),
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
    let mut running_here = false;
    for vm in sched::vms() {
        if (0..vm.vcpus.len()).any(|i| sched::is_running_here(vm.id, i)) {
            running_here = true;
        } else {
            sched::stop_vm(vm, &StopReason::Shutdown);
        }
    }
    running_here.then_some(Action::Stop(StopReason::Shutdown))
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
         s statistics, d interrupt distributor on/off, t interrupt trace, q stop every VM and \
         power off, h this help, Ctrl-A a literal Ctrl-A"
    );
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
    let kicks = super::vgic::set_device_irq(vm, uart.irq_change());
    drop(bus);
    super::sched::notify(vm.id, kicks);
    taken
}
