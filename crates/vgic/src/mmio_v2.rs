//! Emulation of the GICv2 distributor (IHI 0048B, 4.3 "Distributor register
//! descriptions"), without the Security Extensions, as the guest sees it.
//!
//! The registers GICv2 shares with GICv3's distributor (`IGROUPR` ..
//! `ICACTIVER`, `IPRIORITYR`, `ICFGR`) are the same helpers as in `mmio.rs`;
//! what differs is that their INTID 0..32 part is the accessing vCPU's bank
//! rather than RAZ/WI, and the registers GICv3 leaves RAZ/WI under affinity
//! routing: `GICD_ITARGETSR` (the routing), `GICD_SGIR` (SGI generation) and
//! `GICD_[CS]PENDSGIR` (the pending state of each SGI source).
//!
//! Access rules as in `mmio.rs`: naturally aligned ([`MmioError::Unaligned`]),
//! word accesses, byte accesses too for `IPRIORITYR`, `ITARGETSR` and
//! `[CS]PENDSGIR` ([`MmioError::BadWidth`] otherwise). The registers fill the
//! first 4 KiB of the 64 KiB window; the rest reads as zero, ignores writes and
//! counts in [`Vgic::unknown_accesses`], as reserved offsets do. Registers
//! that exist but do nothing here are RAZ/WI without being counted:
//! `GICD_NSACR` (no Security Extensions), `GICD_SGIR` when read (write-only),
//! `GICD_ISPENDR0` / `GICD_ICPENDR0` bits of SGIs when written (each SGI
//! source's pending state is `GICD_[CS]PENDSGIR`'s), registers of INTIDs past
//! the last SPI.

use crate::mmio::{Bank, BitReg, Outcome, RAZ_WI, W8, W32, bit_register, check_frame, need};
use crate::regs::v2::*;
use crate::regs::{
    GICD_CPENDSGIR, GICD_CTLR, GICD_ICFGR, GICD_IGROUPR, GICD_IIDR, GICD_IPRIORITYR,
    GICD_ITARGETSR, GICD_NSACR, GICD_SGIR, GICD_SIZE, GICD_SPENDSGIR, GICD_TYPER,
};
use crate::{AccessWidth, MmioError, NO_SLOT, PRIVATE_COUNT, SGI_COUNT, VcpuSet, Vgic, v2_route};

/// The SGI bits of a word of a one-bit-per-interrupt register array.
const SGI_BITS: u64 = (1 << SGI_COUNT) - 1;

impl Vgic {
    /// A guest access by vCPU `vcpu` to the GICv2 distributor, `off` from `GICD_base`.
    pub(crate) fn dist_v2_access(
        &mut self,
        vcpu: usize,
        off: u64,
        width: AccessWidth,
        write: Option<u64>,
    ) -> Result<Outcome, MmioError> {
        check_frame(off, width, GICD_SIZE)?;
        let bank = Bank::Cpu(vcpu);
        Ok(match off {
            GICD_CTLR => {
                need(width, W32)?;
                let kick = write.map_or(VcpuSet::EMPTY, |v| self.write_gicd_ctlr(v as u32));
                (u64::from(self.ctlr), kick)
            }
            GICD_TYPER => {
                need(width, W32)?;
                (u64::from(self.gicd_typer_v2()), VcpuSet::EMPTY)
            }
            GICD_IIDR => {
                need(width, W32)?;
                (u64::from(IIDR), VcpuSet::EMPTY)
            }
            GICD_IGROUPR..GICD_IPRIORITYR => {
                need(width, W32)?;
                let (reg, byte_off) = bit_register(off);
                let mut write = write;
                if byte_off == 0
                    && let Some(w) = write
                {
                    match reg {
                        BitReg::SetPending | BitReg::ClearPending => write = Some(w & !SGI_BITS),
                        BitReg::SetActive => self.note_active_sources(vcpu, w as u16),
                        _ => {}
                    }
                }
                self.bitmap(bank, byte_off, reg, write)
            }
            GICD_IPRIORITYR..GICD_ITARGETSR => {
                need(width, W8 | W32)?;
                self.priority(bank, off - GICD_IPRIORITYR, width, write)
            }
            GICD_ITARGETSR..GICD_ICFGR => {
                need(width, W8 | W32)?;
                self.itargetsr(vcpu, off - GICD_ITARGETSR, width, write)
            }
            GICD_ICFGR..GICD_ICFGR_END => {
                need(width, W32)?;
                self.icfgr(bank, off - GICD_ICFGR, write)
            }
            GICD_NSACR..GICD_NSACR_END => {
                need(width, W32)?;
                RAZ_WI
            }
            GICD_SGIR => {
                need(width, W32)?;
                let kick = write.map_or(VcpuSet::EMPTY, |v| self.write_sgir(vcpu, v as u32));
                (0, kick)
            }
            GICD_CPENDSGIR..GICD_SPENDSGIR => {
                need(width, W8 | W32)?;
                self.sgi_sources_reg(vcpu, off - GICD_CPENDSGIR, width, write, false)
            }
            GICD_SPENDSGIR..GICD_SPENDSGIR_END => {
                need(width, W8 | W32)?;
                self.sgi_sources_reg(vcpu, off - GICD_SPENDSGIR, width, write, true)
            }
            ID_BLOCK..GICD_FRAME_SIZE => {
                need(width, W32)?;
                let id = if off == PIDR2 { PIDR2_VALUE } else { 0 };
                (u64::from(id), VcpuSet::EMPTY)
            }
            _ => self.unknown(),
        })
    }

    /// `ITLinesNumber` = (INTIDs / 32) - 1, `CPUNumber` = vCPUs - 1; `SecurityExtn` and
    /// `LSPI` = 0.
    fn gicd_typer_v2(&self) -> u32 {
        let it_lines = self.intid_limit() / 32 - 1;
        it_lines | (self.vcpus as u32 - 1) << GICD_TYPER_CPU_NUMBER_SHIFT
    }

    /// `GICD_ITARGETSR<n>`, one byte per interrupt, `first` = the INTID of the lowest byte.
    /// The bytes of SGIs and PPIs are read-only and each reads as the accessing vCPU alone.
    /// An SPI's byte keeps the bits of vCPUs that exist and routes the SPI (`v2_route`). With
    /// one vCPU every interrupt goes to it and the SPI bytes ignore writes, as on a
    /// uniprocessor GIC (QEMU's reads them as 0x01 too).
    fn itargetsr(
        &mut self,
        vcpu: usize,
        first: u64,
        width: AccessWidth,
        write: Option<u64>,
    ) -> Outcome {
        let existing = VcpuSet::all(self.vcpus).0;
        let mut v = 0;
        let mut kick = VcpuSet::EMPTY;
        for i in 0..width.bytes() as u32 {
            let intid = first as u32 + i;
            let byte = if intid < PRIVATE_COUNT {
                VcpuSet::single(vcpu).0 & existing
            } else if let Some(idx) = self.index(0, intid) {
                if let Some(w) = write
                    && self.vcpus > 1
                {
                    let targets = (w >> (8 * i)) as u8 & existing;
                    kick |= self.update(idx, |irq| {
                        irq.targets = targets;
                        irq.route = v2_route(targets);
                    });
                }
                self.irqs[idx].targets
            } else {
                0
            };
            v |= u64::from(byte) << (8 * i);
        }
        (v, kick)
    }

    /// `GICD_SGIR` written by vCPU `sender`: SGI `SGIINTID` becomes pending from `sender` at
    /// each target `TargetListFilter` selects (the reserved filter 3 selects none; list bits
    /// of vCPUs that do not exist are ignored). `NSATT` is ignored: there is one security
    /// state.
    fn write_sgir(&mut self, sender: usize, value: u32) -> VcpuSet {
        if sender >= self.vcpus {
            return VcpuSet::EMPTY;
        }
        let existing = VcpuSet::all(self.vcpus).0;
        let me = 1u8 << sender;
        let targets = match (value >> SGIR_FILTER_SHIFT) & 0b11 {
            SGIR_FILTER_LIST => (value >> SGIR_TARGET_LIST_SHIFT) as u8 & existing,
            SGIR_FILTER_OTHERS => existing & !me,
            SGIR_FILTER_SELF => me,
            _ => 0,
        };
        let sgi = (value & SGIR_INTID_MASK) as usize;
        let mut kick = VcpuSet::EMPTY;
        for target in VcpuSet(targets).iter() {
            kick |= self.pend_sgi(target, sgi, me);
        }
        kick
    }

    /// `GICD_CPENDSGIR<n>` (`set` false) or `GICD_SPENDSGIR<n>` (`set` true) of vCPU `vcpu`,
    /// `first` = the SGI of the lowest byte: one byte per SGI, one bit per source vCPU whose
    /// request is pending. Writing ones clears or sets those requests.
    fn sgi_sources_reg(
        &mut self,
        vcpu: usize,
        first: u64,
        width: AccessWidth,
        write: Option<u64>,
        set: bool,
    ) -> Outcome {
        if vcpu >= self.vcpus {
            return RAZ_WI;
        }
        let existing = VcpuSet::all(self.vcpus).0;
        let mut v = 0;
        let mut kick = VcpuSet::EMPTY;
        for i in 0..width.bytes() as usize {
            let sgi = first as usize + i;
            match write {
                Some(w) => {
                    let sources = (w >> (8 * i)) as u8 & existing;
                    kick |= if set {
                        self.pend_sgi(vcpu, sgi, sources)
                    } else {
                        self.clear_sgi(vcpu, sgi, sources)
                    };
                }
                None => {
                    let idx = vcpu * PRIVATE_COUNT as usize + sgi;
                    v |= u64::from(self.v2_sgi_requests(idx)) << (8 * i);
                }
            }
        }
        (v, kick)
    }

    /// SGI `sgi` of vCPU `target` becomes pending from each of `sources`.
    fn pend_sgi(&mut self, target: usize, sgi: usize, sources: u8) -> VcpuSet {
        let idx = target * PRIVATE_COUNT as usize + sgi;
        let waiting = &mut self.cpus[target].sgi_sources[sgi];
        let before = *waiting;
        *waiting |= sources;
        if *waiting == before {
            // Each request is pending already: they merge, as edges do.
            return VcpuSet::EMPTY;
        }
        if before == 0 {
            // The latch rises: what an edge does, on the path IPIs take.
            return self.raise_latch(idx);
        }
        self.revisit_lr(idx)
    }

    /// The requests of `sources` for SGI `sgi` of vCPU `target` are no longer pending,
    /// including one a list register holds pending (withdrawn as `ICPENDR` withdraws).
    fn clear_sgi(&mut self, target: usize, sgi: usize, sources: u8) -> VcpuSet {
        let idx = target * PRIVATE_COUNT as usize + sgi;
        let before = self.cpus[target].sgi_sources[sgi];
        let waiting = before & !sources;
        let in_lr = self.lr_pending_source(&self.irqs[idx]);
        let cancel = in_lr.is_some_and(|s| sources & 1 << s != 0);
        if waiting == before && !cancel {
            return VcpuSet::EMPTY;
        }
        self.cpus[target].sgi_sources[sgi] = waiting;
        let kick = self.update(idx, |irq| {
            irq.latch = waiting != 0;
            irq.lr_pending_cancelled |= cancel;
        });
        kick | self.revisit_lr(idx)
    }

    /// After a change to an SGI's sources that `update` cannot see (the latch stayed up): the
    /// list register holding it, if any, may need another value (its `EOI`, a pending state
    /// behind the active one). If so its vCPU revisits it and is kicked.
    fn revisit_lr(&mut self, idx: usize) -> VcpuSet {
        let irq = &self.irqs[idx];
        if irq.slot == NO_SLOT {
            return VcpuSet::EMPTY;
        }
        let home = usize::from(irq.home);
        if self.lr_value_for(idx) == self.cpus[home].lr_value[usize::from(irq.slot)] {
            return VcpuSet::EMPTY;
        }
        self.set_fresh(home, idx);
        VcpuSet::single(home)
    }

    /// `GICD_ISACTIVER0` written by vCPU `vcpu` with `sgis` set: an SGI made active this way
    /// has no acknowledged source; the writer stands in for it (KVM does the same), so that
    /// the list-register entry names a CPU the guest can deactivate it as.
    fn note_active_sources(&mut self, vcpu: usize, sgis: u16) {
        if vcpu >= self.vcpus {
            return;
        }
        for sgi in 0..SGI_COUNT as usize {
            let idx = vcpu * PRIVATE_COUNT as usize + sgi;
            if sgis & 1 << sgi != 0 && !self.irqs[idx].active {
                self.cpus[vcpu].sgi_active_source[sgi] = vcpu as u8;
            }
        }
    }
}
