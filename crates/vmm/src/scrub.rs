//! Zeroing a VM's RAM a piece at a time, so that a big VM's reset or end does not hold a
//! physical CPU for as long as the zeroing takes.
//!
//! SYSTEM_RESET and the end of a VM zero all of its RAM before anything sees it again (the next
//! kernel; at the end nobody, but a VM's data must not outlive it). For a VM of a few hundred
//! MiB that is a long time at EL2: hundreds of milliseconds under QEMU TCG, seconds on a loaded
//! host. Done in one go, it kept every other vCPU sharing the CPU waiting, and the CPU's
//! interrupts (console input, kicks, timers) with them.
//!
//! So the zeroing is a job of the VM ([`Scrub`]), done by one of its vCPUs, the *owner*, in its
//! turns on a CPU as if it were guest code: the scheduler runs the owner like any runnable vCPU
//! (`cpu_loop::run_scrub`; its VM is charged for the time), and the owner zeroes [`PIECE`]-sized
//! pieces, taking the CPU's interrupts between two, until the job is done, its time slice ends
//! or the scheduler wants the CPU for another vCPU (`lifecycle::run_scrub_slice`). A VM that resets in a loop
//! thus uses its own share of the CPU, no more.
//!
//! ```text
//!   lifecycle::begin_reset                last piece: reload the images, restart the VM
//!   Idle ────────────────> Zeroing{Reset} ──────────────────────────────────────────────> Idle
//!     │                          │ lifecycle::stop: the job goes on from where it is, for the stop
//!     │ lifecycle::stop          v
//!     └──────────────────> Zeroing{Stop} ───> Idle   last piece: "RAM zeroed"; lifecycle::vm_ended
//! ```
//!
//! While a job runs:
//! * no vCPU of the VM enters its guest: the VM is resetting or stopped from before the job
//!   starts until it ends, and every vCPU had left its guest before (`lifecycle::leave_guests`);
//! * no device writes into its RAM: deliveries from other VMs and from the console take the
//!   VM's device lock and give up on a VM that is resetting or stopped
//!   (`emulate::virtio_slot::with_transport`); the job starts after taking that lock once, so that a delivery
//!   already under way has ended;
//! * the pieces below `next` are zero: only the owner moves `next`, after zeroing the piece;
//! * a stop (`lifecycle::stop`) waits, as for a vCPU in its guest, until no slice runs, and then
//!   either takes over the reset's job or starts one from the first piece; a reset whose VM has
//!   stopped before its last piece does not complete. So the images of a reset are never
//!   reloaded into RAM a stop zeroes, and the stop is reported ("RAM zeroed", then the
//!   power-off after the last VM) only once all of the RAM is zero.
//!
//! [`PIECE`]: super::memory::PIECE

use crate::sync::{Class, Lock};
use core::sync::atomic::{AtomicUsize, Ordering};

const NOBODY: usize = usize::MAX;

/// A VM's zeroing job.
pub struct Scrub {
    /// The vCPU that does it, or [`NOBODY`]: read on every scheduling decision, without the lock.
    owner: AtomicUsize,
    state: Lock<State>,
}

enum State {
    Idle,
    /// Pieces `0..next` are zero; what follows the last one.
    Zeroing {
        next: usize,
        then: Then,
    },
}

enum Then {
    /// Reload the images and let the VM run again.
    Reset,
    /// Report the stop.
    Stop,
}

/// What the owner does next.
pub(crate) enum Step {
    Zero(usize),
    Reset,
    Report,
    /// The reset's zeroing is done but the VM has stopped meanwhile: the stop takes the job
    /// over (`Scrub::begin_stop`) once this slice has ended.
    WaitForStop,
    Done,
}

impl Default for Scrub {
    fn default() -> Self {
        Self::new()
    }
}

impl Scrub {
    pub const fn new() -> Self {
        Self { owner: AtomicUsize::new(NOBODY), state: Lock::new(Class::Scrub, State::Idle) }
    }

    /// Whether vCPU `index` has RAM of its VM to zero: the scheduler then runs it although
    /// its VM is resetting or stopped.
    pub fn is_owner(&self, index: usize) -> bool {
        self.owner.load(Ordering::Acquire) == index
    }

    /// SYSTEM_RESET from vCPU `owner`, once no vCPU of the VM runs its guest.
    pub(crate) fn begin_reset(&self, owner: usize) {
        let mut state = self.state.lock();
        debug_assert!(matches!(*state, State::Idle), "a reset while a zeroing job runs");
        *state = State::Zeroing { next: 0, then: Then::Reset };
        self.owner.store(owner, Ordering::Release);
    }

    /// The VM stopped (once), no vCPU of it runs its guest or a slice: its RAM must be zero
    /// before the stop is reported. A reset's job goes on for the stop; otherwise a new job
    /// starts, done by vCPU 0, which is returned: the scheduler must be told it can run.
    pub(crate) fn begin_stop(&self) -> Option<usize> {
        let mut state = self.state.lock();
        match &mut *state {
            State::Zeroing { then, .. } => {
                *then = Then::Stop;
                None
            }
            State::Idle => {
                *state = State::Zeroing { next: 0, then: Then::Stop };
                self.owner.store(0, Ordering::Release);
                Some(0)
            }
        }
    }

    /// The owner's next step, for a VM of `pieces` pieces of RAM; `is_stopped` reads whether
    /// it has stopped (under this job's lock).
    pub(crate) fn next(&self, pieces: usize, is_stopped: impl FnOnce() -> bool) -> Step {
        let mut state = self.state.lock();
        match core::mem::replace(&mut *state, State::Idle) {
            State::Zeroing { next, then } if next < pieces => {
                *state = State::Zeroing { next, then };
                Step::Zero(next)
            }
            // Paired with the store in `lifecycle::stop` before it waits for this slice: either the
            // stop is seen here, or the stop waits until the reset has completed.
            State::Zeroing { next, then: Then::Reset } if is_stopped() => {
                *state = State::Zeroing { next, then: Then::Reset };
                Step::WaitForStop
            }
            State::Zeroing { then: Then::Reset, .. } => {
                self.owner.store(NOBODY, Ordering::Release);
                Step::Reset
            }
            State::Zeroing { then: Then::Stop, .. } => {
                self.owner.store(NOBODY, Ordering::Release);
                Step::Report
            }
            State::Idle => Step::Done,
        }
    }

    /// Piece `index` is zero.
    pub(crate) fn zeroed(&self, index: usize) {
        if let State::Zeroing { next, .. } = &mut *self.state.lock()
            && *next == index
        {
            *next += 1;
        }
    }
}
