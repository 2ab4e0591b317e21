//! Links the hypervisor with its own linker script (only for the bare-metal binary).
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    println!("cargo:rerun-if-changed=linker.ld");
    println!("cargo:rustc-link-arg-bins=-T{dir}/linker.ld");
}
