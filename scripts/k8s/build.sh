#!/usr/bin/env bash
# Builds the Kubernetes server binaries vak's test cluster runs, and unpacks
# etcd, the CNI plugins, containerd, runc and busybox from Debian packages, into a
# cache directory. Work already done for this version is skipped.
#
#   scripts/k8s/build.sh [BINARY...]
#
# BINARY defaults to kube-apiserver kube-controller-manager kube-scheduler
# kubelet kube-proxy; kubectl can be named too. The Kubernetes binaries
# come from the k8s.io/kubernetes Go module: it replaces its staging modules
# with local directories, so `go install` cannot build it; a generated wrapper
# module requires it and points every staging module at its published
# k8s.io/<name> v0.<minor>.<patch> instead.
#
# Environment:
#   VAK_K8S_DIR      cache directory (default $HOME/.cache/vak-k8s)
#   VAK_K8S_VERSION  Kubernetes version (default v1.37.2)
#   VAK_K8S_NICE     niceness of the Go build (default 19)
#   GOFLAGS          passed to go (default -p=2)
#
# Layout: $VAK_K8S_DIR/<version>/bin/<binary>, $VAK_K8S_DIR/<version>/wrap
# (the wrapper module), $VAK_K8S_DIR/debian/root/usr/... (unpacked packages).
set -euo pipefail

dir=${VAK_K8S_DIR:-$HOME/.cache/vak-k8s}
version=${VAK_K8S_VERSION:-v1.37.2}
niceness=${VAK_K8S_NICE:-19}
export GOFLAGS=${GOFLAGS:--p=2} CGO_ENABLED=0 GOTOOLCHAIN=local
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin

bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
debs=(etcd-server containernetworking-plugins containerd runc busybox-static)

vdir=$dir/$version
wrap=$vdir/wrap
bindir=$vdir/bin
# v1.37.2 -> v0.37.2: the staging modules' published versions.
staging_version=v0.${version#v1.}

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# write_wrapper generates the wrapper module: it requires k8s.io/kubernetes,
# replaces each staging module it requires with the published version, and
# lists the commands as tools; go mod tidy then fills in the rest.
write_wrapper() {
	[ -f "$wrap/go.sum" ] && return 0
	mkdir -p "$wrap"
	local gomod
	gomod=$(cd "$wrap" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[ -f "$gomod" ] || { log "no go.mod for k8s.io/kubernetes@$version"; return 1; }
	{
		printf 'module vak.test/k8s-wrap\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\n' \
			"$(go env GOVERSION | sed 's/^go//')" "$version"
		printf 'tool (\n'
		local b
		for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
			printf '\tk8s.io/kubernetes/cmd/%s\n' "$b"
		done
		printf ')\n\nreplace (\n'
		# Staging modules: "k8s.io/<name> => ./staging/src/k8s.io/<name>"
		# in the kubernetes go.mod, kept when it also requires them.
		local m
		for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod"); do
			grep -Eq "^[[:space:]]*$m v" "$gomod" || continue
			printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"
		done
		printf ')\n'
	} >"$wrap/go.mod.new"
	mv "$wrap/go.mod.new" "$wrap/go.mod"
	(cd "$wrap" && go mod tidy)
}

build_binaries() {
	local ld="-s -w"
	local minor=${version#v1.}
	minor=${minor%%.*}
	local p
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	mkdir -p "$bindir"
	local b start
	for b in "${bins[@]}"; do
		if [ -x "$bindir/$b" ]; then
			log "$b: present"
			continue
		fi
		start=$(date +%s)
		(cd "$wrap" && nice -n "$niceness" go build -trimpath -ldflags "$ld" \
			-o "$bindir/$b.new" "k8s.io/kubernetes/cmd/$b")
		mv "$bindir/$b.new" "$bindir/$b"
		log "$b: built in $(($(date +%s) - start)) s"
	done
}

# fetch_debs downloads the Debian packages (apt-get download: nothing is
# installed, no service starts) and unpacks them under $dir/debian/root.
fetch_debs() {
	local root=$dir/debian/root stamp=$dir/debian/unpacked
	[ -f "$stamp" ] && [ "$(cat "$stamp")" = "${debs[*]}" ] && return 0
	mkdir -p "$dir/debian/pkgs" "$root"
	(cd "$dir/debian/pkgs" && apt-get download "${debs[@]}")
	local f
	for f in "$dir"/debian/pkgs/*.deb; do
		dpkg-deb -x "$f" "$root"
	done
	echo "${debs[*]}" >"$stamp"
	log "debian packages unpacked under $root"
}

main() {
	local start=$(date +%s)
	fetch_debs
	write_wrapper
	build_binaries
	log "done in $(($(date +%s) - start)) s: $bindir"
}

main
