//! `healthy=N`: the VM that must not notice the attacks. It fills 1 MiB of its
//! RAM with a pattern, then prints N heartbeats about 50 ms apart, each with
//! the time since it started and a checksum of that region:
//!
//! ```text
//! hostile: healthy beat <k> t=<ms> sum=<hex>
//! hostile: healthy done: <N> beats, longest gap <ms> ms, checksum <unchanged|changed>
//! ```
//!
//! then powers off. A stalled or starved VM shows as a long gap; a VM whose
//! memory someone else changed shows as a different checksum.

use baremetal::{println, time};

use crate::{Vm, image_end};

const BEAT_MS: u64 = 50;
const REGION: u64 = 1 << 20;

fn checksum(base: u64) -> u64 {
    let mut sum: u64 = 0;
    let mut a = base;
    while a < base + REGION {
        // SAFETY: the region is free RAM of ours (above the image), read only.
        let v = unsafe { (a as *const u64).read_volatile() };
        sum = sum.rotate_left(7) ^ v;
        a += 8;
    }
    sum
}

pub fn run(vm: &Vm, beats: u64) {
    let base = (image_end() + 0xf_ffff) & !0xf_ffff;
    if base + REGION > vm.dt_addr {
        println!("hostile: healthy needs 1 MiB of free RAM below its device tree");
        return;
    }
    let mut a = base;
    while a < base + REGION {
        // SAFETY: free RAM of ours: no Rust object lives above the image.
        unsafe { (a as *mut u64).write_volatile(a.wrapping_mul(0x9e37_79b9_7f4a_7c15)) };
        a += 8;
    }
    let first = checksum(base);
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
        let sum = checksum(base);
        changed |= sum != first;
        println!("hostile: healthy beat {k} t={} sum={sum:#x}", time::ticks_to_ms(now - start));
    }
    println!(
        "hostile: healthy done: {beats} beats, longest gap {longest} ms, checksum {}, {frames} frames in",
        if changed { "changed" } else { "unchanged" }
    );
}
