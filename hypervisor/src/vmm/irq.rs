//! Physical interrupts, taken at EL2 while a guest runs (or waking an idle CPU): acknowledged
//! here and turned into scheduling decisions or virtual interrupts.

use super::Action;
use super::vcpu::Vcpu;
use super::vm::Vm;
use crate::arch::aarch64::{cpu, timer};
use crate::drivers::gic;

/// Handles every pending physical interrupt; `running` is the loaded vCPU, if any.
pub fn handle_pending(_running: Option<(&Vm, &mut Vcpu)>) -> Action {
    let mut action = Action::Resume;
    while let Some(intid) = gic::acknowledge() {
        match intid {
            // A kick: another CPU changed something this CPU's vCPUs care about; the scheduler
            // and the next guest entry look again.
            gic::SGI_KICK => {}
            // List-register maintenance: handled by the LR sync that follows every exit.
            gic::PPI_MAINTENANCE => {}
            gic::PPI_HYP_TIMER => {
                timer::hyp_timer_cancel();
                action = Action::Yield;
            }
            other => log::warn!("unexpected physical interrupt {other} on CPU {}", cpu::current()),
        }
        gic::end(intid);
    }
    action
}
