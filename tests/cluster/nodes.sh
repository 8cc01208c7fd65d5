# The real nodes of cluster.sh (sourced by it; reads its $dir, $bin, $here, $root and helpers):
# Docker containers (all but privileged) of node/Dockerfile on a Docker network of their own, each
# running containerd, the kubelet and kube-proxy; CoreDNS as a process of this machine on that
# network's gateway address, which the API server also binds.
#
# Addresses: pods of node N get 10.245.N.0/24 (the cluster CIDR 10.245.0.0/16; kwok's fake pods
# take 10.244.0.0/16); each node routes the other nodes' pod ranges through them, and this machine
# routes every node's range through it, so tests and Prometheus here reach pods by their IPs.
#
# A second network: every node is also on a second Docker network (its eth1). Each node's CNI
# configuration is netattach (tests/cluster/netattach, in Multus's place), which gives a pod the
# pod network on eth0 and then the NetworkAttachmentDefinitions its k8s.v1.cni.cncf.io/networks
# annotation names; adam-replication (macvlan on eth1, whereabouts addresses in 10.246.0.0/24) is
# made in the default namespace.

real_nodes=${ADAM_CLUSTER_REAL_NODES:-4}
real_zones=${ADAM_CLUSTER_REAL_ZONES:-2}
cluster_cidr=10.245.0.0/16
cluster_dns_domain=cluster.local

# The Docker objects of the cluster in $dir carry its id, so that two clusters (make cluster's and
# make k8s-e2e's) stay apart and `down` removes exactly its own.
cluster_id() { printf '%s' "$dir" | sha256sum | cut -c1-10; }
node_network() { echo "adam-cluster-$(cluster_id)"; }
node_container() { echo "adam-cluster-$(cluster_id)-$1"; }  # node_container NODE
node_name() { echo "adam-node-$1"; }                          # node_name INDEX
# The node whose kubelet runs the static CPU manager (CPU 0 reserved): the last, unless named.
cpu_manager_node() { echo "${ADAM_CLUSTER_CPU_MANAGER_NODE:-$(node_name $((real_nodes - 1)))}"; }

# The nodes' second network (eth1 on every node): pods attach to it through a
# NetworkAttachmentDefinition (macvlan on eth1, addresses from whereabouts in 10.246.0.0/24).
second_network() { echo "adam-cluster-$(cluster_id)-second"; }

# nodes_network_up: the Docker networks of the nodes; sets api_host to the first one's gateway, the
# address of this machine that the nodes reach (the API server and CoreDNS bind it).
nodes_network_up() {
  local net
  for net in "$(node_network)" "$(second_network)"; do
    docker network inspect "$net" >/dev/null 2>&1 ||
      docker network create --label "dev.adam.cluster=$(cluster_id)" "$net" >/dev/null
  done
  net=$(node_network)
  api_host=$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$net")
  [[ -n "$api_host" ]] || die "the Docker network $net has no gateway address"
}

# node_images: the node image (keyed by what goes into it) and the pause image, built once.
node_images() {
  local key ctx
  key=$(cat "$here/node/Dockerfile" "$here/node/node.sh" "$bin/kubelet" "$bin/kube-proxy" \
    "$bin/netattach" "$bin/whereabouts" |
    sha256sum | cut -c1-12)
  node_image="adam-node:$key"
  pause_image="registry.k8s.io/pause:$(cat "$bin/pause.tag")"
  ctx=$(mktemp -d)
  if ! docker image inspect "$node_image" >/dev/null 2>&1; then
    local base
    base=$("$root/docker/base.sh")
    cp "$here/node/Dockerfile" "$here/node/node.sh" "$bin/kubelet" "$bin/kube-proxy" "$bin/netattach" \
      "$bin/whereabouts" "$ctx/"
    log "building the node image $node_image (containerd, runc, CNI plugins from Debian; about 1 min)"
    docker build -q --build-arg "BASE=$base" -t "$node_image" "$ctx" >"$dir/logs/node-image.log" 2>&1 ||
      { tail -20 "$dir/logs/node-image.log" >&2; rm -rf "$ctx"; die "the node image failed to build"; }
  fi
  if ! docker image inspect "$pause_image" >/dev/null 2>&1; then
    rm -rf "${ctx:?}"/*
    cp "$bin/pause" "$ctx/pause"
    printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
    docker build -q -t "$pause_image" "$ctx" >"$dir/logs/pause-image.log" 2>&1 ||
      { cat "$dir/logs/pause-image.log" >&2; rm -rf "$ctx"; die "the pause image failed to build"; }
  fi
  rm -rf "$ctx"
}

# The images every node holds: the pause image, Adam's (the chart's appVersion) and any named in
# ADAM_CLUSTER_IMAGES (space-separated).
node_image_list() {
  local version
  version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$root/charts/adam/Chart.yaml")
  echo "$pause_image" "adam:$version" ${ADAM_CLUSTER_IMAGES:-}
}

node_files() {  # node_files INDEX IP: the node's /etc/adam-node
  local i=$1 ip=$2 name nd
  name=$(node_name "$i")
  nd="$dir/nodes/$name"
  mkdir -p "$nd"
  cp "$dir/pki/ca.crt" "$nd/"
  cert "node-$i" "/O=system:nodes/CN=system:node:$name"
  cert "node-$i-serving" "/CN=$name" "IP:$ip,DNS:$name"
  mv "$dir/pki/node-$i".{crt,key} "$dir/pki/node-$i-serving".{crt,key} "$nd/"
  node_kubeconfig "$nd/kubelet.kubeconfig" /etc/adam-node/node-"$i"
  cp "$dir/pki/kube-proxy".{crt,key} "$nd/"
  node_kubeconfig "$nd/kube-proxy.kubeconfig" /etc/adam-node/kube-proxy
  local zone
  zone="zone-$(printf "\\x$(printf %x $((97 + i % real_zones)))")"
  local cpu_manager="cpuManagerPolicy: none"
  if [[ "$name" == "$(cpu_manager_node)" ]]; then
    cpu_manager=$'cpuManagerPolicy: static\nreservedSystemCPUs: "0"'
  fi
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 on these machines. The node's cgroup namespace makes its container's cgroup the root
# the kubelet sees, so each node's pods stay under its own container.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: /etc/adam-node/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: /etc/adam-node/node-$i-serving.crt
tlsPrivateKeyFile: /etc/adam-node/node-$i-serving.key
clusterDNS: [$api_host]
clusterDomain: $cluster_dns_domain
# Pods resolve cluster names only (no resolver of this machine's is reachable from them).
resolvConf: ""
podCIDR: 10.245.$i.0/24
failSwapOn: false
# The nodes share one machine's disk and memory: no eviction for what the others use.
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
$cpu_manager
EOF
  echo "--hostname-override=$name --node-ip=$ip --node-labels=topology.kubernetes.io/zone=$zone,adam.dev/node=real" \
    >"$nd/kubelet.flags"
  cat >"$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: /etc/adam-node/kube-proxy.kubeconfig}
hostnameOverride: $name
mode: iptables
clusterCIDR: $cluster_cidr
# A container cannot raise the machine's conntrack table size; leave it as it is.
conntrack: {maxPerCore: 0}
EOF
  # The pod network (eth0), which netattach runs first for every pod, as Multus runs its cluster
  # network; then the networks a pod's k8s.v1.cni.cncf.io/networks annotation names.
  cat >"$nd/cni.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "adam-pods", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.245.$i.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  cat >"$nd/netattach.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "netattach", "plugins": [
  {"type": "netattach", "kubeconfig": "/etc/adam-node/netattach.kubeconfig",
   "clusterNetwork": "/etc/cni/adam/10-adam.conflist", "confDir": "/etc/cni/adam",
   "binDir": "/usr/lib/cni", "capabilities": {"portMappings": true}}]}
EOF
  echo '{"kubernetes": {"kubeconfig": "/etc/adam-node/netattach.kubeconfig"}}' >"$nd/whereabouts.conf"
  cp "$dir/pki/netattach".{crt,key} "$nd/"
  node_kubeconfig "$nd/netattach.kubeconfig" /etc/adam-node/netattach
  echo "$cluster_cidr" >"$nd/cluster-cidr"
}

node_kubeconfig() {  # node_kubeconfig FILE CERT-PATH-WITHOUT-SUFFIX
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: adam-local
  cluster: {server: "https://$api_host:$apiserver_port", certificate-authority: /etc/adam-node/ca.crt}
users:
- name: node
  user: {client-certificate: $2.crt, client-key: $2.key}
contexts:
- name: adam-local
  context: {cluster: adam-local, user: node}
current-context: adam-local
EOF
}

# real_nodes_up: starts the node containers, loads the images into each, gives each its files,
# routes, and starts its kubelet and kube-proxy.
real_nodes_up() {
  ((real_nodes > 0)) || return 0
  node_images
  cert kube-proxy "/CN=system:kube-proxy"
  cert netattach "/CN=adam:netattach"
  local net i j name c image ips=()
  net=$(node_network)
  for ((i = 0; i < real_nodes; i++)); do
    name=$(node_name "$i")
    c=$(node_container "$name")
    mkdir -p "$dir/nodes/$name"
    # Every capability but CAP_SYS_RESOURCE, which this machine's root lacks (so --privileged
    # fails), no seccomp filter, every device (node/node.sh makes /sys and the cgroups writable).
    # Its own cgroup namespace: the kubelet sees its container's cgroup as the root. Volumes
    # (on this machine's file system, not the image's overlay) for what containerd and the
    # kubelet write, and for the local PersistentVolumes.
    # No resolver: every image is loaded, and nothing on a node looks a name up outside the
    # cluster (pods ask CoreDNS).
    docker run -d --name "$c" --hostname "$name" --network "$net" --cgroupns private --dns 127.0.0.1 \
      --cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined \
      --security-opt apparmor=unconfined --security-opt systempaths=unconfined \
      --device-cgroup-rule 'a *:* rwm' \
      --label "dev.adam.cluster=$(cluster_id)" --tmpfs /run --tmpfs /tmp \
      -v /var/lib/containerd -v /var/lib/kubelet -v /var/local-pv \
      -v "$dir/nodes/$name:/etc/adam-node:ro" -e "ADAM_PAUSE_IMAGE=$pause_image" \
      "$node_image" >/dev/null
    docker network connect "$(second_network)" "$c"  # the node's eth1
    ips+=("$(docker inspect -f "{{(index .NetworkSettings.Networks \"$net\").IPAddress}}" "$c")")
  done
  # The images, saved once and imported into every node's containerd.
  local images tar=$dir/images.tar
  read -r -a images <<<"$(node_image_list)"
  for image in "${images[@]}"; do
    docker image inspect "$image" >/dev/null 2>&1 ||
      die "no image $image on this machine (make image builds Adam's)"
  done
  log "loading ${images[*]} into ${real_nodes} nodes"
  docker save -o "$tar" "${images[@]}"
  for ((i = 0; i < real_nodes; i++)); do
    c=$(node_container "$(node_name "$i")")
    wait_for "containerd in $c" 60 docker exec "$c" ctr version
    docker exec -i "$c" ctr -n k8s.io images import --all-platforms - <"$tar" >/dev/null ||
      die "importing the images into $c failed"
  done
  rm -f "$tar"
  for ((i = 0; i < real_nodes; i++)); do
    name=$(node_name "$i")
    node_files "$i" "${ips[$i]}"
    : >"$dir/nodes/$name/routes"
    for ((j = 0; j < real_nodes; j++)); do
      ((j == i)) || echo "10.245.$j.0/24 ${ips[$j]}" >>"$dir/nodes/$name/routes"
    done
    docker exec "$(node_container "$name")" adam-node start
  done
  # This machine reaches every pod through its node.
  : >"$dir/host-routes"
  for ((i = 0; i < real_nodes; i++)); do
    ip route replace "10.245.$i.0/24" via "${ips[$i]}"
    echo "10.245.$i.0/24" >>"$dir/host-routes"
  done
}

# netattach_objects: what the nodes' netattach and whereabouts read and write (the CRDs of
# NetworkAttachmentDefinition and whereabouts' pools, from their modules; the role that the nodes'
# identity adam:netattach holds, as Multus's and whereabouts' daemon sets hold theirs).
netattach_objects() {
  local f
  for f in "$bin"/../netattach/*.yaml; do
    echo "---"
    cat "$f"
  done
  cat <<'EOF'
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: adam-netattach}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [pods/status], verbs: [update, patch]}
- {apiGroups: [k8s.cni.cncf.io], resources: [network-attachment-definitions], verbs: [get, list, watch]}
- apiGroups: [whereabouts.cni.cncf.io]
  resources: [ippools, overlappingrangeipreservations, nodeslicepools]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: adam-netattach}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: adam-netattach}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "adam:netattach"}]
EOF
}

# second_network_attachment NAMESPACE: the NetworkAttachmentDefinition adam-replication there:
# macvlan on each node's eth1 (the second Docker network), addresses from whereabouts.
second_network_attachment() {
  cat <<EOF
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: adam-replication, namespace: $1}
spec:
  config: '{"cniVersion": "0.4.0", "type": "macvlan", "master": "eth1", "mode": "bridge",
    "ipam": {"type": "whereabouts", "range": "10.246.0.0/24"}}'
EOF
}

# local_volumes: ADAM_CLUSTER_VOLUMES_PER_NODE (12) local PersistentVolumes on each real node (a
# folder of its /var/local-pv), StorageClass "standard", bound when the pod is scheduled: a pod
# replaced on the same node finds its checkpoints and Raft log again.
local_volumes() {
  local per=${ADAM_CLUSTER_VOLUMES_PER_NODE:-12} i v name
  for ((i = 0; i < real_nodes; i++)); do
    name=$(node_name "$i")
    docker exec "$(node_container "$name")" sh -c \
      "for v in \$(seq 0 $((per - 1))); do mkdir -p /var/local-pv/\$v; done; chmod 1777 /var/local-pv/*"
    for ((v = 0; v < per; v++)); do
      cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: $name-volume-$v}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: standard
  local: {path: /var/local-pv/$v}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$name]}
EOF
    done
  done
}

# coredns_up: the cluster's DNS on the nodes' gateway, port 53, reading Services and their
# endpoints from the API server.
coredns_up() {
  ((real_nodes > 0)) || return 0
  local health ready
  health=$(free_port)
  ready=$(free_port)
  # The cluster's names from the API; every other name does not exist here (no upstream is
  # reachable): NXDOMAIN at once rather than a failure that resolvers retry.
  cat >"$dir/Corefile" <<EOF
$cluster_dns_domain:53 in-addr.arpa:53 ip6.arpa:53 {
  bind $api_host
  errors
  health 127.0.0.1:$health
  ready 127.0.0.1:$ready
  kubernetes $cluster_dns_domain in-addr.arpa ip6.arpa {
    kubeconfig $dir/admin.kubeconfig adam-local
    pods insecure
  }
}
.:53 {
  bind $api_host
  template ANY ANY {
    rcode NXDOMAIN
  }
}
EOF
  start coredns -conf "$dir/Corefile"
  wait_for coredns 60 curl -sf "http://127.0.0.1:$ready/ready"
}

real_nodes_down() {
  local id
  id=$(cluster_id)
  local containers
  containers=$(docker ps -aq --filter "label=dev.adam.cluster=$id" 2>/dev/null || true)
  [[ -z "$containers" ]] || docker rm -f -v $containers >/dev/null 2>&1 || true
  docker network rm "$(node_network)" "$(second_network)" >/dev/null 2>&1 || true
  if [[ -f "$dir/host-routes" ]]; then
    while read -r cidr; do ip route del "$cidr" 2>/dev/null || true; done <"$dir/host-routes"
  fi
}
