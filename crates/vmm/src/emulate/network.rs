//! The virtual networks: one switch per network name, whose ports are the VMs' virtio-net
//! devices and, on a network that has it, an uplink: the machine's own NIC, driven above the
//! monitor (`hypervisor/src/drivers/uplink.rs`), which attaches with [`attach_uplink`] and hands
//! what it receives to [`from_uplink`].
//!
//! Frames a VM sends wait in its NIC's outbox (`nic`) until the trap's device lock is
//! released; then the switch forwards them to the other NICs, locking one VM's devices at a
//! time, so two VMs sending to each other cannot deadlock, and to the uplink, with no lock of
//! the monitor held (the uplink's lock comes before `Devices` in the lock order: its interrupt
//! delivers into VMs while it holds it).

use super::virtio_slot::with_transport;
use crate::memory::RamView;
use crate::nic::NicPort;
use crate::registry;
use crate::stats;
use crate::sync::{Class, Lock};
use crate::vm::Vm;
use crate::wakeups::Wakeups;
use addr::Ipa;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::Relaxed;
use virtio::switch::MAX_PORTS;
use virtio::{Mac, Net, PartialCsum, PortId, Switch, SwitchStats, VirtioMmio};

/// Stations behind an uplink each network's switch remembers.
const SWITCH_TABLE: usize = Switch::DEFAULT_CAPACITY;

/// Sends a frame out of the machine's NIC, completing its checksum first if its sender left
/// one pending; `false` if it was dropped (the NIC's transmit ring is full, or the frame is
/// larger than it takes). Never waits for the device.
pub type UplinkSend = fn(&[u8], Option<PartialCsum>) -> bool;

/// Where a switch port leads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Free,
    /// VM `vm_id`'s NIC at virtio slot `slot`.
    Nic {
        vm_id: usize,
        slot: Ipa,
    },
    Uplink,
}

/// Counters of the machine's one uplink (atomics: counted outside the networks' lock).
struct UplinkCounters {
    sent: AtomicU64,
    send_dropped: AtomicU64,
    received: AtomicU64,
}

static UPLINK: UplinkCounters = UplinkCounters {
    sent: AtomicU64::new(0),
    send_dropped: AtomicU64::new(0),
    received: AtomicU64::new(0),
};

/// Counters of a network's uplink, for the statistics screen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UplinkStats {
    /// Frames sent out of the machine's NIC.
    pub sent: u64,
    /// Frames for the machine's NIC that it could not take (ring full, too large).
    pub send_dropped: u64,
    /// Frames the machine's NIC received and the switch forwarded.
    pub received: u64,
}

/// A network shared by the NICs that name it: a switch, and where each port leads.
struct Network {
    name: String,
    switch: Switch,
    /// By port.
    targets: Vec<Target>,
    /// The machine NIC's transmit, when this network has the uplink.
    uplink: Option<UplinkSend>,
}

static NETWORKS: Lock<Vec<Network>> = Lock::new(Class::Networks, Vec::new());

fn network_index(nets: &mut Vec<Network>, name: &str) -> usize {
    match nets.iter().position(|n| n.name == name) {
        Some(i) => i,
        None => {
            nets.push(Network {
                name: name.into(),
                switch: Switch::new(MAX_PORTS, SWITCH_TABLE),
                targets: vec![Target::Free; MAX_PORTS],
                uplink: None,
            });
            nets.len() - 1
        }
    }
}

/// Creates the networks the boot package's NICs name, each with its switch, once at boot:
/// they live as long as armhv, whether or not a VM on them runs, so that starting and stopping
/// VMs never grows or shrinks the table (the leak checks compare the heap with its baseline),
/// and an uplink can join a network whose VMs start later.
pub fn define<'a>(names: impl IntoIterator<Item = &'a str>) {
    let mut nets = NETWORKS.lock();
    for name in names {
        network_index(&mut nets, name);
    }
}

/// Gives VM `vm_id`'s NIC at virtio slot `slot`, whose MAC is `mac`, a port on network `name`
/// (created on first use); returns (network index, port). The switch knows the NIC by that MAC
/// from now on, and takes no frame from it with another source.
pub fn join(name: &str, vm_id: usize, slot: Ipa, mac: Mac) -> Result<(usize, usize), String> {
    let mut nets = NETWORKS.lock();
    let index = network_index(&mut nets, name);
    let net = &mut nets[index];
    let port =
        net.switch.free_port().ok_or_else(|| alloc::format!("network {name} has no free port"))?;
    net.switch
        .connect_vm(port, mac)
        .map_err(|e| alloc::format!("network {name}: its NIC cannot join: {e}"))?;
    net.targets[port] = Target::Nic { vm_id, slot };
    Ok((index, port))
}

/// Takes back the port [`join`] gave a NIC whose VM could not be built or has stopped: the
/// port is free and its MAC leaves the switch's table, so no frame is routed to that VM id any
/// more (nor to its next life, which joins again).
pub fn leave(network: usize, port: PortId) {
    let mut nets = NETWORKS.lock();
    let Some(net) = nets.get_mut(network) else { return };
    net.switch.disconnect(port);
    if let Some(target) = net.targets.get_mut(port) {
        *target = Target::Free;
    }
}

/// Makes the machine's NIC the uplink of network `name`, sending with `send`. The driver calls
/// it once its device works; [`from_uplink`] then takes what the NIC receives.
pub fn attach_uplink(name: &str, send: UplinkSend) -> Result<(), String> {
    let mut nets = NETWORKS.lock();
    let Some(index) = nets.iter().position(|n| n.name == name) else {
        return Err(alloc::format!("no VM NIC on network {name} was started"));
    };
    if nets.iter().any(|n| n.uplink.is_some()) {
        return Err("the machine's NIC is another network's uplink already".into());
    }
    let net = &mut nets[index];
    let port =
        net.switch.free_port().ok_or_else(|| alloc::format!("network {name} has no free port"))?;
    net.switch.connect_uplink(port).map_err(|e| alloc::format!("network {name}: {e}"))?;
    net.targets[port] = Target::Uplink;
    net.uplink = Some(send);
    Ok(())
}

/// Back to the state of a NIC just plugged in (its VM reset or stopped): frames not yet
/// forwarded are dropped. Its port and MAC stay: they are the configuration's, and a frame for
/// a VM that is down is dropped at its NIC, never sent to the uplink in its place.
pub fn reset_port(nic: &NicPort) {
    nic.clear_outbox();
}

/// After a trap on `vm`'s devices: its NICs' sent frames go through their switches. The
/// receivers' vCPUs to wake go into `wake`.
pub fn forward_frames(vm: &Vm, wake: &mut Wakeups) {
    for nic in &vm.nics {
        loop {
            let Some((frame, csum)) = nic.outbox.lock().pop() else { break };
            let (targets, uplink) = route(nic.network, nic.port, &frame);
            for (vm_id, slot) in targets {
                if let Some(dest) = registry::get(vm_id) {
                    deliver(&dest, slot, &frame, csum, wake);
                }
            }
            if let Some(send) = uplink {
                // No lock of the monitor is held here: the uplink's own comes first in the
                // order. The driver copies the frame into its device's buffer: `frame` is this
                // outbox's, freed when it has been forwarded.
                let counter = if send(&frame, csum) { &UPLINK.sent } else { &UPLINK.send_dropped };
                counter.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The VM NICs a frame from `port` of network `network` goes to, and the uplink's transmit if
/// it goes out too.
fn route(network: usize, port: PortId, frame: &[u8]) -> (Vec<(usize, Ipa)>, Option<UplinkSend>) {
    let mut nets = NETWORKS.lock();
    let Some(net) = nets.get_mut(network) else { return (Vec::new(), None) };
    let (nics, out) = route_locked(net, port, frame);
    (nics, net.uplink.filter(|_| out))
}

/// A frame the machine's NIC received, in its buffer: forwarded by the uplink's network's
/// switch to the VMs it is for (each gets its own copy, written straight into its receive
/// buffers; nothing is queued). The receivers' vCPUs to wake go into `wake`.
pub fn from_uplink(frame: &[u8], wake: &mut Wakeups) {
    UPLINK.received.fetch_add(1, Relaxed);
    let targets = {
        let mut nets = NETWORKS.lock();
        let Some(net) = nets.iter_mut().find(|n| n.uplink.is_some()) else { return };
        match net.switch.uplink() {
            Some(port) => route_locked(net, port, frame).0,
            None => Vec::new(),
        }
    };
    for (vm_id, slot) in targets {
        if let Some(dest) = registry::get(vm_id) {
            // Complete: frames from outside carry their checksums (the driver offers the
            // machine's NIC no checksum offload).
            deliver(&dest, slot, frame, None, wake);
        }
    }
}

/// The VM NICs a frame from `port` goes to, and whether it goes out of the uplink too.
fn route_locked(net: &mut Network, port: PortId, frame: &[u8]) -> (Vec<(usize, Ipa)>, bool) {
    let mut nics = Vec::new();
    let mut out = false;
    for p in net.switch.forward(port, frame).iter() {
        match net.targets.get(p) {
            Some(&Target::Nic { vm_id, slot }) => nics.push((vm_id, slot)),
            Some(Target::Uplink) => out = true,
            _ => {}
        }
    }
    (nics, out)
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

/// One network's counters, for the statistics screen.
pub struct NetworkStats {
    pub name: String,
    pub switch: SwitchStats,
    /// Stations learned behind the uplink now.
    pub learned: usize,
    /// `None` without an uplink.
    pub uplink: Option<UplinkStats>,
}

/// Every network's counters.
pub fn stats() -> Vec<NetworkStats> {
    NETWORKS
        .lock()
        .iter()
        .map(|n| NetworkStats {
            name: n.name.clone(),
            switch: n.switch.stats(),
            learned: n.switch.learned(),
            uplink: n.uplink.map(|_| UplinkStats {
                sent: UPLINK.sent.load(Relaxed),
                send_dropped: UPLINK.send_dropped.load(Relaxed),
                received: UPLINK.received.load(Relaxed),
            }),
        })
        .collect()
}
