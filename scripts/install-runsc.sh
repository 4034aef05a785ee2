#!/usr/bin/env bash
# Provides gVisor's runsc as a Docker runtime named "runsc" for the tests
# that run vak's containers under it (testenv.RequireGVisor:
# TestGVisorDockerConformance, TestRunGVisor). Builds runsc at the version
# pinned here from the Go module proxy (go install checks it against the
# checksum database) into a cache directory (a few minutes the first time,
# nothing after), installs it as /usr/local/bin/runsc and registers it in
# /etc/docker/daemon.json. A daemon already running is told to reload its
# configuration (SIGHUP) and waited for until it lists the runtime. Needs
# root and Go. Debian's runsc (release 20221219) is not used: it fails
# vak's conformance checks (job control in a timed-out tree, the
# capability sets) and refuses networked sandboxes on current kernels.
set -euo pipefail
version=v0.0.0-20260905035102-160fafc42237
dir=${VAK_RUNSC_DIR:-$HOME/.cache/vak-runsc}/$version
bin=$dir/runsc
target=/usr/local/bin/runsc
conf=/etc/docker/daemon.json
if ! [ -x "$bin" ] || ! "$bin" --version >/dev/null 2>&1; then
	echo "install-runsc: building runsc $version from the Go module proxy into $dir (first time: a few minutes)" >&2
	mkdir -p "$dir"
	GOBIN="$dir" CGO_ENABLED=0 go install "gvisor.dev/gvisor/runsc@$version"
fi
if ! cmp -s "$bin" "$target"; then
	# A new file renamed into place: a runsc that containers run stays intact.
	cp "$bin" "$target.new" && chmod 0755 "$target.new" && mv -f "$target.new" "$target"
fi
if [ ! -s "$conf" ]; then
	mkdir -p "$(dirname "$conf")"
	printf '{"runtimes": {"runsc": {"path": "%s"}}}\n' "$target" >"$conf"
elif ! grep -q '"runsc"' "$conf"; then
	echo "install-runsc: $conf exists and registers no runsc runtime: add \"runtimes\": {\"runsc\": {\"path\": \"$target\"}} to it" >&2
	exit 1
fi
listed() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }
if docker info >/dev/null 2>&1 && ! listed; then
	pid=$(cat /var/run/docker.pid)
	echo "install-runsc: telling dockerd (pid $pid) to reload $conf" >&2
	kill -HUP "$pid"
	for _ in $(seq 1 30); do listed && break; sleep 1; done
	listed || { echo "install-runsc: dockerd does not list runsc after reloading $conf" >&2; exit 1; }
fi
echo "install-runsc: $target ($version), registered in $conf" >&2
