#!/usr/bin/env bash
# `make multihost`: both examples with every role in its own container of the adam image, on two
# Docker networks (the pod network and the second, replication one), and faults across them
# (tests/multihost/*_test.go). The image is the one `make image` built from build/adam; it is
# rebuilt first when it holds another binary. Partitions are cut with iptables from a tools image
# (the Debian base plus iptables, made here) run in a pod's network namespace. Container logs of
# every test are kept in build/multihost-logs.
#   ADAM_BINARY       the adam binary (default build/adam)
#   MULTIHOST_RUN     a -run pattern, to run some tests only
#   MULTIHOST_EPOCH_END  cut, pause, kill, none or sequence: runs the probe TestAFaultAtTheEndOfEpochOne
#                     (skipped without it; epoch_end_test.go)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export PATH="/usr/local/go/bin:$PATH"
start=$SECONDS
binary=${ADAM_BINARY:-$root/build/adam}
[[ -x "$binary" ]] || { echo "multihost: no adam binary at $binary (make build first)" >&2; exit 1; }
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/adam/Chart.yaml)
image=${ADAM_IMAGE:-adam:$version}
want=$(sha256sum "$binary" | cut -c1-64)
have=$(docker image inspect -f '{{index .Config.Labels "dev.adam.binary"}}' "$image" 2>/dev/null || true)
if [[ "$have" != "$want" ]]; then
  echo "multihost: $image does not hold $binary; building it (docker/image.sh)"
  ADAM_IMAGE=$image docker/image.sh >/dev/null
fi
base=$(docker/base.sh)
tools=adam-nettools:bookworm
if ! docker image inspect "$tools" >/dev/null 2>&1; then
  printf 'FROM %s\nRUN apt-get update -q && apt-get install -y -q --no-install-recommends iptables iproute2 && rm -rf /var/lib/apt/lists/*\n' "$base" |
    docker build -q -t "$tools" - >/dev/null
fi
# Containers and networks a killed earlier run left behind.
stale=$(docker ps -aq --filter label=dev.adam.multihost)
[[ -z "$stale" ]] || docker rm -f $stale >/dev/null
docker network ls -q --filter name=amh | xargs -r docker network rm >/dev/null 2>&1 || true
logs=$root/build/multihost-logs
rm -rf "$logs"
mkdir -p "$logs"
echo "multihost: $image, tools $tools, ready after $((SECONDS - start)) s; running tests/multihost (logs in build/multihost-logs)"
cd tests/multihost
set +e
ADAM_IMAGE=$image ADAM_TOOLS_IMAGE=$tools ADAM_BINARY=$binary ADAM_MULTIHOST_LOGS=$logs \
  CGO_ENABLED=0 go test -trimpath -count=1 -timeout 30m -v -run "${MULTIHOST_RUN:-.}" . 2>&1 |
  tee "$logs/go-test.log" | grep --line-buffered -E '^(=== RUN|\s*--- (PASS|FAIL|SKIP)|PASS|FAIL|ok |\s+[0-9a-z_]+_test\.go:[0-9]+:)'
code=${PIPESTATUS[0]}
echo "multihost: $([[ $code == 0 ]] && echo passed || echo FAILED) in $((SECONDS - start)) s"
exit "$code"
