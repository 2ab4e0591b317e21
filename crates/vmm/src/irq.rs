//! Physical interrupts, taken at EL2 while a guest runs (or waking an idle CPU): acknowledged
//! here and turned into scheduling decisions or virtual interrupts.

use super::emulate::{passthrough, pmu, vtimer};
use super::vcpu::Vcpu;
use super::vm::Vm;
use super::wakeups::Wakeups;
use super::{Action, sched};
use crate::arch::gic;
use crate::arch::{cpu, timer};
use spin::Once;

/// The console's input interrupt and its handler, which returns what the vCPU this CPU runs
/// must do, if that changes (the console multiplexer, above the monitor, sets it at boot).
static CONSOLE_INPUT: Once<(u32, InputHandler)> = Once::new();

/// Takes the bytes typed; returns what the vCPU running on this CPU must do, if that changes.
pub type InputHandler = fn() -> Option<Action>;

/// Physical interrupt `intid` is console input, handled by `handler`.
pub fn set_console_input(intid: u32, handler: InputHandler) {
    CONSOLE_INPUT.call_once(|| (intid, handler));
}

/// Takes a machine device's completions (the machine disk, an uplink NIC) and puts the vCPUs
/// they wake into the set.
pub type DeviceHandler = fn(&mut Wakeups);

/// Most machine devices whose interrupts armhv itself serves.
const MAX_DEVICE_IRQS: usize = 8;
/// The machine devices' interrupts and handlers, registered at boot and never changed: read
/// without a lock in every interrupt.
static DEVICE_IRQS: [Once<(u32, DeviceHandler)>; MAX_DEVICE_IRQS] =
    [const { Once::new() }; MAX_DEVICE_IRQS];

/// Physical interrupt `intid` belongs to a machine device that armhv drives, and `handler`
/// serves it. The caller routes the interrupt (`gic::route_spi`) after this.
pub fn set_device_handler(intid: u32, handler: DeviceHandler) -> Result<(), &'static str> {
    for slot in &DEVICE_IRQS {
        let mut taken = false;
        let &(owner, _) = slot.call_once(|| {
            taken = true;
            (intid, handler)
        });
        if taken {
            return Ok(());
        }
        if owner == intid {
            return Err("the interrupt already has a handler");
        }
    }
    Err("too many machine devices with interrupts")
}

fn device_handler(intid: u32) -> Option<DeviceHandler> {
    DEVICE_IRQS.iter().map_while(|slot| slot.get()).find(|d| d.0 == intid).map(|d| d.1)
}

/// Handles every pending physical interrupt; `running` is the loaded vCPU, if any. The vCPUs
/// the interrupts wake go into `wake`, for the caller to hand to the scheduler.
pub fn handle_pending(mut running: Option<(&Vm, &mut Vcpu)>, wake: &mut Wakeups) -> Action {
    let mut action = Action::Resume;
    while let Some(intid) = gic::acknowledge() {
        match intid {
            // A kick: an interrupt for the running vCPU (its next entry picks it up), or the
            // scheduler wants this CPU to choose again (a preemption, a vCPU to pick up).
            gic::SGI_KICK => {
                if sched::take_resched() {
                    yield_unless_stopping(&mut action);
                }
            }
            // List-register maintenance: the line stays asserted until the LRs are rewritten on
            // the next entry (after the sync every exit does), so stop acknowledging here.
            gic::PPI_MAINTENANCE => {
                gic::end(intid);
                break;
            }
            gic::PPI_VIRT_TIMER => match running.as_mut() {
                Some((vm, vcpu)) => wake.interrupts(vm.id, vtimer::fired(vm, vcpu)),
                // Nobody to deliver it to (the vCPU whose timer it was is gone): keep it quiet.
                None => gic::set_local_ppi(cpu::current(), gic::PPI_VIRT_TIMER, false),
            },
            // A guest's PMU counter overflowed: the running vCPU's, if its PMU is loaded.
            gic::PPI_PMU => match running.as_mut() {
                Some((vm, vcpu)) => wake.interrupts(vm.id, pmu::fired(vm, vcpu)),
                None => pmu::silence(),
            },
            // The time slice ended, or an emulated timer's deadline came (the run loop raises
            // its line on entry).
            gic::PPI_HYP_TIMER => {
                timer::hyp_timer_cancel();
                if sched::slice_over() {
                    yield_unless_stopping(&mut action);
                }
            }
            other if CONSOLE_INPUT.get().is_some_and(|&(input, _)| input == other) => {
                if let Some(a) = CONSOLE_INPUT.get().and_then(|&(_, handler)| handler()) {
                    action = a;
                }
            }
            other if let Some(handler) = device_handler(other) => handler(wake),
            other if passthrough::forward(other, wake) => continue, // the guest deactivates it
            other => log::warn!("unexpected physical interrupt {other} on CPU {}", cpu::current()),
        }
        gic::end(intid);
    }
    action
}

/// [`handle_pending`] for a CPU that is not in a vCPU's run loop: wakes what it wakes.
pub fn handle_pending_now(running: Option<(&Vm, &mut Vcpu)>) -> Action {
    let mut wake = Wakeups::default();
    let action = handle_pending(running, &mut wake);
    sched::wake(&wake);
    action
}

/// A later interrupt in the same batch asks for the CPU back: it must not undo a stop
/// (Ctrl-A q).
fn yield_unless_stopping(action: &mut Action) {
    if !matches!(action, Action::Stop(_)) {
        *action = Action::Reschedule;
    }
}
