#!/usr/bin/env bash
# Brings up vak's single-node test cluster from the binaries of build.sh:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a separate
# containerd (its own root, state and socket: Docker's daemon is untouched)
# and a kubelet, with a CNI bridge. No registry is reachable, so a pause and
# a busybox image are built locally and imported (pods use
# imagePullPolicy: Never). Prints the time of each phase, and the kubeconfig.
#
#   scripts/k8s/up.sh          (root; stop with scripts/k8s/down.sh)
#
# Every process is recorded in $VAK_K8S_STATE/pids and stopped by that PID;
# the host sysctls the kubelet changes are saved for down.sh. Settings: lib.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
trap 'log "up.sh failed: scripts/k8s/down.sh stops what it started"' ERR

# start NAME CMD...: runs CMD in the background, logging to logs/NAME.log,
# and records its PID in pids/NAME.
start() {
	local name=$1
	shift
	nohup "$@" >"$state/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$state/pids/$name"
}

node_ip() {
	if [ -n "${VAK_K8S_NODE_IP:-}" ]; then
		echo "$VAK_K8S_NODE_IP"
		return
	fi
	ip -4 route get 192.0.2.255 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1
}

check() {
	[ "$(id -u)" = 0 ] || { log "up.sh runs as root (kubelet, containerd, cgroups, CNI)"; return 1; }
	local b
	for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
		[ -x "$k8s_bin/$b" ] || { log "missing $k8s_bin/$b: run scripts/k8s/build.sh"; return 1; }
	done
	for b in "$k8s_deb/usr/bin/etcd" "$k8s_deb/usr/bin/containerd" "$k8s_deb/usr/sbin/runc" \
		"$k8s_deb/usr/lib/cni/bridge" "$k8s_deb/bin/busybox"; do
		[ -x "$b" ] || { log "missing $b: run scripts/k8s/build.sh"; return 1; }
	done
	if [ -e "$state/pids" ] && [ -n "$(ls -A "$state/pids")" ]; then
		local f
		for f in "$state/pids"/*; do
			if ours "$(cat "$f")"; then
				log "a cluster is already up under $state ($(basename "$f") runs as PID $(cat "$f")): run scripts/k8s/down.sh first"
				return 1
			fi
		done
		# A state directory whose processes all ended (the machine was
		# restarted or copied, or a run was killed before down.sh) is
		# cleaned as down.sh would, mounts, bridge and chains included.
		log "stale state under $state (none of its recorded processes runs): cleaning it with down.sh"
		"$here/down.sh"
	fi
}

save_sysctls() {
	[ -f "$state/sysctl.saved" ] && return 0
	local s v
	for s in $host_sysctls; do
		v=$(sysctl -n "$s" 2>/dev/null) || continue
		echo "$s=$v"
	done >"$state/sysctl.saved"
}

# Certificates (openssl, ECDSA P-256: quick to make): a CA, the
# service-account key pair, and a certificate per identity; a kubeconfig for
# each client identity.
cert() { # name CN O SANs
	local n=$1 cn=$2 o=$3 san=$4 subj="/CN=$2" p=$state/pki
	[ -n "$o" ] && subj="/O=$o/CN=$cn"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$p/$n.key" -out "$p/$n.csr" -subj "$subj" 2>/dev/null
	if [ -n "$san" ]; then
		printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$p/$n.ext"
	else
		printf 'extendedKeyUsage=clientAuth\n' >"$p/$n.ext"
	fi
	openssl x509 -req -in "$p/$n.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
		-out "$p/$n.crt" -days 3650 -extfile "$p/$n.ext" 2>/dev/null
	rm -f "$p/$n.csr" "$p/$n.ext"
}

write_kubeconfig() { # name file
	local p=$state/pki
	cat >"$2" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: $cluster_name
  cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$p/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$p/$1.crt", client-key: "$p/$1.key"}
contexts:
- name: $cluster_name
  context: {cluster: $cluster_name, user: $1}
current-context: $cluster_name
EOK
}

gen_certs() {
	local p=$state/pki ip=$1
	mkdir -p "$p"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$p/ca.key" -out "$p/ca.crt" -days 3650 \
		-subj "/CN=vak-k8s-ca" 2>/dev/null
	openssl ecparam -name prime256v1 -genkey -noout -out "$p/sa.key"
	openssl ec -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
	local d=DNS:kubernetes.default.svc
	cert apiserver kube-apiserver "" "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,$d,$d.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$ip"
	cert admin vak-k8s-admin system:masters ""
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
	cert controller-manager system:kube-controller-manager "" ""
	cert scheduler system:kube-scheduler "" ""
	cert kubelet "system:node:$node_name" system:nodes ""
	cert kubelet-server "$node_name" "" "DNS:$node_name,IP:$ip,IP:127.0.0.1"
	cert kube-proxy system:kube-proxy "" ""
	local u
	for u in admin controller-manager scheduler kubelet kube-proxy; do
		write_kubeconfig "$u" "$p/$u.kubeconfig"
	done
	cp "$p/admin.kubeconfig" "$kubeconfig"
}

# build_images builds the pause image (scripts/k8s/pause, static) and a
# busybox image FROM scratch with Docker, and imports both into the
# cluster's containerd.
build_images() {
	local ctx=$state/images
	mkdir -p "$ctx/pause" "$ctx/busybox"
	(cd "$here/../.." && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$ctx/pause/pause" ./scripts/k8s/pause)
	printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$ctx/pause/Dockerfile"
	cp "$k8s_deb/bin/busybox" "$ctx/busybox/busybox"
	printf '%s\n' 'FROM scratch' 'COPY busybox /bin/busybox' \
		'RUN ["/bin/busybox", "--install", "-s", "/bin"]' 'CMD ["/bin/sh"]' >"$ctx/busybox/Dockerfile"
	local img out
	for img in pause:"$pause_image" busybox:"$busybox_image"; do
		out=$(DOCKER_BUILDKIT=0 docker build -q -t "${img#*:}" "$ctx/${img%%:*}" 2>&1) ||
			{ printf '%s\n' "$out" >&2; return 1; }
	done
	docker save "$pause_image" "$busybox_image" | ctr_k8s images import - >/dev/null
}

write_containerd_config() {
	mkdir -p "$state/containerd" "$state/cni/net.d" "$state/cni/ipam" "$state/run"
	cat >"$state/containerd/config.toml" <<EOC
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$state/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  netns_mounts_under_state_dir = true
  # root here may lack CAP_SYS_RESOURCE: without this every sandbox fails.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$k8s_deb/usr/lib/cni"
    conf_dir = "$state/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$k8s_deb/usr/sbin/runc"
        Root = "$state/containerd/runc"
EOC
	# CNI: a bridge with host-local addresses; the firewall plugin admits
	# the pods' traffic through FORWARD (whose policy Docker sets to DROP).
	cat >"$state/cni/net.d/10-vak-k8s.conflist" <<EOC
{
  "cniVersion": "1.0.0",
  "name": "$cluster_name",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_subnet"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$state/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"}
  ]
}
EOC
}

start_containerd() {
	write_containerd_config
	start containerd "$k8s_deb/usr/bin/containerd" --config "$state/containerd/config.toml"
	wait_for containerd 30 ctr_k8s version
	build_images
}

start_etcd() {
	mkdir -p "$state/etcd"
	local u=http://127.0.0.1
	start etcd "$k8s_deb/usr/bin/etcd" --name "$cluster_name" --data-dir "$state/etcd" \
		--listen-client-urls "$u:$etcd_port" --advertise-client-urls "$u:$etcd_port" \
		--listen-peer-urls "$u:$etcd_peer_port" --initial-advertise-peer-urls "$u:$etcd_peer_port" \
		--initial-cluster "$cluster_name=$u:$etcd_peer_port"
	wait_for etcd 30 curl -sf "$u:$etcd_port/health"
}

start_apiserver() {
	local p=$state/pki
	start kube-apiserver "$k8s_bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
		--secure-port="$api_port" --bind-address=127.0.0.1 --advertise-address="$1" \
		--tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" --client-ca-file="$p/ca.crt" \
		--service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-cluster-ip-range="$service_range" --authorization-mode=Node,RBAC --allow-privileged=true \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$p/apiserver-kubelet-client.key" --cert-dir="$state/apiserver-certs"
	# The controller-manager exits when it starts before the apiserver is
	# ready (it reads the extension-apiserver-authentication configmap).
	wait_for "apiserver /readyz" 120 api /readyz
}

start_controllers() {
	local p=$state/pki
	start kube-controller-manager "$k8s_bin/kube-controller-manager" --kubeconfig="$p/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$p/controller-manager.kubeconfig" \
		--authorization-kubeconfig="$p/controller-manager.kubeconfig" \
		--service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
		--cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
		--use-service-account-credentials=true --leader-elect=false --bind-address=127.0.0.1 \
		--cert-dir="$state/controller-manager-certs"
	start kube-scheduler "$k8s_bin/kube-scheduler" --kubeconfig="$p/scheduler.kubeconfig" \
		--authentication-kubeconfig="$p/scheduler.kubeconfig" --authorization-kubeconfig="$p/scheduler.kubeconfig" \
		--leader-elect=false --bind-address=127.0.0.1
}

# make_cgroups creates the cgroup the kubelet puts pods in (cgroup v1: one
# per hierarchy; on v2 the kubelet creates it itself).
make_cgroups() {
	[ -d /sys/fs/cgroup/memory ] || return 0
	local h
	for h in /sys/fs/cgroup/*/; do
		[ -L "${h%/}" ] && continue
		case $(basename "$h") in unified | rdma | net_cls | net_prio | perf_event | hugetlb | misc) continue ;; esac
		mkdir -p "$h$cgroup_name"
	done
	cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$cgroup_name/cpuset.cpus"
	cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$cgroup_name/cpuset.mems"
}

start_kubelet() {
	local p=$state/pki ip=$1
	make_cgroups
	mkdir -p "$state/kubelet" "$state/pod-logs"
	cat >"$state/kubelet/config.yaml" <<EOC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$p/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_name
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$sock
tlsCertFile: "$p/kubelet-server.crt"
tlsPrivateKeyFile: "$p/kubelet-server.key"
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: "$state/pod-logs"
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
EOC
	start kubelet "$k8s_bin/kubelet" --config="$state/kubelet/config.yaml" --kubeconfig="$p/kubelet.kubeconfig" \
		--root-dir="$state/kubelet/root" --cert-dir="$state/kubelet/pki" --hostname-override="$node_name" \
		--node-ip="$ip"
}

# start_proxy runs kube-proxy in nftables mode: Services (the in-cluster
# gateway's ClusterIP) work, and everything it programs is in its own
# tables ("ip kube-proxy", "ip6 kube-proxy"), which down.sh deletes. It
# masquerades all service traffic (pods on one bridge reach a service
# backend on the same bridge without br_netfilter) and leaves the host's
# conntrack sysctls alone.
start_proxy() {
	local p=$state/pki
	start kube-proxy "$k8s_bin/kube-proxy" --kubeconfig="$p/kube-proxy.kubeconfig" --proxy-mode=nftables \
		--cluster-cidr="$pod_subnet" --hostname-override="$node_name" --masquerade-all \
		--conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
		--metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256
}

proxy_ready() { curl -sf http://127.0.0.1:10256/healthz >/dev/null; }

node_ready() { api "/api/v1/nodes/$node_name" | grep -q '"type":"Ready","status":"True"'; }

main() {
	check
	local ip t0 t
	ip=$(node_ip)
	[ -n "$ip" ] || { log "no node address: set VAK_K8S_NODE_IP"; return 1; }
	mkdir -p "$state/pids" "$state/logs"
	save_sysctls
	t0=$(now)
	t=$(now); gen_certs "$ip"; log "certificates: $(since "$t") s"
	t=$(now); start_containerd; log "containerd up, images imported: $(since "$t") s"
	t=$(now); start_etcd; log "etcd healthy: $(since "$t") s"
	t=$(now); start_apiserver "$ip"; log "apiserver ready: $(since "$t") s"
	start_controllers
	t=$(now); start_kubelet "$ip"; wait_for "node Ready" 120 node_ready; log "node Ready: $(since "$t") s"
	t=$(now); start_proxy; wait_for "kube-proxy healthy" 60 proxy_ready; log "kube-proxy healthy: $(since "$t") s"
	t=$(now)
	wait_for "the default service account" 120 api /api/v1/namespaces/default/serviceaccounts/default
	log "default service account: $(since "$t") s"
	log "cluster up in $(since "$t0") s (node $node_name at $ip)"
	echo "export VAK_TEST_KUBECONFIG=$kubeconfig"
}

main "$@"
