//! An Ethernet switch inside the hypervisor: one port per VM NIC, and at
//! most one uplink port, the machine's own NIC.
//!
//! Pure forwarding logic, no frames stored: [`Switch::forward`] looks at a
//! frame's addresses and says which ports get it; the hypervisor then
//! delivers the frame to each of those VMs' NICs
//! ([`VirtioMmio::<Net>::deliver`](crate::VirtioMmio::deliver)) or sends it
//! out of the machine's NIC.
//!
//! A VM port is not a port of a learning bridge: each VM NIC has one MAC,
//! fixed by the configuration, and the address table is filled from it when
//! the port is connected. VM ports never learn, so a guest cannot take
//! another VM's traffic by sending with its address, nor push real stations
//! out of the table by sending from many made-up ones:
//!
//! * A frame from a VM port whose source is not that port's MAC is dropped
//!   (and counted as spoofed).
//! * A unicast destination that is a VM's MAC goes to that VM's port alone
//!   (never to the uplink); the sender's own MAC goes nowhere.
//! * Any other unicast destination from a VM goes to the uplink if there is
//!   one, and nowhere if there is none: a network without an uplink never
//!   sends anything out of the machine, and unknown unicast is not flooded
//!   to the other VMs (no VM has that address).
//! * Broadcast and multicast from a VM go to every other port, the uplink
//!   included.
//!
//! The uplink port is the one port that learns: the source addresses of the
//! stations behind it go into a table of their own, bounded, whose least
//! recently seen entry is evicted when it is full. It can never hold a VM's
//! address, and so never evicts or replaces a VM entry: a frame arriving on
//! the uplink with a VM's MAC as its source (a loop, or a station outside
//! claiming a VM's address) is dropped and counted as spoofed. A frame from
//! the uplink goes to the VM whose MAC it is addressed to; broadcast and
//! multicast go to every VM port; anything else is dropped (it is for a
//! station outside, which already had it).
//!
//! A frame never goes back out of its ingress port.

use alloc::vec;
use alloc::vec::Vec;

/// A switch port number, `0..ports`.
pub type PortId = usize;

/// Most ports of one switch (a [`Destinations`] is a 64-bit set).
pub const MAX_PORTS: usize = 64;

/// A MAC address.
pub type Mac = [u8; 6];

/// A set of ports a frame goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Destinations(u64);

impl Destinations {
    /// No port.
    pub const fn none() -> Self {
        Self(0)
    }

    /// Just `port` (ignored if it is not below [`MAX_PORTS`]).
    pub fn single(port: PortId) -> Self {
        Self(if port < MAX_PORTS { 1 << port } else { 0 })
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn contains(self, port: PortId) -> bool {
        port < MAX_PORTS && self.0 & (1 << port) != 0
    }

    /// The ports, lowest first.
    pub fn iter(self) -> impl Iterator<Item = PortId> {
        (0..MAX_PORTS).filter(move |&p| self.0 & (1 << p) != 0)
    }

    /// The set as a bit mask (bit `p` = port `p`).
    pub fn bits(self) -> u64 {
        self.0
    }

    /// The set without `port`.
    pub fn without(self, port: PortId) -> Self {
        Self(self.0 & !Self::single(port).0)
    }
}

/// Counters for the statistics screen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Frames sent to the one port their destination is on (a VM, or a
    /// station learned behind the uplink).
    pub unicast: u64,
    /// Unicast frames from a VM to an address no VM has and the uplink has
    /// not seen: sent to the uplink, or dropped on a network without one.
    pub unknown: u64,
    /// Broadcast and multicast frames, sent to every other port.
    pub flooded: u64,
    /// Frames sent nowhere: too short, from a port that is not connected,
    /// addressed to their own port, or arriving on the uplink for an address
    /// no VM has.
    pub dropped: u64,
    /// Frames dropped because their source address was not their port's:
    /// from a VM, not its configured MAC; from the uplink, a VM's MAC.
    pub spoofed: u64,
    /// Addresses learned behind the uplink.
    pub learned: u64,
    /// Learned addresses evicted from a full table.
    pub evicted: u64,
}

/// Why a port could not be connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortError {
    /// Not below the switch's port count.
    NoSuchPort,
    /// The port is connected already.
    InUse,
    /// A VM's MAC must be a unicast address other than all zeros.
    BadMac,
    /// Another VM port of this switch has the MAC.
    DuplicateMac,
    /// The switch has its uplink already.
    SecondUplink,
}

impl core::fmt::Display for PortError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::NoSuchPort => "no such port",
            Self::InUse => "the port is connected already",
            Self::BadMac => "a NIC's MAC must be a unicast address other than 00:00:00:00:00:00",
            Self::DuplicateMac => "another NIC on the network has the same MAC",
            Self::SecondUplink => "the network has an uplink already",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Port {
    Free,
    Vm(Mac),
    Uplink,
}

/// A station learned behind the uplink.
#[derive(Clone, Copy)]
struct Learned {
    mac: Mac,
    /// Value of the switch's frame counter when last seen.
    seen: u64,
}

/// An Ethernet switch of VM ports with configured MACs and an uplink port
/// that learns.
pub struct Switch {
    ports: Vec<Port>,
    uplink: Option<PortId>,
    /// Stations behind the uplink, at most `capacity` of them. Its memory is
    /// taken once, when the switch is made: learning never allocates, so the
    /// heap does not grow with what arrives from outside.
    learned: Vec<Learned>,
    capacity: usize,
    /// Frames seen so far: the clock of the least-recently-seen eviction.
    clock: u64,
    stats: SwitchStats,
}

fn is_group(mac: &Mac) -> bool {
    mac[0] & 1 != 0
}

fn mac_at(frame: &[u8], at: usize) -> Mac {
    let mut m = [0u8; 6];
    m.copy_from_slice(&frame[at..at + 6]);
    m
}

impl Switch {
    /// Default size of the uplink's address table.
    pub const DEFAULT_CAPACITY: usize = 64;

    /// A switch with `ports` ports (at most [`MAX_PORTS`]), none connected,
    /// and room for `capacity` stations behind its uplink (at least 1).
    pub fn new(ports: usize, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            ports: vec![Port::Free; ports.min(MAX_PORTS)],
            uplink: None,
            learned: Vec::with_capacity(capacity),
            capacity,
            clock: 0,
            stats: SwitchStats::default(),
        }
    }

    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// The lowest port not connected, if any.
    pub fn free_port(&self) -> Option<PortId> {
        self.ports.iter().position(|p| *p == Port::Free)
    }

    /// Connects a VM's NIC, whose one MAC is `mac`, to `port`.
    pub fn connect_vm(&mut self, port: PortId, mac: Mac) -> Result<(), PortError> {
        if is_group(&mac) || mac == [0; 6] {
            return Err(PortError::BadMac);
        }
        if self.ports.contains(&Port::Vm(mac)) {
            return Err(PortError::DuplicateMac);
        }
        self.connect(port, Port::Vm(mac))?;
        // A station outside that used this address before is not one any more.
        self.learned.retain(|l| l.mac != mac);
        Ok(())
    }

    /// Connects the machine's NIC to `port` as the switch's uplink.
    pub fn connect_uplink(&mut self, port: PortId) -> Result<(), PortError> {
        if self.uplink.is_some() {
            return Err(PortError::SecondUplink);
        }
        self.connect(port, Port::Uplink)?;
        self.uplink = Some(port);
        Ok(())
    }

    fn connect(&mut self, port: PortId, kind: Port) -> Result<(), PortError> {
        let slot = self.ports.get_mut(port).ok_or(PortError::NoSuchPort)?;
        if *slot != Port::Free {
            return Err(PortError::InUse);
        }
        *slot = kind;
        Ok(())
    }

    /// Frees `port`: a VM port's MAC leaves the table; the uplink forgets
    /// every station it learned.
    pub fn disconnect(&mut self, port: PortId) {
        if let Some(slot) = self.ports.get_mut(port) {
            if *slot == Port::Uplink {
                self.uplink = None;
                self.learned.clear();
            }
            *slot = Port::Free;
        }
    }

    /// The uplink's port, if the switch has one.
    pub fn uplink(&self) -> Option<PortId> {
        self.uplink
    }

    /// The MAC of VM port `port`, if it is one.
    pub fn vm_mac(&self, port: PortId) -> Option<Mac> {
        match self.ports.get(port) {
            Some(Port::Vm(mac)) => Some(*mac),
            _ => None,
        }
    }

    fn vm_port(&self, mac: &Mac) -> Option<PortId> {
        self.ports.iter().position(|p| *p == Port::Vm(*mac))
    }

    /// Every connected port but `from`; from the uplink, the VM ports only.
    fn flood(&self, from: PortId) -> Destinations {
        let mut d = 0u64;
        for (p, kind) in self.ports.iter().enumerate() {
            if p != from && *kind != Port::Free {
                d |= 1 << p;
            }
        }
        Destinations(d)
    }

    /// Which ports get `frame`, received on `from`.
    pub fn forward(&mut self, from: PortId, frame: &[u8]) -> Destinations {
        let kind = self.ports.get(from).copied().unwrap_or(Port::Free);
        if frame.len() < 14 || kind == Port::Free {
            self.stats.dropped += 1;
            return Destinations::none();
        }
        let (dst, src) = (mac_at(frame, 0), mac_at(frame, 6));
        self.clock += 1;
        match kind {
            Port::Vm(mine) => {
                if src != mine {
                    self.stats.spoofed += 1;
                    return Destinations::none();
                }
            }
            Port::Uplink => {
                if self.vm_port(&src).is_some() {
                    self.stats.spoofed += 1;
                    return Destinations::none();
                }
                if !is_group(&src) && src != [0; 6] {
                    self.learn(src);
                }
            }
            Port::Free => unreachable!("checked above"),
        }
        if is_group(&dst) {
            self.stats.flooded += 1;
            return self.flood(from);
        }
        if let Some(to) = self.vm_port(&dst) {
            if to == from {
                self.stats.dropped += 1;
                return Destinations::none();
            }
            self.stats.unicast += 1;
            return Destinations::single(to);
        }
        // Not a VM's address: a station outside, or nobody.
        let from_vm = matches!(kind, Port::Vm(_));
        match self.uplink {
            Some(up) if from_vm => {
                if self.learned.iter().any(|l| l.mac == dst) {
                    self.stats.unicast += 1;
                } else {
                    self.stats.unknown += 1;
                }
                Destinations::single(up)
            }
            // No uplink (or the frame came in on it, for a station no VM is): it stays inside.
            _ => {
                if from_vm {
                    self.stats.unknown += 1;
                } else {
                    self.stats.dropped += 1;
                }
                Destinations::none()
            }
        }
    }

    /// Records `mac` as a station behind the uplink (never a VM's MAC: the
    /// caller dropped those).
    fn learn(&mut self, mac: Mac) {
        let seen = self.clock;
        if let Some(l) = self.learned.iter_mut().find(|l| l.mac == mac) {
            l.seen = seen;
            return;
        }
        if self.learned.len() >= self.capacity {
            // Full: O(n) search for the stalest entry, only on a miss.
            if let Some(stalest) =
                self.learned.iter().enumerate().min_by_key(|(_, l)| l.seen).map(|(i, _)| i)
            {
                self.learned.swap_remove(stalest);
                self.stats.evicted += 1;
            }
        }
        self.learned.push(Learned { mac, seen });
        self.stats.learned += 1;
    }

    /// The port `mac` is on: a VM's port, or the uplink's for a station
    /// learned behind it.
    pub fn lookup(&self, mac: &Mac) -> Option<PortId> {
        self.vm_port(mac)
            .or_else(|| self.uplink.filter(|_| self.learned.iter().any(|l| l.mac == *mac)))
    }

    /// Number of stations learned behind the uplink.
    pub fn learned(&self) -> usize {
        self.learned.len()
    }

    pub fn stats(&self) -> SwitchStats {
        self.stats
    }
}
