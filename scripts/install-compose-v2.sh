#!/usr/bin/env bash
# Provides Compose v2 for internal/devcontainer's tests without touching the
# system: Debian trixie's docker-compose package (a static Go build of
# Compose v2, the docker CLI plugin binary, which also runs standalone as
# docker-compose), fetched from the pool of the archive apt is configured
# with (DEBIAN_MIRROR overrides), checked against the SHA256 pinned here
# (taken from trixie's Packages, whose hash is in its signed InRelease), and
# unpacked with dpkg-deb -x into a fixed cache dir. trixie is never added to
# apt's sources, so nothing on the machine is upgraded. Idempotent: a cached
# binary that verifies is kept. Prints the binary's path (the tests'
# VAK_COMPOSE_V2) on stdout, everything else on stderr.
set -euo pipefail
version=2.26.1-4
dir=${VAK_COMPOSE_V2_DIR:-/var/cache/vak-test/compose-v2}/$version
bin=$dir/usr/libexec/docker/cli-plugins/docker-compose
arch=$(dpkg --print-architecture)
case $arch in
amd64) sha=47681197cb2b1ab88206b42a1a92fc75f50d9530a6322d03494a473eed0408ea ;;
arm64) sha=bbafaa666f3e7fa00ad36f2a8bab889f1c791ca8743d674e7267a3d07203869c ;;
*) echo "install-compose-v2: no pinned docker-compose $version for $arch" >&2; exit 1 ;;
esac
deb=docker-compose_${version}_$arch.deb
if [ -f "$dir/$deb" ] && echo "$sha  $dir/$deb" | sha256sum -c --status && [ -x "$bin" ] &&
	"$bin" version --short >/dev/null 2>&1; then
	echo "install-compose-v2: cached $("$bin" version --short) at $bin" >&2
	echo "$bin"
	exit 0
fi
mirror=${DEBIAN_MIRROR:-$( { awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources 2>/dev/null
	awk '$1 == "deb" {print $2}' /etc/apt/sources.list 2>/dev/null; } | grep -v -- '-security' | head -1 || true)}
[ -n "$mirror" ] || { echo "install-compose-v2: no Debian archive configured for apt; set DEBIAN_MIRROR" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsS --retry 3 -o "$tmp/$deb" "${mirror%/}/pool/main/d/docker-compose/$deb" || {
	echo "install-compose-v2: cannot fetch $deb from $mirror (superseded in trixie? pin the new version and its SHA256 from trixie's Packages)" >&2
	exit 1
}
echo "$sha  $tmp/$deb" | sha256sum -c --status || {
	echo "install-compose-v2: $deb does not match the pinned SHA256 $sha" >&2
	exit 1
}
rm -rf "$dir"
mkdir -p "$dir"
dpkg-deb -x "$tmp/$deb" "$dir"
mv "$tmp/$deb" "$dir/$deb"
chmod -R a+rX "$dir"
"$bin" version >&2
echo "$bin"
