#!/usr/bin/env bash
# Builds the Linux guest assets from Debian 12's stock arm64 packages (no rebuilt kernel):
#
#   OUTDIR/Image               the kernel of linux-image-6.1.0-NN-arm64, an uncompressed arm64 Image
#   OUTDIR/initramfs.cpio.gz   busybox-static, that kernel's virtio modules, guests/linux/init,
#                              udhcpc.script, soak and armhvctl
#   OUTDIR/kernel-version      e.g. 6.1.0-56-arm64
#   OUTDIR/initramfs-bench.cpio.gz   with --bench only: the same plus the benchmark workloads
#                              (hackbench, iperf3, sockperf, xz, their libraries, guests/linux/bench)
#
# Usage: scripts/linux-guest.sh [--update] [--bench] [OUTDIR]   (OUTDIR defaults to build/linux)
#
# Cached: the .deb files stay in OUTDIR/debs and are fetched only when missing; the outputs are
# rebuilt only when their inputs (the .debs, guests/linux/init, udhcpc.script, soak and armhvctl,
# this script) have changed.
# --update refreshes the package index and fetches a newer kernel or busybox if Debian has one.
# Runs unprivileged: apt uses a private configuration and state under OUTDIR/apt. The mirrors
# can be changed with DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR. Details: guests/linux/README.md.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
update=0
bench=0
outdir=""
for arg in "$@"; do
    case "$arg" in
        --update) update=1 ;;
        --bench) bench=1 ;;
        -h | --help) sed -n '2,17s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) echo "linux-guest: unknown option $arg (try --help)" >&2; exit 2 ;;
        *) outdir=$arg ;;
    esac
done
outdir=${outdir:-$root/build/linux}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
# One run at a time per OUTDIR (test runners may call this from several threads).
exec 9>"$outdir/.lock"
flock 9

say() { echo "linux-guest: $*"; }
die() { echo "linux-guest: error: $*" >&2; exit 1; }
# The private apt (suite, keyring, setup_apt, apt_update, fetch_deb, cached_deb).
# shellcheck source=scripts/debian-apt.sh
. "$root/scripts/debian-apt.sh"

# The modules /init loads, in this order after their dependencies; built-in ones are skipped.
# ext4 (with crc32c, which it loads by name) mounts the ext2 filesystem busybox's mke2fs makes on a
# persistent disk (armhv.data=).
wanted_modules="virtio_mmio virtio_blk virtio_net virtio_console virtio_rng crc32c_generic ext4"
init_src=$root/guests/linux/init
# busybox udhcpc's script, /etc/armhv/udhcpc.script (armhv.ip=dhcp).
udhcpc_src=$root/guests/linux/udhcpc.script
# The soak's workload (xtask/tests/soak.rs), /usr/bin/armhv-soak.
soak_src=$root/guests/linux/soak
# A control VM's command-line tool for armhv's control channel, /bin/armhvctl.
armhvctl_src=$root/guests/linux/armhvctl
# --bench: the Debian packages of the workloads, the programs taken from them (into
# /usr/local/bin, off /init's PATH so that no busybox applet of the same name is shadowed or
# shadows them), and the guest-side scripts (into /usr/bin). The packages' shared libraries come
# from their library dependencies (below); 'sockperf' is the request/response test (netperf is
# not in Debian main).
bench_packages="rt-tests iperf3 sockperf xz-utils"
bench_programs="hackbench iperf3 sockperf xz"
bench_src=$root/guests/linux/bench

for tool in apt-get apt-cache apt-config dpkg-deb cpio gzip flock; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found: run scripts/setup.sh (Debian 12 is assumed)"
done
[ -r "$keyring" ] || die "$keyring missing: install the Debian package debian-archive-keyring"
[ -r "$init_src" ] || die "$init_src missing"
[ -r "$udhcpc_src" ] || die "$udhcpc_src missing"
[ -r "$soak_src" ] || die "$soak_src missing"
[ -r "$armhvctl_src" ] || die "$armhvctl_src missing"
[ "$bench" = 0 ] || [ -d "$bench_src" ] || die "$bench_src missing"

# --- apt, private: only Debian's arm64 indexes, nothing from the host's apt configuration except
# its proxy settings, so the host's own sources, hooks and architecture are never touched. ---
aptdir=$outdir/apt
debdir=$outdir/debs
mkdir -p "$debdir"
# debian-apt.sh's cached-file pattern, with the kernel's ABI number left open.
deb_pattern() {
    case "$1" in
        linux-image*) echo 'linux-image-6.1.0-*-arm64_*_arm64.deb' ;;
        *) echo "$1_*_arm64.deb" ;;
    esac
}

kernel_deb=$(cached_deb linux-image)
busybox_deb=$(cached_deb busybox-static)
if [ "$update" = 1 ] || [ -z "$kernel_deb" ] || [ -z "$busybox_deb" ]; then
    apt_update
    # linux-image-arm64 is the metapackage that depends on the current ABI's kernel package.
    kernel_pkg=$(apt-cache depends linux-image-arm64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-6\.1\.0-[0-9]+-arm64$/ && !p { print $2; p = 1 }')
    [ -n "$kernel_pkg" ] || die "no linux-image-6.1.0-NN-arm64 found in 'apt-cache depends linux-image-arm64'"
    for pkg in "$kernel_pkg" busybox-static; do fetch_deb "$pkg"; done
    kernel_deb=$(cached_deb linux-image)
    busybox_deb=$(cached_deb busybox-static)
fi

# --- --bench: the workloads' packages and, recursively, the library packages they depend on
# (Depends and Pre-Depends named lib*; the rest, such as python3 for rt-tests' scripts or
# debconf for iperf3's maintainer scripts, is not needed to run the programs). The resolved list
# is kept in OUTDIR/debs/bench-packages so that a cached build needs no apt. ---
bench_list=$debdir/bench-packages
bench_debs=()
if [ "$bench" = 1 ]; then
    missing=0
    if [ -s "$bench_list" ]; then
        while read -r pkg; do [ -n "$(cached_deb "$pkg")" ] || missing=1; done <"$bench_list"
    else
        missing=1
    fi
    if [ "$update" = 1 ] || [ "$missing" = 1 ]; then
        apt_update
        declare -A wanted=()
        queue=($bench_packages)
        while [ "${#queue[@]}" -gt 0 ]; do
            pkg=${queue[0]}
            queue=("${queue[@]:1}")
            [ -z "${wanted[$pkg]:-}" ] || continue
            wanted[$pkg]=1
            # "Depends: libfoo" / "PreDepends: libfoo"; alternatives ("|Depends:") and virtual
            # packages ("<name>") are not followed.
            for dep in $(apt-cache depends "$pkg" 2>/dev/null |
                awk '($1 == "Depends:" || $1 == "PreDepends:") && $2 ~ /^lib/ { print $2 }'); do
                queue+=("$dep")
            done
        done
        printf '%s\n' "${!wanted[@]}" | LC_ALL=C sort >"$bench_list.new"
        while read -r pkg; do fetch_deb "$pkg"; done <"$bench_list.new"
        mv "$bench_list.new" "$bench_list"
    fi
    while read -r pkg; do bench_debs+=("$(cached_deb "$pkg")"); done <"$bench_list"
fi

image=$outdir/Image
initramfs=$outdir/initramfs.cpio.gz
version_file=$outdir/kernel-version
stamp=$outdir/.inputs
bench_initramfs=$outdir/initramfs-bench.cpio.gz
bench_stamp=$outdir/.inputs-bench

# Up to date when every output exists and was built from exactly these inputs (by content: apt
# may give a downloaded file the server's old modification time).
inputs=$(printf '%s\n' "$(basename "$kernel_deb")" "$(basename "$busybox_deb")"
    sha256sum "$init_src" "$udhcpc_src" "$soak_src" "$armhvctl_src" "${BASH_SOURCE[0]}" "$root/scripts/debian-apt.sh" |
        cut -d' ' -f1)
base_ok=0
if [ -s "$image" ] && [ -s "$initramfs" ] && [ -s "$version_file" ] && [ -f "$stamp" ] &&
    [ "$(cat "$stamp")" = "$inputs" ]; then
    base_ok=1
fi
outputs=("$image" "$initramfs" "$version_file")
bench_ok=1
if [ "$bench" = 1 ]; then
    bench_inputs=$(printf '%s\n' "$inputs"
        for deb in "${bench_debs[@]}"; do basename "$deb"; done
        cd "$bench_src" && find . -type f | LC_ALL=C sort | xargs sha256sum)
    [ "$base_ok" = 1 ] && [ -s "$bench_initramfs" ] && [ -f "$bench_stamp" ] &&
        [ "$(cat "$bench_stamp")" = "$bench_inputs" ] || bench_ok=0
    outputs+=("$bench_initramfs")
fi
if [ "$base_ok" = 1 ] && [ "$bench_ok" = 1 ]; then
    say "up to date (kernel $(cat "$version_file")):"
    ls -l "${outputs[@]}" | sed 's/^/  /'
    exit 0
fi
[ "$base_ok" = 1 ] || rm -f "$stamp"
[ "$bench_ok" = 1 ] || rm -f "$bench_stamp"

work=$outdir/work
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

say "extracting $(basename "$kernel_deb") and $(basename "$busybox_deb")"
dpkg-deb -x "$kernel_deb" "$work/kernel"
dpkg-deb -x "$busybox_deb" "$work/busybox"

# --- The kernel: /boot/vmlinuz-VERSION is an uncompressed arm64 Image with an EFI stub. ---
vmlinuz=$(find "$work"/kernel/boot -name 'vmlinuz-*' 2>/dev/null)
[ -n "$vmlinuz" ] && [ "$(wc -l <<<"$vmlinuz")" = 1 ] || die "no /boot/vmlinuz-* in $(basename "$kernel_deb")"
version=${vmlinuz##*/vmlinuz-}
moddir=$work/kernel/lib/modules/$version
[ -d "$moddir" ] || die "no /lib/modules/$version in $(basename "$kernel_deb")"
# The arm64 boot protocol's header: magic "ARM\x64" at offset 56 (Documentation/arm64/booting.rst).
magic=$(dd if="$vmlinuz" bs=1 skip=56 count=4 2>/dev/null | od -An -tx1 | tr -d ' \n')
[ "$magic" = 41524d64 ] ||
    die "$vmlinuz is not an uncompressed arm64 Image (bytes 56..59 are '$magic', want 41524d64 = \"ARM\\x64\"); a compressed kernel must be unpacked first"

# --- The modules, with their dependencies first. Debian's package ships no modules.dep (depmod
# runs at install time), so dependencies come from each module's own .modinfo "depends=". ---
declare -A ko_path=() # module name (with '_') -> path relative to $moddir
while IFS= read -r rel; do
    name=${rel##*/}
    name=${name%%.ko*}
    ko_path[${name//-/_}]=$rel
done < <(cd "$moddir" && find kernel -name '*.ko*')
builtin=$(sed 's#.*/##; s#\.ko.*##; s#-#_#g' "$moddir"/modules.builtin)
declare -A seen=()
order=()
visit() {
    local name=${1//-/_} deps dep
    [ -z "${seen[$name]:-}" ] || return 0
    seen[$name]=1
    if [ -z "${ko_path[$name]:-}" ]; then
        grep -qx "$name" <<<"$builtin" || die "module $name is neither a module nor built into $version"
        say "  $name is built into the kernel"
        return 0
    fi
    case "${ko_path[$name]}" in
        *.ko) ;;
        *) die "${ko_path[$name]} is compressed; only uncompressed .ko files are handled" ;;
    esac
    deps=$(tr '\0' '\n' <"$moddir/${ko_path[$name]}" | sed -n 's/^depends=//p')
    for dep in ${deps//,/ }; do visit "$dep"; done
    order+=("${ko_path[$name]}")
}
for m in $wanted_modules; do visit "$m"; done

# --- The initramfs: a staging tree packed as cpio newc with every file owned by root. ---
say "building initramfs with busybox and ${#order[@]} modules for $version"
rootfs=$work/rootfs
mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,root,etc/armhv}
cp "$work"/busybox/bin/busybox "$rootfs"/bin/busybox
# Only /bin/sh is linked here, for /init's #! line: the arm64 busybox cannot run on the build host
# to list its applets, so /init creates the other links with "busybox --install -s".
ln -s busybox "$rootfs"/bin/sh
install -m 0755 "$init_src" "$rootfs"/init
install -m 0755 "$udhcpc_src" "$rootfs"/etc/armhv/udhcpc.script
install -m 0755 "$soak_src" "$rootfs"/usr/bin/armhv-soak
install -m 0755 "$armhvctl_src" "$rootfs"/bin/armhvctl
: >"$rootfs"/etc/armhv/modules # read by /init: the load order, one path per line
for rel in "${order[@]}"; do
    mkdir -p "$rootfs/lib/modules/$version/$(dirname "$rel")"
    cp "$moddir/$rel" "$rootfs/lib/modules/$version/$rel"
    echo "/lib/modules/$version/$rel" >>"$rootfs"/etc/armhv/modules
done
chmod 1777 "$rootfs"/tmp
chmod 0700 "$rootfs"/root
# Same bytes for the same inputs: fixed timestamps, sorted names.
pack() { # ROOTFS OUTPUT
    find "$1" -exec touch -h -d @0 {} +
    (cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet) |
        gzip -9 -n >"$2"
}
if [ "$base_ok" = 0 ]; then
    pack "$rootfs" "$initramfs.new"
    cp "$vmlinuz" "$image.new"
    echo "$version" >"$version_file.new"
    mv "$image.new" "$image"
    mv "$version_file.new" "$version_file"
    mv "$initramfs.new" "$initramfs"
    echo "$inputs" >"$stamp" # last: the set is complete
    say "modules (load order):$(for rel in "${order[@]}"; do n=${rel##*/}; printf ' %s' "${n%.ko}"; done)"
fi

# --- --bench: the same tree plus the workloads: their programs in /usr/local/bin, the shared
# libraries of their library packages where Debian puts them (the top level of
# /lib/aarch64-linux-gnu and /usr/lib/aarch64-linux-gnu; not gconv, engines or other plugin
# directories), the dynamic loader's /lib/ld-linux-aarch64.so.1, and guests/linux/bench/*. ---
if [ "$bench_ok" = 0 ]; then
    say "building the bench initramfs from ${#bench_debs[@]} packages"
    mkdir -p "$work/bench"
    for deb in "${bench_debs[@]}"; do dpkg-deb -x "$deb" "$work/bench"; done
    mkdir -p "$rootfs"/usr/local/bin "$rootfs"/lib/aarch64-linux-gnu "$rootfs"/usr/lib/aarch64-linux-gnu
    for prog in $bench_programs; do
        [ -x "$work/bench/usr/bin/$prog" ] || die "no /usr/bin/$prog in the packages $bench_packages"
        cp "$work/bench/usr/bin/$prog" "$rootfs/usr/local/bin/$prog"
    done
    for dir in lib/aarch64-linux-gnu usr/lib/aarch64-linux-gnu; do
        [ ! -d "$work/bench/$dir" ] ||
            find "$work/bench/$dir" -maxdepth 1 -name '*.so*' -exec cp -a {} "$rootfs/$dir/" \;
    done
    loader=lib/ld-linux-aarch64.so.1
    [ -e "$work/bench/$loader" ] || die "no /$loader in the packages (libc6 missing?)"
    cp -a "$work/bench/$loader" "$rootfs/$loader"
    # With binutils' readelf, check that every library a program needs is there.
    if command -v readelf >/dev/null 2>&1; then
        for elf in "$rootfs"/usr/local/bin/* "$rootfs"/lib/aarch64-linux-gnu/*.so* \
            "$rootfs"/usr/lib/aarch64-linux-gnu/*.so*; do
            [ -L "$elf" ] && continue
            for lib in $(readelf -d "$elf" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
                [ -e "$rootfs/lib/aarch64-linux-gnu/$lib" ] || [ -e "$rootfs/usr/lib/aarch64-linux-gnu/$lib" ] ||
                    die "${elf#"$rootfs"} needs $lib, which no package in $bench_list provides"
            done
        done
    fi
    for f in "$bench_src"/*; do
        [ "$(basename "$f")" = README.md ] || install -m 0755 "$f" "$rootfs/usr/bin/$(basename "$f")"
    done
    pack "$rootfs" "$bench_initramfs.new"
    mv "$bench_initramfs.new" "$bench_initramfs"
    echo "$bench_inputs" >"$bench_stamp"
fi

say "done (kernel $version):"
ls -l "${outputs[@]}" | sed 's/^/  /'
