# Shared settings of scripts/k8s/{up,down,load-image}.sh (sourced, not run).
#
#   VAK_K8S_DIR      cache of build.sh (default $HOME/.cache/vak-k8s)
#   VAK_K8S_VERSION  Kubernetes version (default v1.37.2)
#   VAK_K8S_STATE    the cluster's state: certificates, data, logs, PIDs
#                    (default $VAK_K8S_DIR/cluster)
#   VAK_K8S_NODE_IP  the node's address (default: the source address of
#                    the default route)
#   VAK_K8S_PORT     the apiserver's port (default 16443)

k8s_dir=${VAK_K8S_DIR:-$HOME/.cache/vak-k8s}
k8s_version=${VAK_K8S_VERSION:-v1.37.2}
k8s_bin=$k8s_dir/$k8s_version/bin
k8s_deb=$k8s_dir/debian/root
state=${VAK_K8S_STATE:-$k8s_dir/cluster}
api_port=${VAK_K8S_PORT:-16443}
etcd_port=12379
etcd_peer_port=12380
node_name=vak-k8s-node
cluster_name=vak-k8s
# cgroup_name is the cgroup (v1: one per hierarchy) the kubelet puts pods in.
cgroup_name=vak-k8s
bridge=vakk8s0
pod_subnet=10.244.0.0/24
service_range=10.96.0.0/16
pause_image=vak-k8s.local/pause:1
busybox_image=vak-k8s.local/busybox:1
sock=$state/run/containerd.sock
kubeconfig=$state/kubeconfig
# host_sysctls are the host settings the kubelet changes; up.sh saves them
# and down.sh puts them back.
host_sysctls="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
net.bridge.bridge-nf-call-iptables net.ipv4.ip_forward"

# The separate containerd, its shim and runc come from the unpacked packages.
export PATH=$k8s_deb/usr/bin:$k8s_deb/usr/sbin:$PATH:/usr/local/go/bin

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# ctr_k8s runs ctr against the cluster's containerd, in the kubelet's
# namespace.
ctr_k8s() { "$k8s_deb/usr/bin/ctr" -a "$sock" -n k8s.io "$@"; }

# now prints seconds since the epoch with milliseconds.
now() { date +%s.%3N; }

# since START prints the seconds elapsed since START (from now).
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }

# api PATH fetches PATH from the apiserver as the cluster admin.
api() {
	curl -sf -A vak-k8s --cacert "$state/pki/ca.crt" --cert "$state/pki/admin.crt" \
		--key "$state/pki/admin.key" "https://127.0.0.1:$api_port$1"
}

# wait_for WHAT SECONDS CMD...: runs CMD every 0.1 s until it succeeds.
wait_for() {
	local what=$1 limit=$2 start
	start=$(date +%s)
	shift 2
	until "$@" >/dev/null 2>&1; do
		if [ $(($(date +%s) - start)) -ge "$limit" ]; then
			log "timed out after $limit s waiting for $what (logs: $state/logs)"
			return 1
		fi
		sleep 0.1
	done
}

# ours PID: the process runs with the state directory in its arguments
# (a recorded PID that a restarted machine gave to another process is not).
ours() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF "$state"; }
