//! A VM that cannot be built gives back everything it took (issue 16, item 3): its heap, its
//! frames and its NICs' network ports. A VM built after it must not inherit anything of it
//! (ids are package indexes; a port it took is free again). (The QEMU side, frames on the network:
//! `xtask/tests/hostile.rs`, `finding_failed_vm_keeps_its_network_port`.)

use std::alloc::{GlobalAlloc, Layout, System, alloc_zeroed};
use std::cell::Cell;
use std::path::Path;

/// Counts this thread's heap bytes in use (the test harness's other threads are not counted).
struct Counting;

thread_local! {
    static IN_USE: Cell<i64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = IN_USE.try_with(|c| c.set(c.get() + layout.size() as i64));
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = IN_USE.try_with(|c| c.set(c.get() - layout.size() as i64));
        // SAFETY: `ptr` came from `alloc` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn usage() -> (i64, usize) {
    (IN_USE.with(Cell::get), vmm::frames::used_frames())
}

const CONFIG: &str = r#"
[[vm]]
name = "a"
vcpus = 1
memory_size = "16M"
kernel = "@testguest"
passthrough = ["/no-such-device@0"]
[[vm.disk]]
size = "1M"
[[vm.nic]]
network = "secret"

[[vm]]
name = "b"
vcpus = 1
memory_size = "16M"
kernel = "@testguest"
[[vm.nic]]
network = "public"

[[vm]]
name = "c"
vcpus = 1
memory_size = "16M"
kernel = "@testguest"
[[vm.nic]]
network = "secret"
"#;

#[test]
fn a_vm_that_fails_to_build_holds_nothing() {
    const POOL: usize = 128 << 20;
    // SAFETY: a valid, non-zero layout; the memory is leaked to the frame pool for good.
    let pool = unsafe { alloc_zeroed(Layout::from_size_align(POOL, 2 << 20).unwrap()) } as u64;
    assert_ne!(pool, 0);
    vmm::frames::add_range(pool, pool + POOL as u64);
    vmm::frames::prime();
    vmm::emulate::vgic::init(vmm::emulate::vgic::HostGic {
        version: guest_abi::map::GicVersion::V3,
        virtual_cpu_interface: None,
    });
    let machine = vmconfig::Machine { ram_bytes: 4 << 30, cpus: 4 };
    let cfg = vmconfig::parse(CONFIG, Path::new("failed-vm.toml"), &machine).unwrap();
    let kernel: &'static [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
    let specs: Vec<_> = (0..cfg.vms.len())
        .map(|i| {
            cfg.spec(i, kernel, None, &vec![None; cfg.vms[i].disks.len()])
                .expect("the test's VM spec")
        })
        .collect();
    let package = vmconfig::encode_package(&specs, &cfg.scheduler, cfg.uplink(), &cfg.machine)
        .unwrap_or_else(|v| panic!("{}: {}", v.path(), v.message));
    let package: &'static [u8] = Box::leak(package.into_boxed_slice());
    let pkg = vmconfig::decode_package(package, &machine).unwrap();
    // As the loader does: the networks are made before any VM is built.
    vmm::emulate::network::define(["secret", "public"]);
    let mpidrs = [0, 1, 2, 3];
    let mut no_host_devices = |path: &str| Err(format!("no host device {path} in tests"));

    // The fake machine (a thread-local) is made at its first use, with what it allocates.
    vmm::arch::fake::with(|_| ());
    let before = usage();
    let why = vmm::create::vm(0, &pkg.vms[0], &mpidrs, 40, &mut no_host_devices)
        .err()
        .expect("a's passthrough fails");
    assert!(why.starts_with("passthrough /no-such-device@0: "), "{why}");
    drop(why);
    assert_eq!(usage(), before, "a failed VM still holds heap bytes or frames (heap, frames)");

    // c then joins `secret` as its only port: the one a took is free again.
    let b = vmm::create::vm(1, &pkg.vms[1], &mpidrs, 40, &mut no_host_devices).unwrap();
    let c = vmm::create::vm(2, &pkg.vms[2], &mpidrs, 40, &mut no_host_devices).unwrap();
    let names: Vec<String> = vmm::emulate::network::stats().into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["secret", "public"]);
    assert_eq!((b.nics[0].network, b.nics[0].port), (1, 0));
    assert_eq!((c.nics[0].network, c.nics[0].port), (0, 0), "c is not alone on secret");
}
