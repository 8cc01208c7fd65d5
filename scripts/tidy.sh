#!/usr/bin/env bash
# clang-tidy with the checks in .clang-tidy over every .cc under workers/ and operator/, one file
# per core at a time, using build/'s compile commands (make build first). Prints each file as it
# is done; any finding fails the run, naming the file, line and check.
#
# A verdict is cached by what it depends on (scripts/tidy_keys.py: clang-tidy's version,
# .clang-tidy, the flags and the preprocessed file): a file whose key was seen clean is not
# checked again. Clean keys live in ~/.cache/adam/tidy (ADAM_TIDY_CACHE) and, for a clean clone,
# in .ci/tidy.sums, which a clean run rewrites: commit it with the change it was run on, and CI
# checks only the files whose preprocessed text differs from what was checked.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[[ -f $BUILD/compile_commands.json ]] || { echo "tidy: no $BUILD/compile_commands.json (make build)"; exit 1; }
cache="${ADAM_TIDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/adam/tidy}"
sums=.ci/tidy.sums
mkdir -p "$cache"
touch "$sums"
mapfile -t files < <(find workers operator -name '*.cc' | sort)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$SECONDS
mapfile -t keyed < <(printf '%s\n' "${files[@]}" | python3 scripts/tidy_keys.py "$BUILD")
# A key for every file, or no verdict at all (a failed preprocessing must not pass as clean).
if ((${#keyed[@]} != ${#files[@]})); then
  echo "tidy: scripts/tidy_keys.py keyed ${#keyed[@]} of ${#files[@]} files; see its error above"
  exit 1
fi
todo=()
for line in "${keyed[@]}"; do
  key=${line%% *}
  if [[ $key != none ]] && { [[ -e $cache/$key ]] || grep -qx "$key" "$sums"; }; then continue; fi
  todo+=("$line")
done
echo "tidy: ${#files[@]} files, $((${#files[@]} - ${#todo[@]})) unchanged since checked clean" \
  "(keys in $((SECONDS - start)) s), ${#todo[@]} to check"
if ((${#todo[@]})); then
  printf '%s\n' "${todo[@]}" | xargs -P "$(nproc)" -L1 sh -c '
    key=$4; f=$5; log="$1/$(echo "$f" | tr / _).log"
    if clang-tidy-14 -p "$2" --quiet "$f" > "$log" 2>&1 && ! grep -q -E "(warning|error): " "$log"; then
      [ "$key" = none ] || touch "$3/$key"
      echo "tidy: $f"
    else
      echo "tidy: $f: FINDINGS"
      grep -q -E "(warning|error): " "$log" || echo "error: clang-tidy failed on $f" >> "$log"
    fi
  ' _ "$out" "$BUILD" "$cache"
fi
if grep -l -E "(warning|error): " "$out"/*.log > /dev/null 2>&1; then
  grep -h -E -A3 "(warning|error): " "$out"/*.log | grep -v "warnings generated" || true
  echo "tidy: findings in $(grep -l -E '(warning|error): ' "$out"/*.log | wc -l) of ${#files[@]} files"
  exit 1
fi
printf '%s\n' "${keyed[@]}" | awk '$1 != "none" {print $1}' | sort > "$sums.new"
if cmp -s "$sums.new" "$sums"; then rm "$sums.new"; else mv "$sums.new" "$sums"; fi
echo "tidy: ${#files[@]} files clean in $((SECONDS - start)) s"
