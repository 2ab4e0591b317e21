//! One VM's life cycle: a pure state machine, driven by the monitor.
//!
//! ```text
//!            start              Started
//!  Stopped ─────────> Starting ─────────> Running ──pause──> Paused
//!   ^  ^                 │                 │   ^ <──resume──   │
//!   │  └──StartFailed────┘     restart,    │   │ ResetDone     │ restart
//!   │                          SYSTEM_RESET v   │               │
//!   │                                    Resetting <───────────┘
//!   │ StopDone                              │
//!  Stopping <── stop, SYSTEM_OFF, a crash ──┴── (from Running, Paused or Resetting)
//! ```
//!
//! The guest's own power events and crashes follow the VM's [`Policies`]: with `restart`, a
//! power-off resets the VM like SYSTEM_RESET does, and a crash stops it and starts it again
//! once its back-off ([`CrashLoop`]) is over, as [`Lifecycle::tick`] finds.
//!
//! The monitor serializes the inputs of one VM (one lock): "concurrent" commands are inputs
//! that arrive while an earlier one's work is under way, and each gets a deterministic answer.
//! A transitional state (Starting, Resetting, Stopping) refuses what would have to interrupt its
//! work, except `stop`: in Resetting it stops at once (the monitor's RAM zeroing carries on for
//! the stop), in Starting it is queued and taken as soon as the VM has started (building a VM
//! cannot be abandoned half way), and in Stopping it cancels a restart after a crash. Guest
//! events that arrive once the VM is already leaving (a late SYSTEM_OFF from a vCPU still on its
//! way out) are dropped: the VM's fate was decided by whatever came first.
//!
//! Time (`now`) is whatever the monitor counts in; [`CrashLoop::hz`] says how many units make a
//! second, for the back-off and the messages.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

// The restart policies are part of a VM's config, so `vmconfig` defines them (one source for
// the parser, the package and this state machine).
pub use vmconfig::{Policies, Policy};

/// Where a VM is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Defined, holding no RAM and no CPU time.
    Stopped,
    /// Being built: RAM taken, images loaded, vCPU 0 about to enter.
    Starting,
    Running,
    /// Its vCPUs are kept out of their guests; it keeps its RAM.
    Paused,
    /// Its vCPUs are out, its RAM is being zeroed and its images reloaded (SYSTEM_RESET, `restart`).
    Resetting,
    /// Its vCPUs are leaving, its devices are released, its RAM is zeroed and given back.
    Stopping,
}

impl State {
    pub const ALL: [Self; 6] = [
        Self::Stopped,
        Self::Starting,
        Self::Running,
        Self::Paused,
        Self::Resetting,
        Self::Stopping,
    ];

    /// The name shown by `list` and in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Resetting => "resetting",
            Self::Stopping => "stopping",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The commands that change a VM's state (from the console or a control VM).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    Start,
    /// Forced, now: the guest is not asked.
    Stop,
    Restart,
    Pause,
    Resume,
}

impl Command {
    pub const ALL: [Self; 5] = [Self::Start, Self::Stop, Self::Restart, Self::Pause, Self::Resume];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Stop => "stop",
            Self::Restart => "restart",
            Self::Pause => "pause",
            Self::Resume => "resume",
        }
    }
}

/// The back-off of restarts after crashes, so that a VM that faults at boot cannot keep a CPU
/// busy rebuilding it: each restart within [`window_ms`](Self::window_ms) of the last crashes
/// waits twice as long as the one before, and the [`max_crashes`](Self::max_crashes)-th crash
/// in the window stops the VM for good, with a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashLoop {
    /// Units of `now` per second.
    pub hz: u64,
    /// The wait before restarting after a first crash.
    pub first_delay_ms: u64,
    /// The longest wait.
    pub max_delay_ms: u64,
    /// Crashes older than this are forgotten.
    pub window_ms: u64,
    /// This many crashes within the window stop the VM (at least 1).
    pub max_crashes: u32,
}

impl CrashLoop {
    /// One second, doubling up to 16 s; five crashes within a minute stop the VM.
    pub const fn new(hz: u64) -> Self {
        Self { hz, first_delay_ms: 1000, max_delay_ms: 16_000, window_ms: 60_000, max_crashes: 5 }
    }

    fn ticks(&self, ms: u64) -> u64 {
        let t = u128::from(ms) * u128::from(self.hz) / 1000;
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// A crash at `now`: adds it to `history` (the times of the recent crashes, oldest first,
    /// which this keeps to the window) and says what follows.
    pub fn after_crash(&self, history: &mut Vec<u64>, now: u64) -> AfterCrash {
        let window = self.ticks(self.window_ms);
        history.retain(|&t| now.saturating_sub(t) < window);
        history.push(now);
        let crashes = u32::try_from(history.len()).unwrap_or(u32::MAX);
        if crashes >= self.max_crashes.max(1) {
            history.clear();
            return AfterCrash::GiveUp { crashes, window_ms: self.window_ms };
        }
        let doublings = (crashes - 1).min(63);
        let delay_ms = self.first_delay_ms.saturating_mul(1 << doublings).min(self.max_delay_ms);
        AfterCrash::Restart { at: now.saturating_add(self.ticks(delay_ms)), delay_ms }
    }
}

/// What [`CrashLoop::after_crash`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterCrash {
    /// Restart at time `at`, `delay_ms` from now.
    Restart { at: u64, delay_ms: u64 },
    /// Too many crashes: stop.
    GiveUp { crashes: u32, window_ms: u64 },
}

/// What the state machine is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Command(Command),
    /// The guest powered off (SYSTEM_OFF, or CPU_OFF of its last vCPU).
    PowerOff,
    /// The guest asked for a reset (SYSTEM_RESET).
    Reboot,
    /// armhv stopped the guest on a fault; the reason is for the reports.
    Crash(String),
    /// armhv is powering off (the console's Ctrl-A q): every VM stops, whatever its state, and
    /// no restart follows. Never refused.
    Shutdown,
    /// The monitor has built the VM and its vCPU 0 may run ([`Action::BuildAndStart`] done).
    Started,
    /// The monitor could not build it (e.g. not enough free RAM: the message says how much is
    /// missing); it holds nothing of the VM any more.
    StartFailed(String),
    /// [`Action::TearDown`] and [`Action::ScrubAndRelease`] are done: the VM holds nothing.
    StopDone,
    /// [`Action::BeginReset`] is done: RAM zeroed, images reloaded, vCPU 0 at its entry.
    ResetDone,
}

impl Input {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Command(c) => c.name(),
            Self::PowerOff => "power-off",
            Self::Reboot => "reboot",
            Self::Crash(_) => "crash",
            Self::Shutdown => "shutdown",
            Self::Started => "started",
            Self::StartFailed(_) => "start failed",
            Self::StopDone => "stop done",
            Self::ResetDone => "reset done",
        }
    }
}

/// What the monitor must do, in order. Each transitional state ends with the completion its
/// actions promise ([`Input::Started`], [`Input::StopDone`], [`Input::ResetDone`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Take the VM's RAM, build it and let vCPU 0 run; then [`Input::Started`] (or
    /// [`Input::StartFailed`]).
    BuildAndStart,
    /// Keep its vCPUs out of their guests (they may be anywhere: take them out first).
    PauseVcpus,
    /// Let them in again.
    ResumeVcpus,
    /// Reset in place: vCPUs out, RAM zeroed, images reloaded; then [`Input::ResetDone`]. The
    /// VM keeps its RAM.
    BeginReset,
    /// vCPUs out of their guests for good, devices quiesced and released.
    TearDown,
    /// Zero its RAM and give it back to the frame pool; then [`Input::StopDone`]. From
    /// Resetting, the reset's zeroing carries on for the stop.
    ScrubAndRelease,
    /// Call [`Lifecycle::tick`] at or after this time (a restart after a crash is due then).
    WakeAt(u64),
    /// Log it on the console and send it on the control channel.
    Report(Event),
}

/// Why a VM stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopWhy {
    Command,
    PoweredOff,
    /// SYSTEM_RESET with `on_reboot = "stop"`.
    Rebooted,
    /// A fault, with `on_crash = "stop"`.
    Crashed(String),
    /// The crash-loop limit.
    CrashLoop {
        crashes: u32,
        window_ms: u64,
    },
    StartFailed(String),
    /// armhv powered off (Ctrl-A q).
    Shutdown,
}

/// Why a VM restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartWhy {
    Command,
    /// SYSTEM_RESET.
    Rebooted,
    /// Power-off with `on_poweroff = "restart"`.
    PoweredOff,
    /// A fault with `on_crash = "restart"`, after the back-off.
    Crashed,
}

/// What happened to a VM, for the console and the control channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Started,
    Paused,
    Resumed,
    Restarted(RestartWhy),
    /// armhv stopped it on a fault; `restart_in_ms` when `on_crash = "restart"` and the
    /// crash-loop limit is not reached.
    Crashed {
        reason: String,
        restart_in_ms: Option<u64>,
    },
    Stopped(StopWhy),
}

impl Event {
    /// The event's name in JSON (`"event":"stopped"`).
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Paused => "paused",
            Self::Resumed => "resumed",
            Self::Restarted(_) => "restarted",
            Self::Crashed { .. } => "crashed",
            Self::Stopped(_) => "stopped",
        }
    }

    /// What happened, in words, for VM `vm`.
    pub fn describe<'a>(&'a self, vm: &'a str) -> impl fmt::Display + 'a {
        Described { vm, event: self }
    }
}

struct Described<'a> {
    vm: &'a str,
    event: &'a Event,
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vm = self.vm;
        match self.event {
            Event::Started => f.write_str("started"),
            Event::Paused => f.write_str("paused"),
            Event::Resumed => f.write_str("resumed"),
            Event::Restarted(RestartWhy::Command) => f.write_str("restarted by a command"),
            Event::Restarted(RestartWhy::Rebooted) => f.write_str("reset by the guest"),
            Event::Restarted(RestartWhy::PoweredOff) => {
                f.write_str("powered off by the guest, restarted (on_poweroff = restart)")
            }
            Event::Restarted(RestartWhy::Crashed) => {
                f.write_str("restarted after a crash (on_crash = restart)")
            }
            Event::Crashed { reason, restart_in_ms: Some(ms) } => {
                write!(f, "crashed: {reason}; restarting in {}", Secs(*ms))
            }
            Event::Crashed { reason, restart_in_ms: None } => write!(f, "crashed: {reason}"),
            Event::Stopped(why) => match why {
                StopWhy::Command => f.write_str("stopped by a command"),
                StopWhy::PoweredOff => f.write_str("powered off by the guest"),
                StopWhy::Rebooted => f.write_str("reset by the guest: stopped (on_reboot = stop)"),
                StopWhy::Crashed(reason) => write!(f, "stopped on a fault: {reason}"),
                StopWhy::CrashLoop { crashes, window_ms } => write!(
                    f,
                    "crashed {crashes} times in {}: stopped; fix the guest, then `start {vm}`",
                    Secs(*window_ms)
                ),
                StopWhy::StartFailed(why) => write!(f, "could not start: {why}"),
                StopWhy::Shutdown => f.write_str("stopped from the console"),
            },
        }
    }
}

/// Milliseconds shown as seconds ("60 s", "1.5 s").
struct Secs(u64);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, ms) = (self.0 / 1000, self.0 % 1000);
        if ms == 0 { write!(f, "{s} s") } else { write!(f, "{s}.{ms:03} s") }
    }
}

/// Why an input was refused; the state did not change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It is already where the command would take it.
    Already { vm: String, state: State },
    /// Its state's work must end first.
    Wait { vm: String, state: State },
    /// `pause`, `resume` or `restart` of a stopped VM.
    Stopped { vm: String },
    /// `start` of a paused VM.
    Paused { vm: String },
    /// `resume` of a running VM.
    NotPaused { vm: String },
    /// A second `stop` while it starts.
    StopQueued { vm: String },
    /// A completion that the state does not wait for: a bug in the monitor.
    Unexpected { vm: String, state: State, input: &'static str },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Already { vm, state } => write!(f, "{vm} is already {state}"),
            Self::Wait { vm, state } => {
                let until = match state {
                    State::Starting => "it to start",
                    State::Resetting => "its reset to end",
                    _ => "it to stop",
                };
                write!(f, "{vm} is {state}; wait for {until}")
            }
            Self::Stopped { vm } => write!(f, "{vm} is stopped; `start {vm}` starts it"),
            Self::Paused { vm } => write!(f, "{vm} is paused; `resume {vm}` continues it"),
            Self::NotPaused { vm } => write!(f, "{vm} is not paused: it is running"),
            Self::StopQueued { vm } => {
                write!(f, "{vm} is starting and already stops as soon as it has started")
            }
            Self::Unexpected { vm, state, input } => {
                write!(f, "{vm}: \"{input}\" while {state} (a monitor bug)")
            }
        }
    }
}

/// Why a VM does not fit in the free RAM, for the refusal of its `start` (the monitor checks
/// before [`Command::Start`]) or an [`Input::StartFailed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoRoom<'a> {
    pub vm: &'a str,
    /// Bytes of RAM it needs.
    pub need: u64,
    /// Bytes free.
    pub free: u64,
}

impl fmt::Display for NoRoom<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b.div_ceil(1 << 20);
        write!(
            f,
            "{} needs {} MiB of RAM and {} MiB are free: {} MiB missing; stop another VM first",
            self.vm,
            mib(self.need),
            self.free >> 20,
            mib(self.need.saturating_sub(self.free))
        )
    }
}

/// One VM's life cycle.
#[derive(Clone, Debug)]
pub struct Lifecycle {
    name: String,
    state: State,
    policies: Policies,
    crash_loop: CrashLoop,
    /// Times of the recent crashes (see [`CrashLoop::after_crash`]).
    crashes: Vec<u64>,
    /// A `stop` that came while Starting.
    stop_queued: bool,
    /// What the Stopped event will say, once StopDone comes; `None` when a restart after a
    /// crash follows instead.
    stopping: Option<StopWhy>,
    /// What the Restarted event will say when the restart or reset ends.
    restarting: Option<RestartWhy>,
    /// When a restart after a crash is due.
    restart_at: Option<u64>,
    /// When it last started running, for its uptime.
    since: Option<u64>,
    restarts: u32,
}

fn stop_actions(report: Option<Event>) -> Vec<Action> {
    let mut actions: Vec<Action> = report.into_iter().map(Action::Report).collect();
    actions.extend([Action::TearDown, Action::ScrubAndRelease]);
    actions
}

impl Lifecycle {
    /// A VM as defined, stopped: the monitor starts it with [`Command::Start`] (at boot,
    /// unless it is marked `autostart = false`).
    pub fn new(name: &str, policies: Policies, crash_loop: CrashLoop) -> Self {
        Self {
            name: String::from(name),
            state: State::Stopped,
            policies,
            crash_loop,
            crashes: Vec::new(),
            stop_queued: false,
            stopping: None,
            restarting: None,
            restart_at: None,
            since: None,
            restarts: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn policies(&self) -> Policies {
        self.policies
    }

    /// Restarts since it was defined: resets, restarts by command, restarts after crashes.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Whether a `stop` waits for the start under way to end.
    pub fn stop_queued(&self) -> bool {
        self.stop_queued
    }

    /// When a restart after a crash is due, if one is.
    pub fn restart_at(&self) -> Option<u64> {
        self.restart_at
    }

    /// Time since it last started or restarted, while it is up (running or paused).
    pub fn uptime(&self, now: u64) -> Option<u64> {
        self.since.map(|t| now.saturating_sub(t))
    }

    fn refuse(&self, make: impl FnOnce(String) -> Refusal) -> Result<Vec<Action>, Refusal> {
        Err(make(self.name.clone()))
    }

    fn go(&mut self, to: State, actions: Vec<Action>) -> Result<Vec<Action>, Refusal> {
        self.state = to;
        Ok(actions)
    }

    /// `why` is `None` when a restart after a crash follows the stop.
    fn stop(
        &mut self,
        why: Option<StopWhy>,
        report: Option<Event>,
    ) -> Result<Vec<Action>, Refusal> {
        self.stopping = why;
        self.restarting = None;
        self.since = None;
        self.go(State::Stopping, stop_actions(report))
    }

    fn reset(&mut self, why: RestartWhy) -> Result<Vec<Action>, Refusal> {
        self.restarting = Some(why);
        self.go(State::Resetting, vec![Action::BeginReset])
    }

    fn start(&mut self, why: Option<RestartWhy>) -> Result<Vec<Action>, Refusal> {
        self.restarting = why;
        self.restart_at = None;
        self.go(State::Starting, vec![Action::BuildAndStart])
    }

    /// Feeds one input at time `now`: the actions for the monitor, in order, or why not (and
    /// then nothing changed).
    pub fn handle(&mut self, input: Input, now: u64) -> Result<Vec<Action>, Refusal> {
        use State::*;
        let state = self.state;
        match input {
            Input::Command(command) => self.command(command),
            Input::Shutdown => match state {
                Running | Paused | Resetting => self.stop(Some(StopWhy::Shutdown), None),
                Starting => {
                    self.stop_queued = true;
                    Ok(Vec::new())
                }
                Stopping => {
                    self.stopping.get_or_insert(StopWhy::Shutdown);
                    self.restart_at = None;
                    Ok(Vec::new())
                }
                Stopped => {
                    self.restart_at = None;
                    Ok(Vec::new())
                }
            },
            Input::PowerOff | Input::Reboot if matches!(state, Running | Paused) => {
                let (policy, restart, stop) = if input == Input::PowerOff {
                    (self.policies.on_poweroff, RestartWhy::PoweredOff, StopWhy::PoweredOff)
                } else {
                    (self.policies.on_reboot, RestartWhy::Rebooted, StopWhy::Rebooted)
                };
                match policy {
                    Policy::Restart => self.reset(restart),
                    Policy::Stop => self.stop(Some(stop), None),
                }
            }
            Input::Crash(reason) if matches!(state, Running | Paused | Resetting) => {
                if self.policies.on_crash == Policy::Stop {
                    let event = Event::Crashed { reason: reason.clone(), restart_in_ms: None };
                    return self.stop(Some(StopWhy::Crashed(reason)), Some(event));
                }
                match self.crash_loop.after_crash(&mut self.crashes, now) {
                    AfterCrash::GiveUp { crashes, window_ms } => {
                        let event = Event::Crashed { reason, restart_in_ms: None };
                        self.stop(Some(StopWhy::CrashLoop { crashes, window_ms }), Some(event))
                    }
                    AfterCrash::Restart { at, delay_ms } => {
                        let event = Event::Crashed { reason, restart_in_ms: Some(delay_ms) };
                        self.restart_at = Some(at);
                        self.stop(None, Some(event))
                    }
                }
            }
            // Late news from a VM already leaving, or not yet in its guest: dropped.
            Input::PowerOff | Input::Reboot | Input::Crash(_) => Ok(Vec::new()),
            Input::Started if state == Starting => {
                if core::mem::take(&mut self.stop_queued) {
                    return self.stop(Some(StopWhy::Command), None);
                }
                self.since = Some(now);
                let event = match self.restarting.take() {
                    Some(why) => {
                        self.restarts += 1;
                        Event::Restarted(why)
                    }
                    None => Event::Started,
                };
                self.go(Running, vec![Action::Report(event)])
            }
            Input::StartFailed(why) if state == Starting => {
                self.stop_queued = false;
                self.restarting = None;
                self.go(Stopped, vec![Action::Report(Event::Stopped(StopWhy::StartFailed(why)))])
            }
            Input::ResetDone if state == Resetting => {
                self.restarts += 1;
                self.since = Some(now);
                let why = self.restarting.take().unwrap_or(RestartWhy::Command);
                self.go(Running, vec![Action::Report(Event::Restarted(why))])
            }
            Input::StopDone if state == Stopping => match (self.stopping.take(), self.restart_at) {
                (Some(why), _) => {
                    self.restart_at = None;
                    self.go(Stopped, vec![Action::Report(Event::Stopped(why))])
                }
                (None, Some(at)) if at <= now => self.start(Some(RestartWhy::Crashed)),
                (None, Some(at)) => self.go(Stopped, vec![Action::WakeAt(at)]),
                // Not reached: a stop has a why unless a restart follows it.
                (None, None) => {
                    self.go(Stopped, vec![Action::Report(Event::Stopped(StopWhy::Command))])
                }
            },
            Input::Started | Input::StartFailed(_) | Input::ResetDone | Input::StopDone => {
                Err(Refusal::Unexpected { vm: self.name.clone(), state, input: input.name() })
            }
        }
    }

    fn command(&mut self, command: Command) -> Result<Vec<Action>, Refusal> {
        use State::*;
        let state = self.state;
        let already = |vm| Refusal::Already { vm, state };
        let wait = |vm| Refusal::Wait { vm, state };
        match (command, state) {
            (Command::Start, Stopped) => {
                // The user's start is a fresh one: earlier crashes no longer count.
                self.crashes.clear();
                self.start(None)
            }
            (Command::Start, Starting | Running) => self.refuse(already),
            (Command::Start, Paused) => self.refuse(|vm| Refusal::Paused { vm }),
            (Command::Start, Resetting | Stopping) => self.refuse(wait),

            (Command::Stop, Stopped) if self.restart_at.is_some() => {
                self.restart_at = None;
                Ok(Vec::new())
            }
            (Command::Stop, Stopping) if self.stopping.is_none() => {
                // A restart after a crash was to follow: the stop cancels it.
                self.stopping = Some(StopWhy::Command);
                self.restart_at = None;
                Ok(Vec::new())
            }
            (Command::Stop, Stopped | Stopping) => self.refuse(already),
            (Command::Stop, Starting) if self.stop_queued => {
                self.refuse(|vm| Refusal::StopQueued { vm })
            }
            (Command::Stop, Starting) => {
                self.stop_queued = true;
                Ok(Vec::new())
            }
            (Command::Stop, Running | Paused | Resetting) => {
                self.stop(Some(StopWhy::Command), None)
            }

            (Command::Restart, Running | Paused) => self.reset(RestartWhy::Command),
            (Command::Restart, Stopped) => self.refuse(|vm| Refusal::Stopped { vm }),
            (Command::Restart, Starting | Resetting | Stopping) => self.refuse(wait),

            (Command::Pause, Running) => {
                self.go(Paused, vec![Action::PauseVcpus, Action::Report(Event::Paused)])
            }
            (Command::Pause, Paused) => self.refuse(already),
            (Command::Pause | Command::Resume, Stopped) => {
                self.refuse(|vm| Refusal::Stopped { vm })
            }
            (Command::Pause | Command::Resume, Starting | Resetting | Stopping) => {
                self.refuse(wait)
            }

            (Command::Resume, Paused) => {
                self.go(Running, vec![Action::ResumeVcpus, Action::Report(Event::Resumed)])
            }
            (Command::Resume, Running) => self.refuse(|vm| Refusal::NotPaused { vm }),
        }
    }

    /// Time passes: starts a restart after a crash that has become due.
    pub fn tick(&mut self, now: u64) -> Vec<Action> {
        match self.restart_at {
            Some(at) if self.state == State::Stopped && at <= now => {
                self.start(Some(RestartWhy::Crashed)).unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }
}
