#!/usr/bin/env bash
# Configures build-asan/: clang, AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer's
# coverage on every object, so one build serves both the whole test suite (scripts/asan.sh) and the
# fuzz targets (scripts/fuzz.sh). -O1 with line tables only: symbolized reports, shorter builds.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DADAM_FUZZ=ON -DADAM_BUILD_BENCH=OFF > build-asan.log 2>&1 || { cat build-asan.log; exit 1; }
