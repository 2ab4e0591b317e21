//! The boot image: the hypervisor as an arm64 Image, zero-filled up to `__hyp_end`, followed by
//! the package of VM definitions and guest images. The Image header's `image_size` covers the
//! package too: a boot loader that moves the Image (U-Boot's `booti`, to a 2 MiB-aligned base)
//! copies `image_size` bytes, and armhv finds the package right after its own `__hyp_end`,
//! wherever it runs.

use crate::{GUEST_TARGET, HYP_TARGET, MachineSpec, build_dir, cargo_build, cargo_build_with, elf};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use vmconfig::ImageRef;

/// Builds the boot image for `config` and returns its path.
pub fn build(config: &Path, machine: &MachineSpec) -> Result<PathBuf> {
    let cfg = vmconfig::load(config, &machine.as_config_machine()).map_err(|e| anyhow!("{e}"))?;
    build_loaded(config, &cfg, machine)
}

/// Builds the boot image for `cfg`, loaded from the file `config`, and returns its path. The
/// machine disk (disks on partitions) is not touched: see [`crate::disk`].
pub fn build_loaded(
    config: &Path,
    cfg: &vmconfig::Config,
    machine: &MachineSpec,
) -> Result<PathBuf> {
    let mut built: HashMap<String, Vec<u8>> = HashMap::new();
    let mut read_image = |r: &ImageRef| -> Result<Vec<u8>> {
        match r {
            ImageRef::Built(name) => {
                if let Some(b) = built.get(name) {
                    return Ok(b.clone());
                }
                if !crate::root().join("guests").join(name).is_dir() {
                    bail!(
                        "{}: no guest named '{name}' in guests/ (use \"@testguest\" or a file path)",
                        config.display()
                    );
                }
                let elf_path = cargo_build(name, GUEST_TARGET)?;
                let flat = elf::flatten(&std::fs::read(&elf_path)?)?;
                built.insert(name.clone(), flat.bytes.clone());
                Ok(flat.bytes)
            }
            ImageRef::Path(p) => {
                std::fs::read(p).with_context(|| format!("reading {}", p.display()))
            }
        }
    };

    let mut images = Vec::new();
    for vm in &cfg.vms {
        let kernel = read_image(&vm.kernel)?;
        let initrd = match &vm.initrd {
            Some(r) => Some(read_image(r)?),
            None => None,
        };
        // Disk images are always files; vmconfig resolved their paths. A disk on a partition
        // has its image written into the partition (crate::disk), not packed.
        let mut disks = Vec::new();
        for disk in &vm.disks {
            let image = match &disk.image {
                Some(p) if disk.partition.is_none() => {
                    Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?)
                }
                _ => None,
            };
            disks.push(image);
        }
        images.push((kernel, initrd, disks));
    }
    let mut specs = Vec::new();
    for (i, (kernel, initrd, disks)) in images.iter().enumerate() {
        let disks: Vec<Option<&[u8]>> = disks.iter().map(Option::as_deref).collect();
        specs.push(cfg.spec(i, kernel, initrd.as_deref(), &disks).map_err(|e| anyhow!("{e}"))?);
    }
    let package = vmconfig::encode_package(&specs, &cfg.scheduler, cfg.uplink(), &cfg.machine)
        .map_err(|v| anyhow!("{}: {}: {}", config.display(), v.path(), v.message))?;

    let hyp_elf = cargo_build_with("armhv", HYP_TARGET, &machine.hyp_features)?;
    let hyp_elf = std::fs::read(&hyp_elf)?;
    let hyp = elf::flatten(&hyp_elf)?;
    let end = hyp.end_symbol.ok_or_else(|| anyhow!("armhv's ELF has no __hyp_end symbol"))?;
    elf::check_relative_relocations(&hyp_elf, hyp.load_addr, end)?;
    let mut image = hyp.bytes;
    image.resize((end - hyp.load_addr) as usize, 0);
    image.extend_from_slice(&package);
    set_image_size(&mut image, end - hyp.load_addr)?;

    let out_dir = build_dir();
    std::fs::create_dir_all(&out_dir)?;
    let stem = config.file_stem().and_then(|s| s.to_str()).unwrap_or("armhv");
    let suffix: String = machine.hyp_features.iter().map(|f| format!("-{f}")).collect();
    let out = out_dir.join(format!("armhv-{stem}{suffix}.img"));
    // Written aside and renamed into place: tests running at once build the same image, and
    // one of them may be reading it (or QEMU loading it) while another writes it.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let partial = out.with_extension(format!("img.{}-{n}", std::process::id()));
    std::fs::write(&partial, &image)?;
    std::fs::rename(&partial, &out)?;
    eprintln!(
        "xtask: {} -> {} ({} VMs, {} KiB)",
        config.display(),
        out.display(),
        cfg.vms.len(),
        image.len() / 1024
    );
    Ok(out)
}

/// Offsets in the arm64 Image header (Linux, Documentation/arch/arm64/booting.rst).
const IMAGE_SIZE_AT: usize = 16;
const IMAGE_MAGIC_AT: usize = 56;
const IMAGE_MAGIC: &[u8; 4] = b"ARM\x64";

/// Sets the Image header's `image_size` to the whole of `image` (armhv, its bss and stacks, and
/// the boot package after them), after checking that the header is armhv's, whose
/// `image_size` as linked is `linked_size` (up to `__hyp_end`).
fn set_image_size(image: &mut [u8], linked_size: u64) -> Result<()> {
    if image.get(IMAGE_MAGIC_AT..IMAGE_MAGIC_AT + 4) != Some(&IMAGE_MAGIC[..]) {
        bail!("armhv's image does not start with an arm64 Image header");
    }
    let total = image.len() as u64;
    let field = &mut image[IMAGE_SIZE_AT..IMAGE_SIZE_AT + 8];
    let linked = u64::from_le_bytes((&*field).try_into().unwrap());
    if linked != linked_size {
        bail!("armhv's Image header says image_size {linked:#x}, its __hyp_end {linked_size:#x}");
    }
    field.copy_from_slice(&total.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_size_covers_the_package() {
        let mut image = vec![0u8; 0x3000];
        image[IMAGE_SIZE_AT..IMAGE_SIZE_AT + 8].copy_from_slice(&0x2000u64.to_le_bytes());
        image[IMAGE_MAGIC_AT..IMAGE_MAGIC_AT + 4].copy_from_slice(IMAGE_MAGIC);
        set_image_size(&mut image, 0x2000).unwrap();
        assert_eq!(image[IMAGE_SIZE_AT..IMAGE_SIZE_AT + 8], 0x3000u64.to_le_bytes());
        // Not armhv's header as linked: refused, not patched.
        assert!(set_image_size(&mut image, 0x2000).is_err());
        image[IMAGE_MAGIC_AT] = 0;
        assert!(set_image_size(&mut image, 0x3000).is_err());
    }
}
