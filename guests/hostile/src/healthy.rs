//! `healthy=N`: the VM that must not notice the attacks. It fills all of its
//! free RAM (everything outside its image and its device tree) with a pattern,
//! then prints N heartbeats about 50 ms apart, each with the time since it
//! started and a checksum of that RAM and of its device tree:
//!
//! ```text
//! hostile: healthy beat <k> t=<ms> sum=<hex>
//! hostile: healthy done: <N> beats, longest gap <ms> ms, checksum <unchanged|changed> over <K> of <R> KiB of RAM, <F> frames in
//! ```
//!
//! then powers off. A stalled or starved VM shows as a long gap; a VM whose
//! memory someone else changed shows as a different checksum.
//!
//! The checksum is kept per 1 MiB piece. A beat re-reads one piece (in turn,
//! so every byte is read again within one pass over the pieces) and prints the
//! combination of every piece's latest checksum; re-reading all of the RAM at
//! every beat would take longer than a beat under TCG. The done line re-reads
//! everything.

use baremetal::{println, time};

use crate::{Vm, image_end};

const BEAT_MS: u64 = 50;
const PIECE: u64 = 1 << 20;
/// Pieces of up to 1 MiB: RAM up to 256 MiB, more than a hostile VM has.
const MAX_PIECES: usize = 256;

/// The pattern word at `a`: different at every address, so a copy from elsewhere shows.
fn pattern(a: u64) -> u64 {
    a.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn checksum(start: u64, end: u64) -> u64 {
    let mut sum: u64 = 0;
    let mut a = start;
    while a < end {
        // SAFETY: `start..end` is RAM of ours (free RAM or our device tree), read only.
        let v = unsafe { (a as *const u64).read_volatile() };
        sum = sum.rotate_left(7) ^ v;
        a += 8;
    }
    sum
}

/// The ranges checked: the free RAM above the image, around the device tree
/// (filled with the pattern), and the device tree blob itself (as armhv wrote
/// it), cut into pieces of at most 1 MiB.
fn pieces(vm: &Vm, out: &mut [(u64, u64); MAX_PIECES]) -> usize {
    let dt_start = vm.dt_addr & !7;
    let dt_end = (vm.dt_addr + vm.dt_size + 7) & !7;
    let free_end = (dt_end + 0xfff) & !0xfff;
    let ranges = [
        ((image_end() + 0xfff) & !0xfff, vm.dt_addr & !0xfff),
        (dt_start, dt_end),
        (free_end, vm.ram_end),
    ];
    let mut n = 0;
    for (mut start, end) in ranges {
        while start < end && n < MAX_PIECES {
            let stop = end.min((start + PIECE) & !(PIECE - 1));
            out[n] = (start, stop);
            n += 1;
            start = stop;
        }
    }
    n
}

/// Every piece's checksum, combined.
fn combined(sums: &[u64]) -> u64 {
    sums.iter().fold(0u64, |acc, s| acc.rotate_left(13) ^ s)
}

pub fn run(vm: &Vm, beats: u64) {
    let mut ranges = [(0, 0); MAX_PIECES];
    let n = pieces(vm, &mut ranges);
    if n == 0 {
        println!("hostile: healthy has no free RAM to check");
        return;
    }
    let ranges = &ranges[..n];
    let (dt_start, dt_end) = (vm.dt_addr & !7, (vm.dt_addr + vm.dt_size + 7) & !7);
    for &(start, end) in ranges {
        if start >= dt_start && end <= dt_end {
            continue; // the device tree: checked as it is, never written
        }
        let mut a = start;
        while a < end {
            // SAFETY: free RAM of ours: no Rust object lives above the image, and the range
            // leaves the device tree out.
            unsafe { (a as *mut u64).write_volatile(pattern(a)) };
            a += 8;
        }
    }
    let mut sums = [0u64; MAX_PIECES];
    for (sum, &(start, end)) in sums.iter_mut().zip(ranges) {
        *sum = checksum(start, end);
    }
    let first = combined(&sums[..n]);
    let checked: u64 = ranges.iter().map(|(s, e)| e - s).sum();
    // On a network: a beacon per beat (frames for the attackers' receive queues) and every
    // frame that arrives taken, whatever it is.
    let mut nic = crate::net::find(vm).and_then(|b| crate::net::Nic::open(b).ok());
    let mut frames = 0u64;
    let start = time::counter();
    let mut last = start;
    let mut longest = 0;
    let mut changed = false;
    for k in 1..=beats {
        if k > 1 {
            crate::spin_ms(BEAT_MS);
        }
        let now = time::counter();
        longest = longest.max(time::ticks_to_ms(now - last));
        last = now;
        if let Some(nic) = nic.as_mut() {
            nic.send(crate::net::BROADCAST, &[0x42; 64]);
            frames += u64::from(nic.recv(|_| {}));
        }
        let i = (k as usize - 1) % n;
        sums[i] = checksum(ranges[i].0, ranges[i].1);
        let sum = combined(&sums[..n]);
        changed |= sum != first;
        println!("hostile: healthy beat {k} t={} sum={sum:#x}", time::ticks_to_ms(now - start));
    }
    for (sum, &(start, end)) in sums.iter_mut().zip(ranges) {
        *sum = checksum(start, end);
    }
    changed |= combined(&sums[..n]) != first;
    println!(
        "hostile: healthy done: {beats} beats, longest gap {longest} ms, checksum {} over {} of {} KiB of RAM, {frames} frames in",
        if changed { "changed" } else { "unchanged" },
        checked >> 10,
        (vm.ram_end - vm.ram_start) >> 10
    );
}
