//! The semantic rules, shared by the config loader (host) and the package
//! decoder (hypervisor).
//!
//! Each rule names the config key it is about, so the same violation reads
//! `configs/x.toml:7: vm[1].memory_size: ...` on the host and
//! `vm[1].memory_size: ...` in the hypervisor's boot log. Messages end with the
//! fix, because the person reading them is editing a TOML file.

use alloc::format;
use alloc::string::String;
use core::fmt;

use addr::{Ipa, IpaRange};

use crate::spec::VmSpec;
use crate::{
    Addr, DEFAULT_KERNEL_OFFSET, DeviceKind, FDT_AREA_SIZE, GUEST_RAM_START, HYPERVISOR_RESERVE,
    IPA_LIMIT, LOAD_ALIGN, MAX_CMDLINE_LEN, MAX_DEVICES, MAX_NAME_LEN, MAX_VCPUS, MAX_VMS,
    MEMORY_ALIGN, MIN_MEMORY, Machine, Size, fdt_area,
};

/// A broken rule: which VM, which key, what is wrong and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index of the VM in file order; `None` for rules about the whole set.
    pub vm: Option<usize>,
    /// The config key the rule is about (`memory_size`), or `vm` for the set.
    pub key: &'static str,
    /// What is wrong, then the fix.
    pub message: String,
}

impl Violation {
    pub(crate) fn new(vm: usize, key: &'static str, message: String) -> Self {
        Self { vm: Some(vm), key, message }
    }

    /// The key's path as written in error messages, e.g. `vm[1].memory_size`.
    pub fn path(&self) -> String {
        match self.vm {
            Some(i) => format!("vm[{i}].{}", self.key),
            None => String::from(self.key),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path(), self.message)
    }
}

impl core::error::Error for Violation {}

type Rule = Result<(), Violation>;

/// Runs every rule on a set of resolved VMs.
///
/// [`encode_package`](crate::encode_package) calls it so the build tool never
/// writes a package the hypervisor would refuse, and
/// [`decode_package`](crate::decode_package) calls it because the package is
/// untrusted input.
pub fn check_vms(vms: &[VmSpec<'_>], machine: &Machine) -> Rule {
    check_count(vms.len())?;
    for (i, vm) in vms.iter().enumerate() {
        check_vm(i, vm, machine)?;
    }
    check_unique_names(vms.iter().map(|vm| vm.name))?;
    check_total_memory(vms.iter().map(|vm| vm.memory.size), machine)
}

pub(crate) fn check_vm(i: usize, vm: &VmSpec<'_>, machine: &Machine) -> Rule {
    check_name(i, vm.name)?;
    check_vcpus(i, u64::from(vm.vcpus))?;
    for (vcpu, cpu) in vm.cpu_affinity.iter().enumerate() {
        match cpu {
            Some(cpu) if vcpu < usize::from(vm.vcpus) => check_cpu(i, u64::from(*cpu), machine)?,
            Some(_) => {
                return Err(Violation::new(
                    i,
                    "cpu_affinity",
                    format!(
                        "pins vCPU {vcpu}, but the VM has only {} vCPUs; \
                         give exactly one physical CPU per vCPU",
                        vm.vcpus
                    ),
                ));
            }
            None => {}
        }
    }
    check_memory(i, vm.memory, machine)?;
    check_cmdline(i, vm.cmdline)?;
    check_devices(i, &vm.devices)?;
    check_image_size(i, "kernel", vm.kernel.bytes.len(), vm.kernel.mem_size)?;
    if let Some(initrd) = &vm.initrd {
        check_image_size(i, "initrd", initrd.bytes.len(), initrd.mem_size)?;
    }
    check_layout(
        i,
        &Layout {
            memory: vm.memory,
            kernel: vm.kernel.range(),
            kernel_text: Some(vm.kernel.bytes.len() as u64),
            entry: vm.entry,
            initrd: vm.initrd.as_ref().map(|i| i.range()),
            initrd_key: "initrd",
        },
    )
}

pub(crate) fn check_count(count: usize) -> Rule {
    let message = if count == 0 {
        String::from("no VMs are defined; add a [[vm]] table")
    } else if count > MAX_VMS {
        format!("{count} VMs are defined; at most {MAX_VMS} are supported, remove some")
    } else {
        return Ok(());
    };
    Err(Violation { vm: None, key: "vm", message })
}

pub(crate) fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

pub(crate) fn check_name(i: usize, name: &str) -> Rule {
    if valid_name(name) {
        return Ok(());
    }
    Err(Violation::new(
        i,
        "name",
        format!(
            "{name:?} is not a valid VM name; use 1 to {MAX_NAME_LEN} characters \
             from a-z, 0-9, '_' and '-'"
        ),
    ))
}

pub(crate) fn check_unique_names<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Rule {
    for (i, name) in names.clone().enumerate() {
        if let Some(first) = names.clone().take(i).position(|n| n == name) {
            return Err(Violation::new(
                i,
                "name",
                format!("{name:?} is already the name of vm[{first}]; VM names must be unique"),
            ));
        }
    }
    Ok(())
}

/// Takes a `u64` so the config loader can report the number the user wrote.
pub(crate) fn check_vcpus(i: usize, vcpus: u64) -> Rule {
    if (1..=u64::from(MAX_VCPUS)).contains(&vcpus) {
        return Ok(());
    }
    Err(Violation::new(i, "vcpus", format!("{vcpus} is out of range; use 1..={MAX_VCPUS}")))
}

#[cfg(feature = "std")]
pub(crate) fn check_affinity_len(i: usize, len: usize, vcpus: u8) -> Rule {
    if len == usize::from(vcpus) {
        return Ok(());
    }
    Err(Violation::new(
        i,
        "cpu_affinity",
        format!(
            "lists {len} physical CPUs but vcpus = {vcpus}; give exactly one physical CPU \
             per vCPU, or omit cpu_affinity to let the scheduler place them"
        ),
    ))
}

pub(crate) fn check_cpu(i: usize, cpu: u64, machine: &Machine) -> Rule {
    if cpu < u64::from(machine.cpus) {
        return Ok(());
    }
    let fix = match machine.cpus {
        0 => String::from("omit cpu_affinity"),
        1 => String::from("use 0"),
        n => format!("use 0..={}", n - 1),
    };
    Err(Violation::new(
        i,
        "cpu_affinity",
        format!("physical CPU {cpu} does not exist (the machine has {} CPUs); {fix}", machine.cpus),
    ))
}

pub(crate) fn check_memory(i: usize, memory: IpaRange, machine: &Machine) -> Rule {
    let base = memory.start;
    let size = memory.size;
    if base < GUEST_RAM_START {
        return Err(Violation::new(
            i,
            "memory_base",
            format!(
                "guest RAM at {} would cover the device window below {} (GIC, UART, \
                 virtio-mmio); use memory_base = {} or higher",
                Addr(base.0),
                Addr(GUEST_RAM_START.0),
                Addr(GUEST_RAM_START.0)
            ),
        ));
    }
    if !base.is_aligned(MEMORY_ALIGN) {
        let down = base.align_down(MEMORY_ALIGN);
        let fix = match base.checked_align_up(MEMORY_ALIGN) {
            Some(up) => format!("use {} or {}", Addr(down.0), Addr(up.0)),
            None => format!("use {}", Addr(down.0)),
        };
        return Err(Violation::new(
            i,
            "memory_base",
            format!("{} is not 2 MiB aligned; {fix}", Addr(base.0)),
        ));
    }
    if size < MIN_MEMORY {
        return Err(Violation::new(
            i,
            "memory_size",
            format!(
                "{} is too small: the device tree takes the last 2 MiB; use at least \"4M\"",
                Size(size)
            ),
        ));
    }
    if !size.is_multiple_of(MEMORY_ALIGN) {
        let down = size - size % MEMORY_ALIGN;
        return Err(Violation::new(
            i,
            "memory_size",
            format!(
                "{} is not a multiple of 2 MiB; use {} or {}",
                Size(size),
                Size(down),
                Size(down.saturating_add(MEMORY_ALIGN))
            ),
        ));
    }
    if base.0.checked_add(size).is_none_or(|end| end > IPA_LIMIT) {
        return Err(Violation::new(
            i,
            "memory_size",
            format!(
                "RAM from {} of {} would end above the {} guest-physical limit; \
                 lower memory_base or memory_size",
                Addr(base.0),
                Size(size),
                Size(IPA_LIMIT)
            ),
        ));
    }
    let budget = machine.guest_ram_budget();
    if size > budget {
        return Err(Violation::new(
            i,
            "memory_size",
            format!(
                "{} does not fit the machine: {} of RAM minus {} kept for the hypervisor \
                 leaves {} for guests; use at most {}",
                Size(size),
                Size(machine.ram_bytes),
                Size(HYPERVISOR_RESERVE),
                Size(budget),
                Size(budget - budget % MEMORY_ALIGN),
            ),
        ));
    }
    Ok(())
}

/// All VMs' RAM is backed by host RAM at once (no overcommit), so the sum must
/// fit. The violation names the first VM at which the running sum overflows.
pub(crate) fn check_total_memory(sizes: impl Iterator<Item = u64>, machine: &Machine) -> Rule {
    let budget = machine.guest_ram_budget();
    let mut total: u64 = 0;
    for (i, size) in sizes.enumerate() {
        total = total.saturating_add(size);
        if total > budget {
            return Err(Violation::new(
                i,
                "memory_size",
                format!(
                    "the VMs' RAM adds up to {} with this VM, more than the {} the machine has \
                     for guests ({} minus {} kept for the hypervisor); shrink this or an \
                     earlier VM's memory_size",
                    Size(total),
                    Size(budget),
                    Size(machine.ram_bytes),
                    Size(HYPERVISOR_RESERVE)
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_cmdline(i: usize, cmdline: &str) -> Rule {
    if cmdline.len() > MAX_CMDLINE_LEN {
        return Err(Violation::new(
            i,
            "cmdline",
            format!(
                "is {} bytes long; Linux accepts at most {MAX_CMDLINE_LEN}, shorten it",
                cmdline.len()
            ),
        ));
    }
    if cmdline.contains('\0') {
        return Err(Violation::new(
            i,
            "cmdline",
            String::from(
                "contains a NUL character, which would cut /chosen/bootargs short; remove it",
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_devices(i: usize, devices: &[DeviceKind]) -> Rule {
    if devices.len() > MAX_DEVICES {
        return Err(Violation::new(
            i,
            "devices",
            format!("lists {} devices; a VM has at most {MAX_DEVICES}, remove some", devices.len()),
        ));
    }
    for (n, kind) in devices.iter().enumerate() {
        if devices[..n].contains(kind) {
            return Err(Violation::new(
                i,
                "devices",
                format!("{:?} is listed twice; list each device kind once", kind.name()),
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_image_size(i: usize, key: &'static str, len: usize, mem_size: u64) -> Rule {
    if len == 0 {
        return Err(Violation::new(
            i,
            key,
            String::from("the image is empty; point it at the real file"),
        ));
    }
    if mem_size < len as u64 {
        return Err(Violation::new(
            i,
            key,
            format!(
                "the image's memory size ({mem_size:#x}) is smaller than its {len:#x} bytes; \
                 the package is corrupt, rebuild it"
            ),
        ));
    }
    Ok(())
}

/// Where a VM's pieces sit in its RAM, as far as they are known.
///
/// The config loader knows addresses before it has the images (a kernel built
/// by the project does not exist yet), so sizes may be lower bounds: a kernel
/// of unknown size is checked as one byte at its load address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub memory: IpaRange,
    /// The kernel's memory footprint (an arm64 Image's `image_size` includes its
    /// BSS, which the file does not), at least one byte.
    pub kernel: IpaRange,
    /// Bytes of the kernel file, if known; the entry point must lie in them.
    pub kernel_text: Option<u64>,
    pub entry: Ipa,
    /// `None` if there is no initrd or its placement is not known yet.
    pub initrd: Option<IpaRange>,
    /// `initrd_load` if the user placed the initrd, else `initrd`.
    pub initrd_key: &'static str,
}

/// Kernel, initrd and entry must lie in RAM, below the device tree area, and
/// apart from each other; otherwise one image overwrites another before the
/// guest runs its first instruction, and the guest hangs with no output.
pub(crate) fn check_layout(i: usize, l: &Layout) -> Rule {
    let fdt = fdt_area(l.memory);
    // RAM the images may use: everything below the device tree.
    let usable = IpaRange::new(l.memory.start, l.memory.size - fdt.size);
    let where_ =
        || format!("the usable RAM {} (the device tree takes {})", Span(usable), Span(fdt));
    let default_load = Addr(l.memory.start.0.saturating_add(DEFAULT_KERNEL_OFFSET));

    let kernel_fix = format!("use e.g. kernel_load = {default_load}, or omit kernel_load");
    check_placement(
        i,
        "kernel_load",
        "kernel",
        "the kernel",
        l.kernel,
        usable,
        &where_,
        &kernel_fix,
    )?;
    if let Some(initrd) = l.initrd {
        let start_key = l.initrd_key;
        let initrd_fix = "move initrd_load, or omit it to place the initrd below the device tree";
        check_placement(i, start_key, "initrd", "the initrd", initrd, usable, &where_, initrd_fix)?;
        if initrd.overlaps(&l.kernel) {
            // With the kernel's size unknown, only its load address is known
            // to be taken; do not print the one-byte placeholder as a range.
            let kernel = match l.kernel_text {
                Some(_) => format!("the kernel at {}", Span(l.kernel)),
                None => format!("the kernel's load address {}", Addr(l.kernel.start.0)),
            };
            return Err(Violation::new(
                i,
                start_key,
                format!(
                    "the initrd at {} overlaps {kernel}; raise memory_size, or set initrd_load \
                     above the kernel",
                    Span(initrd)
                ),
            ));
        }
    }

    let entry = Addr(l.entry.0);
    if !l.entry.is_aligned(4) {
        return Err(Violation::new(
            i,
            "entry",
            format!("{entry} is not 4-byte aligned, as A64 instructions must be; fix the address"),
        ));
    }
    if !usable.contains(l.entry) {
        return Err(Violation::new(
            i,
            "entry",
            format!(
                "{entry} is outside {}; set entry inside the kernel, or omit it to enter at \
                 kernel_load",
                where_()
            ),
        ));
    }
    if let Some(initrd) = l.initrd
        && initrd.contains(l.entry)
    {
        return Err(Violation::new(
            i,
            "entry",
            format!("{entry} lies in the initrd ({}); set entry inside the kernel", Span(initrd)),
        ));
    }
    if let Some(text) = l.kernel_text {
        let kernel = IpaRange::new(l.kernel.start, text);
        if !kernel.contains(l.entry) {
            return Err(Violation::new(
                i,
                "entry",
                format!(
                    "{entry} is outside the kernel image ({}); set entry inside it, or omit it \
                     to enter at kernel_load",
                    Span(kernel)
                ),
            ));
        }
    }
    Ok(())
}

/// An image must start page aligned inside `usable` and end inside it too. A
/// bad start is blamed on the load-address key, a bad end on the image (it is
/// too big for where it was put).
#[allow(clippy::too_many_arguments)]
fn check_placement(
    i: usize,
    start_key: &'static str,
    image_key: &'static str,
    what: &str,
    image: IpaRange,
    usable: IpaRange,
    where_: &dyn Fn() -> String,
    fix: &str,
) -> Rule {
    let start = image.start;
    if !start.is_aligned(LOAD_ALIGN) {
        return Err(Violation::new(
            i,
            start_key,
            format!(
                "{what} at {} is not 4 KiB aligned (images are copied page by page); use {}",
                Addr(start.0),
                Addr(start.align_down(LOAD_ALIGN).0)
            ),
        ));
    }
    if !usable.contains(start) {
        return Err(Violation::new(
            i,
            start_key,
            format!("{what} would load at {}, outside {}; {fix}", Addr(start.0), where_()),
        ));
    }
    if !usable.contains_span(start, image.size) {
        return Err(Violation::new(
            i,
            image_key,
            format!(
                "{what} ({}) at {} runs past the end of {}; raise memory_size or load it lower",
                Size(image.size),
                Addr(start.0),
                where_()
            ),
        ));
    }
    Ok(())
}

/// Formats a range as `start..end` in TOML-style hex.
struct Span(IpaRange);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        write!(f, "{}..{}", Addr(r.start.0), Addr(r.start.0.saturating_add(r.size)))
    }
}

// Keep the FDT constant referenced here so a change to its size is a change to
// these rules too.
const _: () = assert!(FDT_AREA_SIZE < MIN_MEMORY);

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    const M: Machine = Machine { ram_bytes: 1 << 30, cpus: 4 };
    const MB: u64 = 1 << 20;

    fn ram(size: u64) -> IpaRange {
        IpaRange::new(Ipa(0x4000_0000), size)
    }

    fn key(r: Rule) -> String {
        r.unwrap_err().path()
    }

    #[test]
    fn count() {
        assert_eq!(key(check_count(0)), "vm");
        assert_eq!(key(check_count(17)), "vm");
        assert!(check_count(1).is_ok() && check_count(16).is_ok());
    }

    #[test]
    fn names() {
        for good in ["vm0", "a", "linux_1-b", "abcdefghijklmno"] {
            assert!(check_name(0, good).is_ok(), "{good}");
        }
        for bad in ["", "VM0", "vm 0", "abcdefghijklmnop", "vm.0", "vmé"] {
            assert_eq!(key(check_name(2, bad)), "vm[2].name", "{bad}");
        }
        let e = check_unique_names(["a", "b", "a"].into_iter()).unwrap_err();
        assert_eq!(e.path(), "vm[2].name");
        assert!(e.message.contains("vm[0]"));
    }

    #[test]
    fn vcpus_and_affinity() {
        assert_eq!(key(check_vcpus(0, 0)), "vm[0].vcpus");
        assert_eq!(key(check_vcpus(0, 9)), "vm[0].vcpus");
        assert!(check_vcpus(0, 8).is_ok());
        #[cfg(feature = "std")]
        assert_eq!(key(check_affinity_len(1, 2, 1)), "vm[1].cpu_affinity");
        let e = check_cpu(0, 7, &M).unwrap_err();
        assert_eq!(
            e.to_string(),
            "vm[0].cpu_affinity: physical CPU 7 does not exist (the machine has 4 CPUs); use 0..=3"
        );
        assert!(check_cpu(0, 3, &M).is_ok());
    }

    #[test]
    fn memory() {
        assert!(check_memory(0, ram(32 * MB), &M).is_ok());
        let at = |base: u64, size: u64| key(check_memory(0, IpaRange::new(Ipa(base), size), &M));
        assert_eq!(at(0x0800_0000, 32 * MB), "vm[0].memory_base");
        assert_eq!(at(0x4010_0000, 32 * MB), "vm[0].memory_base");
        assert_eq!(at(0x4000_0000, 3 * MB), "vm[0].memory_size");
        assert_eq!(at(0x4000_0000, 2 * MB), "vm[0].memory_size");
        assert_eq!(at(0x4000_0000, 0), "vm[0].memory_size");
        assert_eq!(at(0x4000_0000, 2048 * MB), "vm[0].memory_size");
        assert_eq!(at(IPA_LIMIT - 2 * MB, 4 * MB), "vm[0].memory_size");
        assert_eq!(at(u64::MAX - 2 * MB + 1, 4 * MB), "vm[0].memory_size");
        // Exactly the budget is fine.
        assert!(check_memory(0, ram(1024 * MB - HYPERVISOR_RESERVE), &M).is_ok());
        let tiny = Machine { ram_bytes: 32 * MB, cpus: 1 };
        assert_eq!(key(check_memory(0, ram(4 * MB), &tiny)), "vm[0].memory_size");
    }

    #[test]
    fn total_memory() {
        let budget = M.guest_ram_budget();
        assert!(check_total_memory([budget / 2, budget / 2].into_iter(), &M).is_ok());
        let e = check_total_memory([512 * MB, 256 * MB, 512 * MB].into_iter(), &M).unwrap_err();
        assert_eq!(e.path(), "vm[2].memory_size");
        assert!(check_total_memory([u64::MAX, u64::MAX].into_iter(), &M).is_err());
    }

    #[test]
    fn cmdline_and_devices() {
        assert!(check_cmdline(0, "console=ttyAMA0").is_ok());
        assert_eq!(key(check_cmdline(0, "a\0b")), "vm[0].cmdline");
        let long = "x".repeat(MAX_CMDLINE_LEN + 1);
        assert_eq!(key(check_cmdline(0, &long)), "vm[0].cmdline");
        assert!(check_devices(0, &[DeviceKind::Pl011]).is_ok());
        assert!(check_devices(0, &[]).is_ok());
        // More than a record can hold is refused before the encoder sees it.
        assert_eq!(key(check_devices(0, &[DeviceKind::Pl011; MAX_DEVICES + 1])), "vm[0].devices");
        assert_eq!(key(check_devices(0, &[DeviceKind::Pl011, DeviceKind::Pl011])), "vm[0].devices");
    }

    fn layout(kernel: (u64, u64), entry: u64, initrd: Option<(u64, u64)>) -> Layout {
        Layout {
            memory: ram(32 * MB),
            kernel: IpaRange::new(Ipa(kernel.0), kernel.1),
            kernel_text: Some(kernel.1),
            entry: Ipa(entry),
            initrd: initrd.map(|(s, n)| IpaRange::new(Ipa(s), n)),
            initrd_key: "initrd_load",
        }
    }

    #[test]
    fn layouts() {
        let k = 0x4008_0000;
        let ok = layout((k, MB), k, Some((0x4100_0000, MB)));
        assert!(check_layout(0, &ok).is_ok());
        // The initrd may end exactly where the device tree starts.
        assert!(check_layout(0, &layout((k, MB), k, Some((0x41d0_0000, MB)))).is_ok());

        let cases = [
            // kernel
            (layout((k + 0x10, MB), k + 0x10, None), "vm[0].kernel_load"),
            (layout((0x3000_0000, MB), 0x3000_0000, None), "vm[0].kernel_load"),
            (layout((0x41e0_0000, 4096), 0x41e0_0000, None), "vm[0].kernel_load"),
            (layout((0x4200_0000, 4096), 0x4200_0000, None), "vm[0].kernel_load"),
            (layout((k, 31 * MB), k, None), "vm[0].kernel"),
            (layout((k, u64::MAX), k, None), "vm[0].kernel"),
            // initrd
            (layout((k, MB), k, Some((k + 4096, 4096))), "vm[0].initrd_load"),
            (layout((k, MB), k, Some((0x4000_0000, MB))), "vm[0].initrd_load"),
            (layout((k, MB), k, Some((0x41d0_0000, MB + 1))), "vm[0].initrd"),
            (layout((k, MB), k, Some((0x41e0_0000, 4096))), "vm[0].initrd_load"),
            (layout((k, MB), k, Some((0x4100_0800, 4096))), "vm[0].initrd_load"),
            // entry
            (layout((k, MB), k + 2, None), "vm[0].entry"),
            (layout((k, MB), k + MB, None), "vm[0].entry"),
            (layout((k, MB), 0x41f0_0000, None), "vm[0].entry"),
            (layout((k, MB), 0x5000_0000, None), "vm[0].entry"),
        ];
        for (l, want) in cases {
            let got = check_layout(0, &l).unwrap_err();
            assert_eq!(got.path(), want, "{l:?}: {got}");
        }

        // With the kernel size unknown, the entry is still kept out of the initrd.
        let mut l = layout((k, 1), 0x4100_0000, Some((0x4100_0000, MB)));
        l.kernel_text = None;
        assert_eq!(key(check_layout(0, &l)), "vm[0].entry");
    }

    #[test]
    fn check_vms_runs_every_rule() {
        let kernel = vec![0u8; 4096];
        let mut vm = crate::spec::tests::spec("vm0", &kernel);
        assert!(check_vms(core::slice::from_ref(&vm), &M).is_ok());
        vm.cpu_affinity[1] = Some(0);
        assert_eq!(key(check_vms(core::slice::from_ref(&vm), &M)), "vm[0].cpu_affinity");
        vm.cpu_affinity[1] = None;
        vm.kernel.mem_size = 10;
        assert_eq!(key(check_vms(core::slice::from_ref(&vm), &M)), "vm[0].kernel");
        vm.kernel.mem_size = 4096;
        let two = [vm.clone(), vm];
        assert_eq!(key(check_vms(&two, &M)), "vm[1].name");
    }
}
