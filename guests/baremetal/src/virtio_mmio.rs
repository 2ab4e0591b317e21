//! The driver side of a virtio-mmio (version 2) transport, as far as the bare-metal guests
//! share it: the register map, the status handshake and queue 0's setup (virtio 1.2, 4.2.2,
//! 3.1.1 and 4.2.3.2). Each guest keeps its own rings: `vmbench` a typed one-buffer queue,
//! `hostile` a raw area it fills with hostile chains.

use crate::cpu;

/// Register offsets. The device model's map (`virtio::mmio::regs`) is not reused: that crate
/// needs an allocator, which the bare-metal guests do not have.
pub mod reg {
    pub const MAGIC_VALUE: u64 = 0x000;
    pub const VERSION: u64 = 0x004;
    pub const DEVICE_ID: u64 = 0x008;
    pub const DEVICE_FEATURES: u64 = 0x010;
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    pub const DRIVER_FEATURES: u64 = 0x020;
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    pub const QUEUE_SEL: u64 = 0x030;
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    pub const QUEUE_NUM: u64 = 0x038;
    pub const QUEUE_READY: u64 = 0x044;
    pub const QUEUE_NOTIFY: u64 = 0x050;
    pub const INTERRUPT_STATUS: u64 = 0x060;
    pub const INTERRUPT_ACK: u64 = 0x064;
    pub const STATUS: u64 = 0x070;
    pub const QUEUE_DESC: u64 = 0x080;
    pub const QUEUE_DRIVER: u64 = 0x090;
    pub const QUEUE_DEVICE: u64 = 0x0a0;
    pub const CONFIG: u64 = 0x100;
}

/// "virt" in little-endian.
pub const MAGIC: u32 = 0x7472_6976;
pub const DEVICE_ID_NET: u32 = 1;
pub const DEVICE_ID_BLOCK: u32 = 2;
pub const DEVICE_ID_CONSOLE: u32 = 3;
pub const DEVICE_ID_ENTROPY: u32 = 4;

// Device status bits.
pub const ACKNOWLEDGE: u32 = 1;
pub const DRIVER: u32 = 2;
pub const DRIVER_OK: u32 = 4;
pub const FEATURES_OK: u32 = 8;
pub const DEVICE_NEEDS_RESET: u32 = 64;

/// VIRTIO_F_VERSION_1 is feature bit 32: bit 0 of feature word 1.
pub const VERSION_1_WORD1: u32 = 1;

/// One device's register window, at the address the device tree gives.
#[derive(Clone, Copy)]
pub struct Regs(pub u64);

impl Regs {
    /// One plain `ldr`/`str` per access (inline assembly): a hypervisor decodes a trapped
    /// access from its syndrome, which a load or store with writeback (what the compiler may
    /// emit for a volatile access in a loop) does not give.
    pub fn read(self, offset: u64) -> u32 {
        let v: u32;
        // SAFETY: a register of the virtio-mmio device the device tree names; reading it
        // changes no Rust-visible memory.
        unsafe {
            core::arch::asm!("ldr {v:w}, [{a}]", a = in(reg) self.0 + offset, v = out(reg) v,
                options(nostack, readonly))
        };
        v
    }

    pub fn write(self, offset: u64, value: u32) {
        // SAFETY: a register of the virtio-mmio device the device tree names. The device then
        // works only on memory the driver gave it (volatile cells), or refuses.
        unsafe {
            core::arch::asm!("str {v:w}, [{a}]", a = in(reg) self.0 + offset, v = in(reg) value,
                options(nostack))
        };
    }

    /// The DeviceID if a virtio-mmio device is here (0: an empty slot).
    pub fn probe(self) -> Option<u32> {
        (self.read(reg::MAGIC_VALUE) == MAGIC).then(|| self.read(reg::DEVICE_ID))
    }

    pub fn status(self) -> u32 {
        self.read(reg::STATUS)
    }

    /// Writes 0 to Status and waits (at most `tries` polls) until the device reads back 0:
    /// it has forgotten its queues and no longer uses the driver's memory.
    pub fn reset(self, tries: u32) -> bool {
        self.write(reg::STATUS, 0);
        for _ in 0..tries {
            if self.status() == 0 {
                return true;
            }
            cpu::yield_now();
        }
        false
    }

    /// Feature word `word` the device offers.
    pub fn device_features(self, word: u32) -> u32 {
        self.write(reg::DEVICE_FEATURES_SEL, word);
        self.read(reg::DEVICE_FEATURES)
    }

    /// After a reset: ACKNOWLEDGE, then DRIVER (the device's features may be read now).
    pub fn acknowledge(self) {
        self.write(reg::STATUS, ACKNOWLEDGE);
        self.write(reg::STATUS, ACKNOWLEDGE | DRIVER);
    }

    /// After [`Regs::acknowledge`]: the driver's two feature words, then FEATURES_OK.
    /// Err: the status when the device refused the features.
    pub fn negotiate(self, word0: u32, word1: u32) -> Result<(), u32> {
        for (sel, value) in [(0, word0), (1, word1)] {
            self.write(reg::DRIVER_FEATURES_SEL, sel);
            self.write(reg::DRIVER_FEATURES, value);
        }
        self.write(reg::STATUS, ACKNOWLEDGE | DRIVER | FEATURES_OK);
        let status = self.status();
        if status & FEATURES_OK == 0 { Err(status) } else { Ok(()) }
    }

    /// Queue 0 with `size` entries at these ring addresses, ready, then DRIVER_OK.
    pub fn start_queue0(self, size: u32, desc: u64, driver: u64, device: u64) {
        self.setup_queue(0, size, desc, driver, device);
        self.driver_ok();
    }

    /// Queue `index` with `size` entries at these ring addresses, ready (before DRIVER_OK).
    pub fn setup_queue(self, index: u32, size: u32, desc: u64, driver: u64, device: u64) {
        self.write(reg::QUEUE_SEL, index);
        self.write(reg::QUEUE_NUM, size);
        for (offset, addr) in
            [(reg::QUEUE_DESC, desc), (reg::QUEUE_DRIVER, driver), (reg::QUEUE_DEVICE, device)]
        {
            self.write(offset, addr as u32);
            self.write(offset + 4, (addr >> 32) as u32);
        }
        self.write(reg::QUEUE_READY, 1);
    }

    /// The handshake's last step: the driver is ready and the device goes live.
    pub fn driver_ok(self) {
        self.write(reg::STATUS, ACKNOWLEDGE | DRIVER | FEATURES_OK | DRIVER_OK);
    }

    /// Clears the device's interrupt: InterruptACK of every InterruptStatus bit set, so the
    /// level-sensitive line drops.
    pub fn acknowledge_interrupt(self) {
        let status = self.read(reg::INTERRUPT_STATUS);
        self.write(reg::INTERRUPT_ACK, status);
    }
}
