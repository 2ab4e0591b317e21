//! An emulated EL1 generic timer, as the guest sees it through CNTx_CTL, CNTx_CVAL and CNTx_TVAL.
//!
//! armhv keeps the EL2 physical timer for itself, so the guest's physical timer (CNTP_*) cannot
//! be handed to it: accesses trap and this model answers them. The timer compares its CVAL
//! against a counter the caller supplies (`now`), and its output is a level: asserted while
//! enabled, unmasked and `now >= CVAL`. The caller drives that level onto a virtual interrupt and
//! arms a software timer for [`EmulatedTimer::deadline`].
#![no_std]

/// CNTx_CTL.ENABLE
pub const CTL_ENABLE: u64 = 1 << 0;
/// CNTx_CTL.IMASK: the timer still counts (ISTATUS) but does not assert its output.
pub const CTL_IMASK: u64 = 1 << 1;
/// CNTx_CTL.ISTATUS, read-only.
pub const CTL_ISTATUS: u64 = 1 << 2;

/// The three registers of one timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerReg {
    Ctl,
    Cval,
    Tval,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmulatedTimer {
    /// ENABLE and IMASK as last written; ISTATUS is computed on read.
    ctl: u64,
    cval: u64,
}

impl EmulatedTimer {
    /// The value a guest read returns at counter value `now`.
    pub fn read(&self, reg: TimerReg, now: u64) -> u64 {
        match reg {
            TimerReg::Ctl => self.ctl | if self.condition_met(now) { CTL_ISTATUS } else { 0 },
            TimerReg::Cval => self.cval,
            // TVAL is a signed 32-bit view of CVAL - now; the upper half reads as zero.
            TimerReg::Tval => u64::from(self.cval.wrapping_sub(now) as u32),
        }
    }

    /// A guest write of `value` at counter value `now`.
    pub fn write(&mut self, reg: TimerReg, value: u64, now: u64) {
        match reg {
            TimerReg::Ctl => self.ctl = value & (CTL_ENABLE | CTL_IMASK),
            TimerReg::Cval => self.cval = value,
            // The written TVAL is sign-extended from 32 bits and added to the counter.
            TimerReg::Tval => self.cval = now.wrapping_add(value as u32 as i32 as i64 as u64),
        }
    }

    fn condition_met(&self, now: u64) -> bool {
        self.ctl & CTL_ENABLE != 0 && now >= self.cval
    }

    /// The timer's output line at `now`.
    pub fn output(&self, now: u64) -> bool {
        self.condition_met(now) && self.ctl & CTL_IMASK == 0
    }

    /// The counter value at which the output will rise, if it is enabled, unmasked and not yet
    /// asserted at `now`: when a software timer must fire for it.
    pub fn deadline(&self, now: u64) -> Option<u64> {
        (self.ctl & (CTL_ENABLE | CTL_IMASK) == CTL_ENABLE && now < self.cval).then_some(self.cval)
    }

    /// Whether the timer is enabled at all (a cheap test before reading the counter).
    pub fn enabled(&self) -> bool {
        self.ctl & CTL_ENABLE != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TimerReg::*;

    #[test]
    fn reset_state_is_disabled_and_silent() {
        let t = EmulatedTimer::default();
        assert_eq!(t.read(Ctl, 100), 0);
        assert!(!t.output(u64::MAX));
        assert_eq!(t.deadline(0), None);
    }

    #[test]
    fn fires_at_cval_and_reports_istatus() {
        let mut t = EmulatedTimer::default();
        t.write(Cval, 1000, 0);
        t.write(Ctl, CTL_ENABLE, 0);
        assert_eq!(t.deadline(999), Some(1000));
        assert!(!t.output(999));
        assert_eq!(t.read(Ctl, 999), CTL_ENABLE);
        assert!(t.output(1000));
        assert_eq!(t.read(Ctl, 1000), CTL_ENABLE | CTL_ISTATUS);
        assert_eq!(t.deadline(1000), None, "already asserted: nothing left to wait for");
    }

    #[test]
    fn imask_keeps_istatus_but_drops_the_output() {
        let mut t = EmulatedTimer::default();
        t.write(Ctl, CTL_ENABLE | CTL_IMASK, 0);
        assert_eq!(t.read(Ctl, 5), CTL_ENABLE | CTL_IMASK | CTL_ISTATUS);
        assert!(!t.output(5));
        assert_eq!(t.deadline(0), None);
    }

    #[test]
    fn istatus_is_read_only_and_unknown_bits_are_ignored() {
        let mut t = EmulatedTimer::default();
        t.write(Cval, u64::MAX, 0);
        t.write(Ctl, u64::MAX, 0);
        assert_eq!(t.read(Ctl, 0), CTL_ENABLE | CTL_IMASK);
    }

    #[test]
    fn tval_is_a_signed_32_bit_offset_from_now() {
        let mut t = EmulatedTimer::default();
        t.write(Tval, 500, 10_000);
        assert_eq!(t.read(Cval, 0), 10_500);
        assert_eq!(t.read(Tval, 10_100), 400);
        // Negative: already in the past.
        t.write(Tval, (-300i32) as u32 as u64, 10_000);
        assert_eq!(t.read(Cval, 0), 9_700);
        assert_eq!(t.read(Tval, 10_000), (-300i32) as u32 as u64);
        // Only the low 32 bits of the written value count.
        t.write(Tval, 0xdead_0000_0000_0010, 10_000);
        assert_eq!(t.read(Cval, 0), 10_016);
    }

    #[test]
    fn tval_read_wraps_past_32_bits() {
        let mut t = EmulatedTimer::default();
        t.write(Cval, 1 << 33, 0);
        assert_eq!(t.read(Tval, 0), 0, "CVAL - now truncated to 32 bits");
    }
}
