#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang) in build-asan/,
# the build scripts/fuzz.sh reuses. Any report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/configure-asan.sh
cmake --build build-asan
[[ "${1:-}" != --build-only ]] || exit 0  # the build and no more (CI builds it while others run)
# Leak checking stays on; UBSan findings abort like ASan's.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
# The failover simulation runs each shard alone (RUN_SERIAL) at the pace of thread wake-ups, slower
# still under the sanitizers: here half its seeds (1,000 of 2,000, every family of faults) are
# checked for memory errors and every seed's invariants; the Release suite runs them all, with the
# floors on how often each fault happened (tests/failover/failover_sim_test.cc).
export FAILOVER_SIM_SEEDS=500
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" --timeout 600
echo "asan: no findings"
