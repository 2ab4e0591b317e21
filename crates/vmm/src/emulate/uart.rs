//! A VM's PL011 wired to the shared console: the portable device model assembles lines, this
//! adapter prints them tagged with the VM's name, feeds it console input and reports its
//! interrupt line.

use super::vgic::DeviceIrq;
use crate::arch::console;
use alloc::collections::VecDeque;
use alloc::string::String;
use core::sync::atomic::{AtomicUsize, Ordering};
use vdev::{AccessWidth, MmioDevice, MmioError, Pl011};

/// Console input held for the guest while its receive FIFO is full.
const BACKLOG_MAX: usize = 4096;

/// The VM that console input goes to, whose partial lines are shown at once; `usize::MAX`
/// while armhv takes no console input. The console multiplexer sets it.
static FOCUS: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The VM with the console's focus, if console input is taken at all.
pub fn focused() -> Option<usize> {
    let vm = FOCUS.load(Ordering::Relaxed);
    (vm != usize::MAX).then_some(vm)
}

pub fn set_focus(vm: usize) {
    FOCUS.store(vm, Ordering::Relaxed);
}

pub struct VmUart {
    vm_id: usize,
    vm_name: String,
    irq: DeviceIrq,
    pl011: Pl011,
    backlog: VecDeque<u8>,
}

impl VmUart {
    pub fn new(vm_id: usize, vm_name: &str, intid: u32) -> Self {
        Self {
            vm_id,
            vm_name: vm_name.into(),
            irq: DeviceIrq::new(intid),
            pl011: Pl011::new(),
            backlog: VecDeque::new(),
        }
    }

    /// Back to the power-on state (VM reset); output not yet printed is flushed first.
    pub fn reset(&mut self) {
        self.flush();
        self.pl011.reset();
        self.backlog = VecDeque::new();
    }

    /// Prints what is left of an unfinished line (when the VM stops).
    pub fn flush(&mut self) {
        let (id, name) = (self.vm_id, &self.vm_name);
        self.pl011.flush_partial(&mut |line| console::print_vm_line(id, name, line));
    }

    /// One byte of console input; false if even the backlog is full (the byte is dropped).
    pub fn input(&mut self, byte: u8) -> bool {
        if self.backlog.is_empty() && self.pl011.push_input(byte) {
            return true;
        }
        if self.backlog.len() >= BACKLOG_MAX {
            return false;
        }
        self.backlog.push_back(byte);
        true
    }

    fn refill(&mut self) {
        while let Some(&b) = self.backlog.front() {
            if !self.pl011.push_input(b) {
                break;
            }
            self.backlog.pop_front();
        }
    }

    fn print_output(&mut self) {
        let (id, name) = (self.vm_id, &self.vm_name);
        self.pl011.drain_lines(&mut |line| console::print_vm_line(id, name, line));
        if focused() == Some(id) {
            // The VM being typed at: show prompts and echoes at once.
            self.pl011.flush_partial(&mut |text| console::print_vm_partial(id, name, text));
        }
    }
}

impl MmioDevice for VmUart {
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        let value = self.pl011.read(offset, width)?;
        self.refill();
        Ok(value)
    }

    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.pl011.write(offset, width, value)?;
        self.print_output();
        Ok(())
    }

    fn name(&self) -> &'static str {
        "pl011"
    }

    fn irq_change(&mut self) -> Option<(u32, bool)> {
        self.irq.change(self.pl011.irq_level())
    }
}
