//! Puts the guests' linker script, `baremetal.ld`, where the final link finds it: a binary
//! using this crate links with `-Tbaremetal.ld` (see its own `build.rs`), and the search
//! path emitted here reaches that link because link-search paths of dependencies propagate.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=baremetal.ld");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::copy("baremetal.ld", out.join("baremetal.ld")).expect("copying baremetal.ld");
    println!("cargo:rustc-link-search={}", out.display());
}
