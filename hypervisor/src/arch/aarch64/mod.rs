//! The EL2-only hardware layer: boot, exception vectors, the world switch, system registers,
//! the hypervisor's own page tables and calls into the firmware. Everything that needs
//! `asm!` or a system register (EL2's, the guest's EL1 state, the GIC's CPU interfaces, the
//! counters, the ID registers) lives under this directory, each access behind a small named
//! function; the rest of armhv is portable.

pub mod cache;
pub mod cpu;
pub mod debug;
pub mod device;
pub mod el1_state;
pub mod el2_regs;
pub mod exception;
pub mod firmware;
pub mod fpsimd;
pub mod gic_cpuif;
pub mod id_regs;
pub mod mmu;
pub mod pauth;
pub mod pmu;
pub mod speculation;
pub mod syndrome;
pub mod timer;
pub mod vgic_hw;
pub mod world_switch;

core::arch::global_asm!(include_str!("boot.S"), options(raw));
/// The vectors, with the world-switch breakdown's probes (`ws-breakdown`) and the bare-trap
/// probe (`trap-probe`: `hvc #0x7ea` returns from the vector) assembled in or not.
macro_rules! vectors {
    ($breakdown:literal, $trap_probe:literal) => {
        core::arch::global_asm!(
            concat!(".set WS_BREAKDOWN, ", $breakdown, "\n"),
            concat!(".set TRAP_PROBE, ", $trap_probe, "\n"),
            // ESR_EL2 of `hvc #TRAP_PROBE_HVC_IMM` from AArch64: EC 0x16, IL 1.
            ".set TRAP_PROBE_ESR, 0x5a0007ea\n",
            // The hypercall fast path's calls and answers (`hypercall::FAST_CALLS`).
            ".set FAST_CALL_NOP, 0xc6000000\n",
            ".set FAST_CALL_NOP_ANSWER, 0\n",
            ".set FAST_CALL_PSCI_VERSION, 0x84000000\n",
            ".set FAST_CALL_PSCI_VERSION_ANSWER, 0x10001\n",
            ".set FAST_CALL_SMCCC_VERSION, 0x80000000\n",
            ".set FAST_CALL_SMCCC_VERSION_ANSWER, 0x10001\n",
            include_str!("vectors.S"),
            options(raw)
        );
    };
}
const _: () = assert!(guest_abi::hypercall::TRAP_PROBE_HVC_IMM == 0x7ea);
// The vector compares a function ID's upper half only and loads answers of at most 32 bits.
const _: () = {
    use vmm::emulate::hypercall::FAST_CALLS;
    assert!(FAST_CALLS.len() == 3);
    assert!(FAST_CALLS[0].0 == 0xc600_0000 && FAST_CALLS[0].1 == 0);
    assert!(FAST_CALLS[1].0 == 0x8400_0000 && FAST_CALLS[1].1 == 0x1_0001);
    assert!(FAST_CALLS[2].0 == 0x8000_0000 && FAST_CALLS[2].1 == 0x1_0001);
};
#[cfg(all(feature = "ws-breakdown", feature = "trap-probe"))]
vectors!("1", "1");
#[cfg(all(feature = "ws-breakdown", not(feature = "trap-probe")))]
vectors!("1", "0");
#[cfg(all(not(feature = "ws-breakdown"), feature = "trap-probe"))]
vectors!("0", "1");
#[cfg(all(not(feature = "ws-breakdown"), not(feature = "trap-probe")))]
vectors!("0", "0");
core::arch::global_asm!(include_str!("fpsimd.S"), options(raw));
// armhv's memcpy, in place of compiler_builtins' (weak) one: why, in mem.S.
core::arch::global_asm!(include_str!("mem.S"), options(raw));
