//! `soak=MS`: one incarnation of a VM of the soak (`configs/tests/soak.toml`), which boots,
//! works for MS ms and resets itself (PSCI SYSTEM_RESET), for as long as armhv lets it:
//!
//! - **disk**: sector 0 counts the boots; sectors 1..=[`DATA_SECTORS`] hold a pattern the
//!   previous incarnation wrote, checked on boot (a disk survives resets); a sector is
//!   written and read back at every heartbeat.
//! - **IPIs**: its second vCPU answers every SGI of the first with an SGI back (ping-pong);
//!   an answer missing after [`PONG_TIMEOUT_MS`] is lost; the slowest answer is reported.
//! - **network**: a frame to every other VM on its network per round ([`crate::net`]),
//!   each with a checksum the receivers verify.
//! - **reset**: from the first vCPU while the second waits in WFI, or from the second while
//!   the first spins in hypercalls, in turn.
//!
//! Lines (xtask/tests/soak.rs parses them):
//!
//! ```text
//! hostile: soak boot <b> disk=<new|ok|BAD>
//! hostile: soak beat <k> boot=<b> ipis=<n> lost=<l> tx=<t> rx=<r> bad=<x> disk=<ok|BAD>
//! hostile: soak boot <b> done: ipis=<n> lost=<l> slowest=<ms>ms tx=<t> rx=<r> bad=<x> disk=<ok|BAD>
//! ```

use baremetal::console::Global;
use baremetal::cpu::{self, dsb_sev};
use baremetal::{gic, println, psci, time};

use crate::Vm;
use crate::irq::{self, TASK_PONG};
use crate::net::{self, Nic};
use crate::virtio::{self, Disk};

const MAGIC: u64 = 0x4b41_4f53_5648_4d41; // "AMHVSOAK"
pub const DATA_SECTORS: u64 = 16;
/// The sector rewritten at every heartbeat.
const BEAT_SECTOR: u64 = DATA_SECTORS + 1;
const BEAT_MS: u64 = 250;
/// An answer not back within this is lost: a lost SGI is never answered at all (the second
/// vCPU sleeps until the next one), while the longest delays seen come from a co-located VM's
/// reset holding the physical CPU (under TCG, seconds: its RAM is zeroed and reloaded).
const PONG_TIMEOUT_MS: u64 = 5000;
/// Pause between rounds: the soak is about many VMs alive at once, not one VM's throughput.
const ROUND_MS: u64 = 20;
const SGI_PING: u32 = 5;
const SGI_PONG: u32 = 6;

/// The first vCPU's ping number, the second's last answer, and an order for the second.
static PING: Global<u64> = Global::new(0);
static PONG: Global<u64> = Global::new(0);
static ORDER: Global<u64> = Global::new(ORDER_NONE);
static PRIMARY: Global<u64> = Global::new(0);
/// The second vCPU takes SGIs.
static READY: Global<bool> = Global::new(false);
const ORDER_NONE: u64 = 0;
const ORDER_RESET: u64 = 1;

/// Word `j` of data sector `s` for `seed`.
fn pattern(seed: u64, s: u64, j: u64) -> u64 {
    let mut z = seed ^ (s << 32) ^ j;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn verify_data(disk: &mut Disk, seed: u64) -> bool {
    let mut buf = [0u64; 64];
    (1..=DATA_SECTORS).all(|s| {
        disk.read_sector(s, &mut buf)
            && buf.iter().enumerate().all(|(j, &w)| w == pattern(seed, s, j as u64))
    })
}

fn write_data(disk: &mut Disk, seed: u64) -> bool {
    let mut buf = [0u64; 64];
    (1..=DATA_SECTORS).all(|s| {
        for (j, w) in buf.iter_mut().enumerate() {
            *w = pattern(seed, s, j as u64);
        }
        disk.write_sector(s, &buf)
    })
}

/// A frame's payload: 32 words, the last a checksum of the others.
const WORDS: usize = 32;

fn sum(words: &[u64]) -> u64 {
    words.iter().fold(0x5eed, |s, &w| s.rotate_left(9) ^ w)
}

fn payload(vm: u64, boot: u64, seq: u64) -> [u8; WORDS * 8] {
    let mut w = [0u64; WORDS];
    w[0] = MAGIC;
    w[1] = vm;
    w[2] = boot;
    w[3] = seq;
    for (j, x) in w.iter_mut().enumerate().take(WORDS - 1).skip(4) {
        *x = pattern(vm << 40 | seq, 0, j as u64);
    }
    w[WORDS - 1] = sum(&w[..WORDS - 1]);
    let mut b = [0u8; WORDS * 8];
    for (j, x) in w.iter().enumerate() {
        b[8 * j..8 * j + 8].copy_from_slice(&x.to_le_bytes());
    }
    b
}

/// Whether a received frame is one of ours, intact. None: not a soak frame.
fn check(frame: &[u8]) -> Option<bool> {
    let body = frame.get(14..14 + WORDS * 8)?;
    if frame[12..14] != net::ETHERTYPE.to_be_bytes() {
        return None;
    }
    let mut w = [0u64; WORDS];
    for (j, x) in w.iter_mut().enumerate() {
        *x = u64::from_le_bytes(body[8 * j..8 * j + 8].try_into().unwrap_or([0; 8]));
    }
    (w[0] == MAGIC).then(|| w[WORDS - 1] == sum(&w[..WORDS - 1]))
}

/// The second vCPU: answers pings until told to reset the VM.
pub fn pong_loop() -> ! {
    gic::init_cpu(&[]);
    READY.set(true);
    dsb_sev();
    loop {
        gic::wait_for(None, || PING.get() != PONG.get() || ORDER.get() != ORDER_NONE);
        if ORDER.get() == ORDER_RESET {
            psci::call(psci::PSCI_SYSTEM_RESET, 0, 0, 0);
        }
        let ping = PING.get();
        if ping != PONG.get() {
            PONG.set(ping);
            gic::send_sgi(SGI_PONG, PRIMARY.get());
        }
    }
}

#[derive(Default)]
struct Tally {
    ipis: u64,
    lost: u64,
    tx: u64,
    rx: u64,
    bad: u64,
    /// Slowest IPI round trip, in ms.
    slowest: u64,
    disk_ok: bool,
}

pub fn run(vm: &Vm, ms: u64) {
    let Some(mut disk) = virtio::find(vm, virtio::ID_BLOCK).and_then(Disk::open) else {
        println!("hostile: soak needs a virtio disk");
        return;
    };
    let mut head = [0u64; 64];
    let fresh = !disk.read_sector(0, &mut head) || head[0] != MAGIC;
    let boot = if fresh { 1 } else { head[1] + 1 };
    let old_ok = fresh || verify_data(&mut disk, head[2]);
    println!(
        "hostile: soak boot {boot} disk={}",
        if fresh {
            "new"
        } else if old_ok {
            "ok"
        } else {
            "BAD"
        }
    );
    let seed = time::counter() ^ boot.rotate_left(17);
    head[0] = MAGIC;
    head[1] = boot;
    head[2] = seed;
    let mut t = Tally {
        disk_ok: old_ok
            && write_data(&mut disk, seed)
            && disk.write_sector(0, &head)
            && verify_data(&mut disk, seed),
        ..Tally::default()
    };

    // The ping-pong partner.
    gic::init_distributor();
    gic::init_cpu(&[PPI_VTIMER]);
    PRIMARY.set(cpu::affinity());
    ORDER.set(ORDER_NONE);
    PONG.set(PING.get());
    READY.set(false);
    let mut partner = irq::others(vm).next();
    if let Some((slot, mpidr)) = partner {
        let started = irq::start(slot, mpidr, TASK_PONG) == 0
            && wait_until(time::counter() + time::ms_to_ticks(2000), || READY.get());
        if !started {
            // Lost IPIs would follow: a vCPU that does not start again after a reset was
            // a finding of this soak.
            println!("hostile: soak boot {boot}: vCPU {mpidr:#x} did not start");
            partner = None;
        }
    }
    let mut nic = net::find(vm).and_then(|base| Nic::open(base).ok());

    let start = time::counter();
    let mut next_beat = start + time::ms_to_ticks(BEAT_MS);
    let mut beat = 0u64;
    let mut seq = 0u64;
    while !time::passed(start + time::ms_to_ticks(ms)) {
        if let Some((_, mpidr)) = partner {
            let k = PING.get() + 1;
            PING.set(k);
            gic::send_sgi(SGI_PING, mpidr);
            let deadline = time::counter() + time::ms_to_ticks(PONG_TIMEOUT_MS);
            let sent = time::counter();
            if wait_until(deadline, || PONG.get() == k) {
                t.ipis += 1;
                t.slowest = t.slowest.max(time::ticks_to_ms(time::counter() - sent));
            } else {
                t.lost += 1;
            }
        }
        if let Some(nic) = nic.as_mut() {
            seq += 1;
            t.tx += u64::from(nic.send(net::BROADCAST, &payload(vm.vm_id, boot, seq)));
            nic.recv(|f| match check(f) {
                Some(true) => t.rx += 1,
                Some(false) => t.bad += 1,
                None => {}
            });
        }
        if time::passed(next_beat) {
            beat += 1;
            next_beat += time::ms_to_ticks(BEAT_MS);
            let mut b = [beat ^ seed; 64];
            b[0] = beat;
            let mut back = [0u64; 64];
            t.disk_ok &= disk.write_sector(BEAT_SECTOR, &b)
                && disk.read_sector(BEAT_SECTOR, &mut back)
                && back == b;
            println!(
                "hostile: soak beat {beat} boot={boot} ipis={} lost={} tx={} rx={} bad={} disk={}",
                t.ipis,
                t.lost,
                t.tx,
                t.rx,
                t.bad,
                ok(t.disk_ok)
            );
        }
        sleep_ms(ROUND_MS);
    }
    println!(
        "hostile: soak boot {boot} done: ipis={} lost={} slowest={}ms tx={} rx={} bad={} disk={}",
        t.ipis,
        t.lost,
        t.slowest,
        t.tx,
        t.rx,
        t.bad,
        ok(t.disk_ok)
    );
    match partner {
        // Odd boots: the second vCPU resets the VM while this one makes hypercalls.
        Some(_) if boot % 2 == 1 => {
            ORDER.set(ORDER_RESET);
            dsb_sev();
            if let Some((_, mpidr)) = partner {
                gic::send_sgi(SGI_PING, mpidr);
            }
            loop {
                psci::call(guest_abi::hypercall::ARMHV_NOP, 0, 0, 0);
            }
        }
        // Even ones: this vCPU resets it while the second waits in WFI.
        _ => {
            psci::call(psci::PSCI_SYSTEM_RESET, 0, 0, 0);
        }
    }
    println!("hostile: soak SYSTEM_RESET returned");
}

/// The virtual timer's interrupt.
pub const PPI_VTIMER: u32 = 27;

/// Waits `ms` in WFI, woken by the virtual timer: the CPU is free for other vCPUs meanwhile.
fn sleep_ms(ms: u64) {
    let deadline = time::counter() + time::ms_to_ticks(ms);
    wait_until(deadline, || false);
}

/// Waits in WFI until `done()` or the counter reaches `deadline`, whichever comes first (the
/// virtual timer wakes it then); whether `done()`.
fn wait_until(deadline: u64, done: impl Fn() -> bool) -> bool {
    // SAFETY: the EL1 virtual timer is this vCPU's own; CNTV_CTL_EL0.ENABLE, unmasked.
    unsafe {
        core::arch::asm!(
            "msr cntv_cval_el0, {d}", "msr cntv_ctl_el0, {c}", "isb",
            d = in(reg) deadline, c = in(reg) 1u64, options(nomem, nostack)
        )
    };
    let r = gic::wait_for(Some(deadline), done);
    timer_fired();
    r
}

/// Silences the virtual timer (its interrupt is level-sensitive).
pub fn timer_fired() {
    // SAFETY: disabling this vCPU's own virtual timer.
    unsafe { core::arch::asm!("msr cntv_ctl_el0, xzr", "isb", options(nomem, nostack)) };
}

fn ok(good: bool) -> &'static str {
    if good { "ok" } else { "BAD" }
}
