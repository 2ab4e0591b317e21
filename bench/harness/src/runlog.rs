//! What a QEMU run leaves for its report and for an error: the console's end, the wait's
//! error, paths as the repository names them, and the host's load beside the run.

use std::path::Path;

/// Lines of console kept in an error.
const TAIL: usize = 40;

/// The end of a run's console for an error message, and where the whole of it is.
pub fn console_tail(console: &str, log: &Path) -> String {
    let lines: Vec<&str> = console.lines().collect();
    let from = lines.len().saturating_sub(TAIL);
    format!(
        "--- last {} lines of the console (all of it: {}) ---\n{}",
        lines.len() - from,
        rel(log),
        lines[from..].join("\n")
    )
}

/// A `qemu::Run` wait's error without the whole console it appends.
pub fn run_error(e: &anyhow::Error) -> String {
    let msg = e.to_string();
    let first = msg.lines().next().unwrap_or_default();
    first.split("; console").next().unwrap_or_default().trim_end_matches(':').to_owned()
}

/// A path relative to the repository, for messages and the report.
pub fn rel(p: &Path) -> String {
    p.strip_prefix(xtask::root()).unwrap_or(p).display().to_string()
}

/// The host's one-minute load average.
pub fn host_load() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}
