#!/usr/bin/env bash
# `make bench-operator` (not part of CI): the operator at scale on the local control plane, as
# issue-sized clusters run it. Starts a cluster of its own (tests/cluster/cluster.sh, in
# build/bench-cluster) with ADAM_BENCH_NODES (1000) kwok nodes over 10 zones and a network volume
# for every checkpoint and Raft claim, then runs tests/cluster/bench/operator: ADAM_BENCH_JOBS
# (100) AdamJobs of 28 pods each applied at once, until every pod is Running (at most
# ADAM_BENCH_TIMEOUT, 30m), then deleted. The controller manager and the scheduler may send
# ADAM_BENCH_CLIENT_QPS (200) requests/s, as large clusters let them (set it empty for
# Kubernetes' defaults, 20 and 50); ADAM_BENCH_OPERATOR_QPS sets the operator's (its default, 50,
# when unset; burst twice that) and ADAM_BENCH_OPERATOR_ARGS more of its flags
# (`--child-event-batch-ms 1000`, say). Prints progress and the results (JSON), also written to
# build/bench/operator.json. The cluster is stopped however it ends.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="/usr/local/go/bin:$PATH"
jobs=${ADAM_BENCH_JOBS:-100}
nodes=${ADAM_BENCH_NODES:-1000}
binary=${ADAM_BINARY:-$root/build/adam}
[[ -x "$binary" ]] || { echo "bench-operator: no adam binary at $binary (make build first)" >&2; exit 1; }
dir=$root/build/bench-cluster
mkdir -p build/bench
cluster=$root/tests/cluster/cluster.sh
bin=$(tests/cluster/build.sh)
export PATH="$bin:$PATH"
"$cluster" down "$dir" >/dev/null 2>&1 || true
trap '"$cluster" down "$dir" >/dev/null 2>&1 || true' EXIT
start=$SECONDS
# 8 checkpoint claims and 3 Raft claims per job, bound when made: with WaitForFirstConsumer a
# first run placed about one pod in 5 s on 2 cores while every process was nearly idle and the
# claims stayed Pending: a measure of volume binding, not of the operator.
ADAM_CLUSTER_REAL_NODES=0 ADAM_CLUSTER_NODES=$nodes ADAM_CLUSTER_ZONES=10 ADAM_CLUSTER_VOLUMES=$((jobs * 11 + 20)) \
  ADAM_CLUSTER_VOLUME_BINDING=Immediate ADAM_CLUSTER_CLIENT_QPS=${ADAM_BENCH_CLIENT_QPS-200} \
  "$cluster" up "$dir" >/dev/null
echo "bench-operator: control plane with $nodes nodes up after $((SECONDS - start)) s" >&2
export KUBECONFIG=$dir/kubeconfig
cd tests/cluster
CGO_ENABLED=0 go run -trimpath ./bench/operator -adam "$binary" -source "$root" -jobs "$jobs" \
  -json "$root/build/bench/operator.json" -timeout "${ADAM_BENCH_TIMEOUT:-30m}" \
  -operator-qps "${ADAM_BENCH_OPERATOR_QPS:-0}" -operator-args "${ADAM_BENCH_OPERATOR_ARGS:-}"
