#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-asan/ (shared with
# scripts/asan.sh) and runs each for FUZZ_SECONDS (default 30), one per core at a time, from its
# seed corpus in tests/fuzz/corpus/. A crash fails the script and leaves the input in
# build-asan/artifacts/; turn it into a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
./scripts/configure-asan.sh
targets=(idx manifest event checkpoint raft_log raft_message watch_stream network_status prometheus_text
         onnx image codec)
cmake --build build-asan --target "${targets[@]/%/_fuzzer}"
mkdir -p build-asan/artifacts
# One target per core at a time: each gets its FUZZ_SECONDS on a core of its own.
fuzz() {
  local t=$1 work=build-asan/corpus/$1 log=build-asan/$1.log rc=0
  mkdir -p "$work"
  cp -n tests/fuzz/corpus/$t/* "$work"/ 2>/dev/null || true
  ./build-asan/tests/fuzz/${t}_fuzzer -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-asan/artifacts/$t- \
      "$work" > "$log" 2>&1 || rc=$?
  echo $rc > build-asan/$t.rc
}
per_round=$(nproc)
rm -f build-asan/*.rc
for ((i = 0; i < ${#targets[@]}; i += per_round)); do
  for t in "${targets[@]:i:per_round}"; do
    echo "fuzz: $t for ${seconds}s"
    fuzz "$t" &
  done
  wait
done
failed=0
for t in "${targets[@]}"; do
  if [ "$(cat build-asan/$t.rc)" != 0 ]; then
    tail -40 build-asan/$t.log
    echo "fuzz: $t failed; input kept in build-asan/artifacts/"
    failed=1
    continue
  fi
  runs=$(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' build-asan/$t.log | grep -o '[0-9]*$')
  echo "fuzz: $t ran ${runs:-?} inputs, no crash"
done
exit $failed
