//! Turning a VM's optional addresses into a concrete layout.
//!
//! The same resolution runs twice on the host: at load time with whatever is
//! known about the images (a file's size and header; nothing yet for a guest the
//! project has still to build), and again in `Config::spec` with the bytes in
//! hand. Doing both through one function means the defaults cannot drift apart.

use alloc::format;

use addr::{Ipa, IpaRange};

use crate::rules::{Layout, Violation, check_layout};
use crate::{Addr, DEFAULT_KERNEL_OFFSET, LOAD_ALIGN, MEMORY_ALIGN, Size, fdt_area};

/// The fields of an arm64 Linux `Image` header we act on
/// (Documentation/arch/arm64/booting.rst).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Arm64Header {
    /// Offset of the image from a 2 MiB-aligned base.
    pub text_offset: u64,
    /// Bytes of memory the kernel uses from its load address, BSS included.
    pub image_size: u64,
}

/// Bytes needed to recognise an arm64 Image.
pub(crate) const ARM64_HEADER_LEN: usize = 64;
const ARM64_MAGIC: u32 = 0x644d_5241; // "ARM\x64"

impl Arm64Header {
    /// Recognises the header by its magic at offset 0x38; `None` for anything
    /// else (a bare-metal binary has no header and loads where it is linked).
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let magic = u32::from_le_bytes(bytes.get(0x38..0x3c)?.try_into().ok()?);
        if magic != ARM64_MAGIC {
            return None;
        }
        let image_size = u64_at(0x10)?;
        // booting.rst: an image_size of zero means a kernel older than 3.17,
        // whose text_offset field is unreliable and must be taken as 0x80000.
        let text_offset = if image_size == 0 { DEFAULT_KERNEL_OFFSET } else { u64_at(0x08)? };
        Some(Self { text_offset, image_size })
    }
}

/// What is known about an image before it is packed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ImageFacts {
    pub len: u64,
    pub linux: Option<Arm64Header>,
}

impl ImageFacts {
    pub fn of(bytes: &[u8]) -> Self {
        Self { len: bytes.len() as u64, linux: Arm64Header::parse(bytes) }
    }
}

/// The addresses a config gives, each optional.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement {
    pub memory: IpaRange,
    pub kernel_load: Option<Ipa>,
    pub entry: Option<Ipa>,
    pub initrd_load: Option<Ipa>,
}

/// The initrd as far as it is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InitrdFacts {
    None,
    /// There is one, but its size is not known yet.
    Unknown,
    Len(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub kernel: IpaRange,
    pub entry: Ipa,
    pub initrd: Option<IpaRange>,
}

/// Fills in the defaults and checks the result:
/// - `kernel_load`: RAM base + the Image header's `text_offset` for an arm64
///   Linux Image, else RAM base + 0x80000;
/// - `entry`: `kernel_load`;
/// - the initrd: as high as it fits below the device tree, page aligned, which
///   leaves the kernel the most room to grow (decompression, BSS, early
///   allocations) above its load address.
pub(crate) fn resolve(
    i: usize,
    p: &Placement,
    kernel: Option<ImageFacts>,
    initrd: InitrdFacts,
) -> Result<Resolved, Violation> {
    let linux = kernel.and_then(|k| k.linux);
    let kernel_load = match (p.kernel_load, linux) {
        (Some(load), Some(hdr)) => {
            // A Linux kernel hangs early if it is not text_offset above a
            // 2 MiB boundary; say so now instead.
            let base_ok =
                load.0.checked_sub(hdr.text_offset).is_some_and(|b| b % MEMORY_ALIGN == 0);
            if !base_ok {
                let want = p.memory.start.0.saturating_add(hdr.text_offset);
                return Err(Violation::new(
                    i,
                    "kernel_load",
                    format!(
                        "{} does not suit this arm64 Linux Image, which must load {:#x} \
                         above a 2 MiB boundary; use {} or omit kernel_load",
                        Addr(load.0),
                        hdr.text_offset,
                        Addr(want)
                    ),
                ));
            }
            load
        }
        (Some(load), None) => load,
        (None, Some(hdr)) => p.memory.start.checked_add(hdr.text_offset).unwrap_or(Ipa(u64::MAX)),
        (None, None) => p.memory.start.checked_add(DEFAULT_KERNEL_OFFSET).unwrap_or(Ipa(u64::MAX)),
    };
    let kernel_mem = match kernel {
        Some(k) => k.len.max(k.linux.map_or(0, |h| h.image_size)).max(1),
        None => 1,
    };
    let kernel_range = IpaRange::new(kernel_load, kernel_mem);

    let initrd_range = match (initrd, p.initrd_load) {
        (InitrdFacts::None, _) => None,
        (InitrdFacts::Unknown, Some(load)) => Some(IpaRange::new(load, 1)),
        (InitrdFacts::Unknown, None) => None,
        (InitrdFacts::Len(len), Some(load)) => Some(IpaRange::new(load, len)),
        (InitrdFacts::Len(len), None) => {
            let top = fdt_area(p.memory).start;
            match top.0.checked_sub(len) {
                Some(start) if start >= p.memory.start.0 => {
                    Some(IpaRange::new(Ipa(start).align_down(LOAD_ALIGN), len))
                }
                _ => {
                    return Err(Violation::new(
                        i,
                        "initrd",
                        format!(
                            "the initrd ({}) does not fit in guest RAM below the device tree; \
                             raise memory_size",
                            Size(len)
                        ),
                    ));
                }
            }
        }
    };

    let entry = p.entry.unwrap_or(kernel_load);
    check_layout(
        i,
        &Layout {
            memory: p.memory,
            kernel: kernel_range,
            kernel_text: kernel.map(|k| k.len),
            entry,
            initrd: initrd_range,
            initrd_key: if p.initrd_load.is_some() { "initrd_load" } else { "initrd" },
        },
    )?;
    Ok(Resolved { kernel: kernel_range, entry, initrd: initrd_range })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    const MB: u64 = 1 << 20;

    fn linux_image(text_offset: u64, image_size: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[0x08..0x10].copy_from_slice(&text_offset.to_le_bytes());
        b[0x10..0x18].copy_from_slice(&image_size.to_le_bytes());
        b[0x38..0x3c].copy_from_slice(&ARM64_MAGIC.to_le_bytes());
        b
    }

    fn placement() -> Placement {
        Placement {
            memory: IpaRange::new(Ipa(0x4000_0000), 32 * MB),
            kernel_load: None,
            entry: None,
            initrd_load: None,
        }
    }

    #[test]
    fn header() {
        let img = linux_image(0, 3 * MB, 4096);
        assert_eq!(
            Arm64Header::parse(&img),
            Some(Arm64Header { text_offset: 0, image_size: 3 * MB })
        );
        // Pre-3.17: image_size 0, text_offset taken as 0x80000.
        let old = linux_image(0x1234, 0, 4096);
        assert_eq!(Arm64Header::parse(&old).unwrap().text_offset, 0x8_0000);
        assert_eq!(Arm64Header::parse(&[0u8; 4096]), None);
        assert_eq!(Arm64Header::parse(&img[..0x3b]), None);
        assert_eq!(Arm64Header::parse(&[]), None);
    }

    #[test]
    fn defaults_for_a_binary() {
        let r = resolve(
            0,
            &placement(),
            Some(ImageFacts { len: 8192, linux: None }),
            InitrdFacts::Len(MB),
        )
        .unwrap();
        assert_eq!(r.kernel, IpaRange::new(Ipa(0x4008_0000), 8192));
        assert_eq!(r.entry, Ipa(0x4008_0000));
        // Just below the device tree at 0x41e0_0000.
        assert_eq!(r.initrd, Some(IpaRange::new(Ipa(0x41d0_0000), MB)));
        // Odd sizes are rounded down to a page.
        let r = resolve(0, &placement(), None, InitrdFacts::Len(100)).unwrap();
        assert_eq!(r.initrd.unwrap().start, Ipa(0x41df_f000));
    }

    #[test]
    fn linux_image_uses_header() {
        let img = linux_image(0, 6 * MB, 4096);
        let r = resolve(0, &placement(), Some(ImageFacts::of(&img)), InitrdFacts::None).unwrap();
        // Loaded at the 2 MiB-aligned base, owning its whole image_size.
        assert_eq!(r.kernel, IpaRange::new(Ipa(0x4000_0000), 6 * MB));

        let mut p = placement();
        p.kernel_load = Some(Ipa(0x4008_0000));
        let e = resolve(0, &p, Some(ImageFacts::of(&img)), InitrdFacts::None).unwrap_err();
        assert_eq!(e.path(), "vm[0].kernel_load");
        p.kernel_load = Some(Ipa(0x4020_0000));
        assert!(resolve(0, &p, Some(ImageFacts::of(&img)), InitrdFacts::None).is_ok());

        // The BSS counts: an initrd placed inside it is refused.
        p.kernel_load = None;
        p.initrd_load = Some(Ipa(0x4040_0000));
        let e = resolve(0, &p, Some(ImageFacts::of(&img)), InitrdFacts::Len(4096)).unwrap_err();
        assert_eq!(e.path(), "vm[0].initrd_load");
    }

    #[test]
    fn initrd_too_big() {
        let e = resolve(0, &placement(), None, InitrdFacts::Len(31 * MB)).unwrap_err();
        assert_eq!(e.path(), "vm[0].initrd");
        let e = resolve(0, &placement(), None, InitrdFacts::Len(u64::MAX)).unwrap_err();
        assert_eq!(e.path(), "vm[0].initrd");
        // Fits below the device tree but over the default kernel.
        let e = resolve(0, &placement(), None, InitrdFacts::Len(30 * MB)).unwrap_err();
        assert_eq!(e.path(), "vm[0].initrd");
    }

    #[test]
    fn unknown_sizes_check_addresses_only() {
        let mut p = placement();
        p.initrd_load = Some(Ipa(0x4100_0000));
        let r = resolve(0, &p, None, InitrdFacts::Unknown).unwrap();
        assert_eq!(r.kernel.size, 1);
        p.initrd_load = Some(Ipa(0x41f0_0000));
        let e = resolve(0, &p, None, InitrdFacts::Unknown).unwrap_err();
        assert_eq!(e.path(), "vm[0].initrd_load");
        p.initrd_load = None;
        p.kernel_load = Some(Ipa(u64::MAX - 0xfff));
        let e = resolve(0, &p, None, InitrdFacts::None).unwrap_err();
        assert_eq!(e.path(), "vm[0].kernel_load");
    }
}
