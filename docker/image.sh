#!/usr/bin/env bash
# `make image`: builds docker/Dockerfile into adam:VERSION (VERSION: the chart's appVersion) on a
# Docker Engine without a registry, then checks the image: `adam --version`, `adam validate` of
# both examples and one epoch of the demo inside it, a non-root user, and no compiler, browser or
# Prometheus in it.
#
#   docker/image.sh                    # reuses build/adam when `make` built it (Release)
#   ADAM_IMAGE_FROM_SOURCE=1 docker/image.sh   # compiles inside the image's build stage
#   ADAM_IMAGE=adam:dev docker/image.sh        # another name
#
# The build context is the repository's files as git lists them (tracked, and untracked ones git
# does not ignore), plus the prebuilt binary, so nothing of build/ or .git is sent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/adam/Chart.yaml)
image=${ADAM_IMAGE:-adam:$version}
base=$(docker/base.sh)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ctx"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$tmp/ctx"

prebuilt=""
digest=""
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [[ "${ADAM_IMAGE_FROM_SOURCE:-0}" != 1 && -x build/adam && "$codename" == bookworm ]] &&
  grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' build/CMakeCache.txt 2>/dev/null; then
  mkdir -p "$tmp/ctx/.prebuilt"
  cp build/adam "$tmp/ctx/.prebuilt/adam"
  strip "$tmp/ctx/.prebuilt/adam"
  prebuilt=.prebuilt/adam
  # Names the binary the image holds: make multihost rebuilds the image when build/adam changed.
  digest=$(sha256sum build/adam | cut -c1-64)
  echo "image: $image from $base with build/adam (ADAM_IMAGE_FROM_SOURCE=1 compiles it in the image)" >&2
else
  echo "image: $image from $base, compiling adam in the build stage" >&2
fi

start=$SECONDS
tar -C "$tmp/ctx" -cf - . |
  docker build -q -f docker/Dockerfile --build-arg "BASE=$base" --build-arg "RUNTIME_BASE=$base" \
    --build-arg "ADAM_PREBUILT=$prebuilt" --label "dev.adam.binary=$digest" -t "$image" - >"$tmp/build.log" 2>&1 || {
  cat "$tmp/build.log" >&2
  echo "image: docker build failed" >&2
  exit 1
}
# The build stage is kept by the engine as an untagged image; with a prebuilt binary it holds
# nothing worth caching (compiled in the image, it is the cache of the next build: kept).
[[ -z "$prebuilt" ]] || docker image prune -f --filter label=dev.adam.stage=build >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')
echo "image: built $image in $((SECONDS - start)) s, $size" >&2

# The checks CI relies on.
fail() { echo "image: $*" >&2; exit 1; }
got=$(docker run --rm "$image" --version) || fail "adam --version failed in $image"
[[ "$got" == "adam $version" ]] || fail "adam --version says '$got', want 'adam $version'"
for job in fashion-mnist fashion-mnist-ha; do
  docker run --rm "$image" validate "/usr/share/adam/examples/$job.yaml" >"$tmp/validate.log" 2>&1 ||
    { cat "$tmp/validate.log" >&2; fail "adam validate $job.yaml failed in $image"; }
done
[[ -f "$root/examples/fashion-mnist.yaml" ]]
docker run --rm --entrypoint sh "$image" -c 'test -s /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz' ||
  fail "the Fashion-MNIST data set is missing from $image"
uid=$(docker run --rm --entrypoint id "$image" -u)
[[ "$uid" == 10001 ]] || fail "$image runs as uid $uid, want 10001 (non-root)"
extra=$(docker run --rm --entrypoint sh "$image" -c \
  'for p in cc c++ gcc g++ clang cmake chromium prometheus; do command -v $p; done; true')
[[ -z "$extra" ]] || fail "$image holds build or test tools: $extra"
# One epoch of the demo inside it: every runtime library loads and every role runs, as uid 10001.
sed 's/^    epochs: .*/    epochs: 1/' examples/fashion-mnist.yaml >"$tmp/one-epoch.yaml"
chmod 644 "$tmp/one-epoch.yaml"
docker run --rm -v "$tmp/one-epoch.yaml:/job.yaml:ro" "$image" run /job.yaml --quiet --output json \
  >"$tmp/run.json" 2>"$tmp/run.log" || { tail -20 "$tmp/run.log" >&2; fail "adam run failed in $image"; }
grep -q '"epochs":1' "$tmp/run.json" || fail "adam run in $image did not finish its epoch: $(cat "$tmp/run.json")"
echo "image: $image checked (adam --version, validate of both examples, one epoch of the demo, uid 10001, no tools)" >&2
echo "$image"
