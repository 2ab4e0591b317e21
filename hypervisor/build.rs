//! Links the hypervisor with its own linker script (only for the bare-metal binary), as a
//! static position-independent executable: `.cargo/config.toml` compiles it with
//! `-C relocation-model=pie`, and boot.S relocates it to wherever the boot loader put it. The
//! script reserves boot stacks for `vmm::arch::MAX_CPUS` CPUs, read from its source so that
//! the number is written once.
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
    // The target's link is static and not position-independent; --pie keeps the absolute
    // addresses in data as R_AARCH64_RELATIVE relocations in .rela.dyn. No dynamic linker;
    // -z text refuses any relocation of the code itself (code stays read-only and must be
    // PC-relative); -z norelro: the linker script places the relocated read-only data itself.
    for arg in ["--pie", "--no-dynamic-linker", "-z", "text", "-z", "norelro"] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
}
