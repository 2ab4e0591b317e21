//! An Ethernet switch inside the hypervisor: one port per VM NIC.
//!
//! Pure forwarding logic, no frames stored: [`Switch::forward`] looks at a
//! frame's addresses and says which ports get it; the hypervisor then
//! delivers the frame to each of those VMs' NICs
//! ([`VirtioMmio::<Net>::deliver`](crate::VirtioMmio::deliver)).
//!
//! The rules of a learning bridge (IEEE 802.1D's, minus spanning tree,
//! which a star of virtual ports never needs):
//!
//! * The source address of every frame is learned for its ingress port
//!   (unicast sources only: a group address as source is bogus).
//! * A unicast destination learned on a port goes to that port alone;
//!   learned on the ingress port itself, it goes nowhere (the station is
//!   on the sender's side).
//! * Broadcast, multicast and unknown unicast destinations are flooded to
//!   every port except the ingress port.
//! * A frame never goes back out of its ingress port.
//!
//! The address table is bounded; when full, the entry seen least recently
//! is evicted. Stations that stay silent are simply relearned when they
//! next send, and until then their frames are flooded, as on any switch.

use alloc::collections::BTreeMap;

/// A switch port number, `0..ports`.
pub type PortId = usize;

/// Most ports of one switch (a [`Destinations`] is a 64-bit set).
pub const MAX_PORTS: usize = 64;

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
}

/// Counters for the statistics screen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Frames sent to the one port their destination was learned on.
    pub unicast: u64,
    /// Frames flooded (broadcast, multicast, unknown unicast).
    pub flooded: u64,
    /// Frames sent nowhere: too short, from an unknown port, or addressed
    /// to a station on their own port.
    pub dropped: u64,
    /// Addresses learned or moved to another port.
    pub learned: u64,
    /// Addresses evicted from a full table.
    pub evicted: u64,
}

struct Entry {
    port: PortId,
    /// Value of the switch's frame counter when last seen.
    seen: u64,
}

/// A learning Ethernet switch.
pub struct Switch {
    ports: usize,
    capacity: usize,
    table: BTreeMap<[u8; 6], Entry>,
    /// Frames seen so far: the clock of the least-recently-seen eviction.
    clock: u64,
    stats: SwitchStats,
}

fn is_group(mac: &[u8; 6]) -> bool {
    mac[0] & 1 != 0
}

impl Switch {
    /// Default size of the address table.
    pub const DEFAULT_CAPACITY: usize = 256;

    /// A switch with `ports` ports (at most [`MAX_PORTS`]) and room for
    /// `capacity` addresses (at least 1).
    pub fn new(ports: usize, capacity: usize) -> Self {
        Self {
            ports: ports.min(MAX_PORTS),
            capacity: capacity.max(1),
            table: BTreeMap::new(),
            clock: 0,
            stats: SwitchStats::default(),
        }
    }

    pub fn ports(&self) -> usize {
        self.ports
    }

    /// Which ports get `frame`, received on `from`.
    pub fn forward(&mut self, from: PortId, frame: &[u8]) -> Destinations {
        let (Some(dst), Some(src)) = (frame.get(0..6), frame.get(6..12)) else {
            self.stats.dropped += 1;
            return Destinations::none();
        };
        if from >= self.ports || frame.len() < 14 {
            self.stats.dropped += 1;
            return Destinations::none();
        }
        let mut d = [0u8; 6];
        d.copy_from_slice(dst);
        let mut s = [0u8; 6];
        s.copy_from_slice(src);
        self.clock += 1;
        if !is_group(&s) && s != [0; 6] {
            self.learn(s, from);
        }
        if !is_group(&d)
            && let Some(e) = self.table.get(&d)
        {
            if e.port == from {
                self.stats.dropped += 1;
                return Destinations::none();
            }
            self.stats.unicast += 1;
            return Destinations::single(e.port);
        }
        self.stats.flooded += 1;
        self.all_but(from)
    }

    fn all_but(&self, from: PortId) -> Destinations {
        let all = if self.ports == MAX_PORTS { u64::MAX } else { (1u64 << self.ports) - 1 };
        Destinations(all & !(1 << from))
    }

    fn learn(&mut self, mac: [u8; 6], port: PortId) {
        let seen = self.clock;
        if let Some(e) = self.table.get_mut(&mac) {
            if e.port != port {
                self.stats.learned += 1;
            }
            *e = Entry { port, seen };
            return;
        }
        if self.table.len() >= self.capacity {
            // Full: O(n) search for the stalest entry, only on a miss.
            if let Some(old) = self.table.iter().min_by_key(|(_, e)| e.seen).map(|(m, _)| *m) {
                self.table.remove(&old);
                self.stats.evicted += 1;
            }
        }
        self.table.insert(mac, Entry { port, seen });
        self.stats.learned += 1;
    }

    /// The port `mac` was learned on.
    pub fn lookup(&self, mac: &[u8; 6]) -> Option<PortId> {
        self.table.get(mac).map(|e| e.port)
    }

    /// Forgets every address learned on `port` (its VM stopped or reset).
    pub fn forget_port(&mut self, port: PortId) {
        self.table.retain(|_, e| e.port != port);
        if self.table.is_empty() {
            // An emptied map keeps its root node; a new one holds no memory at all, so a
            // network whose VMs have all stopped holds none either.
            self.table = BTreeMap::new();
        }
    }

    /// Number of learned addresses.
    pub fn learned(&self) -> usize {
        self.table.len()
    }

    pub fn stats(&self) -> SwitchStats {
        self.stats
    }
}
