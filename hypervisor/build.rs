//! Links the hypervisor with its own linker script (only for the bare-metal binary), telling
//! it how many CPUs' boot stacks to reserve: `vmm::arch::MAX_CPUS`, read from its source so
//! that the number is written once.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let state = format!("{dir}/../crates/vmm/src/arch/state.rs");
    println!("cargo:rerun-if-changed=linker.ld");
    println!("cargo:rerun-if-changed={state}");
    let source = std::fs::read_to_string(&state).expect("crates/vmm/src/arch/state.rs");
    let max_cpus: usize = source
        .lines()
        .find_map(|l| l.trim().strip_prefix("pub const MAX_CPUS: usize = "))
        .and_then(|rest| rest.trim_end_matches(';').trim().parse().ok())
        .expect("`pub const MAX_CPUS: usize = <n>;` in crates/vmm/src/arch/state.rs");
    println!("cargo:rustc-link-arg-bins=--defsym=MAX_CPUS={max_cpus}");
    println!("cargo:rustc-link-arg-bins=-T{dir}/linker.ld");
}
