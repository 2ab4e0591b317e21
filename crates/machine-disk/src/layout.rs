//! The build tool's side: lays a machine disk image file out for the VM disks a config wants.

use super::{BLOCK, ENTRIES, Error, MAX_NAME, Partition, VM_DISK_TYPE, read_table};
use gpt_disk_io::gpt_disk_types::{
    BlockSize, GptHeader, GptPartitionEntry, GptPartitionEntryArray, GptPartitionEntryArrayLayout,
    GptPartitionEntrySize, GptPartitionName, Guid, Lba, LbaLe, U32Le,
};
use gpt_disk_io::{BlockIoAdapter, Disk};
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

/// Partitions start on 1 MiB boundaries, as partitioning tools place them.
const ALIGN: u64 = (1 << 20) / BLOCK;
/// The partition entry array's blocks (128 entries of 128 bytes).
const ARRAY_BLOCKS: u64 = ENTRIES as u64 * 128 / BLOCK;
/// The primary table: the protective MBR, the header, the array.
const FIRST_USABLE: u64 = 2 + ARRAY_BLOCKS;

/// A VM disk the config wants on the machine disk.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    pub name: &'a str,
    /// Bytes (rounded up to whole blocks).
    pub size: u64,
    /// Written into the partition when it is created, and never again.
    pub image: Option<&'a [u8]>,
}

/// What [`lay_out`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LayoutReport {
    /// The image file did not exist.
    pub created: bool,
    /// The partitions added, in order.
    pub added: Vec<String>,
    /// The file's new size, if it grew.
    pub grown_to: Option<u64>,
}

/// Makes the machine disk at `path` hold a partition for each of `wanted`: creates the file
/// if it is missing, adds the partitions it lacks after the last one (writing each one's image
/// into it) and grows the file when they do not fit. Existing partitions are never moved,
/// resized or written; a partition the config no longer names stays, with its data. An image
/// that is not a valid machine disk is refused, untouched.
pub fn lay_out(path: &Path, wanted: &[Wanted]) -> Result<LayoutReport, Error> {
    let ioe = |e: std::io::Error| Error::Io(std::format!("{}: {e}", path.display()));
    let mut report = LayoutReport::default();
    check_names(wanted)?;
    let mut parts = match File::open(path) {
        Ok(file) => read_table(BlockIoAdapter::new(file, BlockSize::BS_512))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            report.created = true;
            Vec::new()
        }
        Err(e) => return Err(ioe(e)),
    };
    let old_len = if report.created { 0 } else { std::fs::metadata(path).map_err(ioe)?.len() };
    let mut new = Vec::new();
    for w in wanted {
        let blocks = w.size.div_ceil(BLOCK).max(1);
        let image = w.image.map_or(0, |i| i.len() as u64);
        if image > blocks * BLOCK {
            return Err(Error::ImageTooLarge { name: w.name.into(), image, size: w.size });
        }
        if let Some(p) = parts.iter().find(|p| p.name == w.name) {
            if p.size() != blocks * BLOCK {
                let wants = blocks * BLOCK;
                return Err(Error::Resized { name: w.name.into(), has: p.size(), wants });
            }
            continue;
        }
        let after = parts.iter().map(|p| p.last_lba + 1).max().unwrap_or(FIRST_USABLE);
        let first_lba = after.next_multiple_of(ALIGN);
        let part = Partition { name: w.name.into(), first_lba, last_lba: first_lba + blocks - 1 };
        parts.push(part.clone());
        new.push((part, w.image));
    }
    if new.is_empty() && !report.created {
        return Ok(report);
    }
    // The backup table (array, then header in the last block) follows the last partition.
    let last_used = parts.iter().map(|p| p.last_lba).max().unwrap_or(FIRST_USABLE);
    let needed = (last_used + 1 + ARRAY_BLOCKS + 1) * BLOCK;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(ioe)?;
    let len = old_len.max(needed);
    if len > old_len {
        file.set_len(len).map_err(ioe)?;
        if !report.created {
            report.grown_to = Some(len);
            // The old backup table now lies in usable space: a new partition's unwritten
            // blocks must read as zero, not as what the table held.
            let old_backup = old_len.saturating_sub((ARRAY_BLOCKS + 1) * BLOCK);
            file.seek(SeekFrom::Start(old_backup)).map_err(ioe)?;
            file.write_all(&vec![0; (old_len - old_backup) as usize]).map_err(ioe)?;
        }
    }
    for (part, image) in &new {
        if let Some(image) = image {
            file.seek(SeekFrom::Start(part.offset())).map_err(ioe)?;
            file.write_all(image).map_err(ioe)?;
        }
        report.added.push(part.name.clone());
    }
    write_tables(file, &parts, len / BLOCK)?;
    Ok(report)
}

/// The partitions of the machine disk image at `path`, checked as [`read_table`] does; `None`
/// when there is no file yet. The build tool looks first, to read only the images of the
/// partitions [`lay_out`] will create.
pub fn read_file(path: &Path) -> Result<Option<Vec<Partition>>, Error> {
    match File::open(path) {
        Ok(file) => read_table(BlockIoAdapter::new(file, BlockSize::BS_512)).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Io(std::format!("{}: {e}", path.display()))),
    }
}

fn check_names(wanted: &[Wanted]) -> Result<(), Error> {
    for (i, w) in wanted.iter().enumerate() {
        if w.name.is_empty() || w.name.encode_utf16().count() > MAX_NAME {
            return Err(Error::BadName(w.name.into()));
        }
        if wanted[..i].iter().any(|o| o.name == w.name) {
            return Err(Error::DuplicateName(w.name.into()));
        }
    }
    Ok(())
}

/// Writes the protective MBR and both GPTs (primary at the start, backup at the end of a disk
/// of `blocks` blocks) for `parts`.
fn write_tables(file: File, parts: &[Partition], blocks: u64) -> Result<(), Error> {
    let io = |e: gpt_disk_io::DiskError<std::io::Error>| Error::Io(e.to_string());
    let mut disk = Disk::new(BlockIoAdapter::new(file, BlockSize::BS_512)).map_err(io)?;
    let mut block = vec![0u8; BLOCK as usize];
    disk.write_protective_mbr(&mut block).map_err(io)?;

    let layout = GptPartitionEntryArrayLayout {
        start_lba: Lba(2),
        entry_size: GptPartitionEntrySize::new(128).map_err(|_| Error::BadEntries("size"))?,
        num_entries: ENTRIES,
    };
    let mut storage = vec![0u8; (ARRAY_BLOCKS * BLOCK) as usize];
    let mut array = GptPartitionEntryArray::new(layout, BlockSize::BS_512, &mut storage)
        .map_err(|_| Error::BadEntries("size"))?;
    for (i, p) in parts.iter().enumerate() {
        let entry = array
            .get_partition_entry_mut(i as u32)
            .ok_or(Error::BadEntries("more partitions than entries"))?;
        *entry = GptPartitionEntry {
            partition_type_guid: VM_DISK_TYPE,
            unique_partition_guid: guid_of(p.name.as_bytes()),
            starting_lba: LbaLe::from_u64(p.first_lba),
            ending_lba: LbaLe::from_u64(p.last_lba),
            attributes: Default::default(),
            name: name_of(&p.name)?,
        };
    }
    let last = blocks - 1;
    let mut header = GptHeader {
        my_lba: LbaLe::from_u64(1),
        alternate_lba: LbaLe::from_u64(last),
        first_usable_lba: LbaLe::from_u64(FIRST_USABLE),
        last_usable_lba: LbaLe::from_u64(last - ARRAY_BLOCKS - 1),
        disk_guid: guid_of(b"armhv machine disk"),
        partition_entry_lba: LbaLe::from_u64(2),
        number_of_partition_entries: U32Le::from_u32(ENTRIES),
        size_of_partition_entry: U32Le::from_u32(128),
        partition_entry_array_crc32: array.calculate_crc32(),
        ..Default::default()
    };
    header.update_header_crc32();
    disk.write_gpt_partition_entry_array(&array).map_err(io)?;
    disk.write_primary_gpt_header(&header, &mut block).map_err(io)?;

    // The backup: the same entries just before the last block, its header in the last block.
    array.set_start_lba(Lba(last - ARRAY_BLOCKS));
    disk.write_gpt_partition_entry_array(&array).map_err(io)?;
    let mut backup = header;
    backup.my_lba = LbaLe::from_u64(last);
    backup.alternate_lba = LbaLe::from_u64(1);
    backup.partition_entry_lba = LbaLe::from_u64(last - ARRAY_BLOCKS);
    backup.update_header_crc32();
    disk.write_secondary_gpt_header(&backup, &mut block).map_err(io)?;
    disk.flush().map_err(io)
}

fn name_of(name: &str) -> Result<GptPartitionName, Error> {
    let mut field = GptPartitionName::default();
    for (i, c) in name.chars().enumerate() {
        field.set_char(i, c).map_err(|_| Error::BadName(name.into()))?;
    }
    Ok(field)
}

/// A GUID derived from `bytes` (FNV-1a over them, 128 bits), so that the same layout gives the
/// same image, byte for byte.
fn guid_of(bytes: &[u8]) -> Guid {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for &b in bytes {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    Guid::from_random_bytes(h.to_le_bytes())
}
