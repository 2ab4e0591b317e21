//! The shipped configs: `configs/default.toml` must load and pack, and every
//! file in `configs/bad/` must be refused with an error naming the right key.
#![cfg(feature = "std")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use vmconfig::{
    ImageRef, Machine, Policies, Policy, VirtioDevice, decode_package, encode_package, load, parse,
};

/// The machine the example configs are written against: QEMU `virt` with
/// `-m 1G -smp 4`.
const MACHINE: Machine = Machine { ram_bytes: 2 << 30, cpus: 4 };

/// Each bad config and a substring its error must contain: the key path (with
/// the `: ` that ends it, so `vm[0].kernel: ` does not match `kernel_load`).
const BAD: &[(&str, &str)] = &[
    ("affinity-length.toml", "vm[0].cpu_affinity: "),
    ("bad-affinity.toml", "vm[0].cpu_affinity: physical CPU 64 does not exist"),
    ("bad-name.toml", "vm[0].name: "),
    ("cap-too-big.toml", "vm[0].cap: 100000 % is out of range"),
    ("bad-size.toml", "vm[0].memory_size: "),
    ("cmdline-nul.toml", "vm[0].cmdline: "),
    ("control-no-slot.toml", "vm[0].control: the VM needs 9 virtio-mmio slots"),
    ("disk-built-image.toml", "vm[0].disk[0].image: "),
    ("disk-memory-sum.toml", "vm[0].memory_size: the VM's RAM and disks add up to 2 GiB"),
    ("disk-missing-image.toml", "vm[0].disk[0].image: image file"),
    ("disk-no-image-or-size.toml", "vm[0].disk[0]: has neither image nor size"),
    ("disk-partition-bad-name.toml", "vm[0].disk[0].partition: \"Linux Data\" is not a valid"),
    (
        "disk-partition-shared.toml",
        "vm[1].disk[0].partition: \"data\" is already the partition of vm[0] (\"vm0\") disk[0]",
    ),
    ("disk-partition-too-big.toml", "vm[0].disk[0].size: 2 TiB is more than the 1 TiB"),
    ("disk-size-not-sector.toml", "vm[0].disk[0].size: 1000 bytes is not a multiple"),
    ("disk-smaller-than-image.toml", "vm[0].disk[0].size: 512 bytes is smaller than"),
    ("disk-too-big.toml", "vm[0].disk[0].size: 2 GiB is more than"),
    ("disk-unknown-key.toml", "vm[0].disk[0].sise: unknown key; did you mean `size`?"),
    ("duplicate-name.toml", "vm[1].name: "),
    ("entry-outside-ram.toml", "vm[0].entry: "),
    ("gic-bad-value.toml", "vm[0].gic: a TOML integer is not a GIC version; write gic = \"v2\""),
    ("initrd-overlaps-kernel.toml", "vm[0].initrd_load: "),
    ("kernel-outside-ram.toml", "vm[0].kernel_load: "),
    ("memory-not-multiple.toml", "vm[0].memory_size: "),
    (
        "memory-sum.toml",
        "vm[1].memory_size: the VMs started at boot (vm[0] (\"vm0\"), vm[1] (\"vm1\")) need more",
    ),
    ("memory-too-small.toml", "vm[0].memory_size: "),
    ("misaligned-entry.toml", "vm[0].entry: "),
    ("missing-image.toml", "vm[0].kernel: "),
    ("missing-kernel.toml", "vm[0].kernel: missing required key"),
    ("nic-bad-mac.toml", "vm[0].nic[0].mac: \"52:54:00:12:34\" is not a MAC address"),
    ("nic-bad-network.toml", "vm[0].nic[0].network: "),
    ("nic-duplicate-mac.toml", "vm[1].nic[0].mac: 52:54:00:12:34:56 is already the MAC of vm[0]"),
    ("nic-missing-network.toml", "vm[0].nic[0].network: missing required key"),
    ("nic-multicast-mac.toml", "vm[0].nic[0].mac: 01:00:5e:00:00:01 is a multicast address"),
    ("nic-mtu-differs.toml", "vm[1].nic[0].mtu: MTU 1500 differs from the 9000 of vm[0]"),
    ("nic-mtu-too-small.toml", "vm[0].nic[0].mtu: 40 is not a usable MTU; use 68 to 65535"),
    ("nic-single-bracket.toml", "vm[0].nic: must be an array of tables"),
    ("no-vms.toml", ": vm: "),
    ("overlap.toml", "vm[0].kernel_load: "),
    ("passthrough-bad-path.toml", "vm[0].passthrough: \"pl031@9010000\" is not a device-tree"),
    ("passthrough-duplicate.toml", "vm[0].passthrough: \"/pl031@9010000\" is listed twice"),
    (
        "passthrough-two-vms.toml",
        "vm[1].passthrough: \"/pl031@9010000\" is already assigned to vm[0]",
    ),
    ("pmu-bad-value.toml", "vm[0].pmu: \"yes\" is not a PMU setting; write pmu = \"virtual\""),
    (
        "policy-bad-value.toml",
        "vm[0].on_crash: \"reboot\" is not a policy; write on_crash = \"stop\" or on_crash = \
         \"restart\"",
    ),
    ("quantum-out-of-range.toml", "scheduler.quantum_ms: 5 ms is out of range"),
    ("irqdist-bad-spread.toml", "irqdist.spread: expected \"one\""),
    (
        "irqdist-avoid-realtime-zero.toml",
        "irqdist.avoid_realtime_pct: expected a percentage from 1 to 100",
    ),
    ("irqdist-unknown-key.toml", "irqdist.enable: unknown key; did you mean `enabled`?"),
    ("ram-in-device-window.toml", "vm[0].memory_base: "),
    ("realtime-budget-over-period.toml", "vm[0].realtime.budget_us: 20000 µs is out of range"),
    ("realtime-missing-period.toml", "vm[0].realtime.period_us: missing required key"),
    ("scheduler-unknown-key.toml", "scheduler.quantum: unknown key; did you mean `quantum_ms`?"),
    ("single-bracket.toml", ": vm: "),
    ("too-many-disks.toml", "vm[0].disk: has 5 [[vm.disk]] tables"),
    ("too-many-nics.toml", "vm[0].nic: has 5 [[vm.nic]] tables"),
    ("too-many-passthrough.toml", "vm[0].passthrough: has 5 device paths"),
    ("too-many-vcpus.toml", "vm[0].vcpus: "),
    ("too-many-virtio.toml", "vm[0].devices: the VM needs 9 virtio-mmio slots"),
    ("too-many-vms.toml", ": vm: "),
    ("too-much-memory.toml", "vm[0].memory_size: "),
    ("two-uplinks.toml", "network[1].uplink: network[0] (\"lan0\") has the uplink already"),
    ("unaligned-memory.toml", "vm[0].memory_base: "),
    ("unknown-device.toml", "vm[0].devices: "),
    ("uplink-unused-network.toml", "network[0].name: no VM has a NIC on network \"lan1\""),
    ("unknown-key.toml", "vm[0].memroy_size: unknown key; did you mean `memory_size`?"),
    ("unknown-table.toml", ": machine: "),
    ("weight-zero.toml", "vm[0].weight: 0 is out of range"),
    ("wrong-type.toml", "vm[0].vcpus: "),
];

fn configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs")
}

#[test]
fn every_bad_config_is_rejected_with_its_key() {
    let dir = configs().join("bad");
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".toml"))
        .collect();
    let listed: BTreeSet<String> = BAD.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(on_disk, listed, "configs/bad/ and the BAD table disagree");

    for (file, expected) in BAD {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Invalid: "), "{file}: the first line must say what is wrong");
        let err = match load(&path, &MACHINE) {
            Ok(_) => panic!("{file} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(expected), "{file}: expected {expected:?} in\n  {err}");
        assert!(err.starts_with(&path.display().to_string()), "{file}: {err}");
        assert!(err.contains("; "), "{file}: no fix offered in\n  {err}");
    }
}

/// The two-testguest config (the default demo needs the downloaded Linux images; it is booted
/// by xtask's Linux tests).
#[test]
fn two_vm_config_loads_and_packs() {
    let path = configs().join("tests/two-vms.toml");
    let config = load(&path, &MACHINE).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<_> = config.vms.iter().map(|vm| vm.name.as_str()).collect();
    assert_eq!(names, ["vm0", "vm1"]);
    for (i, vm) in config.vms.iter().enumerate() {
        assert_eq!(vm.vcpus, 1);
        assert_eq!(vm.cpu_affinity, Some(vec![i as u32]));
        assert_eq!(vm.memory.size, 32 << 20);
        assert_eq!(vm.kernel, ImageRef::Built("testguest".into()));
        assert_eq!(vm.cmdline, "hello hvc device heartbeat=8 off");
    }

    // What xtask does: build the guest, resolve, pack; what the hypervisor
    // does: decode.
    let testguest: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    let specs: Vec<_> =
        (0..config.vms.len()).map(|i| config.spec(i, &testguest, None, &[]).unwrap()).collect();
    assert_eq!(specs[0].kernel.load.raw(), 0x4008_0000);
    assert_eq!(specs[1].entry.raw(), 0x4008_0000);
    let package = encode_package(&specs, &config.scheduler, config.uplink(), &MACHINE).unwrap();
    let decoded = decode_package(&package, &MACHINE).unwrap();
    assert_eq!(decoded.vms, specs);
}

/// Every key the config format has, through the whole pipeline: parse, read
/// the disk image as xtask does, resolve, pack, decode.
#[test]
fn every_key_survives_the_round_trip() {
    let origin = configs().join("bad/every-key.toml"); // only for resolving `files/disk.img`
    let text = r#"
[scheduler]
quantum_ms = 30

[irqdist]
enabled = false
spread = "all"
avoid_realtime_pct = 10

[[vm]]
name = "web"
vcpus = 2
cpu_affinity = [0, 1]
memory_base = 0x4000_0000
memory_size = "64M"
kernel = "@testguest"
kernel_load = 0x4008_0000
entry = 0x4008_0000
initrd = "files/initrd.img"
initrd_load = 0x4100_0000
cmdline = "console=hvc0"
devices = ["pl011", "virtio-console", "virtio-rng"]
passthrough = ["/pl031@9010000"]
weight = 512
cap = 150
control = true
on_poweroff = "restart"
on_reboot = "stop"
on_crash = "restart"

[vm.realtime]
budget_us = 2000
period_us = 10000

[[vm.disk]]
image = "files/disk.img"
read_only = true

[[vm.disk]]
size = "16M"

[[vm.nic]]
network = "lan0"
mac = "02:00:00:00:00:01"
mtu = 9000

[[vm]]
name = "db"
vcpus = 1
memory_size = "32M"
kernel = "@testguest"
autostart = false

[[vm.nic]]
network = "lan0"
mtu = 9000
"#;
    let config = parse(text, &origin, &MACHINE).unwrap_or_else(|e| panic!("{e}"));
    let guest: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    let initrd = std::fs::read(configs().join("bad/files/initrd.img")).unwrap();
    let disk = std::fs::read(configs().join("bad/files/disk.img")).unwrap();
    let web = config.spec(0, &guest, Some(&initrd), &[Some(&disk), None]).unwrap();
    let db = config.spec(1, &guest, None, &[]).unwrap();
    let specs = [web, db];
    let package = encode_package(&specs, &config.scheduler, config.uplink(), &MACHINE).unwrap();
    let decoded = decode_package(&package, &MACHINE).unwrap();
    assert_eq!(decoded.scheduler.quantum_ms, 30);
    let irqdist = vmconfig::IrqDistSpec {
        enabled: false,
        spread: vmconfig::Spread::All,
        avoid_realtime_pct: Some(10),
    };
    assert_eq!(decoded.scheduler.irqdist, Some(irqdist));
    let vms = decoded.vms;
    assert_eq!(vms, specs);
    let rt = vmconfig::RealTimeSpec { budget_us: 2000, period_us: 10_000 };
    assert_eq!(vms[0].sched, vmconfig::VmSched { weight: 512, cap: Some(150), realtime: Some(rt) });
    assert_eq!(vms[1].sched, vmconfig::VmSched::default());
    assert_eq!((vms[0].autostart, vms[1].autostart), (true, false));
    assert_eq!((vms[0].control, vms[1].control), (true, false));
    let restart_but_reboot = Policies {
        on_poweroff: Policy::Restart,
        on_reboot: Policy::Stop,
        on_crash: Policy::Restart,
    };
    assert_eq!((vms[0].policies, vms[1].policies), (restart_but_reboot, Policies::default()));

    let web = &vms[0];
    assert_eq!(web.disks[0].image, &disk[..]);
    assert_eq!(web.disks[0].capacity, 1024); // 576 bytes, rounded up to a sector
    assert!(web.disks[0].read_only);
    assert_eq!(web.disks[1].capacity, 16 << 20);
    assert_eq!(web.passthrough, [vmconfig::Passthrough::from("/pl031@9010000")]);
    assert_eq!(vms[1].nics[0].mac, [0x52, 0x54, 0, 0, 1, 0]);
    assert_eq!((web.nics[0].mtu, vms[1].nics[0].mtu), (Some(9000), Some(9000)));
    let slots: Vec<_> = web.virtio_devices().collect();
    assert!(matches!(
        slots[..],
        [
            VirtioDevice::Net(_),
            VirtioDevice::Block(_),
            VirtioDevice::Block(_),
            VirtioDevice::Console,
            VirtioDevice::Rng,
            VirtioDevice::Control
        ]
    ));
}
