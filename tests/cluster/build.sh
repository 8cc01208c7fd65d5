#!/usr/bin/env bash
# Builds the pinned Kubernetes control plane, the node components (kubelet, kube-proxy), etcd, kwok
# and helm from this Go module (go.mod's `tool` lines), Kueue from its own module in kueue/ (its
# Kubernetes libraries are a release behind and must not move the control plane's), CoreDNS from
# its own module in coredns/ (a release ahead), Prometheus from its own module in prometheus/
# (with its Kubernetes service discovery alone: Debian's build has none), the nodes' CNI plugins
# netattach and whereabouts from the module in netattach/, and the pod sandbox's pause binary from
# Kubernetes' own build/pause/linux/pause.c (in the same module), into a cache keyed by the go.mod and go.sum files
# and this module's sources, and prints the folder that holds the binaries. Kueue's CRDs and
# webhook manifests, from its module at the same version, go beside them in ../kueue. A second call with the same key prints it at once; Go's own
# module and build caches make a rebuild after a change to this module a matter of linking.
#
#   tests/cluster/build.sh            # prints .../bin
#   ADAM_CLUSTER_CACHE=DIR            # where the keyed folders live (default ~/.cache/adam/cluster)
#
# Each binary reports its release as upstream's builds do (the -X version variables of
# Kubernetes' hack/lib/version.sh, helm's and kwok's Makefiles, etcd's GitSHA).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export PATH="/usr/local/go/bin:$PATH"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

key=$(cat go.mod go.sum kueue/go.mod kueue/go.sum coredns/go.mod coredns/go.sum coredns/main.go \
  prometheus/go.mod prometheus/go.sum netattach/go.mod netattach/go.sum netattach/main.go build.sh \
  $(find cmd -name '*.go' | sort) |
  sha256sum | cut -c1-16)
cache="${ADAM_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/adam/cluster}"
out="$cache/$key"
if [[ -f "$out/ok" ]]; then
  echo "$out/bin"
  exit 0
fi

version() { go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$1"; }
kube=$(version k8s.io/kubernetes)
helm=$(version helm.sh/helm/v3)
kwok=$(version sigs.k8s.io/kwok)
etcd=$(version go.etcd.io/etcd/server/v3)
kube_minor=${kube#v1.}; kube_minor=${kube_minor%%.*}
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)

kube_ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$kube -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
done
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=$helm -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
done
kwok_ldflags="-X sigs.k8s.io/kwok/pkg/consts.Version=$kwok -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$kube"
etcd_ldflags="-X go.etcd.io/etcd/api/v3/version.GitSHA=release-$etcd"

mkdir -p "$out/bin"
start=$SECONDS
# One build of every main, so that Go schedules all packages (and the links) as one graph; each
# -X names a package of one program and is ignored by the others.
echo "cluster build: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet," \
  "kube-proxy, kwok, helm (cold: about 13 min on 2 cores; warm: seconds)" >&2
CGO_ENABLED=0 go build -trimpath -o "$out/bin/" \
  -ldflags "-s -w $kube_ldflags $helm_ldflags $kwok_ldflags $etcd_ldflags" \
  ./cmd/etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy sigs.k8s.io/kwok/cmd/kwok helm.sh/helm/v3/cmd/helm
# The sandbox every pod's containers share: Kubernetes' pause, static, for an image FROM scratch.
pause_tag=$(sed -n 's/^TAG ?= *//p' "$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/Makefile")
gcc -Os -static -DVERSION="v$pause_tag" -o "$out/bin/pause" \
  "$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
echo "$pause_tag" >"$out/bin/pause.tag"
coredns=$(cd coredns && version github.com/coredns/coredns)
echo "cluster build: coredns $coredns (cold: about 2 min on 2 cores)" >&2
(cd coredns && CGO_ENABLED=0 go build -trimpath -o "$out/bin/coredns" \
  -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns" .)
prometheus=$(cd prometheus && version github.com/prometheus/prometheus)
echo "cluster build: prometheus $prometheus (cold: about 2 min on 2 cores)" >&2
(cd prometheus && CGO_ENABLED=0 go build -trimpath -tags remove_all_sd,enable_kubernetes_sd \
  -o "$out/bin/prometheus" -ldflags "-s -w -X github.com/prometheus/common/version.Version=$prometheus" \
  github.com/prometheus/prometheus/cmd/prometheus)
kueue=$(cd kueue && version sigs.k8s.io/kueue)
echo "cluster build: kueue $kueue (cold: about 3 min on 2 cores)" >&2
(cd kueue && CGO_ENABLED=0 go build -trimpath -o "$out/bin/" \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue -X sigs.k8s.io/kueue/pkg/version.BuildDate=$date" \
  sigs.k8s.io/kueue/cmd/kueue)
# The nodes' second network: netattach (Multus's part: netattach/main.go) and the whereabouts IPAM
# plugin, both CNI plugins, with the CRDs of NetworkAttachmentDefinition and whereabouts' pools from
# their modules.
whereabouts=$(cd netattach && version github.com/k8snetworkplumbingwg/whereabouts)
echo "cluster build: netattach, whereabouts $whereabouts (cold: about 1 min on 2 cores beside the rest)" >&2
(cd netattach && CGO_ENABLED=0 go build -trimpath -o "$out/bin/netattach" -ldflags "-s -w" . &&
  CGO_ENABLED=0 go build -trimpath -o "$out/bin/whereabouts" -ldflags "-s -w \
    -X github.com/k8snetworkplumbingwg/whereabouts/pkg/version.Version=$whereabouts" \
    github.com/k8snetworkplumbingwg/whereabouts/cmd)
mkdir -p "$out/netattach"
nad_src=$(cd netattach && go list -m -f '{{.Dir}}' github.com/k8snetworkplumbingwg/network-attachment-definition-client)
whereabouts_src=$(cd netattach && go list -m -f '{{.Dir}}' github.com/k8snetworkplumbingwg/whereabouts)
cp "$nad_src/artifacts/networks-crd.yaml" "$whereabouts_src"/doc/crds/whereabouts.cni.cncf.io_*.yaml "$out/netattach/"
chmod u+w "$out"/netattach/*
kueue_src=$(cd kueue && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
mkdir -p "$out/kueue"
cp "$kueue_src"/config/components/crd/bases/*.yaml "$kueue_src/config/components/webhook/manifests.yaml" "$out/kueue/"
chmod u+w "$out"/kueue/*
echo "kubernetes=$kube etcd=$etcd kwok=$kwok helm=$helm kueue=$kueue coredns=$coredns prometheus=$prometheus whereabouts=$whereabouts pause=$pause_tag built in $((SECONDS - start)) s" > "$out/ok"
cat "$out/ok" >&2
# Keep the three newest builds (each is about 450 MB).
ls -1dt "$cache"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
echo "$out/bin"
