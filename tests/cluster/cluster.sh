#!/usr/bin/env bash
# A local Kubernetes cluster of the pinned releases build.sh makes: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler as processes of this machine, and two kinds of node:
# - real nodes (ADAM_CLUSTER_REAL_NODES, 4 by default): each a Docker container (every capability
#   but CAP_SYS_RESOURCE, which this machine lacks; no seccomp; every device) of
#   node/Dockerfile running containerd, runc, the CNI plugins (bridge for the pod network; a
#   second network through netattach, in Multus's place: nodes.sh), the kubelet and kube-proxy,
#   as kind makes them, holding the Adam image (`make image`) and the pause image loaded into its
#   containerd (no registry is reachable). Pods run there for real: probes, volumes (local
#   PersistentVolumes on each node), cluster DNS (CoreDNS, a process here, serving
#   NAME.SUBDOMAIN.NAMESPACE.svc.cluster.local) and Services (kube-proxy) between them.
# - fake nodes (ADAM_CLUSTER_NODES, 0 beside real nodes, else 6): kwok plays their kubelets;
#   pods are scheduled, bound, made Running and Ready and deleted, but nothing of theirs runs.
#   They serve placement and scale tests (make k8s-e2e, make bench-operator).
#
#   tests/cluster/cluster.sh up   [DIR]   start one (or report the one running in DIR)
#   tests/cluster/cluster.sh down [DIR]   stop it and remove DIR
#   tests/cluster/cluster.sh env  [DIR]   print its variables (KUBECONFIG, ports, process ids)
#   tests/cluster/cluster.sh restart NAME [DIR]   stop one component and start it as it was
#
# DIR defaults to build/cluster. `up` prints `export KUBECONFIG=DIR/kubeconfig`. Real nodes are
# named adam-node-N, over ADAM_CLUSTER_REAL_ZONES (2) zones (zone-a, zone-b, ...);
# ADAM_CLUSTER_CPU_MANAGER_NODE names the one whose kubelet runs the static CPU manager (CPU 0
# reserved; default the last). Fake nodes:
# ADAM_CLUSTER_NODES nodes over ADAM_CLUSTER_ZONES (3) zones, each ADAM_CLUSTER_NODE_CPU (16)
# CPUs and ADAM_CLUSTER_NODE_MEMORY (64Gi), labelled kubernetes.io/hostname and
# topology.kubernetes.io/zone, and ADAM_CLUSTER_VOLUMES (120) network volumes for
# PersistentVolumeClaims (StorageClass "standard", the default, bound when the pod is scheduled;
# any node can mount them, so a pod replaced on another node keeps its claim;
# ADAM_CLUSTER_VOLUME_BINDING=Immediate binds a claim when it is made instead).
# ADAM_CLUSTER_GANG=1 turns on Kubernetes' own gang scheduling (alpha in 1.36: the
# scheduling.k8s.io/v1alpha2 API, the GenericWorkload and GangScheduling gates).
# ADAM_CLUSTER_CLIENT_QPS raises the request rate the controller manager and the scheduler allow
# themselves (burst twice that; unset: Kubernetes' defaults, 20 and 50 requests/s), as large
# clusters do: at 20/s the volume binder binds about 5 claims a second.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cmd=${1:-}
component=""
if [[ "$cmd" == restart ]]; then
  component=${2:-}
  shift
fi
dir=${2:-$root/build/cluster}
mkdir -p "$(dirname "$dir")"
dir=$(cd "$(dirname "$dir")" && pwd)/$(basename "$dir")

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: $*" >&2; exit 1; }
# shellcheck source=nodes.sh
. "$here/nodes.sh"
fake_nodes=${ADAM_CLUSTER_NODES:-$( ((real_nodes > 0)) && echo 0 || echo 6)}
api_host=127.0.0.1

running() {  # running NAME: its process is alive
  [[ -f "$dir/pids/$1" ]] && kill -0 "$(cat "$dir/pids/$1")" 2>/dev/null
}

down() {
  [[ -d "$dir" ]] || { log "none in $dir"; return 0; }
  # Stop a stopped (SIGSTOP) process too: continue it before terminating it.
  real_nodes_down
  for name in coredns kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if running "$name"; then
      pid=$(cat "$dir/pids/$name")
      kill -CONT "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
  log "stopped and removed $dir"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds; names the log to read when it does not.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      die "$what not up after ${seconds} s; see $dir/logs/"
    fi
    sleep 0.5
  done
}

start() {  # start NAME ARGS...: in the background, in its own session, logging to DIR/logs/NAME.log
  local name=$1
  shift
  printf '%s\0' "$@" >"$dir/cmd/$name"  # for `restart`
  setsid nohup "$bin/$name" "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name"
}

restart() {
  [[ -f "$dir/cmd/$component" ]] || die "no component '$component' in $dir"
  bin=$(sed -n 's/^ADAM_CLUSTER_BIN=//p' "$dir/env")
  local pid
  pid=$(cat "$dir/pids/$component")
  kill -CONT "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  local args=()
  mapfile -d '' args <"$dir/cmd/$component"
  start "$component" "${args[@]}"
  if [[ "$component" == kube-apiserver ]]; then
    local server
    server=$(sed -n 's/^ADAM_CLUSTER_SERVER=//p' "$dir/env")
    wait_for kube-apiserver 90 curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" \
      --key "$dir/pki/admin.key" "$server/readyz"
  fi
  log "restarted $component (pid $(cat "$dir/pids/$component"))"
}

cert() {  # cert NAME SUBJECT [SAN]: a key and a certificate signed by the cluster CA
  local name=$1 subject=$2 san=${3:-}
  local ext=()
  [[ -n "$san" ]] && ext=(-addext "subjectAltName=$san")
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subject" \
    "${ext[@]}" -keyout "$dir/pki/$name.key" -out "$dir/pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/pki/$name.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
    -CAcreateserial -days 365 -copy_extensions copyall -out "$dir/pki/$name.crt" 2>/dev/null
}

kubeconfig() {  # kubeconfig USER: a kubeconfig with USER's client certificate
  cat >"$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: adam-local
  cluster:
    server: https://$api_host:$apiserver_port
    certificate-authority: $dir/pki/ca.crt
users:
- name: $1
  user:
    client-certificate: $dir/pki/$1.crt
    client-key: $dir/pki/$1.key
contexts:
- name: adam-local
  context: {cluster: adam-local, user: $1, namespace: default}
current-context: adam-local
EOF
}

# kwok's own default stages (node set-up and heartbeat, pod ready and delete), read from its
# module at the pinned version rather than kept here.
kwok_stages() {
  local src
  src=$(cd "$here" && PATH="/usr/local/go/bin:$PATH" go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$src/kustomize/stage/$f"
  done
}

nodes_and_volumes() {
  local nodes=$fake_nodes zones=${ADAM_CLUSTER_ZONES:-3}
  local cpu=${ADAM_CLUSTER_NODE_CPU:-16} memory=${ADAM_CLUSTER_NODE_MEMORY:-64Gi}
  local volumes=${ADAM_CLUSTER_VOLUMES:-120}
  ((nodes > 0)) || volumes=0
  cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: ${ADAM_CLUSTER_VOLUME_BINDING:-WaitForFirstConsumer}
EOF
  for ((v = 0; v < volumes; v++)); do
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: volume-$v}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: standard
  nfs: {server: storage.adam.local, path: /volumes/$v}
EOF
  done
  for ((i = 0; i < nodes; i++)); do
    local node="node-$i" zone="zone-$((i % zones))"
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $node
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels:
    kubernetes.io/hostname: $node
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: $zone
    type: kwok
status:
  allocatable: {cpu: "$cpu", memory: $memory, pods: "110"}
  capacity: {cpu: "$cpu", memory: $memory, pods: "110"}
EOF
  done
}

nodes_ready() {  # nodes_ready KUBECTL...: every node's Ready condition is True
  local out
  out=$("$@" get nodes --no-headers -o 'custom-columns=R:.status.conditions[?(@.type=="Ready")].status') || return 1
  [[ -n "$out" ]] && ! grep -qv '^True$' <<<"$out"
}

up() {
  if [[ -f "$dir/env" ]] && running kube-apiserver; then
    log "already running in $dir"
    echo "export KUBECONFIG=$dir/kubeconfig"
    return 0
  fi
  [[ -d "$dir" ]] && down
  bin=$("$here/build.sh")
  mkdir -p "$dir"/{pki,logs,pids,etcd,cmd}
  local t0=$SECONDS
  # Real nodes reach the API server and the cluster DNS at their Docker network's gateway.
  ((real_nodes == 0)) || nodes_network_up

  local etcd_port etcd_peer apiserver_port
  etcd_port=$(free_port); etcd_peer=$(free_port); apiserver_port=$(free_port)

  # PKI: a cluster CA; the API server's serving certificate; client certificates for the admin
  # (system:masters), the controller manager and the scheduler (their built-in RBAC roles); the
  # service-account signing key pair.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 \
    -subj "/CN=adam-local-ca" -keyout "$dir/pki/ca.key" -out "$dir/pki/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:$api_host,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=kubernetes-admin"
  cert kube-controller-manager "/CN=system:kube-controller-manager"
  cert kube-scheduler "/CN=system:kube-scheduler"
  cert kwok "/O=system:masters/CN=kwok-controller"
  openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
  for u in admin kube-controller-manager kube-scheduler kwok; do kubeconfig "$u"; done
  cp "$dir/admin.kubeconfig" "$dir/kubeconfig"

  start etcd --name local --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "local=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync --log-level warn
  wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

  local kubelet_client=()
  ((real_nodes == 0)) || kubelet_client=(--kubelet-client-certificate "$dir/pki/admin.crt"
    --kubelet-client-key "$dir/pki/admin.key" --kubelet-preferred-address-types InternalIP)
  # ADAM_CLUSTER_GANG=1: Kubernetes' own gang scheduling (alpha in 1.36): its API and feature gates
  # on the API server, the controller manager (PodGroup protection) and the scheduler.
  local gang=()
  [[ "${ADAM_CLUSTER_GANG:-0}" == 1 ]] && gang=(--feature-gates GenericWorkload=true,GangScheduling=true)
  local gang_api=()
  ((${#gang[@]} == 0)) || gang_api=(--runtime-config scheduling.k8s.io/v1alpha2=true)
  start kube-apiserver --etcd-servers "http://127.0.0.1:$etcd_port" "${kubelet_client[@]}" "${gang[@]}" "${gang_api[@]}" \
    --bind-address "$api_host" --advertise-address "$api_host" --secure-port "$apiserver_port" \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true --cert-dir "$dir/pki/generated"
  wait_for kube-apiserver 90 curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" \
    --key "$dir/pki/admin.key" "https://$api_host:$apiserver_port/readyz"

  local rate=() node_monitor=()
  # A real node whose kubelet stops reporting is NotReady after 20 s (Kubernetes' default: 50 s).
  ((real_nodes == 0)) || node_monitor=(--node-monitor-grace-period 20s)
  if [[ -n "${ADAM_CLUSTER_CLIENT_QPS:-}" ]]; then
    rate=(--kube-api-qps "$ADAM_CLUSTER_CLIENT_QPS" --kube-api-burst "$((ADAM_CLUSTER_CLIENT_QPS * 2))")
  fi
  start kube-controller-manager --kubeconfig "$dir/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig "$dir/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig "$dir/kube-controller-manager.kubeconfig" \
    --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
    --use-service-account-credentials=true --leader-elect=false --secure-port 0 \
    --controllers '*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route' "${rate[@]}" \
    "${node_monitor[@]}" "${gang[@]}"
  start kube-scheduler --kubeconfig "$dir/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$dir/kube-scheduler.kubeconfig" --leader-elect=false --secure-port 0 \
    "${rate[@]}" "${gang[@]}"
  kwok_stages >"$dir/kwok.yaml"
  ((fake_nodes == 0)) || start kwok --config "$dir/kwok.yaml" --kubeconfig "$dir/kwok.kubeconfig" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --cidr 10.244.0.0/16 --node-ip 10.240.0.1 --node-lease-duration-seconds 40

  local kubectl=("$bin/kubectl" --kubeconfig "$dir/kubeconfig")
  # The default ServiceAccount appears once the controller manager runs; pods need it.
  wait_for "the controller manager" 60 "${kubectl[@]}" get serviceaccount default -n default
  nodes_and_volumes | "${kubectl[@]}" apply -f - >/dev/null
  if ((real_nodes > 0)); then
    # The second network's objects, and its attachment for the default namespace's pods.
    netattach_objects | "${kubectl[@]}" apply -f - >/dev/null
    "${kubectl[@]}" wait --for condition=established --timeout 30s \
      crd/network-attachment-definitions.k8s.cni.cncf.io >/dev/null
    second_network_attachment default | "${kubectl[@]}" apply -f - >/dev/null
  fi
  coredns_up
  real_nodes_up
  ((real_nodes == 0)) || local_volumes | "${kubectl[@]}" apply -f - >/dev/null
  # Every node Ready: listed once (`kubectl wait --all` checks node by node, too slow within a
  # try for a thousand).
  wait_for "the nodes" $((90 + fake_nodes / 10)) nodes_ready "${kubectl[@]}"
  cat >"$dir/env" <<EOF
KUBECONFIG=$dir/kubeconfig
ADAM_CLUSTER_DIR=$dir
ADAM_CLUSTER_BIN=$bin
ADAM_CLUSTER_SERVER=https://$api_host:$apiserver_port
ADAM_CLUSTER_ETCD=http://127.0.0.1:$etcd_port
ADAM_CLUSTER_REAL_NODES=$real_nodes
ADAM_CLUSTER_CPU_MANAGER_NODE=$( ((real_nodes == 0)) || cpu_manager_node)
ADAM_CLUSTER_ID=$(cluster_id)
EOF
  log "up in $((SECONDS - t0)) s: $real_nodes real nodes, $fake_nodes fake nodes; tools in $bin"
  echo "export KUBECONFIG=$dir/kubeconfig"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  env)
    [[ -f "$dir/env" ]] || die "no cluster in $dir (tests/cluster/cluster.sh up)"
    cat "$dir/env"
    for name in etcd kube-apiserver kube-controller-manager kube-scheduler kwok coredns; do
      [[ -f "$dir/pids/$name" ]] || continue
      echo "ADAM_CLUSTER_PID_$(echo "$name" | tr 'a-z-' 'A-Z_')=$(cat "$dir/pids/$name")"
    done
    ;;
  restart) restart ;;
  *) die "usage: cluster.sh up|down|env|restart NAME [DIR]" ;;
esac
