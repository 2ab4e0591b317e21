//! Registers of devices assigned to VMs, which armhv writes only to quiesce them at their VM's
//! stop or reset (`vmm::emulate::passthrough::quiesce`). Their windows are mapped into armhv's
//! own page tables when the VM is built ([`map`]), and a write anywhere else is refused.

use super::mmu;
use alloc::vec::Vec;

/// The windows mapped by [`map`]: (start, end).
static WINDOWS: spin::Mutex<Vec<(u64, u64)>> = spin::Mutex::new(Vec::new());

/// Maps the registers `start..end` of a device assigned to a VM (page aligned, outside RAM and
/// armhv's own devices: the loader checked both), so that armhv can quiesce it.
pub fn map(start: u64, end: u64) -> Result<(), &'static str> {
    let mut windows = WINDOWS.lock();
    if windows.iter().any(|&(s, e)| s == start && e == end) {
        return Ok(());
    }
    mmu::map_device_late(start, end)?;
    windows.push((start, end));
    Ok(())
}

/// Writes a 32-bit device register at `pa`, inside a window [`map`] mapped.
pub fn write32(pa: u64, value: u32) -> Result<(), &'static str> {
    let mapped = WINDOWS.lock().iter().any(|&(s, e)| pa >= s && pa.saturating_add(4) <= e);
    if !mapped || !pa.is_multiple_of(4) {
        return Err("the register is not in a window mapped for an assigned device");
    }
    // SAFETY: `pa` is a 4-byte aligned register inside a window `map` identity-mapped as
    // Device memory, which lies outside RAM (the loader refuses a device that overlaps it or
    // armhv's own devices), so no Rust object is behind it; the device is of a kind that
    // masters no DMA, so writing its register cannot change memory armhv owns.
    unsafe { (pa as *mut u32).write_volatile(value) };
    Ok(())
}
