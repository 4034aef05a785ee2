#!/usr/bin/env bash
# Builds vak-test-debian:bookworm, a minimal Debian root for the tests that
# need a real package manager (apt through the proxied network, issue 11):
# debootstrap --variant=minbase from the configured Debian archive (about
# 2 minutes), then `docker import`. Offline registries are not needed.
# Idempotent: an existing image is kept (remove it to rebuild).
set -euo pipefail
tag=vak-test-debian:bookworm
if ! docker info >/dev/null 2>&1; then
	echo "build-debian-test-image: no Docker daemon reachable; skipping" >&2
	exit 0
fi
if docker image inspect "$tag" >/dev/null 2>&1; then
	echo "build-debian-test-image: $tag exists"
	exit 0
fi
command -v debootstrap >/dev/null || { echo "build-debian-test-image: need debootstrap (apt-get install -y debootstrap)" >&2; exit 1; }
# The archive apt is configured with (deb822 sources first, then sources.list).
mirror=${DEBIAN_MIRROR:-$( { awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources 2>/dev/null
	awk '$1 == "deb" {print $2}' /etc/apt/sources.list 2>/dev/null; } | grep -v -- '-security' | head -1 || true)}
[ -n "$mirror" ] || { echo "build-debian-test-image: no Debian archive configured for apt; set DEBIAN_MIRROR" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror"
tar -C "$root" -c . | docker import \
	--change 'LABEL vak.test.image=debian' \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["/bin/bash"]' - "$tag"
echo "build-debian-test-image: built $tag"
