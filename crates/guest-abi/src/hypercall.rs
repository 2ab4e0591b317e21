//! armhv's own hypercalls: SMCCC function IDs in the "vendor specific hypervisor service" range
//! (owner 6, fast call, SMC64 convention: `0xC600_xxxx`). What each one returns is in
//! `docs/guest-abi.md`; an ID armhv does not implement returns SMCCC `NOT_SUPPORTED` (-1).

/// The immediate of the trap probe, `hvc #0x7ea`: in an armhv built with the `trap-probe`
/// feature (benchmarks only), its EL2 vector returns from it at once with every register as it
/// was, a trap to EL2 and back with nothing saved (the KVM/ARM paper's "Trap"). Any other build
/// takes it as a call like `hvc #0`.
pub const TRAP_PROBE_HVC_IMM: u16 = 0x7ea;

/// `x0 = 0`; the cheapest round trip (benchmarks).
pub const ARMHV_NOP: u32 = 0xC600_0000;
/// `x0 = 0`, `x1` = VM id, `x2` = vCPU id, `x3` = vCPU count.
pub const ARMHV_VM_INFO: u32 = 0xC600_0001;
/// `x0 = 0`; gives the physical CPU to another vCPU; `x1` = 1 if another vCPU ran before the
/// call returned, else 0.
pub const ARMHV_YIELD: u32 = 0xC600_0002;
/// `x0 = 0`, `x1` = the VM's total exits so far.
pub const ARMHV_VM_EXITS: u32 = 0xC600_0003;
/// `x0 = 0`, `x1` = when armhv last saw a virtio QueueNotify of this VM, `x2` = when it last
/// raised one of the VM's virtio interrupts, `x3` = 1 for cycle-counter values, 0 for
/// virtual-counter values.
pub const ARMHV_IO_STAMPS: u32 = 0xC600_0004;

/// Every call a guest may make to any armhv build.
pub const ALL: [u32; 5] = [ARMHV_NOP, ARMHV_VM_INFO, ARMHV_YIELD, ARMHV_VM_EXITS, ARMHV_IO_STAMPS];

/// Test builds only (armhv's feature `fault-injection`): armhv takes a fault of its own, to
/// exercise its fatal-exception report. Other builds answer `NOT_SUPPORTED`; the number is
/// reserved so that no other call takes it.
pub const ARMHV_TEST_HYP_FAULT: u32 = 0xC600_00FF;
/// Test builds only, like [`ARMHV_TEST_HYP_FAULT`]: armhv panics inside its console's critical
/// section, to exercise the report's lock-free path.
pub const ARMHV_TEST_CONSOLE_PANIC: u32 = 0xC600_00FE;

/// Test builds only, like [`ARMHV_TEST_HYP_FAULT`]: armhv panics holding the calling VM's
/// device lock, which then stays held for good: the CPUs that wait for it must give up.
pub const ARMHV_TEST_PANIC_HOLDING_DEVICES: u32 = 0xC600_00FD;

/// The fault-injection calls of test builds.
pub const TEST_CALLS: [u32; 3] =
    [ARMHV_TEST_HYP_FAULT, ARMHV_TEST_CONSOLE_PANIC, ARMHV_TEST_PANIC_HOLDING_DEVICES];

/// SMCCC function-ID bits `[31:24]` of every armhv call: fast (31), SMC64 (30), owner 6.
pub const PREFIX: u32 = 0xC600_0000;

/// Whether `fid` (`w0`) is one of the calls in [`ALL`].
pub const fn is_call(fid: u32) -> bool {
    fid >= ARMHV_NOP && fid <= ARMHV_IO_STAMPS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_fast_smc64_vendor_hypervisor_service() {
        for fid in ALL.into_iter().chain(TEST_CALLS) {
            assert_eq!(fid & 0xff00_0000, PREFIX, "{fid:#x}");
            assert_eq!(fid & 0x00ff_0000, 0, "{fid:#x}: bits [23:16] must be zero");
        }
    }

    #[test]
    fn numbers_are_distinct_and_contiguous() {
        for (i, fid) in ALL.into_iter().enumerate() {
            assert_eq!(fid, PREFIX + i as u32);
            assert!(is_call(fid));
        }
        assert!(TEST_CALLS.iter().all(|&fid| !is_call(fid)));
        assert!(!is_call(PREFIX + ALL.len() as u32));
        assert!(!is_call(PREFIX - 1));
    }
}
