#!/usr/bin/env bash
# Builds the KVM host of `make compare` (bench/README.md, "Comparing systems"):
#
#   build/linux/Image            Debian's stock arm64 kernel (CONFIG_KVM=y), from scripts/linux-guest.sh
#   OUTDIR/kvm-vmm               bench/kvm-vmm, a static aarch64-unknown-linux-musl binary
#   OUTDIR/initramfs.cpio.gz     /init = kvm-vmm, /vmbench.img = the vmbench image given
#
# Usage: scripts/kvm-host.sh --vmbench IMAGE [OUTDIR]     (OUTDIR defaults to build/kvm)
#        scripts/kvm-host.sh --boot-args                  prints the kernel command line to boot with
#
# The kernel boots at EL2 (QEMU -M virt,virtualization=on), so KVM starts; /init mounts devtmpfs,
# runs the VMM with the kernel command line's words after "--" as vmbench's bootargs, and powers
# the machine off when the guest does. The Rust target aarch64-unknown-linux-musl is added here
# (not in rust-toolchain.toml: only `make compare` needs it) and linked with the toolchain's
# rust-lld, so no cross C toolchain is needed. Cached: the initramfs is rebuilt only when the VMM
# or the image changed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=aarch64-unknown-linux-musl
vmbench=""
outdir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --vmbench) vmbench=${2:?--vmbench needs an image path}; shift ;;
        # ttyAMA0: the host's console is the machine's PL011, the harness reads it; rdinit: the
        # VMM is the initramfs's /init; panic=-1: a kernel panic ends QEMU (-no-reboot) at once
        # instead of leaving the harness to time out.
        --boot-args) echo "console=ttyAMA0 rdinit=/init panic=-1"; exit 0 ;;
        -h | --help) sed -n '2,17s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) echo "kvm-host: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) outdir=$1 ;;
    esac
    shift
done
say() { echo "kvm-host: $*"; }
die() { echo "kvm-host: error: $*" >&2; exit 1; }
[ -n "$vmbench" ] || die "no --vmbench IMAGE: give the flat vmbench image to run (the bench harness builds it)"
[ -s "$vmbench" ] || die "$vmbench is missing or empty"
outdir=${outdir:-$root/build/kvm}
mkdir -p "$outdir"
exec 9>"$outdir/.lock"
flock 9
for tool in cpio gzip rustup cargo sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found: run scripts/setup.sh"
done

# The kernel: the same cached Debian package as the Linux guests'.
"$root"/scripts/linux-guest.sh >/dev/null || die "scripts/linux-guest.sh failed (run it alone to see why)"
[ -s "$root/build/linux/Image" ] || die "build/linux/Image missing after scripts/linux-guest.sh"

if ! rustup target list --installed | grep -qx "$target"; then
    say "adding the Rust target $target"
    rustup target add "$target" || die "rustup target add $target failed"
fi

say "building bench/kvm-vmm for $target"
# rustc finds rust-lld in its own sysroot; musl's self-contained CRT objects and libc come with
# the target, so the binary is static.
(cd "$root" && CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld \
    cargo build -q --release -p kvm-vmm --target "$target") || die "building kvm-vmm failed"
vmm_bin=$root/target/$target/release/kvm-vmm
[ -x "$vmm_bin" ] || die "$vmm_bin was not built"
cp "$vmm_bin" "$outdir/kvm-vmm.new"
mv "$outdir/kvm-vmm.new" "$outdir/kvm-vmm"

initramfs=$outdir/initramfs.cpio.gz
stamp=$outdir/.inputs
inputs=$(sha256sum "$outdir/kvm-vmm" "$vmbench" "${BASH_SOURCE[0]}" | cut -d' ' -f1)
if [ -s "$initramfs" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ]; then
    say "up to date: $initramfs"
    exit 0
fi
work=$outdir/work
rm -rf "$work"
mkdir -p "$work/root"
trap 'rm -rf "$work"' EXIT
install -m 0755 "$outdir/kvm-vmm" "$work/root/init"
install -m 0644 "$vmbench" "$work/root/vmbench.img"
# The kernel's built-in initramfs already has /dev (with /dev/console) and /root; /dev is where
# /init mounts devtmpfs for /dev/kvm.
mkdir -p "$work/root/dev"
find "$work/root" -exec touch -h -d @0 {} +
(cd "$work/root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet) |
    gzip -9 -n >"$initramfs.new"
mv "$initramfs.new" "$initramfs"
echo "$inputs" >"$stamp"
say "built $initramfs ($(stat -c %s "$initramfs") bytes): /init (kvm-vmm), /vmbench.img"
