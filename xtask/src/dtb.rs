//! Edits a flattened device tree blob (devicetree specification v0.4, chapter 5) in place of
//! `dtc`, which the machines here do not have: adds `/memreserve/` entries and a
//! `/reserved-memory` node to the tree QEMU makes, for the tests of armhv's firmware
//! reservations, and lists its CPUs in another order, for the tests that armhv identifies CPUs
//! by their MPIDR, not by their place.

use anyhow::{Result, bail};

const MAGIC: u32 = 0xd00d_feed;
const HEADER: usize = 40;
const BEGIN_NODE: u32 = 1;
const END_NODE: u32 = 2;
const PROP: u32 = 3;
const END: u32 = 9;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// A child of `/reserved-memory`: its name (with unit address) and `reg` ranges (start, size),
/// with `no-map` or not.
pub struct Region<'a> {
    pub name: &'a str,
    pub reg: &'a [(u64, u64)],
    pub no_map: bool,
}

/// `blob` with `memreserve` appended to its `/memreserve/` entries and, if `regions` is not
/// empty, a `/reserved-memory` node (2 address and 2 size cells, `ranges`) holding them. The
/// blob must not have a `/reserved-memory` node already (QEMU's `virt` has none).
pub fn with_reservations(
    blob: &[u8],
    memreserve: &[(u64, u64)],
    regions: &[Region],
) -> Result<Vec<u8>> {
    if blob.len() < HEADER || be32(blob, 0) != MAGIC {
        bail!("not a flattened device tree (no magic number)");
    }
    let (off_struct, off_strings, off_rsv) =
        (be32(blob, 8) as usize, be32(blob, 12) as usize, be32(blob, 16) as usize);
    let (size_strings, size_struct) = (be32(blob, 32) as usize, be32(blob, 36) as usize);
    if be32(blob, 20) < 17 {
        bail!("device tree version {} (17 needed)", be32(blob, 20));
    }
    // The reservation map: (address, size) pairs up to a (0, 0) pair.
    let mut rsv = Vec::new();
    let mut at = off_rsv;
    loop {
        let (a, s) = (
            u64::from_be_bytes(blob[at..at + 8].try_into()?),
            u64::from_be_bytes(blob[at + 8..at + 16].try_into()?),
        );
        if a == 0 && s == 0 {
            break;
        }
        rsv.push((a, s));
        at += 16;
    }
    rsv.extend_from_slice(memreserve);

    let mut strings = blob[off_strings..off_strings + size_strings].to_vec();
    let mut name_off = |name: &str| -> u32 {
        let off = strings.len() as u32;
        strings.extend_from_slice(name.as_bytes());
        strings.push(0);
        off
    };
    let (addr_cells, size_cells, ranges, reg, no_map) = (
        name_off("#address-cells"),
        name_off("#size-cells"),
        name_off("ranges"),
        name_off("reg"),
        name_off("no-map"),
    );

    let mut node = Vec::new();
    let word = |v: &mut Vec<u8>, w: u32| v.extend_from_slice(&w.to_be_bytes());
    let begin = |v: &mut Vec<u8>, name: &str| {
        word(v, BEGIN_NODE);
        v.extend_from_slice(name.as_bytes());
        v.push(0);
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
    };
    let prop = |v: &mut Vec<u8>, name: u32, value: &[u8]| {
        word(v, PROP);
        word(v, value.len() as u32);
        word(v, name);
        v.extend_from_slice(value);
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
    };
    if !regions.is_empty() {
        begin(&mut node, "reserved-memory");
        prop(&mut node, addr_cells, &2u32.to_be_bytes());
        prop(&mut node, size_cells, &2u32.to_be_bytes());
        prop(&mut node, ranges, &[]);
        for r in regions {
            begin(&mut node, r.name);
            let cells: Vec<u8> = r
                .reg
                .iter()
                .flat_map(|&(start, size)| [start.to_be_bytes(), size.to_be_bytes()])
                .flatten()
                .collect();
            prop(&mut node, reg, &cells);
            if r.no_map {
                prop(&mut node, no_map, &[]);
            }
            word(&mut node, END_NODE);
        }
        word(&mut node, END_NODE);
    }

    // The new node goes last in the root: before the root's END_NODE and the END token.
    let structure = &without_memory_nodes(&blob[off_struct..off_struct + size_struct])?;
    let tail = structure.len() - 8;
    if be32(structure, tail) != END_NODE || be32(structure, tail + 4) != END {
        bail!("the structure block does not end with the root's end and the end token");
    }
    let mut new_struct = structure[..tail].to_vec();
    new_struct.extend_from_slice(&node);
    new_struct.extend_from_slice(&structure[tail..]);

    let mut out = blob[..HEADER].to_vec();
    for (a, s) in rsv.iter().chain([(0, 0)].iter()) {
        out.extend_from_slice(&a.to_be_bytes());
        out.extend_from_slice(&s.to_be_bytes());
    }
    let new_off_struct = out.len();
    out.extend_from_slice(&new_struct);
    let new_off_strings = out.len();
    out.extend_from_slice(&strings);
    let total = out.len();
    let mut set = |at: usize, v: usize| out[at..at + 4].copy_from_slice(&(v as u32).to_be_bytes());
    set(4, total);
    set(8, new_off_struct);
    set(12, new_off_strings);
    set(16, HEADER);
    set(32, strings.len());
    set(36, new_struct.len());
    Ok(out)
}

/// `blob` (as [`with_reservations`] returns it: without memory nodes or NOPs) with the `cpu@`
/// children of `/cpus` in reverse order: the first CPU listed is then QEMU's last, and the CPU
/// QEMU boots on is listed last. Each node moves whole, its properties (and phandle) with it.
pub fn with_cpus_reversed(blob: &[u8]) -> Result<Vec<u8>> {
    let (off_struct, size_struct) = (be32(blob, 8) as usize, be32(blob, 36) as usize);
    let structure = &blob[off_struct..off_struct + size_struct];
    // Byte ranges of the `cpu@` children of `/cpus`, in order.
    let mut cpus: Vec<(usize, usize)> = Vec::new();
    let (mut at, mut depth) = (0, 0usize);
    let (mut in_cpus, mut child_start) = (false, None);
    while at + 4 <= structure.len() {
        let start = at;
        let token = be32(structure, at);
        at += 4;
        match token {
            BEGIN_NODE => {
                let len = structure[at..].iter().position(|&b| b == 0).unwrap_or(0);
                let name = std::str::from_utf8(&structure[at..at + len])?;
                at = (at + len + 1).next_multiple_of(4);
                depth += 1;
                if depth == 2 && name == "cpus" {
                    in_cpus = true;
                } else if in_cpus && depth == 3 && name.starts_with("cpu@") {
                    child_start = Some(start);
                }
            }
            END_NODE => {
                if let (3, Some(begin)) = (depth, child_start.take()) {
                    cpus.push((begin, at));
                }
                if depth == 2 {
                    in_cpus = false;
                }
                depth -= 1;
            }
            PROP => at += 8 + (be32(structure, at) as usize).next_multiple_of(4),
            END => break,
            t => bail!("unknown structure token {t:#x} at {start}"),
        }
    }
    if cpus.len() < 2 {
        bail!("the tree lists {} CPUs under /cpus: nothing to reorder", cpus.len());
    }
    // The CPU nodes are one run (QEMU writes nothing between them): rewrite it reversed.
    let (first, last) = (cpus[0].0, cpus[cpus.len() - 1].1);
    if cpus.windows(2).any(|w| w[0].1 != w[1].0) {
        bail!("the CPU nodes under /cpus are not contiguous");
    }
    let reversed: Vec<u8> =
        cpus.iter().rev().flat_map(|&(a, b)| structure[a..b].iter().copied()).collect();
    let mut out = blob.to_vec();
    out[off_struct + first..off_struct + last].copy_from_slice(&reversed);
    Ok(out)
}

/// The structure block without the root's `memory` nodes and without NOP tokens. QEMU, given a
/// tree with `-dtb`, puts its own memory node in and overwrites the tree's with NOP tokens,
/// which the `fdt` crate armhv reads the tree with (0.1.5) does not skip between nodes: it
/// then finds no `/cpus`, and armhv stops before its console works. Without memory nodes
/// QEMU has nothing to overwrite.
fn without_memory_nodes(structure: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(structure.len());
    let (mut at, mut depth) = (0, 0usize);
    // Depth at which a skipped node began.
    let mut skipping: Option<usize> = None;
    while at + 4 <= structure.len() {
        let start = at;
        let token = be32(structure, at);
        at += 4;
        match token {
            BEGIN_NODE => {
                let len = structure[at..].iter().position(|&b| b == 0).unwrap_or(0);
                let name = std::str::from_utf8(&structure[at..at + len])?;
                at = (at + len + 1).next_multiple_of(4);
                if skipping.is_none() && depth == 1 && name.split('@').next() == Some("memory") {
                    skipping = Some(depth);
                }
                depth += 1;
            }
            END_NODE => depth -= 1,
            PROP => at += 8 + (be32(structure, at) as usize).next_multiple_of(4),
            4 => continue, // FDT_NOP
            END => {}
            t => bail!("unknown structure token {t:#x} at {start}"),
        }
        if skipping.is_none() {
            out.extend_from_slice(&structure[start..at]);
        }
        if token == END_NODE && skipping == Some(depth) {
            skipping = None;
        }
        if token == END {
            return Ok(out);
        }
    }
    bail!("the structure block has no end token")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree with an empty root, built with `vm-fdt`, gets the reservations `fdt` then reads.
    #[test]
    fn reservations_are_added() {
        let mut w = vm_fdt::FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        w.property_u32("#address-cells", 2).unwrap();
        w.property_u32("#size-cells", 2).unwrap();
        w.end_node(root).unwrap();
        let blob = w.finish().unwrap();
        let regions = [
            Region { name: "fw@48000000", reg: &[(0x4800_0000, 0x20_0000)], no_map: true },
            Region {
                name: "shm@49000000",
                reg: &[(0x4900_0000, 0x1000), (0x4a00_0000, 0x2000)],
                no_map: false,
            },
        ];
        let out = with_reservations(&blob, &[(0x1000, 0x2000), (0x5000, 0x100)], &regions).unwrap();
        let fdt = fdt::Fdt::new(&out).unwrap();
        let rsv: Vec<(usize, usize)> =
            fdt.memory_reservations().map(|r| (r.address() as usize, r.size())).collect();
        assert_eq!(rsv, [(0x1000, 0x2000), (0x5000, 0x100)]);
        let node = fdt.find_node("/reserved-memory").unwrap();
        let regs: Vec<(usize, usize)> = node
            .children()
            .flat_map(|c| c.reg().unwrap().map(|r| (r.starting_address as usize, r.size.unwrap())))
            .collect();
        assert_eq!(regs, [(0x4800_0000, 0x20_0000), (0x4900_0000, 0x1000), (0x4a00_0000, 0x2000)]);
        assert!(node.children().next().unwrap().property("no-map").is_some());
    }

    /// Three CPU nodes come out in reverse order, each with its own `reg`.
    #[test]
    fn cpus_are_reversed() {
        let mut w = vm_fdt::FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        let cpus = w.begin_node("cpus").unwrap();
        w.property_u32("#address-cells", 1).unwrap();
        w.property_u32("#size-cells", 0).unwrap();
        for mpidr in [0u32, 1, 0x100] {
            let cpu = w.begin_node(&format!("cpu@{mpidr:x}")).unwrap();
            w.property_string("device_type", "cpu").unwrap();
            w.property_u32("reg", mpidr).unwrap();
            w.end_node(cpu).unwrap();
        }
        w.end_node(cpus).unwrap();
        w.end_node(root).unwrap();
        let blob = with_reservations(&w.finish().unwrap(), &[], &[]).unwrap();
        let out = with_cpus_reversed(&blob).unwrap();
        let fdt = fdt::Fdt::new(&out).unwrap();
        let ids: Vec<usize> = fdt.cpus().map(|c| c.ids().first()).collect();
        assert_eq!(ids, [0x100, 1, 0]);
    }
}
