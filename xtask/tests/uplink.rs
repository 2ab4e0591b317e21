//! The uplink (issue 15): a network whose uplink is the machine's NIC, on QEMU user networking.
//! A Linux VM gets its address by DHCP, fetches from a server on the host's loopback and serves
//! a host client through a hostfwd; a VM on a network without an uplink reaches nothing
//! outside; and a config with an uplink on a machine without a NIC is reported with the fix,
//! its VMs running as before.

mod linux_guest;

use linux_guest::{BOOT_TIMEOUT, COMMAND_TIMEOUT, boot_on, run_command};
use std::time::Duration;
use xtask::MachineSpec;
use xtask::hostnet::{PayloadServer, free_port, http_get};
use xtask::qemu::Run;

fn boot(cfg: &str, uplink: Option<xtask::Uplink>) -> Run {
    boot_on(cfg, MachineSpec { uplink, ..MachineSpec::for_tests() })
}

/// The number before `what` in the first line of `stats` that contains `head` (`console:
/// network NAME: ... N what, ...`).
fn counter(stats: &str, head: &str, what: &str) -> u64 {
    let line = stats
        .lines()
        .find(|l| l.contains(head))
        .unwrap_or_else(|| panic!("no statistics line with {head:?}:\n{stats}"));
    let before = line.split(what).next().unwrap();
    let n = before.rsplit([' ', ',']).find(|w| !w.is_empty()).unwrap();
    n.parse().unwrap_or_else(|_| panic!("no number before {what:?} in {line:?}"))
}

/// The output since `mark` once the line containing `head` is complete (it may be arriving).
fn complete_line(run: &Run, mark: usize, head: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let out = run.output_since(mark);
        let complete = out.find(head).is_some_and(|at| out[at..].contains('\n'));
        if complete || start.elapsed() > COMMAND_TIMEOUT {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One boot, three checks: (a) a VM gets its address by DHCP and fetches a page from the host's
/// loopback through the uplink, (b) a host client reaches a server in that VM through a
/// hostfwd, (c) a VM on a network without an uplink, configured as if it were on QEMU's network
/// and sending straight to the gateway's MAC, reaches nothing: the host server sees no
/// connection of its, and the switch counts its frames as dropped.
#[test]
fn uplink_both_ways_and_a_network_without_one_stays_inside() {
    let server = PayloadServer::start("armhv-uplink-host-payload").unwrap();
    let fwd = free_port().unwrap();
    let mut run = boot("tests/uplink.toml", Some(xtask::Uplink { hostfwd: vec![(fwd, 8080)] }));
    run.expect("network lan0: uplink through the machine's NIC at", BOOT_TIMEOUT).unwrap();
    run.expect("[web] armhv-guest: eth0 dhcp 10.0.2.15/24 via 10.0.2.2", BOOT_TIMEOUT).unwrap();
    for vm in ["web", "sealed"] {
        run.expect(&format!("[{vm}] armhv-guest: up, 1 cpus"), BOOT_TIMEOUT).unwrap();
    }

    // (c) first, so that any connection the host server sees before (a) is the sealed VM's.
    // Input goes to VM 0 (web) until Ctrl-A 1.
    run.send("\x011").unwrap();
    // The whole output: the message may land before the mark, over a partial line it erases.
    run.expect("console: input goes to vm 1 (sealed)", COMMAND_TIMEOUT).unwrap();
    let port = server.port;
    let out = run_command(
        &mut run,
        &format!(
            "arp -i eth0 -s 10.0.2.2 52:55:0a:00:02:02; \
             timeout 6 wget -q -O - http://10.0.2.2:{port}/; echo wget-status-$?; \
             ping -c 2 -W 2 10.0.2.2 | grep -o '[0-9]* packets received'"
        ),
    );
    println!("{out}");
    assert!(out.contains("[sealed] wget-status-"), "the sealed VM's wget did not run:\n{out}");
    assert!(!out.contains("[sealed] wget-status-0"), "the sealed VM's wget succeeded:\n{out}");
    assert!(!out.contains("armhv-uplink-host-payload"), "the sealed VM got out:\n{out}");
    assert!(out.contains("[sealed] 0 packets received"), "ping from the sealed VM:\n{out}");
    assert_eq!(server.connections(), 0, "a connection reached the host from the sealed VM");

    // (a) The VM on the uplink's network fetches the host's page.
    run.send("\x010").unwrap();
    run.expect("console: input goes to vm 0 (web)", COMMAND_TIMEOUT).unwrap();
    // No -T here: busybox 1.35's wget crashes with it once connected.
    let out = run_command(&mut run, &format!("wget -q -O - http://10.0.2.2:{port}/"));
    assert!(out.contains("[web] armhv-uplink-host-payload"), "wget from the host:\n{out}");
    assert_eq!(server.connections(), 1);

    // (b) A host client reaches busybox httpd in the VM through the hostfwd.
    run_command(
        &mut run,
        "mkdir -p /www && echo armhv-uplink-vm-payload > /www/index.html && httpd -p 8080 -h /www",
    );
    let response = http_get(fwd, COMMAND_TIMEOUT).unwrap();
    assert!(response.contains("armhv-uplink-vm-payload"), "from the VM's server:\n{response}");

    // The switches' own account: the sealed network's frames for outside were dropped there
    // (the scenario ran), and lan0's went out of the machine's NIC and came back.
    let mark = run.mark();
    run.send("\x01s").unwrap();
    run.expect_since(mark, "receive errors\n", COMMAND_TIMEOUT).unwrap();
    run.expect_since(mark, "console: network sealed: ", COMMAND_TIMEOUT).unwrap();
    let stats = complete_line(&run, mark, "console: network sealed: ");
    for line in stats.lines().filter(|l| l.contains("network ") || l.contains("uplink: ")) {
        println!("{line}");
    }
    // At least the two pings and one of wget's SYNs, all to the gateway's MAC.
    assert!(counter(&stats, "network sealed: ", " unknown unicast") >= 3, "{stats}");
    assert!(counter(&stats, "uplink: ", " frames sent") > 0, "{stats}");
    assert!(counter(&stats, "uplink: ", " received") > 0, "{stats}");
}

/// (d) The default demo's config, whose lan0 has the uplink, on a machine without a NIC: armhv
/// names the problem and the fix, and the VMs run and talk on lan0 as before (their DHCP finds
/// no server).
#[test]
fn uplink_without_a_machine_nic_is_reported_and_the_network_runs() {
    let mut run = boot("default.toml", None);
    run.expect(
        "network lan0: the config gives it the machine's NIC as uplink, but the machine has no \
         virtio-net device; the network runs without its uplink. Fix: on QEMU, add -netdev \
         user,id=uplink0 -device virtio-net-device,netdev=uplink0",
        BOOT_TIMEOUT,
    )
    .unwrap();
    for vm in ["linux0", "linux1"] {
        run.expect(&format!("[{vm}] armhv-guest: eth0 dhcp failed"), BOOT_TIMEOUT).unwrap();
        run.expect(&format!("[{vm}] armhv-guest: up, 2 cpus"), BOOT_TIMEOUT).unwrap();
    }
    let out = run_command(&mut run, "ping -c 2 -W 5 10.0.0.2");
    assert!(out.contains("2 packets received"), "ping on lan0:\n{out}");
}
