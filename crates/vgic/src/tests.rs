//! Host tests: a guest's view through MMIO, and a simulated virtual CPU
//! interface acting on the list registers the way the hardware does.

use std::collections::BTreeSet;
use std::vec::Vec;

use crate::lr::{self, LrState};
use crate::regs::*;
use crate::*;

pub(super) const W: AccessWidth = AccessWidth::Word;
pub(super) const B: AccessWidth = AccessWidth::Byte;
pub(super) const D: AccessWidth = AccessWidth::Double;
pub(super) const H: AccessWidth = AccessWidth::Half;

/// The list registers of one vCPU, and what the guest does with them in
/// hardware between a flush and a sync (`tests_v2` shares it: the model
/// speaks the `ICH_LR` encoding for both versions).
pub(super) struct Cpu {
    pub(super) vcpu: usize,
    pub(super) lrs: [u64; 4],
    pub(super) used: usize,
}

impl Cpu {
    pub(super) fn new(vcpu: usize) -> Self {
        Self { vcpu, lrs: [0; 4], used: 0 }
    }

    pub(super) fn enter(&mut self, g: &mut Vgic) -> FlushResult {
        let r = g.flush_lrs(self.vcpu, &mut self.lrs);
        self.used = r.used;
        r
    }

    pub(super) fn exit(&mut self, g: &mut Vgic) -> VcpuSet {
        g.sync_lrs(self.vcpu, &self.lrs[..self.used])
    }

    /// vINTIDs of the valid entries, in list-register order.
    pub(super) fn intids(&self) -> Vec<u32> {
        self.lrs
            .iter()
            .filter(|&&v| LrState::of(v) != LrState::Invalid)
            .map(|&v| lr::vintid(v))
            .collect()
    }

    pub(super) fn slot_of(&self, intid: u32) -> usize {
        (0..4)
            .find(|&i| {
                LrState::of(self.lrs[i]) != LrState::Invalid && lr::vintid(self.lrs[i]) == intid
            })
            .unwrap_or_else(|| {
                panic!("INTID {intid} not in the LRs of vCPU {}: {:x?}", self.vcpu, self.lrs)
            })
    }

    pub(super) fn state(&self, intid: u32) -> LrState {
        LrState::of(self.lrs[self.slot_of(intid)])
    }

    /// `ICC_IAR1_EL1` for a given INTID: pending → active.
    pub(super) fn ack(&mut self, intid: u32) {
        let i = self.slot_of(intid);
        assert_eq!(LrState::of(self.lrs[i]), LrState::Pending, "ack {intid}");
        self.lrs[i] = (self.lrs[i] & !lr::STATE_MASK) | lr::ACTIVE;
    }

    /// `ICC_EOIR1_EL1` with EOImode 0: drop priority and deactivate;
    /// pending+active becomes pending, active becomes invalid.
    pub(super) fn eoi(&mut self, intid: u32) {
        let i = self.slot_of(intid);
        assert!(LrState::of(self.lrs[i]).is_active(), "eoi {intid}");
        self.lrs[i] &= !lr::ACTIVE;
    }

    /// Acknowledge and complete, in hardware, without an exit.
    pub(super) fn handle(&mut self, intid: u32) {
        self.ack(intid);
        self.eoi(intid);
    }
}

/// A VM after the steps Linux's `gic_dist_init` / `gic_enable_redist` take:
/// group enables on, every redistributor awake.
fn vgic(vcpus: usize) -> Vgic {
    let mut g = Vgic::new(VgicConfig { vcpus, spis: 64, ..Default::default() }).unwrap();
    g.dist_write(GICD_CTLR, W, 0x13).unwrap();
    for v in 0..vcpus {
        g.redist_write(v as u64 * GICR_STRIDE + GICR_WAKER, W, 0).unwrap();
    }
    g
}

fn bit_reg(base: u64, intid: u32) -> (u64, u64) {
    (base + u64::from(intid / 32) * 4, 1 << (intid % 32))
}

fn enable(g: &mut Vgic, intid: u32) -> VcpuSet {
    let (off, bit) = bit_reg(GICD_ISENABLER, intid);
    g.dist_write(off, W, bit).unwrap()
}

fn disable(g: &mut Vgic, intid: u32) -> VcpuSet {
    let (off, bit) = bit_reg(GICD_ICENABLER, intid);
    g.dist_write(off, W, bit).unwrap()
}

fn set_prio(g: &mut Vgic, intid: u32, prio: u8) {
    g.dist_write(GICD_IPRIORITYR + u64::from(intid), B, u64::from(prio)).unwrap();
}

fn set_edge(g: &mut Vgic, intid: u32) {
    let off = GICD_ICFGR + u64::from(intid / 16) * 4;
    let cur = g.dist_read(off, W).unwrap();
    g.dist_write(off, W, cur | 2 << (2 * (intid % 16))).unwrap();
}

fn route(g: &mut Vgic, intid: u32, value: u64) -> VcpuSet {
    g.dist_write(GICD_IROUTER + 8 * u64::from(intid), D, value).unwrap()
}

/// An enabled SPI of the given priority and trigger.
fn spi(g: &mut Vgic, intid: u32, prio: u8, edge: bool) {
    set_prio(g, intid, prio);
    if edge {
        set_edge(g, intid);
    }
    enable(g, intid);
}

fn sgi_base(vcpu: usize) -> u64 {
    vcpu as u64 * GICR_STRIDE + GICR_SGI_BASE
}

pub(super) fn lr_value(state: u64, prio: u8, intid: u32) -> u64 {
    state | lr::GROUP | u64::from(prio) << lr::PRIORITY_SHIFT | u64::from(intid)
}

pub(super) fn set(vcpus: &[usize]) -> VcpuSet {
    let mut s = VcpuSet::EMPTY;
    for &v in vcpus {
        s.insert(v);
    }
    s
}

// --- Configuration and small types ----------------------------------------

#[test]
fn config_validation() {
    assert_eq!(
        Vgic::new(VgicConfig { vcpus: 0, spis: 64, ..Default::default() }).err(),
        Some(ConfigError::VcpuCount(0))
    );
    assert_eq!(
        Vgic::new(VgicConfig { vcpus: 9, spis: 64, ..Default::default() }).err(),
        Some(ConfigError::VcpuCount(9))
    );
    assert_eq!(
        Vgic::new(VgicConfig { vcpus: 1, spis: 48, ..Default::default() }).err(),
        Some(ConfigError::SpiCount(48))
    );
    assert_eq!(
        Vgic::new(VgicConfig { vcpus: 1, spis: 992, ..Default::default() }).err(),
        Some(ConfigError::SpiCount(992))
    );
    let g = Vgic::new(VgicConfig::default()).unwrap();
    assert_eq!((g.vcpus(), g.spis(), g.intid_limit()), (1, 64, 96));
    let g = Vgic::new(VgicConfig { vcpus: 8, spis: 960, ..Default::default() }).unwrap();
    assert_eq!((g.redist_region_size(), g.intid_limit()), (8 * 0x20000, 992));
    assert_eq!(
        std::format!("{}", ConfigError::SpiCount(48)),
        "vGIC: 48 SPIs (a multiple of 32 up to 960 supported)"
    );
}

#[test]
fn vcpu_set_ops() {
    let mut s = VcpuSet::single(1) | VcpuSet::single(6);
    assert_eq!(s, VcpuSet(0b0100_0010));
    assert!(s.contains(6) && !s.contains(0) && !s.contains(8));
    assert_eq!(s.len(), 2);
    s.insert(0);
    s.remove(6);
    s.insert(9); // ignored: no such vCPU
    assert_eq!(s.iter().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(VcpuSet::all(3), VcpuSet(0b111));
    assert_eq!(VcpuSet::all(8), VcpuSet(0xff));
    assert!(VcpuSet::EMPTY.is_empty() && VcpuSet::single(8).is_empty());
}

// --- List registers --------------------------------------------------------

#[test]
fn priority_order_into_four_lrs_and_refill() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    // Eight edge SPIs; ties at 0x40 and 0x80 must go to the lower INTID.
    let prios = [
        (40, 0x80),
        (41, 0x40),
        (42, 0xa0),
        (43, 0x40),
        (44, 0x20),
        (45, 0x80),
        (46, 0x60),
        (47, 0x40),
    ];
    for (intid, prio) in prios {
        spi(&mut g, intid, prio, true);
    }
    // Trigger in reverse so arrival order cannot explain the result.
    for (intid, _) in prios.iter().rev() {
        assert_eq!(g.trigger_edge(*intid, 0), VcpuSet::single(0));
    }
    assert_eq!(g.highest_pending(0), Some((44, 0x20)));
    let r = cpu.enter(&mut g);
    assert_eq!(r, FlushResult { used: 4, more_pending: true, kick: VcpuSet::EMPTY });
    assert_eq!(
        cpu.lrs,
        [
            lr_value(lr::PENDING, 0x20, 44),
            lr_value(lr::PENDING, 0x40, 41),
            lr_value(lr::PENDING, 0x40, 43),
            lr_value(lr::PENDING, 0x40, 47),
        ]
    );
    assert_eq!((g.lr_intid(0, 0), g.lr_intid(0, 3), g.lr_intid(0, 4)), (Some(44), Some(47), None));
    // The guest takes and completes all four without exiting; the
    // underflow maintenance interrupt (UIE) brings it out.
    for intid in [44, 41, 43, 47] {
        cpu.handle(intid);
    }
    assert_eq!(cpu.exit(&mut g), VcpuSet::EMPTY);
    assert_eq!(g.lr_intid(0, 0), None);
    let r = cpu.enter(&mut g);
    assert_eq!(r, FlushResult { used: 4, more_pending: false, kick: VcpuSet::EMPTY });
    assert_eq!(cpu.intids(), [46, 40, 45, 42]);
    assert_eq!(cpu.lrs[3], lr_value(lr::PENDING, 0xa0, 42));
    for intid in [46, 40, 45, 42] {
        cpu.handle(intid);
    }
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
    assert_eq!(cpu.lrs, [0; 4]);
    assert!(!g.pending_for(0));
}

#[test]
fn level_repends_after_eoi_while_asserted() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 50, 0x80, false);
    assert_eq!(g.set_level(50, 0, true), VcpuSet::single(0));
    // Raising an already high line changes nothing.
    assert_eq!(g.set_level(50, 0, true), VcpuSet::EMPTY);
    cpu.enter(&mut g);
    // Level-sensitive: EOI requests a maintenance interrupt on deactivation.
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING | lr::EOI, 0x80, 50));
    cpu.ack(50);
    cpu.exit(&mut g);
    assert!(g.irq_state(50, 0).unwrap().active);
    // Active, line still high: active only (never pending+active for a
    // level interrupt), EOI kept.
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::ACTIVE | lr::EOI, 0x80, 50));
    cpu.eoi(50); // -> invalid, maintenance exit
    cpu.exit(&mut g);
    let s = g.irq_state(50, 0).unwrap();
    assert!(s.pending && !s.active && s.lr.is_none());
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING | lr::EOI, 0x80, 50));

    // This time the handler services the device (an emulated one, so the
    // line drops in an exit) before EOI: the EOI bit goes away and the
    // completion costs no exit.
    cpu.ack(50);
    cpu.exit(&mut g);
    assert_eq!(g.set_level(50, 0, false), VcpuSet::single(0));
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::ACTIVE, 0x80, 50));
    cpu.eoi(50);
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
    assert!(!g.irq_state(50, 0).unwrap().pending);
}

#[test]
fn level_deasserted_while_pending_is_not_pending() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 51, 0x80, false);
    // Not yet in a list register.
    g.set_level(51, 0, true);
    assert!(g.pending_for(0));
    assert_eq!(g.set_level(51, 0, false), VcpuSet::EMPTY);
    assert!(!g.pending_for(0));
    assert!(!g.irq_state(51, 0).unwrap().pending);
    assert_eq!(cpu.enter(&mut g).used, 0);
    // In a list register, not yet acknowledged: withdrawn at the next entry.
    g.set_level(51, 0, true);
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [51]);
    assert_eq!(g.set_level(51, 0, false), VcpuSet::single(0));
    assert!(!g.irq_state(51, 0).unwrap().pending);
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
    assert_eq!(cpu.lrs, [0; 4]);
}

#[test]
fn level_software_pend_is_consumed_by_acknowledge() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 52, 0x80, false);
    let (off, bit) = bit_reg(GICD_ISPENDR, 52);
    assert_eq!(g.dist_write(off, W, bit).unwrap(), VcpuSet::single(0));
    assert_eq!(g.dist_read(off, W).unwrap(), bit);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING | lr::EOI, 0x80, 52));
    cpu.handle(52);
    cpu.exit(&mut g);
    // Line low, latch consumed by the acknowledge: nothing more.
    assert_eq!(g.dist_read(off, W).unwrap(), 0);
    assert_eq!(cpu.enter(&mut g).used, 0);
}

#[test]
fn edge_pending_while_active_becomes_pending_active() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 60, 0x80, true);
    g.trigger_edge(60, 0);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING, 0x80, 60)); // edge: no EOI bit
    cpu.ack(60);
    cpu.exit(&mut g);
    // A second edge while the first is being handled.
    assert_eq!(g.trigger_edge(60, 0), VcpuSet::single(0));
    let s = g.irq_state(60, 0).unwrap();
    assert!(s.pending && s.active);
    // Pending+active cannot be taken until deactivated: nothing to wake for.
    assert!(!g.pending_for(0));
    assert_eq!(g.highest_pending(0), None);
    cpu.exit(&mut g);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING | lr::ACTIVE, 0x80, 60));
    cpu.eoi(60); // pending+active -> pending, in hardware
    cpu.handle(60);
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
    assert!(!g.irq_state(60, 0).unwrap().pending);
}

#[test]
fn edge_after_unseen_acknowledge_is_not_lost() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 61, 0x80, true);
    g.trigger_edge(61, 0);
    cpu.enter(&mut g);
    // The guest acknowledges in hardware; the model has not seen it when
    // the next edge comes. The vCPU must be kicked, or the edge would wait
    // in the latch until some unrelated exit.
    cpu.ack(61);
    assert_eq!(g.trigger_edge(61, 0), VcpuSet::single(0));
    cpu.exit(&mut g);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING | lr::ACTIVE, 0x80, 61));
    // Edges before the acknowledge merge into one.
    cpu.eoi(61);
    cpu.exit(&mut g);
    g.trigger_edge(61, 0);
    g.trigger_edge(61, 0);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING, 0x80, 61));
    cpu.handle(61);
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
}

#[test]
fn clear_pending_withdraws_an_entry() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 62, 0x80, true);
    g.trigger_edge(62, 0);
    cpu.enter(&mut g);
    let (off, bit) = bit_reg(GICD_ICPENDR, 62);
    assert_eq!(g.dist_read(off, W).unwrap(), bit);
    assert_eq!(g.dist_write(off, W, bit).unwrap(), VcpuSet::single(0));
    assert_eq!(g.dist_read(off, W).unwrap(), 0);
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
    assert!(!g.pending_for(0));
}

#[test]
fn disable_while_pending_then_reenable() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 70, 0x80, true);
    disable(&mut g, 70);
    // Disabled: pending, but nobody is told and nothing is delivered.
    assert_eq!(g.trigger_edge(70, 0), VcpuSet::EMPTY);
    assert!(g.irq_state(70, 0).unwrap().pending);
    assert!(!g.pending_for(0));
    assert_eq!(cpu.enter(&mut g).used, 0);
    // Re-enabled: delivered.
    assert_eq!(enable(&mut g, 70), VcpuSet::single(0));
    assert_eq!(enable(&mut g, 70), VcpuSet::EMPTY);
    cpu.exit(&mut g);
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [70]);
}

#[test]
fn disable_while_in_lr() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 71, 0x80, true);
    spi(&mut g, 72, 0x90, true);
    g.trigger_edge(71, 0);
    g.trigger_edge(72, 0);
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [71, 72]);
    // Pending in an LR: the owner is kicked and the entry withdrawn; the
    // pending state is kept in the distributor.
    assert_eq!(disable(&mut g, 71), VcpuSet::single(0));
    cpu.exit(&mut g);
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [72]);
    let s = g.irq_state(71, 0).unwrap();
    assert!(s.pending && !s.enabled && s.lr.is_none());
    // Active in an LR: disabling does not touch the active state, the entry
    // stays so the guest can deactivate it.
    cpu.ack(72);
    cpu.exit(&mut g);
    assert_eq!(disable(&mut g, 72), VcpuSet::EMPTY);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::ACTIVE, 0x90, 72));
    cpu.eoi(72);
    cpu.exit(&mut g);
    // Re-enabling 71 delivers its kept pending state.
    assert_eq!(enable(&mut g, 71), VcpuSet::single(0));
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING, 0x80, 71));
    assert_eq!(cpu.used, 1);
}

#[test]
fn group_enable_gates_delivery() {
    let mut g = vgic(2);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 33, 0x80, true);
    g.dist_write(GICD_CTLR, W, 0).unwrap();
    assert_eq!(g.trigger_edge(33, 0), VcpuSet::EMPTY);
    assert_eq!(cpu.enter(&mut g).used, 0);
    assert_eq!(
        g.dist_write(GICD_CTLR, W, u64::from(GICD_CTLR_ENABLE_GRP1)).unwrap(),
        VcpuSet::single(0)
    );
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [33]);
    // Turning the group off again withdraws the entry.
    assert_eq!(g.dist_write(GICD_CTLR, W, 0).unwrap(), VcpuSet::single(0));
    cpu.exit(&mut g);
    assert_eq!(cpu.enter(&mut g).used, 0);
    // A Group 0 interrupt follows EnableGrp0 and goes out with LR.Group = 0.
    let (off, _) = bit_reg(GICD_IGROUPR, 33);
    g.dist_write(off, W, 0).unwrap();
    g.dist_write(GICD_CTLR, W, u64::from(GICD_CTLR_ENABLE_GRP0)).unwrap();
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr::PENDING | 0x80 << lr::PRIORITY_SHIFT | 33);
}

#[test]
fn active_interrupts_are_never_evicted() {
    let mut g = vgic(1);
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
    // Two much more urgent interrupts arrive while all four are active.
    for intid in [44, 45] {
        spi(&mut g, intid, 0x10, true);
        assert_eq!(g.trigger_edge(intid, 0), VcpuSet::single(0));
    }
    let r = cpu.enter(&mut g);
    assert_eq!((r.used, r.more_pending), (4, true));
    assert_eq!(cpu.lrs.map(LrState::of), [LrState::Active; 4]);
    assert_eq!(cpu.intids(), [40, 41, 42, 43]);
    // One completes: the best waiting one takes its place, actives first.
    cpu.eoi(41);
    cpu.exit(&mut g);
    let r = cpu.enter(&mut g);
    assert_eq!((r.used, r.more_pending), (4, true));
    assert_eq!(cpu.intids(), [40, 42, 43, 44]);
    assert_eq!(cpu.lrs[3], lr_value(lr::PENDING, 0x10, 44));
}

#[test]
fn active_with_new_pending_stays_when_lrs_are_full() {
    // Pending+active is still active: it keeps its slot against a
    // higher-priority pending interrupt.
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    for intid in 40..44 {
        spi(&mut g, intid, 0x80, true);
        g.trigger_edge(intid, 0);
    }
    cpu.enter(&mut g);
    cpu.ack(40);
    cpu.exit(&mut g);
    g.trigger_edge(40, 0);
    spi(&mut g, 50, 0x00, true);
    g.trigger_edge(50, 0);
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [40, 50, 41, 42]);
    assert_eq!(cpu.state(40), LrState::PendingActive);
}

#[test]
fn active_overflow_then_deactivated_follows_routing() {
    let mut g = vgic(2);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 40, 0x80, true);
    g.trigger_edge(40, 0);
    cpu.enter(&mut g);
    cpu.ack(40);
    cpu.exit(&mut g);
    // Four more urgent actives (the guest set them through ISACTIVER)
    // push 40 out of the list registers; it stays held by vCPU 0.
    for intid in 41..45 {
        spi(&mut g, intid, 0x10, true);
        let (off, bit) = bit_reg(GICD_ISACTIVER, intid);
        g.dist_write(off, W, bit).unwrap();
    }
    let r = cpu.enter(&mut g);
    assert_eq!((r.used, r.more_pending), (4, true));
    assert_eq!(cpu.intids(), [41, 42, 43, 44]);
    route(&mut g, 40, 1);
    assert_eq!(g.irq_state(40, 0).unwrap().owner, Some(0));
    // Deactivated through ICACTIVER: released, it follows its routing.
    let (off, bit) = bit_reg(GICD_ICACTIVER, 40);
    g.dist_write(off, W, bit).unwrap();
    assert_eq!(g.irq_state(40, 0).unwrap().owner, Some(1));
    assert_eq!(g.trigger_edge(40, 0), VcpuSet::single(1));
}

#[test]
fn set_level_on_edge_interrupt_fires_on_rising_edges_only() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 90, 0x80, true);
    assert_eq!(g.set_level(90, 0, true), VcpuSet::single(0));
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING, 0x80, 90));
    cpu.handle(90);
    cpu.exit(&mut g);
    // Still high: no new edge.
    assert_eq!(g.set_level(90, 0, true), VcpuSet::EMPTY);
    assert_eq!(cpu.enter(&mut g).used, 0);
    // Low, then high again: a new edge. Lowering does not withdraw it.
    g.set_level(90, 0, false);
    assert_eq!(g.set_level(90, 0, true), VcpuSet::single(0));
    g.set_level(90, 0, false);
    assert!(g.irq_state(90, 0).unwrap().pending);
    cpu.enter(&mut g);
    assert_eq!(cpu.intids(), [90]);
}

// --- SGIs --------------------------------------------------------------------

fn sgi1r(intid: u64, targets: u64) -> u64 {
    intid << SGI1R_INTID_SHIFT | targets
}

fn enable_sgi_everywhere(g: &mut Vgic, intid: u32) {
    for v in 0..g.vcpus() {
        g.redist_write(sgi_base(v) + GICR_ISENABLER0, W, 1 << intid).unwrap();
    }
}

fn sgi_pending(g: &Vgic, intid: u32) -> Vec<usize> {
    (0..g.vcpus()).filter(|&v| g.irq_state(intid, v).unwrap().pending).collect()
}

#[test]
fn sgi_target_list() {
    let mut g = vgic(4);
    enable_sgi_everywhere(&mut g, 3);
    assert_eq!(g.send_sgi(0, sgi1r(3, 0b0110)), set(&[1, 2]));
    assert_eq!(sgi_pending(&g, 3), [1, 2]);
    // To self through the target list is allowed.
    assert_eq!(g.send_sgi(0, sgi1r(3, 0b0001)), set(&[0]));
    assert_eq!(sgi_pending(&g, 3), [0, 1, 2]);
}

#[test]
fn sgi_irm_is_all_but_self() {
    let mut g = vgic(4);
    enable_sgi_everywhere(&mut g, 5);
    // IRM = 1: the target list and affinity fields are ignored.
    assert_eq!(
        g.send_sgi(1, sgi1r(5, 0b0010) | SGI1R_IRM | 7 << SGI1R_AFF1_SHIFT),
        set(&[0, 2, 3])
    );
    assert_eq!(sgi_pending(&g, 5), [0, 2, 3]);
}

#[test]
fn sgi_affinity_mismatch_and_out_of_range() {
    let mut g = vgic(4);
    enable_sgi_everywhere(&mut g, 1);
    for value in [
        sgi1r(1, 0xf) | 1 << SGI1R_AFF1_SHIFT, // Aff1 = 1: cluster 1 has no vCPUs
        sgi1r(1, 0xf) | 1 << SGI1R_AFF2_SHIFT,
        sgi1r(1, 0xf) | 1 << SGI1R_AFF3_SHIFT,
        sgi1r(1, 0xfff0),                    // vCPUs 4..15 do not exist
        sgi1r(1, 0x1) | 1 << SGI1R_RS_SHIFT, // Aff0 = 16
    ] {
        assert_eq!(g.send_sgi(0, value), VcpuSet::EMPTY, "{value:#x}");
    }
    assert!(sgi_pending(&g, 1).is_empty());
    // Partly out of range: only the existing vCPUs.
    assert_eq!(g.send_sgi(0, sgi1r(1, 0x0108)), set(&[3]));
    assert_eq!(sgi_pending(&g, 1), [3]);
}

#[test]
fn sgi_reaches_only_its_target() {
    let mut g = vgic(4);
    enable_sgi_everywhere(&mut g, 2);
    g.redist_write(sgi_base(1) + GICR_IPRIORITYR, W, 0x00a0_0000).unwrap();
    g.send_sgi(3, sgi1r(2, 0b0010));
    let mut cpus: Vec<Cpu> = (0..4).map(Cpu::new).collect();
    for cpu in &mut cpus {
        cpu.enter(&mut g);
    }
    assert_eq!(cpus[1].lrs[0], lr_value(lr::PENDING, 0xa0, 2));
    for v in [0, 2, 3] {
        assert_eq!(cpus[v].used, 0, "vCPU {v}");
        assert!(!g.pending_for(v));
    }
    // A disabled SGI is latched but not signalled; enabling it delivers.
    g.redist_write(sgi_base(2) + GICR_ICENABLER0, W, 1 << 2).unwrap();
    assert_eq!(g.send_sgi(0, sgi1r(2, 0b0100)), VcpuSet::EMPTY);
    assert!(g.irq_state(2, 2).unwrap().pending);
    assert_eq!(
        g.redist_write(sgi_base(2) + GICR_ISENABLER0, W, 1 << 2).unwrap(),
        VcpuSet::single(2)
    );
}

/// The IPI round trip a settled guest makes over and over: each new SGI reaches the
/// receiver's list registers by an incremental flush, without a new choice, whether the
/// guest finished the previous one before the exit (the usual case) or not.
#[test]
fn repeated_ipis_flush_incrementally() {
    let mut g = vgic(2);
    enable_sgi_everywhere(&mut g, 1);
    let mut rx = Cpu::new(1);
    assert_eq!(g.send_sgi(0, sgi1r(1, 0b10)), VcpuSet::single(1));
    rx.exit(&mut g);
    rx.enter(&mut g); // the first flush chooses
    for round in 0..3 {
        rx.handle(1);
        // The next IPI arrives before the exit that shows the guest finished the last one.
        assert_eq!(g.send_sgi(0, sgi1r(1, 0b10)), VcpuSet::single(1), "round {round}");
        rx.exit(&mut g);
        assert!(g.cpus[1].dirty && !g.cpus[1].rechoose, "round {round}: needs a choice");
        let r = rx.enter(&mut g);
        assert_eq!((r.used, r.more_pending), (1, false), "round {round}");
        assert_eq!(rx.intids(), [1]);
        assert_eq!(rx.state(1), LrState::Pending);
    }
    // Taken but not finished when the next one comes: pending and active in place.
    rx.ack(1);
    g.send_sgi(0, sgi1r(1, 0b10));
    rx.exit(&mut g);
    assert!(!g.cpus[1].rechoose);
    rx.enter(&mut g);
    assert_eq!(rx.state(1), LrState::PendingActive);
    rx.eoi(1);
    rx.handle(1);
    rx.exit(&mut g);
    assert_eq!(rx.enter(&mut g).used, 0);
    assert!(!g.pending_for(1));
}

/// The shape the fuzzer found (its invariant was wrong, not the model): the guest finishes
/// the entry in LR0 while LR1 still holds one, and a new SGI comes. The incremental flush
/// refills the free LR0 rather than moving LR1 down; with nothing new, LR0 stays a free zero
/// below `used` (and `lr_intid` says it is free).
#[test]
fn incremental_flush_leaves_finished_entries_free_in_place() {
    let mut g = vgic(2);
    enable_sgi_everywhere(&mut g, 1);
    enable_sgi_everywhere(&mut g, 2);
    let mut rx = Cpu::new(1);
    g.send_sgi(0, sgi1r(1, 0b10));
    g.send_sgi(0, sgi1r(2, 0b10));
    rx.enter(&mut g);
    assert_eq!(rx.intids(), [1, 2]);
    rx.handle(1);
    rx.exit(&mut g);
    assert!(!g.cpus[1].rechoose);
    let r = rx.enter(&mut g);
    assert_eq!((r.used, rx.lrs[0]), (2, 0), "{:x?}", rx.lrs);
    assert_eq!((g.lr_intid(1, 0), g.lr_intid(1, 1)), (None, Some(2)));
    // A new SGI takes the free entry.
    g.send_sgi(0, sgi1r(1, 0b10));
    rx.exit(&mut g);
    let r = rx.enter(&mut g);
    assert_eq!(r.used, 2);
    assert_eq!(rx.intids(), [1, 2]);
    // Finishing the last entry trims `used` down to the last valid one.
    rx.handle(2);
    rx.exit(&mut g);
    assert_eq!(rx.enter(&mut g).used, 1);
}

// --- Routing ---------------------------------------------------------------

#[test]
fn irouter_routes_to_the_named_vcpu() {
    let mut g = vgic(4);
    let mut cpus: Vec<Cpu> = (0..4).map(Cpu::new).collect();
    spi(&mut g, 80, 0x80, false);
    assert_eq!(route(&mut g, 80, 2), VcpuSet::EMPTY);
    assert_eq!(g.set_level(80, 0, true), VcpuSet::single(2));
    for cpu in &mut cpus {
        cpu.enter(&mut g);
    }
    assert_eq!(cpus.iter().map(|c| c.used).collect::<Vec<_>>(), [0, 0, 1, 0]);
    assert_eq!(cpus[2].intids(), [80]);

    // Linux's gic_set_affinity: mask, write IROUTER, unmask.
    assert_eq!(disable(&mut g, 80), VcpuSet::single(2));
    cpus[2].exit(&mut g);
    assert_eq!(cpus[2].enter(&mut g), FlushResult::default());
    assert_eq!(route(&mut g, 80, 1), VcpuSet::EMPTY);
    assert_eq!(enable(&mut g, 80), VcpuSet::single(1));
    assert_eq!(g.irq_state(80, 0).unwrap().owner, Some(1));
    cpus[1].enter(&mut g);
    assert_eq!(cpus[1].intids(), [80]);
    assert_eq!(cpus[2].enter(&mut g).used, 0);
}

/// The interrupt distributor's override: the SPI goes to the vCPU armhv names while the guest
/// keeps reading back its own route; in a list register it moves at the holder's next flush;
/// lifting the override restores the guest's routing.
#[test]
fn redirect_overrides_the_guest_route_until_lifted() {
    let mut g = vgic(4);
    let mut cpus: Vec<Cpu> = (0..4).map(Cpu::new).collect();
    spi(&mut g, 80, 0x80, false);
    route(&mut g, 80, 0);
    assert_eq!(g.redirect_spi(80, Some(2)), Some(VcpuSet::EMPTY));
    assert_eq!(g.set_level(80, 0, true), VcpuSet::single(2));
    assert_eq!(g.routed_vcpu(80), Some(0));
    assert_eq!(g.dist_read(GICD_IROUTER + 8 * 80, D).unwrap(), 0);
    cpus[0].enter(&mut g);
    cpus[2].enter(&mut g);
    assert_eq!(cpus[0].used, 0);
    assert_eq!(cpus[2].intids(), [80]);

    // Lifted while vCPU 2 holds it pending: it stays until vCPU 2's next flush, then vCPU 0
    // (the guest's route) is kicked.
    assert_eq!(g.redirect_spi(80, None), Some(VcpuSet::EMPTY));
    cpus[2].exit(&mut g);
    let r = cpus[2].enter(&mut g);
    assert_eq!((r.used, r.kick), (0, VcpuSet::single(0)));
    cpus[0].enter(&mut g);
    assert_eq!(cpus[0].intids(), [80]);

    // Not for private interrupts or vCPUs that do not exist.
    assert_eq!(g.redirect_spi(27, Some(1)), None);
    assert_eq!(g.redirect_spi(80, Some(4)), None);
    assert_eq!(g.routed_vcpu(27), None);
}

#[test]
fn irouter_change_while_pending_in_lr_moves_at_next_flush() {
    let mut g = vgic(4);
    let mut cpus: Vec<Cpu> = (0..4).map(Cpu::new).collect();
    spi(&mut g, 81, 0x80, true);
    route(&mut g, 81, 2);
    g.trigger_edge(81, 0);
    cpus[2].enter(&mut g);
    // Still in vCPU 2's list register: it stays there for now.
    assert_eq!(route(&mut g, 81, 1), VcpuSet::EMPTY);
    assert_eq!(g.irq_state(81, 0).unwrap().owner, Some(2));
    cpus[2].exit(&mut g);
    // vCPU 2's next flush lets go of it and names vCPU 1 to kick.
    let r = cpus[2].enter(&mut g);
    assert_eq!((r.used, r.kick), (0, VcpuSet::single(1)));
    cpus[1].enter(&mut g);
    assert_eq!(cpus[1].lrs[0], lr_value(lr::PENDING, 0x80, 81));
}

#[test]
fn irouter_change_while_active_waits_for_deactivation() {
    let mut g = vgic(4);
    let mut cpus: Vec<Cpu> = (0..4).map(Cpu::new).collect();
    spi(&mut g, 82, 0x80, false);
    route(&mut g, 82, 2);
    g.set_level(82, 0, true);
    cpus[2].enter(&mut g);
    cpus[2].ack(82);
    cpus[2].exit(&mut g);
    assert_eq!(route(&mut g, 82, 1), VcpuSet::EMPTY);
    // Active on vCPU 2: it stays there, even across flushes.
    cpus[2].enter(&mut g);
    assert_eq!(cpus[2].state(82), LrState::Active);
    assert_eq!(cpus[1].enter(&mut g).used, 0);
    // Deactivated with the line still high: vCPU 1 now gets it.
    cpus[2].eoi(82);
    assert_eq!(cpus[2].exit(&mut g), VcpuSet::single(1));
    assert_eq!(cpus[2].enter(&mut g).used, 0);
    cpus[1].enter(&mut g);
    assert_eq!(cpus[1].intids(), [82]);
}

#[test]
fn irouter_to_missing_affinity_delivers_to_nobody() {
    let mut g = vgic(4);
    let mut cpus: Vec<Cpu> = (0..4).map(Cpu::new).collect();
    spi(&mut g, 83, 0x80, true);
    for (value, name) in
        [(5, "Aff0 = 5"), (1 << 8, "Aff1 = 1"), (1 << 16, "Aff2 = 1"), (1 << 32, "Aff3 = 1")]
    {
        route(&mut g, 83, value);
        assert_eq!(g.irq_state(83, 0).unwrap().owner, None, "{name}");
    }
    // Pending, but forwarded to no vCPU...
    assert_eq!(g.trigger_edge(83, 0), VcpuSet::EMPTY);
    for cpu in &mut cpus {
        assert_eq!(cpu.enter(&mut g).used, 0);
        assert!(!g.pending_for(cpu.vcpu));
    }
    assert!(g.irq_state(83, 0).unwrap().pending);
    // ...until the routing names one.
    assert_eq!(route(&mut g, 83, 3), VcpuSet::single(3));
    cpus[3].enter(&mut g);
    assert_eq!(cpus[3].intids(), [83]);
}

#[test]
fn irouter_any_picks_the_first_awake_vcpu() {
    let mut g = Vgic::new(VgicConfig { vcpus: 3, spis: 64, ..Default::default() }).unwrap();
    g.dist_write(GICD_CTLR, W, 0x13).unwrap();
    spi(&mut g, 84, 0x80, true);
    route(&mut g, 84, IROUTER_IRM | 2);
    // All asleep: vCPU 0.
    assert_eq!(g.irq_state(84, 0).unwrap().owner, Some(0));
    g.redist_write(GICR_STRIDE + GICR_WAKER, W, 0).unwrap();
    assert_eq!(g.irq_state(84, 0).unwrap().owner, Some(1));
    g.trigger_edge(84, 0);
    // vCPU 0 wakes: the "any" target moves to it and it is kicked.
    assert_eq!(g.redist_write(GICR_WAKER, W, 0).unwrap(), VcpuSet::single(0));
    assert_eq!(g.highest_pending(0), Some((84, 0x80)));
    assert_eq!(g.highest_pending(1), None);
}

// --- Hardware link -----------------------------------------------------------

#[test]
fn hw_linked_entry_has_pintid_and_no_eoi() {
    let mut g = vgic(2);
    let mut cpu = Cpu::new(1);
    // The virtual timer PPI of vCPU 1, linked to physical INTID 27.
    g.redist_write(sgi_base(1) + GICR_ISENABLER0, W, 1 << 27).unwrap();
    assert_eq!(g.set_hw_link(27, 1, Some(27)), Some(VcpuSet::EMPTY));
    assert_eq!(g.set_hw_link(27, 1, Some(3)), None);
    assert_eq!(g.set_hw_link(27, 1, Some(1020)), None);
    assert_eq!(g.set_hw_link(27, 2, Some(27)), None);
    assert_eq!(g.set_level(27, 1, true), VcpuSet::single(1));
    assert!(!g.irq_state(27, 0).unwrap().pending);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0], lr_value(lr::PENDING | lr::HW, 0, 27) | 27 << lr::PINTID_SHIFT);
    assert_eq!(lr::pintid(cpu.lrs[0]), Some(27));
}

// --- Fast path and invariants ------------------------------------------------

#[test]
fn unchanged_exit_reuses_the_previous_flush() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 40, 0x80, true);
    g.trigger_edge(40, 0);
    cpu.enter(&mut g);
    let first = cpu.lrs;
    assert!(!g.cpus[0].dirty);
    cpu.exit(&mut g);
    assert!(!g.cpus[0].dirty, "an unchanged LR must not dirty the vCPU");
    assert!(g.is_clean(0, 4), "the hypervisor may skip this flush");
    assert!(!g.is_clean(0, 2), "a different capacity needs a new choice");
    assert!(!g.is_clean(1, 4), "no such vCPU");
    cpu.lrs = [0xdead; 4];
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs, first);
    // A change the guest made in hardware is noticed.
    cpu.ack(40);
    cpu.exit(&mut g);
    assert!(g.cpus[0].dirty);
    assert!(!g.is_clean(0, 4));
    assert!(!g.clean_flags().is_clean(0));
    // So is a new interrupt for the vCPU.
    cpu.enter(&mut g);
    assert!(g.is_clean(0, 4));
    spi(&mut g, 41, 0x80, true);
    g.trigger_edge(41, 0);
    assert!(!g.is_clean(0, 4));
}

/// xorshift64*: deterministic pseudo-random numbers for the soak test.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Checks the bookkeeping: every list-register entry the model thinks is
/// valid points at an interrupt that points back, and no interrupt is in
/// two list registers.
pub(super) fn check_invariants(g: &Vgic) {
    let mut seen = BTreeSet::new();
    for v in 0..g.vcpus() {
        for slot in 0..g.cpus[v].used {
            let Some(intid) = g.lr_intid(v, slot) else { continue };
            let s = g.irq_state(intid, v).unwrap();
            assert_eq!(s.lr, Some((v, slot)), "INTID {intid} of vCPU {v}");
            let key = if intid < 32 { (v, intid) } else { (usize::MAX, intid) };
            assert!(seen.insert(key), "INTID {intid} in two LRs");
        }
    }
    // Outside the list registers: no cancelled pending state, and no home unless active
    // (what `update` keeps and `raise_latch` relies on).
    for (idx, irq) in g.irqs.iter().enumerate() {
        if irq.slot == NO_SLOT {
            assert!(!irq.lr_pending_cancelled, "interrupt index {idx}");
            assert!(irq.active || irq.home == NO_VCPU, "interrupt index {idx} has a home");
        }
    }
    // The lock-free flags say what the dirty flags say.
    for v in 0..g.vcpus() {
        assert_eq!(g.clean_flags().is_clean(v), !g.cpus[v].dirty, "clean flag of vCPU {v}");
    }
    // Every interrupt a flush or a pending check must see is in the hot set.
    for (idx, irq) in g.irqs.iter().enumerate() {
        if irq.latch || irq.line || irq.active || irq.slot != NO_SLOT {
            assert!(g.hot[idx / 64] & 1 << (idx % 64) != 0, "interrupt index {idx} not hot");
        }
    }
}

/// `trigger_edge`, checked against the general path it shortcuts: the same kicks and the
/// same model afterwards as `update` setting the latch.
fn trigger_checked(g: &mut Vgic, intid: u32, vcpu: usize) -> VcpuSet {
    let idx = g.index(vcpu, intid).unwrap();
    let mut reference = g.clone();
    let expected = reference.update(idx, |irq| irq.latch = true);
    let kick = g.trigger_edge(intid, vcpu);
    assert_eq!(kick, expected, "kicks for INTID {intid}");
    assert_same_state(g, &reference);
    kick
}

/// The same interrupts, hot set and list registers, and the same vCPUs to flush (how much of a
/// flush each needs may differ).
fn assert_same_state(g: &Vgic, reference: &Vgic) {
    assert_eq!(g.irqs, reference.irqs);
    assert_eq!(g.hot, reference.hot);
    for (a, b) in g.cpus.iter().zip(&reference.cpus) {
        assert_eq!((a.used, a.lr_intid, a.lr_value), (b.used, b.lr_intid, b.lr_value));
        assert_eq!(a.dirty, b.dirty);
    }
}

/// Random injections, MMIO writes and guest activity on three vCPUs.
/// Checks after every flush that the cached fast path equals a full
/// recomputation, and at the end that every edge triggered after the
/// interrupt's last acknowledge is acknowledged again once everything is
/// enabled: no edge is ever lost.
#[test]
fn soak_fast_path_and_no_lost_edges() {
    const VCPUS: usize = 3;
    const SPIS: [u32; 6] = [32, 33, 34, 35, 36, 37];
    let mut incremental_flushes = 0;
    // Seeds past 40 only inject edges and SGIs and let the guests run: the traffic of a VM
    // whose configuration has settled, where flushes are mostly incremental.
    for seed in 1..=80u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut g = vgic(VCPUS);
        let mut cpus: Vec<Cpu> = (0..VCPUS).map(Cpu::new).collect();
        // SPIs 32..35 edge, 36..37 level; SGIs 0..2 and PPI 20 (edge).
        for &intid in &SPIS {
            spi(&mut g, intid, (rng.below(32) as u8) << 3, intid < 36);
            route(&mut g, intid, rng.below(VCPUS as u64));
        }
        for v in 0..VCPUS {
            g.redist_write(sgi_base(v) + GICR_ISENABLER0, W, 0b111 | 1 << 20).unwrap();
            g.redist_write(sgi_base(v) + GICR_ICFGR1, W, 2 << 8).unwrap();
        }
        // (vcpu or usize::MAX for SPIs, intid) of edges owed an acknowledge.
        let mut owed: BTreeSet<(usize, u32)> = BTreeSet::new();
        let key = |v: usize, intid: u32| if intid < 32 { (v, intid) } else { (usize::MAX, intid) };

        for _ in 0..400 {
            let v = rng.below(VCPUS as u64) as usize;
            let op = if seed > 40 {
                [0, 2, 3, 7, 8, 9, 11, 11][rng.below(8) as usize]
            } else {
                rng.below(12)
            };
            match op {
                0 => {
                    // Edges, and ISPENDR-style software pends of the level ones (not owed an
                    // acknowledge: the model lets an acknowledge it has not seen yet consume
                    // a software pend of a level interrupt that came after it).
                    let intid = SPIS[rng.below(6) as usize];
                    trigger_checked(&mut g, intid, 0);
                    if intid < 36 {
                        owed.insert(key(0, intid));
                    }
                }
                1 => {
                    let intid = 36 + rng.below(2) as u32;
                    g.set_level(intid, 0, rng.below(2) == 0);
                }
                2 => {
                    let intid = rng.below(3);
                    let targets = rng.below(8);
                    let mut reference = g.clone();
                    let mut expected = VcpuSet::EMPTY;
                    for t in (0..VCPUS).filter(|t| targets & (1 << t) != 0) {
                        let idx = t * PRIVATE_COUNT as usize + intid as usize;
                        expected |= reference.update(idx, |irq| irq.latch = true);
                    }
                    assert_eq!(g.send_sgi(v, sgi1r(intid, targets)), expected);
                    assert_same_state(&g, &reference);
                    for t in (0..VCPUS).filter(|t| targets & (1 << t) != 0) {
                        owed.insert(key(t, intid as u32));
                    }
                }
                3 => {
                    trigger_checked(&mut g, 20, v);
                    owed.insert(key(v, 20));
                }
                4 => {
                    let intid = SPIS[rng.below(6) as usize];
                    if rng.below(2) == 0 {
                        enable(&mut g, intid)
                    } else {
                        disable(&mut g, intid)
                    };
                }
                5 => {
                    let intid = SPIS[rng.below(6) as usize];
                    route(&mut g, intid, rng.below(VCPUS as u64 + 1));
                }
                6 => set_prio(&mut g, SPIS[rng.below(6) as usize], (rng.below(32) as u8) << 3),
                7 => {
                    // Guest acknowledges the best pending entry in hardware.
                    let cpu = &mut cpus[v];
                    let best = (0..cpu.used)
                        .filter(|&i| LrState::of(cpu.lrs[i]) == LrState::Pending)
                        .min_by_key(|&i| (lr::priority(cpu.lrs[i]), i));
                    if let Some(i) = best {
                        let intid = lr::vintid(cpu.lrs[i]);
                        cpu.ack(intid);
                        owed.remove(&key(v, intid));
                    }
                }
                8 => {
                    let cpu = &mut cpus[v];
                    let active = (0..cpu.used).find(|&i| LrState::of(cpu.lrs[i]).is_active());
                    if let Some(i) = active {
                        let intid = lr::vintid(cpu.lrs[i]);
                        cpu.eoi(intid);
                    }
                }
                9 => {
                    let kick = cpus[v].exit(&mut g);
                    assert!(!kick.contains(v));
                }
                10 => {
                    g.dist_write(GICD_CTLR, W, if rng.below(4) == 0 { 0 } else { 0x13 }).unwrap();
                }
                _ => {
                    // Enter: compare the fast paths with a full recomputation.
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
                        // The same entries, perhaps in other list registers (an incremental
                        // flush fills whichever are free).
                        let entries = |lrs: &[u64]| {
                            let mut e: Vec<u64> = lrs.iter().copied().filter(|&x| x != 0).collect();
                            e.sort_unstable();
                            e
                        };
                        assert_eq!(entries(&cpus[v].lrs), entries(&lrs), "seed {seed}: fast path");
                        assert_eq!(r.more_pending, r_full.more_pending, "seed {seed}");
                        assert_eq!(r.kick, r_full.kick, "seed {seed}");
                        incremental_flushes += usize::from(incremental);
                    }
                }
            }
            check_invariants(&g);
        }

        // Quiesce: everything enabled, routed to real vCPUs, lines low; the
        // guests take and complete whatever they are given.
        g.dist_write(GICD_CTLR, W, 0x13).unwrap();
        for &intid in &SPIS {
            enable(&mut g, intid);
            route(&mut g, intid, u64::from(intid) % VCPUS as u64);
        }
        g.set_level(36, 0, false);
        g.set_level(37, 0, false);
        for _ in 0..20 {
            for cpu in &mut cpus {
                cpu.exit(&mut g);
                cpu.enter(&mut g);
                for i in 0..cpu.used {
                    let intid = lr::vintid(cpu.lrs[i]);
                    match LrState::of(cpu.lrs[i]) {
                        LrState::Pending => {
                            cpu.handle(intid);
                            owed.remove(&key(cpu.vcpu, intid));
                        }
                        LrState::Active | LrState::PendingActive => cpu.eoi(intid),
                        LrState::Invalid => {}
                    }
                }
            }
        }
        assert!(owed.is_empty(), "seed {seed}: edges never acknowledged: {owed:?}");
        for cpu in &mut cpus {
            cpu.exit(&mut g);
            assert_eq!(cpu.enter(&mut g).used, 0, "seed {seed}: vCPU {} not drained", cpu.vcpu);
            assert!(!g.pending_for(cpu.vcpu));
        }
    }
    assert!(incremental_flushes > 1000, "incremental flushes exercised: {incremental_flushes}");
}

// --- Register emulation ------------------------------------------------------

#[test]
fn gicd_ctlr_typer_iidr_pidr2() {
    let mut g = Vgic::new(VgicConfig::default()).unwrap();
    // ARE and DS read as one; RWP as zero.
    assert_eq!(g.dist_read(GICD_CTLR, W), Ok(0x50));
    assert_eq!(g.dist_write(GICD_CTLR, W, 0xffff_ffff), Ok(VcpuSet::EMPTY));
    assert_eq!(g.dist_read(GICD_CTLR, W), Ok(0x53));
    g.dist_write(GICD_CTLR, W, 0).unwrap();
    assert_eq!(g.dist_read(GICD_CTLR, W), Ok(0x50));
    // 64 SPIs: ITLinesNumber = 2 (INTIDs up to 95), IDbits = 9.
    assert_eq!(g.dist_read(GICD_TYPER, W), Ok(0x0048_0002));
    g.dist_write(GICD_TYPER, W, 0xffff_ffff).unwrap();
    assert_eq!(g.dist_read(GICD_TYPER, W), Ok(0x0048_0002));
    let mut big = Vgic::new(VgicConfig { vcpus: 2, spis: 128, ..Default::default() }).unwrap();
    assert_eq!(big.dist_read(GICD_TYPER, W), Ok(0x0048_0004));
    let mut none = Vgic::new(VgicConfig { vcpus: 1, spis: 0, ..Default::default() }).unwrap();
    assert_eq!(none.dist_read(GICD_TYPER, W), Ok(0x0048_0000));
    assert_eq!(g.dist_read(GICD_IIDR, W), Ok(0x4100_043b));
    assert_eq!(g.dist_read(GICD_TYPER2, W), Ok(0));
    assert_eq!(g.dist_read(PIDR2, W), Ok(0x3b));
    assert_eq!(g.dist_read(PIDR2, W).unwrap() >> 4 & 0xf, 3, "ArchRev");
    assert_eq!(g.dist_read(ID_BLOCK, W), Ok(0));
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn gicd_bitmap_registers_round_trip() {
    let mut g = Vgic::new(VgicConfig { vcpus: 1, spis: 64, ..Default::default() }).unwrap();
    // IGROUPR1 covers SPIs 32..63: reset Group 1, read/write.
    assert_eq!(g.dist_read(GICD_IGROUPR + 4, W), Ok(0xffff_ffff));
    g.dist_write(GICD_IGROUPR + 4, W, 0x0000_ffff).unwrap();
    assert_eq!(g.dist_read(GICD_IGROUPR + 4, W), Ok(0x0000_ffff));
    // With ARE the INTID 0..31 registers are RAZ/WI; past the last SPI too.
    for off in [GICD_IGROUPR, GICD_ISENABLER, GICD_ISPENDR, GICD_ISACTIVER, GICD_IGROUPR + 12] {
        g.dist_write(off, W, 0xffff_ffff).unwrap();
        assert_eq!(g.dist_read(off, W), Ok(0), "{off:#x}");
    }
    for (set, clear) in [
        (GICD_ISENABLER, GICD_ICENABLER),
        (GICD_ISPENDR, GICD_ICPENDR),
        (GICD_ISACTIVER, GICD_ICACTIVER),
    ] {
        g.dist_write(set + 8, W, 0x8000_0005).unwrap();
        g.dist_write(set + 8, W, 0).unwrap(); // zeros do nothing
        assert_eq!(g.dist_read(set + 8, W), Ok(0x8000_0005), "{set:#x}");
        assert_eq!(g.dist_read(clear + 8, W), Ok(0x8000_0005), "{clear:#x}");
        g.dist_write(clear + 8, W, 0x0000_0001).unwrap();
        assert_eq!(g.dist_read(set + 8, W), Ok(0x8000_0004), "{set:#x}");
    }
    let s = g.irq_state(95, 0).unwrap();
    assert!(s.enabled && s.pending && s.active);
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn gicd_priority_byte_and_word() {
    let mut g = Vgic::new(VgicConfig::default()).unwrap();
    let base = GICD_IPRIORITYR + 32;
    g.dist_write(base, W, 0x4433_2211).unwrap();
    // 5 priority bits: the low 3 bits of each byte read as zero.
    assert_eq!(g.dist_read(base, W), Ok(0x4030_2010));
    assert_eq!(g.dist_read(base + 1, B), Ok(0x20));
    g.dist_write(base + 2, B, 0xff).unwrap();
    assert_eq!(g.dist_read(base, W), Ok(0x40f8_2010));
    assert_eq!(g.irq_state(34, 0).unwrap().priority, 0xf8);
    // SGI/PPI bytes in the distributor are RAZ/WI; halfword is refused.
    g.dist_write(GICD_IPRIORITYR, W, 0xffff_ffff).unwrap();
    assert_eq!(g.dist_read(GICD_IPRIORITYR, W), Ok(0));
    assert_eq!(g.dist_read(base, H), Err(MmioError::BadWidth));
    assert_eq!(g.dist_write(base, D, 0), Err(MmioError::BadWidth));
    assert_eq!(g.dist_read(base + 1, W), Err(MmioError::Unaligned));
}

#[test]
fn gicd_icfgr_igrpmodr_itargetsr() {
    let mut g = Vgic::new(VgicConfig::default()).unwrap();
    let icfgr2 = GICD_ICFGR + 8; // INTIDs 32..47
    assert_eq!(g.dist_read(icfgr2, W), Ok(0), "SPIs reset level-sensitive");
    g.dist_write(icfgr2, W, 0xffff_ffff).unwrap();
    // Int_config[0] is RES0.
    assert_eq!(g.dist_read(icfgr2, W), Ok(0xaaaa_aaaa));
    assert!(g.irq_state(47, 0).unwrap().edge);
    g.dist_write(icfgr2, W, 0x8).unwrap();
    assert_eq!(g.dist_read(icfgr2, W), Ok(0x8));
    // INTIDs 0..31 in the distributor: RAZ/WI.
    g.dist_write(GICD_ICFGR + 4, W, 0xffff_ffff).unwrap();
    assert_eq!(g.dist_read(GICD_ICFGR, W), Ok(0));
    assert_eq!(g.dist_read(GICD_ICFGR + 4, W), Ok(0));
    // Single security state: IGRPMODR and NSACR RAZ/WI. ARE: ITARGETSR too.
    for (off, width) in [(GICD_IGRPMODR + 4, W), (GICD_NSACR + 8, W), (GICD_ITARGETSR + 33, B)] {
        g.dist_write(off, width, 0xff).unwrap();
        assert_eq!(g.dist_read(off, width), Ok(0), "{off:#x}");
    }
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn gicd_irouter_64_and_32_bit() {
    let mut g = Vgic::new(VgicConfig { vcpus: 4, spis: 64, ..Default::default() }).unwrap();
    let r40 = GICD_IROUTER + 8 * 40;
    assert_eq!(g.dist_read(r40, D), Ok(0));
    g.dist_write(r40, D, u64::MAX).unwrap();
    // Only Aff3, IRM, Aff2, Aff1, Aff0 are implemented.
    assert_eq!(g.dist_read(r40, D), Ok(0xff_80ff_ffff));
    assert_eq!(g.dist_read(r40, W), Ok(0x80ff_ffff));
    assert_eq!(g.dist_read(r40 + 4, W), Ok(0xff));
    // Linux on a 32-bit kernel writes the halves separately.
    g.dist_write(r40, W, 0x0000_0003).unwrap();
    g.dist_write(r40 + 4, W, 0).unwrap();
    assert_eq!(g.dist_read(r40, D), Ok(3));
    assert_eq!(g.irq_state(40, 0).unwrap().owner, Some(3));
    // IROUTER of an SGI/PPI (reserved) or past the last SPI: RAZ/WI.
    for off in [GICD_IROUTER + 8 * 31, GICD_IROUTER + 8 * 96, GICD_IROUTER + 8 * 1019] {
        g.dist_write(off, D, 1).unwrap();
        assert_eq!(g.dist_read(off, D), Ok(0), "{off:#x}");
    }
    assert_eq!(g.dist_read(r40, B), Err(MmioError::BadWidth));
    assert_eq!(g.dist_read(r40 + 4, D), Err(MmioError::Unaligned));
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn gicr_typer_last_and_affinity() {
    let mut g = Vgic::new(VgicConfig { vcpus: 3, spis: 64, ..Default::default() }).unwrap();
    let typer = |v: u64| v * GICR_STRIDE + GICR_TYPER;
    assert_eq!(g.redist_read(typer(0), D), Ok(0));
    assert_eq!(g.redist_read(typer(1), D), Ok(0x0000_0001_0000_0100));
    // The last one has Last set; Processor_Number and Aff0 = vCPU index.
    assert_eq!(g.redist_read(typer(2), D), Ok(0x0000_0002_0000_0210));
    assert_eq!(g.redist_read(typer(2), W), Ok(0x210));
    assert_eq!(g.redist_read(typer(2) + 4, W), Ok(2));
    // Read-only.
    g.redist_write(typer(1), D, u64::MAX).unwrap();
    assert_eq!(g.redist_read(typer(1), D), Ok(0x0000_0001_0000_0100));
    // Walking the region as Linux's gic_iterate_rdists does.
    let mut found = Vec::new();
    for v in 0.. {
        let rd = v * GICR_STRIDE;
        assert_eq!(g.redist_read(rd + PIDR2, W).unwrap() & 0xf0, 0x30);
        let t = g.redist_read(rd + GICR_TYPER, D).unwrap();
        found.push(t >> 32);
        if t & GICR_TYPER_LAST != 0 {
            break;
        }
    }
    assert_eq!(found, [0, 1, 2]);
    assert_eq!(g.redist_read(3 * GICR_STRIDE, W), Err(MmioError::Unmapped));
    let mut one = Vgic::new(VgicConfig::default()).unwrap();
    assert_eq!(one.redist_read(GICR_TYPER, D), Ok(GICR_TYPER_LAST));
}

#[test]
fn gicr_waker_handshake() {
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, ..Default::default() }).unwrap();
    let waker = GICR_STRIDE + GICR_WAKER;
    // Reset: ProcessorSleep = 1, ChildrenAsleep = 1.
    assert_eq!(g.redist_read(waker, W), Ok(0b110));
    // Linux clears ProcessorSleep and waits for ChildrenAsleep to clear.
    let v = g.redist_read(waker, W).unwrap() & !u64::from(GICR_WAKER_PROCESSOR_SLEEP);
    g.redist_write(waker, W, v).unwrap();
    assert_eq!(g.redist_read(waker, W), Ok(0));
    // vCPU 0's redistributor is separate and still asleep.
    assert_eq!(g.redist_read(GICR_WAKER, W), Ok(0b110));
    // Going to sleep: ChildrenAsleep follows at once.
    g.redist_write(waker, W, u64::from(GICR_WAKER_PROCESSOR_SLEEP)).unwrap();
    assert_eq!(g.redist_read(waker, W), Ok(0b110));
    assert_eq!(g.redist_read(waker, B), Err(MmioError::BadWidth));
    assert_eq!(g.redist_read(waker, D), Err(MmioError::Unaligned));
}

#[test]
fn gicr_rd_base_misc_registers() {
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, ..Default::default() }).unwrap();
    let rd1 = GICR_STRIDE;
    assert_eq!(g.redist_read(rd1 + GICR_IIDR, W), Ok(0x4100_043b));
    assert_eq!(g.redist_read(rd1 + PIDR2, W), Ok(0x3b));
    g.redist_write(rd1 + GICR_CTLR, W, 1).unwrap(); // EnableLPIs: no LPIs
    assert_eq!(g.redist_read(rd1 + GICR_CTLR, W), Ok(0));
    for off in [GICR_PROPBASER, GICR_PENDBASER] {
        g.redist_write(rd1 + off, D, 0x1234_5000).unwrap();
        assert_eq!(g.redist_read(rd1 + off, D), Ok(0), "{off:#x}");
        assert_eq!(g.redist_read(rd1 + off + 4, W), Ok(0), "{off:#x}");
    }
    assert_eq!(g.redist_read(rd1 + GICR_SYNCR, W), Ok(0));
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn gicr_sgi_base_registers() {
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, ..Default::default() }).unwrap();
    let sgi1 = sgi_base(1);
    assert_eq!(g.redist_read(sgi1 + GICR_IGROUPR0, W), Ok(0xffff_ffff));
    g.redist_write(sgi1 + GICR_IGROUPR0, W, 0xffff_0000).unwrap();
    assert_eq!(g.redist_read(sgi1 + GICR_IGROUPR0, W), Ok(0xffff_0000));
    for (set, clear) in [
        (GICR_ISENABLER0, GICR_ICENABLER0),
        (GICR_ISPENDR0, GICR_ICPENDR0),
        (GICR_ISACTIVER0, GICR_ICACTIVER0),
    ] {
        g.redist_write(sgi1 + set, W, 0x0800_0003).unwrap();
        assert_eq!(g.redist_read(sgi1 + clear, W), Ok(0x0800_0003), "{set:#x}");
        g.redist_write(sgi1 + clear, W, 0x1).unwrap();
        assert_eq!(g.redist_read(sgi1 + set, W), Ok(0x0800_0002), "{set:#x}");
        // Banked: vCPU 0's copy is untouched.
        assert_eq!(g.redist_read(sgi_base(0) + set, W), Ok(0), "{set:#x}");
    }
    // IPRIORITYR0..7: byte and word.
    g.redist_write(sgi1 + GICR_IPRIORITYR + 27, B, 0xa7).unwrap();
    assert_eq!(g.redist_read(sgi1 + GICR_IPRIORITYR + 24, W), Ok(0xa000_0000));
    assert_eq!(g.irq_state(27, 1).unwrap().priority, 0xa0);
    assert_eq!(g.irq_state(27, 0).unwrap().priority, 0);
    // ICFGR0: SGIs always edge, read-only. ICFGR1: PPIs configurable.
    g.redist_write(sgi1 + GICR_ICFGR0, W, 0).unwrap();
    assert_eq!(g.redist_read(sgi1 + GICR_ICFGR0, W), Ok(0xaaaa_aaaa));
    assert_eq!(g.redist_read(sgi1 + GICR_ICFGR1, W), Ok(0));
    g.redist_write(sgi1 + GICR_ICFGR1, W, 0x0800_0001).unwrap(); // PPI 29 edge
    assert_eq!(g.redist_read(sgi1 + GICR_ICFGR1, W), Ok(0x0800_0000));
    assert!(g.irq_state(29, 1).unwrap().edge && !g.irq_state(29, 0).unwrap().edge);
    g.redist_write(sgi1 + GICR_IGRPMODR0, W, 0xffff_ffff).unwrap();
    assert_eq!(g.redist_read(sgi1 + GICR_IGRPMODR0, W), Ok(0));
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn unknown_offsets_are_counted_raz_wi() {
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, ..Default::default() }).unwrap();
    assert_eq!(g.dist_read(0x0020, W), Ok(0));
    assert_eq!(g.unknown_accesses(), 1);
    assert_eq!(g.dist_write(0x0040, W, 0x21), Ok(VcpuSet::EMPTY)); // GICD_SETSPI_NSR: no MBIS
    assert_eq!(g.dist_read(0x5000, D), Ok(0));
    assert_eq!(g.redist_read(GICR_STRIDE + 0x0100, W), Ok(0));
    assert_eq!(g.redist_read(sgi_base(0) + 0x0084, W), Ok(0)); // GICR_IGROUPR1E: no extended PPIs
    assert_eq!(g.redist_write(sgi_base(1) + 0xffe8, W, 1), Ok(VcpuSet::EMPTY));
    assert_eq!(g.unknown_accesses(), 6);
    // Known RAZ/WI registers are not counted.
    g.dist_read(GICD_STATUSR, W).unwrap();
    g.redist_read(GICR_STATUSR, W).unwrap();
    assert_eq!(g.unknown_accesses(), 6);
}

#[test]
fn bad_widths_and_alignment() {
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, ..Default::default() }).unwrap();
    for (off, width) in [
        (GICD_CTLR, B),
        (GICD_CTLR, H),
        (GICD_CTLR, D),
        (GICD_TYPER, B),
        (GICD_ISENABLER + 4, B),
        (GICD_ICFGR + 8, D),
        (GICD_IPRIORITYR + 32, H),
        (GICD_IROUTER + 8 * 40, H),
        (PIDR2, B),
    ] {
        assert_eq!(g.dist_read(off, width), Err(MmioError::BadWidth), "{off:#x} {width}");
        assert_eq!(g.dist_write(off, width, 0), Err(MmioError::BadWidth), "{off:#x} {width}");
    }
    for (off, width) in [(sgi_base(0) + GICR_ISENABLER0, B), (GICR_WAKER, H), (GICR_CTLR, D)] {
        assert_eq!(g.redist_read(off, width), Err(MmioError::BadWidth), "{off:#x} {width}");
    }
    assert_eq!(g.dist_read(GICD_CTLR + 2, W), Err(MmioError::Unaligned));
    assert_eq!(g.dist_write(GICD_IROUTER + 8 * 40 + 4, D, 0), Err(MmioError::Unaligned));
    assert_eq!(g.redist_read(GICR_TYPER + 4, D), Err(MmioError::Unaligned));
    assert_eq!(g.dist_read(GICD_SIZE, W), Err(MmioError::Unmapped));
    assert_eq!(g.redist_write(2 * GICR_STRIDE, W, 0), Err(MmioError::Unmapped));
    assert_eq!(g.unknown_accesses(), 0);
}

#[test]
fn linux_style_init_sequence() {
    // What irq-gic-v3's gic_dist_init, gic_cpu_init and gic_set_type do,
    // then a UART SPI and a virtual-timer PPI delivered.
    let mut g = Vgic::new(VgicConfig { vcpus: 2, spis: 64, ..Default::default() }).unwrap();
    let mut cpu0 = Cpu::new(0);
    assert_eq!(g.dist_read(PIDR2, W).unwrap() & 0xf0, 0x30);
    g.dist_write(GICD_CTLR, W, 0).unwrap();
    assert_eq!(g.dist_read(GICD_CTLR, W).unwrap() & u64::from(GICD_CTLR_RWP), 0);
    let lines = (g.dist_read(GICD_TYPER, W).unwrap() & 0x1f) + 1;
    for i in 1..lines {
        g.dist_write(GICD_IGROUPR + 4 * i, W, 0xffff_ffff).unwrap();
        g.dist_write(GICD_ICACTIVER + 4 * i, W, 0xffff_ffff).unwrap();
        g.dist_write(GICD_ICENABLER + 4 * i, W, 0xffff_ffff).unwrap();
    }
    for i in 2..lines * 2 {
        g.dist_write(GICD_ICFGR + 4 * i, W, 0).unwrap();
    }
    for i in 8..lines * 8 {
        g.dist_write(GICD_IPRIORITYR + 4 * i, W, 0xa0a0_a0a0).unwrap();
    }
    g.dist_write(GICD_CTLR, W, 0x13).unwrap();
    for intid in 32..u64::from(g.intid_limit()) {
        g.dist_write(GICD_IROUTER + 8 * intid, D, 0).unwrap();
    }
    for v in 0..2 {
        let rd = v as u64 * GICR_STRIDE;
        let w = g.redist_read(rd + GICR_WAKER, W).unwrap();
        g.redist_write(rd + GICR_WAKER, W, w & !2).unwrap();
        assert_eq!(g.redist_read(rd + GICR_WAKER, W).unwrap() & 4, 0);
        let sgi = sgi_base(v);
        g.redist_write(sgi + GICR_ICACTIVER0, W, 0xffff_ffff).unwrap();
        g.redist_write(sgi + GICR_ICENABLER0, W, 0xffff_ffff).unwrap();
        g.redist_write(sgi + GICR_IGROUPR0, W, 0xffff_ffff).unwrap();
        for i in 0..8 {
            g.redist_write(sgi + GICR_IPRIORITYR + 4 * i, W, 0xa0a0_a0a0).unwrap();
        }
    }
    // request_irq: the UART (SPI 1 = INTID 33, level) and the timer PPI 27.
    enable(&mut g, 33);
    g.redist_write(sgi_base(0) + GICR_ISENABLER0, W, 1 << 27).unwrap();
    assert_eq!(g.unknown_accesses(), 0);
    assert_eq!(g.set_level(27, 0, true), VcpuSet::single(0));
    assert_eq!(g.set_level(33, 1, true), VcpuSet::single(0));
    cpu0.enter(&mut g);
    assert_eq!(
        cpu0.lrs[..2],
        [lr_value(lr::PENDING | lr::EOI, 0xa0, 27), lr_value(lr::PENDING | lr::EOI, 0xa0, 33)]
    );
}

#[test]
fn clean_flags_are_shared_with_the_hypervisor_not_with_clones() {
    let flags = alloc::sync::Arc::new(CleanFlags::new());
    let mut g = Vgic::with_clean_flags(
        VgicConfig { vcpus: 2, spis: 32, ..Default::default() },
        flags.clone(),
    )
    .unwrap();
    let mut cpu = Cpu::new(0);
    assert!(!flags.is_clean(0), "a new model is dirty");
    cpu.enter(&mut g);
    assert!(flags.is_clean(0) && !flags.is_clean(1));
    // A clone flushes without touching the original's flags.
    let mut copy = g.clone();
    copy.trigger_edge(40, 0);
    assert!(flags.is_clean(0));
    let mut lrs = [0; 4];
    copy.flush_lrs(1, &mut lrs);
    assert!(!flags.is_clean(1));
    // A fresh model on the same flags (a VM reset) starts dirty again.
    let _fresh = Vgic::with_clean_flags(
        VgicConfig { vcpus: 2, spis: 32, ..Default::default() },
        flags.clone(),
    )
    .unwrap();
    assert!(!flags.is_clean(0));
}

/// A hardware-linked level SPI (an assigned device's) raised by the hypervisor and not yet
/// acknowledged is withdrawn when its line has dropped; once the guest took it, or while it is
/// edge-triggered, nothing is withdrawn.
#[test]
fn level_pending_withdrawn_when_its_line_dropped() {
    let mut g = vgic(1);
    let mut cpu = Cpu::new(0);
    spi(&mut g, 62, 0x80, false);
    g.set_hw_link(62, 0, Some(62));
    g.trigger_edge(62, 0);
    cpu.enter(&mut g);
    assert_eq!(cpu.lrs[0] & lr::PENDING, lr::PENDING);
    cpu.exit(&mut g);
    assert_eq!(g.withdraw_pending(62, 0), Some(VcpuSet::single(0)));
    assert!(!g.irq_state(62, 0).unwrap().pending);
    assert_eq!(cpu.enter(&mut g).used, 0, "the list register no longer offers it");
    assert_eq!(g.withdraw_pending(62, 0), None, "nothing left to withdraw");

    // Acknowledged: the guest's deactivation is the physical one's; nothing to withdraw.
    g.trigger_edge(62, 0);
    cpu.enter(&mut g);
    cpu.ack(62);
    cpu.exit(&mut g);
    assert_eq!(g.withdraw_pending(62, 0), None);

    // Edge-triggered: an edge is not a line.
    spi(&mut g, 63, 0x80, true);
    g.trigger_edge(63, 0);
    assert_eq!(g.withdraw_pending(63, 0), None);
}
