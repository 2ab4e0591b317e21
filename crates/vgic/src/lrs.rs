//! Choosing what goes into a vCPU's list registers (flush, before entry) and
//! folding back what the guest did with them (sync, after exit).
//!
//! ```text
//!        flush_lrs                    guest runs                 sync_lrs
//!  model ────────> ICH_LR = pending ──ack (IAR)──> active ──EOI/DIR──> invalid ──> model
//!    ^  latch (edge) moves into the LR                     (EOI bit: maintenance exit)  |
//!    └──────────────────────────────── next flush re-chooses ───────────────────────────┘
//! ```
//!
//! A flush first takes back everything the vCPU's list registers held
//! (pending state of edge-triggered interrupts returns to the latch), then
//! chooses afresh, so an entry is never lost and the guest always sees the
//! best interrupts available. The hardware keeps no memory of which list
//! register held what: the active priorities live in `ICH_AP1R<n>_EL2`,
//! which the hypervisor saves with the vCPU, so entries may move between
//! list registers from one entry to the next.
//!
//! Most flushes need no new choice, though. When the last one placed every
//! candidate and since then only pending latches rose (an IPI, an edge) or
//! the guest moved entries along their life cycle, the flush is incremental:
//! finished entries are cleared and just the interrupts noted in the vCPU's
//! `fresh` list are revisited — put into a free list register, or given
//! their new value in place. Anything else (a configuration write, a
//! routing change, an interrupt that must leave, more candidates than list
//! registers) sets `rechoose` and the next flush chooses afresh.

use crate::{
    FRESH_MAX, FlushResult, GicVersion, MAX_LRS, NO_INTID, NO_SLOT, NO_VCPU, SGI_COUNT, VcpuSet,
    Vgic, lr,
};

/// A candidate's sort key for a list register, lowest placed first:
/// * active interrupts before pending ones (`pending_only`): they are never
///   displaced, because the guest can only deactivate an interrupt it sees in
///   a list register (KVM's `vgic_irq_cmp` orders them the same way);
/// * then lower priority value (higher priority);
/// * then the lower INTID.
///
/// The interrupt's index rides in the low 16 bits.
/// Interrupt indices fit the key's low 16 bits.
const MAX_IRQS: usize = crate::MAX_VCPUS * crate::PRIVATE_COUNT as usize + crate::MAX_SPIS as usize;

fn candidate_key(pending_only: bool, priority: u8, intid: u32, idx: usize) -> u64 {
    const _: () = assert!(MAX_IRQS <= 1 << 16);
    (u64::from(pending_only) << 48)
        | (u64::from(priority) << 40)
        | (u64::from(intid) << 16)
        | idx as u64
}

impl Vgic {
    /// Fills the list registers of `vcpu` before it is entered.
    ///
    /// Writes `lrs[..used]` with the chosen entries and zeroes the rest of
    /// the slice, whose length is the number of list registers to use
    /// (`ICH_VTR_EL2.ListRegs` + 1, at most [`MAX_LRS`]). The choice: every
    /// active interrupt of this vCPU first (an active one is never evicted;
    /// an edge-triggered active one pending again is written pending+active),
    /// then the pending, enabled interrupts whose group `GICD_CTLR` enables,
    /// highest priority (lowest value) first, ties to the lower INTID.
    /// Level-sensitive entries carry `EOI` so that their deactivation exits
    /// and the line is looked at again.
    ///
    /// The hypervisor must write list registers 0..max(`used`, previous
    /// `used`) — an entry left from before would keep a stale interrupt, or
    /// its `EOI` maintenance, alive — and set `ICH_HCR_EL2.UIE` when
    /// `more_pending` (see [`FlushResult`]). When nothing changed since the
    /// last flush the previous values are returned without a new choice;
    /// when only a few interrupts did, only they are revisited (module docs).
    ///
    /// # Panics
    /// If `vcpu` ≥ [`vcpus`](Self::vcpus).
    pub fn flush_lrs(&mut self, vcpu: usize, lrs: &mut [u64]) -> FlushResult {
        // (`is_clean` is the same test, for callers whose registers still hold the result.)
        assert!(vcpu < self.vcpus, "vGIC: no vCPU {vcpu}");
        let capacity = lrs.len().min(MAX_LRS);
        let cpu = &self.cpus[vcpu];
        if cpu.capacity == capacity
            && (!cpu.dirty || !cpu.rechoose && !cpu.more_pending && self.flush_fresh(vcpu))
        {
            // (A loop rather than copy_from_slice and fill: no memcpy/memset calls for the
            // few words involved.)
            let cpu = &self.cpus[vcpu];
            for (i, lr) in lrs.iter_mut().enumerate() {
                *lr = if i < cpu.used { cpu.lr_value[i] } else { 0 };
            }
            return FlushResult {
                used: cpu.used,
                more_pending: cpu.more_pending,
                kick: VcpuSet::EMPTY,
            };
        }
        self.flush_full(vcpu, lrs, capacity)
    }

    /// The incremental flush: when the last flush placed every candidate (`more_pending`
    /// clear) and nothing since needs a new choice (`rechoose` clear), the only candidates
    /// missing from the list registers, or held with a value the model would no longer write,
    /// are those in `fresh`. Revisiting them gives the entries a full choice would (in other
    /// list registers, perhaps: their order means nothing to the CPU interface). False, with
    /// nothing changed, if they do not fit or one would have to leave: then choose afresh.
    fn flush_fresh(&mut self, vcpu: usize) -> bool {
        let cpu = &self.cpus[vcpu];
        // Free list registers: those the guest finished (sync made them NO_INTID) and those
        // past `used`.
        let mut free = ((1u32 << cpu.capacity) - 1) & !((1u32 << cpu.used) - 1);
        for slot in 0..cpu.used {
            if cpu.lr_intid[slot] == NO_INTID {
                free |= 1 << slot;
            }
        }
        // Plan first, change nothing until everything is known to fit.
        // (Three small arrays rather than one of tuples: zeroed inline, without a memset.)
        let (mut slots, mut idxs, mut values) =
            ([0u8; FRESH_MAX], [0u16; FRESH_MAX], [0u64; FRESH_MAX]);
        let mut n_plan = 0;
        for &f in &cpu.fresh[..usize::from(cpu.n_fresh)] {
            let idx = usize::from(f);
            let irq = &self.irqs[idx];
            let in_lr = irq.slot != NO_SLOT;
            if in_lr && irq.home as usize != vcpu || !in_lr && self.owner(idx) != Some(vcpu) {
                // Revisited by the vCPU that holds or owns it.
                continue;
            }
            // For an entry in place, the model's view of it is the list register as synced:
            // the value a full flush would write after taking it back.
            let value = self.lr_value_for(idx);
            let slot = match (in_lr, value) {
                (true, 0) => return false, // It must leave: a new choice may fill its place.
                (true, _) => usize::from(irq.slot),
                (false, 0) => continue, // Nothing to deliver (any more).
                (false, _) if free == 0 => return false,
                (false, _) => {
                    let slot = free.trailing_zeros() as usize;
                    free &= free - 1;
                    slot
                }
            };
            (slots[n_plan], idxs[n_plan], values[n_plan]) = (slot as u8, f, value);
            n_plan += 1;
        }
        let cpu = &mut self.cpus[vcpu];
        // Finished entries are cleared: an invalid entry with EOI set would keep the
        // maintenance interrupt asserted.
        for slot in 0..cpu.used {
            if cpu.lr_intid[slot] == NO_INTID {
                cpu.lr_value[slot] = 0;
            }
        }
        for i in 0..n_plan {
            self.load_lr(vcpu, usize::from(slots[i]), usize::from(idxs[i]), values[i]);
        }
        let cpu = &mut self.cpus[vcpu];
        while cpu.used > 0 && cpu.lr_intid[cpu.used - 1] == NO_INTID {
            cpu.used -= 1;
        }
        cpu.n_fresh = 0;
        cpu.dirty = false;
        self.clean.set(vcpu, true);
        true
    }

    /// Puts interrupt `idx` into list register `slot` of `vcpu` as `value` (what
    /// `lr_value_for` says).
    fn load_lr(&mut self, vcpu: usize, slot: usize, idx: usize, value: u64) {
        let intid = lr::vintid(value);
        let irq = &mut self.irqs[idx];
        irq.home = vcpu as u8;
        irq.slot = slot as u8;
        if irq.edge && value & lr::PENDING != 0 {
            // The pending state now lives in the list register; for a GICv2 SGI, the request
            // of one source, and the others still wait.
            irq.latch = false;
            if self.version == GicVersion::V2 && intid < SGI_COUNT {
                let waiting = &mut self.cpus[vcpu].sgi_sources[intid as usize];
                *waiting &= !(1 << lr::sgi_source(value));
                irq.latch = *waiting != 0;
            }
        }
        let cpu = &mut self.cpus[vcpu];
        cpu.lr_intid[slot] = intid as u16;
        cpu.lr_value[slot] = value;
        cpu.used = cpu.used.max(slot + 1);
    }

    /// Whether a flush of `vcpu` with `capacity` list registers would return
    /// exactly what the last one did (nothing changed since; [`sync_lrs`]
    /// found the registers as written). A hypervisor whose hardware list
    /// registers still hold that flush's values may then skip the flush and
    /// its register writes altogether: the common exit, a hypercall or an
    /// MMIO access, costs one check.
    ///
    /// [`sync_lrs`]: Self::sync_lrs
    pub fn is_clean(&self, vcpu: usize, capacity: usize) -> bool {
        self.cpus.get(vcpu).is_some_and(|c| !c.dirty && c.capacity == capacity.min(MAX_LRS))
    }

    fn flush_full(&mut self, vcpu: usize, lrs: &mut [u64], capacity: usize) -> FlushResult {
        // 1. Take back what the list registers held (as of the last sync).
        let previous = self.cpus[vcpu].lr_intid;
        let previous_used = self.cpus[vcpu].used;
        for (slot, &intid) in previous[..previous_used].iter().enumerate() {
            if intid == NO_INTID {
                continue;
            }
            let idx = self.index(vcpu, u32::from(intid)).expect("LR holds a known INTID");
            let value = self.cpus[vcpu].lr_value[slot];
            let irq = &mut self.irqs[idx];
            if irq.edge && value & lr::PENDING != 0 && !irq.lr_pending_cancelled {
                irq.latch = true;
                if self.version == GicVersion::V2 && u32::from(intid) < SGI_COUNT {
                    self.cpus[vcpu].sgi_sources[usize::from(intid)] |= 1 << lr::sgi_source(value);
                }
            }
            irq.lr_pending_cancelled = false;
            irq.slot = NO_SLOT;
            if !irq.active {
                // An active interrupt stays with this vCPU until it is
                // deactivated; anything else may now follow its routing.
                irq.home = NO_VCPU;
            }
        }
        let cpu = &mut self.cpus[vcpu];
        cpu.lr_intid = [NO_INTID; MAX_LRS];
        cpu.used = 0;

        // 2. Choose the best `capacity` candidates: their sort keys, kept in
        // order in `lrs` itself (insertion into at most 16 slots; no scratch
        // arrays to clear on this path).
        let mut count = 0;
        let mut more_pending = false;
        let mut cold = [0u16; 4];
        let mut n_cold = 0;
        for idx in self.hot_owned_by(vcpu) {
            let irq = &self.irqs[idx];
            if !irq.active && !self.lr_wants_pending(idx) {
                if n_cold < cold.len() && !(irq.latch || irq.line) {
                    cold[n_cold] = idx as u16;
                    n_cold += 1;
                }
                continue;
            }
            let key = candidate_key(!irq.active, irq.priority, self.intid_of(idx), idx);
            if count == capacity {
                more_pending = true;
                if capacity == 0 || key >= lrs[capacity - 1] {
                    continue;
                }
                count -= 1; // The last one drops out.
            }
            let pos = lrs[..count].partition_point(|&b| b < key);
            lrs.copy_within(pos..count, pos + 1);
            lrs[pos] = key;
            count += 1;
        }
        for &idx in &cold[..n_cold] {
            self.cool(usize::from(idx));
        }

        // 3. Load them.
        for (slot, entry) in lrs[..count].iter_mut().enumerate() {
            let idx = (*entry & 0xffff) as usize;
            let value = self.lr_value_for(idx);
            self.load_lr(vcpu, slot, idx, value);
            *entry = value;
        }
        lrs[count..].fill(0);
        let cpu = &mut self.cpus[vcpu];
        cpu.used = count;
        cpu.capacity = capacity;
        cpu.more_pending = more_pending;
        cpu.dirty = false;
        cpu.rechoose = false;
        cpu.n_fresh = 0;
        self.clean.set(vcpu, true);

        // 4. SPIs let go of that now belong to another vCPU.
        let mut kick = VcpuSet::EMPTY;
        for &intid in &previous[..previous_used] {
            if intid == NO_INTID || u32::from(intid) < 32 {
                continue;
            }
            let idx = self.index(vcpu, u32::from(intid)).expect("LR held a known INTID");
            if self.irqs[idx].home != NO_VCPU {
                continue;
            }
            if let Some(owner) = self.owner(idx).filter(|&o| o != vcpu) {
                self.set_dirty(owner);
                if self.deliverable(idx) {
                    kick.insert(owner);
                }
            }
        }
        FlushResult { used: count, more_pending, kick }
    }

    /// Whether a flush would write this interrupt's entry pending.
    fn lr_wants_pending(&self, idx: usize) -> bool {
        self.lr_value_for(idx) & lr::PENDING != 0
    }

    /// Folds back the list registers of `vcpu` after it exited.
    ///
    /// `lrs[i]` is `ICH_LR<i>_EL2` as read back, for i < the last flush's
    /// `used` (extra values are ignored; missing ones count as unchanged).
    /// An entry equal to what was written is skipped. Otherwise the guest
    /// acted on it: `State` says whether the interrupt is active now; a
    /// level-sensitive interrupt that is no longer pending in the entry was
    /// acknowledged, which clears its pending latch (the line, if still
    /// high, keeps it pending: after the deactivation it is offered again);
    /// an invalid entry is finished and frees the list register.
    ///
    /// Returns other vCPUs to kick: an SPI that completed here whose
    /// `GICD_IROUTER` now names another vCPU, where it is deliverable.
    ///
    /// # Panics
    /// If `vcpu` ≥ [`vcpus`](Self::vcpus).
    pub fn sync_lrs(&mut self, vcpu: usize, lrs: &[u64]) -> VcpuSet {
        assert!(vcpu < self.vcpus, "vGIC: no vCPU {vcpu}");
        let mut kick = VcpuSet::EMPTY;
        let n = self.cpus[vcpu].used.min(lrs.len());
        for (slot, &value) in lrs[..n].iter().enumerate() {
            let cpu = &mut self.cpus[vcpu];
            if value == cpu.lr_value[slot] || cpu.lr_intid[slot] == NO_INTID {
                continue;
            }
            let intid = u32::from(cpu.lr_intid[slot]);
            debug_assert_eq!(lr::vintid(value), intid, "ICH_LR{slot}_EL2 of vCPU {vcpu}");
            cpu.lr_value[slot] = value;
            self.clean.set(vcpu, false);
            cpu.dirty = true;
            let state = lr::LrState::of(value);
            if state == lr::LrState::Invalid {
                cpu.lr_intid[slot] = NO_INTID;
            }
            let idx = self.index(vcpu, intid).expect("LR holds a known INTID");
            if state.is_active() && self.is_v2_sgi(intid) {
                // The guest acknowledged this source's request (or still holds it).
                self.cpus[vcpu].sgi_active_source[intid as usize] = lr::sgi_source(value) as u8;
            }
            let irq = &mut self.irqs[idx];
            irq.active = state.is_active();
            if !irq.edge && !state.is_pending() {
                // Acknowledged: the latch (ISPENDR) is consumed, the line
                // level stays what the source says.
                irq.latch = false;
            }
            if state == lr::LrState::Invalid {
                irq.slot = NO_SLOT;
                irq.home = NO_VCPU;
                irq.lr_pending_cancelled = false;
                match self.owner(idx) {
                    Some(owner) if owner != vcpu => {
                        self.set_dirty(owner);
                        if self.deliverable(idx) {
                            kick.insert(owner);
                        }
                    }
                    // Pending again already (a level line still high, a new edge): offered
                    // again at the next flush.
                    // (Outside a list register and inactive, wanting a pending entry is
                    // being deliverable.)
                    Some(_) if self.deliverable(idx) => self.set_fresh(vcpu, idx),
                    _ => {}
                }
            } else if self.lr_value_for(idx) != value {
                // Not what a flush would write now: the next one rewrites it.
                self.set_fresh(vcpu, idx);
            }
        }
        kick
    }
}
