# shellcheck shell=bash
# Debian 12 arm64 packages by name, with a private apt: sourced by linux-guest.sh and
# xen-host.sh. The caller sets `aptdir`
# (apt's configuration and state) and `debdir` (the cached .deb files) and defines `say` and
# `die`; it may redefine `deb_pattern` after sourcing.
#
# Nothing of the host's apt is used or changed except its proxy settings: the indexes are
# Debian's arm64 ones only, so this runs unprivileged on an x86 Debian machine. The mirrors can
# be changed with DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR.

suite=bookworm # Debian 12
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

debian_apt_check() {
    local tool
    for tool in apt-get apt-cache apt-config dpkg-deb; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool not found: run scripts/setup.sh (Debian 12 is assumed)"
    done
    [ -r "$keyring" ] || die "$keyring missing: install the Debian package debian-archive-keyring"
    mkdir -p "$debdir"
}

setup_apt() {
    mkdir -p "$aptdir"/etc/apt.conf.d "$aptdir"/etc/sources.list.d "$aptdir"/etc/preferences.d \
        "$aptdir"/lists/partial "$aptdir"/cache/archives/partial
    : >"$aptdir"/status # an empty dpkg status: nothing counts as installed for arm64
    {
        echo "deb [arch=arm64 signed-by=$keyring] ${DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite main"
        echo "deb [arch=arm64 signed-by=$keyring] ${DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite-updates main"
        echo "deb [arch=arm64 signed-by=$keyring] ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} $suite-security main"
    } >"$aptdir"/etc/sources.list
    {
        # Read through APT_CONFIG, i.e. before apt would read /etc/apt/apt.conf.d: the host's hooks
        # (such as Docker's clean-up of /var/cache/apt) and index targets stay out.
        echo "Dir::Etc::main \"/dev/null\";"
        echo "Dir::Etc::parts \"$aptdir/etc/apt.conf.d\";"
        echo "Dir::Etc::sourcelist \"$aptdir/etc/sources.list\";"
        echo "Dir::Etc::sourceparts \"$aptdir/etc/sources.list.d\";"
        echo "Dir::Etc::preferences \"$aptdir/etc/preferences\";"
        echo "Dir::Etc::preferencesparts \"$aptdir/etc/preferences.d\";"
        echo "Dir::State::lists \"$aptdir/lists\";"
        echo "Dir::State::status \"$aptdir/status\";"
        echo "Dir::Cache \"$aptdir/cache\";"
        echo "Dir::Cache::pkgcache \"\"; Dir::Cache::srcpkgcache \"\";" # ~100 MB, used once
        echo "APT::Architecture \"arm64\";"
        echo "APT::Architectures { \"arm64\"; };"
        echo "Acquire::Languages \"none\"; Acquire::GzipIndexes \"true\";" # indexes stay compressed
        # As root apt would download as the _apt user, who may not be able to write into OUTDIR.
        [ "$(id -u)" -ne 0 ] || echo "APT::Sandbox::User \"root\";"
        # A proxy configured for the host's apt still applies (http_proxy in the environment does too).
        apt-config dump 2>/dev/null | grep -E '^Acquire::[A-Za-z]+::Proxy' || true
    } >"$aptdir"/apt.conf.new
    mv "$aptdir"/apt.conf.new "$aptdir"/apt.conf
    export APT_CONFIG=$aptdir/apt.conf
}

# The cached .deb of a package, if any. Only one version is kept (apt-get download names files
# PACKAGE_VERSION_ARCH.deb, with the epoch's ':' as %3a).
deb_pattern() {
    echo "$1_*_arm64.deb"
}
cached_deb() {
    local files
    files=$(find "$debdir" -maxdepth 1 -name "$(deb_pattern "$1")" | LC_ALL=C sort)
    echo "${files##*$'\n'}"
}

apt_ready=0
apt_update() {
    [ "$apt_ready" = 0 ] || return 0
    setup_apt
    say "fetching the Debian $suite arm64 package index (private apt state in $aptdir)"
    apt-get -q -q update >"$aptdir"/update.log 2>&1 || { cat "$aptdir"/update.log >&2; die "apt-get update failed"; }
    apt_ready=1
}
# Downloads the candidate version of a package into $debdir unless it is there; drops others.
fetch_deb() {
    local pkg=$1 ver file
    ver=$(apt-cache show --no-all-versions "$pkg" | awk '$1 == "Version:" && !p { print $2; p = 1 }')
    [ -n "$ver" ] || die "apt-cache show $pkg gave no version"
    file="${pkg}_${ver//:/%3a}_arm64.deb"
    if [ -s "$debdir/$file" ]; then
        say "$file is cached"
    else
        say "fetching $pkg $ver (arm64)"
        (cd "$debdir" && apt-get -q -q download "$pkg:arm64") || die "apt-get download $pkg failed"
        [ -s "$debdir/$file" ] || die "apt-get download did not produce $debdir/$file"
    fi
    # Other versions are of no further use.
    find "$debdir" -maxdepth 1 -name "$(deb_pattern "$pkg")" ! -name "$file" -delete
}
