//! A VM's PL011 wired to the shared console: the portable device model assembles lines, this
//! adapter prints each one tagged with the VM's name.

use crate::console;
use alloc::string::String;
use vdev::{AccessWidth, MmioDevice, MmioError, Pl011};

pub struct VmUart {
    vm_name: String,
    pl011: Pl011,
}

impl VmUart {
    pub fn new(vm_name: &str) -> Self {
        Self { vm_name: vm_name.into(), pl011: Pl011::new() }
    }
}

impl VmUart {
    /// Back to the power-on state (VM reset); output not yet printed is flushed first.
    pub fn reset(&mut self) {
        self.flush();
        self.pl011.reset();
    }

    /// Prints what is left of an unfinished line (when the VM stops).
    pub fn flush(&mut self) {
        let name = &self.vm_name;
        self.pl011.flush_partial(&mut |line| console::print_vm_line(name, line));
    }
}

impl MmioDevice for VmUart {
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.pl011.read(offset, width)
    }

    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.pl011.write(offset, width, value)?;
        let name = &self.vm_name;
        self.pl011.drain_lines(&mut |line| console::print_vm_line(name, line));
        Ok(())
    }

    fn name(&self) -> &'static str {
        "pl011"
    }
}
