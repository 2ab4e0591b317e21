//! Physical interrupts, taken at EL2 while a guest runs (or waking an idle CPU): acknowledged
//! here and turned into scheduling decisions or virtual interrupts.

use super::Action;
use super::vcpu::Vcpu;
use super::vm::Vm;
use crate::arch::aarch64::{cpu, timer};
use crate::drivers::gic;

/// Handles every pending physical interrupt; `running` is the loaded vCPU, if any.
pub fn handle_pending(mut running: Option<(&Vm, &mut Vcpu)>) -> Action {
    let mut action = Action::Resume;
    while let Some(intid) = gic::acknowledge() {
        match intid {
            // A kick: an interrupt for the running vCPU (its next entry picks it up), or the
            // scheduler wants this CPU to choose again (a preemption, a vCPU to pick up).
            gic::SGI_KICK => {
                if super::sched::take_resched() {
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
                Some((vm, vcpu)) => super::vtimer::fired(vm, vcpu),
                // Nobody to deliver it to (the vCPU whose timer it was is gone): keep it quiet.
                None => gic::set_local_ppi(cpu::current(), gic::PPI_VIRT_TIMER, false),
            },
            // The time slice ended, or an emulated timer's deadline came (the run loop raises
            // its line on entry).
            gic::PPI_HYP_TIMER => {
                timer::hyp_timer_cancel();
                if super::sched::slice_over() {
                    yield_unless_stopping(&mut action);
                }
            }
            other if super::console_mux::is_input_interrupt(other) => {
                if let Some(a) = super::console_mux::on_input() {
                    action = a;
                }
            }
            other if super::passthrough::forward(other) => continue, // the guest deactivates it
            other => log::warn!("unexpected physical interrupt {other} on CPU {}", cpu::current()),
        }
        gic::end(intid);
    }
    action
}

/// A later interrupt in the same batch asks for a yield: it must not undo a stop (Ctrl-A q).
fn yield_unless_stopping(action: &mut Action) {
    if !matches!(action, Action::Stop(_)) {
        *action = Action::Yield;
    }
}
