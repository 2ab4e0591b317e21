//! Reading `configs/*.toml` (host only).
//!
//! The schema is walked by hand over `toml`'s spanned document instead of
//! derived with serde, for the error messages: each names the file, the line,
//! the full key path (`vm[1].memory_size`) and the fix, and unknown keys list
//! the allowed ones. See `configs/README.md` for the format.

use std::borrow::ToOwned;
use std::fmt;
use std::format;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

use addr::{Ipa, IpaRange};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::image::{ARM64_HEADER_LEN, Arm64Header, ImageFacts, InitrdFacts, Placement, resolve};
use crate::rules::{
    Violation, check_affinity_len, check_cmdline, check_count, check_cpu, check_devices,
    check_image_size, check_memory, check_name, check_total_memory, check_unique_names,
    check_vcpus, check_vm,
};
use crate::spec::{LoadImage, VmSpec};
use crate::{DEFAULT_MEMORY_BASE, DeviceKind, MAX_VCPUS, Machine, parse_size};

/// Keys a `[[vm]]` table may have, in the order the docs list them.
const VM_KEYS: &[&str] = &[
    "name",
    "vcpus",
    "cpu_affinity",
    "memory_base",
    "memory_size",
    "kernel",
    "kernel_load",
    "entry",
    "initrd",
    "initrd_load",
    "cmdline",
    "devices",
];

/// Names after `@` are crate names under `guests/`; keeping them to this
/// alphabet keeps them from being paths.
const MAX_GUEST_NAME_LEN: usize = 64;

/// Where an image comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageRef {
    /// `"@name"`: a guest this project builds (`guests/<name>`); the build
    /// tool builds it and supplies the bytes.
    Built(String),
    /// Any other string: a file, already resolved against the config file's
    /// directory, and known to exist when the config was loaded.
    Path(PathBuf),
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageRef::Built(name) => write!(f, "@{name}"),
            ImageRef::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

/// One `[[vm]]` table, with defaults that need no image filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmConfig {
    pub name: String,
    pub vcpus: u8,
    /// The physical CPU of each vCPU (`len == vcpus`), or `None` to let the
    /// scheduler place them.
    pub cpu_affinity: Option<Vec<u32>>,
    pub memory: IpaRange,
    pub kernel: ImageRef,
    /// `None`: RAM base + `text_offset` for an arm64 Linux Image, else RAM
    /// base + 0x80000 (decided in [`Config::spec`], once the bytes are known).
    pub kernel_load: Option<Ipa>,
    /// `None`: the kernel's load address.
    pub entry: Option<Ipa>,
    pub initrd: Option<ImageRef>,
    /// `None`: as high as the initrd fits below the device tree.
    pub initrd_load: Option<Ipa>,
    pub cmdline: String,
    pub devices: Vec<DeviceKind>,
}

/// A validated config file.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file, as the caller named it (errors quote it).
    pub path: PathBuf,
    /// The machine it was validated for.
    pub machine: Machine,
    pub vms: Vec<VmConfig>,
    /// Source lines of each VM's keys, for errors found after loading.
    lines: Vec<KeyLines>,
}

/// A config that cannot be used, and what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based line of the offending key (or table), when there is one.
    pub line: Option<usize>,
    /// The key path, e.g. `vm[1].memory_size`.
    pub key: Option<String>,
    /// What is wrong, then the fix.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Reads and validates a config file for `machine`.
pub fn load(path: &Path, machine: &Machine) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        path: path.to_owned(),
        line: None,
        key: None,
        message: format!("cannot read the config file: {e}"),
    })?;
    parse(&text, path, machine)
}

/// Validates config text as if read from `origin`: relative image paths are
/// resolved against `origin`'s directory and must exist.
pub fn parse(text: &str, origin: &Path, machine: &Machine) -> Result<Config, ConfigError> {
    let cx = Cx { text, path: origin, dir: origin.parent().unwrap_or(Path::new("")) };
    let doc = DeTable::parse(text).map_err(|e| ConfigError {
        path: origin.to_owned(),
        line: e.span().map(|s| cx.line(s.start)),
        key: None,
        message: format!("invalid TOML: {}", e.message()),
    })?;
    let doc = doc.get_ref();

    let mut top: Vec<_> = doc.iter().collect();
    top.sort_by_key(|(k, _)| k.span().start);
    for (key, _) in &top {
        if key.get_ref() != "vm" {
            return Err(cx.err(
                key.span().start,
                key.get_ref().to_string(),
                "unknown top-level key; the only one allowed is [[vm]] (the machine's RAM \
                 and CPUs come from the build tool, not the file)"
                    .to_owned(),
            ));
        }
    }

    let tables = match top.first() {
        None => Vec::new(),
        Some((_, value)) => vm_tables(&cx, value)?,
    };
    check_count(tables.len()).map_err(|v| cx.violation(v, None))?;

    let mut vms = Vec::with_capacity(tables.len());
    let mut lines = Vec::with_capacity(tables.len());
    for (i, (span_start, table)) in tables.iter().enumerate() {
        let mut keys = KeyLines { table: cx.line(*span_start), keys: Vec::new() };
        vms.push(parse_vm(&cx, i, table, &mut keys)?);
        lines.push(keys);
    }

    let config = Config { path: origin.to_owned(), machine: *machine, vms, lines };
    config.check()?;
    Ok(config)
}

impl Config {
    /// The rules that need no image bytes; images named by path are probed
    /// for size and header.
    fn check(&self) -> Result<(), ConfigError> {
        let m = &self.machine;
        for (i, vm) in self.vms.iter().enumerate() {
            let v = |r: Result<(), Violation>| r.map_err(|v| self.error(v));
            v(check_name(i, &vm.name))?;
            v(check_vcpus(i, u64::from(vm.vcpus)))?;
            if let Some(cpus) = &vm.cpu_affinity {
                v(check_affinity_len(i, cpus.len(), vm.vcpus))?;
                for &cpu in cpus {
                    v(check_cpu(i, u64::from(cpu), m))?;
                }
            }
            v(check_memory(i, vm.memory, m))?;
            v(check_cmdline(i, &vm.cmdline))?;
            v(check_devices(i, &vm.devices))?;
            let kernel = self.probe(i, "kernel", &vm.kernel)?;
            let initrd = match &vm.initrd {
                None => InitrdFacts::None,
                Some(r) => match self.probe(i, "initrd", r)? {
                    Some(facts) => InitrdFacts::Len(facts.len),
                    None => InitrdFacts::Unknown,
                },
            };
            v(resolve(i, &placement(vm), kernel, initrd).map(|_| ()))?;
        }
        let names = self.vms.iter().map(|vm| vm.name.as_str());
        check_unique_names(names).map_err(|v| self.error(v))?;
        check_total_memory(self.vms.iter().map(|vm| vm.memory.size), &self.machine)
            .map_err(|v| self.error(v))
    }

    /// What can be known of an image before the build: nothing for `@name`,
    /// size and arm64 header for a file (which must exist and not be empty).
    fn probe(
        &self,
        i: usize,
        key: &'static str,
        image: &ImageRef,
    ) -> Result<Option<ImageFacts>, ConfigError> {
        let ImageRef::Path(path) = image else {
            return Ok(None);
        };
        let fail = |message: String| self.error(Violation::new(i, key, message));
        let meta = std::fs::metadata(path).map_err(|e| {
            fail(format!(
                "image file {} cannot be opened ({e}); fix the path (relative paths are \
                 relative to the config file) or write \"@name\" for a guest built by this \
                 project",
                path.display()
            ))
        })?;
        if !meta.is_file() {
            return Err(fail(format!(
                "{} is not a regular file; point {key} at the image file",
                path.display()
            )));
        }
        if meta.len() == 0 {
            return Err(fail(format!("image file {} is empty", path.display())));
        }
        let mut head = Vec::with_capacity(ARM64_HEADER_LEN);
        File::open(path)
            .and_then(|f| f.take(ARM64_HEADER_LEN as u64).read_to_end(&mut head))
            .map_err(|e| fail(format!("cannot read image file {}: {e}", path.display())))?;
        Ok(Some(ImageFacts { len: meta.len(), linux: Arm64Header::parse(&head) }))
    }

    /// Resolves VM `index` with its images' bytes into what the package
    /// carries: defaults filled in from the images (an arm64 Image header
    /// decides the load address and BSS), and every rule re-checked with the
    /// real sizes.
    ///
    /// `initrd` must be `Some` exactly when the config names an initrd.
    ///
    /// # Panics
    /// If `index` is not a VM of this config.
    pub fn spec<'a>(
        &'a self,
        index: usize,
        kernel: &'a [u8],
        initrd: Option<&'a [u8]>,
    ) -> Result<VmSpec<'a>, ConfigError> {
        let vm = &self.vms[index];
        let v = |r: Result<(), Violation>| r.map_err(|v| self.error(v));
        v(check_image_size(index, "kernel", kernel.len(), kernel.len() as u64))?;
        let initrd_facts = match (&vm.initrd, initrd) {
            (None, None) => InitrdFacts::None,
            (Some(_), Some(bytes)) => {
                v(check_image_size(index, "initrd", bytes.len(), bytes.len() as u64))?;
                InitrdFacts::Len(bytes.len() as u64)
            }
            (Some(r), None) => {
                return Err(self.error(Violation::new(
                    index,
                    "initrd",
                    format!("the config names initrd {r}, but no initrd bytes were supplied"),
                )));
            }
            (None, Some(_)) => {
                return Err(self.error(Violation::new(
                    index,
                    "initrd",
                    "initrd bytes were supplied, but the config names no initrd".to_owned(),
                )));
            }
        };
        let r = resolve(index, &placement(vm), Some(ImageFacts::of(kernel)), initrd_facts)
            .map_err(|v| self.error(v))?;

        let mut cpu_affinity = [None; MAX_VCPUS as usize];
        for (slot, &cpu) in vm.cpu_affinity.iter().flatten().enumerate() {
            if let Some(s) = cpu_affinity.get_mut(slot) {
                *s = Some(cpu);
            }
        }
        let spec = VmSpec {
            name: &vm.name,
            vcpus: vm.vcpus,
            cpu_affinity,
            memory: vm.memory,
            entry: r.entry,
            kernel: LoadImage { load: r.kernel.start, bytes: kernel, mem_size: r.kernel.size },
            initrd: r.initrd.zip(initrd).map(|(range, bytes)| LoadImage {
                load: range.start,
                bytes,
                mem_size: bytes.len() as u64,
            }),
            cmdline: &vm.cmdline,
            devices: vm.devices.clone(),
        };
        check_vm(index, &spec, &self.machine).map_err(|v| self.error(v))?;
        Ok(spec)
    }

    /// Turns a rule violation into an error that quotes this file and the
    /// line of the key (or of the VM's `[[vm]]` header if the key was
    /// defaulted).
    fn error(&self, v: Violation) -> ConfigError {
        let line = v.vm.and_then(|i| self.lines.get(i)).map(|l| l.line_of(v.key));
        ConfigError { path: self.path.clone(), line, key: Some(v.path()), message: v.message }
    }
}

fn placement(vm: &VmConfig) -> Placement {
    Placement {
        memory: vm.memory,
        kernel_load: vm.kernel_load,
        entry: vm.entry,
        initrd_load: vm.initrd_load,
    }
}

#[derive(Clone, Debug)]
struct KeyLines {
    table: usize,
    keys: Vec<(&'static str, usize)>,
}

impl KeyLines {
    fn line_of(&self, key: &str) -> usize {
        self.keys.iter().find(|(k, _)| *k == key).map_or(self.table, |&(_, line)| line)
    }
}

/// What every parse error needs to say where it is.
struct Cx<'t> {
    text: &'t str,
    path: &'t Path,
    dir: &'t Path,
}

impl Cx<'_> {
    fn line(&self, offset: usize) -> usize {
        let upto = self.text.get(..offset).unwrap_or(self.text);
        upto.bytes().filter(|&b| b == b'\n').count() + 1
    }

    fn err(&self, offset: usize, key: String, message: String) -> ConfigError {
        ConfigError {
            path: self.path.to_owned(),
            line: Some(self.line(offset)),
            key: Some(key),
            message,
        }
    }

    fn violation(&self, v: Violation, offset: Option<usize>) -> ConfigError {
        ConfigError {
            path: self.path.to_owned(),
            line: offset.map(|o| self.line(o)),
            key: Some(v.path()),
            message: v.message,
        }
    }
}

type Table<'t> = DeTable<'t>;
type Value<'t> = Spanned<DeValue<'t>>;

/// The `[[vm]]` tables with the offset of each header.
fn vm_tables<'v, 't>(
    cx: &Cx<'_>,
    value: &'v Value<'t>,
) -> Result<Vec<(usize, &'v Table<'t>)>, ConfigError> {
    let not_tables = || {
        cx.err(
            value.span().start,
            "vm".to_owned(),
            "must be an array of tables; start each VM with a [[vm]] line (double brackets)"
                .to_owned(),
        )
    };
    let DeValue::Array(items) = value.get_ref() else {
        return Err(not_tables());
    };
    items
        .iter()
        .map(|item| match item.get_ref() {
            DeValue::Table(t) => Ok((item.span().start, t)),
            _ => Err(not_tables()),
        })
        .collect()
}

/// Typed access to one `[[vm]]` table, recording the line of every key read.
struct VmTable<'a, 't> {
    cx: &'a Cx<'a>,
    i: usize,
    table: &'a Table<'t>,
    lines: &'a mut KeyLines,
}

impl<'a, 't> VmTable<'a, 't> {
    fn get(&mut self, key: &'static str) -> Option<&'a Value<'t>> {
        let (k, v) = self.table.iter().find(|(k, _)| k.get_ref() == key)?;
        if !self.lines.keys.iter().any(|(k, _)| *k == key) {
            let line = self.cx.line(k.span().start);
            self.lines.keys.push((key, line));
        }
        Some(v)
    }

    fn err(&self, value: &Value<'_>, key: &str, message: String) -> ConfigError {
        self.cx.err(value.span().start, format!("vm[{}].{key}", self.i), message)
    }

    fn type_err(&self, value: &Value<'_>, key: &str, expected: &str, example: &str) -> ConfigError {
        self.err(
            value,
            key,
            format!(
                "expected {expected}, found {}; write e.g. {key} = {example}",
                value.get_ref().type_str()
            ),
        )
    }

    fn missing(&self, key: &str, example: &str) -> ConfigError {
        ConfigError {
            path: self.cx.path.to_owned(),
            line: Some(self.lines.table),
            key: Some(format!("vm[{}].{key}", self.i)),
            message: format!("missing required key; add e.g. {key} = {example}"),
        }
    }

    fn string(&mut self, key: &'static str, example: &str) -> Result<Option<&'a str>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.get_ref() {
            DeValue::String(s) => Ok(Some(s.as_ref())),
            _ => Err(self.type_err(v, key, "a string", example)),
        }
    }

    fn integer_of(&self, v: &Value<'_>, key: &str, example: &str) -> Result<u64, ConfigError> {
        let DeValue::Integer(n) = v.get_ref() else {
            return Err(self.type_err(v, key, "an integer", example));
        };
        if n.as_str().starts_with('-') {
            return Err(self.err(v, key, format!("{n} is negative; write e.g. {key} = {example}")));
        }
        u64::from_str_radix(n.as_str(), n.radix())
            .map_err(|_| self.err(v, key, format!("{n} is out of range")))
    }

    fn integer(&mut self, key: &'static str, example: &str) -> Result<Option<u64>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => self.integer_of(v, key, example).map(Some),
        }
    }

    fn array(
        &mut self,
        key: &'static str,
        example: &str,
    ) -> Result<Option<&'a [Value<'t>]>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.get_ref() {
            DeValue::Array(items) => Ok(Some(items)),
            _ => Err(self.type_err(v, key, "an array", example)),
        }
    }

    fn image(&mut self, key: &'static str) -> Result<Option<ImageRef>, ConfigError> {
        let example = "\"@testguest\" or \"path/to/Image\"";
        let Some(text) = self.string(key, example)? else {
            return Ok(None);
        };
        let v = self.get(key).expect("read just above");
        if let Some(name) = text.strip_prefix('@') {
            let ok = (1..=MAX_GUEST_NAME_LEN).contains(&name.len())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(self.err(
                    v,
                    key,
                    format!(
                        "{text:?}: '@' must be followed by the name of a guest under guests/, \
                         e.g. \"@testguest\""
                    ),
                ));
            }
            return Ok(Some(ImageRef::Built(name.to_owned())));
        }
        if text.is_empty() {
            return Err(self.err(v, key, format!("is empty; write e.g. {key} = {example}")));
        }
        Ok(Some(ImageRef::Path(self.cx.dir.join(text))))
    }
}

fn parse_vm(
    cx: &Cx<'_>,
    i: usize,
    table: &Table<'_>,
    lines: &mut KeyLines,
) -> Result<VmConfig, ConfigError> {
    // Unknown keys first: a typo'd optional key would otherwise be silently
    // ignored, which is the worst kind of config bug.
    let mut unknown: Vec<_> =
        table.iter().filter(|(k, _)| !VM_KEYS.contains(&k.get_ref().as_ref())).collect();
    unknown.sort_by_key(|(k, _)| k.span().start);
    if let Some((k, _)) = unknown.first() {
        let hint = closest(k.get_ref(), VM_KEYS)
            .map(|c| format!("did you mean `{c}`? "))
            .unwrap_or_default();
        return Err(cx.err(
            k.span().start,
            format!("vm[{i}].{}", k.get_ref()),
            format!("unknown key; {hint}allowed keys are {}", VM_KEYS.join(", ")),
        ));
    }

    let mut t = VmTable { cx, i, table, lines };

    let name = t.string("name", "\"vm0\"")?.ok_or_else(|| t.missing("name", "\"vm0\""))?.to_owned();

    let vcpus = t.integer("vcpus", "1")?.ok_or_else(|| t.missing("vcpus", "1"))?;
    if let Err(v) = check_vcpus(i, vcpus) {
        let value = t.get("vcpus").expect("read just above");
        return Err(t.err(value, "vcpus", v.message));
    }
    let vcpus = vcpus as u8; // in 1..=MAX_VCPUS

    let cpu_affinity = match t.array("cpu_affinity", "[0]")? {
        None => None,
        Some(items) => {
            let mut cpus = Vec::with_capacity(items.len());
            for item in items {
                let cpu = t.integer_of(item, "cpu_affinity", "[0]")?;
                // Out-of-range CPUs are reported by the machine check with
                // the real number; u32::MAX never names a real CPU.
                cpus.push(u32::try_from(cpu).unwrap_or(u32::MAX));
            }
            Some(cpus)
        }
    };

    let base = t.integer("memory_base", "0x4000_0000")?.map_or(DEFAULT_MEMORY_BASE, Ipa);
    let size_example = "\"32M\"";
    let size = match t.get("memory_size") {
        None => return Err(t.missing("memory_size", size_example)),
        Some(v) => match v.get_ref() {
            DeValue::String(s) => parse_size(s).ok_or_else(|| {
                t.err(
                    v,
                    "memory_size",
                    format!(
                        "{s:?} is not a size; write e.g. \"512K\", \"64M\", \"1G\" or a byte count"
                    ),
                )
            })?,
            DeValue::Integer(_) => t.integer_of(v, "memory_size", size_example)?,
            _ => {
                return Err(t.type_err(
                    v,
                    "memory_size",
                    "a size string or an integer",
                    size_example,
                ));
            }
        },
    };

    let kernel = t.image("kernel")?.ok_or_else(|| t.missing("kernel", "\"@testguest\""))?;
    let kernel_load = t.integer("kernel_load", "0x4008_0000")?.map(Ipa);
    let entry = t.integer("entry", "0x4008_0000")?.map(Ipa);
    let initrd = t.image("initrd")?;
    let initrd_load = t.integer("initrd_load", "0x4100_0000")?.map(Ipa);
    if initrd_load.is_some() && initrd.is_none() {
        let v = t.get("initrd_load").expect("read just above");
        return Err(t.err(
            v,
            "initrd_load",
            "is set but there is no initrd; add initrd = \"path\" or remove initrd_load".to_owned(),
        ));
    }
    let cmdline = t.string("cmdline", "\"console=ttyAMA0\"")?.unwrap_or("").to_owned();

    let devices = match t.array("devices", "[\"pl011\"]")? {
        None => vec![DeviceKind::Pl011],
        Some(items) => {
            let mut devices = Vec::with_capacity(items.len());
            for item in items {
                let DeValue::String(s) = item.get_ref() else {
                    return Err(t.type_err(item, "devices", "an array of strings", "[\"pl011\"]"));
                };
                let kind = DeviceKind::from_name(s).ok_or_else(|| {
                    let known: Vec<_> = DeviceKind::ALL.iter().map(|k| k.name()).collect();
                    t.err(
                        item,
                        "devices",
                        format!("unknown device kind {s:?}; known kinds: {}", known.join(", ")),
                    )
                })?;
                devices.push(kind);
            }
            devices
        }
    };

    Ok(VmConfig {
        name,
        vcpus,
        cpu_affinity,
        memory: IpaRange::new(base, size),
        kernel,
        kernel_load,
        entry,
        initrd,
        initrd_load,
        cmdline,
        devices,
    })
}

/// The allowed key nearest to a misspelt one, if it is near enough to be a
/// plausible typo (edit distance at most 2, or one is a prefix of the other).
fn closest<'k>(key: &str, allowed: &[&'k str]) -> Option<&'k str> {
    allowed
        .iter()
        .map(|&a| (edit_distance(key, a), a))
        .filter(|&(d, a)| d <= 2 || (key.len() >= 3 && (a.starts_with(key) || key.starts_with(a))))
        .min_by_key(|&(d, _)| d)
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Machine = Machine { ram_bytes: 1 << 30, cpus: 4 };

    fn origin() -> PathBuf {
        PathBuf::from("configs/test.toml")
    }

    fn ok(text: &str) -> Config {
        parse(text, &origin(), &M).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(text: &str) -> ConfigError {
        parse(text, &origin(), &M).expect_err("accepted a bad config")
    }

    const MIN: &str =
        "[[vm]]\nname = \"a\"\nvcpus = 1\nmemory_size = \"32M\"\nkernel = \"@testguest\"\n";

    /// MIN with extra lines appended to the VM table.
    fn with(extra: &str) -> String {
        format!("{MIN}{extra}\n")
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = ok(MIN);
        let vm = &c.vms[0];
        assert_eq!(vm.memory, IpaRange::new(Ipa(0x4000_0000), 32 << 20));
        assert_eq!(vm.kernel, ImageRef::Built("testguest".to_owned()));
        assert_eq!(vm.devices, [DeviceKind::Pl011]);
        assert_eq!(vm.cmdline, "");
        assert_eq!(vm.cpu_affinity, None);
        assert_eq!((vm.kernel_load, vm.entry, &vm.initrd), (None, None, &None));
    }

    #[test]
    fn all_keys() {
        let c = ok(r#"
[[vm]]
name = "linux"
vcpus = 2
cpu_affinity = [2, 3]
memory_base = 0x8000_0000
memory_size = 268435456
kernel = "@testguest"
kernel_load = 0x8020_0000
entry = 0x8020_0000
initrd = "@initramfs"
initrd_load = 0x8400_0000
cmdline = "console=ttyAMA0"
devices = []
"#);
        let vm = &c.vms[0];
        assert_eq!(vm.vcpus, 2);
        assert_eq!(vm.cpu_affinity, Some(vec![2, 3]));
        assert_eq!(vm.memory, IpaRange::new(Ipa(0x8000_0000), 256 << 20));
        assert_eq!(vm.kernel_load, Some(Ipa(0x8020_0000)));
        assert_eq!(vm.initrd, Some(ImageRef::Built("initramfs".to_owned())));
        assert_eq!(vm.initrd_load, Some(Ipa(0x8400_0000)));
        assert!(vm.devices.is_empty());
    }

    #[test]
    fn paths_are_relative_to_the_config_file() {
        let dir = std::env::temp_dir().join(format!("vmconfig-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k.bin"), [0u8; 100]).unwrap();
        let text = MIN.replace("@testguest", "k.bin");
        let c = parse(&text, &dir.join("x.toml"), &M).unwrap();
        assert_eq!(c.vms[0].kernel, ImageRef::Path(dir.join("k.bin")));
        // Not relative to the working directory.
        let e = parse(&text, Path::new("elsewhere/x.toml"), &M).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("vm[0].kernel"));
        assert!(e.message.contains("elsewhere/k.bin"), "{e}");
        // A directory is not an image.
        let e = parse(&MIN.replace("@testguest", "."), &dir.join("x.toml"), &M).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn error_names_file_line_key_and_fix() {
        let e = err(&with("cpu_affinity = [7]"));
        assert_eq!(
            e.to_string(),
            "configs/test.toml:6: vm[0].cpu_affinity: physical CPU 7 does not exist \
             (the machine has 4 CPUs); use 0..=3"
        );
        let e = err(&with("memroy_base = 0x4000_0000"));
        assert_eq!(e.key.as_deref(), Some("vm[0].memroy_base"));
        assert!(e.message.contains("did you mean `memory_base`?"), "{e}");
        assert!(e.message.contains("allowed keys are name, vcpus"), "{e}");
        // Syntax errors carry the line too.
        let e = err("[[vm]]\nname = \n");
        assert_eq!((e.line, e.key.as_deref()), (Some(2), None));
    }

    #[test]
    fn type_and_shape_errors() {
        let cases = [
            ("[vm]\nname = \"a\"", "vm"),
            ("vm = [1, 2]", "vm"),
            ("[machine]\ncpus = 4", "machine"),
            ("", "vm"),
            (&MIN.replace("vcpus = 1", "vcpus = \"one\""), "vm[0].vcpus"),
            (&MIN.replace("vcpus = 1", "vcpus = -1"), "vm[0].vcpus"),
            (&MIN.replace("vcpus = 1", "vcpus = 300"), "vm[0].vcpus"),
            (&MIN.replace("vcpus = 1\n", ""), "vm[0].vcpus"),
            (&MIN.replace("name = \"a\"\n", ""), "vm[0].name"),
            (&MIN.replace("\"32M\"", "\"32MB\""), "vm[0].memory_size"),
            (&MIN.replace("\"32M\"", "32.0"), "vm[0].memory_size"),
            (&MIN.replace("\"32M\"", "\"3M\""), "vm[0].memory_size"),
            (&MIN.replace("@testguest", "@../etc"), "vm[0].kernel"),
            (&MIN.replace("@testguest", ""), "vm[0].kernel"),
            (&with("cpu_affinity = 1"), "vm[0].cpu_affinity"),
            (&with("cpu_affinity = [\"0\"]"), "vm[0].cpu_affinity"),
            (&with("cpu_affinity = [0, 1]"), "vm[0].cpu_affinity"),
            (&with("cpu_affinity = [4294967296]"), "vm[0].cpu_affinity"),
            (&with("devices = [\"virtio-net\"]"), "vm[0].devices"),
            (&with("devices = [1]"), "vm[0].devices"),
            (&with("devices = [\"pl011\", \"pl011\"]"), "vm[0].devices"),
            (&with("cmdline = \"a\\u0000b\""), "vm[0].cmdline"),
            (&with("initrd_load = 0x4100_0000"), "vm[0].initrd_load"),
            (&with("entry = 0x4008_0002"), "vm[0].entry"),
            (&with("kernel_load = 0x41f0_0000"), "vm[0].kernel_load"),
            (&with("kernel_load = 0x5000_0000"), "vm[0].kernel_load"),
            (&with("memory_base = 0x0900_0000"), "vm[0].memory_base"),
            (&with("memory_base = 0x4010_0000"), "vm[0].memory_base"),
            (&format!("{MIN}{MIN}"), "vm[1].name"),
        ];
        for (text, key) in cases {
            let e = err(text);
            assert_eq!(e.key.as_deref(), Some(key), "{text}\n=> {e}");
        }
    }

    #[test]
    fn vm_count_limits() {
        let vm = |i: usize| MIN.replace("\"a\"", &format!("\"vm{i}\"")).replace("32M", "4M");
        let sixteen: String = (0..16).map(vm).collect();
        assert_eq!(ok(&sixteen).vms.len(), 16);
        let seventeen: String = (0..17).map(vm).collect();
        assert_eq!(err(&seventeen).key.as_deref(), Some("vm"));
    }

    #[test]
    fn total_memory_is_checked_across_vms() {
        let text = format!(
            "{}{}",
            MIN.replace("32M", "512M"),
            MIN.replace("\"a\"", "\"b\"").replace("32M", "512M")
        );
        let e = err(&text);
        assert_eq!(e.key.as_deref(), Some("vm[1].memory_size"));
        assert_eq!(e.line, Some(9));
    }

    #[test]
    fn spec_resolves_defaults_from_the_bytes() {
        let c = ok(&with("cpu_affinity = [3]\ninitrd = \"@rd\"\ncmdline = \"x\""));
        let kernel = vec![1u8; 5000];
        let rd = vec![2u8; 3 << 20];
        let s = c.spec(0, &kernel, Some(&rd)).unwrap();
        assert_eq!(s.kernel.load, Ipa(0x4008_0000));
        assert_eq!(s.entry, Ipa(0x4008_0000));
        assert_eq!(s.initrd.unwrap().load, Ipa(0x41b0_0000));
        assert_eq!(s.cpu_affinity[0], Some(3));
        assert_eq!(s.cmdline, "x");

        // A kernel that grows into the device tree is caught now.
        let big = vec![1u8; 31 << 20];
        assert_eq!(c.spec(0, &big, Some(&rd)).unwrap_err().key.as_deref(), Some("vm[0].kernel"));
        assert_eq!(c.spec(0, &kernel, None).unwrap_err().key.as_deref(), Some("vm[0].initrd"));
        assert_eq!(c.spec(0, &[], Some(&rd)).unwrap_err().key.as_deref(), Some("vm[0].kernel"));
        // The error points at the line of the key, or of [[vm]] if defaulted.
        let e = c.spec(0, &big, Some(&rd)).unwrap_err();
        assert_eq!(e.line, Some(5));
        let e = c.spec(0, &vec![1u8; 29 << 20], Some(&rd)).unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("vm[0].initrd"), Some(7)));
    }

    #[test]
    fn suggestions() {
        assert_eq!(closest("memroy_size", VM_KEYS), Some("memory_size"));
        assert_eq!(closest("cpus", VM_KEYS), Some("vcpus"));
        assert_eq!(closest("initrd_addr", VM_KEYS), Some("initrd"));
        assert_eq!(closest("qwertyuiop", VM_KEYS), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
