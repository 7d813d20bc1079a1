#!/usr/bin/env bash
# Builds corelog's Debian package: corelog_<version>_<arch>.deb with /usr/bin/corelog,
# /usr/bin/corelog-load, /etc/corelog/corelog.toml (a conffile), the systemd unit
# corelog.service and the maintainer scripts in this directory (docs/package.md).
#
# Usage: tools/package/build-deb.sh [--bin-dir DIR] [--out-dir DIR]
#
#   --bin-dir DIR  take corelog and corelog-load from DIR (e.g. target/release) instead
#                  of building them with `cargo build --release`; also CORELOG_BIN_DIR
#   --out-dir DIR  where the .deb goes (default target/debian); also CORELOG_DEB_OUT_DIR
#
# The version is the root crate's [package] version in Cargo.toml (a pre-release's "-"
# becomes "~", so 1.0.0-rc.1 sorts before 1.0.0 as Debian compares versions); the
# architecture is `dpkg --print-architecture`. The binaries are stripped (as dh_strip
# does). Needs dpkg-deb, dpkg-shlibdeps (dpkg-dev) and strip (binutils); no root.
# Prints the path of the .deb as its last line.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="${CORELOG_BIN_DIR:-}"
out_dir="${CORELOG_DEB_OUT_DIR:-$root/target/debian}"
maintainer="${CORELOG_DEB_MAINTAINER:-corelog maintainers <maintainers@corelog.invalid>}"

usage() { sed -n '2,17s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) bin_dir="${2:?--bin-dir needs a directory}"; shift 2 ;;
        --bin-dir=*) bin_dir="${1#*=}"; shift ;;
        --out-dir) out_dir="${2:?--out-dir needs a directory}"; shift 2 ;;
        --out-dir=*) out_dir="${1#*=}"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "build-deb.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

for tool in dpkg-deb dpkg-shlibdeps dpkg strip; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "build-deb.sh: $tool is missing (apt install dpkg-dev binutils)" >&2
        exit 1
    }
done

# The root crate's version: the first `version = "..."` of its [package] table.
version="$(sed -n '/^\[package\]/,/^\[/{s/^version *= *"\([^"]*\)".*/\1/p}' "$root/Cargo.toml" | head -n1)"
[ -n "$version" ] || { echo "build-deb.sh: no [package] version in $root/Cargo.toml" >&2; exit 1; }
deb_version="${version/-/\~}"
arch="$(dpkg --print-architecture)"

if [ -z "$bin_dir" ]; then
    (cd "$root" && cargo build --release -p corelog -p corelog-load) >&2
    bin_dir="${CARGO_TARGET_DIR:-$root/target}/release"
fi
case "$bin_dir" in /*) ;; *) bin_dir="$PWD/$bin_dir" ;; esac
for b in corelog corelog-load; do
    [ -x "$bin_dir/$b" ] || { echo "build-deb.sh: no executable $bin_dir/$b" >&2; exit 1; }
done

mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/corelog-deb.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps wants the tree at debian/<package> under a directory with debian/control.
pkg="$work/debian/corelog"
mkdir -p "$pkg/DEBIAN"
printf 'Source: corelog\n\nPackage: corelog\nArchitecture: any\n' > "$work/debian/control"

for b in corelog corelog-load; do
    install -D -m 0755 "$bin_dir/$b" "$pkg/usr/bin/$b"
    strip --remove-section=.comment --remove-section=.note --strip-unneeded "$pkg/usr/bin/$b"
done
# Shipped 0640 root:root; postinst gives the group to corelog (the file may hold secrets).
install -D -m 0640 "$here/corelog.toml" "$pkg/etc/corelog/corelog.toml"
install -D -m 0644 "$here/corelog.service" "$pkg/usr/lib/systemd/system/corelog.service"
install -D -m 0644 "$here/copyright" "$pkg/usr/share/doc/corelog/copyright"
install -D -m 0644 "$root/docs/package.md" "$pkg/usr/share/doc/corelog/package.md"
for s in postinst prerm postrm; do
    install -m 0755 "$here/$s" "$pkg/DEBIAN/$s"
done
echo /etc/corelog/corelog.toml > "$pkg/DEBIAN/conffiles"

shlibs="$(cd "$work" && dpkg-shlibdeps -O -e"debian/corelog/usr/bin/corelog" -e"debian/corelog/usr/bin/corelog-load" 2>/dev/null)"
shlibs="${shlibs#shlibs:Depends=}"
installed_kib="$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)"
cat > "$pkg/DEBIAN/control" <<EOF
Package: corelog
Version: $deb_version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_kib
Depends: adduser, $shlibs
Section: net
Priority: optional
Description: Kafka-compatible message broker
 corelog speaks Apache Kafka's protocol to Kafka's own clients: topics,
 consumer and share groups, transactions, TLS, SASL and ACLs, replicated
 over a cluster of brokers. Each shard is a thread pinned to a CPU with
 its own io_uring rings, writing its logs with O_DIRECT.
 .
 The package runs the broker as the corelog.service systemd unit, under
 the corelog system user, with its data in /var/lib/corelog and its
 configuration in /etc/corelog/corelog.toml. corelog-load is its load
 generator.
EOF
(cd "$pkg" && find usr etc -type f -print0 | sort -z | xargs -0 md5sum) > "$pkg/DEBIAN/md5sums"

deb="$out_dir/corelog_${deb_version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$pkg" "$deb" >&2
echo "$deb"
