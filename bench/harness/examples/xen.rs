//! One vmbench run under Xen, by hand, until `make compare` calls `xen::run_vmbench` itself:
//!
//! ```sh
//! cargo run -q -p bench-harness --example xen -- [--no-icount] [BOOTARGS]
//! ```
//! BOOTARGS defaults to vmbench's default list with `n=1000 warmup=100`. Prints the domain's
//! vmbench lines; the whole console goes to build/xen-run/{icount,no-icount}.log.

use bench_harness::xen::{self, XenRun};
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let mut icount = true;
    let mut bootargs = "n=1000 warmup=100".to_owned();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--no-icount" => icount = false,
            a if a.starts_with('-') => {
                anyhow::bail!("unknown option {a}: [--no-icount] [BOOTARGS]")
            }
            a => bootargs = a.to_owned(),
        }
    }
    let elf = xtask::cargo_build("vmbench", xtask::GUEST_TARGET)?;
    let flat = xtask::elf::flatten(&std::fs::read(elf)?)?;
    let dir = xtask::build_dir().join("xen-run");
    std::fs::create_dir_all(&dir)?;
    let image = dir.join("vmbench.img");
    std::fs::write(&image, flat.bytes)?;
    let log = dir.join(if icount { "icount.log" } else { "no-icount.log" });
    let run = XenRun {
        vmbench: image,
        bootargs,
        cpu: "cortex-a76".into(),
        icount,
        timeout: Duration::from_secs(600),
        log: log.clone(),
    };
    print!("{}", xen::run_vmbench(&run)?);
    eprintln!("xen: {}; console: {}", xen::TIMING_NOTE, log.display());
    Ok(())
}
