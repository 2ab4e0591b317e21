//! The attack lines and their tallies.
//!
//! Every attempt prints `hostile: <attack> <target> -> <outcome>` and counts as
//! confined when its outcome is one the attack may defendably get (an abort, an
//! UNDEFINED, an SMCCC/PSCI error, DEVICE_NEEDS_RESET, data from the VM's own
//! devices or registers...). An attempt can fail: some outcome would count it
//! as not confined.
//!
//! A *sweep* is not an attempt: it records what happened (a read of an EL1
//! register encoding that returned whatever it returned, a measurement such as
//! a masked spin's preemptions) with no outcome that the guest could judge a
//! failure. Sweeps are counted apart, so that they never inflate the attempts;
//! where a sweep's line matters, the host test judges it.
//!
//! Each step ends with `hostile: <step> done: <n> attempts, <k> confined, <s> swept`;
//! the run ends with
//! `hostile: total: <n> attempts, <k> confined, <b> bytes leaked, <s> swept`.

use core::fmt;

use baremetal::console::Global;
use baremetal::println;

/// What an attempt got.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A data or instruction abort taken by the guest.
    Abort(u64),
    /// Another synchronous exception (alignment, illegal state, breakpoint...).
    Exception(u64),
    /// An Undefined Instruction exception (EC 0).
    Undef,
    /// A negative SMCCC/PSCI return (or a device's error status).
    Error(i64),
    /// A non-negative SMCCC/PSCI return.
    Ret(u64),
    /// Data read from memory or a device register.
    Value(u64),
    /// A system register read.
    Read(u64),
    /// A store or an instruction that completed without an exception.
    Ok,
    /// A virtio device set DEVICE_NEEDS_RESET.
    NeedsReset,
}

/// Exception classes in ESR_EL1.EC.
pub const EC_UNKNOWN: u64 = 0x00;
pub const EC_IABT_LOW: u64 = 0x20;
pub const EC_IABT_CUR: u64 = 0x21;
pub const EC_DABT_LOW: u64 = 0x24;
pub const EC_DABT_CUR: u64 = 0x25;

pub fn ec(esr: u64) -> u64 {
    (esr >> 26) & 0x3f
}

impl Outcome {
    /// The outcome of a synchronous exception with syndrome `esr`.
    pub fn from_esr(esr: u64) -> Self {
        match ec(esr) {
            EC_UNKNOWN => Outcome::Undef,
            EC_IABT_LOW | EC_IABT_CUR | EC_DABT_LOW | EC_DABT_CUR => Outcome::Abort(esr),
            _ => Outcome::Exception(esr),
        }
    }

    /// An SMCCC return value in x0.
    pub fn from_x0(x0: u64) -> Self {
        if (x0 as i64) < 0 { Outcome::Error(x0 as i64) } else { Outcome::Ret(x0) }
    }

    /// Aborted or UNDEFINED: the attempt did not happen.
    pub fn refused(self) -> bool {
        matches!(self, Outcome::Abort(_) | Outcome::Undef | Outcome::Exception(_))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            Outcome::Abort(esr) => write!(f, "abort esr={esr:#x}"),
            Outcome::Exception(esr) => write!(f, "exception esr={esr:#x}"),
            Outcome::Undef => f.write_str("undef"),
            Outcome::Error(e) => write!(f, "error {e}"),
            Outcome::Ret(v) => write!(f, "ret {v:#x}"),
            Outcome::Value(v) => write!(f, "value {v:#x}"),
            Outcome::Read(v) => write!(f, "read {v:#x}"),
            Outcome::Ok => f.write_str("ok"),
            Outcome::NeedsReset => f.write_str("needs-reset"),
        }
    }
}

static STEP_ATTEMPTS: Global<u64> = Global::new(0);
static STEP_CONFINED: Global<u64> = Global::new(0);
static STEP_SWEPT: Global<u64> = Global::new(0);
static TOTAL_ATTEMPTS: Global<u64> = Global::new(0);
static TOTAL_CONFINED: Global<u64> = Global::new(0);
static TOTAL_SWEPT: Global<u64> = Global::new(0);
static LEAKED: Global<u64> = Global::new(0);

fn bump(counter: &Global<u64>, n: u64) {
    counter.set(counter.get() + n);
}

/// Prints one attempt's line and counts it.
pub fn attempt(
    attack: &str,
    target: impl fmt::Display,
    outcome: impl fmt::Display,
    confined: bool,
) {
    println!("hostile: {attack} {target} -> {outcome}");
    count(1, u64::from(confined));
}

/// Counts `n` attempts, `confined` of them confined, whose lines were printed
/// by the caller (a summary line for a batch).
pub fn count(n: u64, confined: u64) {
    bump(&STEP_ATTEMPTS, n);
    bump(&STEP_CONFINED, confined);
    bump(&TOTAL_ATTEMPTS, n);
    bump(&TOTAL_CONFINED, confined);
}

/// Prints one sweep line (an outcome no check judges here) and counts it as swept.
pub fn sweep(attack: &str, target: impl fmt::Display, outcome: impl fmt::Display) {
    println!("hostile: {attack} {target} -> {outcome}");
    swept(1);
}

/// Counts `n` sweep probes whose lines were printed by the caller (a summary line).
pub fn swept(n: u64) {
    bump(&STEP_SWEPT, n);
    bump(&TOTAL_SWEPT, n);
}

/// Bytes that came from somewhere the VM must not see (another VM's marker
/// values, armhv's memory, data from an address that is not its own).
pub fn leaked(bytes: u64) {
    bump(&LEAKED, bytes);
}

/// Starts a step's tally.
pub fn begin_step() {
    STEP_ATTEMPTS.set(0);
    STEP_CONFINED.set(0);
    STEP_SWEPT.set(0);
}

/// Prints `hostile: <step> done: <n> attempts, <k> confined, <s> swept`.
pub fn end_step(step: &str) {
    println!(
        "hostile: {step} done: {} attempts, {} confined, {} swept",
        STEP_ATTEMPTS.get(),
        STEP_CONFINED.get(),
        STEP_SWEPT.get()
    );
}

/// Prints the run's totals.
pub fn totals() {
    println!(
        "hostile: total: {} attempts, {} confined, {} bytes leaked, {} swept",
        TOTAL_ATTEMPTS.get(),
        TOTAL_CONFINED.get(),
        LEAKED.get(),
        TOTAL_SWEPT.get()
    );
}
