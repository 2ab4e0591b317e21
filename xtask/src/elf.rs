//! ELF to flat arm64 Image conversion (what `objcopy -O binary` does), so the build needs no
//! binutils for the target.

use anyhow::{Context, Result, bail};
use object::{Object, ObjectSegment, ObjectSymbol};

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
