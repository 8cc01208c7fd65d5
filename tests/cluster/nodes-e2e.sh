#!/usr/bin/env bash
# `make k8s-nodes`: Adam on real Kubernetes nodes. Starts a cluster of its own (cluster.sh with 4
# real nodes in 2 zones, in build/nodes-cluster), runs the Go tests in nodes/ with progress (the
# chart's operator, the demo trained on the nodes, start failures), keeps the cluster's, the
# nodes' and the tests' logs in build/nodes-logs, and stops the cluster however it ends. The nodes
# get Adam's image as `make image` built it from build/adam, rebuilt first when it holds another
# binary.
#   ADAM_BINARY   the adam binary (default build/adam)
#   E2E_RUN       a -run pattern, to run some tests only
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export PATH="/usr/local/go/bin:$PATH"
dir=$root/build/nodes-cluster
logs=$root/build/nodes-logs
rm -rf "$logs"
mkdir -p "$logs"
start=$SECONDS
binary=${ADAM_BINARY:-$root/build/adam}
[[ -x "$binary" ]] || { echo "k8s-nodes: no adam binary at $binary (make build first)" >&2; exit 1; }
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/adam/Chart.yaml)
want=$(sha256sum "$binary" | cut -c1-64)
have=$(docker image inspect -f '{{index .Config.Labels "dev.adam.binary"}}' "adam:$version" 2>/dev/null || true)
if [[ "$have" != "$want" ]]; then
  echo "k8s-nodes: adam:$version does not hold $binary; building it (docker/image.sh)"
  docker/image.sh >/dev/null
fi
cluster=$root/tests/cluster/cluster.sh  # absolute: the trap runs after the cd below
tests/cluster/build.sh >/dev/null
"$cluster" down "$dir" >/dev/null 2>&1 || true
keep_logs() {
  cp -r "$dir/logs" "$logs/cluster" 2>/dev/null || true
  local id c
  id=$(sed -n 's/^ADAM_CLUSTER_ID=//p' "$dir/env" 2>/dev/null || true)
  for c in $(docker ps -a --filter "label=dev.adam.cluster=$id" --format '{{.Names}}' 2>/dev/null); do
    mkdir -p "$logs/$c"
    docker cp "$c:/var/log/." "$logs/$c/" >/dev/null 2>&1 || true
  done
}
trap 'keep_logs; "$cluster" down "$dir" >/dev/null 2>&1 || true' EXIT
ADAM_CLUSTER_REAL_NODES=${ADAM_CLUSTER_REAL_NODES:-4} timeout 600 "$cluster" up "$dir" >/dev/null
echo "k8s-nodes: cluster with real nodes up after $((SECONDS - start)) s; running tests/cluster/nodes (logs in build/nodes-logs)"
cd tests/cluster
set +e
ADAM_CLUSTER_DIR=$dir ADAM_SOURCE_DIR=$root ADAM_E2E_LOGS=$logs \
  CGO_ENABLED=0 go test -trimpath -count=1 -timeout 15m -v -run "${E2E_RUN:-.}" ./nodes 2>&1 |
  tee "$logs/go-test.log" | grep --line-buffered -E '^(=== RUN|\s*--- (PASS|FAIL|SKIP)|PASS|FAIL|ok |nodes:|\s+[0-9a-z_]+_test\.go:[0-9]+:)'
code=${PIPESTATUS[0]}
echo "k8s-nodes: $([[ $code == 0 ]] && echo passed || echo FAILED) in $((SECONDS - start)) s"
exit "$code"
