//! Fuzzes both ends of the VM configuration pipeline on every input:
//!
//! * as UTF-8 text, `vmconfig::parse` (TOML, the schema walk and every rule),
//!   with the config file in a temporary directory that holds a few image
//!   files (`files/disk.img`, `files/initrd.img`, `files/Image`,
//!   `files/empty.img`) for relative paths to find; a config that parses is
//!   resolved with image bytes (`Config::spec`), packed and unpacked, and
//!   must come back equal;
//! * as bytes, `vmconfig::decode_package`, the decoder the hypervisor runs at
//!   EL2 on the package appended to its image: a package it accepts must
//!   re-encode, and decode again to the same VMs.
//!
//! Seeds: `fuzz/seeds/vmconfig/` (packages, from `fuzz/seeds/generate.py`)
//! and the repository's `configs/*.toml` and `configs/bad/*.toml`, which the
//! test in `xtask/tests/fuzz.rs` adds to the corpus.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use vmconfig::{Config, ImageRef, Machine, decode_package, encode_package, package_len, parse};

/// The machine `make run` boots (`-m 2G -smp 4`).
const MACHINE: Machine = Machine { ram_bytes: 2 << 30, cpus: 4 };

/// Image files next to the config, with their contents.
static FILES: LazyLock<Vec<(&'static str, Vec<u8>)>> = LazyLock::new(|| {
    // An arm64 Linux Image header: text_offset 0, image_size 1 MiB, magic.
    let mut image = vec![0u8; 8192];
    image[0x10..0x18].copy_from_slice(&(1u64 << 20).to_le_bytes());
    image[0x38..0x3c].copy_from_slice(b"ARM\x64");
    vec![
        ("files/disk.img", (0..576u32).map(|i| i as u8).collect()),
        ("files/initrd.img", vec![0x55; 89]),
        ("files/Image", image),
        ("files/empty.img", Vec::new()),
    ]
});

/// A directory of its own (the fuzzer may run in several processes), with
/// `FILES` in it; the config file is "read" from `config.toml` there. It is
/// left behind (a few KiB); the bounded run points `TMPDIR` at a scratch
/// directory it removes.
static ORIGIN: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir = std::env::temp_dir().join(format!("armhv-fuzz-vmconfig-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("files")).unwrap();
    for (name, bytes) in FILES.iter() {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    dir.join("config.toml")
});

/// The bytes of an image the config names: made up for `@name` guests, the
/// file's for ours, `None` for any other file.
fn image_bytes(image: &ImageRef, built: &'static [u8]) -> Option<&'static [u8]> {
    match image {
        ImageRef::Built(_) => Some(built),
        ImageRef::Path(path) => file_bytes(path),
    }
}

fn file_bytes(path: &Path) -> Option<&'static [u8]> {
    let dir = ORIGIN.parent()?;
    FILES.iter().find(|(name, _)| dir.join(name) == path).map(|(_, bytes)| bytes.as_slice())
}

static KERNEL: [u8; 4096] = [0x1f; 4096];
static INITRD: [u8; 1000] = [0xa5; 1000];

/// Resolves, packs and unpacks a config that parsed.
fn pack(config: &Config) {
    let mut specs = Vec::new();
    for (i, vm) in config.vms.iter().enumerate() {
        let Some(kernel) = image_bytes(&vm.kernel, &KERNEL) else { return };
        let initrd = match &vm.initrd {
            None => None,
            Some(r) => match image_bytes(r, &INITRD) {
                Some(bytes) => Some(bytes),
                None => return,
            },
        };
        let mut disks = Vec::new();
        for disk in &vm.disks {
            match &disk.image {
                // A disk on a partition has its image written into the partition by the
                // build tool; the package carries none.
                _ if disk.partition.is_some() => disks.push(None),
                None => disks.push(None),
                Some(path) => match file_bytes(path) {
                    Some(bytes) => disks.push(Some(bytes)),
                    None => return,
                },
            }
        }
        match config.spec(i, kernel, initrd, &disks) {
            Ok(spec) => specs.push(spec),
            Err(_) => return,
        }
    }
    // Every VM resolved and passed its checks, and `parse` checked the
    // cross-VM rules: the package builds.
    let package = encode_package(&specs, &config.scheduler, config.uplink(), &MACHINE)
        .unwrap_or_else(|v| panic!("config accepted, package refused: {v}"));
    assert_eq!(package_len(&package), Ok(package.len() as u64));
    let back = decode_package(&package, &MACHINE)
        .unwrap_or_else(|e| panic!("the package of an accepted config is refused: {e}"));
    assert_eq!(back.vms, specs);
    assert_eq!(back.scheduler, config.scheduler);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(config) = parse(text, &ORIGIN, &MACHINE)
    {
        pack(&config);
    }

    if let Ok(package) = decode_package(data, &MACHINE) {
        let len = package_len(data).expect("a decoded package has a header");
        assert_eq!(package.bytes.len() as u64, len);
        let again = encode_package(&package.vms, &package.scheduler, package.uplink, &MACHINE)
            .unwrap_or_else(|v| panic!("a decoded package does not re-encode: {v}"));
        let back = decode_package(&again, &MACHINE)
            .unwrap_or_else(|e| panic!("a re-encoded package is refused: {e}"));
        assert_eq!(back.vms, package.vms);
        assert_eq!(back.scheduler, package.scheduler);
    }
});
