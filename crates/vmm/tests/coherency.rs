//! Guests with caches off (issue 16, item 7), on the fake hardware, which records the cache
//! maintenance armhv asks for: a virtio request of a vCPU running with its MMU off has every
//! read of guest RAM preceded by a clean+invalidate of those bytes and every write followed by
//! a clean; the same request once the guest has turned its caches on, or on RAM that Stage-2
//! forces write-back (FWB), costs no maintenance at all. QEMU models no caches, so this is the
//! behavioural test; the boot tests check which of the two modes armhv picks on each CPU model.
//!
//! VM `io` has one vCPU on CPU 0 and a virtio-rng in slot 0.

mod common;

use addr::{Ipa, IpaRange};
use common::{Machine, store, wfx};
use guest_abi::map;
use virtio::GuestRam;
use virtio::mmio::regs as vio;
use vmm::arch::SCTLR_EL1_RESET;
use vmm::arch::fake::{self, CacheOp};
use vmm::coherency::{SCTLR_C, SCTLR_M};
use vmm::memory::GuestMemory;
use vmm::vm::Vm;

const CONFIG: &str = r#"
[[vm]]
name = "io"
vcpus = 1
cpu_affinity = [0]
memory_size = "16M"
kernel = "@testguest"
devices = ["virtio-rng"]
"#;

const RAM: u64 = 0x4000_0000;
const DESC: u64 = RAM + 0x10_0000;
const AVAIL: u64 = RAM + 0x10_1000;
const USED: u64 = RAM + 0x10_2000;
const BUF: u64 = RAM + 0x10_3000;

#[test]
fn armhv_keeps_guest_ram_coherent_with_guests_whose_caches_are_off() {
    let mut m = common::install(CONFIG);
    a_request_with_the_mmu_off_is_maintained(&mut m);
    a_request_with_caches_on_is_not(&mut m);
    ram_forced_write_back_needs_no_maintenance();
    accesses_across_chunks_are_maintained_piece_by_piece();
}

/// Starts recording the fake's cache maintenance, afresh.
fn record() {
    fake::with(|f| f.cache_ops = Some(Vec::new()));
}

/// The maintenance recorded since [`record`].
fn recorded() -> Vec<CacheOp> {
    fake::with(|f| f.cache_ops.take()).expect("recording")
}

/// The host address behind `ipa` (in one chunk).
fn host(memory: &GuestMemory, ipa: u64) -> u64 {
    let mut pa = None;
    memory.view().host_pieces(Ipa(ipa), 1, |p, _| pa = Some(p.0)).unwrap();
    pa.unwrap()
}

/// Whether `op` cleans and invalidates, or cleans, all of `[host, host + len)`.
fn covers(op: &CacheOp, invalidate: bool, host: u64, len: u64) -> bool {
    match *op {
        CacheOp::CleanInvalidate(s, l) if invalidate => s <= host && host + len <= s + l,
        CacheOp::Clean(s, l) if !invalidate => s <= host && host + len <= s + l,
        _ => false,
    }
}

/// Position of the first operation covering the range, or a failure listing them.
fn find(ops: &[CacheOp], invalidate: bool, host: u64, len: u64, what: &str) -> usize {
    ops.iter().position(|op| covers(op, invalidate, host, len)).unwrap_or_else(|| {
        let kind = if invalidate { "clean+invalidate" } else { "clean" };
        panic!("no {kind} of {what} ({host:#x}+{len}) in {ops:x?}")
    })
}

/// The driver's setup of queue 0 and a notification for one 16-byte request for entropy: the
/// descriptor table, avail and used rings in RAM, queue `avail_idx` requests in.
fn request(vm: &Vm, avail_idx: u16, setup: bool) -> Vec<fake::Trap> {
    let slot = map::virtio_slot(0).0;
    let mut d = Vec::new();
    d.extend_from_slice(&BUF.to_le_bytes());
    d.extend_from_slice(&16u32.to_le_bytes());
    d.extend_from_slice(&2u16.to_le_bytes()); // VIRTQ_DESC_F_WRITE
    d.extend_from_slice(&0u16.to_le_bytes());
    assert!(vm.memory.write(Ipa(DESC), &d));
    // avail: flags 0, idx, ring[idx - 1] = descriptor 0.
    let ring_at = 4 + 2 * u64::from(avail_idx - 1);
    assert!(vm.memory.write(Ipa(AVAIL + 2), &avail_idx.to_le_bytes()));
    assert!(vm.memory.write(Ipa(AVAIL + ring_at), &[0, 0]));
    let mut script =
        if setup { common::virtio_queue0_setup(slot, DESC, AVAIL, USED) } else { Vec::new() };
    script.push(store(slot + vio::QUEUE_NOTIFY, 4, 4, 0));
    script.push(wfx(true));
    script
}

fn used_idx(vm: &Vm) -> u16 {
    let ring = common::read_ram(vm, USED, 4);
    u16::from_le_bytes([ring[2], ring[3]])
}

/// vCPU 0 starts as the boot protocol has it, MMU and caches off: the device's reads of the
/// avail ring and the descriptor are each preceded by a clean+invalidate of those bytes, and
/// its writes (the entropy, the used ring) each bracketed by a clean+invalidate and a clean.
fn a_request_with_the_mmu_off_is_maintained(m: &mut Machine) {
    let io = &m.vm("io");
    let sctlr = io.vcpus[0].state.lock().el1.sctlr_el1;
    assert_eq!(sctlr, SCTLR_EL1_RESET, "vCPU 0 starts with its MMU off");
    let script = request(io, 1, true);
    record();
    m.step(0, script);
    let ops = recorded();
    assert_eq!(used_idx(io), 1, "the request was served");
    assert!(io.memory.coherency().maintained(), "vCPU 0 runs with caches off");

    let mem = &io.memory;
    let avail_idx = find(&ops, true, host(mem, AVAIL + 2), 2, "avail.idx");
    find(&ops, true, host(mem, AVAIL + 4), 2, "avail.ring[0]");
    find(&ops, true, host(mem, DESC), 16, "the descriptor");
    let buf_inval = find(&ops, true, host(mem, BUF), 16, "the buffer");
    let buf_clean = find(&ops, false, host(mem, BUF), 16, "the buffer");
    assert!(buf_inval < buf_clean, "the buffer was cleaned before it was written: {ops:x?}");
    let used_clean = find(&ops, false, host(mem, USED + 2), 2, "used.idx");
    find(&ops, false, host(mem, USED + 4), 8, "used.ring[0]");
    assert!(avail_idx < used_clean, "{ops:x?}");
}

/// The guest turns its MMU and caches on; at its next exit armhv sees it, and the same
/// request costs no maintenance.
fn a_request_with_caches_on_is_not(m: &mut Machine) {
    let io = &m.vm("io");
    // vCPU 0 stays loaded on CPU 0: its live SCTLR_EL1 is the fake CPU's.
    fake::with(|f| f.el1[0].sctlr_el1 |= SCTLR_M | SCTLR_C);
    let script = request(io, 2, false);
    record();
    m.step(0, script);
    let ops = recorded();
    assert_eq!(used_idx(io), 2, "the second request was served");
    assert!(!io.memory.coherency().maintained());
    assert_eq!(ops, [], "maintenance for a guest with caches on");

    // And off again (MMU on, data cache off): maintained from its next exit.
    fake::with(|f| f.el1[0].sctlr_el1 &= !SCTLR_C);
    let script = request(io, 3, false);
    record();
    m.step(0, script);
    let ops = recorded();
    assert_eq!(used_idx(io), 3);
    find(&ops, true, host(&io.memory, DESC), 16, "the descriptor");
}

/// RAM that Stage-2 forces Write-Back (FEAT_S2FWB) is cached for the guest as for armhv:
/// however its vCPUs run, armhv's accesses need nothing; without FWB the same accesses from a
/// caches-off VM are maintained.
fn ram_forced_write_back_needs_no_maintenance() {
    for fwb in [true, false] {
        let mem = GuestMemory::allocate(IpaRange::new(Ipa(RAM), 2 << 20), fwb).unwrap();
        mem.coherency().restart(); // vCPU 0 at its entry: MMU off
        mem.coherency().observe(0, SCTLR_EL1_RESET);
        assert_eq!(mem.coherency().maintained(), !fwb);
        let mut view = mem.view();
        record();
        let mut buf = [0u8; 64];
        view.read(Ipa(RAM + 0x100), &mut buf).unwrap();
        view.write(Ipa(RAM + 0x200), &buf).unwrap();
        view.store_u16(Ipa(RAM + 0x300), 7).unwrap();
        assert_eq!(view.load_u16(Ipa(RAM + 0x300)).unwrap(), 7);
        let ops = recorded();
        if fwb {
            assert_eq!(ops, [], "maintenance with FWB");
        } else {
            let at = |ipa| host(&mem, ipa);
            assert_eq!(
                ops,
                [
                    CacheOp::CleanInvalidate(at(RAM + 0x100), 64),
                    CacheOp::CleanInvalidate(at(RAM + 0x200), 64),
                    CacheOp::Clean(at(RAM + 0x200), 64),
                    CacheOp::CleanInvalidate(at(RAM + 0x300), 2),
                    CacheOp::Clean(at(RAM + 0x300), 2),
                    CacheOp::CleanInvalidate(at(RAM + 0x300), 2),
                ]
            );
        }
    }
}

/// An access that straddles two 2 MiB chunks (not adjacent in host memory) is maintained on
/// each chunk's part, at that part's host address.
fn accesses_across_chunks_are_maintained_piece_by_piece() {
    let mem = GuestMemory::allocate(IpaRange::new(Ipa(RAM), 4 << 20), false).unwrap();
    mem.coherency().restart();
    let mut view = mem.view();
    let edge = RAM + (2 << 20);
    record();
    view.fill(Ipa(edge - 8), 24, 0x5a).unwrap();
    let ops = recorded();
    let (a, b) = (host(&mem, edge - 8), host(&mem, edge));
    assert_eq!(
        ops,
        [
            CacheOp::CleanInvalidate(a, 8),
            CacheOp::Clean(a, 8),
            CacheOp::CleanInvalidate(b, 16),
            CacheOp::Clean(b, 16),
        ]
    );
}
