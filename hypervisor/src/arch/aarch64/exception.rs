//! Exceptions taken by armhv itself (not by a guest): always a bug in armhv or a hardware
//! error. The report names the exception class, decodes ESR/FAR/ELR and the CPU, then that CPU
//! stops; the others carry on.

use crate::arch::aarch64::{cpu, firmware};

/// Register frame that vectors.S builds on the stack.
#[repr(C)]
pub struct HypFrame {
    pub x: [u64; 31],
    pub elr: u64,
    pub spsr: u64,
    pub esr: u64,
    pub far: u64,
}

const KIND_NAMES: [&str; 4] = ["synchronous", "IRQ", "FIQ", "SError"];

#[unsafe(no_mangle)]
extern "C" fn hyp_exception(kind: u64, frame: &mut HypFrame) {
    if kind == 3 && in_guest_serror_window(frame.elr) {
        // A guest's SError, flushed at its exit (cpu::take_pending_serror): taking it consumed
        // it; the exit reports it to the VM's monitor.
        frame.x[0] = 1;
        return;
    }
    let name = KIND_NAMES.get(kind as usize).copied().unwrap_or("unknown");
    if kind == 1 {
        // armhv does not unmask interrupts at EL2 yet; one arriving is spurious.
        log::warn!("spurious IRQ at EL2 (ELR {:#x})", frame.elr);
        return;
    }
    // Not `log`: the report must get out even if the console lock is never released.
    let mut out = crate::console::fatal_output();
    out.line(format_args!(
        "FATAL: {} exception in armhv on CPU {}: {}",
        name,
        cpu::current(),
        trap::Esr(frame.esr)
    ));
    out.line(format_args!(
        "  ELR_EL2 {:#018x}  FAR_EL2 {:#018x}  SPSR_EL2 {:#010x}",
        frame.elr, frame.far, frame.spsr
    ));
    for row in 0..8 {
        // A fixed buffer, not the heap: the heap may be what broke.
        let mut line = heapless::String::<128>::new();
        for i in row * 4..(row * 4 + 4).min(31) {
            let _ = core::fmt::write(&mut line, format_args!("  x{:<2} {:#018x}", i, frame.x[i]));
        }
        out.line(format_args!("{}", line.as_str()));
    }
    stop_this_cpu(out);
}

/// Whether `elr` is where an SError unmasked by `__take_guest_serror` (vectors.S) is taken.
fn in_guest_serror_window(elr: u64) -> bool {
    unsafe extern "C" {
        static __serror_window_start: u8;
        static __serror_window_end: u8;
    }
    let start = &raw const __serror_window_start as u64;
    let end = &raw const __serror_window_end as u64;
    elr == start || elr == end
}

/// Takes this CPU out of service at the end of a report of armhv's own failure (`out`): PSCI
/// CPU_OFF, or park if the firmware refuses.
pub fn stop_this_cpu(mut out: crate::console::FatalOutput) -> ! {
    out.line(format_args!("CPU {} stopped", cpu::current()));
    drop(out); // the console lock, if the report had it
    firmware::cpu_off();
    cpu::park()
}

/// Reads an address outside the EL2 address space (above the 39-bit range), which takes a
/// translation fault at EL2: the fatal path's test.
#[cfg(feature = "fault-injection")]
pub fn provoke_fault() -> ! {
    // SAFETY: the read faults before touching anything; the fault handler never returns.
    unsafe { core::ptr::read_volatile(0xdead_0000_0000 as *const u64) };
    unreachable!("a read outside the EL2 address space did not fault")
}
