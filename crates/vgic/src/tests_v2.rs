//! Host tests of the GICv2 flavour: the guest's view of the distributor through MMIO (as
//! each vCPU sees it), and the list registers through the simulated CPU interface of
//! `tests.rs`, which acts on the `ICH_LR` encoding the model speaks for both versions.

use std::collections::BTreeSet;
use std::vec::Vec;

use crate::lr::{self, LrState};
use crate::regs::v2::{
    SGIR_FILTER_LIST, SGIR_FILTER_OTHERS, SGIR_FILTER_SELF, SGIR_FILTER_SHIFT,
    SGIR_TARGET_LIST_SHIFT,
};
use crate::regs::*;
use crate::tests::{B, Cpu, D, H, Rng, W, check_invariants, set};
use crate::*;

/// A GICv2 VM after Linux's `gic_dist_init`: Group 0 enabled (`GICD_CTLR` = 1).
fn v2(vcpus: usize) -> Vgic {
    let mut g = Vgic::new(VgicConfig { vcpus, spis: 64, version: GicVersion::V2 }).unwrap();
    write(&mut g, 0, GICD_CTLR, W, 1);
    g
}

fn read(g: &mut Vgic, vcpu: usize, off: u64, width: AccessWidth) -> u64 {
    g.frame_read(Frame::Dist, vcpu, off, width).unwrap()
}

fn write(g: &mut Vgic, vcpu: usize, off: u64, width: AccessWidth, value: u64) -> VcpuSet {
    g.frame_write(Frame::Dist, vcpu, off, width, value).unwrap()
}

fn bit_reg(base: u64, intid: u32) -> (u64, u64) {
    (base + u64::from(intid / 32) * 4, 1 << (intid % 32))
}

/// Enables `intid` as `vcpu` sees it (its bank for SGIs and PPIs).
fn enable(g: &mut Vgic, vcpu: usize, intid: u32) -> VcpuSet {
    let (off, bit) = bit_reg(GICD_ISENABLER, intid);
    write(g, vcpu, off, W, bit)
}

fn set_prio(g: &mut Vgic, vcpu: usize, intid: u32, prio: u8) {
    write(g, vcpu, GICD_IPRIORITYR + u64::from(intid), B, u64::from(prio));
}

fn set_targets(g: &mut Vgic, intid: u32, targets: u8) -> VcpuSet {
    write(g, 0, GICD_ITARGETSR + u64::from(intid), B, u64::from(targets))
}

/// An enabled SPI of the given priority and trigger.
fn spi(g: &mut Vgic, intid: u32, prio: u8, edge: bool) {
    set_prio(g, 0, intid, prio);
    if edge {
        let off = GICD_ICFGR + u64::from(intid / 16) * 4;
        let cur = read(g, 0, off, W);
        write(g, 0, off, W, cur | 2 << (2 * (intid % 16)));
    }
    enable(g, 0, intid);
}

/// `GICD_SGIR` written by `sender`.
fn sgir(g: &mut Vgic, sender: usize, sgi: u32, filter: u32, list: u8) -> VcpuSet {
    let value = filter << SGIR_FILTER_SHIFT | u32::from(list) << SGIR_TARGET_LIST_SHIFT | sgi;
    write(g, sender, GICD_SGIR, W, u64::from(value))
}

fn enable_sgi_everywhere(g: &mut Vgic, sgi: u32) {
    for v in 0..g.vcpus() {
        enable(g, v, sgi);
    }
}

/// The sources `GICD_SPENDSGIR` of `vcpu` shows for `sgi`.
fn pending_sources(g: &mut Vgic, vcpu: usize, sgi: u32) -> u8 {
    read(g, vcpu, GICD_SPENDSGIR + u64::from(sgi), B) as u8
}

/// A Group 0 entry.
fn lr_v2(state: u64, prio: u8, intid: u32) -> u64 {
    state | u64::from(prio) << lr::PRIORITY_SHIFT | u64::from(intid)
}

/// A Group 0 entry of an SGI from `source`.
fn sgi_lr(state: u64, prio: u8, sgi: u32, source: u64) -> u64 {
    lr_v2(state, prio, sgi) | source << lr::SGI_SOURCE_SHIFT
}

// --- Configuration and identification ---------------------------------------

#[test]
fn config_and_version() {
    assert_eq!(VgicConfig::default().version, GicVersion::V3);
    assert_eq!(GicVersion::default(), GicVersion::V3);
    let config = |vcpus, spis| VgicConfig { vcpus, spis, version: GicVersion::V2 };
    assert_eq!(Vgic::new(config(9, 64)).err(), Some(ConfigError::VcpuCount(9)));
    assert_eq!(Vgic::new(config(1, 992)).err(), Some(ConfigError::SpiCount(992)));
    assert_eq!(Vgic::new(config(1, 33)).err(), Some(ConfigError::SpiCount(33)));
    let g = Vgic::new(config(8, 960)).unwrap();
    assert_eq!((g.version(), g.intid_limit()), (GicVersion::V2, 992));
    assert_eq!(g.config(), config(8, 960));
    assert_eq!(Vgic::new(VgicConfig::default()).unwrap().version(), GicVersion::V3);
}

/// The GICv2 state costs the interrupts no room: an SPI's target byte fills the padding, the
/// SGI sources live with the vCPU.
#[test]
fn irq_state_stays_small() {
    assert!(core::mem::size_of::<Irq>() <= 24, "{}", core::mem::size_of::<Irq>());
}

#[test]
fn ctlr_typer_iidr_pidr2() {
    let mut g = Vgic::new(VgicConfig { vcpus: 4, spis: 64, version: GicVersion::V2 }).unwrap();
    // No ARE or DS bits: only the two group enables.
    assert_eq!(read(&mut g, 0, GICD_CTLR, W), 0);
    write(&mut g, 0, GICD_CTLR, W, 0xffff_ffff);
    assert_eq!(read(&mut g, 2, GICD_CTLR, W), 0b11);
    // ITLinesNumber = 2 (INTIDs up to 95), CPUNumber = 3, SecurityExtn = 0.
    assert_eq!(read(&mut g, 0, GICD_TYPER, W), 0x62);
    write(&mut g, 0, GICD_TYPER, W, 0);
    assert_eq!(read(&mut g, 0, GICD_TYPER, W), 0x62);
    let mut one = Vgic::new(VgicConfig { vcpus: 1, spis: 960, version: GicVersion::V2 }).unwrap();
    assert_eq!(read(&mut one, 0, GICD_TYPER, W), 30);
    assert_eq!(read(&mut g, 0, GICD_IIDR, W), 0x0200_043b);
    assert_eq!(read(&mut g, 1, v2::PIDR2, W), 0x2b);
    assert_eq!(read(&mut g, 1, v2::PIDR2, W) >> 4 & 0xf, 2, "ArchRev");
    assert_eq!(read(&mut g, 0, v2::ID_BLOCK, W), 0);
    // GICD_SGIR is write-only; NSACR RAZ/WI without the Security Extensions.
    assert_eq!(read(&mut g, 0, GICD_SGIR, W), 0);
    write(&mut g, 0, GICD_NSACR + 8, W, 0xffff_ffff);
    assert_eq!(read(&mut g, 0, GICD_NSACR + 8, W), 0);
    assert_eq!(g.unknown_accesses(), 0);
    // GICv3's registers are not there: the identification registers sit at 0xfd0..0x1000 and
    // everything past 4 KiB is reserved.
    assert_eq!(read(&mut g, 0, PIDR2, W), 0);
    assert_eq!(read(&mut g, 0, GICD_IROUTER + 8 * 40, D), 0);
    assert_eq!(g.unknown_accesses(), 2);
}

#[test]
fn reset_state_is_group0_targeting_vcpu0() {
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, version: GicVersion::V2 }).unwrap();
    for v in 0..2 {
        assert_eq!(read(&mut g, v, GICD_IGROUPR, W), 0, "vCPU {v}");
    }
    assert_eq!(read(&mut g, 0, GICD_IGROUPR + 4, W), 0);
    assert!(!g.irq_state(40, 0).unwrap().group1);
    assert_eq!(read(&mut g, 0, GICD_ITARGETSR + 32, W), 0x0101_0101);
    assert_eq!(g.irq_state(95, 0).unwrap().owner, Some(0));
    assert_eq!(g.routed_vcpu(95), Some(0));
    // SGIs edge (read-only), PPIs and SPIs level.
    assert_eq!(read(&mut g, 1, GICD_ICFGR, W), 0xaaaa_aaaa);
    assert_eq!(read(&mut g, 1, GICD_ICFGR + 4, W), 0);
}

// --- Banking ----------------------------------------------------------------

#[test]
fn private_registers_are_banked_per_accessing_vcpu() {
    let mut g = v2(2);
    for (set_off, clear_off) in [
        (GICD_ISENABLER, GICD_ICENABLER),
        (GICD_ISPENDR, GICD_ICPENDR),
        (GICD_ISACTIVER, GICD_ICACTIVER),
    ] {
        // PPI bits only: the SGI bits of the pending registers are GICD_[CS]PENDSGIR's.
        write(&mut g, 1, set_off, W, 0x0801_0000);
        assert_eq!(read(&mut g, 1, set_off, W), 0x0801_0000, "{set_off:#x}");
        assert_eq!(read(&mut g, 1, clear_off, W), 0x0801_0000, "{clear_off:#x}");
        assert_eq!(read(&mut g, 0, set_off, W), 0, "{set_off:#x}: vCPU 0's bank untouched");
        write(&mut g, 1, clear_off, W, 0x0001_0000);
        assert_eq!(read(&mut g, 1, set_off, W), 0x0800_0000, "{set_off:#x}");
    }
    // SPIs are shared: what vCPU 1 writes, vCPU 0 reads.
    write(&mut g, 1, GICD_ISENABLER + 4, W, 0x1);
    assert_eq!(read(&mut g, 0, GICD_ISENABLER + 4, W), 0x1);
    // IGROUPR0 and IPRIORITYR0..7 are banked too.
    write(&mut g, 1, GICD_IGROUPR, W, 0xffff_ffff);
    assert_eq!(read(&mut g, 1, GICD_IGROUPR, W), 0xffff_ffff);
    assert_eq!(read(&mut g, 0, GICD_IGROUPR, W), 0);
    write(&mut g, 1, GICD_IPRIORITYR + 27, B, 0xa7);
    assert_eq!(read(&mut g, 1, GICD_IPRIORITYR + 24, W), 0xa000_0000);
    assert_eq!(read(&mut g, 0, GICD_IPRIORITYR + 24, W), 0);
    assert_eq!(
        (g.irq_state(27, 1).unwrap().priority, g.irq_state(27, 0).unwrap().priority),
        (0xa0, 0)
    );
    // ICFGR0 (SGIs) read-only edge; ICFGR1 (PPIs) configurable per vCPU, as in the GICv3 model.
    write(&mut g, 1, GICD_ICFGR, W, 0);
    assert_eq!(read(&mut g, 1, GICD_ICFGR, W), 0xaaaa_aaaa);
    write(&mut g, 1, GICD_ICFGR + 4, W, 2 << 26);
    assert!(g.irq_state(29, 1).unwrap().edge && !g.irq_state(29, 0).unwrap().edge);
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn a_vcpu_that_does_not_exist_sees_no_bank() {
    let mut g = v2(2);
    assert_eq!(write(&mut g, 5, GICD_ISENABLER, W, 0xffff_ffff), VcpuSet::EMPTY);
    assert_eq!(read(&mut g, 5, GICD_ISENABLER, W), 0);
    assert_eq!(read(&mut g, 5, GICD_ITARGETSR, W), 0);
    assert_eq!(sgir(&mut g, 5, 1, SGIR_FILTER_OTHERS, 0), VcpuSet::EMPTY);
    // The SPIs are everyone's.
    write(&mut g, 5, GICD_ISENABLER + 4, W, 0x2);
    assert!(g.irq_state(33, 0).unwrap().enabled);
}

// --- Routing ------------------------------------------------------------------

#[test]
fn itargetsr_private_bytes_read_the_accessing_vcpu() {
    let mut g = v2(4);
    for v in 0..4 {
        let own = 1u64 << v;
        for n in 0..8 {
            let off = GICD_ITARGETSR + 4 * n;
            assert_eq!(read(&mut g, v, off, W), own * 0x0101_0101, "vCPU {v} ITARGETSR{n}");
            assert_eq!(read(&mut g, v, off + 3, B), own, "vCPU {v} ITARGETSR{n}");
        }
        // Read-only.
        write(&mut g, v, GICD_ITARGETSR + 27, B, 0xff);
        assert_eq!(read(&mut g, v, GICD_ITARGETSR + 27, B), own);
    }
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn itargetsr_routes_spis_to_the_lowest_named_vcpu() {
    let mut g = v2(4);
    let mut cpus: Vec<Cpu> = (0..4).map(Cpu::new).collect();
    spi(&mut g, 80, 0x80, false);
    assert_eq!(set_targets(&mut g, 80, 0b0100), VcpuSet::EMPTY);
    assert_eq!(g.routed_vcpu(80), Some(2));
    assert_eq!(g.set_level(80, 0, true), VcpuSet::single(2));
    for cpu in &mut cpus {
        cpu.enter(&mut g);
    }
    assert_eq!(cpus.iter().map(|c| c.used).collect::<Vec<_>>(), [0, 0, 1, 0]);
    assert_eq!(cpus[2].lrs[0], lr_v2(lr::PENDING | lr::EOI, 0x80, 80));
    // Several vCPUs named: the lowest-numbered one takes it. Word access, four SPIs at once;
    // bits of vCPUs that do not exist are dropped.
    write(&mut g, 0, GICD_ITARGETSR + 80, W, 0xf0f0_0c06);
    assert_eq!(read(&mut g, 3, GICD_ITARGETSR + 80, W), 0x0000_0c06);
    assert_eq!((g.routed_vcpu(81), g.routed_vcpu(82), g.routed_vcpu(83)), (Some(2), None, None));
    // Still in vCPU 2's list register; its next flush lets go and names vCPU 1.
    assert_eq!(g.irq_state(80, 0).unwrap().owner, Some(2));
    cpus[2].exit(&mut g);
    let r = cpus[2].enter(&mut g);
    assert_eq!((r.used, r.kick), (0, VcpuSet::single(1)));
    cpus[1].enter(&mut g);
    assert_eq!(cpus[1].intids(), [80]);
}

#[test]
fn spi_targeting_nobody_stays_pending_until_routed() {
    let mut g = v2(4);
    spi(&mut g, 83, 0x80, true);
    // Only vCPUs that do not exist: nobody.
    set_targets(&mut g, 83, 0xf0);
    assert_eq!(read(&mut g, 0, GICD_ITARGETSR + 83, B), 0);
    assert_eq!(g.irq_state(83, 0).unwrap().owner, None);
    assert_eq!(g.trigger_edge(83, 0), VcpuSet::EMPTY);
    assert!(g.irq_state(83, 0).unwrap().pending);
    assert!((0..4).all(|v| !g.pending_for(v)));
    assert_eq!(set_targets(&mut g, 83, 0b1000), VcpuSet::single(3));
    let mut cpu = Cpu::new(3);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_v2(lr::PENDING, 0x80, 83));
}

/// The interrupt distributor's override works on ITARGETSR routing as on IROUTER's.
#[test]
fn redirect_overrides_itargetsr_until_lifted() {
    let mut g = v2(4);
    spi(&mut g, 80, 0x80, false);
    set_targets(&mut g, 80, 0b0001);
    assert_eq!(g.redirect_spi(80, Some(3)), Some(VcpuSet::EMPTY));
    assert_eq!(g.set_level(80, 0, true), VcpuSet::single(3));
    assert_eq!((g.routed_vcpu(80), read(&mut g, 0, GICD_ITARGETSR + 80, B)), (Some(0), 1));
    assert_eq!(g.redirect_spi(80, None), Some(VcpuSet::single(0)));
    assert_eq!(g.irq_state(80, 0).unwrap().owner, Some(0));
}

/// With one vCPU every interrupt goes to it, as on a uniprocessor GIC: the SPI bytes ignore
/// writes (a guest may write anything there, even 0).
#[test]
fn uniprocessor_itargetsr_ignores_writes() {
    let mut g = v2(1);
    spi(&mut g, 40, 0x80, true);
    set_targets(&mut g, 40, 0);
    write(&mut g, 0, GICD_ITARGETSR + 44, W, 0);
    assert_eq!(read(&mut g, 0, GICD_ITARGETSR + 40, B), 1);
    assert_eq!(read(&mut g, 0, GICD_ITARGETSR + 44, W), 0x0101_0101);
    assert_eq!(g.trigger_edge(40, 0), VcpuSet::single(0));
}

// --- SGIs ---------------------------------------------------------------------

#[test]
fn sgir_target_list_filters() {
    let mut g = v2(4);
    enable_sgi_everywhere(&mut g, 3);
    let pending = |g: &mut Vgic| (0..4).map(|v| pending_sources(g, v, 3)).collect::<Vec<_>>();
    // TargetListFilter 0: the list; bits of vCPUs that do not exist are ignored.
    assert_eq!(sgir(&mut g, 0, 3, SGIR_FILTER_LIST, 0b1111_0110), set(&[1, 2]));
    assert_eq!(pending(&mut g), [0, 0b0001, 0b0001, 0]);
    // 1: everyone but the sender.
    // (vCPU 1 has SGI 3 pending already: nothing new to deliver there.)
    assert_eq!(sgir(&mut g, 2, 3, SGIR_FILTER_OTHERS, 0), set(&[0, 3]));
    assert_eq!(pending(&mut g), [0b0100, 0b0101, 0b0001, 0b0100]);
    // 2: the sender only, whatever the list says.
    assert_eq!(sgir(&mut g, 2, 3, SGIR_FILTER_SELF, 0b1000), VcpuSet::EMPTY);
    assert_eq!(pending(&mut g), [0b0100, 0b0101, 0b0101, 0b0100]);
    // 3: reserved, nobody.
    assert_eq!(sgir(&mut g, 3, 3, 3, 0xff), VcpuSet::EMPTY);
    assert_eq!(pending(&mut g), [0b0100, 0b0101, 0b0101, 0b0100]);
    // An empty list: nobody.
    assert_eq!(sgir(&mut g, 0, 3, SGIR_FILTER_LIST, 0), VcpuSet::EMPTY);
    // ISPENDR0 shows "some source pending".
    for v in 0..4 {
        assert_eq!(read(&mut g, v, GICD_ISPENDR, W), 1 << 3, "vCPU {v}");
    }
    // Bits [14:4] and NSATT do not matter; SGIINTID is [3:0].
    write(&mut g, 3, GICD_SGIR, W, 1 << 15 | 0x7ff0 | 1 << 16 | 5);
    assert_eq!(pending_sources(&mut g, 0, 5), 0b1000);
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn sgi_list_register_carries_the_source() {
    let mut g = v2(4);
    enable_sgi_everywhere(&mut g, 1);
    set_prio(&mut g, 0, 1, 0xa0);
    assert_eq!(sgir(&mut g, 2, 1, SGIR_FILTER_LIST, 0b0001), VcpuSet::single(0));
    let mut cpu = Cpu::new(0);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], sgi_lr(lr::PENDING, 0xa0, 1, 2));
    // As a GICv2 host writes it: CPUID = 2, so the guest's GICV_IAR reads 2 << 10 | 1.
    let gich = lr::v2::to_gich(cpu.lrs[0]);
    assert_eq!((gich & 0x3ff, gich >> 10 & 7), (1, 2));
    assert_eq!(lr::v2::from_gich(gich), cpu.lrs[0]);
    // Acknowledged: the active entry keeps naming the source (GICV_EOIR names it too).
    cpu.ack(1);
    cpu.exit(&mut g);
    assert!(g.irq_state(1, 0).unwrap().active);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], sgi_lr(lr::ACTIVE, 0xa0, 1, 2));
    cpu.eoi(1);
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
    assert_eq!(pending_sources(&mut g, 0, 1), 0);
}

/// Two vCPUs send the same SGI to a third: two requests, two deliveries, each naming its
/// source, the second after the guest has finished the first (the `EOI` maintenance brings
/// the vCPU out for it).
#[test]
fn two_sources_of_one_sgi_are_both_delivered() {
    let mut g = v2(3);
    enable_sgi_everywhere(&mut g, 4);
    let mut rx = Cpu::new(0);
    assert_eq!(sgir(&mut g, 2, 4, SGIR_FILTER_LIST, 0b001), VcpuSet::single(0));
    // The second request finds the SGI pending already: nothing new to deliver yet.
    assert_eq!(sgir(&mut g, 1, 4, SGIR_FILTER_LIST, 0b001), VcpuSet::EMPTY);
    assert_eq!(pending_sources(&mut g, 0, 4), 0b110);
    let r = rx.enter(&mut g);
    assert_eq!((r.used, r.more_pending), (1, false));
    // The lowest source first; EOI because another waits.
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING | lr::EOI, 0, 4, 1));
    assert_eq!(pending_sources(&mut g, 0, 4), 0b110, "both still pending");
    rx.handle(4);
    rx.exit(&mut g);
    assert_eq!(pending_sources(&mut g, 0, 4), 0b100);
    assert!(g.pending_for(0));
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING, 0, 4, 2));
    rx.handle(4);
    rx.exit(&mut g);
    assert_eq!(rx.enter(&mut g).used, 0);
    assert_eq!(pending_sources(&mut g, 0, 4), 0);
    assert!(!g.irq_state(4, 0).unwrap().pending);
    check_invariants(&g);
}

/// A second source's request while the first is being handled waits behind it (the entry has
/// one CPUID): active only, with EOI; the deactivation brings the next in. The same source
/// asking again is pending behind its own active request, in the same entry.
#[test]
fn sgi_requests_while_active() {
    let mut g = v2(3);
    enable_sgi_everywhere(&mut g, 2);
    let mut rx = Cpu::new(0);
    sgir(&mut g, 1, 2, SGIR_FILTER_LIST, 0b001);
    rx.enter(&mut g);
    rx.ack(2);
    // Another source: the vCPU is kicked (the entry changes: it needs EOI now).
    assert_eq!(sgir(&mut g, 2, 2, SGIR_FILTER_LIST, 0b001), VcpuSet::single(0));
    rx.exit(&mut g);
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::ACTIVE | lr::EOI, 0, 2, 1));
    // The first source again: pending behind its active request.
    assert_eq!(sgir(&mut g, 1, 2, SGIR_FILTER_LIST, 0b001), VcpuSet::single(0));
    rx.exit(&mut g);
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING | lr::ACTIVE | lr::EOI, 0, 2, 1));
    rx.eoi(2); // pending+active -> pending, in hardware
    rx.handle(2);
    rx.exit(&mut g);
    // Source 2's request follows.
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING, 0, 2, 2));
    rx.handle(2);
    rx.exit(&mut g);
    assert_eq!(rx.enter(&mut g).used, 0);
    check_invariants(&g);
}

/// Requests of one source merge while pending, in the distributor or in a list register;
/// one the guest acknowledged before the model saw it is not merged away.
#[test]
fn sgi_requests_of_one_source_merge_until_acknowledged() {
    let mut g = v2(2);
    enable_sgi_everywhere(&mut g, 0);
    let mut rx = Cpu::new(1);
    sgir(&mut g, 0, 0, SGIR_FILTER_LIST, 0b10);
    assert_eq!(sgir(&mut g, 0, 0, SGIR_FILTER_LIST, 0b10), VcpuSet::EMPTY);
    rx.enter(&mut g);
    // In the list register, not yet taken: the vCPU is kicked (it may have taken it unseen).
    assert_eq!(sgir(&mut g, 0, 0, SGIR_FILTER_LIST, 0b10), VcpuSet::single(1));
    rx.exit(&mut g);
    let r = rx.enter(&mut g);
    assert_eq!((r.used, rx.lrs[0]), (1, sgi_lr(lr::PENDING, 0, 0, 0)));
    assert_eq!(pending_sources(&mut g, 1, 0), 0b01);
    rx.handle(0);
    rx.exit(&mut g);
    assert_eq!(rx.enter(&mut g).used, 0, "one delivery for the merged requests");
    // Taken in hardware before the next request reaches the model: delivered again.
    sgir(&mut g, 0, 0, SGIR_FILTER_LIST, 0b10);
    rx.enter(&mut g);
    rx.ack(0);
    assert_eq!(sgir(&mut g, 0, 0, SGIR_FILTER_LIST, 0b10), VcpuSet::single(1));
    rx.exit(&mut g);
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING | lr::ACTIVE, 0, 0, 0));
    rx.eoi(0);
    rx.handle(0);
    rx.exit(&mut g);
    assert_eq!(rx.enter(&mut g).used, 0);
}

#[test]
fn spendsgir_and_cpendsgir() {
    let mut g = v2(4);
    enable_sgi_everywhere(&mut g, 6);
    let mut rx = Cpu::new(2);
    // vCPU 2 sets SGI 6 pending from vCPUs 0 and 3 in its own bank (bits of vCPUs that do
    // not exist are dropped). Word access: SGIs 4..7.
    assert_eq!(write(&mut g, 2, GICD_SPENDSGIR + 4, W, 0xf9 << 16), VcpuSet::single(2));
    assert_eq!(read(&mut g, 2, GICD_SPENDSGIR + 4, W), 0x09 << 16);
    assert_eq!(read(&mut g, 2, GICD_CPENDSGIR + 4, W), 0x09 << 16);
    assert_eq!(read(&mut g, 0, GICD_SPENDSGIR + 4, W), 0, "vCPU 0's bank");
    assert_eq!(read(&mut g, 2, GICD_ISPENDR, W), 1 << 6);
    // ISPENDR0 / ICPENDR0 do nothing to SGIs.
    write(&mut g, 2, GICD_ICPENDR, W, 0xffff);
    write(&mut g, 2, GICD_ISPENDR, W, 1 << 7);
    assert_eq!(read(&mut g, 2, GICD_ISPENDR, W), 1 << 6);
    // Source 0 goes into the list register; clearing it withdraws the entry, and source 3
    // takes its place.
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING | lr::EOI, 0, 6, 0));
    assert_eq!(write(&mut g, 2, GICD_CPENDSGIR + 6, B, 0b0001), VcpuSet::single(2));
    assert_eq!(pending_sources(&mut g, 2, 6), 0b1000);
    rx.exit(&mut g);
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING, 0, 6, 3));
    // Clearing the last one: nothing pending.
    write(&mut g, 2, GICD_CPENDSGIR + 6, B, 0xff);
    assert!(!g.irq_state(6, 2).unwrap().pending);
    rx.exit(&mut g);
    assert_eq!(rx.enter(&mut g).used, 0);
    // Clearing a waiting source of an SGI in a list register drops the EOI it needed.
    write(&mut g, 2, GICD_SPENDSGIR + 6, B, 0b0011);
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING | lr::EOI, 0, 6, 0));
    assert_eq!(write(&mut g, 2, GICD_CPENDSGIR + 6, B, 0b0010), VcpuSet::single(2));
    rx.exit(&mut g);
    rx.enter(&mut g);
    assert_eq!(rx.lrs[0], sgi_lr(lr::PENDING, 0, 6, 0));
    check_invariants(&g);
    assert_eq!(g.unknown_accesses(), 0);
}

/// An SGI made active through ISACTIVER0 has no acknowledged source: the writer stands in.
#[test]
fn isactiver_sgi_takes_the_writer_as_source() {
    let mut g = v2(2);
    let mut cpu = Cpu::new(1);
    write(&mut g, 1, GICD_ISACTIVER, W, 1 << 9);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], sgi_lr(lr::ACTIVE, 0, 9, 1));
    cpu.eoi(9);
    cpu.exit(&mut g);
    assert!(!g.irq_state(9, 1).unwrap().active);
}

/// GICv2 SGIs come with a source or not at all: the GICv3 ways of raising them do nothing, and
/// nor does a hardware link (PhysicalID would have to hold the source).
#[test]
fn gicv3_sgi_paths_are_ignored() {
    let mut g = v2(2);
    enable_sgi_everywhere(&mut g, 1);
    assert_eq!(g.send_sgi(0, 1 << SGI1R_INTID_SHIFT | 0b11), VcpuSet::EMPTY);
    assert_eq!(g.trigger_edge(1, 1), VcpuSet::EMPTY);
    assert_eq!(g.set_level(1, 1, true), VcpuSet::EMPTY);
    assert_eq!(g.set_hw_link(1, 1, Some(27)), None);
    assert!(!g.irq_state(1, 0).unwrap().pending && !g.irq_state(1, 1).unwrap().pending);
    // PPIs still take the hypervisor's lines and links.
    enable(&mut g, 1, 27);
    assert_eq!(g.set_hw_link(27, 1, Some(27)), Some(VcpuSet::EMPTY));
    assert_eq!(g.set_level(27, 1, true), VcpuSet::single(1));
    let mut cpu = Cpu::new(1);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_v2(lr::PENDING | lr::HW, 0, 27) | 27 << lr::PINTID_SHIFT);
    assert_eq!(lr::v2::from_gich(lr::v2::to_gich(cpu.lrs[0])), cpu.lrs[0]);
}

// --- List registers -------------------------------------------------------------

#[test]
fn priority_order_into_four_lrs() {
    let mut g = v2(1);
    let mut cpu = Cpu::new(0);
    let prios = [(40, 0x80), (41, 0x47), (42, 0xa0), (43, 0x40), (44, 0x20), (45, 0xff)];
    for (intid, prio) in prios {
        spi(&mut g, intid, prio, true);
    }
    for (intid, _) in prios.iter().rev() {
        assert_eq!(g.trigger_edge(*intid, 0), VcpuSet::single(0));
    }
    let r = cpu.enter(&mut g);
    assert_eq!((r.used, r.more_pending), (4, true));
    // Priorities keep 5 bits, as GICH_LR.Priority does: 0x47 is 0x40, ties go to the lower
    // INTID.
    assert_eq!(
        cpu.lrs,
        [
            lr_v2(lr::PENDING, 0x20, 44),
            lr_v2(lr::PENDING, 0x40, 41),
            lr_v2(lr::PENDING, 0x40, 43),
            lr_v2(lr::PENDING, 0x80, 40),
        ]
    );
    for v in cpu.lrs {
        assert_eq!(lr::v2::from_gich(lr::v2::to_gich(v)), v);
    }
    for intid in [44, 41, 43, 40] {
        cpu.handle(intid);
    }
    cpu.exit(&mut g);
    let r = cpu.enter(&mut g);
    assert_eq!((r.used, r.more_pending), (2, false));
    assert_eq!(cpu.intids(), [42, 45]);
    assert_eq!(cpu.lrs[1], lr_v2(lr::PENDING, 0xf8, 45));
}

#[test]
fn level_gets_eoi_and_repends_while_asserted() {
    let mut g = v2(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 50, 0x80, false);
    spi(&mut g, 51, 0x80, true);
    g.set_level(50, 0, true);
    g.trigger_edge(51, 0);
    cpu.enter(&mut g);
    // Level: EOI; edge: none.
    assert_eq!(
        cpu.lrs[..2],
        [lr_v2(lr::PENDING | lr::EOI, 0x80, 50), lr_v2(lr::PENDING, 0x80, 51)]
    );
    cpu.handle(50); // -> invalid with EOI: maintenance exit
    cpu.handle(51);
    cpu.exit(&mut g);
    // The line is still high: pending again.
    assert!(g.irq_state(50, 0).unwrap().pending);
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [50]);
    cpu.ack(50);
    cpu.exit(&mut g);
    g.set_level(50, 0, false);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_v2(lr::ACTIVE, 0x80, 50));
    cpu.eoi(50);
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
}

#[test]
fn active_interrupts_are_never_evicted() {
    let mut g = v2(1);
    let mut cpu = Cpu::new(0);
    for intid in 40..44 {
        spi(&mut g, intid, 0x80, true);
        g.trigger_edge(intid, 0);
    }
    cpu.enter(&mut g);
    for intid in 40..44 {
        cpu.ack(intid);
    }
    cpu.exit(&mut g);
    for intid in [44, 45] {
        spi(&mut g, intid, 0x10, true);
        assert_eq!(g.trigger_edge(intid, 0), VcpuSet::single(0));
    }
    let r = cpu.enter(&mut g);
    assert_eq!((r.used, r.more_pending), (4, true));
    assert_eq!(cpu.lrs.map(LrState::of), [LrState::Active; 4]);
    cpu.eoi(42);
    cpu.exit(&mut g);
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [40, 41, 43, 44]);
}

#[test]
fn group_enables_gate_delivery() {
    let mut g = v2(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 33, 0x80, true);
    write(&mut g, 0, GICD_CTLR, W, 0b10); // Group 1 only: the Group 0 SPI waits
    assert_eq!(g.trigger_edge(33, 0), VcpuSet::EMPTY);
    assert_eq!(cpu.enter(&mut g).used, 0);
    assert_eq!(write(&mut g, 0, GICD_CTLR, W, 0b01), VcpuSet::single(0));
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_v2(lr::PENDING, 0x80, 33), "Group 0: Grp1 clear");
}

// --- Access rules -----------------------------------------------------------------

#[test]
fn bad_widths_alignment_and_frames() {
    let mut g = v2(2);
    for (off, width) in [
        (GICD_CTLR, B),
        (GICD_CTLR, H),
        (GICD_CTLR, D),
        (GICD_TYPER, B),
        (GICD_ISENABLER, B),
        (GICD_ICFGR, H),
        (GICD_IPRIORITYR + 32, H),
        (GICD_ITARGETSR + 32, H),
        (GICD_SGIR, B),
        (GICD_SPENDSGIR, H),
        (v2::PIDR2, B),
    ] {
        assert_eq!(g.frame_read(Frame::Dist, 0, off, width), Err(MmioError::BadWidth), "{off:#x}");
        assert_eq!(
            g.frame_write(Frame::Dist, 0, off, width, 0),
            Err(MmioError::BadWidth),
            "{off:#x}"
        );
    }
    for (off, width) in
        [(GICD_ITARGETSR + 33, B), (GICD_IPRIORITYR + 33, B), (GICD_CPENDSGIR + 3, B)]
    {
        assert!(g.frame_read(Frame::Dist, 0, off, width).is_ok(), "{off:#x}");
    }
    assert_eq!(g.frame_read(Frame::Dist, 0, GICD_CTLR + 2, W), Err(MmioError::Unaligned));
    assert_eq!(g.frame_read(Frame::Dist, 0, GICD_SGIR + 2, W), Err(MmioError::Unaligned));
    assert_eq!(g.unknown_accesses(), 0);
    // Past the 4 KiB of registers, inside the 64 KiB window: reserved.
    assert_eq!(g.frame_read(Frame::Dist, 0, 0x1000, W), Ok(0));
    assert_eq!(g.frame_write(Frame::Dist, 1, 0xfffc, W, 1), Ok(VcpuSet::EMPTY));
    assert_eq!(g.frame_read(Frame::Dist, 0, 0xd00, W), Ok(0)); // IMPLEMENTATION DEFINED
    assert_eq!(g.unknown_accesses(), 3);
    assert_eq!(g.frame_read(Frame::Dist, 0, GICD_SIZE, W), Err(MmioError::Unmapped));
    // No redistributors, and no GICv3 entry points.
    assert_eq!(g.frame_read(Frame::Redist, 0, 0, W), Err(MmioError::Unmapped));
    assert_eq!(g.frame_write(Frame::Redist, 0, 0, W, 0), Err(MmioError::Unmapped));
    assert_eq!(g.dist_read(GICD_CTLR, W), Err(MmioError::Unmapped));
    assert_eq!(g.dist_write(GICD_CTLR, W, 0), Err(MmioError::Unmapped));
    assert_eq!(g.redist_read(GICR_WAKER, W), Err(MmioError::Unmapped));
}

/// A GICv3 model ignores the accessing vCPU: its distributor has no banked registers.
#[test]
fn gicv3_frames_ignore_the_accessing_vcpu() {
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, ..Default::default() }).unwrap();
    g.frame_write(Frame::Dist, 1, GICD_ISENABLER + 4, W, 1).unwrap();
    assert_eq!(g.frame_read(Frame::Dist, 0, GICD_ISENABLER + 4, W), Ok(1));
    assert_eq!(g.frame_read(Frame::Dist, 1, GICD_ISENABLER, W), Ok(0), "RAZ/WI under ARE");
    assert_eq!(g.frame_read(Frame::Redist, 1, GICR_WAKER, W), Ok(0b110));
}

/// What Linux's irq-gic.c does at boot (`gic_dist_init`, `gic_cpu_init`), then an IPI and a
/// UART interrupt.
#[test]
fn linux_style_init_sequence() {
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, version: GicVersion::V2 }).unwrap();
    write(&mut g, 0, GICD_CTLR, W, 0);
    let lines = (read(&mut g, 0, GICD_TYPER, W) & 0x1f) + 1;
    assert_eq!((read(&mut g, 0, GICD_TYPER, W) >> 5 & 7) + 1, 2, "CPUs");
    // gic_get_cpumask: the CPU's own bit, from ITARGETSR0..7.
    let mut mask = 0;
    for i in 0..8 {
        mask |= read(&mut g, 0, GICD_ITARGETSR + 4 * i, W);
    }
    let cpumask = (mask | mask >> 8 | mask >> 16 | mask >> 24) & 0xff;
    assert_eq!(cpumask, 1);
    for i in 8..lines * 8 {
        write(&mut g, 0, GICD_ITARGETSR + 4 * i, W, cpumask * 0x0101_0101);
    }
    for i in 2..lines * 2 {
        write(&mut g, 0, GICD_ICFGR + 4 * i, W, 0);
    }
    for i in 8..lines * 8 {
        write(&mut g, 0, GICD_IPRIORITYR + 4 * i, W, 0xa0a0_a0a0);
    }
    for i in 1..lines {
        write(&mut g, 0, GICD_ICACTIVER + 4 * i, W, 0xffff_ffff);
        write(&mut g, 0, GICD_ICENABLER + 4 * i, W, 0xffff_ffff);
    }
    write(&mut g, 0, GICD_CTLR, W, 1);
    for v in 0..2 {
        write(&mut g, v, GICD_ICACTIVER, W, 0xffff_ffff);
        write(&mut g, v, GICD_ICENABLER, W, 0xffff_0000);
        write(&mut g, v, GICD_ISENABLER, W, 0x0000_ffff);
        for i in 0..8 {
            write(&mut g, v, GICD_IPRIORITYR + 4 * i, W, 0xa0a0_a0a0);
        }
    }
    assert_eq!(g.unknown_accesses(), 0);
    // An IPI from CPU 0 to CPU 1 (smp_cross_call), and the UART (SPI 1, INTID 33).
    enable(&mut g, 0, 33);
    assert_eq!(sgir(&mut g, 0, 1, SGIR_FILTER_LIST, 0b10), VcpuSet::single(1));
    assert_eq!(g.set_level(33, 0, true), VcpuSet::single(0));
    let (mut cpu0, mut cpu1) = (Cpu::new(0), Cpu::new(1));
    cpu0.enter(&mut g);
    cpu1.enter(&mut g);
    assert_eq!(cpu0.lrs[0], lr_v2(lr::PENDING | lr::EOI, 0xa0, 33));
    assert_eq!(cpu1.lrs[0], sgi_lr(lr::PENDING, 0xa0, 1, 0));
}

// --- Soak -------------------------------------------------------------------------

/// The bookkeeping of the SGI sources: a GICv2 SGI's latch is up exactly while a source waits
/// in the distributor, and every list-register value survives the trip through `GICH_LR`.
fn check_v2_invariants(g: &Vgic) {
    check_invariants(g);
    for v in 0..g.vcpus() {
        for sgi in 0..SGI_COUNT as usize {
            let irq = &g.irqs[v * PRIVATE_COUNT as usize + sgi];
            assert_eq!(irq.latch, g.cpus[v].sgi_sources[sgi] != 0, "vCPU {v} SGI {sgi}");
        }
        for &value in &g.cpus[v].lr_value[..g.cpus[v].used] {
            assert_eq!(lr::v2::from_gich(lr::v2::to_gich(value)), value, "{value:#x}");
        }
    }
}

/// Random SGIs from every vCPU to every vCPU, edges, and guests acknowledging and completing
/// in hardware, on three vCPUs. Checks after every flush that the cached and incremental
/// flushes give what a full choice would (up to which waiting source an SGI entry names), and
/// at the end that every request made after its source's last acknowledge of that SGI at that
/// target was acknowledged again, naming that source: no SGI request is lost.
#[test]
fn soak_no_lost_sgi_requests() {
    const VCPUS: usize = 3;
    const SPIS: [u32; 3] = [32, 33, 34];
    let mut incremental_flushes = 0;
    for seed in 1..=60u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut g = v2(VCPUS);
        let mut cpus: Vec<Cpu> = (0..VCPUS).map(Cpu::new).collect();
        for v in 0..VCPUS {
            for sgi in 0..3 {
                enable(&mut g, v, sgi);
                set_prio(&mut g, v, sgi, (rng.below(32) as u8) << 3);
            }
        }
        for &intid in &SPIS {
            spi(&mut g, intid, (rng.below(32) as u8) << 3, true);
            set_targets(&mut g, intid, 1 << rng.below(VCPUS as u64));
        }
        // (target, INTID, source) owed an acknowledge; SPIs have source 0 and target 0.
        let mut owed: BTreeSet<(usize, u32, usize)> = BTreeSet::new();
        for _ in 0..400 {
            let v = rng.below(VCPUS as u64) as usize;
            match rng.below(9) {
                0 | 1 => {
                    let sgi = rng.below(3) as u32;
                    let list = rng.below(8) as u8;
                    sgir(&mut g, v, sgi, SGIR_FILTER_LIST, list);
                    for t in (0..VCPUS).filter(|t| list & 1 << t != 0) {
                        owed.insert((t, sgi, v));
                    }
                }
                2 => {
                    let sgi = rng.below(3) as u32;
                    sgir(&mut g, v, sgi, SGIR_FILTER_OTHERS, 0);
                    for t in (0..VCPUS).filter(|&t| t != v) {
                        owed.insert((t, sgi, v));
                    }
                }
                3 => {
                    let intid = SPIS[rng.below(3) as usize];
                    g.trigger_edge(intid, 0);
                    owed.insert((0, intid, 0));
                }
                4 => {
                    // The guest acknowledges its best pending entry.
                    let cpu = &mut cpus[v];
                    let best = (0..cpu.used)
                        .filter(|&i| LrState::of(cpu.lrs[i]) == LrState::Pending)
                        .min_by_key(|&i| (lr::priority(cpu.lrs[i]), i));
                    if let Some(i) = best {
                        let value = cpu.lrs[i];
                        let intid = lr::vintid(value);
                        cpu.ack(intid);
                        let target = if intid < 32 { v } else { 0 };
                        owed.remove(&(target, intid, lr::sgi_source(value)));
                    }
                }
                5 => {
                    let cpu = &mut cpus[v];
                    if let Some(i) = (0..cpu.used).find(|&i| LrState::of(cpu.lrs[i]).is_active()) {
                        let intid = lr::vintid(cpu.lrs[i]);
                        cpu.eoi(intid);
                    }
                }
                6 => {
                    cpus[v].exit(&mut g);
                }
                _ => {
                    cpus[v].exit(&mut g);
                    let c = &g.cpus[v];
                    let cached = !c.dirty;
                    let incremental = c.dirty && !c.rechoose && !c.more_pending && c.capacity == 4;
                    let mut full = g.clone();
                    full.cpus[v].dirty = true;
                    full.cpus[v].rechoose = true;
                    let mut lrs = [0; 4];
                    let r_full = full.flush_lrs(v, &mut lrs);
                    let r = cpus[v].enter(&mut g);
                    if cached || incremental {
                        let entries = |lrs: &[u64]| {
                            let source = lr::SGI_SOURCE_MASK << lr::SGI_SOURCE_SHIFT;
                            let mut e: Vec<u64> =
                                lrs.iter().filter(|&&x| x != 0).map(|&x| x & !source).collect();
                            e.sort_unstable();
                            e
                        };
                        assert_eq!(entries(&cpus[v].lrs), entries(&lrs), "seed {seed}: fast path");
                        assert_eq!(r.more_pending, r_full.more_pending, "seed {seed}");
                        incremental_flushes += usize::from(incremental);
                    }
                }
            }
            check_v2_invariants(&g);
        }
        // Quiesce: the guests take and complete whatever they are given.
        for _ in 0..40 {
            for cpu in &mut cpus {
                cpu.exit(&mut g);
                cpu.enter(&mut g);
                for i in 0..cpu.used {
                    let value = cpu.lrs[i];
                    let intid = lr::vintid(value);
                    match LrState::of(value) {
                        LrState::Pending => {
                            cpu.handle(intid);
                            let target = if intid < 32 { cpu.vcpu } else { 0 };
                            owed.remove(&(target, intid, lr::sgi_source(value)));
                        }
                        LrState::Active | LrState::PendingActive => cpu.eoi(intid),
                        LrState::Invalid => {}
                    }
                }
                check_v2_invariants(&g);
            }
        }
        assert!(owed.is_empty(), "seed {seed}: requests never acknowledged: {owed:?}");
        for cpu in &mut cpus {
            cpu.exit(&mut g);
            assert_eq!(cpu.enter(&mut g).used, 0, "seed {seed}: vCPU {} not drained", cpu.vcpu);
        }
    }
    assert!(incremental_flushes > 300, "incremental flushes exercised: {incremental_flushes}");
}
