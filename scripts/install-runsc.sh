#!/usr/bin/env bash
# Provides gVisor's runsc as a Docker runtime named "runsc" for the tests
# that run vak's containers under it (testenv.RequireGVisor:
# TestGVisorDockerConformance, TestRunGVisor, TestGVisorSession). Needs root
# and Go.
#
#   install-runsc.sh register   registers /usr/local/bin/runsc in
#                               /etc/docker/daemon.json (dockerd reads it as
#                               it starts; the binary may come later) with
#                               the flags sessions need: --host-uds=create
#                               (the worker's socket, made inside, is
#                               connected to from the host) and
#                               --overlay2=none (a snapshot's docker commit
#                               sees the container's changes)
#   install-runsc.sh install    builds runsc at the version pinned here from
#                               the Go module proxy (go install checks it
#                               against the checksum database) into a cache
#                               directory (a few minutes the first time,
#                               nothing after) and installs it as
#                               /usr/local/bin/runsc; a dockerd already
#                               running that does not list it is told to
#                               reload its configuration (SIGHUP) and waited for
#   install-runsc.sh            both
#
# Debian's runsc (release 20221219) is not used: it fails two of vak's
# conformance checks (job control in a timed-out process tree, the
# capability sets) and refuses networked sandboxes on current kernels.
set -euo pipefail
version=v0.0.0-20260905035102-160fafc42237
dir=${VAK_RUNSC_DIR:-$HOME/.cache/vak-runsc}/$version
bin=$dir/runsc
target=/usr/local/bin/runsc
conf=/etc/docker/daemon.json
args='"--host-uds=create", "--overlay2=none"'
what=${1:-all}

register() {
	if [ ! -s "$conf" ]; then
		mkdir -p "$(dirname "$conf")"
		printf '{"runtimes": {"runsc": {"path": "%s", "runtimeArgs": [%s]}}}\n' "$target" "$args" >"$conf"
	elif ! grep -q '"runsc"' "$conf" || ! grep -q -- '--host-uds=create' "$conf" || ! grep -q -- '--overlay2=none' "$conf"; then
		echo "install-runsc: $conf exists and registers no runsc runtime with the flags sessions need: make its \"runtimes\" hold \"runsc\": {\"path\": \"$target\", \"runtimeArgs\": [$args]}" >&2
		exit 1
	fi
}

listed() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }

install() {
	if ! [ -x "$bin" ] || ! "$bin" --version >/dev/null 2>&1; then
		echo "install-runsc: building runsc $version from the Go module proxy into $dir (first time: a few minutes)" >&2
		mkdir -p "$dir"
		GOBIN="$dir" CGO_ENABLED=0 go install "gvisor.dev/gvisor/runsc@$version"
	fi
	if ! cmp -s "$bin" "$target"; then
		# A new file renamed into place: a runsc that containers run stays intact.
		cp "$bin" "$target.new" && chmod 0755 "$target.new" && mv -f "$target.new" "$target"
	fi
	if docker info >/dev/null 2>&1 && ! listed; then
		pid=$(cat /var/run/docker.pid)
		echo "install-runsc: telling dockerd (pid $pid) to reload $conf" >&2
		kill -HUP "$pid"
		for _ in $(seq 1 30); do listed && break; sleep 1; done
		listed || { echo "install-runsc: dockerd does not list runsc after reloading $conf" >&2; exit 1; }
	fi
	echo "install-runsc: $target ($version), registered in $conf" >&2
}

case $what in
register) register ;;
install) install ;;
all) register; install ;;
*) echo "usage: install-runsc.sh [register|install]" >&2; exit 2 ;;
esac
