//! armhv's locks: spinlocks that each belong to a class of the lock order (crate `lockorder`,
//! where the order is written down). Built with the `lock-check` feature (the QEMU
//! integration tests), and in every host build (the monitor's own tests), every acquisition is
//! checked against the locks its CPU holds and a wrong order panics, naming both classes;
//! without it the classes cost nothing.
//!
//! EL2 runs with interrupts masked, so what a CPU holds changes only by its own acquisitions
//! and releases: a per-CPU record needs no synchronization beyond its own CPU.

use core::ops::{Deref, DerefMut};
pub use lockorder::Class;

/// A spinlock (test-and-set) of lock class `class`.
pub struct Lock<T> {
    #[cfg_attr(not(any(feature = "lock-check", not(target_os = "none"))), allow(dead_code))]
    class: Class,
    inner: spin::Mutex<T>,
}

/// A ticket lock, first come first served, of lock class `class`.
pub struct TicketLock<T> {
    #[cfg_attr(not(any(feature = "lock-check", not(target_os = "none"))), allow(dead_code))]
    class: Class,
    inner: spin::mutex::TicketMutex<T>,
}

/// A held lock; releases it when dropped.
pub struct Guard<G> {
    inner: G,
    #[cfg(any(feature = "lock-check", not(target_os = "none")))]
    class: Class,
}

pub type LockGuard<'a, T> = Guard<spin::MutexGuard<'a, T>>;
pub type TicketGuard<'a, T> = Guard<spin::mutex::TicketMutexGuard<'a, T>>;

impl<T> Lock<T> {
    pub const fn new(class: Class, value: T) -> Self {
        Self { class, inner: spin::Mutex::new(value) }
    }

    #[inline]
    pub fn lock(&self) -> LockGuard<'_, T> {
        check::acquire(self.class);
        Guard::new(self.inner.lock(), self.class)
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
        Self { class, inner: spin::mutex::TicketMutex::new(value) }
    }

    #[inline]
    pub fn lock(&self) -> TicketGuard<'_, T> {
        check::acquire(self.class);
        Guard::new(self.inner.lock(), self.class)
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
