//! A bounded run of every cargo-fuzz target in `fuzz/` (see `fuzz/README.md`).
//!
//! One test, so the targets run one after another, each one libFuzzer process on one thread:
//! libFuzzer uses more only when given `-jobs`/`-fork` (and `-jobs=1 -workers=1` would still add
//! a child process, with its output in `fuzz-0.log`), so the other core stays free.
//! Each target first gets `cargo +nightly fuzz build` (a build error is reported as such), then
//! `ARMHV_FUZZ_SECONDS` seconds (default 20) on a fresh corpus seeded from `fuzz/seeds/<target>`
//! (and, for `vmconfig`, the repository's configs). A crash fails the test with the crashing
//! input's path and the end of the fuzzer's output. Needs the nightly toolchain and cargo-fuzz,
//! which `scripts/setup.sh` (run by `make test`) installs when they are missing.

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const TARGETS: &[&str] = &[
    "virtqueue",
    "device_tree",
    "esr",
    "vgic_mmio",
    "vmconfig",
    "control_command",
    "control_editor",
];
/// Lines of fuzzer output kept for a failure report.
const TAIL: usize = 40;

/// Progress goes straight to the terminal: the test harness captures `eprintln!`.
fn progress(line: &str) {
    let _ = writeln!(std::io::stderr(), "fuzz: {line}");
}

fn fuzz_dir() -> PathBuf {
    xtask::root().join("fuzz")
}

/// `cargo +nightly fuzz <args>` from `fuzz/`, with its own target directory and none of the
/// outer (stable) cargo's settings.
fn cargo_fuzz(args: &[&str]) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").arg("fuzz").args(args).current_dir(fuzz_dir());
    for var in [
        "CARGO",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTUP_TOOLCHAIN",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_TARGET_DIR", xtask::root().join("target").join("fuzz"));
    cmd
}

/// The seed files of a target.
fn seeds(target: &str) -> Vec<PathBuf> {
    let mut dirs = vec![fuzz_dir().join("seeds").join(target)];
    if target == "vmconfig" {
        let configs = xtask::root().join("configs");
        dirs.extend([configs.clone(), configs.join("bad")]);
    }
    let mut files = Vec::new();
    for dir in dirs {
        let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            let toml_only = target == "vmconfig" && !path.starts_with(fuzz_dir());
            if path.is_file() && (!toml_only || path.extension().is_some_and(|e| e == "toml")) {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(!files.is_empty(), "no seeds for {target}");
    files
}

/// What libFuzzer's status lines say (`#<execs> <EVENT> cov: <n> ft: <n> corp: <n>/<size> ...
/// exec/s: <n> ...`), and its final `stat::` lines.
#[derive(Default)]
struct Stats {
    execs: u64,
    cov: u64,
    corpus: u64,
    per_second: u64,
}

impl Stats {
    fn update(&mut self, line: &str) {
        if let Some((key, value)) = line.strip_prefix("stat::").and_then(|s| s.split_once(':')) {
            let value = value.trim().parse().unwrap_or(0);
            match key {
                "number_of_executed_units" => self.execs = value,
                "average_exec_per_sec" => self.per_second = value,
                _ => {}
            }
            return;
        }
        let mut words = line.split_whitespace();
        let Some(execs) = words.next().and_then(|w| w.strip_prefix('#')?.parse().ok()) else {
            return;
        };
        self.execs = execs;
        let words: Vec<&str> = words.collect();
        let after = |key: &str| {
            let i = words.iter().position(|w| *w == key)?;
            let value = words.get(i + 1)?;
            value.split('/').next()?.parse().ok()
        };
        if let Some(cov) = after("cov:") {
            self.cov = cov;
        }
        if let Some(corpus) = after("corp:") {
            self.corpus = corpus;
        }
        if let Some(rate) = after("exec/s:") {
            self.per_second = rate;
        }
    }
}

fn run_target(target: &str, seconds: u64, scratch: &Path) -> Result<(), String> {
    let corpus = scratch.join("corpus").join(target);
    fs::create_dir_all(&corpus).unwrap();
    let seeds = seeds(target);
    for (n, seed) in seeds.iter().enumerate() {
        // Numbered: seeds from different directories may share a name.
        let name = format!("{n:03}-{}", seed.file_name().unwrap().to_string_lossy());
        fs::copy(seed, corpus.join(name)).unwrap();
    }
    let artifacts = scratch.join("artifacts").join(target);
    fs::create_dir_all(&artifacts).unwrap();
    progress(&format!("{target}: {seconds} s from {} seeds", seeds.len()));

    let started = Instant::now();
    let corpus_arg = corpus.to_string_lossy().into_owned();
    let mut child = cargo_fuzz(&["run", target, &corpus_arg, "--"])
        .arg(format!("-max_total_time={seconds}"))
        .arg("-rss_limit_mb=2048")
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        // The vmconfig target writes its image files under the temporary directory.
        .env("TMPDIR", scratch)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo +nightly fuzz: {e}"))?;

    // libFuzzer reports on stderr: keep the tail, the stats of the latest status line, and the
    // first lines of a panic or sanitizer report (a backtrace can push them out of the tail).
    let stdout = child.stdout.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<_>>()
    });
    let mut tail = VecDeque::new();
    let mut report = Vec::new();
    let mut in_report = false;
    let mut stats = Stats::default();
    let mut reported = Instant::now();
    for line in BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok) {
        stats.update(&line);
        if reported.elapsed().as_secs() >= 10 && stats.execs > 0 {
            progress(&format!(
                "{target}: {} s, {} execs, cov {}",
                started.elapsed().as_secs(),
                stats.execs,
                stats.cov
            ));
            reported = Instant::now();
        }
        if report.is_empty() && (line.contains("panicked at") || line.contains("ERROR: ")) {
            in_report = true;
        }
        if in_report {
            in_report = report.len() < 12 && !line.starts_with("stack backtrace:");
            if in_report {
                report.push(line.clone());
            }
        }
        if tail.len() == TAIL {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    let status = child.wait().unwrap();
    tail.extend(out_thread.join().unwrap());
    let tail: Vec<String> = tail.into();
    let tail = tail.join("\n");

    // crash-, leak-, oom-, timeout-<hash>; a slow unit is no failure.
    let crashes: Vec<PathBuf> = fs::read_dir(&artifacts)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with("slow-"))
        .collect();
    if !crashes.is_empty() {
        // Kept for replaying: the scratch directory goes, the crash does not.
        let keep = fuzz_dir().join("artifacts").join(target);
        fs::create_dir_all(&keep).unwrap();
        let kept: Vec<String> = crashes
            .iter()
            .map(|c| {
                let to = keep.join(c.file_name().unwrap());
                fs::copy(c, &to).unwrap();
                to.display().to_string()
            })
            .collect();
        return Err(format!(
            "{target}: the fuzzer found a crash: {}\nreplay it: cd fuzz && cargo +nightly fuzz \
             run {target} {}\n{}\n--- fuzzer output (end) ---\n{tail}",
            kept.join(", "),
            kept[0],
            report.join("\n")
        ));
    }
    if !status.success() {
        let what = if stats.execs == 0 { "did not build or start" } else { "failed" };
        return Err(format!("{target}: cargo fuzz run {what} ({status})\n{tail}"));
    }
    progress(&format!(
        "{target}: done, {} s, {} execs ({}/s), cov {}, corpus {}",
        started.elapsed().as_secs(),
        stats.execs,
        stats.per_second,
        stats.cov,
        stats.corpus
    ));
    Ok(())
}

#[test]
fn fuzz_targets_find_no_crash() {
    let seconds = match std::env::var("ARMHV_FUZZ_SECONDS") {
        Ok(s) => s.parse().unwrap_or_else(|_| panic!("ARMHV_FUZZ_SECONDS={s:?}: not seconds")),
        Err(_) => 20,
    };

    progress(&format!("building {} targets (cargo +nightly fuzz build)", TARGETS.len()));
    let out = cargo_fuzz(&["build"]).output().unwrap_or_else(|e| {
        panic!("cannot run `cargo +nightly fuzz` ({e}); run scripts/setup.sh to install it")
    });
    assert!(
        out.status.success(),
        "cargo +nightly fuzz build failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    let scratch = std::env::temp_dir().join(format!("armhv-fuzz-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    let mut failures = Vec::new();
    for target in TARGETS {
        if let Err(e) = run_target(target, seconds, &scratch) {
            progress(&format!("{target}: FAILED"));
            failures.push(e);
        }
    }
    let _ = fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
