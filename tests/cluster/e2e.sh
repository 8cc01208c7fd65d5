#!/usr/bin/env bash
# `make k8s-e2e`: the operator, chart and CRD against a real control plane. Starts a cluster of
# its own (cluster.sh, in build/e2e-cluster), runs the Go tests in e2e/ with progress, keeps the
# cluster's and the operators' logs in build/e2e-logs, and stops the cluster however it ends.
#   ADAM_BINARY   the adam binary the operator runs from (default build/adam)
#   E2E_RUN       a -run pattern, to run some tests only
#   E2E_SKIP      a -skip pattern, to leave some tests out
#   E2E_LOGS      where the logs go (default build/e2e-logs)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export PATH="/usr/local/go/bin:$PATH"
binary=${ADAM_BINARY:-$root/build/adam}
[[ -x "$binary" ]] || { echo "k8s-e2e: no adam binary at $binary (make build first)" >&2; exit 1; }
dir=$root/build/e2e-cluster
logs=${E2E_LOGS:-$root/build/e2e-logs}
rm -rf "$logs"
mkdir -p "$logs"
start=$SECONDS
cluster=$root/tests/cluster/cluster.sh  # absolute: the trap runs after the cd below
tests/cluster/build.sh >/dev/null
"$cluster" down "$dir" >/dev/null 2>&1 || true
trap 'cp -r "$dir/logs" "$logs/cluster" 2>/dev/null || true; "$cluster" down "$dir" >/dev/null 2>&1 || true' EXIT
# Kubernetes' own gang scheduling is alpha: its gates are on for the e2e tests' cluster.
ADAM_CLUSTER_REAL_NODES=0 ADAM_CLUSTER_GANG=1 "$cluster" up "$dir" >/dev/null
echo "k8s-e2e: control plane up after $((SECONDS - start)) s; running tests/cluster/e2e (logs in ${logs#"$root"/})"
cd tests/cluster
set +e
ADAM_CLUSTER_DIR=$dir ADAM_BINARY=$binary ADAM_SOURCE_DIR=$root ADAM_E2E_LOGS=$logs \
  CGO_ENABLED=0 go test -trimpath -count=1 -timeout 20m -v -run "${E2E_RUN:-.}" -skip "${E2E_SKIP:-}" ./e2e 2>&1 |
  tee "$logs/go-test.log" | grep --line-buffered -E '^(=== RUN|\s*--- (PASS|FAIL|SKIP)|PASS|FAIL|ok |e2e:|\s+[0-9a-z_]+_test\.go:[0-9]+:)'
code=${PIPESTATUS[0]}
echo "k8s-e2e: $([[ $code == 0 ]] && echo passed || echo FAILED) in $((SECONDS - start)) s"
exit "$code"
