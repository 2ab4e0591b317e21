//! The uplink: the machine's own NIC (the first virtio-net device among its virtio-mmio
//! transports, QEMU `-device virtio-net-device`), driven with `virtio-drivers`' raw net driver
//! as one more port of the network the config names (`[[network]]` `uplink = true`; the
//! switch's rules are in `crates/virtio/src/switch.rs`).
//!
//! ```text
//!  VM NIC --outbox copy--> switch --> send(): copy into a tx buffer --> machine NIC
//!  machine NIC --interrupt--> on_interrupt(): rx buffer --> switch --> copy into the VM's rx chain
//! ```
//!
//! Receive is interrupt-driven: the handler acknowledges the device's interrupt, then takes at
//! most one ring's worth of received frames and gives each buffer straight back to the device.
//! Transmit never waits for the device: finished buffers are reclaimed on the way, and a frame
//! that finds no free buffer is dropped (and counted by the network), as by a NIC whose ring is
//! full. The NIC's state is behind one lock of class `Uplink`, which comes before `Devices` in
//! the lock order: the handler delivers into VMs while it holds the receive buffer.

use super::virtio_hal::FramePool;
use crate::platform::{Platform, Range, VirtioWindow};
use core::ptr::NonNull;
use virtio::PartialCsum;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
use virtio_drivers::transport::{DeviceType, Transport};
use vmm::emulate::network;
use vmm::frames::{self, Frames};
use vmm::sync::{Class, Lock};
use vmm::wakeups::Wakeups;

/// Descriptors per virtqueue, and buffers per direction: each buffer is one descriptor.
const QUEUE: usize = 64;
/// Bytes per buffer: the virtio-net header (10 or 12 bytes) and an Ethernet frame of up to 1514
/// bytes (the driver offers no segmentation offload and no mergeable buffers, so the device
/// sends none larger).
const BUF: usize = 2048;
/// Frames of the pool holding one direction's buffers.
const AREA_FRAMES: usize = QUEUE * BUF / 4096;

/// How to make the machine's NIC work, for the messages of a network that runs without it.
const FIX: &str = "on QEMU, add -netdev user,id=uplink0 -device virtio-net-device,netdev=uplink0 \
                   (cargo xtask run adds it when the config has an uplink)";

/// One direction's buffers: `QUEUE` of `BUF` bytes, in frames owned for as long as armhv runs.
struct Buffers {
    area: Frames,
}

impl Buffers {
    fn new() -> Option<Self> {
        let mut area = frames::alloc(AREA_FRAMES)?;
        area.zero();
        Some(Self { area })
    }

    /// Buffer `i` (below `QUEUE`).
    #[allow(clippy::mut_from_ref)] // the buffers are DMA memory, shared with the device by design
    fn get(&self, i: usize) -> &mut [u8] {
        assert!(i < QUEUE);
        let start = self.area.pa().0 as usize + i * BUF;
        // SAFETY: buffer `i` lies inside `area`, identity-mapped RAM this value owns. The driver
        // takes each buffer only while it owns it (posted to the device, or being filled or read
        // between two calls of the queue), never two borrows of one buffer at a time.
        unsafe { core::slice::from_raw_parts_mut(start as *mut u8, BUF) }
    }
}

struct Nic {
    net: VirtIONetRaw<FramePool, MmioTransport<'static>, QUEUE>,
    rx: Buffers,
    tx: Buffers,
    /// The receive buffer posted under each token (a token is a descriptor index).
    rx_of_token: [u8; QUEUE],
    /// The transmit buffer, and its length, sent under each token.
    tx_of_token: [(u8, u16); QUEUE],
    /// Transmit buffers not in the device's hands.
    tx_free: heapless::Vec<u8, QUEUE>,
    /// Received frames the device reported as shorter than their header (dropped).
    rx_errors: u64,
}

// SAFETY: the NIC is used only under `UPLINK`'s lock, by one CPU at a time; its MMIO pointers
// and DMA buffers are identity-mapped and valid from every CPU.
unsafe impl Send for Nic {}

static UPLINK: Lock<Option<Nic>> = Lock::new(Class::Uplink, None);

impl Nic {
    /// Gives receive buffer `i` to the device.
    fn post_rx(&mut self, i: usize) -> Result<(), virtio_drivers::Error> {
        // SAFETY: buffer `i` is ours (never posted, or taken back by `receive_complete`), and
        // stays untouched by armhv until the device returns it under the token.
        let token = unsafe { self.net.receive_begin(self.rx.get(i)) }?;
        self.rx_of_token[usize::from(token)] = i as u8;
        Ok(())
    }

    /// Takes back the transmit buffers the device has finished with.
    fn reclaim_tx(&mut self) {
        while let Some(token) = self.net.poll_transmit() {
            let (i, len) = self.tx_of_token[usize::from(token) % QUEUE];
            // SAFETY: the buffer and length `transmit_begin` got for this token.
            if unsafe {
                self.net.transmit_complete(token, &self.tx.get(usize::from(i))[..usize::from(len)])
            }
            .is_err()
            {
                break; // not the device's next used element: leave the ring as it is
            }
            let _ = self.tx_free.push(i);
        }
    }

    /// Sends `frame` (completing its checksum if it is pending) without waiting.
    fn send(&mut self, frame: &[u8], csum: Option<PartialCsum>) -> bool {
        self.reclaim_tx();
        let Some(i) = self.tx_free.pop() else { return false };
        let buf = self.tx.get(usize::from(i));
        let Ok(hdr) = self.net.fill_buffer_header(buf) else { return self.unsend(i) };
        let len = hdr + frame.len();
        if len > BUF {
            return self.unsend(i);
        }
        // The one copy on this path besides the outbox's: the driver sends one buffer with the
        // virtio-net header in front, and the device reads it after the trap that sent the
        // frame has returned, when the outbox's copy is gone.
        buf[hdr..len].copy_from_slice(frame);
        if let Some(c) = csum
            && !c.apply(&mut buf[hdr..len])
        {
            return self.unsend(i);
        }
        // SAFETY: buffer `i` is ours until `reclaim_tx` takes it back under the token, and armhv
        // does not touch it meanwhile.
        match unsafe { self.net.transmit_begin(&buf[..len]) } {
            Ok(token) => {
                self.tx_of_token[usize::from(token) % QUEUE] = (i, len as u16);
                true
            }
            Err(_) => self.unsend(i),
        }
    }

    fn unsend(&mut self, i: u8) -> bool {
        let _ = self.tx_free.push(i);
        false
    }

    /// Takes what the device has received, at most one ring's worth, through the switch.
    fn receive(&mut self, wake: &mut Wakeups) {
        for _ in 0..QUEUE {
            let Some(token) = self.net.poll_receive() else { return };
            let i = usize::from(self.rx_of_token[usize::from(token) % QUEUE]);
            let buf = self.rx.get(i);
            // SAFETY: the buffer `receive_begin` got for this token.
            match unsafe { self.net.receive_complete(token, buf) } {
                // No copy here: the switch's delivery writes the frame from this buffer straight
                // into each receiving VM's own receive buffers.
                Ok((hdr, len)) => network::from_uplink(&buf[hdr..hdr + len], wake),
                // Popped, but shorter than its header: dropped, the buffer reused.
                Err(virtio_drivers::Error::IoError) => self.rx_errors += 1,
                Err(e) => {
                    log::error!(
                        "uplink: the machine's NIC returned a receive buffer out of order ({e})"
                    );
                    return;
                }
            }
            if let Err(e) = self.post_rx(i) {
                log::error!(
                    "uplink: a receive buffer could not be given back to the machine's NIC ({e})"
                );
                return;
            }
        }
    }
}

/// The NIC's interrupt: acknowledged first, so that anything the device completes after the
/// drain below raises it again; then finished transmits are reclaimed and received frames
/// forwarded. Bounded: one ring's worth of frames per interrupt (what is left raised the line
/// again when the device completed it, after the acknowledgement).
fn on_interrupt(wake: &mut Wakeups) {
    let mut guard = UPLINK.lock();
    let Some(nic) = guard.as_mut() else { return };
    nic.net.ack_interrupt();
    nic.reclaim_tx();
    nic.receive(wake);
}

/// The network's transmit into the machine's NIC (`network::UplinkSend`).
fn send(frame: &[u8], csum: Option<PartialCsum>) -> bool {
    UPLINK.lock().as_mut().is_some_and(|nic| nic.send(frame, csum))
}

/// Makes the machine's NIC the uplink of network `name`, taking its interrupt on the CPU with
/// affinity `mpidr`. Without a NIC, or if it does not start, says why and how to fix it: the
/// network runs without its uplink.
pub fn start(platform: &Platform, name: &str, mpidr: u64) {
    let Some((window, transport)) = find(platform) else {
        log::error!(
            "network {name}: the config gives it the machine's NIC as uplink, but the machine has \
             no virtio-net device; the network runs without its uplink. Fix: {FIX}"
        );
        return;
    };
    let fail = |why: &dyn core::fmt::Display| {
        log::error!(
            "network {name}: the machine's NIC at {:#x} cannot be its uplink: {why}; the network \
             runs without it. Fix: {FIX}",
            window.reg.start
        );
    };
    let Some((intid, flags)) = window.interrupt else {
        return fail(&"the device tree gives its transport no interrupt");
    };
    let net = match VirtIONetRaw::<FramePool, _, QUEUE>::new(transport) {
        Ok(net) => net,
        Err(e) => return fail(&format_args!("the virtio-net driver failed to start it ({e})")),
    };
    let (Some(rx), Some(tx)) = (Buffers::new(), Buffers::new()) else {
        return fail(&"no free frames for its buffers");
    };
    let mut nic = Nic {
        net,
        rx,
        tx,
        rx_of_token: [0; QUEUE],
        tx_of_token: [(0, 0); QUEUE],
        tx_free: (0..QUEUE as u8).collect(),
        rx_errors: 0,
    };
    for i in 0..QUEUE {
        if let Err(e) = nic.post_rx(i) {
            return fail(&format_args!("its receive ring refused a buffer ({e})"));
        }
    }
    let mac = nic.net.mac_address();
    *UPLINK.lock() = Some(nic);
    if let Err(why) = network::attach_uplink(name, send) {
        *UPLINK.lock() = None; // dropping the driver takes the rings back from the device
        return fail(&why);
    }
    if let Err(why) = vmm::irq::set_device_handler(intid, on_interrupt) {
        return fail(&format_args!("its interrupt {intid}: {why}"));
    }
    // Level or edge as the device tree says (flags bits 0..3: 1 = rising edge, 4 = high level).
    // Either works: the handler acknowledges the device before it drains the rings.
    let level = VirtioWindow::level(flags);
    if let Err(why) = super::gic::route_spi(intid, mpidr, level) {
        return fail(&format_args!("its interrupt {intid}: {why}"));
    }
    // Whatever arrived before the interrupt was routed: an edge then is lost, so drain once.
    let mut wake = Wakeups::default();
    on_interrupt(&mut wake);
    vmm::sched::wake(&wake);
    log::info!(
        "network {name}: uplink through the machine's NIC at {:#x} (MAC {}, interrupt {intid})",
        window.reg.start,
        Mac(mac)
    );
}

/// The machine's first virtio-net device: its window and transport.
fn find(platform: &Platform) -> Option<(VirtioWindow, MmioTransport<'static>)> {
    for &found in &platform.virtio_mmio {
        let window = found.reg;
        if window.size < 0x100 || device_id(window) != Some(VIRTIO_ID_NET) {
            continue;
        }
        let Some(header) = NonNull::new(window.start as *mut VirtIOHeader) else { continue };
        // SAFETY: the device tree names this window a virtio-mmio transport; main.rs maps it as
        // device memory for good, and nothing else in armhv drives its virtio-net device.
        let Ok(transport) = (unsafe { MmioTransport::new(header, window.size as usize) }) else {
            continue; // an unsupported version
        };
        if transport.device_type() == DeviceType::Network {
            return Some((found, transport));
        }
    }
    None
}

/// `VIRTIO_ID_NET`: a transport's DeviceID register for a network device.
const VIRTIO_ID_NET: u32 = 1;

/// The device ID of the virtio-mmio transport at `window`, if its MagicValue is right. Read
/// directly rather than through an `MmioTransport`: dropping one resets its device, and the
/// other transports' devices may be in use (the machine disk).
fn device_id(window: Range) -> Option<u32> {
    let base = window.start as *const u32;
    // SAFETY: MagicValue (offset 0) and DeviceID (offset 8) are read-only registers of every
    // virtio-mmio transport, inside the window main.rs maps as device memory; reading them has
    // no effect on the device.
    let (magic, id) = unsafe { (base.read_volatile(), base.add(2).read_volatile()) };
    (magic == 0x7472_6976).then_some(id) // "virt", little-endian
}

/// A MAC address as `52:54:00:12:34:56`.
struct Mac([u8; 6]);

impl core::fmt::Display for Mac {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

/// The uplink's own counters for the statistics screen, if there is one: receive buffers the
/// device returned shorter than their header.
pub fn rx_errors() -> Option<u64> {
    UPLINK.lock().as_ref().map(|nic| nic.rx_errors)
}
