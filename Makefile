# armhv: the two commands a newcomer needs are `make run` and `make test`.
CONFIG ?= configs/default.toml
CPU    ?= cortex-a76
SMP    ?= 4
## The interrupt controller: 3 (GICv3) or 2 (a GICv2 with the virtualization extensions, as a
## GIC-400 board; at most 8 CPUs). The VMs get a virtual GIC of the same version.
GIC    ?= 3

.PHONY: run test soak bench table1 compare build setup setup-tests guest-assets check clean

## Build everything and boot the default configuration (two Linux VMs on a virtual network).
run: setup guest-assets
	cargo xtask run $(CONFIG) --cpu $(CPU) --smp $(SMP) --gic $(GIC)

## All tests: host unit tests of the portable crates and QEMU integration tests on every CPU model
## (every test binary runs even after a failure, so one run shows every failure).
test: setup-tests guest-assets
	@./scripts/test-summary.sh cargo test --workspace --no-fail-fast --exclude armhv --exclude baremetal --exclude testguest --exclude vmbench --exclude hostile -- --test-threads=2

## The 10-minute soak: six VMs (two Linux, four bare-metal) on four CPUs rebooting themselves
## under disk, network and IPI load; no hang, no leak, per-VM statistics at the end
## (configs/tests/soak.toml, xtask/tests/soak.rs). make test runs it for 60 s.
## Another length: make soak SOAK_SECS=1800.
SOAK_SECS ?= 600
soak: setup-tests guest-assets
	ARMHV_SOAK_SECS=$(SOAK_SECS) cargo test -p xtask --test soak six_vms -- --nocapture --test-threads=1

## The measurement suite: the ISCA-2016 microbenchmarks under QEMU -icount (path lengths in
## instructions), the world-switch breakdown, the design ablations and wall-clock figures;
## writes bench/results/ and fails on a median over 5 % above bench/baseline.json.
## The application workloads (hackbench, an xz job, virtio-blk, iperf3, TCP request/response in
## Linux guests, and the real-I/O ones: the machine disk, and a host client through the uplink;
## natively and under armhv, normalized to native) take about 5 minutes more and are opt-in:
## make bench ARGS="--with-workloads" (all) or ARGS="--only workloads".
## Options: make bench ARGS="--quick" (or "--only micro,wall", "--update-baseline", "--help").
## The suite is its own crate, bench/harness (bench/README.md).
bench: setup guest-assets
	cargo run -q -p bench-harness -- $(ARGS)

## The interrupt-distributor experiment, the multicore CE study's Table 1 and Figures 9-10:
## seven cases (audio and network interrupts on core 0, with and without the distributor, with
## and without a CPU-heavy job) on configs/bench/distributor.toml, 3 rounds under icount, about
## 10 minutes (ARGS="--rounds 5" for 5); prints the
## table and writes bench/results/ (report, JSON, SVG charts, consoles).
## Some cases only: make table1 ARGS="--cases 1,2,3".
table1: setup guest-assets
	cargo run -q -p bench-harness -- --only distributor $(ARGS)

## The study's Table II with one column per system: the same vmbench image on the same QEMU
## machine under icount, natively, under armhv, under KVM (Debian's stock kernel at EL2 with the
## bench/kvm-vmm VMM, built by scripts/kvm-host.sh) and under Xen once its runner is in the
## build; prints the table, writes bench/results/<stamp>-compare.{md,json,svg}. About a minute
## of QEMU once built (cargo test -p bench-harness --test compare: the KVM column alone).
## Options: make compare ARGS="--quick" (or "--systems native,kvm", "--help").
compare: setup guest-assets
	cargo run -q -p bench-harness -- compare $(ARGS)

build: setup guest-assets
	cargo xtask build $(CONFIG) --cpu $(CPU) --smp $(SMP)

## Formatting and lints (rustfmt, clippy -D warnings with the unsafe-documentation lints).
check: setup-tests
	cargo fmt --all -- --check
	cargo clippy --workspace --exclude armhv --exclude baremetal --exclude testguest --exclude vmbench --exclude hostile --all-targets -- -D warnings
	cargo clippy -p armhv -p vmm -p control --target aarch64-unknown-none-softfloat -- -D warnings
	cargo clippy -p baremetal -p testguest -p vmbench -p hostile --target aarch64-unknown-none -- -D warnings
	@# kvm-vmm's KVM code builds for arm64 Linux only; its target is added by make compare.
	@if rustup target list --installed | grep -qx aarch64-unknown-linux-musl; then \
		echo "cargo clippy -p kvm-vmm --target aarch64-unknown-linux-musl"; \
		cargo clippy -p kvm-vmm --target aarch64-unknown-linux-musl --all-targets -- -D warnings; \
	else \
		echo "check: kvm-vmm's KVM code not linted: no aarch64-unknown-linux-musl target (make compare adds it)"; \
	fi
	cd fuzz && cargo +nightly fmt --check && cargo +nightly clippy --all-targets -- -D warnings

setup:
	@./scripts/setup.sh

## What only the tests need besides: nightly Rust and cargo-fuzz, e2fsck.
setup-tests:
	@./scripts/setup.sh --tests

## Debian's stock arm64 kernel and a busybox initramfs for the Linux guests (cached in build/linux).
guest-assets: setup
	@./scripts/linux-guest.sh

clean:
	cargo clean
	rm -rf build
