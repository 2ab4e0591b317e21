//! ELF to flat arm64 Image conversion (what `objcopy -O binary` does), so the build needs no
//! binutils for the target.

use anyhow::{Context, Result, bail};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

pub struct FlatImage {
    /// Address the first byte must be loaded at.
    pub load_addr: u64,
    pub bytes: Vec<u8>,
    /// Value of the `__hyp_end` symbol if present (end of bss and stacks).
    pub end_symbol: Option<u64>,
}

pub fn flatten(elf: &[u8]) -> Result<FlatImage> {
    let file = object::File::parse(elf).context("not an ELF file")?;
    let segments: Vec<_> = file
        .segments()
        .filter_map(|s| {
            let data = s.data().ok()?;
            (!data.is_empty()).then_some((s.address(), data))
        })
        .collect();
    let Some(load_addr) = segments.iter().map(|(a, _)| *a).min() else {
        bail!("the ELF file has no loadable segment with data");
    };
    let end = segments.iter().map(|(a, d)| a + d.len() as u64).max().unwrap_or(load_addr);
    if end - load_addr > 256 << 20 {
        bail!(
            "loadable segments span {} MiB: is the linker script right?",
            (end - load_addr) >> 20
        );
    }
    let mut bytes = vec![0u8; (end - load_addr) as usize];
    for (addr, data) in segments {
        let off = (addr - load_addr) as usize;
        bytes[off..off + data.len()].copy_from_slice(data);
    }
    let end_symbol = file.symbols().find(|s| s.name() == Ok("__hyp_end")).map(|s| s.address());
    Ok(FlatImage { load_addr, bytes, end_symbol })
}

/// ELF64 `r_info` of a relative relocation: type R_AARCH64_RELATIVE (1027), no symbol.
const R_AARCH64_RELATIVE: u64 = 1027;

/// Checks that armhv's dynamic relocations are what its boot code applies (boot.S): only
/// R_AARCH64_RELATIVE, each at an address inside the loaded image `[load_addr, end)`; anything
/// else would make armhv park at its first instruction. Returns how many there are.
pub fn check_relative_relocations(elf: &[u8], load_addr: u64, end: u64) -> Result<usize> {
    let file = object::File::parse(elf).context("not an ELF file")?;
    let Some(rela) = file.section_by_name(".rela.dyn") else {
        bail!(
            "armhv's ELF has no .rela.dyn: is it linked position-independent (hypervisor/build.rs)?"
        );
    };
    let data = rela.data()?;
    if data.len() % 24 != 0 {
        bail!(".rela.dyn is {} bytes, not a whole number of Elf64_Rela entries", data.len());
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap());
    for entry in data.chunks_exact(24) {
        let (offset, info) = (word(&entry[..8]), word(&entry[8..16]));
        if info != R_AARCH64_RELATIVE {
            bail!(
                "armhv has a dynamic relocation of type {} (symbol {}) at {offset:#x}: its boot \
                 code applies R_AARCH64_RELATIVE only",
                info & 0xffff_ffff,
                info >> 32
            );
        }
        if !(load_addr..end).contains(&offset) {
            bail!(
                "armhv has a relocation at {offset:#x}, outside its image {load_addr:#x}..{end:#x}"
            );
        }
    }
    Ok(data.len() / 24)
}
