#!/usr/bin/env bash
# Builds the images vak's tests run, offline (no registry is reachable):
#   vak-test:latest  FROM scratch + Debian's busybox-static + scripts/probe
#                    (/bin/probe) + scripts/testnet (/bin/testnet, the hermetic
#                    test "internet": upstream, canary, gencert)
# The tag is only rebuilt when its inputs change (a content hash label).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! docker info >/dev/null 2>&1; then
	echo "build-test-images: no Docker daemon reachable; skipping" >&2
	exit 0
fi

busybox=$(command -v busybox || true)
if [ -z "$busybox" ] || ! (ldd "$busybox" 2>&1 || true) | grep -q 'not a dynamic executable'; then
	echo "build-test-images: need a static busybox (apt-get install -y busybox-static)" >&2
	exit 1
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin"
cp "$busybox" "$ctx/bin/busybox"
for tool in probe testnet; do
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/bin/$tool" "./scripts/$tool"
done
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY bin/ /bin/
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /tmp /etc /root && chmod 1777 /tmp && \
    echo 'root:x:0:0:root:/root:/bin/sh' > /etc/passwd && \
    echo 'root:x:0:' > /etc/group
ENV PATH=/bin
CMD ["/bin/sh"]
DOCKERFILE

sum=$( (cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "vak.inputs"}}' vak-test:latest 2>/dev/null || true)" = "$sum" ]; then
	echo "build-test-images: vak-test:latest is up to date ($sum)"
	exit 0
fi
echo "build-test-images: building vak-test:latest ($sum)"
DOCKER_BUILDKIT=0 docker build -q --label "vak.inputs=$sum" -t vak-test:latest "$ctx"
