#!/usr/bin/env bash
# Installs what building and testing armhv needs, when it is missing, and says so.
set -euo pipefail

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

if ! command -v qemu-system-aarch64 >/dev/null 2>&1; then
    echo "setup: installing QEMU (Debian package qemu-system-arm) with apt-get"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq qemu-system-arm >/dev/null
fi
