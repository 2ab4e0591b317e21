//! The arm64 Linux Image header (Documentation/arm64/booting.rst): where in RAM an image wants
//! to be loaded. vmbench carries one (the `baremetal` crate's), so it boots on QEMU's
//! `-kernel`, under armhv and here alike.

/// Byte offset of the magic "ARM\x64".
const MAGIC_AT: usize = 56;
const MAGIC: [u8; 4] = *b"ARM\x64";
/// The header is 64 bytes.
const HEADER_LEN: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Load offset from a 2 MiB aligned base of RAM.
    pub text_offset: u64,
    /// Bytes the image occupies once loaded, its BSS included (0 in old kernels: unknown).
    pub image_size: u64,
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

pub fn parse(image: &[u8]) -> Result<Header, String> {
    if image.len() < HEADER_LEN {
        return Err(format!("{} bytes: too short for an arm64 Image header", image.len()));
    }
    if image[MAGIC_AT..MAGIC_AT + 4] != MAGIC {
        return Err("no arm64 Image magic \"ARM\\x64\" at byte 56: give a flat arm64 Image \
                    (vmbench as xtask flattens it), not an ELF"
            .into());
    }
    Ok(Header { text_offset: le64(image, 8), image_size: le64(image, 16) })
}

/// Where in RAM (an offset from its base) the image goes, checked to end below `limit` bytes
/// from the base (the device tree's place).
pub fn placement(image: &[u8], limit: u64) -> Result<u64, String> {
    let h = parse(image)?;
    let size = h.image_size.max(image.len() as u64);
    let end = h.text_offset.checked_add(size).ok_or("image size overflows")?;
    if end > limit {
        return Err(format!(
            "the image needs RAM up to {end:#x} from its base, but the device tree is at \
             {limit:#x}: give the VM more memory (--mem)"
        ));
    }
    Ok(h.text_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(text_offset: u64, size: u64) -> Vec<u8> {
        let mut b = vec![0u8; 128];
        b[8..16].copy_from_slice(&text_offset.to_le_bytes());
        b[16..24].copy_from_slice(&size.to_le_bytes());
        b[56..60].copy_from_slice(b"ARM\x64");
        b
    }

    #[test]
    fn reads_the_load_offset_and_size() {
        let h = parse(&image(0x8_0000, 0x30_0000)).unwrap();
        assert_eq!(h, Header { text_offset: 0x8_0000, image_size: 0x30_0000 });
        assert_eq!(placement(&image(0x8_0000, 0x30_0000), 0x3E0_0000), Ok(0x8_0000));
    }

    #[test]
    fn refuses_what_is_not_an_image_or_does_not_fit() {
        assert!(parse(&[0; 10]).unwrap_err().contains("too short"));
        let mut elf = image(0, 0);
        elf[56] = 0;
        assert!(parse(&elf).unwrap_err().contains("not an ELF"));
        assert!(placement(&image(0x8_0000, 0x400_0000), 0x3E0_0000).unwrap_err().contains("--mem"));
    }
}
