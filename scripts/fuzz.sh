#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-asan/ (shared with
# scripts/asan.sh) and runs each for FUZZ_SECONDS (default 30) from its seed corpus in
# tests/fuzz/corpus/. A crash fails the script and leaves the input in build-asan/artifacts/; turn
# it into a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
./scripts/configure-asan.sh
cmake --build build-asan --target idx_fuzzer manifest_fuzzer event_fuzzer checkpoint_fuzzer raft_log_fuzzer raft_message_fuzzer \
  watch_stream_fuzzer network_status_fuzzer prometheus_text_fuzzer
mkdir -p build-asan/artifacts
for t in idx manifest event checkpoint raft_log raft_message watch_stream network_status prometheus_text; do
  work=build-asan/corpus/$t
  mkdir -p "$work"
  cp -n tests/fuzz/corpus/$t/* "$work"/ 2>/dev/null || true
  log=build-asan/$t.log
  echo "fuzz: $t for ${seconds}s"
  if ! ./build-asan/tests/fuzz/${t}_fuzzer -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-asan/artifacts/$t- \
      "$work" > "$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $t failed; input kept in build-asan/artifacts/"
    exit 1
  fi
  runs=$(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
  echo "fuzz: $t ran ${runs:-?} inputs, no crash"
done
