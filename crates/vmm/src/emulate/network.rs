//! The virtual networks: one learning switch per network name, whose ports are the VMs'
//! virtio-net devices.
//!
//! Frames a VM sends wait in its NIC's outbox (`nic`) until the trap's device lock is
//! released; then the switch forwards them to the other NICs, locking one VM's devices at a
//! time, so two VMs sending to each other cannot deadlock.

use super::virtio::with_transport;
use crate::memory::RamView;
use crate::nic::NicPort;
use crate::registry;
use crate::stats;
use crate::sync::{Class, Lock};
use crate::vm::Vm;
use crate::wakeups::Wakeups;
use addr::Ipa;
use alloc::string::String;
use alloc::vec::Vec;
use virtio::{Net, PartialCsum, Switch, VirtioMmio};

/// MAC addresses each network's switch remembers.
const SWITCH_TABLE: usize = 256;

/// A network shared by the NICs that name it: a learning switch, and where each port is.
struct Network {
    name: String,
    switch: Switch,
    /// (VM id, slot IPA) of each port.
    ports: Vec<(usize, Ipa)>,
}

static NETWORKS: Lock<Vec<Network>> = Lock::new(Class::Networks, Vec::new());

/// Gives VM `vm_id`'s NIC at virtio slot `slot` a port on network `name` (created on first
/// use); returns (network index, port).
pub fn join(name: &str, vm_id: usize, slot: Ipa) -> Result<(usize, usize), String> {
    let mut nets = NETWORKS.lock();
    let index = match nets.iter().position(|n| n.name == name) {
        Some(i) => i,
        None => {
            nets.push(Network {
                name: name.into(),
                switch: Switch::new(64, SWITCH_TABLE),
                ports: Vec::new(),
            });
            nets.len() - 1
        }
    };
    let net = &mut nets[index];
    if net.ports.len() >= net.switch.ports() {
        return Err(alloc::format!("network {name} has no free port"));
    }
    net.ports.push((vm_id, slot));
    Ok((index, net.ports.len() - 1))
}

/// Back to the state of a NIC just plugged in (its VM reset or stopped): frames not yet
/// forwarded are dropped, and its network forgets the addresses learned on its port (the next
/// kernel may use others; frames for them are flooded until it sends).
pub fn reset_port(nic: &NicPort) {
    nic.clear_outbox();
    if let Some(net) = NETWORKS.lock().get_mut(nic.network) {
        net.switch.forget_port(nic.port);
    }
}

/// After a trap on `vm`'s devices: its NICs' sent frames go through their switches. The
/// receivers' vCPUs to wake go into `wake`.
pub fn forward_frames(vm: &Vm, wake: &mut Wakeups) {
    for nic in &vm.nics {
        loop {
            let Some((frame, csum)) = nic.outbox.lock().pop() else { break };
            let destinations: Vec<(usize, Ipa)> = {
                let mut nets = NETWORKS.lock();
                let net = &mut nets[nic.network];
                let to = net.switch.forward(nic.port, &frame);
                to.iter().filter_map(|p| net.ports.get(p).copied()).collect()
            };
            for (vm_id, slot) in destinations {
                if let Some(dest) = registry::get(vm_id) {
                    deliver(dest, slot, &frame, csum, wake);
                }
            }
        }
    }
}

fn deliver(vm: &Vm, slot: Ipa, frame: &[u8], csum: Option<PartialCsum>, wake: &mut Wakeups) {
    if vm.is_stopped() {
        return;
    }
    let put = |net: &mut VirtioMmio<Net>, ram: &mut RamView| net.deliver(frame, csum, ram);
    let (_, woken) = with_transport(vm, slot, put);
    wake.interrupts(vm.id, woken);
    stats::bump(&vm.stats.frames_in);
}
