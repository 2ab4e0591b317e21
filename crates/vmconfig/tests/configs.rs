//! The shipped configs: `configs/default.toml` must load and pack, and every
//! file in `configs/bad/` must be refused with an error naming the right key.
#![cfg(feature = "std")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use vmconfig::{ImageRef, Machine, decode_package, encode_package, load};

/// The machine the example configs are written against: QEMU `virt` with
/// `-m 1G -smp 4`.
const MACHINE: Machine = Machine { ram_bytes: 2 << 30, cpus: 4 };

/// Each bad config and a substring its error must contain: the key path (with
/// the `: ` that ends it, so `vm[0].kernel: ` does not match `kernel_load`).
const BAD: &[(&str, &str)] = &[
    ("affinity-length.toml", "vm[0].cpu_affinity: "),
    ("bad-affinity.toml", "vm[0].cpu_affinity: physical CPU 64 does not exist"),
    ("bad-name.toml", "vm[0].name: "),
    ("bad-size.toml", "vm[0].memory_size: "),
    ("cmdline-nul.toml", "vm[0].cmdline: "),
    ("duplicate-name.toml", "vm[1].name: "),
    ("entry-outside-ram.toml", "vm[0].entry: "),
    ("initrd-overlaps-kernel.toml", "vm[0].initrd_load: "),
    ("kernel-outside-ram.toml", "vm[0].kernel_load: "),
    ("memory-not-multiple.toml", "vm[0].memory_size: "),
    ("memory-sum.toml", "vm[1].memory_size: "),
    ("memory-too-small.toml", "vm[0].memory_size: "),
    ("misaligned-entry.toml", "vm[0].entry: "),
    ("missing-image.toml", "vm[0].kernel: "),
    ("missing-kernel.toml", "vm[0].kernel: missing required key"),
    ("no-vms.toml", ": vm: "),
    ("overlap.toml", "vm[0].kernel_load: "),
    ("ram-in-device-window.toml", "vm[0].memory_base: "),
    ("single-bracket.toml", ": vm: "),
    ("too-many-vcpus.toml", "vm[0].vcpus: "),
    ("too-many-vms.toml", ": vm: "),
    ("too-much-memory.toml", "vm[0].memory_size: "),
    ("unaligned-memory.toml", "vm[0].memory_base: "),
    ("unknown-device.toml", "vm[0].devices: "),
    ("unknown-key.toml", "vm[0].memroy_size: unknown key; did you mean `memory_size`?"),
    ("unknown-table.toml", ": machine: "),
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

#[test]
fn default_config_loads_and_packs() {
    let path = configs().join("default.toml");
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
        (0..config.vms.len()).map(|i| config.spec(i, &testguest, None).unwrap()).collect();
    assert_eq!(specs[0].kernel.load.raw(), 0x4008_0000);
    assert_eq!(specs[1].entry.raw(), 0x4008_0000);
    let package = encode_package(&specs, &MACHINE).unwrap();
    let decoded = decode_package(&package, &MACHINE).unwrap();
    assert_eq!(decoded.vms, specs);
}
