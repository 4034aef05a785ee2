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
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror"
tar -C "$root" -c . | docker import \
	--change 'LABEL vak.test.image=debian' \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'CMD ["/bin/bash"]' - "$tag"
echo "build-debian-test-image: built $tag"
