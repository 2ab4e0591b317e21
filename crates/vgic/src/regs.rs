//! Register offsets and fields of the GICv3 distributor and redistributor
//! frames (IHI 0069, chapter 12 "Programmers' model"), as far as this model
//! implements them, and in [`v2`] what the GICv2 distributor (IHI 0048B)
//! has differently. Names are the specifications'.

/// Size of the distributor frame (`GICD_*`).
pub const GICD_SIZE: u64 = 0x1_0000;
/// Size of one redistributor frame: `RD_base` and `SGI_base` each.
pub const GICR_FRAME_SIZE: u64 = 0x1_0000;
/// Offset of a redistributor's `SGI_base` frame from its `RD_base`.
pub const GICR_SGI_BASE: u64 = GICR_FRAME_SIZE;
/// Distance between consecutive redistributors: two 64 KiB frames, no
/// `VLPI_base`/`Reserved` frames because `GICR_TYPER.VLPIS` is 0.
pub const GICR_STRIDE: u64 = 2 * GICR_FRAME_SIZE;

// --- Distributor (offsets from GICD_base) ---
pub const GICD_CTLR: u64 = 0x0000;
pub const GICD_TYPER: u64 = 0x0004;
pub const GICD_IIDR: u64 = 0x0008;
pub const GICD_TYPER2: u64 = 0x000c;
pub const GICD_STATUSR: u64 = 0x0010;
pub const GICD_IGROUPR: u64 = 0x0080;
pub const GICD_ISENABLER: u64 = 0x0100;
pub const GICD_ICENABLER: u64 = 0x0180;
pub const GICD_ISPENDR: u64 = 0x0200;
pub const GICD_ICPENDR: u64 = 0x0280;
pub const GICD_ISACTIVER: u64 = 0x0300;
pub const GICD_ICACTIVER: u64 = 0x0380;
pub const GICD_IPRIORITYR: u64 = 0x0400;
pub const GICD_ITARGETSR: u64 = 0x0800;
pub const GICD_ICFGR: u64 = 0x0c00;
pub const GICD_IGRPMODR: u64 = 0x0d00;
pub const GICD_NSACR: u64 = 0x0e00;
pub const GICD_SGIR: u64 = 0x0f00;
pub const GICD_CPENDSGIR: u64 = 0x0f10;
pub const GICD_SPENDSGIR: u64 = 0x0f20;
/// `GICD_IROUTER<n>` is at `0x6000 + 8n` for SPI INTIDs n = 32..=1019.
pub const GICD_IROUTER: u64 = 0x6000;
/// End of the `GICD_IROUTER<n>` array (exclusive): n = 1019 is the last.
pub const GICD_IROUTER_END: u64 = GICD_IROUTER + 8 * 1020;
/// Start of the CoreSight identification block (`GICD_PIDR4` ..
/// `GICD_CIDR3`), in both distributor and redistributor frames.
pub const ID_BLOCK: u64 = 0xffd0;
/// `GICD_PIDR2` / `GICR_PIDR2`.
pub const PIDR2: u64 = 0xffe8;

/// `GICD_CTLR.EnableGrp0` (security disabled view, `DS` = 1).
pub const GICD_CTLR_ENABLE_GRP0: u32 = 1 << 0;
/// `GICD_CTLR.EnableGrp1` (security disabled view; Linux names it
/// `GICD_CTLR_ENABLE_G1A` and writes bits 0 and 1 together).
pub const GICD_CTLR_ENABLE_GRP1: u32 = 1 << 1;
/// `GICD_CTLR.ARE`: affinity routing, RAO/WI here.
pub const GICD_CTLR_ARE: u32 = 1 << 4;
/// `GICD_CTLR.DS`: security disabled, RAO/WI (single security state).
pub const GICD_CTLR_DS: u32 = 1 << 6;
/// `GICD_CTLR.RWP`: register write pending, always 0 (writes take effect at
/// once in the model).
pub const GICD_CTLR_RWP: u32 = 1 << 31;

/// `GICD_TYPER.IDbits` shift: number of INTID bits minus one.
pub const GICD_TYPER_IDBITS_SHIFT: u32 = 19;

/// `GICD_IROUTER.Interrupt_Routing_Mode` (IRM): 1 = "any participating PE".
pub const IROUTER_IRM: u64 = 1 << 31;
/// The implemented `GICD_IROUTER` bits: `Aff3[39:32]`, `IRM[31]`,
/// `Aff2[23:16]`, `Aff1[15:8]`, `Aff0[7:0]`; the rest is RES0.
pub const IROUTER_MASK: u64 = 0xff_0000_0000 | IROUTER_IRM | 0xff_ffff;

/// `GICD_IIDR` / `GICR_IIDR`: Implementer 0x43B (Arm's JEP106 code, as KVM and
/// QEMU report), Revision 0, Variant 0, ProductID 0x41 ('A' for armhv). The
/// ProductID differs from every entry in Linux's GICv3 erratum table, so no
/// hardware workaround is switched on for the virtual GIC.
pub const IIDR: u32 = 0x4100_043b;
/// `PIDR2`: `ArchRev[7:4]` = 3 (GICv3), `JEDEC[3]` = 1, `DES_1[2:0]` = 3
/// (Arm's JEP106 identity). Linux's driver checks `ArchRev` before anything.
pub const PIDR2_VALUE: u32 = 0x3b;

// --- Redistributor, RD_base frame ---
pub const GICR_CTLR: u64 = 0x0000;
pub const GICR_IIDR: u64 = 0x0004;
pub const GICR_TYPER: u64 = 0x0008;
pub const GICR_STATUSR: u64 = 0x0010;
pub const GICR_WAKER: u64 = 0x0014;
pub const GICR_SETLPIR: u64 = 0x0040;
pub const GICR_CLRLPIR: u64 = 0x0048;
pub const GICR_PROPBASER: u64 = 0x0070;
pub const GICR_PENDBASER: u64 = 0x0078;
pub const GICR_INVLPIR: u64 = 0x00a0;
pub const GICR_INVALLR: u64 = 0x00b0;
pub const GICR_SYNCR: u64 = 0x00c0;

/// `GICR_TYPER.Last`: this is the last redistributor of the region.
pub const GICR_TYPER_LAST: u64 = 1 << 4;
/// `GICR_TYPER.Processor_Number[23:8]`.
pub const GICR_TYPER_PROCESSOR_NUMBER_SHIFT: u32 = 8;
/// `GICR_TYPER.Affinity_Value[63:32]` (Aff3.Aff2.Aff1.Aff0).
pub const GICR_TYPER_AFFINITY_SHIFT: u32 = 32;

/// `GICR_WAKER.ProcessorSleep`.
pub const GICR_WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
/// `GICR_WAKER.ChildrenAsleep`.
pub const GICR_WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;

// --- Redistributor, SGI_base frame (offsets from SGI_base) ---
pub const GICR_IGROUPR0: u64 = 0x0080;
pub const GICR_ISENABLER0: u64 = 0x0100;
pub const GICR_ICENABLER0: u64 = 0x0180;
pub const GICR_ISPENDR0: u64 = 0x0200;
pub const GICR_ICPENDR0: u64 = 0x0280;
pub const GICR_ISACTIVER0: u64 = 0x0300;
pub const GICR_ICACTIVER0: u64 = 0x0380;
/// `GICR_IPRIORITYR0..7`, one byte per SGI/PPI.
pub const GICR_IPRIORITYR: u64 = 0x0400;
pub const GICR_ICFGR0: u64 = 0x0c00;
pub const GICR_ICFGR1: u64 = 0x0c04;
pub const GICR_IGRPMODR0: u64 = 0x0d00;
pub const GICR_NSACR: u64 = 0x0e00;

// --- ICC_SGI1R_EL1 fields (the guest's SGI-generation register) ---
/// `TargetList[15:0]`: Aff0 = RS * 16 + bit.
pub const SGI1R_TARGET_LIST_MASK: u64 = 0xffff;
pub const SGI1R_AFF1_SHIFT: u32 = 16;
pub const SGI1R_INTID_SHIFT: u32 = 24;
pub const SGI1R_AFF2_SHIFT: u32 = 32;
/// `IRM[40]`: 1 = every PE except the sender; the affinity fields are ignored.
pub const SGI1R_IRM: u64 = 1 << 40;
/// `RS[47:44]`: range selector, the upper bits of Aff0.
pub const SGI1R_RS_SHIFT: u32 = 44;
pub const SGI1R_AFF3_SHIFT: u32 = 48;

/// The GICv2 distributor (IHI 0048B, 4.3 "Distributor register descriptions"), without the
/// Security Extensions. The registers it shares with GICv3's distributor sit at the same
/// offsets (`GICD_CTLR` .. `GICD_ICFGR`, `GICD_SGIR`, `GICD_[CS]PENDSGIR` above).
pub mod v2 {
    /// The registers fill the first 4 KiB of the distributor window; the rest of the 64 KiB
    /// the guest sees (as on QEMU `virt`) names nothing.
    pub const GICD_FRAME_SIZE: u64 = 0x1000;
    /// End (exclusive) of `GICD_ICFGR<n>`; IMPLEMENTATION DEFINED registers follow.
    pub const GICD_ICFGR_END: u64 = super::GICD_ICFGR + 0x100;
    /// End (exclusive) of `GICD_NSACR<n>`, RAZ/WI without the Security Extensions.
    pub const GICD_NSACR_END: u64 = super::GICD_NSACR + 0x100;
    /// End (exclusive) of `GICD_SPENDSGIR<n>`, n = 0..3.
    pub const GICD_SPENDSGIR_END: u64 = super::GICD_SPENDSGIR + 0x10;
    /// Start of the identification registers (`GICD_PIDR4` .. `GICD_CIDR3`).
    pub const ID_BLOCK: u64 = 0x0fd0;
    /// `GICD_PIDR2`.
    pub const PIDR2: u64 = 0x0fe8;

    /// `GICD_TYPER.CPUNumber[7:5]`: vCPUs - 1.
    pub const GICD_TYPER_CPU_NUMBER_SHIFT: u32 = 5;

    /// `GICD_IIDR` of a GIC-400 (ProductID 0x02, Variant 0, Revision 0, Implementer 0x43B):
    /// the GIC GICv2 guests are written for.
    pub const IIDR: u32 = 0x0200_043b;
    /// `GICD_PIDR2`: `ArchRev[7:4]` = 2 (GICv2), `JEDEC[3]` = 1, `DES_1[2:0]` = 3, as a
    /// GIC-400's.
    pub const PIDR2_VALUE: u32 = 0x2b;

    /// `GICD_ITARGETSR` byte of an SPI at reset: vCPU 0. The architecture leaves it UNKNOWN
    /// (RAZ/WI on a uniprocessor); armhv chooses vCPU 0 so that an SPI is delivered before the
    /// guest routes it (Linux writes every one anyway).
    pub const ITARGETSR_RESET: u8 = 0x01;

    // --- GICD_SGIR fields ---
    /// `SGIINTID[3:0]`.
    pub const SGIR_INTID_MASK: u32 = 0xf;
    /// `CPUTargetList[23:16]`.
    pub const SGIR_TARGET_LIST_SHIFT: u32 = 16;
    /// `TargetListFilter[25:24]`.
    pub const SGIR_FILTER_SHIFT: u32 = 24;
    /// `TargetListFilter` = 0: the CPUs in `CPUTargetList`.
    pub const SGIR_FILTER_LIST: u32 = 0;
    /// `TargetListFilter` = 1: every CPU but the requesting one.
    pub const SGIR_FILTER_OTHERS: u32 = 1;
    /// `TargetListFilter` = 2: the requesting CPU only.
    pub const SGIR_FILTER_SELF: u32 = 2;
}
