#!/usr/bin/env bash
# Configures build-asan/: clang, AddressSanitizer + UndefinedBehaviorSanitizer on every object and
# libFuzzer's coverage on the fuzz targets and the libraries they run (tests/fuzz/CMakeLists.txt),
# so one build serves both the whole test suite (scripts/asan.sh) and the fuzz targets
# (scripts/fuzz.sh). -O1 with line tables only: symbolized reports, shorter builds.
# A unity build (each target's sources compiled in batches of eight, one compiler run per batch):
# the headers of gRPC, protobuf and the rest are parsed once a batch instead of once a file. The
# Release tree (build/) compiles every file alone, so a file that leans on a batch-mate's includes
# still fails there.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DADAM_FUZZ=ON -DADAM_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON > build-asan.log 2>&1 ||
  { cat build-asan.log; exit 1; }
