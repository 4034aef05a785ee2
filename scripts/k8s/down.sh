#!/usr/bin/env bash
# Stops vak's test cluster (scripts/k8s/up.sh) and removes what it left on
# the host: every process is stopped by the PID up.sh recorded (and only if
# that PID still runs with the cluster's state directory in its command
# line), then its mounts, cgroups, bridge and iptables chains go, the saved
# sysctls are restored and the state directory is removed. The built
# binaries and packages (build.sh) stay.
#
#   scripts/k8s/down.sh        (root; settings: lib.sh)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

# stop NAME: SIGTERM to the recorded PID, SIGKILL after 10 s.
stop() {
	local f=$state/pids/$1 p i
	[ -f "$f" ] || return 0
	p=$(cat "$f")
	if [ -n "$p" ] && ours "$p"; then
		kill "$p" 2>/dev/null
		for i in $(seq 100); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$p" 2>/dev/null
	fi
	rm -f "$f"
}

# delete_pods deletes every pod through the apiserver, so the kubelet tears
# their networks down through CNI, and waits (60 s at most) for them to go.
delete_pods() {
	api /readyz >/dev/null 2>&1 || return 0
	local ns
	for ns in $(api /api/v1/namespaces | grep -o '"name":"[^"]*"' | cut -d'"' -f4); do
		curl -sf -A vak-k8s -X DELETE --cacert "$state/pki/ca.crt" --cert "$state/pki/admin.crt" \
			--key "$state/pki/admin.key" \
			"https://127.0.0.1:$api_port/api/v1/namespaces/$ns/pods?gracePeriodSeconds=1" >/dev/null
	done
	wait_for "pods to go" 60 no_pods
}

no_pods() { api /api/v1/pods | grep -q '"items":\[\]'; }

# stop_tasks kills what is left in the cluster's containerd (never
# Docker's: its own socket), so the shims exit.
stop_tasks() {
	[ -S "$sock" ] || return 0
	local t c
	for t in $(ctr_k8s task ls -q 2>/dev/null); do ctr_k8s task kill -s SIGKILL "$t" 2>/dev/null; done
	sleep 1
	for t in $(ctr_k8s task ls -q 2>/dev/null); do ctr_k8s task rm -f "$t" >/dev/null 2>&1; done
	for c in $(ctr_k8s containers ls -q 2>/dev/null); do ctr_k8s containers rm "$c" >/dev/null 2>&1; done
}

unmount_state() {
	awk -v k="$state/" 'index($2, k) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
		umount -l "$m"
	done
}

remove_cgroups() {
	local h
	for h in /sys/fs/cgroup/*/"$cgroup_name" /sys/fs/cgroup/"$cgroup_name"; do
		[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	return 0
}

# remove_network deletes the bridge, the chains the CNI plugins made for the
# pod subnet and the chains the kubelet makes (no other kubelet runs here).
remove_network() {
	ip link del "$bridge" 2>/dev/null
	local net=${pod_subnet%.*}. n ch ipt t
	# The firewall plugin's chains, when they hold only this cluster's rules.
	if ! iptables -S CNI-FORWARD 2>/dev/null | grep -E -- '-(s|d) ' | grep -vqF "$net"; then
		iptables -D FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD 2>/dev/null
		for ch in CNI-FORWARD CNI-ADMIN; do iptables -F "$ch" 2>/dev/null; iptables -X "$ch" 2>/dev/null; done
	fi
	# The bridge plugin's per-pod masquerade chains (left when a pod was
	# not torn down through CNI).
	while n=$(iptables -t nat -L POSTROUTING -n --line-numbers |
		awk -v net="$net" '$2 ~ /^CNI-/ && index($5, net) == 1 {print $1}' | sort -rn | head -1) && [ -n "$n" ]; do
		iptables -t nat -D POSTROUTING "$n"
	done
	for ch in $(iptables -t nat -S | awk '/^-N CNI-[0-9a-f]+$/ {print $2}'); do
		iptables -t nat -F "$ch"
		iptables -t nat -X "$ch"
	done
	for ipt in iptables ip6tables; do
		$ipt -D INPUT -j KUBE-FIREWALL 2>/dev/null
		$ipt -D OUTPUT -j KUBE-FIREWALL 2>/dev/null
		for t in filter nat mangle; do
			for ch in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
				$ipt -t "$t" -F "$ch" 2>/dev/null
				$ipt -t "$t" -X "$ch" 2>/dev/null
			done
		done
	done
	return 0
}

restore_sysctls() {
	[ -f "$state/sysctl.saved" ] || return 0
	local kv
	while read -r kv; do sysctl -q -w "$kv"; done <"$state/sysctl.saved"
}

# remove_host_paths removes what the kubelet and the CNI plugins create at
# fixed host paths, only when it is this cluster's or empty.
remove_host_paths() {
	[ -d /var/log/containers ] && find /var/log/containers -maxdepth 1 -type l -lname "$state/*" -delete
	rm -f /var/lib/kubelet/device-plugins/kubelet.sock
	rmdir /var/log/containers /var/lib/kubelet/device-plugins /var/lib/kubelet/plugins_registry \
		/var/lib/kubelet/plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni 2>/dev/null
	return 0
}

# remove_proxy_tables deletes kube-proxy's nftables tables (nftables mode
# keeps everything it programs there; no other kube-proxy runs here).
remove_proxy_tables() {
	local f
	for f in ip ip6; do nft delete table "$f" kube-proxy 2>/dev/null; done
	return 0
}

main() {
	[ "$(id -u)" = 0 ] || { log "down.sh runs as root"; return 1; }
	[ -d "$state" ] || { log "no cluster state at $state"; return 0; }
	local t0 name
	t0=$(now)
	delete_pods
	stop kubelet
	stop_tasks
	for name in kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop "$name"; done
	unmount_state
	remove_cgroups
	remove_network
	remove_proxy_tables
	restore_sysctls
	remove_host_paths
	rm -rf "$state"
	log "cluster down in $(since "$t0") s"
}

main "$@"
