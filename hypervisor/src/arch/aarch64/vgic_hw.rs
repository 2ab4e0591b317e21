//! The GICv3 virtual CPU interface control registers (ICH_*_EL2): list registers, the
//! hypervisor control register and the per-vCPU VMCR/active-priority state.

/// Most list registers the architecture allows (ICH_VTR_EL2.ListRegs + 1 <= 16).
pub const MAX_LRS: usize = 16;

/// ICH_HCR_EL2 bits.
pub const HCR_EN: u64 = 1 << 0;
/// Underflow maintenance: at most one LR is valid (so more pending ones can be brought in).
pub const HCR_UIE: u64 = 1 << 1;

macro_rules! sysreg_rw {
    ($write:ident, $reg:literal) => {
        pub fn $write(v: u64) {
            // SAFETY: these registers only affect the virtual CPU interface of the guest that
            // armhv is about to run on this CPU.
            unsafe { core::arch::asm!(concat!("msr ", $reg, ", {}"), in(reg) v, options(nomem, nostack)) };
        }
    };
    ($read:ident, $write:ident, $reg:literal) => {
        pub fn $read() -> u64 {
            let v: u64;
            // SAFETY: reading a GIC hypervisor-interface register has no side effects.
            unsafe { core::arch::asm!(concat!("mrs {}, ", $reg), out(reg) v, options(nomem, nostack)) };
            v
        }

        pub fn $write(v: u64) {
            // SAFETY: these registers only affect the virtual CPU interface of the guest that
            // armhv is about to run on this CPU.
            unsafe { core::arch::asm!(concat!("msr ", $reg, ", {}"), in(reg) v, options(nomem, nostack)) };
        }
    };
}

sysreg_rw!(write_hcr, "ich_hcr_el2");
sysreg_rw!(read_vmcr, write_vmcr, "ich_vmcr_el2");
sysreg_rw!(read_ap1r0, write_ap1r0, "ich_ap1r0_el2");

/// Number of list registers this CPU implements (ICH_VTR_EL2.ListRegs + 1).
pub fn lr_count() -> usize {
    let vtr: u64;
    // SAFETY: reading ICH_VTR_EL2 has no side effects.
    unsafe { core::arch::asm!("mrs {}, ich_vtr_el2", out(reg) vtr, options(nomem, nostack)) };
    ((vtr & 0x1f) as usize + 1).min(MAX_LRS)
}

macro_rules! lr_access {
    ($($n:literal),*) => {
        /// Reads ICH_LR<n>_EL2.
        pub fn read_lr(n: usize) -> u64 {
            let v: u64;
            match n {
                $(
                    // SAFETY: reading a list register has no side effects.
                    $n => unsafe { core::arch::asm!(concat!("mrs {}, ich_lr", $n, "_el2"), out(reg) v, options(nomem, nostack)) },
                )*
                _ => v = 0,
            }
            v
        }

        /// Writes ICH_LR<n>_EL2.
        pub fn write_lr(n: usize, v: u64) {
            match n {
                $(
                    // SAFETY: list registers only affect the virtual interrupts of the guest
                    // about to run on this CPU.
                    $n => unsafe { core::arch::asm!(concat!("msr ich_lr", $n, "_el2, {}"), in(reg) v, options(nomem, nostack)) },
                )*
                _ => {}
            }
        }
    };
}

lr_access!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
