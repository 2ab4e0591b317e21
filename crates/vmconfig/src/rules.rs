//! The semantic rules, shared by the config loader (host) and the package
//! decoder (hypervisor).
//!
//! Each rule names the config key it is about, so the same violation reads
//! `configs/x.toml:7: vm[1].memory_size: ...` on the host and
//! `vm[1].memory_size: ...` in the hypervisor's boot log (or
//! `vm[1].disk[0].size: ...` for a key of a `[[vm.disk]]` table). Messages end
//! with the fix, because the person reading them is editing a TOML file.
//!
//! Rules take plain values (lengths, names, addresses) rather than a
//! [`VmSpec`] where the config loader must run them before it has the images.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use addr::{Ipa, IpaRange};

use crate::spec::{
    DEFAULT_MTU, DiskSpec, MAX_MTU, MAX_WEIGHT, MIN_MTU, MIN_REALTIME_BUDGET_US, NicSpec,
    QUANTUM_MS, REALTIME_PERIOD_US, SchedSpec, VmSched, VmSpec,
};
use crate::{
    Addr, DEFAULT_KERNEL_OFFSET, DISK_SECTOR_SIZE, DeviceKind, FDT_AREA_SIZE, GUEST_RAM_START,
    HYPERVISOR_RESERVE, IPA_LIMIT, LOAD_ALIGN, MAX_CMDLINE_LEN, MAX_DEVICES, MAX_DISK_SIZE,
    MAX_DISKS, MAX_DT_PATH_LEN, MAX_NAME_LEN, MAX_NICS, MAX_PARTITION_DISK_SIZE,
    MAX_PARTITION_NAME_LEN, MAX_PASSTHROUGH, MAX_VCPUS, MAX_VIRTIO_SLOTS, MAX_VMS, MEMORY_ALIGN,
    MIN_MEMORY, Mac, Machine, Size, fdt_area,
};

/// A broken rule: which VM, which key, what is wrong and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index of the VM in file order; `None` for rules about the whole set.
    pub vm: Option<usize>,
    /// The `[[vm.disk]]` or `[[vm.nic]]` table the key is in, as the table's
    /// name and its index in the VM (`("disk", 1)`), or with `vm` `None` a
    /// top-level `[[network]]` table (`("network", 0)`); `None` for a key of
    /// the `[[vm]]` table itself.
    pub table: Option<(&'static str, usize)>,
    /// The config key the rule is about (`memory_size`), or `vm` for the set.
    pub key: &'static str,
    /// What is wrong, then the fix.
    pub message: String,
}

impl Violation {
    pub(crate) fn new(vm: usize, key: &'static str, message: String) -> Self {
        Self { vm: Some(vm), table: None, key, message }
    }

    /// A violation about `key` in the `index`th top-level `[[<table>]]` (`[[network]]`).
    pub(crate) fn top(
        table: &'static str,
        index: usize,
        key: &'static str,
        message: String,
    ) -> Self {
        Self { vm: None, table: Some((table, index)), key, message }
    }

    /// A violation about `key` in the `index`th `[[vm.<table>]]` of VM `vm`.
    pub(crate) fn in_table(
        vm: usize,
        table: &'static str,
        index: usize,
        key: &'static str,
        message: String,
    ) -> Self {
        Self { vm: Some(vm), table: Some((table, index)), key, message }
    }

    /// The key's path inside its VM, e.g. `memory_size` or `disk[1].size`.
    pub fn key_path(&self) -> String {
        match self.table {
            Some((table, index)) => format!("{table}[{index}].{}", self.key),
            None => String::from(self.key),
        }
    }

    /// The key's path as written in error messages, e.g. `vm[1].memory_size`
    /// or `vm[0].disk[1].size`.
    pub fn path(&self) -> String {
        match self.vm {
            Some(i) => format!("vm[{i}].{}", self.key_path()),
            None => self.key_path(),
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
    let names: Vec<&str> = vms.iter().map(|vm| vm.name).collect();
    let nics = vms.iter().enumerate().flat_map(|(i, vm)| {
        vm.nics.iter().enumerate().map(move |(j, nic)| (i, j, nic.network, nic.mac, nic.mtu))
    });
    check_nics_across_vms(&names, nics)?;
    let paths: Vec<_> = vms
        .iter()
        .enumerate()
        .flat_map(|(i, vm)| vm.passthrough.iter().map(move |p| (i, p.path)))
        .collect();
    check_unique_passthrough(&names, &paths)?;
    let partitions: Vec<_> = vms
        .iter()
        .enumerate()
        .flat_map(|(i, vm)| {
            let disks = vm.disks.iter().enumerate();
            disks.filter_map(move |(j, d)| d.partition.map(|name| (i, j, name)))
        })
        .collect();
    check_unique_partitions(&names, &partitions)?;
    let claims: Vec<_> = vms
        .iter()
        .map(|vm| RamClaim {
            ram: vm.memory.size,
            disks: disk_bytes(&vm.disks),
            autostart: vm.autostart,
        })
        .collect();
    check_total_memory(&names, &claims, machine)
}

/// The host RAM a VM's disks take: its RAM disks' capacities (a disk on a
/// partition of the machine disk takes none).
pub(crate) fn disk_bytes(disks: &[DiskSpec<'_>]) -> u64 {
    let ram_disks = disks.iter().filter(|d| d.partition.is_none());
    ram_disks.fold(0u64, |sum, d| sum.saturating_add(d.capacity))
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
    check_disks(i, &vm.disks)?;
    check_nics(i, &vm.nics)?;
    check_passthrough(i, &vm.passthrough)?;
    check_virtio_slots(i, vm.nics.len(), vm.disks.len(), &vm.devices, vm.control)?;
    check_sched(i, &vm.sched, machine)?;
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
    Err(Violation { vm: None, table: None, key: "vm", message })
}

/// Whether `name` may name a VM (or a network): 1 to [`MAX_NAME_LEN`] characters from a-z,
/// 0-9, '_' and '-'. Public for the control commands, which name VMs as configs do.
pub fn valid_name(name: &str) -> bool {
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

// `gic = "v2"` has no vCPU rule of its own because a GICv2's eight CPU interfaces are already
// as many as any VM may have; raising MAX_VCPUS past them needs that rule.
const _: () = assert!(MAX_VCPUS <= 8, "a GICv2 VM needs its own vCPU limit");

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

/// `weight`, `cap` and `[vm.realtime]` of VM `i`.
pub(crate) fn check_sched(i: usize, sched: &VmSched, machine: &Machine) -> Rule {
    if !(1..=MAX_WEIGHT).contains(&sched.weight) {
        return Err(Violation::new(
            i,
            "weight",
            format!("{} is out of range; use 1..={MAX_WEIGHT} (default 256)", sched.weight),
        ));
    }
    let max_cap = machine.cpus.saturating_mul(100);
    if let Some(cap) = sched.cap
        && !(1..=max_cap).contains(&cap)
    {
        return Err(Violation::new(
            i,
            "cap",
            format!(
                "{cap} % is out of range; use 1..={max_cap} (percent of one CPU; the machine                  has {} CPUs), or omit cap for no limit",
                machine.cpus
            ),
        ));
    }
    if let Some(rt) = sched.realtime {
        if !REALTIME_PERIOD_US.contains(&rt.period_us) {
            return Err(Violation::new(
                i,
                "realtime.period_us",
                format!(
                    "{} µs is out of range; use {}..={} µs",
                    rt.period_us,
                    REALTIME_PERIOD_US.start(),
                    REALTIME_PERIOD_US.end()
                ),
            ));
        }
        if rt.budget_us < MIN_REALTIME_BUDGET_US || rt.budget_us > rt.period_us {
            return Err(Violation::new(
                i,
                "realtime.budget_us",
                format!(
                    "{} µs is out of range; use {MIN_REALTIME_BUDGET_US} µs up to the period                      ({} µs)",
                    rt.budget_us, rt.period_us
                ),
            ));
        }
    }
    Ok(())
}

/// The machine-wide `[scheduler]` table.
pub fn check_scheduler(sched: &SchedSpec) -> Rule {
    if QUANTUM_MS.contains(&sched.quantum_ms) {
        return Ok(());
    }
    Err(Violation {
        vm: None,
        table: None,
        key: "scheduler.quantum_ms",
        message: format!(
            "{} ms is out of range; use {}..={} ms (default 10)",
            sched.quantum_ms,
            QUANTUM_MS.start(),
            QUANTUM_MS.end()
        ),
    })
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

/// What one VM takes of the host's RAM while it runs, for [`check_total_memory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RamClaim {
    pub ram: u64,
    /// Its RAM disks' capacities ([`disk_bytes`]).
    pub disks: u64,
    pub autostart: bool,
}

impl RamClaim {
    fn bytes(self) -> u64 {
        self.ram.saturating_add(self.disks)
    }
}

/// A VM's RAM and RAM disks are backed by host RAM while it runs, so each VM
/// must fit the machine alone, and the VMs started at boot together. VMs with
/// `autostart = false` may take the sum beyond the machine's RAM: they are
/// started later, once others have stopped and given theirs back (the monitor
/// refuses a start that does not fit then). `claims` is in file order, with
/// the VMs' `names`; the violation names the VM alone, or the first VM started
/// at boot at which the running sum overflows, with the VMs before it.
pub(crate) fn check_total_memory(names: &[&str], claims: &[RamClaim], machine: &Machine) -> Rule {
    let budget = machine.guest_ram_budget();
    let for_guests = format!(
        "the {} the machine has for guests ({} minus {} kept for the hypervisor)",
        Size(budget),
        Size(machine.ram_bytes),
        Size(HYPERVISOR_RESERVE)
    );
    let more_ram = "or give QEMU more RAM with -m (cargo xtask's --mem)";
    // RAM alone over the budget is check_memory's error; here, RAM and disks.
    if let Some(i) = claims.iter().position(|c| c.bytes() > budget) {
        return Err(Violation::new(
            i,
            "memory_size",
            format!(
                "the VM's RAM and disks add up to {}, more than {for_guests}; shrink its \
                 memory_size or RAM disk sizes (a disk on a partition takes no RAM), {more_ram}",
                Size(claims[i].bytes())
            ),
        ));
    }
    let mut total: u64 = 0;
    let mut any_disks = false;
    let at_boot = claims.iter().enumerate().filter(|(_, c)| c.autostart);
    for (n, (i, claim)) in at_boot.clone().enumerate() {
        total = total.saturating_add(claim.bytes());
        any_disks |= claim.disks > 0;
        if total <= budget {
            continue;
        }
        let vms: Vec<String> = at_boot.take(n + 1).map(|(j, _)| vm_ref(names, j)).collect();
        let (what, shrink) = match any_disks {
            true => ("RAM and disks add", "memory_size or RAM disk sizes"),
            false => ("RAM adds", "memory_size"),
        };
        return Err(Violation::new(
            i,
            "memory_size",
            format!(
                "the VMs started at boot ({}) need more than {for_guests}: their {what} up to \
                 {}; set autostart = false on some (they can be started once others have \
                 stopped), shrink their {shrink}, {more_ram}",
                vms.join(", "),
                Size(total),
            ),
        ));
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

/// A VM's `[[vm.disk]]`, `[[vm.nic]]` or `passthrough` entries are capped so
/// the package records stay small and the hypervisor's tables bounded.
pub(crate) fn check_table_count(i: usize, key: &'static str, count: usize, max: usize) -> Rule {
    if count <= max {
        return Ok(());
    }
    let what = match key {
        "passthrough" => "device paths",
        "disk" => "[[vm.disk]] tables",
        _ => "[[vm.nic]] tables",
    };
    Err(Violation::new(i, key, format!("has {count} {what}; a VM has at most {max}, remove some")))
}

pub(crate) fn check_disks(i: usize, disks: &[DiskSpec<'_>]) -> Rule {
    check_table_count(i, "disk", disks.len(), MAX_DISKS)?;
    for (j, disk) in disks.iter().enumerate() {
        if disk.partition.is_some() && !disk.image.is_empty() {
            return Err(Violation::in_table(
                i,
                "disk",
                j,
                "image",
                String::from(
                    "a disk on a partition carries no image in the package (the build tool \
                     writes it into the partition when it creates it); rebuild the image",
                ),
            ));
        }
        check_disk(i, j, disk.image.len() as u64, disk.capacity, disk.partition)?;
    }
    Ok(())
}

/// The image must fit the disk, and the disk the sector size and the cap: a RAM
/// disk's ([`MAX_DISK_SIZE`]), or, for a disk on the machine disk's partition
/// `partition`, [`MAX_PARTITION_DISK_SIZE`] (its name is checked too).
pub(crate) fn check_disk(
    i: usize,
    j: usize,
    image_len: u64,
    capacity: u64,
    partition: Option<&str>,
) -> Rule {
    let err = |key, message| Err(Violation::in_table(i, "disk", j, key, message));
    let sectors_up = |n: u64| n.div_ceil(DISK_SECTOR_SIZE).saturating_mul(DISK_SECTOR_SIZE);
    if let Some(name) = partition {
        check_partition_name(i, j, name)?;
    }
    let (cap, why, fix) = match partition {
        None => {
            (MAX_DISK_SIZE, "disks are kept in host RAM", "\"1G\" (or put the disk on a partition)")
        }
        Some(_) => {
            (MAX_PARTITION_DISK_SIZE, "the machine disk's image file grows to hold it", "\"1T\"")
        }
    };
    if image_len > cap {
        return err(
            "image",
            format!(
                "the image is {}, more than the {} a disk may hold ({why}); use a smaller \
                 image",
                Size(image_len),
                Size(cap)
            ),
        );
    }
    if capacity == 0 {
        return err(
            "size",
            String::from("is zero; give the disk a size such as \"16M\", or an image"),
        );
    }
    if !capacity.is_multiple_of(DISK_SECTOR_SIZE) {
        let down = capacity - capacity % DISK_SECTOR_SIZE;
        let up = sectors_up(capacity);
        let fix = match down {
            0 => format!("use size = {up}"),
            _ => format!("use size = {down} or size = {up}"),
        };
        return err(
            "size",
            format!(
                "{capacity} bytes is not a multiple of the {DISK_SECTOR_SIZE}-byte sector \
                 size; {fix}"
            ),
        );
    }
    if capacity > cap {
        return err(
            "size",
            format!(
                "{} is more than the {} a disk may have ({why}); use at most {fix}",
                Size(capacity),
                Size(cap)
            ),
        );
    }
    if capacity < image_len {
        return err(
            "size",
            format!(
                "{capacity} bytes is smaller than the disk's {image_len}-byte image; use \
                 size = {} or more, or omit size to fit the image",
                sectors_up(image_len)
            ),
        );
    }
    Ok(())
}

pub(crate) fn valid_partition_name(name: &str) -> bool {
    (1..=MAX_PARTITION_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// A partition name becomes a GPT entry's name on the machine disk: short enough
/// for the entry, and plain enough to type and to show in logs.
pub(crate) fn check_partition_name(i: usize, j: usize, name: &str) -> Rule {
    if valid_partition_name(name) {
        return Ok(());
    }
    Err(Violation::in_table(
        i,
        "disk",
        j,
        "partition",
        format!(
            "{name:?} is not a valid partition name; use 1 to {MAX_PARTITION_NAME_LEN} \
             characters from a-z, 0-9, '_' and '-', e.g. partition = \"linux0-data\""
        ),
    ))
}

/// One partition holds one disk: two disks naming one partition would share
/// (and corrupt) each other's data. `parts` holds (VM, disk, partition) in
/// file order; the later disk is blamed and the message names the first.
pub(crate) fn check_unique_partitions(names: &[&str], parts: &[(usize, usize, &str)]) -> Rule {
    let Some(((vm, disk, name), (first_vm, first_disk))) = first_repeat(parts) else {
        return Ok(());
    };
    Err(Violation::in_table(
        vm,
        "disk",
        disk,
        "partition",
        format!(
            "{name:?} is already the partition of {} disk[{first_disk}]; a partition holds one \
             disk, give each disk a name of its own",
            vm_ref(names, first_vm)
        ),
    ))
}

/// Where a keyed sub-table is: (VM, table index, key), e.g. (1, 0, the partition name).
type Keyed<K> = (usize, usize, K);

/// The first entry of `entries` (in file order) whose key an earlier entry has, with that
/// earlier entry's (VM, table index).
fn first_repeat<K: PartialEq + Copy>(entries: &[Keyed<K>]) -> Option<(Keyed<K>, (usize, usize))> {
    entries.iter().enumerate().find_map(|(n, &later)| {
        let first = entries[..n].iter().find(|e| e.2 == later.2)?;
        Some((later, (first.0, first.1)))
    })
}

pub(crate) fn check_nics(i: usize, nics: &[NicSpec<'_>]) -> Rule {
    check_table_count(i, "nic", nics.len(), MAX_NICS)?;
    for (j, nic) in nics.iter().enumerate() {
        check_nic(i, j, nic.network, nic.mac, nic.mtu)?;
    }
    Ok(())
}

pub(crate) fn check_nic(i: usize, j: usize, network: &str, mac: [u8; 6], mtu: Option<u16>) -> Rule {
    let err = |key, message| Err(Violation::in_table(i, "nic", j, key, message));
    if !valid_name(network) {
        return err(
            "network",
            format!(
                "{network:?} is not a valid network name; use 1 to {MAX_NAME_LEN} characters \
                 from a-z, 0-9, '_' and '-'"
            ),
        );
    }
    let fix = "use a unicast address such as \"52:54:00:12:34:56\", or omit mac for a default";
    if mac == [0; 6] {
        return err("mac", format!("{} is not a usable MAC address; {fix}", Mac(mac)));
    }
    if mac[0] & 1 != 0 {
        return err(
            "mac",
            format!("{} is a multicast address (bit 0 of the first octet is set); {fix}", Mac(mac)),
        );
    }
    if let Some(mtu) = mtu.filter(|m| !(MIN_MTU..=MAX_MTU).contains(m)) {
        return err("mtu", unusable_mtu(mtu.into()));
    }
    Ok(())
}

/// Why `mtu` cannot be a NIC's, and the fix (also for a config value past `u16`).
pub(crate) fn unusable_mtu(mtu: u64) -> String {
    format!(
        "{mtu} is not a usable MTU; use {MIN_MTU} to {MAX_MTU} bytes (e.g. 9000 for jumbo \
         frames), or omit mtu for Ethernet's {DEFAULT_MTU}"
    )
}

/// A device-tree node path as the host's tree spells it: `/` then node
/// names (`name@unit-address`) separated by single `/`, none trailing.
pub(crate) fn valid_dt_path(path: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b",._+@-/".contains(&b);
    (2..=MAX_DT_PATH_LEN).contains(&path.len())
        && path.starts_with('/')
        && !path.ends_with('/')
        && !path.contains("//")
        && path.bytes().all(allowed)
}

/// Syntax, count and duplicates inside one VM; whether the host has the
/// device is the hypervisor's to find out at boot.
pub(crate) fn check_passthrough(i: usize, paths: &[impl AsRef<str>]) -> Rule {
    check_table_count(i, "passthrough", paths.len(), MAX_PASSTHROUGH)?;
    let err = |message| Err(Violation::new(i, "passthrough", message));
    for (n, path) in paths.iter().enumerate() {
        let path = path.as_ref();
        if path.len() > MAX_DT_PATH_LEN {
            return err(format!(
                "path {n} is {} characters long; at most {MAX_DT_PATH_LEN} are allowed, \
                 give the node's full path such as \"/pl031@9010000\"",
                path.len()
            ));
        }
        if !valid_dt_path(path) {
            return err(format!(
                "{path:?} is not a device-tree node path; write the host node's full path \
                 such as \"/pl031@9010000\": a '/' then node names of A-Z a-z 0-9 , . _ + @ - \
                 separated by single '/', with none trailing"
            ));
        }
        if paths[..n].iter().any(|p| p.as_ref() == path) {
            return err(format!("{path:?} is listed twice; list each device once"));
        }
    }
    Ok(())
}

/// NICs, disks and the virtio kinds in `devices` each take a virtio-mmio slot.
pub(crate) fn check_virtio_slots(
    i: usize,
    nics: usize,
    disks: usize,
    devices: &[DeviceKind],
    control: bool,
) -> Rule {
    let others = devices.iter().filter(|d| d.is_virtio()).count();
    let without_control = nics + disks + others;
    let total = without_control + usize::from(control);
    if total <= MAX_VIRTIO_SLOTS {
        return Ok(());
    }
    let channel = if control { " and the control channel" } else { "" };
    let needs = format!(
        "the VM needs {total} virtio-mmio slots ({nics} NICs, {disks} disks, {others} virtio \
         devices in `devices`{channel}) but has {MAX_VIRTIO_SLOTS}"
    );
    // A control VM's channel takes the slot after the others: if it alone does not fit, it is
    // what the user just asked for.
    if without_control <= MAX_VIRTIO_SLOTS {
        return Err(Violation::new(
            i,
            "control",
            format!(
                "{needs}; the control channel takes a slot of its own, so remove a NIC, a \
                 disk or a virtio device from `devices`, or set control = false"
            ),
        ));
    }
    let key = match (others, disks) {
        (1.., _) => "devices",
        (0, 1..) => "disk",
        (0, 0) => "nic",
    };
    Err(Violation::new(i, key, format!("{needs}; remove some")))
}

/// `vm[2] ("web")`: how an error names another VM.
fn vm_ref(names: &[&str], vm: usize) -> String {
    match names.get(vm) {
        Some(name) => format!("vm[{vm}] ({name:?})"),
        None => format!("vm[{vm}]"),
    }
}

/// The rules that compare NICs of all VMs: unique MACs, one MTU per network. `nics` gives
/// (VM, NIC, network, MAC, MTU) in file order.
pub(crate) fn check_nics_across_vms<'a>(
    names: &[&str],
    nics: impl Iterator<Item = (usize, usize, &'a str, [u8; 6], Option<u16>)> + Clone,
) -> Rule {
    let macs: Vec<_> = nics.clone().map(|(i, j, _, mac, _)| (i, j, mac)).collect();
    check_unique_macs(names, &macs)?;
    let mtus: Vec<_> = nics.map(|(i, j, network, _, mtu)| (i, j, network, mtu)).collect();
    check_network_mtus(names, &mtus)
}

/// Two NICs with one MAC break both VMs' networking in ways that are hard to
/// trace, even on different networks (a network may later be bridged).
/// `macs` holds (VM, NIC, MAC) in file order; the later NIC is blamed.
pub(crate) fn check_unique_macs(names: &[&str], macs: &[(usize, usize, [u8; 6])]) -> Rule {
    let Some(((vm, nic, mac), (first_vm, first_nic))) = first_repeat(macs) else {
        return Ok(());
    };
    Err(Violation::in_table(
        vm,
        "nic",
        nic,
        "mac",
        format!(
            "{} is already the MAC of {} nic[{first_nic}]; MAC addresses must be unique across \
             all VMs, change one of them (an omitted mac is 52:54:00:00:<vm>:<nic>)",
            Mac(mac),
            vm_ref(names, first_vm)
        ),
    ))
}

/// A frame larger than a receiver's MTU is dropped at its NIC, so the NICs of one network
/// must agree. `mtus` holds (VM, NIC, network, MTU) in file order; the later NIC is blamed.
pub(crate) fn check_network_mtus(
    names: &[&str],
    mtus: &[(usize, usize, &str, Option<u16>)],
) -> Rule {
    let effective = |mtu: Option<u16>| mtu.unwrap_or(DEFAULT_MTU);
    for (n, &(vm, nic, network, mtu)) in mtus.iter().enumerate() {
        let first = mtus[..n].iter().find(|m| m.2 == network && effective(m.3) != effective(mtu));
        if let Some(&(first_vm, first_nic, _, first_mtu)) = first {
            return Err(Violation::in_table(
                vm,
                "nic",
                nic,
                "mtu",
                format!(
                    "MTU {} differs from the {} of {} nic[{first_nic}] on network {network:?}; \
                     give every NIC of a network the same mtu (an omitted mtu is \
                     {DEFAULT_MTU})",
                    effective(mtu),
                    effective(first_mtu),
                    vm_ref(names, first_vm)
                ),
            ));
        }
    }
    Ok(())
}

/// A network declared by `[[network]]` table `k` (or the package's uplink): a valid name that
/// some VM NIC uses (else the table configures nothing); with `uplink`, its NICs keep
/// Ethernet's MTU (the machine's NIC takes frames of up to [`DEFAULT_MTU`] bytes of payload; a
/// larger frame would be dropped there). `nics` holds (VM, NIC, network, MTU).
pub(crate) fn check_network(
    k: usize,
    name: &str,
    uplink: bool,
    nics: &[(usize, usize, &str, Option<u16>)],
) -> Rule {
    let at = |key, message| Err(Violation::top("network", k, key, message));
    if !valid_name(name) {
        return at(
            "name",
            format!(
                "{name:?} is not a valid network name; use 1 to {MAX_NAME_LEN} characters \
                 from a-z, 0-9, '_' and '-'"
            ),
        );
    }
    if !nics.iter().any(|n| n.2 == name) {
        return at(
            "name",
            format!(
                "no VM has a NIC on network {name:?}; add a [[vm.nic]] with network = \
                 {name:?}, or name a network a VM uses"
            ),
        );
    }
    if !uplink {
        return Ok(());
    }
    if let Some(&(vm, nic, _, Some(mtu))) =
        nics.iter().find(|n| n.2 == name && n.3.is_some_and(|m| m > DEFAULT_MTU))
    {
        return Err(Violation::in_table(
            vm,
            "nic",
            nic,
            "mtu",
            format!(
                "MTU {mtu} is too large for network {name:?}: its uplink, the machine's NIC, \
                 takes frames of up to {DEFAULT_MTU} bytes of payload; set mtu to at most \
                 {DEFAULT_MTU}, or omit it"
            ),
        ));
    }
    Ok(())
}

/// A physical device can have one driver. `paths` holds (VM, path) in file
/// order; the later VM is blamed and the message names the first.
pub(crate) fn check_unique_passthrough(names: &[&str], paths: &[(usize, &str)]) -> Rule {
    for (n, &(vm, path)) in paths.iter().enumerate() {
        if let Some(&(first, _)) = paths[..n].iter().find(|p| p.1 == path) {
            let message = match first == vm {
                true => format!("{path:?} is listed twice; list each device once"),
                false => format!(
                    "{path:?} is already assigned to {}; a physical device can belong to one \
                     VM only, remove it from one of them",
                    vm_ref(names, first)
                ),
            };
            return Err(Violation::new(vm, "passthrough", message));
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

    /// A VM started at boot with `ram` bytes of RAM and `disks` of RAM disks.
    fn claim(ram: u64, disks: u64) -> RamClaim {
        RamClaim { ram, disks, autostart: true }
    }

    fn later(ram: u64) -> RamClaim {
        RamClaim { autostart: false, ..claim(ram, 0) }
    }

    const NAMES: [&str; 4] = ["web", "db", "batch", "spare"];

    #[test]
    fn total_memory() {
        let budget = M.guest_ram_budget();
        let total = |claims: &[RamClaim]| check_total_memory(&NAMES, claims, &M);
        let ram = |sizes: &[u64]| sizes.iter().map(|&s| claim(s, 0)).collect::<Vec<_>>();
        assert!(total(&ram(&[budget / 2, budget / 2])).is_ok());
        let e = total(&ram(&[512 * MB, 256 * MB, 512 * MB])).unwrap_err();
        assert_eq!(e.path(), "vm[2].memory_size");
        assert!(!e.message.contains("disk"), "{e}");
        // It names the VMs started at boot, and the ways out.
        assert!(
            e.message.starts_with(
                "the VMs started at boot (vm[0] (\"web\"), vm[1] (\"db\"), vm[2] (\"batch\")) \
                 need more than the 960 MiB the machine has for guests (1 GiB minus 64 MiB kept \
                 for the hypervisor): their RAM adds up to 1280 MiB;"
            ),
            "{e}"
        );
        assert!(e.message.contains("set autostart = false on some"), "{e}");
        assert!(e.message.ends_with("or give QEMU more RAM with -m (cargo xtask's --mem)"), "{e}");
        assert!(total(&ram(&[u64::MAX, u64::MAX])).is_err());
        // Disks count: RAM alone fits, RAM plus a disk does not.
        let e = total(&[claim(512 * MB, 0), claim(256 * MB, 256 * MB)]).unwrap_err();
        assert_eq!(e.path(), "vm[1].memory_size");
        assert!(e.message.contains("their RAM and disks add up to 1 GiB"), "{e}");
        assert!(total(&[claim(budget - MB, MB)]).is_ok());
    }

    #[test]
    fn vms_not_started_at_boot_may_overcommit() {
        let budget = M.guest_ram_budget();
        // Three VMs of 512 MiB: one at boot, two later, 1.5 GiB on a 1 GiB machine.
        let claims = [claim(512 * MB, 0), later(512 * MB), later(512 * MB)];
        assert!(check_total_memory(&NAMES, &claims, &M).is_ok());
        // Still, each must fit alone, with its disks.
        let e =
            check_total_memory(&NAMES, &[claim(0, 0), RamClaim { disks: MB, ..later(budget) }], &M)
                .unwrap_err();
        assert_eq!(e.path(), "vm[1].memory_size");
        assert!(e.message.starts_with("the VM's RAM and disks add up to 961 MiB"), "{e}");
        assert!(e.message.contains("shrink its memory_size or RAM disk sizes"), "{e}");
        assert!(check_total_memory(&NAMES, &[later(u64::MAX)], &M).is_err());
        // Only the VMs at boot are listed and summed: the first one past the budget is blamed.
        let claims = [later(512 * MB), claim(512 * MB, 0), later(512 * MB), claim(512 * MB, 0)];
        let e = check_total_memory(&NAMES, &claims, &M).unwrap_err();
        assert_eq!(e.path(), "vm[3].memory_size");
        assert!(e.message.contains("(vm[1] (\"db\"), vm[3] (\"spare\"))"), "{e}");
        assert!(e.message.contains("their RAM adds up to 1 GiB"), "{e}");
    }

    #[test]
    fn disks() {
        assert!(check_disk(0, 0, 0, 512, None).is_ok());
        assert!(check_disk(0, 0, 1000, 1024, None).is_ok());
        assert!(check_disk(0, 0, 0, MAX_DISK_SIZE, None).is_ok());
        let at = |image, capacity| key(check_disk(1, 2, image, capacity, None));
        assert_eq!(at(0, 0), "vm[1].disk[2].size");
        assert_eq!(at(0, 1000), "vm[1].disk[2].size");
        assert_eq!(at(0, 100), "vm[1].disk[2].size");
        assert_eq!(at(1025, 1024), "vm[1].disk[2].size");
        assert_eq!(at(0, MAX_DISK_SIZE + 512), "vm[1].disk[2].size");
        assert_eq!(at(0, u64::MAX), "vm[1].disk[2].size");
        assert_eq!(at(MAX_DISK_SIZE + 1, MAX_DISK_SIZE + 512), "vm[1].disk[2].image");
        let e = check_disk(0, 0, 0, 1000, None).unwrap_err();
        assert!(e.message.ends_with("use size = 512 or size = 1024"), "{e}");
        let e = check_disk(0, 0, 0, 100, None).unwrap_err();
        assert!(e.message.ends_with("use size = 512"), "{e}");
        let e = check_disk(0, 0, 1025, 1024, None).unwrap_err();
        assert!(e.message.contains("use size = 1536 or more"), "{e}");

        let blank = DiskSpec { image: &[], capacity: 512, read_only: false, partition: None };
        assert!(check_disks(0, &[blank; MAX_DISKS]).is_ok());
        let e = check_disks(0, &[blank; MAX_DISKS + 1]).unwrap_err();
        assert_eq!(e.path(), "vm[0].disk");
        assert!(e.message.contains("at most 4"), "{e}");
    }

    #[test]
    fn partition_disks() {
        let part = |capacity, name: &str| check_disk(0, 1, 0, capacity, Some(name));
        // Larger than a RAM disk may be, up to 1 TiB.
        assert!(part(MAX_DISK_SIZE * 4, "linux0-data").is_ok());
        assert!(part(MAX_PARTITION_DISK_SIZE, "a").is_ok());
        let e = part(MAX_PARTITION_DISK_SIZE + 512, "a").unwrap_err();
        assert_eq!(e.path(), "vm[0].disk[1].size");
        assert!(e.message.contains("more than the 1 TiB") && e.message.contains("\"1T\""), "{e}");
        let e = check_disk(0, 1, 0, MAX_DISK_SIZE + 512, None).unwrap_err();
        assert!(e.message.contains("put the disk on a partition"), "{e}");
        assert_eq!(key(part(1000, "a")), "vm[0].disk[1].size");
        assert_eq!(key(part(0, "a")), "vm[0].disk[1].size");
        // Names: 1 to 36 of a-z 0-9 _ -.
        assert!(part(512, &"x".repeat(MAX_PARTITION_NAME_LEN)).is_ok());
        assert!(part(512, "a_b-9").is_ok());
        for bad in ["", "Data", "a b", "a/b", "é", "a.b", &"x".repeat(MAX_PARTITION_NAME_LEN + 1)]
        {
            let e = part(512, bad).unwrap_err();
            assert_eq!(e.path(), "vm[0].disk[1].partition", "{bad:?}");
            assert!(e.message.contains("1 to 36 characters"), "{e}");
        }
        // A partition disk carries no image bytes in the package.
        let k = [1u8; 512];
        let disk = DiskSpec { image: &k, capacity: 512, read_only: false, partition: Some("p") };
        let e = check_disks(0, &[disk]).unwrap_err();
        assert_eq!(e.path(), "vm[0].disk[0].image");
        assert!(check_disks(0, &[DiskSpec { image: &[], ..disk }]).is_ok());

        // Partition disks take no host RAM: only the RAM disk counts.
        let big =
            DiskSpec { image: &[], capacity: 1 << 40, read_only: false, partition: Some("p") };
        let ram = DiskSpec { capacity: 4096, partition: None, ..big };
        assert_eq!(disk_bytes(&[big, ram, big]), 4096);

        // Unique across all VMs; the later disk is blamed, the message names the first.
        let names = ["web", "db"];
        assert!(check_unique_partitions(&names, &[(0, 0, "a"), (1, 0, "b")]).is_ok());
        let e = check_unique_partitions(&names, &[(0, 0, "a"), (1, 2, "a")]).unwrap_err();
        assert_eq!(e.path(), "vm[1].disk[2].partition");
        assert!(e.message.contains("already the partition of vm[0] (\"web\") disk[0]"), "{e}");
        let e = check_unique_partitions(&names, &[(0, 0, "a"), (0, 1, "a")]).unwrap_err();
        assert_eq!(e.path(), "vm[0].disk[1].partition");
    }

    #[test]
    fn nics() {
        let mac = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
        assert!(check_nic(0, 0, "lan0", mac, None).is_ok());
        // Locally administered (bit 1) is fine; multicast (bit 0) is not.
        assert!(check_nic(0, 0, "lan0", [0x02, 0, 0, 0, 0, 1], None).is_ok());
        assert_eq!(key(check_nic(0, 1, "LAN", mac, None)), "vm[0].nic[1].network");
        assert_eq!(key(check_nic(0, 1, "", mac, None)), "vm[0].nic[1].network");
        assert_eq!(
            key(check_nic(0, 1, "lan0", [0x01, 0, 0x5e, 0, 0, 1], None)),
            "vm[0].nic[1].mac"
        );
        assert_eq!(key(check_nic(0, 1, "lan0", [0xff; 6], None)), "vm[0].nic[1].mac");
        assert_eq!(key(check_nic(0, 1, "lan0", [0; 6], None)), "vm[0].nic[1].mac");
        assert!(check_nic(0, 0, "lan0", mac, Some(68)).is_ok());
        assert!(check_nic(0, 0, "lan0", mac, Some(65535)).is_ok());
        let e = check_nic(0, 1, "lan0", mac, Some(67)).unwrap_err();
        assert_eq!(e.path(), "vm[0].nic[1].mtu");
        assert!(e.message.contains("use 68 to 65535 bytes"), "{e}");
        let nic = NicSpec { network: "lan0", mac, mtu: None };
        assert!(check_nics(0, &[nic; MAX_NICS]).is_ok());
        assert_eq!(key(check_nics(0, &[nic; MAX_NICS + 1])), "vm[0].nic");

        let names = ["web", "db"];
        let other = [0x52, 0x54, 0, 0, 0, 1];
        assert!(check_unique_macs(&names, &[(0, 0, mac), (0, 1, other), (1, 0, [2; 6])]).is_ok());
        let e = check_unique_macs(&names, &[(0, 0, mac), (1, 0, other), (1, 1, mac)]).unwrap_err();
        assert_eq!(e.path(), "vm[1].nic[1].mac");
        assert!(
            e.message.starts_with("52:54:00:12:34:56 is already the MAC of vm[0] (\"web\") nic[0]")
        );

        // One MTU per network; an omitted one is 1500. Other networks are theirs.
        let same = [(0, 0, "lan0", Some(1500)), (1, 0, "lan0", None), (1, 1, "wan", Some(9000))];
        assert!(check_network_mtus(&names, &same).is_ok());
        let e = check_network_mtus(&names, &[(0, 0, "lan0", Some(9000)), (1, 0, "lan0", None)])
            .unwrap_err();
        assert_eq!(e.path(), "vm[1].nic[0].mtu");
        assert!(
            e.message.starts_with(
                "MTU 1500 differs from the 9000 of vm[0] (\"web\") nic[0] on network \"lan0\""
            ),
            "{e}"
        );
    }

    #[test]
    fn passthrough_paths() {
        for good in ["/pl031@9010000", "/soc/serial@1c28000", "/a", "/x,y_z.1+2-3/b@0"] {
            assert!(valid_dt_path(good), "{good}");
        }
        let long = format!("/{}", "a".repeat(MAX_DT_PATH_LEN));
        for bad in ["", "/", "pl031@9010000", "/soc/", "/soc//uart", "/a b", "/a\0", "/é", &long] {
            assert!(!valid_dt_path(bad), "{bad:?}");
            assert_eq!(key(check_passthrough(3, &[bad])), "vm[3].passthrough", "{bad:?}");
        }
        assert!(valid_dt_path(&long[..MAX_DT_PATH_LEN]));
        assert!(check_passthrough(0, &["/a", "/b", "/c", "/d"]).is_ok());
        assert!(check_passthrough(0, &[] as &[&str]).is_ok());
        let e = check_passthrough(0, &["/a", "/b", "/c", "/d", "/e"]).unwrap_err();
        assert!(e.message.contains("at most 4"), "{e}");
        let e = check_passthrough(0, &["/a", "/b", "/a"]).unwrap_err();
        assert!(e.message.contains("listed twice"), "{e}");

        let names = ["web", "db"];
        assert!(check_unique_passthrough(&names, &[(0, "/a"), (1, "/b")]).is_ok());
        let e = check_unique_passthrough(&names, &[(0, "/a"), (1, "/b"), (1, "/a")]).unwrap_err();
        assert_eq!(e.path(), "vm[1].passthrough");
        assert!(e.message.contains("already assigned to vm[0] (\"web\")"), "{e}");
    }

    #[test]
    fn virtio_slots() {
        use DeviceKind::*;
        assert!(check_virtio_slots(0, 4, 4, &[Pl011], false).is_ok());
        assert!(check_virtio_slots(0, 3, 3, &[VirtioConsole, VirtioRng], false).is_ok());
        assert_eq!(key(check_virtio_slots(0, 4, 4, &[VirtioRng], false)), "vm[0].devices");
        assert_eq!(key(check_virtio_slots(0, 4, 5, &[], false)), "vm[0].disk");
        assert_eq!(key(check_virtio_slots(0, 9, 0, &[], false)), "vm[0].nic");
        let e = check_virtio_slots(0, 4, 4, &[VirtioConsole, Pl011], false).unwrap_err();
        assert!(e.message.contains("needs 9 virtio-mmio slots (4 NICs, 4 disks, 1 virtio"), "{e}");
    }

    #[test]
    fn the_control_channel_takes_a_slot() {
        use DeviceKind::*;
        assert!(check_virtio_slots(0, 4, 3, &[], true).is_ok());
        assert!(check_virtio_slots(0, 3, 3, &[VirtioRng], true).is_ok());
        // The eight others fit; the channel would be the ninth: `control` is blamed.
        let e = check_virtio_slots(2, 4, 3, &[VirtioRng], true).unwrap_err();
        assert_eq!(e.path(), "vm[2].control");
        assert!(
            e.message.starts_with(
                "the VM needs 9 virtio-mmio slots (4 NICs, 3 disks, 1 virtio devices in \
                 `devices` and the control channel) but has 8;"
            ),
            "{e}"
        );
        assert!(e.message.ends_with("or set control = false"), "{e}");
        // Too many even without it: the others are blamed, as without a channel.
        assert_eq!(key(check_virtio_slots(0, 4, 5, &[], true)), "vm[0].disk");
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
        let both = [DeviceKind::Pl011, DeviceKind::VirtioConsole, DeviceKind::VirtioRng];
        assert!(check_devices(0, &both).is_ok());
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
        let two = [vm.clone(), vm.clone()];
        assert_eq!(key(check_vms(&two, &M)), "vm[1].name");

        // The new tables are checked per VM...
        let mut one = vm.clone();
        one.disks.push(DiskSpec {
            image: &kernel,
            capacity: 100,
            read_only: false,
            partition: None,
        });
        assert_eq!(key(check_vms(core::slice::from_ref(&one), &M)), "vm[0].disk[0].size");
        one.disks[0].capacity = 4096;
        one.nics.push(NicSpec { network: "lan 0", mac: [2, 0, 0, 0, 0, 1], mtu: None });
        assert_eq!(key(check_vms(core::slice::from_ref(&one), &M)), "vm[0].nic[0].network");
        one.nics[0].network = "lan0";
        one.passthrough.push("rtc".into());
        assert_eq!(key(check_vms(core::slice::from_ref(&one), &M)), "vm[0].passthrough");
        one.passthrough[0] = "/rtc@0".into();
        one.devices = vec![DeviceKind::VirtioConsole, DeviceKind::VirtioRng];
        one.nics = vec![one.nics[0]; 4];
        one.disks = vec![one.disks[0]; 3];
        assert_eq!(key(check_vms(core::slice::from_ref(&one), &M)), "vm[0].devices");
        one.disks.pop();
        // (The four NICs share a MAC.)
        assert_eq!(key(check_vms(core::slice::from_ref(&one), &M)), "vm[0].nic[1].mac");
        for (n, nic) in one.nics.iter_mut().enumerate() {
            nic.mac[5] = n as u8;
        }
        assert!(check_vms(core::slice::from_ref(&one), &M).is_ok());
        // Eight slots are taken: a control channel has none left.
        one.control = true;
        assert_eq!(key(check_vms(core::slice::from_ref(&one), &M)), "vm[0].control");
        one.control = false;

        // ...and across VMs.
        let mut other = one.clone();
        other.name = "vm1";
        other.nics.clear();
        let pair = [one.clone(), other.clone()];
        assert_eq!(key(check_vms(&pair, &M)), "vm[1].passthrough");
        other.passthrough.clear();
        other.nics.push(one.nics[2]);
        let pair = [one.clone(), other.clone()];
        assert_eq!(key(check_vms(&pair, &M)), "vm[1].nic[0].mac");
        other.nics.clear();
        other.disks =
            vec![DiskSpec { image: &[], capacity: 1 << 30, read_only: false, partition: None }];
        let pair = [one.clone(), other.clone()];
        assert_eq!(key(check_vms(&pair, &M)), "vm[1].memory_size");
        other.disks[0].capacity = 512 << 20;
        let mut third = other.clone();
        third.name = "vm2";
        let mut trio = [one.clone(), other.clone(), third];
        assert_eq!(key(check_vms(&trio, &M)), "vm[2].memory_size");
        // Not started at boot, a VM may take the sum past the machine's RAM.
        trio[2].autostart = false;
        assert!(check_vms(&trio, &M).is_ok());
        other.disks[0].capacity = 1 << 30;
        // A disk on a partition takes no RAM, but its name is the VM's alone.
        other.disks[0].partition = Some("data");
        one.disks[0] = DiskSpec { image: &[], partition: Some("data"), ..one.disks[0] };
        let pair = [one.clone(), other.clone()];
        assert_eq!(key(check_vms(&pair, &M)), "vm[1].disk[0].partition");
        other.disks[0].partition = Some("data1");
        assert!(check_vms(&[one, other], &M).is_ok());
    }
}
