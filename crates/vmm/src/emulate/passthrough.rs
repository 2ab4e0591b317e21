//! Physical devices assigned to a VM (`passthrough = ["/pl031@9010000"]` in its config).
//!
//! The device's register window is mapped into the VM's Stage-2 at its host address, as
//! Device-nGnRE memory, so the guest drives it without traps. Each of its SPIs is routed to the
//! physical CPU of the VM's vCPU 0 and becomes the virtual SPI with the same INTID, linked to
//! the physical one in the list registers (`ICH_LR.HW`): armhv acknowledges the physical
//! interrupt and only drops its priority, the guest's EOI of the virtual interrupt deactivates
//! it. So a device interrupt costs one exit, and a still-asserted level interrupt cannot fire
//! again before the guest has handled it.
//!
//! A level-sensitive one follows its line as on the machine ([`resample`]): if the line drops
//! before the guest acknowledged the virtual interrupt, its pending state is withdrawn at the
//! guest's next exit. A handler that completes the interrupt in the GIC before clearing the
//! device sees the physical interrupt fire again at its EOI (the line is still high), and then
//! drop: it takes it once, provided the guest exits (a register access, a log line, a WFI)
//! between clearing the device and unmasking interrupts. Without any exit in between, nothing
//! can withdraw a pending state from a list register, on armhv as on KVM.
//!
//! Only devices that need no host-side setup (clocks, resets, DMA behind an IOMMU) can be
//! assigned this way. armhv has no IOMMU support, so a device that masters DMA, driven by the
//! guest, reads and writes any host memory: armhv's and every other VM's. [`check_dma`] refuses
//! such a device unless the config accepts the risk (`dma = "unprotected"`, a warning at every
//! boot of the VM), and assigns without a word only kinds known to do no DMA ([`DMA_FREE`]);
//! for another kind the config must vouch (`dma = "none"`).
//!
//! At the VM's stop and reset its devices are quiesced as far as armhv knows how
//! ([`DMA_FREE`]'s register writes: interrupts masked and cleared, the device disabled), not
//! only their interrupts at the GIC: the next guest (or the next life of this one) starts with
//! a device that raises nothing and drives nothing.

use crate::arch::{device, gic};
use crate::vm::{AssignedDevice, DmaVerdict, Vm};
use crate::wakeups::Wakeups;
use crate::{irqdist, registry, stats};
use addr::{IpaRange, PAGE_SIZE, PhysAddr};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use stage2::{MemAttr, S2Perms, Stage2Table};
use vmconfig::{Passthrough, PassthroughDma};

/// One register write that quiesces a device: at `offset` in its first register window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegWrite {
    pub offset: u64,
    pub value: u32,
}

const fn w(offset: u64, value: u32) -> RegWrite {
    RegWrite { offset, value }
}

/// A kind of device known to master no DMA, by its first (most specific) `compatible`: a node
/// that only lists one of these as a fallback is not trusted, since a compatible superset may
/// add a DMA engine. Each with the writes that quiesce it and what they do (for the log).
pub struct DmaFree {
    pub compatible: &'static str,
    pub quiesce: &'static [RegWrite],
    pub how: &'static str,
}

/// Device kinds that master no DMA (their TRMs: none has a bus-master interface), and how
/// armhv quiesces each at its VM's stop and reset. PL011 can be a DMA engine's peripheral, but
/// then its node names the engine (`dmas`), which [`check_dma`] refuses; alone it moves no data.
pub const DMA_FREE: &[DmaFree] = &[
    DmaFree {
        // PL031 RTC: IMSC (0x10) = 0 masks the alarm, ICR (0x1c) = 1 clears a raised one. The
        // counter itself cannot be stopped (CR.RTCstart ignores 0).
        compatible: "arm,pl031",
        quiesce: &[w(0x10, 0), w(0x1c, 1)],
        how: "alarm interrupt masked and cleared",
    },
    DmaFree {
        // PL061 GPIO: GPIOIE (0x410) = 0 masks every pin's interrupt, GPIOIC (0x41c) clears
        // them; GPIODIR (0x400) = 0 and GPIOAFSEL (0x420) = 0, the reset values: every pin an
        // input, under software control, so nothing the guest drove stays driven.
        compatible: "arm,pl061",
        quiesce: &[w(0x410, 0), w(0x41c, 0xff), w(0x400, 0), w(0x420, 0)],
        how: "pin interrupts masked and cleared, every pin an input",
    },
    DmaFree {
        // PL011 UART: UARTIMSC (0x38) = 0, UARTICR (0x44) clears every interrupt, UARTDMACR
        // (0x48) = 0 stops DMA requests, UARTCR (0x30) = 0 disables the UART.
        compatible: "arm,pl011",
        quiesce: &[w(0x38, 0), w(0x44, 0x7ff), w(0x48, 0), w(0x30, 0)],
        how: "interrupts masked and cleared, DMA requests off, UART disabled",
    },
    DmaFree {
        // SP804 dual timer: TimerXControl (0x08, 0x28) = 0 stops each timer and masks its
        // interrupt, TimerXIntClr (0x0c, 0x2c) clears it.
        compatible: "arm,sp804",
        quiesce: &[w(0x08, 0), w(0x0c, 1), w(0x28, 0), w(0x2c, 1)],
        how: "both timers stopped, interrupts masked and cleared",
    },
];

/// Compatibles of devices that master DMA whatever their node says (QEMU's fw-cfg has a DMA
/// interface; virtio devices, DMA controllers, PCI host bridges, USB, network and SD
/// controllers move data by DMA).
const DMA_MASTERS: &[&str] = &[
    "qemu,fw-cfg-mmio",
    "virtio,mmio",
    "arm,pl330",
    "arm,pl080",
    "arm,pl081",
    "pci-host-ecam-generic",
    "pci-host-cam-generic",
    "generic-ehci",
    "generic-ohci",
    "generic-xhci",
    "snps,dwc3",
    "snps,dwmac",
    "cdns,macb",
    "arm,pl180",
];

/// Whether a property of a node says its device masters DMA or sits behind an IOMMU: DMA
/// channels (`dmas`), a DMA controller (`#dma-cells`), `dma-coherent`, `dma-ranges` and the
/// other `dma-*` properties, IOMMU and MSI links (an MSI is a write the device makes).
fn dma_property(name: &str) -> bool {
    matches!(name, "dmas" | "iommus" | "iommu-map" | "msi-parent" | "msi-map" | "#dma-cells")
        || name.starts_with("dma-")
}

/// The first string of a raw `compatible` (NUL-separated), if any.
fn first_compatible(compatible: &[u8]) -> Option<&str> {
    let first = compatible.split(|&b| b == 0).next()?;
    core::str::from_utf8(first).ok().filter(|s| !s.is_empty())
}

/// Whether `compatible` (raw) names a kind known to master DMA.
fn known_master(compatible: &[u8]) -> Option<&'static str> {
    let names = compatible.split(|&b| b == 0).filter_map(|s| core::str::from_utf8(s).ok());
    for name in names {
        if let Some(&m) = DMA_MASTERS.iter().find(|&&m| m == name) {
            return Some(m);
        }
    }
    None
}

/// The [`DMA_FREE`] entry of a device, by its first compatible.
pub fn dma_free_kind(compatible: &[u8]) -> Option<&'static DmaFree> {
    let first = first_compatible(compatible)?;
    DMA_FREE.iter().find(|k| k.compatible == first)
}

/// Whether a device whose node has `compatible` (raw) and the properties `properties` may be
/// assigned with the config's `dma`; the error says why not and what to write instead.
pub fn check_dma(
    compatible: &[u8],
    properties: &[&str],
    dma: PassthroughDma,
) -> Result<DmaVerdict, String> {
    if dma == PassthroughDma::Unprotected {
        return Ok(DmaVerdict::Unprotected);
    }
    let kind = first_compatible(compatible).unwrap_or("(no compatible)");
    let evidence = match (properties.iter().find(|p| dma_property(p)), known_master(compatible)) {
        (Some(p), _) => Some(format!("its node has `{p}`")),
        (None, Some(m)) => Some(format!("{m} is a DMA master")),
        (None, None) => None,
    };
    if let Some(evidence) = evidence {
        let said = match dma {
            PassthroughDma::None => "the config says dma = \"none\", but ",
            _ => "",
        };
        return Err(format!(
            "{said}it can master DMA ({evidence}), and armhv has no IOMMU support: driven by the \
             guest, it could read and write any host memory, armhv's and the other VMs'. Assign \
             it only if you accept that, with {{ path = \"...\", dma = \"unprotected\" }} \
             (configs/README.md, \"Passthrough\")"
        ));
    }
    if dma_free_kind(compatible).is_some() {
        return Ok(DmaVerdict::Free);
    }
    if dma == PassthroughDma::None {
        return Ok(DmaVerdict::Vouched);
    }
    let known: Vec<&str> = DMA_FREE.iter().map(|k| k.compatible).collect();
    Err(format!(
        "armhv does not know whether a {kind} masters DMA (it knows {} to do none), and armhv has \
         no IOMMU support: a device that does could reach any host memory. If it does no DMA, \
         say so with {{ path = \"...\", dma = \"none\" }}; dma = \"unprotected\" assigns it \
         anyway, accepting that risk (configs/README.md, \"Passthrough\")",
        known.join(", ")
    ))
}

/// Highest INTID an SPI can have, plus one.
const INTID_LIMIT: usize = 1020;
/// Per physical INTID: the owning VM's id + 1, or 0.
static OWNER: [AtomicU8; INTID_LIMIT] = [const { AtomicU8::new(0) }; INTID_LIMIT];
/// Per physical INTID: forwarded and maybe not yet acknowledged by the guest, so [`resample`]
/// has something to look at. Written only under the owning VM's vGIC lock, so that setting it
/// (a new firing) and clearing it (nothing left to withdraw) cannot cross.
static UNACKED: [AtomicBool; INTID_LIMIT] = [const { AtomicBool::new(false) }; INTID_LIMIT];

/// What a VM's guest-physical map already holds, which an assigned device must not overlap.
pub struct Occupied<'a> {
    pub regions: &'a [IpaRange],
    pub intids: &'a [u32],
    /// SPIs the VM's virtual GIC implements: INTIDs 32..spi_limit.
    pub spi_limit: u32,
}

/// Maps `dev`, the host device of `pt`, into `s2` for VM `vm_id`, at its host address.
/// Refuses a device that may master DMA unless the config accepts it ([`check_dma`]), and one
/// that overlaps the VM's RAM, its emulated devices or another VM's assignment (VMs are built
/// one after another, and `connect` claims the interrupts of each); the caller has checked that
/// it is none of armhv's own.
pub fn assign(
    vm_id: usize,
    pt: &Passthrough,
    mut dev: AssignedDevice,
    occupied: &Occupied,
    s2: &mut Stage2Table<crate::frames::TablePages>,
) -> Result<AssignedDevice, String> {
    let path = pt.path;
    let why = |what: &str| format!("passthrough {path}: {what}");
    dev.dma = check_dma(dev.compatible, &dev.properties, pt.dma).map_err(|e| why(&e))?;
    let reg = dev.reg;
    if !reg.start.0.is_multiple_of(PAGE_SIZE) || reg.size == 0 {
        return Err(why("its register window is not page aligned, so it cannot be mapped alone"));
    }
    let window = IpaRange::new(reg.start, reg.size.div_ceil(PAGE_SIZE) * PAGE_SIZE);
    if occupied.regions.iter().any(|r| r.overlaps(&window)) {
        return Err(why("it overlaps the VM's RAM or one of its emulated devices"));
    }
    for &(intid, _) in &dev.interrupts {
        if !(32..occupied.spi_limit).contains(&intid) {
            return Err(why(&format!(
                "its interrupt {intid} is beyond the virtual GIC's SPIs (< {})",
                occupied.spi_limit
            )));
        }
        if occupied.intids.contains(&intid) {
            return Err(why(&format!("its interrupt {intid} is used by an emulated device")));
        }
        let owner = OWNER[intid as usize].load(Ordering::Acquire);
        if owner != 0 && owner as usize != vm_id + 1 {
            return Err(why(&format!("its interrupt {intid} is already assigned to another VM")));
        }
    }
    s2.map(window.start, PhysAddr(window.start.0), window.size, S2Perms::RW, MemAttr::Device)
        .map_err(|e| why(&format!("Stage-2 map: {e}")))?;
    Ok(dev)
}

/// Links the VM's assigned interrupts in its virtual GIC and routes them to the physical CPU of
/// vCPU 0 (at creation, and again after a reset rebuilt the virtual GIC): each boot of the VM,
/// at which a device assigned with `dma = "unprotected"` is named in a warning.
pub fn connect(vm: &Vm) {
    for dev in vm.assigned.iter().filter(|d| d.dma == DmaVerdict::Unprotected) {
        log::warn!(
            "{}: passthrough {} has dma = \"unprotected\": it may master DMA and armhv has no \
             IOMMU support, so this VM can read and write all host memory through it (armhv's \
             and every other VM's); isolation from this VM is not guaranteed",
            vm.name,
            dev.node_name
        );
    }
    for dev in &vm.assigned {
        for &(intid, flags) in &dev.interrupts {
            OWNER[intid as usize].store((vm.id + 1) as u8, Ordering::Release);
            let level = is_level(flags);
            vm.vgic.lock().set_hw_link(intid, 0, Some(intid));
            // A guest that reset mid-interrupt never deactivated it.
            gic::deactivate_spi(intid);
            if let Err(e) = gic::route_spi(intid, vm.assigned_route, level) {
                log::error!("{}: interrupt {intid} of {}: {e}", vm.name, dev.node_name);
            }
        }
    }
}

/// A physical interrupt that no armhv driver owns: if it belongs to a device assigned to a VM,
/// make the virtual SPI pending (its deactivation is the guest's), record the vCPUs to wake in
/// `wake` and say so.
pub fn forward(intid: u32, wake: &mut Wakeups) -> bool {
    let Some(owner) = OWNER.get(intid as usize).map(|o| o.load(Ordering::Acquire)) else {
        return false;
    };
    if owner == 0 {
        return false;
    }
    gic::drop_priority(intid);
    match registry::get(owner as usize - 1) {
        Some(vm) if !vm.is_stopped() => {
            let woken = {
                let mut vgic = vm.vgic.lock();
                UNACKED[intid as usize].store(true, Ordering::Relaxed);
                vgic.trigger_edge(intid, 0)
            };
            irqdist::passthrough_irq(&vm, intid);
            wake.interrupts(vm.id, woken);
            stats::bump(&vm.stats.passthrough_irqs);
        }
        // The VM is not running (yet, or any more): nobody will complete it.
        _ => gic::deactivate_spi(intid),
    }
    true
}

/// Device-tree interrupt flags 4 and 8: level high / low.
fn is_level(flags: u32) -> bool {
    flags & 0xc != 0
}

/// At an exit of `vcpu` of `vm` (its list registers synced): every level-sensitive assigned
/// interrupt still pending but not acknowledged whose physical line has dropped is withdrawn,
/// and its physical interrupt, which armhv acknowledged and the guest will now never
/// complete, deactivated. The vCPUs to kick go into `wake`. Only interrupts forwarded since
/// the guest last took them ([`UNACKED`]) are looked at: most exits read no GIC register and
/// take no lock. Out of line: only VMs with assigned devices call it, and inlined it made
/// every VM's exit path longer.
#[inline(never)]
pub fn resample(vm: &Vm, vcpu: usize, wake: &mut Wakeups) {
    for dev in &vm.assigned {
        for &(intid, _) in dev.interrupts.iter().filter(|&&(_, flags)| is_level(flags)) {
            let unacked = &UNACKED[intid as usize];
            if !unacked.load(Ordering::Relaxed) || gic::spi_pending(intid) {
                continue;
            }
            let mut vgic = vm.vgic.lock();
            match vgic.withdraw_pending(intid, vcpu) {
                Some(kick) => {
                    unacked.store(false, Ordering::Relaxed);
                    drop(vgic);
                    gic::deactivate_spi(intid);
                    wake.interrupts(vm.id, kick);
                }
                // Taken by the guest (its EOI deactivates the physical interrupt), or gone;
                // but while another vCPU's list register offers it, that vCPU's exits decide.
                None => {
                    if vgic.irq_state(intid, vcpu).is_none_or(|s| !s.pending || s.active) {
                        unacked.store(false, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// Puts the VM's assigned devices of a kind armhv knows ([`DMA_FREE`]) in a quiet state: their
/// interrupts masked and cleared, the device disabled where it can be. At its stop and reset,
/// once none of its vCPUs runs (so the guest cannot undo it). Another kind keeps whatever the
/// guest left it in; only its interrupts are disabled (at the GIC, [`release`]).
pub fn quiesce(vm: &Vm) {
    for dev in &vm.assigned {
        let Some(kind) = dma_free_kind(dev.compatible) else {
            log::info!(
                "{}: {} left as it is: armhv does not know how to quiesce it",
                vm.name,
                dev.node_name
            );
            continue;
        };
        let mut failed = None;
        for r in kind.quiesce {
            if let Err(e) = device::write32(dev.reg.start.0 + r.offset, r.value) {
                failed = Some(e);
            }
        }
        match failed {
            None => log::info!("{}: {} quiesced ({})", vm.name, dev.node_name, kind.how),
            Some(e) => log::error!("{}: {} not quiesced: {e}", vm.name, dev.node_name),
        }
    }
}

/// The VM stopped: its devices are quiesced, their interrupts go quiet and become free.
pub fn release(vm: &Vm) {
    quiesce(vm);
    for dev in &vm.assigned {
        for &(intid, _) in &dev.interrupts {
            gic::disable_spi(intid);
            gic::deactivate_spi(intid);
            OWNER[intid as usize].store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PL031: &[u8] = b"arm,pl031\0arm,primecell\0";
    const PL061: &[u8] = b"arm,pl061\0arm,primecell\0";
    const FW_CFG: &[u8] = b"qemu,fw-cfg-mmio\0";
    const FLASH: &[u8] = b"cfi-flash\0";
    const RTC_PROPS: &[&str] = &["clock-names", "clocks", "interrupts", "reg", "compatible"];

    /// What QEMU virt's device tree has, with each `dma` setting.
    #[test]
    fn dma_rules() {
        use PassthroughDma::{None as Said, Unprotected, Unstated};
        // Known DMA-free kinds: assigned whatever the config says.
        assert_eq!(check_dma(PL031, RTC_PROPS, Unstated), Ok(DmaVerdict::Free));
        assert_eq!(check_dma(PL061, RTC_PROPS, Said), Ok(DmaVerdict::Free));
        // A DMA master: refused by default and with dma = "none", with why and the opt-in.
        let fw_props = &["dma-coherent", "reg", "compatible"][..];
        for dma in [Unstated, Said] {
            let e = check_dma(FW_CFG, fw_props, dma).unwrap_err();
            assert!(e.contains("can master DMA (its node has `dma-coherent`)"), "{e}");
            assert!(e.contains("no IOMMU") && e.contains("dma = \"unprotected\""), "{e}");
            assert_eq!(e.contains("the config says dma = \"none\""), dma == Said, "{e}");
            // Known as a master even when its node says nothing of DMA.
            let e = check_dma(FW_CFG, &["reg"], dma).unwrap_err();
            assert!(e.contains("qemu,fw-cfg-mmio is a DMA master"), "{e}");
        }
        assert_eq!(check_dma(FW_CFG, fw_props, Unprotected), Ok(DmaVerdict::Unprotected));
        // A kind armhv does not know: refused unless the config vouches or accepts the risk.
        let e = check_dma(FLASH, &["bank-width", "reg"], Unstated).unwrap_err();
        assert!(e.contains("does not know whether a cfi-flash masters DMA"), "{e}");
        assert!(e.contains("dma = \"none\"") && e.contains("arm,pl031"), "{e}");
        assert_eq!(check_dma(FLASH, &["reg"], Said), Ok(DmaVerdict::Vouched));
        assert_eq!(check_dma(FLASH, &["reg"], Unprotected), Ok(DmaVerdict::Unprotected));
        // A DMA-free kind wired to a DMA engine, or behind an IOMMU, is DMA-capable.
        for prop in ["dmas", "iommus", "dma-ranges", "msi-parent", "#dma-cells"] {
            let e = check_dma(b"arm,pl011\0arm,primecell\0", &["reg", prop], Unstated).unwrap_err();
            assert!(e.contains(&format!("its node has `{prop}`")), "{e}");
        }
        // Only the first compatible counts: a kind that merely falls back to a DMA-free one
        // may add a DMA engine.
        let e = check_dma(b"acme,uart-with-dma\0arm,pl011\0", &["reg"], Unstated).unwrap_err();
        assert!(e.contains("acme,uart-with-dma"), "{e}");
        // A node without a compatible is not known either.
        assert!(check_dma(b"", &["reg"], Unstated).is_err());
    }

    /// Every DMA-free kind has a quiesce sequence of aligned writes inside one page.
    #[test]
    fn quiesce_table() {
        for kind in DMA_FREE {
            assert!(!kind.quiesce.is_empty() && !kind.how.is_empty(), "{}", kind.compatible);
            for r in kind.quiesce {
                assert!(r.offset % 4 == 0 && r.offset < 0x1000, "{} {r:?}", kind.compatible);
            }
        }
        assert_eq!(dma_free_kind(PL031).unwrap().quiesce, &[w(0x10, 0), w(0x1c, 1)]);
        assert!(dma_free_kind(FW_CFG).is_none() && dma_free_kind(b"arm,primecell\0").is_none());
    }
}
