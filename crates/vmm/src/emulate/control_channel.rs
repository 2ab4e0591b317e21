//! A control VM's channel to armhv: a virtio-console of its own (`control = true` in its
//! config; the slot after its other virtio devices, its device-tree node marked
//! `armhv,control-channel`). The guest writes commands, a line each, in the language of
//! crate `control`; armhv answers each with one JSON line, and sends events (a VM started,
//! stopped, crashed...) as JSON lines between the answers.
//!
//! Answers and events wait in the channel's [`Answers`] until the device delivers them into the
//! guest's receive buffers, so that they can be produced anywhere: in the guest's own transmit
//! (under its device lock: a malformed line, `list`), at the top of a CPU's loop (a queued
//! command's reply), in a stop (an event). Only whole lines are kept, and at most
//! [`ANSWERS_CAP`] bytes of them: a control VM that never reads its channel loses events, it
//! does not grow armhv's heap.

use super::virtio_slot::with_transport;
use crate::control_port::{Answers, ControlPort};
use crate::sync::{Class, Lock};
use crate::vm::Vm;
use addr::Ipa;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use control::command::MAX_LINE;
use spin::Once;
use vgic::VcpuSet;
use virtio::device::VirtioDevice;
use virtio::queue::Queue;
use virtio::{Console, GuestRam, VirtioError, VirtioMmio};

/// What a line (`line`, `length` bytes long, of which at most one more than a command may
/// have are kept) from control VM `vm_id`, named `name`, gets at once: an answer, or nothing
/// (an empty string) when the command's reply comes later. `manage` answers: the emulation
/// layer does not reach up to it.
pub type Answerer = fn(vm_id: usize, name: &str, line: &[u8], length: usize) -> String;

static ANSWERER: Once<Answerer> = Once::new();

/// Sets who answers the control VMs' lines (once, at boot).
pub fn set_answerer(answerer: Answerer) {
    ANSWERER.call_once(|| answerer);
}

/// The channel's device: a virtio-console whose input is [`Answers`].
pub struct ControlChannel {
    console: Console,
    answers: Arc<Lock<Answers>>,
}

/// Builds VM `vm_id`'s (named `name`) channel, for its slot `slot`.
pub fn build(vm_id: usize, name: &str, slot: Ipa) -> (ControlChannel, ControlPort) {
    let answers = Arc::new(Lock::new(Class::Outbox, Answers::default()));
    let mut line = Vec::with_capacity(MAX_LINE + 1);
    let mut length = 0usize;
    let sink_answers = answers.clone();
    let name = String::from(name);
    let console = Console::new(move |bytes: &[u8]| {
        for &b in bytes {
            if b == b'\n' {
                if let Some(answer) = ANSWERER.get() {
                    sink_answers.lock().push(&answer(vm_id, &name, &line, length));
                }
                line.clear();
                length = 0;
                continue;
            }
            length = length.saturating_add(1);
            if line.len() <= MAX_LINE {
                line.push(b); // one more than a command may have: `parse` then says it is too long
            }
        }
    });
    let port = ControlPort { slot, answers: answers.clone() };
    (ControlChannel { console, answers }, port)
}

impl ControlChannel {
    /// Moves waiting answers into the console's input, as much as it takes.
    fn take_answers(&mut self) {
        let mut answers = self.answers.lock();
        let (a, b) = answers.as_slices();
        let taken = self.console.push_input(a);
        let taken = if taken == a.len() { taken + self.console.push_input(b) } else { taken };
        answers.drain(taken);
    }
}

impl VirtioDevice for ControlChannel {
    fn device_id(&self) -> u32 {
        self.console.device_id()
    }

    fn name(&self) -> &'static str {
        "armhv-control"
    }

    fn features(&self) -> u64 {
        self.console.features()
    }

    fn queue_max_sizes(&self) -> &[u16] {
        self.console.queue_max_sizes()
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        self.console.read_config(offset, data)
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        self.console.write_config(offset, data)
    }

    fn process(
        &mut self,
        queue: usize,
        queues: &mut [Queue],
        ram: &mut dyn GuestRam,
    ) -> Result<(), VirtioError> {
        self.take_answers();
        self.console.process(queue, queues, ram)
    }

    fn has_pending_work(&self) -> bool {
        self.console.has_pending_work() || !self.answers.lock().is_empty()
    }

    fn poll(&mut self, queues: &mut [Queue], ram: &mut dyn GuestRam) -> Result<(), VirtioError> {
        self.take_answers();
        self.console.poll(queues, ram)
    }

    fn stats(&self) -> virtio::device::DeviceStats {
        self.console.stats()
    }

    fn reset(&mut self) {
        // Lines for the previous driver instance are stale.
        self.console.reset();
        self.answers.lock().clear();
    }
}

/// Sends `line` (one JSON object and its `\n`) to control VM `vm` and delivers what its
/// receive buffers take now; returns the vCPUs to wake. Never under `vm`'s device lock.
pub fn send(vm: &Vm, line: &str) -> VcpuSet {
    let Some(port) = &vm.control else { return VcpuSet::EMPTY };
    port.answers.lock().push(line);
    let deliver = |channel: &mut VirtioMmio<ControlChannel>, ram: &mut crate::memory::RamView| {
        channel.poll(ram)
    };
    with_transport(vm, port.slot, deliver).1
}

/// Writes `event` of VM `name` for the control VMs.
pub fn event_line(name: &str, event: &control::Event) -> String {
    let mut line = String::new();
    let _ = control::reply::write_event(&mut line, name, event);
    line
}
