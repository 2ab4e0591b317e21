//! The Xen column of `make compare`: vmbench as the only domain of Debian 12's stock Xen 4.17
//! (`scripts/xen-host.sh`), booted dom0less on the same QEMU machine as the other columns.
//!
//! Xen takes its domains from the device tree: QEMU's own tree is dumped (`-machine
//! dumpdtb=`), copied with Xen's command line (`/chosen/xen,xen-bootargs`) and one
//! `xen,domain` node under `/chosen` added, and given back with `-dtb`; vmbench's Image is
//! placed in RAM with `-device loader`, where the domain node's `multiboot,kernel` module says
//! it is. Xen 4.17 boots with no dom0 when the tree names no dom0 kernel, so vmbench runs alone
//! and the figures have no dom0 in them.
//!
//! Limits, all measured on QEMU 7.2 (bench/README.md):
//! - under `-icount`, Xen hangs at boot on two or more physical CPUs, so an icount run has one
//!   physical CPU and a domain of one vCPU: vmbench's `ipi` then has no second CPU;
//! - Xen does not virtualize the PMU for a domain, so vmbench times with CNTVCT_EL0 (unit
//!   `ticks`, 62.5 MHz; under `-icount shift=0` one tick is 16 instructions);
//! - the domain has no virtio device: `io-out` and `io-in` are skipped by vmbench.

use crate::parse;
use crate::runlog::{console_tail, rel};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use xtask::{MachineSpec, qemu, root};

/// One vmbench run under Xen.
#[derive(Clone, Debug)]
pub struct XenRun {
    /// vmbench's arm64 Image (a flat binary with the Image header, linked at 0x4008_0000).
    pub vmbench: PathBuf,
    /// vmbench's `/chosen/bootargs`, e.g. `n=1000 warmup=100 hypercall gic-trap eoi`.
    pub bootargs: String,
    /// QEMU's CPU model, e.g. `cortex-a76`.
    pub cpu: String,
    /// `-icount shift=0,sleep=off`: deterministic timing, one physical CPU (see the module's
    /// limits).
    pub icount: bool,
    pub timeout: Duration,
    /// Where the whole console goes (the edited device tree goes beside it, `.dtb`).
    pub log: PathBuf,
}

/// The unit vmbench's figures have under Xen, for the report: its PMU is not virtualized.
pub const TIMING_NOTE: &str = "Xen does not virtualize the PMU: vmbench times with CNTVCT_EL0 \
     (ticks at 62.5 MHz; under -icount shift=0 one tick is 16 instructions)";

/// Why a run under `-icount` has one physical CPU and so no `ipi` figure.
pub const ICOUNT_ONE_CPU: &str = "Xen 4.17 hangs at boot on two or more physical CPUs under \
     QEMU 7.2's -icount, so the icount run has one physical CPU and a one-vCPU domain";

/// Physical CPUs without icount, and the domain's vCPUs: two, for vmbench's `ipi`.
const SMP_NO_ICOUNT: u32 = 2;
/// The machine's RAM: Xen, its heap and the domain.
const MEM_MIB: u64 = 1024;
/// The domain's RAM.
const DOMU_MEM_KIB: u64 = 256 * 1024;
/// Where `-device loader` puts vmbench's Image: in the machine's RAM, clear of Xen (QEMU loads
/// it at the start of RAM, and Xen moves itself to the top) and of the device tree (QEMU puts
/// that 128 MiB into RAM, 0x4800_0000).
const KERNEL_ADDR: u64 = 0x5000_0000;
/// Xen's command line: its console on the machine's UART (`/chosen/stdout-path`); no scrubbing
/// of free memory at boot (emulated time the figures do not need). The log levels
/// stay at their defaults: with `guest_loglvl=all` Xen prints a line for every SMCCC call it
/// does not know (vmbench's ARMHV_NOP hypercall), and the hypercall would time that line. The
/// scheduler is the package's default, credit2 (the build has no `null` scheduler); with one
/// domain it has nothing else to run.
const XEN_BOOTARGS: &str = "console=dtuart bootscrub=0";
/// How Xen 4.17 prints a line a domain wrote to its vpl011 when Xen itself is the console's
/// backend (no dom0): `(XEN) DOM<id>: <line>`.
const XEN_PREFIX: &str = "(XEN) DOM";
/// What ends a run early: Xen's panic, a domain crash, vmbench's own panic.
const FAILURES: [&str; 3] = ["Panic on CPU", "crashed", "vmbench: PANIC"];

/// The domain Xen starts from the device tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomU<'a> {
    /// The node's name under `/chosen`.
    pub name: &'a str,
    pub vcpus: u32,
    pub mem_kib: u64,
    /// The kernel's (address, size) in the machine's RAM.
    pub kernel: (u64, u64),
    /// The domain's `/chosen/bootargs`.
    pub bootargs: &'a str,
}

/// QEMU's device tree `blob` with Xen's command line and `domu` added to `/chosen` (Xen's
/// `docs/misc/arm/device-tree/booting.txt`): `#address-cells` and `#size-cells` of 2 for the
/// nodes under it, `xen,xen-bootargs`, and a `xen,domain` node with `cpus`, `memory` (KiB),
/// `vpl011` (the domain's console) and its kernel as a `multiboot,kernel` module. Everything
/// else is copied as it is, memory reservations included.
pub fn with_domu(blob: &[u8], xen_bootargs: &str, domu: &DomU) -> Result<Vec<u8>> {
    let tree = fdt::Fdt::new(blob)
        .map_err(|e| anyhow::anyhow!("QEMU's device tree does not parse: {e:?}"))?;
    let reservations: Vec<vm_fdt::FdtReserveEntry> = tree
        .memory_reservations()
        .map(|r| vm_fdt::FdtReserveEntry::new(r.address() as u64, r.size() as u64))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("a memory reservation of QEMU's tree: {e}"))?;
    let mut w = vm_fdt::FdtWriter::new_with_mem_reserv(&reservations).map_err(fdt_err)?;
    let root = tree.find_node("/").context("QEMU's device tree has no root node")?;
    let mut saw_chosen = false;
    copy_node(&mut w, root, 0, &mut |w, path| {
        if path != "/chosen" {
            return Ok(());
        }
        saw_chosen = true;
        add_domu(w, xen_bootargs, domu)
    })?;
    if !saw_chosen {
        bail!("QEMU's device tree has no /chosen node to put Xen's domain in");
    }
    w.finish().map_err(fdt_err)
}

fn fdt_err(e: vm_fdt::Error) -> anyhow::Error {
    anyhow::anyhow!("writing the device tree: {e}")
}

/// Properties `add_domu` writes into `/chosen`: a copy of QEMU's would be a duplicate.
const CHOSEN_OWN: [&str; 3] = ["#address-cells", "#size-cells", "xen,xen-bootargs"];

/// Writes `node` and its subtree; `extra` adds to a node (by path) after its properties.
fn copy_node(
    w: &mut vm_fdt::FdtWriter,
    node: fdt::node::FdtNode,
    depth: usize,
    extra: &mut dyn FnMut(&mut vm_fdt::FdtWriter, &str) -> Result<()>,
) -> Result<()> {
    // fdt names the root "/"; the blob's root name is empty.
    let name = if depth == 0 { "" } else { node.name };
    let path = if depth == 0 { "/".to_owned() } else { format!("/{name}") };
    let handle = w.begin_node(name).map_err(fdt_err)?;
    let chosen = depth == 1 && name == "chosen";
    for p in node.properties() {
        if chosen && CHOSEN_OWN.contains(&p.name) {
            continue;
        }
        w.property(p.name, p.value).map_err(fdt_err)?;
    }
    if depth == 1 {
        extra(w, &path)?;
    }
    for child in node.children() {
        copy_node(w, child, depth + 1, extra)?;
    }
    w.end_node(handle).map_err(fdt_err)
}

fn add_domu(w: &mut vm_fdt::FdtWriter, xen_bootargs: &str, d: &DomU) -> Result<()> {
    w.property_u32("#address-cells", 2).map_err(fdt_err)?;
    w.property_u32("#size-cells", 2).map_err(fdt_err)?;
    w.property_string("xen,xen-bootargs", xen_bootargs).map_err(fdt_err)?;
    let dom = w.begin_node(d.name).map_err(fdt_err)?;
    w.property_string("compatible", "xen,domain").map_err(fdt_err)?;
    w.property_u32("#address-cells", 2).map_err(fdt_err)?;
    w.property_u32("#size-cells", 2).map_err(fdt_err)?;
    w.property_u32("cpus", d.vcpus).map_err(fdt_err)?;
    w.property_u64("memory", d.mem_kib).map_err(fdt_err)?;
    w.property_null("vpl011").map_err(fdt_err)?;
    let module = w.begin_node(&format!("module@{:x}", d.kernel.0)).map_err(fdt_err)?;
    w.property_string_list(
        "compatible",
        vec!["multiboot,kernel".to_owned(), "multiboot,module".to_owned()],
    )
    .map_err(fdt_err)?;
    w.property_array_u64("reg", &[d.kernel.0, d.kernel.1]).map_err(fdt_err)?;
    w.property_string("bootargs", d.bootargs).map_err(fdt_err)?;
    w.end_node(module).map_err(fdt_err)?;
    w.end_node(dom).map_err(fdt_err)
}

/// The domains' own lines of a Xen console, without Xen's `(XEN) DOM<id>: ` prefix:
/// vmbench's lines as plain QEMU prints them (filed under the VM name `""` by
/// [`parse::parse_console`]). Xen's own lines are left out.
pub fn domain_lines(console: &str) -> String {
    let mut out = String::new();
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        let Some(rest) = line.strip_prefix(XEN_PREFIX) else { continue };
        let Some((id, text)) = rest.split_once(": ") else { continue };
        if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(text);
            out.push('\n');
        }
    }
    out
}

/// Xen's binary, fetched by `scripts/xen-host.sh` into `build/xen` when missing.
pub fn ensure_xen() -> Result<PathBuf> {
    let script = root().join("scripts/xen-host.sh");
    let status = Command::new(&script)
        .status()
        .with_context(|| format!("could not run {}", rel(&script)))?;
    if !status.success() {
        bail!("{} failed ({status}): Xen is needed for the Xen column", rel(&script));
    }
    let xen = xtask::build_dir().join("xen/xen");
    if !xen.is_file() {
        bail!("{} succeeded but {} is missing", rel(&script), rel(&xen));
    }
    Ok(xen)
}

/// The machine of a run: the other columns' QEMU `virt` (GICv3, EL2), one physical CPU under
/// icount ([`ICOUNT_ONE_CPU`]).
fn machine(run: &XenRun, dtb: Option<PathBuf>) -> MachineSpec {
    MachineSpec {
        cpu: run.cpu.clone(),
        smp: if run.icount { 1 } else { SMP_NO_ICOUNT },
        mem_mib: MEM_MIB,
        gic: 3,
        icount: run.icount,
        dtb,
        ..MachineSpec::default()
    }
}

/// Boots Xen dom0less with vmbench as its only domain and waits for `vmbench: done`; returns
/// the domain's console lines (vmbench's, untagged; see [`domain_lines`]). The whole console
/// is written to `run.log`. Fails, with the console's last lines, on a timeout, a Xen panic, a
/// domain crash or a vmbench panic.
pub fn run_vmbench(run: &XenRun) -> Result<String> {
    xtask::setup::ensure_qemu()?;
    let xen = ensure_xen()?;
    let kernel = std::fs::metadata(&run.vmbench)
        .with_context(|| format!("vmbench's Image {}", run.vmbench.display()))?
        .len();
    if let Some(dir) = run.log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let qemu_dtb = run.log.with_extension("qemu.dtb");
    let blob = qemu::dump_dtb(&xen, &machine(run, None), &qemu_dtb)?;
    let vcpus = if run.icount { 1 } else { SMP_NO_ICOUNT };
    let domu = DomU {
        name: "vmbench",
        vcpus,
        mem_kib: DOMU_MEM_KIB,
        kernel: (KERNEL_ADDR, kernel),
        bootargs: &run.bootargs,
    };
    let edited = with_domu(&blob, XEN_BOOTARGS, &domu)?;
    let dtb = run.log.with_extension("dtb");
    std::fs::write(&dtb, edited).with_context(|| format!("writing {}", dtb.display()))?;

    let mut cmd = qemu::command(&xen, &machine(run, Some(dtb)));
    cmd.arg("-device")
        .arg(format!("loader,file={},addr={KERNEL_ADDR:#x},force-raw=on", run.vmbench.display()));
    let command_line = qemu::command_line(&cmd);
    let mut q = qemu::Run::spawn(cmd)?;
    // Xen's lines are not armhv's: its failures are looked for here.
    q.fail_on_report = false;
    let done = "vmbench: done";
    let deadline = Instant::now() + run.timeout;
    let waited = loop {
        let slice = deadline.saturating_duration_since(Instant::now()).min(Duration::from_secs(2));
        match q.expect(done, slice) {
            Ok(()) => break Ok(()),
            Err(e) => {
                let console = q.output();
                if let Some(f) = FAILURES.iter().find(|f| console.contains(*f)) {
                    break Err(format!("the console shows {f:?}"));
                }
                if e.to_string().starts_with("QEMU exited") {
                    break Err("QEMU exited".to_owned());
                }
                if Instant::now() >= deadline {
                    break Err(format!("no `{done}` within {:?}", run.timeout));
                }
            }
        }
    };
    let console = q.output();
    drop(q); // Xen keeps running after its last domain powers off: QEMU is stopped here.
    let header = format!("# {command_line}\n");
    std::fs::write(&run.log, header + &console)
        .with_context(|| format!("writing {}", run.log.display()))?;
    let tail = || console_tail(&console, &run.log);
    if let Err(why) = waited {
        bail!("vmbench under Xen: {why}\n{}", tail());
    }
    let lines = domain_lines(&console);
    let parsed = parse::parse_console(&lines).with_context(tail)?;
    if !parsed.vm("").is_some_and(|v| v.done) {
        bail!("vmbench under Xen: `{done}` is not among the domain's lines\n{}", tail());
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small tree shaped like QEMU's: root cells, a UART, /chosen with stdout-path, a memory
    /// reservation.
    fn qemu_like() -> Vec<u8> {
        let reserve = [vm_fdt::FdtReserveEntry::new(0x4000_0000, 0x1000).unwrap()];
        let mut w = vm_fdt::FdtWriter::new_with_mem_reserv(&reserve).unwrap();
        let root = w.begin_node("").unwrap();
        w.property_u32("#address-cells", 2).unwrap();
        w.property_u32("#size-cells", 2).unwrap();
        w.property_string("compatible", "linux,dummy-virt").unwrap();
        let uart = w.begin_node("pl011@9000000").unwrap();
        w.property_string("compatible", "arm,pl011").unwrap();
        w.property_array_u64("reg", &[0x900_0000, 0x1000]).unwrap();
        w.end_node(uart).unwrap();
        let chosen = w.begin_node("chosen").unwrap();
        w.property_string("stdout-path", "/pl011@9000000").unwrap();
        w.property_u32("#address-cells", 1).unwrap();
        w.end_node(chosen).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    const DOMU: DomU = DomU {
        name: "vmbench",
        vcpus: 1,
        mem_kib: 256 * 1024,
        kernel: (0x5000_0000, 0xee38),
        bootargs: "n=10 hypercall",
    };

    fn be64(v: &[u8]) -> Vec<u64> {
        v.chunks(8).map(|c| u64::from_be_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn the_domain_is_added_under_chosen_and_the_rest_is_kept() {
        let blob = with_domu(&qemu_like(), "console=dtuart", &DOMU).unwrap();
        let t = fdt::Fdt::new(&blob).unwrap();
        // Kept: the root's properties, the UART, stdout-path, the reservation.
        assert_eq!(t.root().compatible().first(), "linux,dummy-virt");
        let uart = t.find_node("/pl011@9000000").unwrap();
        assert_eq!(uart.reg().unwrap().next().unwrap().starting_address as u64, 0x900_0000);
        let chosen = t.find_node("/chosen").unwrap();
        assert_eq!(chosen.property("stdout-path").unwrap().as_str(), Some("/pl011@9000000"));
        let rsv: Vec<_> = t.memory_reservations().map(|r| (r.address() as u64, r.size())).collect();
        assert_eq!(rsv, [(0x4000_0000, 0x1000)]);
        // Added: Xen's command line, and /chosen's cells replaced, not repeated.
        assert_eq!(chosen.property("xen,xen-bootargs").unwrap().as_str(), Some("console=dtuart"));
        assert_eq!(chosen.property("#address-cells").unwrap().as_usize(), Some(2));
        assert_eq!(chosen.properties().filter(|p| p.name == "#address-cells").count(), 1);
        assert_eq!(chosen.property("#size-cells").unwrap().as_usize(), Some(2));

        let dom = t.find_node("/chosen/vmbench").unwrap();
        assert_eq!(dom.compatible().unwrap().first(), "xen,domain");
        assert_eq!(dom.property("cpus").unwrap().as_usize(), Some(1));
        assert_eq!(be64(dom.property("memory").unwrap().value), [256 * 1024]);
        assert!(dom.property("vpl011").unwrap().value.is_empty());
        let module = t.find_node("/chosen/vmbench/module@50000000").unwrap();
        let compatible: Vec<&str> = module.compatible().unwrap().all().collect();
        assert_eq!(compatible, ["multiboot,kernel", "multiboot,module"]);
        assert_eq!(be64(module.property("reg").unwrap().value), [0x5000_0000, 0xee38]);
        assert_eq!(module.property("bootargs").unwrap().as_str(), Some("n=10 hypercall"));
    }

    #[test]
    fn a_tree_without_chosen_is_refused() {
        let mut w = vm_fdt::FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        w.end_node(root).unwrap();
        let err = with_domu(&w.finish().unwrap(), "", &DOMU).unwrap_err();
        assert!(err.to_string().contains("no /chosen"), "{err}");
        assert!(with_domu(b"not a tree", "", &DOMU).is_err());
    }

    #[test]
    fn domain_lines_are_the_domains_own_without_xens_prefix() {
        let console = "(XEN) Xen dom0less mode detected\r\n\
                       (XEN) DOM1: vmbench: boot cpus=1 clock=cntvct freq=62500000 armhv=no el=1\n\
                       (XEN) d1v0 Unhandled SMC/HVC: 0xc6000000\n\
                       (XEN) DOMx: not a domain\n\
                       (XEN) DOM1: vmbench: done\n\
                       qemu-system-aarch64: warning: icount sleep disabled\n";
        let lines = domain_lines(console);
        assert_eq!(
            lines,
            "vmbench: boot cpus=1 clock=cntvct freq=62500000 armhv=no el=1\nvmbench: done\n"
        );
        let parsed = parse::parse_console(&lines).unwrap();
        assert!(parsed.vm("").unwrap().done);
    }
}
