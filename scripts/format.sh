#!/usr/bin/env bash
# clang-format (.clang-format: Google style, 100 columns) over every C++ file of the repository.
#   scripts/format.sh          reformats them in place
#   scripts/format.sh --check  changes nothing; lists each file that is not formatted, with the
#                              first lines clang-format would change, and fails if any
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format-14 > /dev/null || { echo "format: no clang-format-14 (scripts/install-deps.sh)"; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [[ ${1:-} != --check ]]; then
  clang-format-14 -i --style=file "${files[@]}"
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format-14 --style=file "$f" | diff -u "$f" - > /tmp/format.$$ 2>&1; then
    bad=$((bad + 1))
    echo "format: $f is not clang-format clean:"
    sed -n '3,12p' /tmp/format.$$
  fi
done
rm -f /tmp/format.$$
if ((bad)); then
  echo "format: $bad of ${#files[@]} files need scripts/format.sh"
  exit 1
fi
echo "format: ${#files[@]} files clean"
