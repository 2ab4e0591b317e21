//! Locks held for good by a CPU that armhv's own failure stopped (`vmm::sync`): a waiter gives
//! up after `ABANDON_MS` instead of spinning forever. Its own process: a failed CPU is
//! recorded for the rest of the process.

use vmm::sync::{ABANDON_MS, Class, Lock, TicketLock, cpu_failed};

/// A lock that a failed CPU holds for good: a waiter gives up after ABANDON_MS, with a
/// panic naming the class, instead of spinning forever; before any failure it would wait.
#[test]
fn a_wait_for_a_failed_cpus_lock_ends() {
    use std::sync::{Arc, mpsc};
    use std::time::{Duration, Instant};
    let lock = Arc::new(TicketLock::new(Class::Devices, 0));
    let spin = Arc::new(Lock::new(Class::Networks, 0));
    core::mem::forget(lock.lock()); // the failed CPU's, never released
    core::mem::forget(spin.lock());
    let (tx, rx) = mpsc::channel();
    for waiter in 0..2 {
        let (lock, spin, tx) = (lock.clone(), spin.clone(), tx.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if waiter == 0 {
                    drop(lock.lock());
                } else {
                    drop(spin.lock());
                }
            }));
            let message = outcome.err().and_then(|p| p.downcast::<String>().ok());
            tx.send((message, start.elapsed())).unwrap();
        });
    }
    // Nobody has failed yet: the waiters wait.
    assert!(rx.recv_timeout(Duration::from_millis(3 * ABANDON_MS)).is_err());
    cpu_failed(3);
    for _ in 0..2 {
        let (message, waited) = rx.recv_timeout(Duration::from_secs(10)).expect("gave up");
        let message = message.expect("a panic");
        assert!(message.contains("for a lock of class"), "{message}");
        assert!(waited >= Duration::from_millis(ABANDON_MS), "{waited:?}");
    }
}
