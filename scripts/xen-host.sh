#!/usr/bin/env bash
# Fetches Xen for the Xen column of `make compare`: Debian 12's stock arm64 hypervisor,
# xen-hypervisor-4.17-arm64, by package name through a private apt (scripts/debian-apt.sh).
# Nothing else is needed: bench-harness (src/xen.rs) writes the device tree Xen boots with.
#
#   OUTDIR/xen           the hypervisor, /boot/xen-4.17-arm64 of the package: an arm64 Image
#                        that QEMU's -kernel boots at EL2
#   OUTDIR/xen-version   the package's version, e.g. 4.17.7+13-g2445b30a44-0+deb12u1
#
# Usage: scripts/xen-host.sh [--update] [OUTDIR]   (OUTDIR defaults to build/xen)
#
# Cached: the .deb stays in OUTDIR/debs and is fetched only when missing; --update refreshes the
# package index and fetches a newer build if Debian has one. Runs unprivileged.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
update=0
outdir=""
for arg in "$@"; do
    case "$arg" in
        --update) update=1 ;;
        -h | --help) sed -n '2,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) echo "xen-host: unknown option $arg (try --help)" >&2; exit 2 ;;
        *) outdir=$arg ;;
    esac
done
outdir=${outdir:-$root/build/xen}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
exec 9>"$outdir/.lock"
flock 9

say() { echo "xen-host: $*"; }
die() { echo "xen-host: error: $*" >&2; exit 1; }

# Debian 12's only Xen; its arm64 build is the hypervisor alone (no tools, no dom0 kernel).
package=xen-hypervisor-4.17-arm64

aptdir=$outdir/apt
debdir=$outdir/debs
# shellcheck source=scripts/debian-apt.sh
. "$root/scripts/debian-apt.sh"
debian_apt_check

deb=$(cached_deb "$package")
if [ "$update" = 1 ] || [ -z "$deb" ]; then
    apt_update
    fetch_deb "$package"
    deb=$(cached_deb "$package")
fi
[ -n "$deb" ] || die "no $package .deb in $debdir after the download"

xen=$outdir/xen
version_file=$outdir/xen-version
version=$(dpkg-deb -f "$deb" Version)
if [ -s "$xen" ] && [ "$(cat "$version_file" 2>/dev/null)" = "$version" ]; then
    say "up to date (Xen $version): $xen"
    exit 0
fi

work=$outdir/work
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
say "extracting $(basename "$deb")"
dpkg-deb -x "$deb" "$work"
found=$(find "$work/boot" -maxdepth 1 -type f -name 'xen-*' ! -name '*.efi' ! -name '*config*' 2>/dev/null)
[ -n "$found" ] && [ "$(wc -l <<<"$found")" = 1 ] ||
    die "expected one /boot/xen-* hypervisor in $(basename "$deb"), found: ${found:-none}"
# The arm64 boot protocol's header: magic "ARM\x64" at offset 56, which is what lets QEMU's
# -kernel enter it at EL2 with the device tree in x0.
magic=$(dd if="$found" bs=1 skip=56 count=4 2>/dev/null | od -An -tx1 | tr -d ' \n')
[ "$magic" = 41524d64 ] ||
    die "$found is not an arm64 Image (bytes 56..59 are '$magic', want 41524d64); QEMU cannot boot it with -kernel"
# New names, then a rename: a reader never sees a half-written file.
cp "$found" "$xen.new"
mv "$xen.new" "$xen"
echo "$version" >"$version_file"
say "Xen $version: $xen ($(stat -c %s "$xen") bytes)"
