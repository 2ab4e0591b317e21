//! `make bench`, `make table1`: see `bench/README.md`.

fn main() {
    if let Err(e) = bench_harness::main(std::env::args().skip(1)) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
