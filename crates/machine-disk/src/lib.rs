//! The machine disk: one disk of the machine (on QEMU `virt`, a virtio-blk device backed by an
//! image file), partitioned with GPT, one partition per persistent VM disk, named after it.
//!
//! The build tool lays it out ([`lay_out`], feature `std`): it creates the image when it is
//! missing, adds a partition for each VM disk that has none yet (writing the disk's initial
//! image into it once, then never again), and grows the file when it must; it never moves,
//! resizes or rewrites a partition that exists. armhv reads the table at boot
//! ([`read_table`]) to serve each VM disk from its partition, and refuses a table that does not
//! check out: every field that places data is bounded by the disk, CRCs included, so a corrupt
//! or hostile image cannot make armhv read or write outside a partition.
//!
//! GPT itself (header, entries, CRC32) is Google's `gpt_disk_types`/`gpt_disk_io`. Requests
//! reach the disk through [`queue`], the driver side of its virtqueue.
#![no_std]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

#[cfg(any(test, feature = "std"))]
mod layout;
#[cfg(any(test, feature = "std"))]
pub use layout::{LayoutReport, Wanted, lay_out, read_file};
pub mod queue;
#[cfg(test)]
mod queue_tests;
#[cfg(test)]
mod tests;

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
pub use gpt_disk_io::BlockIo;
use gpt_disk_io::Disk;
pub use gpt_disk_io::gpt_disk_types::{BlockSize, Lba};
use gpt_disk_io::gpt_disk_types::{GptHeaderRevision, GptPartitionEntry, GptPartitionType, guid};

/// Bytes per block: the machine disk's logical block size.
pub const BLOCK: u64 = 512;
/// The partition array's entries: the GPT minimum (16 KiB of 128-byte entries, 32 blocks).
pub const ENTRIES: u32 = 128;
/// Most partition entries armhv reads from a disk's table (bounds its work on a hostile one).
const MAX_ENTRIES: u32 = 1024;
/// A partition name's length limit (36 UTF-16 code units in a GPT entry).
pub const MAX_NAME: usize = 36;
/// The type of armhv's VM disk partitions: "Linux filesystem data", since guests format them
/// as they like.
pub const VM_DISK_TYPE: GptPartitionType =
    GptPartitionType(guid!("0fc63daf-8483-4772-8e79-3d69d8477de4"));

/// One VM disk's partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    /// Its first and last block (inclusive).
    pub first_lba: u64,
    pub last_lba: u64,
}

impl Partition {
    /// Where it starts, in bytes from the start of the disk.
    pub fn offset(&self) -> u64 {
        self.first_lba * BLOCK
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        (self.last_lba - self.first_lba + 1) * BLOCK
    }
}

/// Why a machine disk's table cannot be used. Each says what is wrong and, where it helps, what
/// to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// Reading or writing the disk failed.
    Io(String),
    /// The disk's block size is not 512 bytes.
    BlockSize(u64),
    /// No GPT header at block 1 (an empty or foreign disk).
    NoGpt,
    /// The header is there but does not check out (which field).
    BadHeader(&'static str),
    /// The partition entry array does not check out (why).
    BadEntries(&'static str),
    /// Two partitions share blocks.
    Overlap(String, String),
    /// Two partitions have one name.
    DuplicateName(String),
    /// A partition name is empty, too long or not UTF-16.
    BadName(String),
    /// (Layout) an existing partition would have to change size.
    Resized { name: String, has: u64, wants: u64 },
    /// (Layout) a disk's initial image is larger than the disk.
    ImageTooLarge { name: String, image: u64, size: u64 },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "machine disk: {e}"),
            Self::BlockSize(b) => write!(f, "machine disk: blocks of {b} bytes, armhv needs 512"),
            Self::NoGpt => f.write_str(
                "machine disk: no GPT partition table (an empty or foreign disk): let the build \
                 tool create it (move the image file away and run `make run` again)",
            ),
            Self::BadHeader(what) => write!(
                f,
                "machine disk: its GPT header is corrupt ({what}): restore the image file or \
                 move it away to start afresh"
            ),
            Self::BadEntries(what) => write!(
                f,
                "machine disk: its GPT partition entries are corrupt ({what}): restore the image \
                 file or move it away to start afresh"
            ),
            Self::Overlap(a, b) => write!(f, "machine disk: partitions {a} and {b} overlap"),
            Self::DuplicateName(n) => write!(f, "machine disk: two partitions are named {n}"),
            Self::BadName(n) => write!(
                f,
                "machine disk: partition name {n:?} is empty, longer than {MAX_NAME} characters \
                 or not UTF-16"
            ),
            Self::Resized { name, has, wants } => write!(
                f,
                "machine disk: partition {name} has {has} bytes, the config wants {wants}: a \
                 partition is never resized (its data would move); give the disk a new name, \
                 or remove the machine disk image to start afresh"
            ),
            Self::ImageTooLarge { name, image, size } => write!(
                f,
                "machine disk: the image of {name} has {image} bytes, more than its size \
                 ({size}): give the disk a larger size"
            ),
        }
    }
}

fn disk_error<E: fmt::Debug + fmt::Display>(e: gpt_disk_io::DiskError<E>) -> Error {
    Error::Io(alloc::format!("{e}"))
}

/// The partitions of the machine disk behind `io`, by the primary GPT, checked: the header's
/// signature, revision, size, position and CRC; the entry array's place, size and CRC; every
/// used entry within the usable blocks, named (uniquely), and no two overlapping. Unused entries
/// are skipped.
pub fn read_table<Io: BlockIo>(mut io: Io) -> Result<Vec<Partition>, Error> {
    let block = io.block_size().to_u64();
    if block != BLOCK {
        return Err(Error::BlockSize(block));
    }
    let blocks = io.num_blocks().map_err(|e| Error::Io(alloc::format!("{e}")))?;
    let mut disk = Disk::new(io).map_err(disk_error)?;
    let mut buf = vec![0u8; BLOCK as usize];
    if blocks < 3 {
        return Err(Error::NoGpt);
    }
    let header = disk.read_primary_gpt_header(&mut buf).map_err(disk_error)?;
    if !header.is_signature_valid() {
        return Err(Error::NoGpt);
    }
    if header.revision != GptHeaderRevision::VERSION_1_0 {
        return Err(Error::BadHeader("revision"));
    }
    let size = header.header_size.to_u32();
    if !(92..=BLOCK as u32).contains(&size) {
        return Err(Error::BadHeader("header size"));
    }
    if header.calculate_header_crc32() != header.header_crc32 {
        return Err(Error::BadHeader("header CRC32"));
    }
    if header.my_lba.to_u64() != 1 {
        return Err(Error::BadHeader("its own block"));
    }
    let (first_usable, last_usable) =
        (header.first_usable_lba.to_u64(), header.last_usable_lba.to_u64());
    if first_usable < 3 || first_usable > last_usable || last_usable >= blocks {
        return Err(Error::BadHeader("usable blocks"));
    }
    let entries = header.number_of_partition_entries.to_u32();
    let entry_size = header.size_of_partition_entry.to_u32();
    if entries > MAX_ENTRIES || entry_size < 128 || entry_size % 8 != 0 || entry_size > 1024 {
        return Err(Error::BadEntries("entry count or size"));
    }
    let layout =
        header.get_partition_entry_array_layout().map_err(|_| Error::BadEntries("layout"))?;
    let array_blocks = layout.num_blocks(disk_block()).ok_or(Error::BadEntries("size"))?;
    let array_start = layout.start_lba.to_u64();
    if array_start < 2 || array_start.saturating_add(array_blocks) > first_usable {
        return Err(Error::BadEntries("placed outside the table's blocks"));
    }
    let mut storage = vec![0u8; (array_blocks * BLOCK) as usize];
    let array = disk.read_gpt_partition_entry_array(layout, &mut storage).map_err(disk_error)?;
    if array.calculate_crc32() != header.partition_entry_array_crc32 {
        return Err(Error::BadEntries("CRC32"));
    }
    let mut parts: Vec<Partition> = Vec::new();
    for i in 0..entries {
        let Some(entry) = array.get_partition_entry(i) else { break };
        if !entry.is_used() {
            continue;
        }
        let part = partition_of(entry)?;
        if part.first_lba < first_usable || part.last_lba > last_usable {
            return Err(Error::BadEntries("a partition outside the usable blocks"));
        }
        if let Some(p) = parts.iter().find(|p| p.name == part.name) {
            return Err(Error::DuplicateName(p.name.clone()));
        }
        if let Some(p) =
            parts.iter().find(|p| p.first_lba <= part.last_lba && part.first_lba <= p.last_lba)
        {
            return Err(Error::Overlap(p.name.clone(), part.name));
        }
        parts.push(part);
    }
    Ok(parts)
}

fn disk_block() -> gpt_disk_io::gpt_disk_types::BlockSize {
    gpt_disk_io::gpt_disk_types::BlockSize::BS_512
}

fn partition_of(entry: &GptPartitionEntry) -> Result<Partition, Error> {
    let name_field = entry.name;
    let units: Vec<u16> = name_field
        .0
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&u| u != 0)
        .collect();
    let name = char::decode_utf16(units.iter().copied())
        .collect::<Result<String, _>>()
        .map_err(|_| Error::BadName(alloc::format!("{units:x?}")))?;
    if name.is_empty() {
        return Err(Error::BadName(name));
    }
    let (first_lba, last_lba) = (entry.starting_lba.to_u64(), entry.ending_lba.to_u64());
    if first_lba > last_lba {
        return Err(Error::BadEntries("a partition ends before it starts"));
    }
    Ok(Partition { name, first_lba, last_lba })
}
