//! What the bare-metal EL1 guests (`testguest`, `vmbench`, `hostile`) share: the arm64 Image
//! header, entry points, stacks and exception vectors (`boot`), the polled PL011 console and
//! `println!`, device tree discovery (`dt`, `machine`), a small GICv3 and GICv2 driver (`gic`),
//! SMCCC/PSCI calls (`psci`), the virtual counter (`time`), a few CPU instructions (`cpu`) and
//! the driver side of the virtio-mmio transport (`virtio_mmio`).
//!
//! A guest is a binary that names its program name and its three entry points once, with
//! [`entry!`]; everything else it calls as a library. The MMU stays off (see `boot`): every
//! data access is Device-nGnRnE, so nothing here uses atomics or unaligned accesses, and a
//! word shared between CPUs is a [`Global`].
#![no_std]

pub mod boot;
pub mod console;
pub mod cpu;
pub mod dt;
pub mod gic;
pub mod machine;
pub mod psci;
pub mod time;
pub mod virtio_mmio;
pub mod virtio_rng;

pub use console::Global;
pub use fdt;

use core::panic::PanicInfo;

/// The program's name, which starts every line it prints (set by [`entry!`]).
static NAME: Global<&'static str> = Global::new("baremetal");

/// The program's name, as given to [`entry!`].
pub fn name() -> &'static str {
    NAME.get()
}

/// Defines the symbols the boot code in `boot.rs` jumps to, from the guest's own functions:
///
/// ```ignore
/// baremetal::entry! {
///     name: "testguest",
///     primary: primary_main,   // fn(dt_addr: u64, fdt: Fdt<'static>) -> !
///     secondary: secondary,    // fn(slot: usize) -> !, slot = PSCI CPU_ON context id
///     irq: handle_irq,         // fn(), an IRQ at EL1 (interrupted context saved)
/// }
/// ```
///
/// The primary CPU has its vectors, stack slot 0, the event stream and the device tree
/// ready when `primary` runs; a secondary its vectors, stack slot and event stream.
#[macro_export]
macro_rules! entry {
    (name: $name:literal, primary: $primary:path, secondary: $secondary:path, irq: $irq:path $(,)?) => {
        /// The name, NUL-terminated, for the boot code's message before Rust runs.
        #[unsafe(no_mangle)]
        static BAREMETAL_NAME: [u8; $name.len() + 1] = $crate::boot::nul_terminated($name);

        #[unsafe(no_mangle)]
        extern "C" fn baremetal_primary(dt_addr: u64) -> ! {
            let fdt = $crate::boot::primary_init($name, dt_addr);
            $primary(dt_addr, fdt)
        }

        #[unsafe(no_mangle)]
        extern "C" fn baremetal_secondary(slot: u64) -> ! {
            $crate::boot::secondary_init(slot as usize);
            $secondary(slot as usize)
        }

        #[unsafe(no_mangle)]
        extern "C" fn baremetal_irq() {
            $irq()
        }
    };
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    match info.location() {
        Some(l) => println!("{}: PANIC: {} at {}:{}", name(), info.message(), l.file(), l.line()),
        None => println!("{}: PANIC: {}", name(), info.message()),
    }
    psci::system_off()
}
