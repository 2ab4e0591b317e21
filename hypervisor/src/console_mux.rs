//! One physical console for every VM. Output lines are tagged with the VM's name
//! (`crate::console`); input goes to the focused VM's console device: its PL011, or its
//! virtio-console when the guest's kernel uses that (`VmSpec::input_console`). Ctrl-A starts a
//! command: Ctrl-A then a digit n focuses VM n, `c` opens armhv's command line (below), `s`
//! prints per-VM statistics, `d` switches the interrupt distributor on or off, `t` prints its
//! interrupt trace, `q` stops every VM (the final report follows and armhv powers off), `h`
//! prints help, and a second Ctrl-A sends a Ctrl-A to the VM.
//!
//! The command line (`armhv> `, crate `control`'s editor: history, tab completion of commands
//! and VM names) takes `list`, `start NAME`, `stop NAME`, `restart NAME`, `pause NAME`,
//! `resume NAME`, `info NAME`, `log LEVEL`, `help`, and the console's own `focus NAME` (any VM,
//! by name or number) and `exit`. It stays open until `exit`, Ctrl-D on an empty line, or
//! Ctrl-A. Commands that change a VM are carried out at the top of a CPU's loop
//! (`vmm::manage`); their replies and the events that follow are logged.

use crate::drivers::gic;
use ::vgic::VcpuSet;
use control::Request;
use control::command::{MAX_LINE, find_vm};
use control::editor::{Editor, Key};
use control::reply::VmSummary;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};
use vdev::MmioDevice;
use vmm::emulate::uart::{self, VmUart};
use vmm::emulate::{vgic, virtio};
use vmm::sync::{Class, Lock};
use vmm::vm::{ConsoleInput, Vm};
use vmm::{Action, irq, irqdist, manage, registry, sched, stats};

const CTRL_A: u8 = 0x01;

/// Prints an answer to what was typed at the console, whatever the log level: `log LEVEL` sets
/// what armhv logs, not whether it answers.
macro_rules! say {
    ($($arg:tt)*) => {
        crate::console::print_line(format_args!("console: {}", format_args!($($arg)*)))
    };
}

/// Ctrl-A was typed: the next byte is a command.
static COMMAND: AtomicBool = AtomicBool::new(false);
/// The command line is open: typing goes to it, not to the focused VM.
static PROMPT_OPEN: AtomicBool = AtomicBool::new(false);
/// The command line. Only the CPU that takes the console's interrupt uses it, and holds it
/// only to feed it a byte (nothing else is taken meanwhile).
static EDITOR: Lock<Editor> = Lock::new(Class::Lifecycle, Editor::new());

/// Takes console input by interrupt on the CPU with affinity `mpidr`.
pub fn init(intid: Option<u32>, mpidr: u64) {
    let Some(intid) = intid else {
        log::warn!("the console UART has no interrupt in the device tree: no console input");
        return;
    };
    match gic::route_spi(intid, mpidr, true) {
        Ok(()) => {
            irq::set_console_input(intid, on_input);
            uart::set_focus(0);
            crate::console::enable_input_interrupt();
        }
        Err(e) => log::warn!("console input disabled: its interrupt {intid}: {e}"),
    }
}

/// The UART interrupt: handles every byte waiting. Returns what the vCPU this CPU is running
/// (if any) must do, if that changes.
fn on_input() -> Option<Action> {
    let mut action = None;
    loop {
        let bytes = crate::console::read_input::<64>();
        if bytes.is_empty() {
            return action;
        }
        for b in bytes {
            action = handle(b).or(action);
        }
    }
}

/// One byte typed. Returns what the vCPU running on this CPU must do: give the CPU back when a
/// command waits to be carried out at the top of its loop.
fn handle(byte: u8) -> Option<Action> {
    if !COMMAND.swap(false, Ordering::Relaxed) {
        if byte == CTRL_A {
            COMMAND.store(true, Ordering::Relaxed);
        } else if PROMPT_OPEN.load(Ordering::Relaxed) {
            return edit(byte);
        } else {
            deliver(byte);
        }
        return None;
    }
    if PROMPT_OPEN.swap(false, Ordering::Relaxed) {
        crate::console::end_prompt(false); // Ctrl-A leaves the command line
    }
    match byte {
        CTRL_A => deliver(CTRL_A),
        b'0'..=b'9' => focus(usize::from(byte - b'0')),
        b'c' | b':' => open_prompt(),
        b's' => crate::reports::log_stats("console"),
        b'd' => irqdist::toggle(),
        b't' => irqdist::print_trace(),
        b'q' => return shutdown(),
        b'h' | b'?' => help(),
        _ => say!("unknown command after Ctrl-A; Ctrl-A h for help"),
    }
    None
}

/// Ctrl-A q: stops every VM (`vmm::manage`, at the top of a CPU's loop); the last one to stop
/// ends armhv with the final report and powers the machine off.
fn shutdown() -> Option<Action> {
    say!("stopping every VM (Ctrl-A q)");
    manage::shutdown();
    Some(Action::Reschedule)
}

fn focus(id: usize) {
    match manage::names().nth(id) {
        Some(name) => {
            uart::set_focus(id);
            let stopped = if registry::get(id).is_none() { "; it is stopped" } else { "" };
            say!("input goes to vm {id} ({name}){stopped}");
        }
        None => say!("there is no VM {id} ({} VMs)", registry::count()),
    }
}

fn help() {
    say!(
        "typing goes to the focused VM. Ctrl-A then: 0-9 focus that VM, c command \
         line, s statistics, d interrupt distributor on/off, t interrupt trace, q stop every VM \
         and power off, h this help, Ctrl-A a literal Ctrl-A"
    );
}

fn open_prompt() {
    PROMPT_OPEN.store(true, Ordering::Relaxed);
    let text = prompt_text(&EDITOR.lock());
    crate::console::print_prompt(text.as_bytes());
}

type PromptText = heapless::String<{ MAX_LINE + 16 }>;

fn prompt_text(editor: &Editor) -> PromptText {
    let mut text = PromptText::new();
    let _ = text.push_str(editor.prompt());
    let _ = text.push_str(editor.line());
    text
}

/// A byte typed at the command line.
fn edit(byte: u8) -> Option<Action> {
    let names: heapless::Vec<&str, { vmconfig::MAX_VMS }> =
        manage::names().take(vmconfig::MAX_VMS).collect();
    let mut echo = heapless::String::<1024>::new();
    // What the byte did, taken out of the editor before anything is printed or carried out.
    let (line, listed, text) = {
        let mut editor = EDITOR.lock();
        let key = editor.feed(byte, &names, &mut echo);
        let line = match key {
            Key::Nothing => None,
            Key::Close => {
                PROMPT_OPEN.store(false, Ordering::Relaxed);
                crate::console::end_prompt(false);
                return None;
            }
            Key::Line(line) => {
                Some(heapless::String::<MAX_LINE>::try_from(line).unwrap_or_default())
            }
        };
        (
            line,
            echo.split("\r\n").nth(1).map(|l| PromptText::try_from(l.trim()).unwrap_or_default()),
            prompt_text(&editor),
        )
    };
    let Some(line) = line else {
        // A second Tab lists the candidates between two newlines.
        if let Some(candidates) =
            listed.filter(|l| !l.is_empty() && !l.starts_with(control::editor::PROMPT))
        {
            say!("{candidates}");
        }
        crate::console::print_prompt(text.as_bytes());
        return None;
    };
    crate::console::end_prompt(true);
    let action = run_line(&line);
    if PROMPT_OPEN.load(Ordering::Relaxed) {
        let text = prompt_text(&EDITOR.lock());
        crate::console::print_prompt(text.as_bytes());
    }
    action
}

/// Carries out a line of the command line.
fn run_line(line: &str) -> Option<Action> {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (None, ..) => return None,
        (Some("exit"), None, _) => {
            PROMPT_OPEN.store(false, Ordering::Relaxed);
            return None;
        }
        (Some("focus"), Some(vm), None) => {
            match vm.parse::<usize>().ok().or_else(|| find_vm(manage::names(), vm).ok()) {
                Some(id) => focus(id),
                None => say!("no VM is named {vm:?}; `list` shows them"),
            }
            return None;
        }
        (Some("focus"), ..) => {
            say!("`focus NAME` (or its number) sends what is typed to that VM");
            return None;
        }
        _ => {}
    }
    let request = match control::parse(line.as_bytes()) {
        Ok(request) => request,
        Err(e) => {
            say!("{e}");
            return None;
        }
    };
    match request {
        Request::Help => say!(
            "{}; focus NAME; exit (or Ctrl-D, Ctrl-A) leaves the command line",
            control::command::HELP
        ),
        Request::Log(level) => {
            manage::set_log_level(level);
            say!("log level {}", level.name());
        }
        Request::List => manage::list(print_list),
        Request::Vm(verb, name) => match find_vm(manage::names(), name) {
            Err(e) => say!("{e}"),
            Ok(id) => match verb.command() {
                None => {
                    manage::summary(id, |vm| print_list(core::slice::from_ref(vm)));
                }
                Some(command) => {
                    let queued = manage::Queued { command, vm: id, from: manage::From::Console };
                    if let Err(busy) = manage::submit(queued) {
                        say!("{busy}");
                    }
                    // Given back, this CPU reaches the top of its loop and carries it out.
                    return Some(Action::Reschedule);
                }
            },
        },
    }
    None
}

/// `list` and `info` as a table.
fn print_list(vms: &[VmSummary<'_>]) {
    say!(
        "{:<16} {:<9} {:>5} {:<12} {:>8} {:>10} {:>10} {:>8}",
        "NAME",
        "STATE",
        "VCPUS",
        "CPUS",
        "MEMORY",
        "UPTIME",
        "EXITS",
        "RESTARTS"
    );
    for vm in vms {
        let mut cpus = heapless::String::<64>::new();
        for (i, c) in vm.cpus.iter().enumerate() {
            let _ = write!(cpus, "{}{c}", if i == 0 { "" } else { "," });
        }
        if cpus.is_empty() {
            let _ = cpus.push('-');
        }
        let mut uptime = heapless::String::<16>::new();
        match vm.uptime_ms {
            Some(ms) => {
                let _ = write!(uptime, "{}.{}s", ms / 1000, ms % 1000 / 100);
            }
            None => {
                let _ = uptime.push('-');
            }
        }
        say!(
            "{:<16} {:<9} {:>5} {:<12} {:>7}M {:>10} {:>10} {:>8}",
            vm.name,
            vm.state.name(),
            vm.vcpus,
            cpus,
            vm.memory_bytes >> 20,
            uptime,
            vm.exits,
            vm.restarts
        );
    }
    let (heap, frames) = (crate::mm::heap::used_bytes(), vmm::frames::used_frames());
    say!(
        "free RAM {} MiB of {} MiB; armhv holds {heap} bytes of heap, {frames} frames",
        vmm::frames::free_bytes() >> 20,
        vmm::frames::total_bytes() >> 20
    );
}

/// A command typed at the console was carried out, or refused.
pub fn reply(reply: manage::Reply<'_>) {
    match reply {
        manage::Reply::Done(name, command) => say!("{} {name}: ok", command.name()),
        manage::Reply::Refused(why) => say!("{why}"),
    }
}

/// An event of VM `name`, with its statistics when it ends a life or restarts.
pub fn event(name: &str, event: &control::Event, vm: Option<&Vm>) {
    use control::{Event, RestartWhy};
    match (event, vm) {
        (Event::Stopped(_), Some(vm)) => {
            crate::reports::log_vm("end", vm);
            log::info!("{name}: {} ({}); RAM zeroed", event.describe(name), vm.stats)
        }
        (Event::Restarted(RestartWhy::Rebooted), Some(vm)) => {
            log::info!("{name}: {} ({})", event.describe(name), vm.stats)
        }
        _ => log::info!("{name}: {}", event.describe(name)),
    }
}

fn deliver(byte: u8) {
    let Some(vm) = uart::focused().and_then(registry::get) else { return };
    if vm.is_stopped() {
        return;
    }
    let vm = &vm;
    let (taken, woken) = match vm.console_input {
        Some(ConsoleInput::Uart) => uart_input(vm, byte),
        Some(ConsoleInput::Virtio(slot)) => virtio::console_input(vm, slot, byte),
        None => (false, VcpuSet::EMPTY),
    };
    sched::notify(vm, woken);
    if !taken {
        stats::bump(&vm.stats.input_dropped);
    }
}

/// A byte for `vm`'s PL011: whether it was taken, and the vCPUs to wake.
fn uart_input(vm: &Vm, byte: u8) -> (bool, VcpuSet) {
    let mut bus = vm.devices.lock();
    let Some(uart) = bus.device_mut::<VmUart>() else { return (false, VcpuSet::EMPTY) };
    let taken = uart.input(byte);
    (taken, vgic::set_device_irq(vm, uart.irq_change()))
}
