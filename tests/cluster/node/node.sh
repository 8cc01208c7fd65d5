#!/usr/bin/env bash
# Runs inside a node container (tests/cluster/node/Dockerfile); tests/cluster/cluster.sh drives it.
#   adam-node init           the container's first process: makes / a shared mount (the kubelet's
#                            volumes reach the containers), starts containerd, then waits
#   adam-node start          once /etc/adam-node holds the node's files (certificates,
#                            kubeconfigs, kubelet.yaml, kube-proxy.yaml, cni.conflist,
#                            netattach.conflist, whereabouts.conf, routes):
#                            sets up the pod network and starts the kubelet and kube-proxy
#   adam-node stop NAME      stops the kubelet or kube-proxy and keeps it stopped (a node fault)
#   adam-node resume NAME    lets it run again
# Each service runs under a loop that restarts it a second after it exits, unless stopped; its log
# is /var/log/NAME.log.
set -euo pipefail
conf=/etc/adam-node

supervise() {  # supervise NAME COMMAND...: in the background, restarted unless /run/adam/NAME.stop
  local name=$1
  shift
  mkdir -p /run/adam
  (
    while true; do
      if [[ ! -f /run/adam/$name.stop ]]; then
        "$@" >>"/var/log/$name.log" 2>&1 &
        echo $! >"/run/adam/$name.pid"
        wait $! || true
      fi
      sleep 1
    done
  ) </dev/null >/dev/null 2>&1 &
}

case "${1:-}" in
  init)
    mount --make-rshared /
    # The node container is not privileged (this machine's root lacks CAP_SYS_RESOURCE, which
    # --privileged asks for): it has every other capability, no seccomp filter, and every device,
    # and makes writable what the kubelet and containerd write: /sys and the cgroup hierarchies
    # of its own cgroup namespace. The kubelet's OOM watcher reads /dev/kmsg.
    mount -o remount,bind,rw /sys
    for d in /sys/fs/cgroup/*; do
      if mountpoint -q "$d"; then mount -o remount,bind,rw "$d"; fi
    done
    [[ -e /dev/kmsg ]] || mknod /dev/kmsg c 1 11
    [[ -s /etc/machine-id ]] || tr -d - </proc/sys/kernel/random/uuid >/etc/machine-id
    # The image's configuration of containerd: its CRI serves the kubelet, with the locally made
    # pause image (no registry) and the CNI plugins of Debian's package.
    mkdir -p /etc/containerd
    pause=${ADAM_PAUSE_IMAGE:?the sandbox image for containerd}
    cat >/etc/containerd/config.toml <<TOML
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  # A container cannot lower its own oom_score_adj below its parent's: without this runc fails
  # every sandbox with "failed to update /proc/self/oom_score_adj: Permission denied".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
TOML
    supervise containerd containerd
    exec sleep infinity
    ;;
  start)
    # containerd runs netattach (the only configuration in net.d), which runs the pod network
    # (/etc/cni/adam) and then the networks a pod names; whereabouts reads its flat file there.
    mkdir -p /etc/cni/net.d/whereabouts.d /etc/cni/adam
    cp "$conf/cni.conflist" /etc/cni/adam/10-adam.conflist
    cp "$conf/whereabouts.conf" /etc/cni/net.d/whereabouts.d/whereabouts.conf
    cp "$conf/netattach.conflist" /etc/cni/net.d/00-netattach.conflist
    # Pods of other nodes are reached through those nodes (one route each, on the nodes'
    # network); traffic of pods to anything else leaves with the node's address.
    while read -r cidr via; do
      [[ -n "$cidr" ]] && ip route replace "$cidr" via "$via"
    done <"$conf/routes"
    sysctl -qw net.ipv4.ip_forward=1
    cluster_cidr=$(cat "$conf/cluster-cidr")
    iptables -t nat -C POSTROUTING -s "$cluster_cidr" ! -d "$cluster_cidr" -j MASQUERADE 2>/dev/null ||
      iptables -t nat -A POSTROUTING -s "$cluster_cidr" ! -d "$cluster_cidr" -j MASQUERADE
    mkdir -p /var/lib/kubelet
    read -r -a kubelet_flags <"$conf/kubelet.flags"
    supervise kubelet kubelet --config "$conf/kubelet.yaml" --kubeconfig "$conf/kubelet.kubeconfig" \
      "${kubelet_flags[@]}"
    supervise kube-proxy kube-proxy --config "$conf/kube-proxy.yaml"
    ;;
  stop)
    touch "/run/adam/$2.stop"
    kill "$(cat "/run/adam/$2.pid")" 2>/dev/null || true
    ;;
  resume)
    rm -f "/run/adam/$2.stop"
    ;;
  *)
    echo "usage: adam-node init|start|stop NAME|resume NAME" >&2
    exit 2
    ;;
esac
