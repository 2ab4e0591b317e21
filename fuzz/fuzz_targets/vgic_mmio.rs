//! Fuzzes the virtual GIC model, both versions: guest accesses to the distributor and
//! redistributor frames (arbitrary offsets, widths and values, and for GICv2 the accessing
//! vCPU), interleaved with device lines, edges, SGIs, hardware links, redirections,
//! list-register flushes and the guest acknowledging and completing what the list registers
//! hold.
//!
//! Input layout: 3 configuration bytes (vCPUs; SPIs, up to 96 unless bit 7
//! is set, and bit 6 for a GICv2 model; list registers per vCPU), then operations, each an
//! opcode byte and its arguments (missing bytes read as zero; see the `match` below and
//! `fuzz/seeds/generate.py`, whose seeds are GICv3 ones; a GICv2 model's distributor
//! accesses take a vCPU byte after the width). The list registers the "hardware" holds are
//! tracked here: a flush writes them, the guest changes only their `State`
//! field (never bringing an invalid entry back, as the hardware never does),
//! a sync reads them back.
//!
//! Checked besides "no panic": a flush never uses more list registers than
//! it was given and zeroes the rest; every entry it writes is free (zero) or
//! valid, the last used one valid; a valid entry names an implemented INTID and agrees with `lr_intid` and `irq_state`; no interrupt
//! is in two list registers (of one vCPU for SGIs/PPIs, of any vCPU for
//! SPIs); `more_pending` only when every list register is used; priorities
//! keep 5 bits; reads return no bits beyond the access width; a flush that
//! `is_clean` says may be skipped returns what the previous one wrote; what
//! `irq_state` says is deliverable is what `highest_pending` and (when there
//! is room) the flush pick. Only a GICv2 model's SGI entries carry a source CPU (one that
//! exists), and every entry of a GICv2 model survives the trip through `GICH_LR`; a GICv2
//! SGI is pending exactly when `GICD_SPENDSGIR` shows a source.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgic::lr::{self, LrState};
use vgic::regs::*;
use vgic::{AccessWidth, Frame, GicVersion, MAX_LRS, Vgic, VgicConfig};

/// Enough for a 17-entry slice (one more than the architecture allows, to
/// exercise the cap) plus a too-long sync.
const HW_LRS: usize = MAX_LRS + 2;

struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    fn width(&mut self) -> AccessWidth {
        [AccessWidth::Byte, AccessWidth::Half, AccessWidth::Word, AccessWidth::Double]
            [usize::from(self.u8() % 4)]
    }
    /// Mostly an implemented INTID (or a little past the last), sometimes any.
    fn intid(&mut self, limit: u32) -> u32 {
        let sel = self.u8();
        if sel == 0xff { self.u32() } else { u32::from(self.u16()) % (limit + 8) }
    }
}

/// Distributor registers and how far past their start the fuzzer reaches.
const DIST: &[(u64, u64)] = &[
    (GICD_CTLR, 0x80),
    (GICD_IGROUPR, 0x80),
    (GICD_ISENABLER, 0x80),
    (GICD_ICENABLER, 0x80),
    (GICD_ISPENDR, 0x80),
    (GICD_ICPENDR, 0x80),
    (GICD_ISACTIVER, 0x80),
    (GICD_ICACTIVER, 0x80),
    (GICD_IPRIORITYR, 0x400),
    (GICD_ITARGETSR, 0x400),
    (GICD_ICFGR, 0x100),
    (GICD_IGRPMODR, 0x80),
    (GICD_NSACR, 0x140),
    (GICD_IROUTER, 0x2000),
    (ID_BLOCK, 0x30),
];

/// The GICv2 distributor's registers.
const DIST_V2: &[(u64, u64)] = &[
    (GICD_CTLR, 0x80),
    (GICD_IGROUPR, 0x80),
    (GICD_ISENABLER, 0x80),
    (GICD_ICENABLER, 0x80),
    (GICD_ISPENDR, 0x80),
    (GICD_ICPENDR, 0x80),
    (GICD_ISACTIVER, 0x80),
    (GICD_ICACTIVER, 0x80),
    (GICD_IPRIORITYR, 0x400),
    (GICD_ITARGETSR, 0x400),
    (GICD_ICFGR, 0x100),
    (GICD_NSACR, 0x100),
    (GICD_SGIR, 0x40),
    (v2::ID_BLOCK, 0x30),
    (v2::GICD_FRAME_SIZE, 0x100),
];

/// Redistributor registers, from `RD_base` (the `SGI_base` ones include the
/// frame offset).
const REDIST: &[(u64, u64)] = &[
    (GICR_CTLR, 0x100),
    (GICR_SGI_BASE + GICR_IGROUPR0, 0x400),
    (GICR_SGI_BASE + GICR_IPRIORITYR, 0x20),
    (GICR_SGI_BASE + GICR_ICFGR0, 0x10),
    (GICR_SGI_BASE + GICR_IGRPMODR0, 0x180),
    (ID_BLOCK, 0x30),
    (GICR_SGI_BASE + ID_BLOCK, 0x30),
];

/// An offset into a frame: usually near a register, aligned to the access
/// most of the time; sometimes anything.
fn offset(b: &mut Bytes, table: &[(u64, u64)], frame: u64, width: AccessWidth) -> u64 {
    let sel = b.u8();
    let delta = u64::from(b.u16());
    if sel >= 0xf0 {
        return b.u64();
    }
    let (base, span) = table[usize::from(sel) % table.len()];
    let mut off = frame + base + delta % span;
    if sel & 0x80 == 0 {
        off &= !(width.bytes() - 1);
    }
    off
}

struct Hw {
    /// What each vCPU's list registers hold.
    lrs: Vec<[u64; HW_LRS]>,
    /// What the last flush of each vCPU wrote, and its `more_pending`.
    flushed: Vec<([u64; HW_LRS], bool)>,
    /// How many list registers each flush is given.
    n: usize,
}

fn check_read(v: Result<u64, vgic::MmioError>, width: AccessWidth) {
    if let Ok(v) = v {
        assert_eq!(v & !width.mask(), 0, "{v:#x} read with a {width} access");
    }
}

fn flush(g: &mut Vgic, hw: &mut Hw, vcpu: usize) {
    let v2 = g.version() == GicVersion::V2;
    let n = hw.n;
    let clean = g.is_clean(vcpu, n);
    let lrs = &mut hw.lrs[vcpu][..n];
    lrs.fill(0xdead_beef); // whatever the previous contents, flush rewrites all
    let r = g.flush_lrs(vcpu, lrs);
    let (before, more_before) = &hw.flushed[vcpu];
    if clean {
        // A flush the hypervisor may skip changes nothing.
        assert_eq!(lrs, &before[..n], "is_clean, but the flush differs");
        assert_eq!((r.more_pending, r.kick), (*more_before, vgic::VcpuSet::EMPTY));
    }
    hw.flushed[vcpu].0[..n].copy_from_slice(lrs);
    hw.flushed[vcpu].1 = r.more_pending;
    let lrs = &hw.lrs[vcpu][..n];
    let cap = n.min(MAX_LRS);
    assert!(r.used <= cap, "flush used {} of {n} list registers", r.used);
    assert!(lrs[r.used..].iter().all(|&v| v == 0), "{lrs:x?}");
    if r.more_pending {
        assert_eq!(r.used, cap, "more_pending with a free list register");
    }
    // An incremental flush leaves the entries the guest finished as zeroes
    // (free, invalid) among the others; the last used entry is always valid.
    if r.used > 0 {
        assert_ne!(lrs[r.used - 1], 0, "used = {} ends in a free entry: {lrs:x?}", r.used);
    }
    if r.more_pending {
        assert!(lrs[..r.used].iter().all(|&v| v != 0), "more_pending with a free entry");
    }
    for (slot, &v) in lrs[..r.used].iter().enumerate() {
        if v == 0 {
            assert_eq!(g.lr_intid(vcpu, slot), None, "LR{slot} free, but the model has an INTID");
            continue;
        }
        assert_ne!(LrState::of(v), LrState::Invalid, "LR{slot} = {v:#x}");
        let intid = lr::vintid(v);
        assert!(intid < g.intid_limit(), "LR{slot} = {v:#x}");
        assert_eq!(lr::priority(v) & !vgic::PRIORITY_MASK, 0);
        // (With HW = 1, bit 41 is pINTID[9], not EOI.)
        if let Some(p) = lr::pintid(v) {
            assert!((16..1020).contains(&p), "LR{slot} = {v:#x}");
            assert_eq!(g.irq_state(intid, vcpu).unwrap().hw, Some(p), "LR{slot} = {v:#x}");
        } else {
            // Bits 40:32 are RES0 but for a GICv2 SGI's source.
            let reserved = (v >> 32) & 0x1ff;
            if v2 && intid < 16 {
                assert!(lr::sgi_source(v) < g.vcpus() && reserved >> 3 == 0, "LR{slot} = {v:#x}");
            } else {
                assert_eq!(reserved, 0, "LR{slot} = {v:#x}");
            }
        }
        if v2 {
            assert_eq!(lr::v2::from_gich(lr::v2::to_gich(v)), v, "LR{slot} = {v:#x}");
        }
        assert_eq!(g.lr_intid(vcpu, slot), Some(intid));
        let st = g.irq_state(intid, vcpu).expect("a flushed INTID exists");
        assert_eq!(st.lr, Some((vcpu, slot)));
        assert_eq!(st.owner, Some(vcpu));
    }
    check_unique(g, hw);
    // With room to spare, everything deliverable made it in (a full scan,
    // so only for the small configurations).
    if !r.more_pending && g.intid_limit() <= 128 {
        let lrs = hw.lrs[vcpu];
        for (_, intid) in deliverable(g, vcpu) {
            let held = lrs[..n].iter().any(|&v| lr::vintid(v) == intid);
            assert!(held, "INTID {intid} deliverable to vCPU {vcpu} but not flushed: {lrs:x?}");
        }
    }
}

/// The interrupts `vcpu` could take now, as `(priority, INTID)`, worked out
/// from `irq_state` and `GICD_CTLR` for every INTID (not from the model's own
/// bookkeeping of which interrupts may be pending).
fn deliverable(g: &mut Vgic, vcpu: usize) -> Vec<(u8, u32)> {
    let ctlr = g.frame_read(Frame::Dist, 0, GICD_CTLR, AccessWidth::Word).unwrap();
    (0..g.intid_limit())
        .filter_map(|intid| {
            let st = g.irq_state(intid, vcpu)?;
            let group = if st.group1 { 2 } else { 1 };
            (st.owner == Some(vcpu) && st.pending && st.enabled && !st.active && ctlr & group != 0)
                .then_some((st.priority, intid))
        })
        .collect()
}

/// No interrupt is in two valid list registers: SGIs and PPIs per vCPU,
/// SPIs across all vCPUs.
fn check_unique(g: &Vgic, hw: &Hw) {
    let mut spis = Vec::new();
    for (vcpu, lrs) in hw.lrs.iter().enumerate().take(g.vcpus()) {
        let mut private = Vec::new();
        for &v in lrs.iter().filter(|&&v| LrState::of(v) != LrState::Invalid) {
            let intid = lr::vintid(v);
            let seen = if intid < 32 { &mut private } else { &mut spis };
            assert!(!seen.contains(&intid), "INTID {intid} in two list registers (vCPU {vcpu})");
            seen.push(intid);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes { data, pos: 0 };
    let (c0, c1, c2) = (b.u8(), b.u8(), b.u8());
    // Mostly up to 96 SPIs (cheap to check exhaustively), sometimes up to 992.
    let spis = if c1 & 0x80 == 0 { u32::from(c1 % 4) * 32 } else { u32::from(c1 % 32) * 32 };
    let version = if c1 & 0x40 != 0 { GicVersion::V2 } else { GicVersion::V3 };
    let config = VgicConfig { vcpus: usize::from(c0 % 10), spis, version };
    let mut g = match Vgic::new(config) {
        Ok(g) => g,
        Err(_) => {
            assert!(config.vcpus == 0 || config.vcpus > vgic::MAX_VCPUS || config.spis > 960);
            // An odd SPI count is refused too.
            assert!(Vgic::new(VgicConfig { vcpus: 1, spis: 33, version }).is_err());
            return;
        }
    };
    let vcpus = g.vcpus();
    let v2 = version == GicVersion::V2;
    let mut hw = Hw {
        lrs: vec![[0; HW_LRS]; vcpus],
        flushed: vec![([0; HW_LRS], false); vcpus],
        n: 1 + usize::from(c2) % (MAX_LRS + 1),
    };
    let limit = g.intid_limit();

    let mut ops = 0;
    while !b.done() && ops < 512 {
        ops += 1;
        let op = b.u8();
        let unknown_before = g.unknown_accesses();
        // Bit 7 of the opcode is a flag (write, line level); the rest selects.
        match (op & 0x7f) % 13 {
            0 | 1 => {
                let width = b.width();
                // The accessing vCPU (sometimes one that does not exist) matters to GICv2 only.
                let (vcpu, table) =
                    if v2 { (usize::from(b.u8() % 10), DIST_V2) } else { (0, DIST) };
                let off = offset(&mut b, table, 0, width);
                if op & 0x80 != 0 {
                    let value = b.u64();
                    let _ = g.frame_write(Frame::Dist, vcpu, off, width, value);
                } else {
                    check_read(g.frame_read(Frame::Dist, vcpu, off, width), width);
                }
            }
            2 | 3 => {
                let width = b.width();
                let vcpu = b.u8() % 9;
                let frame = u64::from(vcpu) * GICR_STRIDE;
                let off = offset(&mut b, REDIST, frame, width);
                let result = if op & 0x80 != 0 {
                    let value = b.u64();
                    g.frame_write(Frame::Redist, usize::from(vcpu), off, width, value).map(|_| 0)
                } else {
                    let read = g.frame_read(Frame::Redist, usize::from(vcpu), off, width);
                    check_read(read, width);
                    read
                };
                if v2 {
                    assert_eq!(result, Err(vgic::MmioError::Unmapped), "a GICv2 model has no GICR");
                }
            }
            4 => {
                let intid = b.intid(limit);
                let (vcpu, level) = (usize::from(b.u8() % 10), op & 0x80 != 0);
                let _ = g.set_level(intid, vcpu, level);
            }
            5 => {
                let intid = b.intid(limit);
                let _ = g.trigger_edge(intid, usize::from(b.u8() % 10));
            }
            6 => {
                let sender = usize::from(b.u8() % 10);
                let _ = g.send_sgi(sender, b.u64());
            }
            7 => flush(&mut g, &mut hw, usize::from(b.u8()) % vcpus),
            8 => {
                // The guest acknowledges, completes or deactivates: only
                // `State` changes, and an invalid entry stays invalid.
                let vcpu = usize::from(b.u8()) % vcpus;
                let slot = usize::from(b.u8()) % hw.n;
                let state = u64::from(b.u8() % 4) << 62;
                let v = &mut hw.lrs[vcpu][slot];
                if LrState::of(*v) != LrState::Invalid {
                    *v = (*v & !lr::STATE_MASK) | state;
                }
            }
            9 => {
                let vcpu = usize::from(b.u8()) % vcpus;
                let n = usize::from(b.u8()) % (HW_LRS + 1);
                let _ = g.sync_lrs(vcpu, &hw.lrs[vcpu][..n]);
            }
            10 => {
                let intid = b.intid(limit);
                let vcpu = usize::from(b.u8() % 10);
                let sel = b.u8();
                let p = match sel % 3 {
                    0 => None,
                    1 => Some(intid),
                    _ => Some(u32::from(b.u16())),
                };
                if let Some(kick) = g.set_hw_link(intid, vcpu, p) {
                    assert_eq!(kick.0 & !vgic::VcpuSet::all(vcpus).0, 0);
                }
            }
            12 => {
                // The interrupt distributor redirects an SPI, or lifts it (bit 7).
                let intid = b.intid(limit);
                let to = (op & 0x80 == 0).then(|| usize::from(b.u8() % 10));
                if let Some(kick) = g.redirect_spi(intid, to) {
                    assert_eq!(kick.0 & !vgic::VcpuSet::all(vcpus).0, 0);
                    if let Some(v) = to
                        && g.irq_state(intid, 0).is_some_and(|st| st.lr.is_none() && !st.active)
                    {
                        assert_eq!(g.irq_state(intid, 0).unwrap().owner, Some(v));
                    }
                }
            }
            _ => {
                let vcpu = usize::from(b.u8()) % vcpus;
                if limit <= 128 {
                    let best = deliverable(&mut g, vcpu).into_iter().min();
                    assert_eq!(g.highest_pending(vcpu), best.map(|(prio, intid)| (intid, prio)));
                }
                if let Some((intid, prio)) = g.highest_pending(vcpu) {
                    assert!(intid < limit);
                    assert_eq!(prio & !vgic::PRIORITY_MASK, 0);
                    assert!(g.pending_for(vcpu));
                    let st = g.irq_state(intid, vcpu).unwrap();
                    assert!(st.pending && st.enabled && !st.active);
                } else {
                    assert!(!g.pending_for(vcpu));
                }
                let intid = b.intid(limit);
                let who = usize::from(b.u8() % 10);
                if let Some(st) = g.irq_state(intid, who) {
                    assert!(intid < limit);
                    if v2 && intid < 16 {
                        let spendsgir = GICD_SPENDSGIR + u64::from(intid);
                        let sources = g.frame_read(Frame::Dist, who, spendsgir, AccessWidth::Byte);
                        assert_eq!(sources.unwrap() != 0, st.pending, "SGI {intid} of vCPU {who}");
                    }
                    assert_eq!(st.priority & !vgic::PRIORITY_MASK, 0);
                    if let Some((v, slot)) = st.lr {
                        assert!(v < vcpus && slot < MAX_LRS);
                        assert_eq!(g.lr_intid(v, slot), Some(intid));
                    }
                    if let Some(o) = st.owner {
                        assert!(o < vcpus);
                    }
                } else {
                    assert!(intid >= limit || (intid < 32 && who >= vcpus));
                }
            }
        }
        assert!(g.unknown_accesses() >= unknown_before);
    }
});
