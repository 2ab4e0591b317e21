//! Edits of a config's TOML text that keep its comments and layout: the suite runs copies of
//! the bench configs with a VM's cmdline, a table's keys or the image paths changed.

use anyhow::{Result, anyhow};
use std::path::Path;

/// The value of a `key = "value"` line (a basic string without escapes), if the line is one.
pub fn string_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.trim_start().strip_prefix(key)?.trim_start().strip_prefix('=')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(&rest[..end])
}

/// Per `[[vm]]` table of a config text: its header line, its name and its cmdline line.
fn vm_tables(lines: &[&str]) -> Vec<(usize, Option<String>, Option<usize>)> {
    let mut tables: Vec<(usize, Option<String>, Option<usize>)> = Vec::new();
    let mut in_vm = false;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            in_vm = t.replace(' ', "") == "[[vm]]";
            if in_vm {
                tables.push((i, None, None));
            }
            continue;
        }
        let Some(table) = tables.last_mut().filter(|_| in_vm) else { continue };
        if let Some(name) = string_value(line, "name") {
            table.1 = Some(name.to_owned());
        } else if t.starts_with("cmdline") {
            table.2 = Some(i);
        }
    }
    tables
}

/// The `[[vm]]` named `vm`: its header line and cmdline line.
fn vm_table(lines: &[&str], vm: &str) -> Result<(usize, Option<usize>)> {
    vm_tables(lines)
        .into_iter()
        .find(|(_, name, _)| name.as_deref() == Some(vm))
        .map(|(header, _, cmdline)| (header, cmdline))
        .ok_or_else(|| anyhow!("no [[vm]] named {vm:?}"))
}

fn plain_cmdline<'a>(lines: &[&'a str], i: usize) -> Result<&'a str> {
    string_value(lines[i], "cmdline")
        .filter(|v| !v.contains('\\'))
        .ok_or_else(|| anyhow!("line {}: cmdline is not a plain \"...\" string", i + 1))
}

/// The cmdline of the `[[vm]]` named `vm` in a config text (`None`: it has none).
pub fn cmdline_of(text: &str, vm: &str) -> Result<Option<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let (_, cmdline) = vm_table(&lines, vm)?;
    cmdline.map(|i| plain_cmdline(&lines, i).map(str::to_owned)).transpose()
}

/// Config text with the cmdline of the `[[vm]]` named `vm` replaced by `edit(old)` (old is ""
/// when it has none).
pub fn edit_cmdline(text: &str, vm: &str, edit: impl Fn(&str) -> String) -> Result<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (header, cmdline) = vm_table(&lines, vm)?;
    let mut out: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    match cmdline {
        Some(i) => out[i] = format!("cmdline = \"{}\"", edit(plain_cmdline(&lines, i)?)),
        None => out.insert(header + 1, format!("cmdline = \"{}\"", edit(""))),
    }
    Ok(out.join("\n") + "\n")
}

/// Config text with `words` in the cmdline of the `[[vm]]` named `vm` (replacing the words
/// with the same `key=`).
pub fn rewrite_cmdline(text: &str, vm: &str, words: &str) -> Result<String> {
    let keys: Vec<&str> =
        words.split_whitespace().filter_map(|w| w.split_once('=')).map(|(k, _)| k).collect();
    edit_cmdline(text, vm, |old| {
        let mut kept: Vec<&str> = old
            .split_whitespace()
            .filter(|w| !w.split_once('=').is_some_and(|(k, _)| keys.contains(&k)))
            .collect();
        kept.extend(words.split_whitespace());
        kept.join(" ")
    })
}

/// Config text with `key = value` set in the top-level table `[name]` (added before the first
/// `[[vm]]` if there is none; a key it lacks is added under its header).
pub fn set_table_keys(text: &str, name: &str, keys: &[(&str, &str)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let header = format!("[{name}]");
    let start = match lines.iter().position(|l| l.trim().replace(' ', "") == header) {
        Some(i) => i,
        None => {
            let at = lines.iter().position(|l| l.trim().starts_with('[')).unwrap_or(lines.len());
            lines.splice(at..at, [header.clone(), String::new()]);
            at
        }
    };
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.trim().starts_with('['))
        .map_or(lines.len(), |i| start + 1 + i);
    for (key, value) in keys {
        let line = format!("{key} = {value}");
        let found = (start + 1..end).find(|&i| {
            let t = lines[i].trim_start();
            t.strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('='))
        });
        match found {
            Some(i) => lines[i] = line,
            None => lines.insert(start + 1, line),
        }
    }
    lines.join("\n") + "\n"
}

/// Config text with every relative `kernel`, `initrd` and `image` path made absolute against
/// `dir` (the original's directory), so that a copy elsewhere still finds the files.
pub fn absolute_paths(text: &str, dir: &Path) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        let key = ["kernel", "initrd", "image"]
            .into_iter()
            .find(|k| t.strip_prefix(k).is_some_and(|r| r.trim_start().starts_with('=')));
        let value = key.and_then(|k| string_value(line, k));
        match (key, value) {
            (Some(k), Some(v)) if !v.starts_with('@') && Path::new(v).is_relative() => {
                out.push_str(&format!("{k} = \"{}\"", dir.join(v).display()));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_rewrites_the_bench_cmdline_only() {
        let text = "# comment\n[[vm]]\nname = \"bench\"\nvcpus = 2\ncmdline = \"vmswitch hypercall n=5\"\n\
                    devices = [\"pl011\"]\n\n[[vm]]\nname = \"partner\"\ncmdline = \"vmswitch-partner\"\n";
        let out = rewrite_cmdline(text, "bench", "n=1000 warmup=100").unwrap();
        assert!(out.contains("cmdline = \"vmswitch hypercall n=1000 warmup=100\"\n"), "{out}");
        assert!(out.contains("cmdline = \"vmswitch-partner\"\n"));
        assert!(out.starts_with("# comment\n[[vm]]\n"));
        // No cmdline yet: one is added under the table header; the name may come after it.
        let text = "[[vm]]\nvcpus = 1\nname = \"bench\"\n[[vm.disk]]\nname = \"x\"\n";
        let out = rewrite_cmdline(text, "bench", "n=1000 warmup=100").unwrap();
        assert_eq!(
            out,
            "[[vm]]\ncmdline = \"n=1000 warmup=100\"\nvcpus = 1\nname = \"bench\"\n[[vm.disk]]\nname = \"x\"\n"
        );
        assert!(rewrite_cmdline(text, "nobody", "n=1000 warmup=100").is_err());
    }

    #[test]
    fn table_keys() {
        let t = set_table_keys(
            "[scheduler]\nquantum_ms = 10\n\n[irqdist]\nenabled = true\nspread = \"one\"\n\n[[vm]]\nname = \"rt\"\n",
            "irqdist",
            &[("enabled", "false"), ("spread", "\"all\"")],
        );
        assert!(t.contains("[irqdist]\nenabled = false\nspread = \"all\"\n"), "{t}");
        assert!(t.contains("quantum_ms = 10"));
        // A table or key the text lacks is added.
        let bare = "[[vm]]\nname = \"x\"\n";
        let t = set_table_keys(bare, "irqdist", &[("enabled", "true")]);
        assert_eq!(t, "[irqdist]\nenabled = true\n\n[[vm]]\nname = \"x\"\n");
        let t = set_table_keys("[irqdist]\nenabled = true\n", "irqdist", &[("spread", "\"one\"")]);
        assert_eq!(t, "[irqdist]\nspread = \"one\"\nenabled = true\n");
    }

    #[test]
    fn absolute_paths_for_a_copy() {
        let text = "[[vm]]\nkernel = \"../../build/linux/Image\"\ninitrd = \"/abs/initrd\"\n\
                    cmdline = \"x\"\n[[vm]]\nkernel = \"@testguest\"\n[[vm.disk]]\nimage = \"d.img\"\n";
        let out = absolute_paths(text, Path::new("/r/configs/bench"));
        assert_eq!(
            out,
            "[[vm]]\nkernel = \"/r/configs/bench/../../build/linux/Image\"\ninitrd = \"/abs/initrd\"\n\
             cmdline = \"x\"\n[[vm]]\nkernel = \"@testguest\"\n[[vm.disk]]\nimage = \"/r/configs/bench/d.img\"\n"
        );
    }
}
