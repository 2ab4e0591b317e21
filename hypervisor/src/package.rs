//! The boot package: VM definitions and guest images that the build tool appended to the
//! hypervisor image, right after `__hyp_end`: wherever armhv runs, since a loader that moves
//! the image moves the package with it (the Image header's `image_size` covers both).

/// The package bytes if a valid header is found at `at`.
pub fn locate(at: u64) -> Option<&'static [u8]> {
    let header_len = vmconfig::PACKAGE_HEADER_LEN;
    // SAFETY: `at` is __hyp_end, followed by RAM; reading the header bytes is harmless even if
    // no package follows (the loader zero-filled nothing there, but the memory is RAM). This runs
    // at boot on the one CPU up, before any RAM is handed out, and `header` dies here.
    let header = unsafe { core::slice::from_raw_parts(at as *const u8, header_len) };
    let len = usize::try_from(vmconfig::package_len(header).ok()?).ok()?;
    // SAFETY: the build tool wrote `len` bytes of package at `at`. The range is reserved (never
    // in the heap or the frame pool, so never guest RAM) and nothing writes it after boot, so a
    // shared reference to it is sound for good.
    Some(unsafe { core::slice::from_raw_parts(at as *const u8, len) })
}
