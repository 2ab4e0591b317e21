//! Emulation of the GICv3 distributor frame and the redistributor frames,
//! and the register helpers the GICv2 distributor (`mmio_v2.rs`) shares.
//!
//! Access rules (IHI 0069 "GIC memory-mapped register access"): every access
//! must be naturally aligned ([`MmioError::Unaligned`] otherwise); 32-bit
//! registers take word accesses only, `IPRIORITYR` and `ITARGETSR` also byte
//! accesses, and the 64-bit registers (`GICD_IROUTER<n>`, `GICR_TYPER`, the
//! LPI registers) doubleword accesses or word accesses to either half.
//! Anything else at a known register is [`MmioError::BadWidth`]; the
//! hypervisor turns both into an external abort, as a bus would. Offsets
//! past the end of the frames are [`MmioError::Unmapped`].
//!
//! Offsets that name no register read as zero and ignore writes (the
//! architecture's "reserved: RES0"), and are counted in
//! [`Vgic::unknown_accesses`]. Registers that exist but do nothing in this
//! configuration are RAZ/WI without being counted: with affinity routing
//! the distributor's registers for INTIDs 0..32 and `GICD_ITARGETSR`,
//! `GICD_SGIR`, `GICD_[CS]PENDSGIR`; with one security state `GICD_NSACR`,
//! `GICD_IGRPMODR` and `GICR_IGRPMODR0`; without LPIs `GICR_PROPBASER`,
//! `GICR_PENDBASER` and friends; registers of INTIDs past the last SPI.

use crate::regs::*;
use crate::{
    AccessWidth, GicVersion, MmioError, PRIORITY_MASK, PRIVATE_COUNT, SGI_COUNT, VcpuSet, Vgic,
};

/// Permitted access widths, as a mask of byte counts.
pub(crate) const W8: u64 = 1;
pub(crate) const W32: u64 = 4;
const W64: u64 = 8;

/// Read value (ignored for writes) and the vCPUs a write affected.
pub(crate) type Outcome = (u64, VcpuSet);
pub(crate) const RAZ_WI: Outcome = (0, VcpuSet::EMPTY);

/// End (exclusive) of `GICD_IGRPMODR<n>`, n = 0..31.
const GICD_IGRPMODR_END: u64 = GICD_IGRPMODR + 0x80;
/// End (exclusive) of `GICD_SPENDSGIR<n>`, n = 0..3.
const GICD_SPENDSGIR_END: u64 = GICD_SPENDSGIR + 0x10;
/// End (exclusive) of `GICR_IPRIORITYR0..7`.
const GICR_IPRIORITYR_END: u64 = GICR_IPRIORITYR + 0x20;

pub(crate) fn need(width: AccessWidth, allowed: u64) -> Result<(), MmioError> {
    if width.bytes() & allowed != 0 { Ok(()) } else { Err(MmioError::BadWidth) }
}

pub(crate) fn check_frame(offset: u64, width: AccessWidth, size: u64) -> Result<(), MmioError> {
    if !offset.is_multiple_of(width.bytes()) {
        return Err(MmioError::Unaligned);
    }
    // Frame sizes are multiples of 8, so an aligned access never straddles.
    if offset >= size {
        return Err(MmioError::Unmapped);
    }
    Ok(())
}

/// The interrupts a register block addresses: the GICv3 distributor's SPIs,
/// the SGIs and PPIs of one GICv3 redistributor, or everything a vCPU sees in
/// the GICv2 distributor (its own SGIs and PPIs, and the SPIs).
#[derive(Clone, Copy)]
pub(crate) enum Bank {
    Dist,
    Redist(usize),
    Cpu(usize),
}

/// The one-bit-per-interrupt registers.
#[derive(Clone, Copy)]
pub(crate) enum BitReg {
    Group,
    SetEnable,
    ClearEnable,
    SetPending,
    ClearPending,
    SetActive,
    ClearActive,
}

/// The one-bit-per-interrupt register arrays, 0x80 bytes each from `GICD_IGROUPR`, in the order
/// both distributor layouts and a GICv3 redistributor's SGI frame give them.
const BIT_REGS: [BitReg; 7] = [
    BitReg::Group,
    BitReg::SetEnable,
    BitReg::ClearEnable,
    BitReg::SetPending,
    BitReg::ClearPending,
    BitReg::SetActive,
    BitReg::ClearActive,
];

/// Which bit register `off` (in `GICD_IGROUPR..GICD_IPRIORITYR`) falls in, and the byte offset
/// into its array.
pub(crate) fn bit_register(off: u64) -> (BitReg, u64) {
    let rel = off - GICD_IGROUPR;
    (BIT_REGS[(rel / 0x80) as usize], rel % 0x80)
}

/// The guest's GIC windows: where an access lands decides which registers it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The distributor, `GICD_base` + 64 KiB.
    Dist,
    /// The redistributor region: one `RD_base` + `SGI_base` pair (128 KiB) per vCPU, in vCPU
    /// order.
    Redist,
}

impl Vgic {
    /// A guest read of the GICv3 distributor frame (`GICD_*`), `offset` from
    /// `GICD_base`; [`frame_read`](Self::frame_read) with [`Frame::Dist`] on a GICv3 model
    /// ([`MmioError::Unmapped`] on a GICv2 one, whose distributor banks registers per vCPU).
    pub fn dist_read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.v3_frames()?;
        self.frame_read(Frame::Dist, 0, offset, width)
    }

    /// A guest write to the GICv3 distributor frame (see [`dist_read`](Self::dist_read)).
    /// Returns the vCPUs to kick.
    pub fn dist_write(
        &mut self,
        offset: u64,
        width: AccessWidth,
        value: u64,
    ) -> Result<VcpuSet, MmioError> {
        self.v3_frames()?;
        self.frame_write(Frame::Dist, 0, offset, width, value)
    }

    /// A guest read of the redistributor region, `offset` from the first
    /// redistributor's `RD_base`: vCPU `offset / 0x20000`, its `RD_base`
    /// frame in the first 64 KiB and `SGI_base` in the second.
    /// [`MmioError::Unmapped`] on a GICv2 model, which has none.
    pub fn redist_read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.frame_read(Frame::Redist, 0, offset, width)
    }

    /// A guest write to the redistributor region. Returns the vCPUs to kick.
    pub fn redist_write(
        &mut self,
        offset: u64,
        width: AccessWidth,
        value: u64,
    ) -> Result<VcpuSet, MmioError> {
        self.frame_write(Frame::Redist, 0, offset, width, value)
    }

    fn v3_frames(&self) -> Result<(), MmioError> {
        match self.version {
            GicVersion::V3 => Ok(()),
            GicVersion::V2 => Err(MmioError::Unmapped),
        }
    }

    pub(crate) fn dist_access(
        &mut self,
        off: u64,
        width: AccessWidth,
        write: Option<u64>,
    ) -> Result<Outcome, MmioError> {
        check_frame(off, width, GICD_SIZE)?;
        let bank = Bank::Dist;
        Ok(match off {
            GICD_CTLR => {
                need(width, W32)?;
                let kick = write.map_or(VcpuSet::EMPTY, |v| self.write_gicd_ctlr(v as u32));
                (u64::from(self.gicd_ctlr()), kick)
            }
            GICD_TYPER => {
                need(width, W32)?;
                (u64::from(self.gicd_typer()), VcpuSet::EMPTY)
            }
            GICD_IIDR => {
                need(width, W32)?;
                (u64::from(IIDR), VcpuSet::EMPTY)
            }
            // GICD_TYPER2: no vPE features (VIL, VID = 0). GICD_STATUSR:
            // optional, no errors are recorded.
            GICD_TYPER2 | GICD_STATUSR => {
                need(width, W32)?;
                RAZ_WI
            }
            GICD_IGROUPR..GICD_IPRIORITYR => {
                need(width, W32)?;
                let (reg, byte_off) = bit_register(off);
                self.bitmap(bank, byte_off, reg, write)
            }
            GICD_IPRIORITYR..GICD_ITARGETSR => {
                need(width, W8 | W32)?;
                self.priority(bank, off - GICD_IPRIORITYR, width, write)
            }
            GICD_ITARGETSR..GICD_ICFGR => {
                need(width, W8 | W32)?;
                RAZ_WI
            }
            GICD_ICFGR..GICD_IGRPMODR => {
                need(width, W32)?;
                self.icfgr(bank, off - GICD_ICFGR, write)
            }
            GICD_IGRPMODR..GICD_IGRPMODR_END | GICD_NSACR..GICD_SGIR | GICD_SGIR => {
                need(width, W32)?;
                RAZ_WI
            }
            GICD_CPENDSGIR..GICD_SPENDSGIR_END => {
                need(width, W8 | W32)?;
                RAZ_WI
            }
            GICD_IROUTER..GICD_IROUTER_END => {
                need(width, W32 | W64)?;
                self.irouter(off - GICD_IROUTER, width, write)
            }
            ID_BLOCK..GICD_SIZE => {
                need(width, W32)?;
                (id_reg(off), VcpuSet::EMPTY)
            }
            _ => self.unknown(),
        })
    }

    pub(crate) fn redist_access(
        &mut self,
        off: u64,
        width: AccessWidth,
        write: Option<u64>,
    ) -> Result<Outcome, MmioError> {
        check_frame(off, width, self.redist_region_size())?;
        let vcpu = (off / GICR_STRIDE) as usize;
        let off = off % GICR_STRIDE;
        if off < GICR_SGI_BASE {
            self.rd_base(vcpu, off, width, write)
        } else {
            self.sgi_base(vcpu, off - GICR_SGI_BASE, width, write)
        }
    }

    fn rd_base(
        &mut self,
        vcpu: usize,
        off: u64,
        width: AccessWidth,
        write: Option<u64>,
    ) -> Result<Outcome, MmioError> {
        Ok(match off {
            // GICR_CTLR: EnableLPIs RAZ/WI (GICR_TYPER.PLPIS = 0), RWP and
            // UWP always 0, DPG* RES0 (GICR_TYPER.DPGS = 0).
            // GICR_STATUSR: optional, no errors are recorded.
            GICR_CTLR | GICR_STATUSR => {
                need(width, W32)?;
                RAZ_WI
            }
            GICR_IIDR => {
                need(width, W32)?;
                (u64::from(IIDR), VcpuSet::EMPTY)
            }
            // 64-bit, read-only; word reads of either half.
            GICR_TYPER | 0x000c => {
                need(width, W32 | W64)?;
                (self.gicr_typer(vcpu) >> ((off - GICR_TYPER) * 8), VcpuSet::EMPTY)
            }
            GICR_WAKER => {
                need(width, W32)?;
                let kick = write.map_or(VcpuSet::EMPTY, |v| self.write_waker(vcpu, v as u32));
                (u64::from(self.gicr_waker(vcpu)), kick)
            }
            // No LPIs: the 64-bit LPI registers (and their upper halves)
            // are RAZ/WI.
            GICR_SETLPIR | 0x0044 | GICR_CLRLPIR | 0x004c | GICR_PROPBASER | 0x0074
            | GICR_PENDBASER | 0x007c | GICR_INVLPIR | 0x00a4 | GICR_INVALLR | 0x00b4 => {
                need(width, W32 | W64)?;
                RAZ_WI
            }
            // GICR_SYNCR.Busy = 0: nothing is ever in flight.
            GICR_SYNCR => {
                need(width, W32)?;
                RAZ_WI
            }
            ID_BLOCK..GICR_FRAME_SIZE => {
                need(width, W32)?;
                (id_reg(off), VcpuSet::EMPTY)
            }
            _ => self.unknown(),
        })
    }

    fn sgi_base(
        &mut self,
        vcpu: usize,
        off: u64,
        width: AccessWidth,
        write: Option<u64>,
    ) -> Result<Outcome, MmioError> {
        let bank = Bank::Redist(vcpu);
        if (GICR_IGROUPR0..GICD_IPRIORITYR).contains(&off)
            && let (reg, 0) = bit_register(off)
        {
            need(width, W32)?;
            return Ok(self.bitmap(bank, 0, reg, write));
        }
        Ok(match off {
            GICR_IPRIORITYR..GICR_IPRIORITYR_END => {
                need(width, W8 | W32)?;
                self.priority(bank, off - GICR_IPRIORITYR, width, write)
            }
            GICR_ICFGR0 | GICR_ICFGR1 => {
                need(width, W32)?;
                self.icfgr(bank, off - GICR_ICFGR0, write)
            }
            GICR_IGRPMODR0 | GICR_NSACR => {
                need(width, W32)?;
                RAZ_WI
            }
            _ => self.unknown(),
        })
    }

    pub(crate) fn unknown(&mut self) -> Outcome {
        self.unknown_accesses += 1;
        RAZ_WI
    }

    /// Index of INTID `intid` in `bank`, if the bank has it.
    fn bank_index(&self, bank: Bank, intid: u32) -> Option<usize> {
        match bank {
            // With affinity routing the distributor's registers for SGIs
            // and PPIs are RAZ/WI: those live in the redistributors.
            Bank::Dist if intid < PRIVATE_COUNT => None,
            Bank::Dist => self.index(0, intid),
            Bank::Redist(_) if intid >= PRIVATE_COUNT => None,
            Bank::Redist(vcpu) | Bank::Cpu(vcpu) => self.index(vcpu, intid),
        }
    }

    /// `IGROUPR`, `IS/ICENABLER`, `IS/ICPENDR`, `IS/ICACTIVER`: one bit per
    /// interrupt, `byte_off` from the start of the register array. The set
    /// and clear registers read alike; writing 0 to them does nothing.
    pub(crate) fn bitmap(
        &mut self,
        bank: Bank,
        byte_off: u64,
        reg: BitReg,
        write: Option<u64>,
    ) -> Outcome {
        let first = (byte_off * 8) as u32;
        let Some(value) = write else {
            let mut v = 0;
            for i in 0..32 {
                let Some(idx) = self.bank_index(bank, first + i) else { continue };
                let irq = &self.irqs[idx];
                let bit = match reg {
                    BitReg::Group => irq.group1,
                    BitReg::SetEnable | BitReg::ClearEnable => irq.enabled,
                    BitReg::SetPending | BitReg::ClearPending => self.is_pending(idx),
                    BitReg::SetActive | BitReg::ClearActive => irq.active,
                };
                v |= u64::from(bit) << i;
            }
            return (v, VcpuSet::EMPTY);
        };
        let mut kick = VcpuSet::EMPTY;
        for i in 0..32 {
            let one = value & (1 << i) != 0;
            if !one && !matches!(reg, BitReg::Group) {
                continue;
            }
            let Some(idx) = self.bank_index(bank, first + i) else { continue };
            kick |= match reg {
                BitReg::Group => self.update(idx, |irq| irq.group1 = one),
                BitReg::SetEnable => self.update(idx, |irq| irq.enabled = true),
                BitReg::ClearEnable => self.update(idx, |irq| irq.enabled = false),
                BitReg::SetPending => self.update(idx, |irq| irq.latch = true),
                BitReg::ClearPending => {
                    // A pending state already handed to a list register is
                    // withdrawn too (the owner is kicked to rewrite it).
                    let in_lr = self.lr_pending(&self.irqs[idx]);
                    self.update(idx, |irq| {
                        irq.latch = false;
                        irq.lr_pending_cancelled |= in_lr;
                    })
                }
                BitReg::SetActive => self.update(idx, |irq| irq.active = true),
                BitReg::ClearActive => self.update(idx, |irq| irq.active = false),
            };
        }
        (0, kick)
    }

    /// `IPRIORITYR`: one byte per interrupt, `first` = the byte offset =
    /// the INTID of the lowest byte. 5 priority bits are kept.
    pub(crate) fn priority(
        &mut self,
        bank: Bank,
        first: u64,
        width: AccessWidth,
        write: Option<u64>,
    ) -> Outcome {
        let first = first as u32;
        let mut v = 0;
        let mut kick = VcpuSet::EMPTY;
        for i in 0..width.bytes() as u32 {
            let Some(idx) = self.bank_index(bank, first + i) else { continue };
            match write {
                Some(w) => {
                    let p = (w >> (8 * i)) as u8 & PRIORITY_MASK;
                    kick |= self.update(idx, |irq| irq.priority = p);
                }
                None => v |= u64::from(self.irqs[idx].priority) << (8 * i),
            }
        }
        (v, kick)
    }

    /// `ICFGR`: two bits per interrupt, of which `Int_config[1]` (the odd
    /// bit) is 1 for edge-triggered; the even bit is RES0. SGIs are always
    /// edge-triggered (`GICR_ICFGR0` is read-only). PPIs are configurable
    /// through `GICR_ICFGR1`, as in QEMU (the architecture leaves it
    /// IMPLEMENTATION DEFINED; KVM makes them read-only).
    pub(crate) fn icfgr(&mut self, bank: Bank, byte_off: u64, write: Option<u64>) -> Outcome {
        let first = (byte_off * 4) as u32;
        let mut v = 0;
        let mut kick = VcpuSet::EMPTY;
        for i in 0..16 {
            let intid = first + i;
            let Some(idx) = self.bank_index(bank, intid) else { continue };
            let bit = 2 << (2 * i);
            match write {
                Some(w) if intid >= SGI_COUNT => {
                    let edge = w & bit != 0;
                    kick |= self.update(idx, |irq| irq.edge = edge);
                }
                Some(_) => {}
                None => {
                    if self.irqs[idx].edge {
                        v |= bit;
                    }
                }
            }
        }
        (v, kick)
    }

    /// `GICD_IROUTER<n>`, `rel` bytes into the array (n = rel / 8). Word
    /// accesses read or replace one half.
    fn irouter(&mut self, rel: u64, width: AccessWidth, write: Option<u64>) -> Outcome {
        let intid = (rel / 8) as u32;
        let Some(idx) = self.bank_index(Bank::Dist, intid) else { return RAZ_WI };
        let current = self.irqs[idx].route;
        let (shift, mask) = match width {
            AccessWidth::Double => (0, u64::MAX),
            _ => ((rel % 8) * 8, 0xffff_ffff),
        };
        match write {
            None => ((current >> shift) & mask, VcpuSet::EMPTY),
            Some(w) => {
                let route = ((current & !(mask << shift)) | ((w & mask) << shift)) & IROUTER_MASK;
                (0, self.update(idx, |irq| irq.route = route))
            }
        }
    }

    fn gicd_ctlr(&self) -> u32 {
        self.ctlr | GICD_CTLR_ARE | GICD_CTLR_DS
    }

    /// Only the group enables are writable (in either version). `RWP` stays 0: the effect of a
    /// write is complete when the write returns, kicks included.
    pub(crate) fn write_gicd_ctlr(&mut self, value: u32) -> VcpuSet {
        let enables = value & (GICD_CTLR_ENABLE_GRP0 | GICD_CTLR_ENABLE_GRP1);
        if enables == self.ctlr {
            return VcpuSet::EMPTY;
        }
        self.ctlr = enables;
        self.global_change()
    }

    /// `ITLinesNumber` = (INTIDs / 32) - 1; `IDbits` = 9 (10-bit INTIDs, no
    /// LPIs); `CPUNumber` = 0 because affinity routing cannot be disabled
    /// (the field counts PEs for the legacy non-ARE mode; QEMU reports 0 for
    /// the same reason); `SecurityExtn`, `MBIS`, `LPIS`, `A3V`, `RSS`,
    /// `ESPI` = 0; `No1N` = 0 because `Interrupt_Routing_Mode` = 1 is
    /// honoured (see `route_target`).
    fn gicd_typer(&self) -> u32 {
        let it_lines = self.intid_limit() / 32 - 1;
        it_lines | 9 << GICD_TYPER_IDBITS_SHIFT
    }

    /// `Affinity_Value` = 0.0.0.vcpu, `Processor_Number` = vcpu, `Last` on
    /// the final redistributor (how Linux's `gic_iterate_rdists` knows where
    /// the region ends); `PLPIS`, `VLPIS`, `DirectLPI`, `DPGS` = 0.
    fn gicr_typer(&self, vcpu: usize) -> u64 {
        let mut t = (vcpu as u64) << GICR_TYPER_AFFINITY_SHIFT
            | (vcpu as u64) << GICR_TYPER_PROCESSOR_NUMBER_SHIFT;
        if vcpu == self.vcpus - 1 {
            t |= GICR_TYPER_LAST;
        }
        t
    }

    /// `ChildrenAsleep` mirrors `ProcessorSleep` at once, so the guest's
    /// wait loop (Linux `gic_enable_redist`) ends on its first read.
    fn gicr_waker(&self, vcpu: usize) -> u32 {
        if self.cpus[vcpu].asleep {
            GICR_WAKER_PROCESSOR_SLEEP | GICR_WAKER_CHILDREN_ASLEEP
        } else {
            0
        }
    }

    /// Sleep state matters to delivery only through the "any" routing
    /// target (`GICD_IROUTER.Interrupt_Routing_Mode` = 1), which picks the
    /// first awake vCPU. Interrupts for a sleeping redistributor are still
    /// delivered: a guest only sets `ProcessorSleep` right before powering
    /// the vCPU off.
    fn write_waker(&mut self, vcpu: usize, value: u32) -> VcpuSet {
        let asleep = value & GICR_WAKER_PROCESSOR_SLEEP != 0;
        if asleep == self.cpus[vcpu].asleep {
            return VcpuSet::EMPTY;
        }
        let any_before = self.any_target();
        self.cpus[vcpu].asleep = asleep;
        if self.any_target() != any_before { self.global_change() } else { VcpuSet::EMPTY }
    }
}

/// The CoreSight ID block: only `PIDR2` (the architecture revision, which
/// Linux checks) is non-zero.
fn id_reg(off: u64) -> u64 {
    if off == PIDR2 { u64::from(PIDR2_VALUE) } else { 0 }
}
