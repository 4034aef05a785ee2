#!/usr/bin/env bash
# Loads Docker images into vak's test cluster (scripts/k8s/up.sh): the
# cluster pulls from no registry, so an image a pod runs (with
# imagePullPolicy: Never) is copied from Docker into the cluster's
# containerd.
#
#   scripts/k8s/load-image.sh IMAGE...          (root; settings: lib.sh)
#   scripts/k8s/load-image.sh --archive FILE    a `docker save` archive (vak session worker-image)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

[ $# -gt 0 ] || { echo "usage: $0 IMAGE... | --archive FILE" >&2; exit 2; }
[ -S "$sock" ] || { log "no cluster containerd at $sock: run scripts/k8s/up.sh"; exit 1; }
t=$(now)
if [ "$1" = --archive ]; then
	[ $# = 2 ] || { echo "usage: $0 --archive FILE" >&2; exit 2; }
	ctr_k8s images import "$2" >/dev/null
	log "loaded $2 in $(since "$t") s"
	exit 0
fi
docker save "$@" | ctr_k8s images import - >/dev/null
log "loaded $* in $(since "$t") s"
