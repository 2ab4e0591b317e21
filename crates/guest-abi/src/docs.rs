//! `docs/guest-abi.md` says what this crate defines: each row of its tables is checked here, so
//! a number changed on one side only fails `cargo test`.

use crate::{hypercall, map};
use std::format;
use std::string::String;

fn page() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/guest-abi.md");
    std::fs::read_to_string(path).expect("docs/guest-abi.md")
}

/// The table row whose first cell starts with `first`.
fn row<'a>(page: &'a str, first: &str) -> &'a str {
    page.lines()
        .find(|l| l.strip_prefix('|').is_some_and(|l| l.trim_start().starts_with(first)))
        .unwrap_or_else(|| panic!("docs/guest-abi.md has no table row for {first}"))
}

/// `0x0800_0000`, as the page writes addresses and function IDs.
fn hex(v: u64) -> String {
    format!("`0x{:04X}_{:04X}`", v >> 16, v & 0xffff)
}

fn kib(bytes: u64) -> String {
    format!("{} KiB", bytes >> 10)
}

#[test]
fn memory_map_rows() {
    let page = page();
    let check = |first: &str, wants: &[String]| {
        let r = row(&page, first);
        for want in wants {
            assert!(r.contains(want.as_str()), "row {first:?} should say {want}: {r}");
        }
    };
    check("GIC distributor", &[hex(map::GICD_BASE.0), kib(map::GICD_SIZE)]);
    check("GICv2 CPU interface", &[hex(map::GICC_BASE.0), kib(map::GICC_SIZE)]);
    check("GICv3 redistributors", &[hex(map::GICR_BASE.0), kib(map::GICR_STRIDE)]);
    check(
        "PL011 UART",
        &[
            hex(map::UART_BASE.0),
            kib(map::UART_SIZE),
            format!("SPI {} (INTID {})", map::UART_SPI, map::spi_intid(map::UART_SPI)),
        ],
    );
    check(
        "virtio-mmio slot",
        &[
            format!(
                "`0x{:04X}_{:04X} + n * {:#x}`",
                map::VIRTIO_BASE.0 >> 16,
                0,
                map::VIRTIO_SLOT_SIZE
            ),
            format!("{} slots", map::VIRTIO_SLOTS),
            format!("{} transports", map::VIRTIO_TRANSPORTS),
            format!("SPI {}+n", map::VIRTIO_FIRST_SPI),
        ],
    );
    check("RAM", &[hex(map::RAM_BASE.0)]);
    check("virtual timer", &[format!("INTID {}", map::VTIMER_INTID)]);
    check("physical timer", &[format!("INTID {}", map::PTIMER_INTID)]);
    check("PMU overflow", &[format!("PPI {} (INTID {})", map::PMU_PPI, map::PMU_INTID)]);
}

#[test]
fn hypercall_rows() {
    let page = page();
    let calls = [
        ("ARMHV_NOP", hypercall::ARMHV_NOP),
        ("ARMHV_VM_INFO", hypercall::ARMHV_VM_INFO),
        ("ARMHV_YIELD", hypercall::ARMHV_YIELD),
        ("ARMHV_VM_EXITS", hypercall::ARMHV_VM_EXITS),
        ("ARMHV_IO_STAMPS", hypercall::ARMHV_IO_STAMPS),
    ];
    assert_eq!(calls.map(|(_, fid)| fid), hypercall::ALL);
    for (name, fid) in calls {
        let r = row(&page, &hex(u64::from(fid)));
        assert!(r.contains(name), "row {} should name {name}: {r}", hex(u64::from(fid)));
    }
}
