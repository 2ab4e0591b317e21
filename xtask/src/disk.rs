//! The machine disk: the image file QEMU attaches as the machine's own virtio-blk disk, with a
//! GPT partition for each `[[vm.disk]] partition = "name"` of the config (crate
//! `machine-disk`). `cargo xtask run` and `build` keep it at [`default_path`], so what the
//! guests write there persists from one `make run` to the next; QEMU tests get a scratch file
//! of their own ([`for_test`]).
//!
//! The file is created when it is missing. A partition is created, with its disk's `image`
//! written into it, when the config first names it; after that it is never moved, resized or
//! written by the build tool again, even when the config's `image` changes. To start over,
//! delete the file.

use crate::{MachineSpec, build_dir};
use anyhow::{Context, Result, anyhow};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where `cargo xtask run` and `build` keep the machine disk: `build/machine-disk.img`.
pub fn default_path() -> PathBuf {
    build_dir().join("machine-disk.img")
}

/// Lays the machine disk at `path` out for `config`: one partition per disk on a partition,
/// named after it, created (with its image) when it is missing; existing partitions are kept
/// as they are. Returns the path to attach, or `None` when the config has no disk on a
/// partition (then the file is not touched).
pub fn machine_disk_for(config: &vmconfig::Config, path: &Path) -> Result<Option<PathBuf>> {
    let parts = config.partition_disks().map_err(|e| anyhow!("{e}"))?;
    if parts.is_empty() {
        return Ok(None);
    }
    let shown = path.display();
    let start_over = format!("delete {shown} to start over (every disk on it is lost)");
    let existing = machine_disk::read_file(path)
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("machine disk {shown}: cannot use it; {start_over}"))?
        .unwrap_or_default();

    // The images of the partitions to create; an existing partition's is never read again.
    let mut images = Vec::with_capacity(parts.len());
    for p in &parts {
        let old = existing.iter().find(|e| e.name == p.name);
        if let Some(old) = old.filter(|old| old.size() != p.capacity) {
            return Err(anyhow!(
                "{}",
                config.disk_error(
                    p.vm,
                    p.disk,
                    "size",
                    format!(
                        "partition {:?} of the machine disk {shown} has {} bytes, the config \
                         wants {}; the machine disk keeps its partitions as they are (their data \
                         would move): set size = {} to keep the data, give the disk another \
                         partition name, or {start_over}",
                        p.name,
                        old.size(),
                        p.capacity,
                        old.size(),
                    ),
                )
            ));
        }
        let image = match (old, p.image) {
            (None, Some(file)) => Some(
                std::fs::read(file)
                    .with_context(|| format!("reading the disk image {}", file.display()))?,
            ),
            _ => None,
        };
        images.push(image);
    }
    let wanted: Vec<machine_disk::Wanted> = parts
        .iter()
        .zip(&images)
        .map(|(p, image)| machine_disk::Wanted {
            name: p.name,
            size: p.capacity,
            image: image.as_deref(),
        })
        .collect();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating the directory of {shown}"))?;
    }
    let report = machine_disk::lay_out(path, &wanted)
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("laying out the machine disk {shown} ({start_over})"))?;
    eprintln!("xtask: machine disk {shown}: {}", describe(&report, &parts));
    Ok(Some(path.to_owned()))
}

/// One line on what [`machine_disk::lay_out`] did.
fn describe(report: &machine_disk::LayoutReport, parts: &[vmconfig::PartitionDisk]) -> String {
    let names = |list: &mut dyn Iterator<Item = &str>| list.collect::<Vec<_>>().join(", ");
    let mut kept = parts.iter().map(|p| p.name).filter(|n| !report.added.iter().any(|a| a == n));
    let (kept, added) = (names(&mut kept), names(&mut report.added.iter().map(String::as_str)));
    let mut what = Vec::new();
    if report.created {
        what.push(format!("created with partitions {added}"));
    } else if !added.is_empty() {
        what.push(format!("added partitions {added}"));
    }
    if let Some(len) = report.grown_to {
        what.push(format!("grown to {} MiB", len.div_ceil(1 << 20)));
    }
    if !kept.is_empty() {
        what.push(format!("partitions {kept} kept as they are"));
    }
    what.join("; ")
}

/// A test's machine disk file, deleted when dropped.
#[derive(Debug)]
pub struct ScratchDisk(PathBuf);

impl ScratchDisk {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDisk {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The machine a QEMU test boots `config` on: `machine` with the machine disk the config
/// needs attached.
/// - No disk on a partition: `machine` as it is (a test may attach a disk of its own).
/// - `machine.machine_disk` set: that file, laid out for the config and kept (a test that
///   boots twice to see data persist names one).
/// - Otherwise a fresh scratch file under `build/tests/machine-disks/`, laid out for the
///   config and deleted when the returned guard drops (every run starts from the images).
pub fn for_test(
    config: &Path,
    machine: &MachineSpec,
) -> Result<(MachineSpec, Option<ScratchDisk>)> {
    let cfg = vmconfig::load(config, &machine.as_config_machine()).map_err(|e| anyhow!("{e}"))?;
    let mut machine = machine.clone();
    if let Some(path) = &machine.machine_disk {
        machine_disk_for(&cfg, path)?;
        return Ok((machine, None));
    }
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let stem = config.file_stem().and_then(|s| s.to_str()).unwrap_or("config");
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = build_dir()
        .join("tests")
        .join("machine-disks")
        .join(format!("{stem}-{}-{n}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let scratch = ScratchDisk(path);
    let attached = machine_disk_for(&cfg, scratch.path())?;
    let scratch = attached.is_some().then_some(scratch);
    machine.machine_disk = attached;
    Ok((machine, scratch))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own for one test, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("xtask-disk-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const MACHINE: vmconfig::Machine = vmconfig::Machine { ram_bytes: 2 << 30, cpus: 4 };

    fn vm(name: &str, disks: &str) -> String {
        format!(
            "[[vm]]\nname = \"{name}\"\nvcpus = 1\nmemory_size = \"32M\"\nkernel = \
             \"@testguest\"\n{disks}\n"
        )
    }

    fn config(dir: &Dir, text: &str) -> vmconfig::Config {
        vmconfig::parse(text, &dir.0.join("x.toml"), &MACHINE).unwrap_or_else(|e| panic!("{e}"))
    }

    fn read_at(path: &Path, part: &machine_disk::Partition, len: usize) -> Vec<u8> {
        let bytes = std::fs::read(path).unwrap();
        let at = part.offset() as usize;
        bytes[at..at + len].to_vec()
    }

    #[test]
    fn a_config_without_partitions_has_no_machine_disk() {
        let dir = Dir::new("none");
        let c = config(&dir, &vm("a", "[[vm.disk]]\nsize = \"1M\""));
        let path = dir.0.join("disk.img");
        assert_eq!(machine_disk_for(&c, &path).unwrap(), None);
        assert!(!path.exists());
    }

    #[test]
    fn partitions_are_created_once_with_their_image_and_then_kept() {
        let dir = Dir::new("layout");
        std::fs::write(dir.0.join("seed.img"), b"seed v1").unwrap();
        let web = "[[vm.disk]]\nsize = \"1M\"\n[[vm.disk]]\npartition = \"web-data\"\n\
                   image = \"seed.img\"\nsize = \"2M\"";
        let c = config(
            &dir,
            &(vm("web", web) + &vm("db", "[[vm.disk]]\npartition = \"db\"\nsize = \"1M\"")),
        );
        let path = dir.0.join("sub").join("machine-disk.img");
        assert_eq!(machine_disk_for(&c, &path).unwrap().as_deref(), Some(path.as_path()));
        let parts = machine_disk::read_file(&path).unwrap().unwrap();
        let got: Vec<_> = parts.iter().map(|p| (p.name.as_str(), p.size())).collect();
        assert_eq!(got, [("web-data", 2 << 20), ("db", 1 << 20)]);
        assert_eq!(read_at(&path, &parts[0], 8), b"seed v1\0");

        // The guest writes; the image changes: the next run keeps the guest's data.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[parts[0].offset() as usize..][..6].copy_from_slice(b"guest!");
        std::fs::write(&path, &bytes).unwrap();
        std::fs::write(dir.0.join("seed.img"), b"seed v2").unwrap();
        machine_disk_for(&c, &path).unwrap();
        assert_eq!(read_at(&path, &parts[0], 8), b"guest!1\0");

        // A disk added later gets a partition after the others, with its image.
        let more = format!("{web}\n[[vm.disk]]\npartition = \"web-logs\"\nimage = \"seed.img\"");
        let c2 = config(
            &dir,
            &(vm("web", &more) + &vm("db", "[[vm.disk]]\npartition = \"db\"\nsize = \"1M\"")),
        );
        machine_disk_for(&c2, &path).unwrap();
        let parts2 = machine_disk::read_file(&path).unwrap().unwrap();
        assert_eq!(parts2[..2], parts[..]);
        assert_eq!((parts2[2].name.as_str(), parts2[2].size()), ("web-logs", 512));
        assert_eq!(read_at(&path, &parts2[2], 7), b"seed v2");
        assert_eq!(read_at(&path, &parts2[0], 6), b"guest!");
    }

    #[test]
    fn what_was_done_is_said_in_one_line() {
        let dir = Dir::new("describe");
        let c = config(
            &dir,
            &vm(
                "a",
                "[[vm.disk]]\npartition = \"a\"\nsize = \"1M\"\n[[vm.disk]]\npartition = \"b\"\nsize = \"1M\"",
            ),
        );
        let parts = c.partition_disks().unwrap();
        let report = |created, added: &[&str], grown_to| machine_disk::LayoutReport {
            created,
            added: added.iter().map(|a| a.to_string()).collect(),
            grown_to,
        };
        assert_eq!(
            describe(&report(true, &["a", "b"], None), &parts),
            "created with partitions a, b"
        );
        assert_eq!(
            describe(&report(false, &["b"], Some(3 << 20)), &parts),
            "added partitions b; grown to 3 MiB; partitions a kept as they are"
        );
        assert_eq!(describe(&report(false, &[], None), &parts), "partitions a, b kept as they are");
    }

    #[test]
    fn a_partition_of_another_size_is_refused_with_the_ways_out() {
        let dir = Dir::new("resize");
        let path = dir.0.join("machine-disk.img");
        let disk =
            |size: &str| vm("a", &format!("[[vm.disk]]\npartition = \"data\"\nsize = \"{size}\""));
        machine_disk_for(&config(&dir, &disk("1M")), &path).unwrap();
        let before = std::fs::read(&path).unwrap();
        let e = machine_disk_for(&config(&dir, &disk("2M")), &path).unwrap_err().to_string();
        assert!(
            e.contains(":8: vm[0].disk[0].size: partition \"data\" of the machine disk"),
            "{e}"
        );
        assert!(e.contains("has 1048576 bytes, the config wants 2097152"), "{e}");
        assert!(e.contains("set size = 1048576 to keep the data"), "{e}");
        assert!(e.contains(&format!("delete {} to start over", path.display())), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "the disk was touched");
    }

    #[test]
    fn a_foreign_disk_is_refused_and_left_alone() {
        let dir = Dir::new("foreign");
        let path = dir.0.join("machine-disk.img");
        std::fs::write(&path, vec![0x5a; 64 << 10]).unwrap();
        let c = config(&dir, &vm("a", "[[vm.disk]]\npartition = \"data\"\nsize = \"1M\""));
        let e = format!("{:#}", machine_disk_for(&c, &path).unwrap_err());
        assert!(e.contains("no GPT partition table"), "{e}");
        assert!(e.contains(&format!("delete {} to start over", path.display())), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), vec![0x5a; 64 << 10]);
    }

    #[test]
    fn a_test_gets_a_scratch_disk_or_the_one_it_names() {
        let dir = Dir::new("scratch");
        let file = dir.0.join("x.toml");
        std::fs::write(&file, vm("a", "[[vm.disk]]\npartition = \"data\"\nsize = \"1M\"")).unwrap();
        let machine = MachineSpec::for_tests();
        let (m, scratch) = for_test(&file, &machine).unwrap();
        let scratch = scratch.expect("a scratch disk");
        assert_eq!(m.machine_disk.as_deref(), Some(scratch.path()));
        assert!(scratch.path().starts_with(build_dir().join("tests")));
        let (m2, scratch2) = for_test(&file, &machine).unwrap();
        assert_ne!(m2.machine_disk, m.machine_disk, "each run has its own");
        let path = scratch.path().to_owned();
        drop(scratch);
        assert!(!path.exists());
        drop(scratch2);

        // A disk the test names is laid out and kept.
        let named = dir.0.join("kept.img");
        let machine = MachineSpec { machine_disk: Some(named.clone()), ..MachineSpec::for_tests() };
        let (m, scratch) = for_test(&file, &machine).unwrap();
        assert!(scratch.is_none() && named.exists());
        assert_eq!(m.machine_disk, Some(named));

        // Without a partition disk, nothing is attached.
        std::fs::write(&file, vm("a", "")).unwrap();
        let (m, scratch) = for_test(&file, &MachineSpec::for_tests()).unwrap();
        assert!(scratch.is_none() && m.machine_disk.is_none());
    }
}
