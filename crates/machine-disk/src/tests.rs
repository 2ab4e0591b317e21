use super::*;
use gpt_disk_io::BlockIoAdapter;
use gpt_disk_io::gpt_disk_types::BlockSize;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::string::ToString;

/// A fresh path for one test's image.
fn image(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(std::format!("armhv-machine-disk-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(std::format!("{test}.img"));
    let _ = fs::remove_file(&path);
    path
}

fn table(path: &std::path::Path) -> Result<Vec<Partition>, Error> {
    read_table(BlockIoAdapter::new(fs::File::open(path).unwrap(), BlockSize::BS_512))
}

fn read_at(path: &std::path::Path, offset: u64, len: usize) -> Vec<u8> {
    let mut f = fs::File::open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = vec![0; len];
    f.read_exact(&mut buf).unwrap();
    buf
}

fn write_at(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

const MIB: u64 = 1 << 20;

#[test]
fn a_new_disk_has_a_partition_per_vm_disk_with_its_image() {
    let path = image("new");
    let wanted = [
        Wanted { name: "linux0-data", size: 4 * MIB, image: Some(b"first image") },
        Wanted { name: "linux1-data", size: 2 * MIB + 1, image: None },
    ];
    let report = lay_out(&path, &wanted).unwrap();
    assert!(report.created);
    assert_eq!(report.added, ["linux0-data", "linux1-data"]);
    let parts = table(&path).unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!((parts[0].name.as_str(), parts[0].size()), ("linux0-data", 4 * MIB));
    // Sizes are rounded up to whole blocks; partitions start on 1 MiB boundaries.
    assert_eq!((parts[1].name.as_str(), parts[1].size()), ("linux1-data", 2 * MIB + 512));
    assert!(parts.iter().all(|p| p.offset() % MIB == 0));
    assert_eq!(read_at(&path, parts[0].offset(), 11), b"first image");
    assert_eq!(read_at(&path, parts[0].offset() + 11, 4096), vec![0; 4096]);
    assert_eq!(read_at(&path, parts[1].offset(), 4096), vec![0; 4096]);
}

#[test]
fn laying_out_again_changes_nothing_and_never_rewrites_an_image() {
    let path = image("again");
    let wanted = [Wanted { name: "vm-disk", size: MIB, image: Some(b"initial") }];
    lay_out(&path, &wanted).unwrap();
    let part = table(&path).unwrap().remove(0);
    write_at(&path, part.offset(), b"the guest's own data");
    let before = fs::read(&path).unwrap();
    let report = lay_out(&path, &wanted).unwrap();
    assert_eq!(report, LayoutReport::default());
    assert_eq!(fs::read(&path).unwrap(), before, "a second layout touched the disk");
}

#[test]
fn a_new_vm_disk_is_added_after_the_others_which_keep_their_data() {
    let path = image("grow");
    let a = Wanted { name: "a", size: MIB, image: None };
    lay_out(&path, &[a]).unwrap();
    let old_len = fs::metadata(&path).unwrap().len();
    let pa = table(&path).unwrap().remove(0);
    write_at(&path, pa.offset(), b"a's data");
    write_at(&path, pa.offset() + pa.size() - 8, b"a's tail");

    let b = Wanted { name: "b", size: 3 * MIB, image: Some(b"b's image") };
    let report = lay_out(&path, &[a, b]).unwrap();
    assert_eq!(report.added, ["b"]);
    let grown = report.grown_to.expect("the disk grew");
    assert!(grown > old_len && grown == fs::metadata(&path).unwrap().len());
    let parts = table(&path).unwrap();
    assert_eq!(parts[0], pa, "partition a moved");
    assert!(parts[1].first_lba > pa.last_lba);
    assert_eq!(read_at(&path, pa.offset(), 8), b"a's data");
    assert_eq!(read_at(&path, pa.offset() + pa.size() - 8, 8), b"a's tail");
    assert_eq!(read_at(&path, parts[1].offset(), 9), b"b's image");
    // b's blocks beyond its image read as zero, even where the old backup table was.
    let rest = read_at(&path, parts[1].offset() + 9, (parts[1].size() - 9) as usize);
    assert!(rest.iter().all(|&b| b == 0), "b's unwritten blocks are not zero");
    // A disk the config no longer names keeps its partition and data.
    lay_out(&path, &[b]).unwrap();
    assert_eq!(table(&path).unwrap().len(), 2);
}

#[test]
fn what_cannot_be_laid_out_is_refused_with_the_fix() {
    let path = image("refused");
    lay_out(&path, &[Wanted { name: "d", size: MIB, image: None }]).unwrap();
    let err = lay_out(&path, &[Wanted { name: "d", size: 2 * MIB, image: None }]).unwrap_err();
    assert!(matches!(err, Error::Resized { .. }), "{err}");
    assert!(err.to_string().contains("never resized"), "{err}");
    let err = lay_out(&path, &[Wanted { name: "e", size: 512, image: Some(&[1; 513]) }]);
    assert!(matches!(err, Err(Error::ImageTooLarge { .. })));
    let twice = [Wanted { name: "f", size: MIB, image: None }; 2];
    assert!(matches!(lay_out(&path, &twice), Err(Error::DuplicateName(_))));
    let long = "x".repeat(MAX_NAME + 1);
    let err = lay_out(&path, &[Wanted { name: &long, size: MIB, image: None }]);
    assert!(matches!(err, Err(Error::BadName(_))));
}

#[test]
fn a_corrupt_or_foreign_disk_is_refused_and_left_alone() {
    let path = image("corrupt");
    fs::write(&path, vec![0; (4 * MIB) as usize]).unwrap();
    assert_eq!(table(&path), Err(Error::NoGpt));
    let wanted = [Wanted { name: "d", size: MIB, image: None }];
    assert_eq!(lay_out(&path, &wanted), Err(Error::NoGpt));
    assert_eq!(fs::read(&path).unwrap(), vec![0; (4 * MIB) as usize], "a foreign disk was touched");

    let _ = fs::remove_file(&path);
    lay_out(&path, &wanted).unwrap();
    let good = fs::read(&path).unwrap();
    // One flipped byte in the header (its disk GUID), then in the entry array (a name).
    write_at(&path, 512 + 60, &[good[512 + 60] ^ 1]);
    assert_eq!(table(&path), Err(Error::BadHeader("header CRC32")));
    fs::write(&path, &good).unwrap();
    write_at(&path, 1024 + 56, &[good[1024 + 56] ^ 1]);
    assert_eq!(table(&path), Err(Error::BadEntries("CRC32")));
}

#[test]
fn a_table_that_points_outside_the_disk_is_refused() {
    let path = image("outside");
    lay_out(&path, &[Wanted { name: "d", size: MIB, image: None }]).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    // A partition ending past the usable blocks, its CRCs made right: only the bounds catch it.
    let entry = 1024;
    bytes[entry + 40..entry + 48].copy_from_slice(&u64::MAX.to_le_bytes());
    let array_crc = crc32(&bytes[1024..1024 + 128 * 128]);
    bytes[512 + 88..512 + 92].copy_from_slice(&array_crc.to_le_bytes());
    bytes[512 + 16..512 + 20].copy_from_slice(&[0; 4]);
    let header_crc = crc32(&bytes[512..512 + 92]);
    bytes[512 + 16..512 + 20].copy_from_slice(&header_crc.to_le_bytes());
    fs::write(&path, &bytes).unwrap();
    assert_eq!(table(&path), Err(Error::BadEntries("a partition outside the usable blocks")));
}

/// CRC-32 (IEEE), as GPT uses it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn read_file_lists_the_partitions_of_an_image_or_none() {
    let path = image("read-file");
    assert_eq!(read_file(&path), Ok(None));
    lay_out(&path, &[Wanted { name: "a", size: MIB, image: None }]).unwrap();
    let parts = read_file(&path).unwrap().unwrap();
    assert_eq!(parts, table(&path).unwrap());
    assert_eq!(parts[0].name, "a");
    fs::write(&path, vec![0u8; 4096]).unwrap();
    assert_eq!(read_file(&path), Err(Error::NoGpt));
    let dir = path.parent().unwrap();
    assert!(matches!(read_file(dir), Err(Error::Io(_))), "{:?}", read_file(dir));
}
