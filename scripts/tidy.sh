#!/usr/bin/env bash
# clang-tidy with the checks in .clang-tidy over every .cc under workers/ and operator/, one file
# per core at a time, using build/'s compile commands (make build first). Prints each file as it
# is done; any finding fails the run, naming the file, line and check.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[[ -f $BUILD/compile_commands.json ]] || { echo "tidy: no $BUILD/compile_commands.json (make build)"; exit 1; }
mapfile -t files < <(find workers operator -name '*.cc' | sort)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$SECONDS
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} sh -c '
  f={}; log="$1/$(echo "$f" | tr / _).log"
  if clang-tidy-14 -p "$2" --quiet "$f" > "$log" 2>&1; then echo "tidy: $f"; else echo "tidy: $f: FINDINGS"; fi
' _ "$out" "$BUILD"
if grep -l -E "(warning|error): " "$out"/*.log > /dev/null 2>&1; then
  grep -h -E -A3 "(warning|error): " "$out"/*.log | grep -v "warnings generated" || true
  echo "tidy: findings in $(grep -l -E '(warning|error): ' "$out"/*.log | wc -l) of ${#files[@]} files"
  exit 1
fi
echo "tidy: ${#files[@]} files clean in $((SECONDS - start)) s"
