//! armhv's locks: spinlocks that each belong to a class of the lock order (crate `lockorder`,
//! where the order is written down). Built with the `lock-check` feature (the QEMU
//! integration tests), and in every host build (the monitor's own tests), every acquisition is
//! checked against the locks its CPU holds and a wrong order panics, naming both classes;
//! without it the classes cost nothing.
//!
//! EL2 runs with interrupts masked, so what a CPU holds changes only by its own acquisitions
//! and releases: a per-CPU record needs no synchronization beyond its own CPU.
//!
//! A CPU that armhv's own failure stops (a panic, a fault at EL2) never releases what it held.
//! So once one has stopped ([`cpu_failed`]), a CPU that waits for a lock longer than
//! [`ABANDON_MS`] stops too, with a report naming the lock's class, rather than spin forever;
//! the CPUs that need nothing of the stopped one's go on. Until a CPU fails, waiting costs no
//! more than the spinning itself.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
pub use lockorder::Class;

/// The CPUs stopped by armhv's own failure, one bit each.
static FAILED: AtomicU64 = AtomicU64::new(0);
/// How long a CPU waits for a lock, once another has failed, before it gives up.
pub const ABANDON_MS: u64 = 500;
/// Spins between two looks at [`FAILED`] (a look is one load; the clock is read only after a
/// failure).
const SPINS_PER_LOOK: u32 = 1024;

/// CPU `cpu` has stopped on armhv's own failure (the panic handler and the fatal-exception
/// path say so before they stop it): the locks it held are never released.
pub fn cpu_failed(cpu: usize) {
    FAILED.fetch_or(1 << (cpu % 64), Ordering::SeqCst);
}

/// Milliseconds on the machine's counter.
#[cfg(target_os = "none")]
fn now_ms() -> u64 {
    let ticks = u128::from(crate::arch::timer::now());
    (ticks * 1000 / u128::from(crate::arch::timer::frequency().max(1))) as u64
}

/// Milliseconds of the host's clock: in host builds a waiting thread's fake machine has a clock
/// that only its own test moves.
#[cfg(not(target_os = "none"))]
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}

/// Spins until `ready` says the lock is this CPU's; gives up, stopping this CPU through a
/// panic that names `class`, if a CPU has failed and the wait has lasted [`ABANDON_MS`].
#[inline(never)]
fn wait(class: Class, mut ready: impl FnMut() -> bool) {
    let mut spins = 0u32;
    let mut since_ms: Option<u64> = None;
    while !ready() {
        crate::arch::cpu::relax();
        spins = spins.wrapping_add(1);
        if !spins.is_multiple_of(SPINS_PER_LOOK) {
            continue;
        }
        let failed = FAILED.load(Ordering::Relaxed);
        if failed == 0 {
            continue;
        }
        let now = now_ms();
        if now - *since_ms.get_or_insert(now) >= ABANDON_MS {
            panic!(
                "waited {ABANDON_MS} ms for a lock of class {class:?} after CPU(s) {failed:#b} \
                 (mask) stopped on armhv's own failure: it may be theirs for good, so this CPU \
                 stops too"
            );
        }
    }
}

/// A spinlock (test-and-set) of lock class `class`.
pub struct Lock<T> {
    class: Class,
    inner: spin::Mutex<T>,
}

/// A ticket lock, first come first served, of lock class `class`. Its own rather than `spin`'s
/// `TicketMutex`, whose wait for a ticket cannot be abandoned (see the module documentation).
pub struct TicketLock<T> {
    class: Class,
    /// The next ticket to hand out.
    next: AtomicU32,
    /// The ticket whose holder has the lock.
    serving: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `TicketGuard`, and one exists at a time: a guard
// is made only by the holder of the ticket being served (`lock`), and `serving` moves on only
// when that guard is dropped. The acquire load of `serving` in `lock` pairs with the release
// increment in the guard's drop, so the next holder sees every write the last one made.
unsafe impl<T: Send> Sync for TicketLock<T> {}
// SAFETY: moving the lock moves the value it owns, which is `Send`.
unsafe impl<T: Send> Send for TicketLock<T> {}

/// The held ticket lock.
pub struct TicketInner<'a, T> {
    lock: &'a TicketLock<T>,
}

impl<T> Deref for TicketInner<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock (see `TicketLock`'s `Sync`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for TicketInner<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock, and `&mut self` makes this the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for TicketInner<'_, T> {
    fn drop(&mut self) {
        self.lock.serving.fetch_add(1, Ordering::Release);
    }
}

/// A held lock; releases it when dropped.
pub struct Guard<G> {
    inner: G,
    #[cfg(any(feature = "lock-check", not(target_os = "none")))]
    class: Class,
}

pub type LockGuard<'a, T> = Guard<spin::MutexGuard<'a, T>>;
pub type TicketGuard<'a, T> = Guard<TicketInner<'a, T>>;

impl<T> Lock<T> {
    pub const fn new(class: Class, value: T) -> Self {
        Self { class, inner: spin::Mutex::new(value) }
    }

    #[inline]
    pub fn lock(&self) -> LockGuard<'_, T> {
        check::acquire(self.class);
        if let Some(inner) = self.inner.try_lock() {
            return Guard::new(inner, self.class);
        }
        let mut taken = None;
        // Test, then test-and-set: a waiter that only reads the lock until it looks free
        // leaves its cache line to the holder.
        wait(self.class, || {
            taken = (!self.inner.is_locked()).then(|| self.inner.try_lock()).flatten();
            taken.is_some()
        });
        Guard::new(taken.expect("the wait ends with the lock"), self.class)
    }

    /// The lock if it is free now (never waits, so never out of order).
    #[inline]
    pub fn try_lock(&self) -> Option<LockGuard<'_, T>> {
        let inner = self.inner.try_lock()?;
        check::acquire_without_waiting(self.class);
        Some(Guard::new(inner, self.class))
    }

    /// One attempt of a caller that retries until it has the lock (a wait it bounds or
    /// abandons itself): checked against the lock order as [`Self::lock`] is.
    #[inline]
    pub fn try_lock_in_wait(&self) -> Option<LockGuard<'_, T>> {
        let inner = self.inner.try_lock()?;
        check::acquire(self.class);
        Some(Guard::new(inner, self.class))
    }
}

impl<T> TicketLock<T> {
    pub const fn new(class: Class, value: T) -> Self {
        Self {
            class,
            next: AtomicU32::new(0),
            serving: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub fn lock(&self) -> TicketGuard<'_, T> {
        check::acquire(self.class);
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        if self.serving.load(Ordering::Acquire) != ticket {
            wait(self.class, || self.serving.load(Ordering::Acquire) == ticket);
        }
        Guard::new(TicketInner { lock: self }, self.class)
    }
}

impl<G> Guard<G> {
    #[inline(always)]
    fn new(inner: G, class: Class) -> Self {
        #[cfg(not(any(feature = "lock-check", not(target_os = "none"))))]
        let _ = class;
        Self {
            inner,
            #[cfg(any(feature = "lock-check", not(target_os = "none")))]
            class,
        }
    }
}

impl<G: Deref> Deref for Guard<G> {
    type Target = G::Target;

    #[inline(always)]
    fn deref(&self) -> &G::Target {
        &self.inner
    }
}

impl<G: DerefMut> DerefMut for Guard<G> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.inner
    }
}

#[cfg(any(feature = "lock-check", not(target_os = "none")))]
impl<G> Drop for Guard<G> {
    fn drop(&mut self) {
        check::release(self.class);
    }
}

#[cfg(any(feature = "lock-check", not(target_os = "none")))]
mod check {
    use core::sync::atomic::{AtomicU64, Ordering};
    use lockorder::{Class, Held};

    /// Per physical CPU: the locks it holds (`lockorder::Held`). Only that CPU writes its entry.
    #[cfg(target_os = "none")]
    static HELD: [AtomicU64; crate::arch::MAX_CPUS] =
        [const { AtomicU64::new(0) }; crate::arch::MAX_CPUS];

    #[cfg(target_os = "none")]
    fn mine() -> &'static AtomicU64 {
        &HELD[crate::arch::cpu::current()]
    }

    // On the host each test thread is a machine of its own (`arch::fake`).
    #[cfg(not(target_os = "none"))]
    std::thread_local! {
        static HELD: &'static AtomicU64 = std::boxed::Box::leak(std::boxed::Box::new(AtomicU64::new(0)));
    }

    #[cfg(not(target_os = "none"))]
    fn mine() -> &'static AtomicU64 {
        HELD.with(|h| *h)
    }

    fn held() -> Held {
        Held::from_bits(mine().load(Ordering::Relaxed))
    }

    pub fn acquire(class: Class) {
        match held().acquire(class) {
            Ok(now) => mine().store(now.bits(), Ordering::Relaxed),
            Err(violation) => {
                // Forget what this CPU holds first: the panic report takes the console lock.
                mine().store(0, Ordering::Relaxed);
                panic!("lock order: {violation}");
            }
        }
    }

    pub fn acquire_without_waiting(class: Class) {
        mine().store(held().acquire_without_waiting(class).bits(), Ordering::Relaxed);
    }

    pub fn release(class: Class) {
        let held = held();
        // After a violation's panic cleared the record, guards still being dropped find
        // nothing to release.
        if held.count(class) > 0 {
            mine().store(held.release(class).bits(), Ordering::Relaxed);
        }
    }
}

#[cfg(not(any(feature = "lock-check", not(target_os = "none"))))]
mod check {
    use lockorder::Class;

    #[inline(always)]
    pub fn acquire(_: Class) {}

    #[inline(always)]
    pub fn acquire_without_waiting(_: Class) {}
}

#[cfg(test)]
mod tests {
    use super::{Class, Lock, TicketLock};

    #[test]
    fn in_order_is_fine() {
        let devices = TicketLock::new(Class::Devices, 0);
        let vgic = Lock::new(Class::Vgic, 0);
        let _d = devices.lock();
        let _v = vgic.lock();
    }

    #[test]
    #[should_panic(
        expected = "lock order: a lock of class Devices taken while holding one of class Vgic"
    )]
    fn out_of_order_panics_naming_both_classes() {
        let devices = TicketLock::new(Class::Devices, 0);
        let vgic = Lock::new(Class::Vgic, 0);
        let _v = vgic.lock();
        let _d = devices.lock();
    }

    #[test]
    fn a_released_lock_no_longer_counts() {
        let devices = TicketLock::new(Class::Devices, 0);
        let vgic = Lock::new(Class::Vgic, 0);
        drop(vgic.lock());
        let _d = devices.lock();
        let _v = vgic.try_lock().expect("free");
    }
}
