#!/usr/bin/env bash
# Installs what building and running armhv needs, when it is missing, and says so. With
# --tests also what only the tests need (`make test`, `make check`, `make soak`): nightly Rust
# and cargo-fuzz for the fuzz targets, e2fsck for the persistent disks' filesystems, U-Boot for
# QEMU, the firmware of the boot-from-U-Boot test (xtask/tests/uboot.rs), and for armhvctl's
# test (xtask/tests/armhvctl.rs) busybox and shellcheck.
set -euo pipefail
tests=0
[ "${1:-}" = "--tests" ] && tests=1

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found: install Rust with rustup (https://rustup.rs) and retry" >&2
    exit 1
fi

for target in aarch64-unknown-none aarch64-unknown-none-softfloat; do
    if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
        echo "setup: adding the Rust target $target (rustup)"
        rustup target add "$target"
    fi
done

# The fuzz targets' bounded run (xtask/tests/fuzz.rs, fuzz/README.md): nightly Rust and cargo-fuzz.
if [ "$tests" = 1 ] && ! rustup toolchain list 2>/dev/null | grep -q '^nightly-'; then
    echo "setup: installing the nightly Rust toolchain for the fuzz targets (rustup)"
    rustup toolchain install nightly --profile minimal
fi
# `make check` formats and lints the fuzz crate with nightly too.
for component in rustfmt clippy; do
    if [ "$tests" = 1 ] && ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q "^$component"; then
        echo "setup: adding $component to the nightly toolchain (rustup)"
        rustup component add --toolchain nightly "$component"
    fi
done
if [ "$tests" = 1 ] && ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "setup: installing cargo-fuzz (cargo install)"
    cargo install cargo-fuzz --locked
fi

# Debian packages: QEMU, cpio for the Linux guest's initramfs (scripts/linux-guest.sh), and
# for the tests e2fsck, which checks the persistent disks' filesystems, u-boot-qemu, whose
# qemu_arm64/u-boot.bin boots armhv as a board's firmware would, busybox-static, whose ash and
# tools run guests/linux/armhvctl as the Linux guest does, and shellcheck, which checks it.
missing=""
command -v qemu-system-aarch64 >/dev/null 2>&1 || missing="$missing qemu-system-arm"
command -v cpio >/dev/null 2>&1 || missing="$missing cpio"
if [ "$tests" = 1 ]; then
    command -v e2fsck >/dev/null 2>&1 || [ -x /sbin/e2fsck ] || missing="$missing e2fsprogs"
    [ -f /usr/lib/u-boot/qemu_arm64/u-boot.bin ] || missing="$missing u-boot-qemu"
    command -v busybox >/dev/null 2>&1 || missing="$missing busybox-static"
    command -v shellcheck >/dev/null 2>&1 || missing="$missing shellcheck"
fi
if [ -n "$missing" ]; then
    echo "setup: installing the Debian package(s)$missing with apt-get"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi
