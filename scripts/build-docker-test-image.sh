#!/usr/bin/env bash
# Builds vak-test-docker:bookworm, the session image of the nested Docker
# tool tests (issue 14): vak-test-debian:bookworm plus Debian's docker.io
# (its docker 20.10 CLI builds with BuildKit without buildx), docker-compose
# (1.29, python) and curl, installed by apt in a chroot from the archive apt
# is configured with (DEBIAN_MIRROR overrides), then `docker import`. No
# registry is needed. Needs root (chroot). Idempotent: an image whose
# vak.inputs label matches this recipe is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=vak-test-docker:bookworm
base=vak-test-debian:bookworm
pkgs="docker.io docker-compose curl ca-certificates"
if ! docker info >/dev/null 2>&1; then
	echo "build-docker-test-image: no Docker daemon reachable; skipping" >&2
	exit 0
fi
./scripts/build-debian-test-image.sh
inputs=$(printf '%s\n%s\n%s\n' "$(docker image inspect -f '{{.Id}}' "$base")" "$pkgs" 1 | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "vak.inputs"}}' "$tag" 2>/dev/null || true)" = "$inputs" ]; then
	echo "build-docker-test-image: $tag is up to date ($inputs)"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "build-docker-test-image: building $tag needs root (chroot)" >&2; exit 1; }
mirror=${DEBIAN_MIRROR:-$( { awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources 2>/dev/null
	awk '$1 == "deb" {print $2}' /etc/apt/sources.list 2>/dev/null; } | grep -v -- '-security' | head -1 || true)}
[ -n "$mirror" ] || { echo "build-docker-test-image: no Debian archive configured for apt; set DEBIAN_MIRROR" >&2; exit 1; }
work=$(mktemp -d)
root=$work/root
cid=
cleanup() {
	umount -l "$root/proc" 2>/dev/null || true
	[ -z "$cid" ] || docker rm -f "$cid" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir "$root"
cid=$(docker create --label vak.test=1 "$base" true)
docker export "$cid" | tar -C "$root" -x
docker rm -f "$cid" >/dev/null
cid=
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
rm -f "$root/etc/resolv.conf"
cp /etc/resolv.conf "$root/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"
chroot "$root" apt-get update -q
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -q --no-install-recommends $pkgs
umount "$root/proc"
rm -f "$root/usr/sbin/policy-rc.d"
: >"$root/etc/resolv.conf"
find "$root/var/cache/apt/archives" "$root/var/lib/apt/lists" -maxdepth 1 -type f -delete
tar --numeric-owner -C "$root" -c . | docker import \
	--change "LABEL vak.test.image=docker vak.inputs=$inputs" \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["/bin/bash"]' - "$tag"
echo "build-docker-test-image: built $tag"
