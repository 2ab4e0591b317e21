//! Links the bare-metal binary with the `baremetal` crate's linker script (bins only,
//! bare-metal targets only; that crate's build script puts the script on the search path).

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=-Tbaremetal.ld");
    }
}
