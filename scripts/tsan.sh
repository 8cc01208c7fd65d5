#!/usr/bin/env bash
# ThreadSanitizer over the parts of Adam meant to be race-free: the parameter server's store,
# shard workers and queues, consistency gate, buffer pool and checkpointer; the data source; and
# two trainers with two Hogwild workers each, with their prefetch, sync and evaluation threads
# (the intended weight races are marked in core/hogwild.h), and their push gate and replica sync;
# the operator's work queue and metrics cache; the fake clock and Periodic.
# Builds in build-tsan/ with clang (its ignorelist keeps the uninstrumented libraries' header code
# uninstrumented too: tests/tsan-ignorelist.txt), as a unity build (scripts/configure-asan.sh says
# why); any report fails the run. --build-only: the build and no more (CI builds it while other
# stages run).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DADAM_SANITIZE=thread \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="-fsanitize-ignorelist=$PWD/tests/tsan-ignorelist.txt" \
  -DADAM_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON > build-tsan.log 2>&1 || { cat build-tsan.log; exit 1; }
cmake --build build-tsan --target param_server_test data_server_test trainer_test kube_test spec_test \
  core_test
[[ "${1:-}" != --build-only ]] || exit 0
supp=build-tsan/tsan.supp
cp tests/tsan.supp "$supp"
# Every uninstrumented shared library the tests load, except the C and C++ runtimes TSan knows.
for t in param_server_test data_server_test trainer_test kube_test spec_test core_test; do ldd build-tsan/tests/$t; done |
  awk '{print $1}' | grep '^lib' | sed 's/\.so.*//' |
  grep -vE '^lib(c|m|tsan|stdc\+\+|gcc_s|pthread|dl|rt)$' | sort -u |
  while read -r lib; do echo "called_from_lib:$lib.so"; done >> "$supp"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/$supp"
# The suites without gRPC threads: gRPC, protobuf and abseil are not built with TSan here, so the
# happens-before of their queues is invisible and calls through them would be reported falsely.
run() {
  echo "tsan: $1 $2"
  ./build-tsan/tests/$1 --gtest_brief=1 "--gtest_filter=$2"
}
run param_server_test 'ParamStore.*:ParamStoreMarks.*:ApplyDense.*:ClockGate.*:BufferPool.*:CheckpointTest.*:Routing.*'
run data_server_test 'DataSource.*'  # not DataServerRole: gRPC and the metrics server
run trainer_test '*NoNetwork*:ReplicaPrivate.*:ServerWait.*:PushGate.*:ReplicaSync.*'
run kube_test 'WorkQueue.*:MetricsCacheTest.*'
run spec_test 'ManifestWatcher.*'
run core_test 'FakeClock.*:RealClock.*:Periodic.*'

echo "tsan: no data race reported"
