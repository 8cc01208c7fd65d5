#!/usr/bin/env bash
# Installs every Debian package Adam needs to build, test, run the demo and benchmark.
# Idempotent: packages already present are skipped, and apt-get runs only when one is missing.
set -euo pipefail

# What building the `adam` binary needs (all that docker/Dockerfile's build stage installs, with
# ADAM_INSTALL_BUILD_ONLY=1).
packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcpprest-dev libcurl4-openssl-dev libdnnl-dev ocl-icd-opencl-dev opencl-c-headers libhwloc-dev prometheus-cpp-dev libyaml-cpp-dev
  libzstd-dev zlib1g-dev libcli11-dev libspdlog-dev nlohmann-json3-dev libonnx-dev libpng-dev
  libturbojpeg0-dev libstb-dev
)
# The tests, the sanitizer builds, the demo's data set and the image's base (mmdebstrap).
if [[ "${ADAM_INSTALL_BUILD_ONLY:-0}" != 1 ]]; then
  packages+=(
    libgtest-dev libgmock-dev libbenchmark-dev
    clang libclang-rt-14-dev libomp-14-dev clang-tidy-14 clang-format-14
    dataset-fashion-mnist
    python3 openssl curl prometheus chromium mmdebstrap
    ccache  # CMakeLists.txt compiles through it: a second build of the same sources takes seconds
    python3-onnx python3-opencv  # the exported model checked by ONNX's checker and OpenCV's runtime
    python3-pil  # an independent decoder the image tests compare against (tests/libs/data)
  )
fi
# Extra groups: ADAM_INSTALL_BENCH=1 adds the peers the benchmarks compare against.
if [[ "${ADAM_INSTALL_BENCH:-0}" == 1 ]]; then
  packages+=(python3-torch python3-numpy python3-matplotlib etcd-server etcd-client)
  packages+=(python3-yaml)  # bench/tta.py and torch_trainer.py --manifest read AdamJobs
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
