//! Attacks on the virtual switch's address table (`configs/tests/hostile-switch.toml`).
//!
//! Two talkers, with the configured MACs [`TALKER_A`] and [`TALKER_B`], send each other unicast
//! frames carrying [`SECRET`] (`talk=N`). An attacker on their network (`snoop=MS`) tries to
//! get those frames for `MS` ms: it sends frames whose source is a talker's MAC (so that a
//! learning switch would move the talker to its port), floods frames from ever-new source
//! addresses (so that a bounded table would evict the talkers and flood their traffic), and
//! counts every frame it receives that carries the secret. armhv's switch knows each VM port by
//! its configured MAC and never learns from one: the attacker must receive none.
//!
//! Lines: `hostile: talk sent <n> received <m> from <peer>`; the attacker's sweeps are
//! `hostile: switch <attack> -> absorbed <n> frames`, and its attempt `hostile: switch snoop
//! -> received <k> secret frames`, confined only when `k` is 0.

use crate::Vm;
use crate::net::{self, BROADCAST, Nic};
use crate::report;
use baremetal::{println, time};

/// The talkers' configured MACs (the config sets them: `mac = "52:54:00:aa:00:01"` and
/// `"...:02"`).
pub const TALKER_A: [u8; 6] = [0x52, 0x54, 0x00, 0xaa, 0x00, 0x01];
pub const TALKER_B: [u8; 6] = [0x52, 0x54, 0x00, 0xaa, 0x00, 0x02];
/// What the talkers' frames carry, and the attacker looks for.
pub const SECRET: &[u8; 20] = b"armhv-secret-unicast";
/// Between two of a talker's frames.
const TALK_MS: u64 = 10;

fn carries_secret(frame: &[u8]) -> bool {
    frame.len() >= 14 + SECRET.len() && &frame[14..14 + SECRET.len()] == SECRET
}

/// `talk=N`: N unicast frames to the other talker, one per [`TALK_MS`], counting the secret
/// frames that come from it; then goes on receiving for as long again, for the peer's last.
pub fn talk(vm: &Vm, n: u64) {
    let Some(mut nic) = net::find(vm).and_then(|b| Nic::open(b).ok()) else {
        println!("hostile: talk needs a virtio-net device");
        return;
    };
    let peer = if nic.mac == TALKER_A { TALKER_B } else { TALKER_A };
    let (mut sent, mut received) = (0u64, 0u64);
    let mut count = |frame: &[u8]| {
        if frame.get(6..12) == Some(&peer[..]) && carries_secret(frame) {
            received += 1;
        }
    };
    for _ in 0..n {
        sent += u64::from(nic.send(peer, SECRET));
        crate::spin_ms(TALK_MS);
        nic.recv(&mut count);
    }
    for _ in 0..n {
        crate::spin_ms(TALK_MS);
        nic.recv(&mut count);
    }
    println!("hostile: talk sent {sent} received {received} from {peer:02x?}");
}

/// `snoop=MS`: the attacker (see the module documentation).
pub fn snoop(vm: &Vm, ms: u64) {
    let Some(mut nic) = net::find(vm).and_then(|b| Nic::open(b).ok()) else {
        println!("hostile: snoop needs a virtio-net device");
        return;
    };
    println!("hostile: switch snoop {ms}ms starting");
    let deadline = time::counter() + time::ms_to_ticks(ms);
    let (mut spoofed, mut flooded, mut secrets, mut frames_in) = (0u64, 0u64, 0u64, 0u64);
    let mut fake = 0u32;
    let mut look = |frame: &[u8]| {
        frames_in += 1;
        secrets += u64::from(carries_secret(frame));
    };
    while !time::passed(deadline) && !nic.needs_reset() {
        // Claim both talkers' addresses, to each other and to everyone.
        for (src, dst) in [(TALKER_A, TALKER_B), (TALKER_B, TALKER_A), (TALKER_A, BROADCAST)] {
            spoofed += u64::from(nic.send_from(src, dst, b"snoop"));
        }
        // Fill the table with addresses nobody has (locally administered, unicast), sent to
        // one nobody has either, so that they flood no receiver but the table.
        for _ in 0..64 {
            fake = fake.wrapping_add(1);
            let [a, b, c, d] = fake.to_be_bytes();
            let src = [0x06, 0x66, a, b, c, d];
            flooded += u64::from(nic.send_from(src, [0x06, 0x77, a, b, c, d], b"flood"));
        }
        nic.recv(&mut look);
    }
    nic.recv(&mut look);
    // The means, which cannot fail by themselves: sweeps. The attempt is what snoop received.
    report::sweep("switch", "spoof-talkers", format_args!("absorbed {spoofed} frames"));
    report::sweep("switch", "flood-sources", format_args!("absorbed {flooded} frames"));
    report::attempt(
        "switch",
        "snoop",
        format_args!("received {secrets} secret frames ({frames_in} frames in)"),
        secrets == 0,
    );
    if secrets > 0 {
        report::leaked(secrets * SECRET.len() as u64);
    }
}
