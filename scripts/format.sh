#!/usr/bin/env bash
# clang-format (.clang-format: Google style, 100 columns) over every C++ file of the repository.
#   scripts/format.sh          reformats them in place
#   scripts/format.sh --check  changes nothing; names each place that is not formatted (file,
#                              line, column, the line) and fails if any; also fails on a source
#                              file of workers/, operator/ or tests/ over 700 lines, naming it;
#                              and on a read of a std::chrono clock in workers/ or operator/
#                              outside core/clock.{h,cc} and net/grpc.cc (time goes through
#                              core/clock.h's Clock, so tests can drive it); and on a helper
#                              two files of one unity batch define (scripts/unity_names.py)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format-14 > /dev/null || { echo "format: no clang-format-14 (scripts/install-deps.sh)"; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [[ ${1:-} != --check ]]; then
  clang-format-14 -i --style=file "${files[@]}"
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
# One clang-format for every file: each violation is named by file, line and column.
if ! out=$(clang-format-14 --dry-run --Werror --style=file "${files[@]}" 2>&1); then
  printf '%s\n' "$out" | grep -E "error:" -A2 | head -60
  echo "format: $(printf '%s\n' "$out" | grep -E "error:" | cut -d: -f1 | sort -u | wc -l) of ${#files[@]} files need scripts/format.sh"
  exit 1
fi
# Files a reader can hold: split one that grows past the bound (as network.cc into
# network_build.cc, or a test file into files by subject around a shared fixture header) rather
# than raise it.
long=$(git ls-files 'workers/*.cc' 'workers/*.h' 'operator/*.cc' 'operator/*.h' 'tests/*.cc' \
  'tests/*.h' | xargs wc -l |
  awk '$2 != "total" && $1 > 700 { print "  " $2 ": " $1 " lines" }')
if [[ -n $long ]]; then
  printf '%s\n' "$long"
  echo "format: source files over 700 lines: split them"
  exit 1
fi
# Time is read through a Clock (core/clock.h): its own files read the std::chrono clocks, and
# net/grpc.cc, whose deadlines are gRPC's own system-clock time points.
clocks=$(git grep -nE '(steady_clock|system_clock|high_resolution_clock)::now' -- \
  'workers/*.cc' 'workers/*.h' 'operator/*.cc' 'operator/*.h' \
  ':!workers/libs/core/clock.h' ':!workers/libs/core/clock.cc' ':!workers/libs/net/grpc.cc' || true)
if [[ -n $clocks ]]; then
  printf '  %s\n' "$clocks"
  echo "format: clocks read outside core/clock.h: take a Clock* (Clock::Real() in production)"
  exit 1
fi
# The sanitizer trees are unity builds: no helper defined twice in one batch of a target's files.
python3 scripts/unity_names.py
echo "format: ${#files[@]} files clean, none over 700 lines, no clock read outside core/clock.h," \
  "no name twice in a unity batch"
