//! Finding the device tree blob and making it palatable to the `fdt` crate.

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_NOP: u32 = 4;
const FDT_END: u32 = 9;
/// The guest ABI puts the device tree in the last 2 MiB of RAM; QEMU's is 1 MiB.
const MAX_DT_SIZE: usize = 2 << 20;

// Header fields (big-endian u32 at these offsets).
const HDR_TOTALSIZE: usize = 4;
const HDR_OFF_DT_STRUCT: usize = 8;
const HDR_VERSION: usize = 20;
const HDR_SIZE_DT_STRUCT: usize = 36;
const HDR_LEN: usize = 40;

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// The blob at `addr`, sized by its header.
///
/// # Safety
/// `addr` must point to readable and writable RAM holding a device tree (or at
/// least 40 readable bytes), which nothing else accesses for the rest of the run.
pub unsafe fn blob(addr: u64) -> Result<&'static mut [u8], &'static str> {
    // SAFETY: the caller promises a readable header at `addr`.
    let header = unsafe { core::slice::from_raw_parts(addr as *const u8, HDR_LEN) };
    if be32(header, 0) != Some(FDT_MAGIC) {
        return Err("bad magic");
    }
    let size = be32(header, HDR_TOTALSIZE).unwrap_or(0) as usize;
    if !(HDR_LEN..=MAX_DT_SIZE).contains(&size) {
        return Err("bad totalsize");
    }
    // SAFETY: the header says the blob is `size` bytes; the caller promises it is
    // ours alone (`header` is not used again).
    Ok(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, size) })
}

/// Length of the token at `at` in a structure block (tag, and name or value,
/// padded to 4 bytes), or `None` if it is not a well-formed token.
fn token_len(block: &[u8], at: usize) -> Option<(u32, usize)> {
    let pad4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    let tag = be32(block, at)?;
    let len = match tag {
        FDT_BEGIN_NODE => {
            let name = block.get(at + 4..)?;
            let nul = name.iter().position(|&b| b == 0)?;
            4 + pad4(nul + 1)?
        }
        FDT_PROP => 12 + pad4(be32(block, at + 4)? as usize)?,
        FDT_END_NODE | FDT_NOP | FDT_END => 4,
        _ => return None,
    };
    (at.checked_add(len)? <= block.len()).then_some((tag, len))
}

/// Removes the FDT_NOP tokens from the structure block, in place, and returns
/// how many there were.
///
/// QEMU leaves NOPs where it deletes nodes or properties of a `-dtb` it was
/// given, and fdt 0.1.5 stops looking at the first NOP between two sibling
/// nodes or properties (so /chosen, for one, "disappears"). A block that does
/// not parse is left as it is (`None`).
pub fn strip_nops(blob: &mut [u8]) -> Option<usize> {
    let off = be32(blob, HDR_OFF_DT_STRUCT)? as usize;
    let version = be32(blob, HDR_VERSION)?;
    let size = if version >= 17 {
        be32(blob, HDR_SIZE_DT_STRUCT)? as usize
    } else {
        blob.len().checked_sub(off)?
    };
    let block = blob.get_mut(off..off.checked_add(size)?)?;

    // Check the whole block first, so a malformed one is not half rewritten.
    let (mut at, mut nops) = (0, 0);
    loop {
        let (tag, len) = token_len(block, at)?;
        nops += usize::from(tag == FDT_NOP);
        at += len;
        if tag == FDT_END {
            break;
        }
    }
    if nops == 0 {
        return Some(0);
    }

    let (mut read, mut write) = (0, 0);
    loop {
        let (tag, len) = token_len(block, read)?;
        if tag != FDT_NOP {
            block.copy_within(read..read + len, write);
            write += len;
        }
        read += len;
        if tag == FDT_END {
            break;
        }
    }
    if version >= 17 {
        blob[HDR_SIZE_DT_STRUCT..HDR_SIZE_DT_STRUCT + 4]
            .copy_from_slice(&(write as u32).to_be_bytes());
    }
    Some(nops)
}
