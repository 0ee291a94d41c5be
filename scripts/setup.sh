#!/usr/bin/env bash
# Installs pipeplan's build and test dependencies from Debian 12 packages and
# builds everything into ./build. Idempotent: installed packages are skipped
# and the build is incremental.
#
#   ./scripts/setup.sh            # install (needs root or sudo) + build
#   PIPEPLAN_SKIP_APT=1 ./scripts/setup.sh   # build only
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ cmake ninja-build pkg-config git openssl ca-certificates clang-format dpkg-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev coinor-libcbc-dev prometheus-cpp-dev libgloo-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus python3 python3-torch python3-torchvision python3-pytest python3-grpcio
  librsvg2-bin
  libtorch-dev postgresql-15 libpq-dev clang-14 libclang-rt-14-dev lld
)

if [[ -z "${PIPEPLAN_SKIP_APT:-}" ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# CUDA (with NCCL) is optional: the NCCL transport is built when it is found.
cmake_args=(-S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPEPLAN_WERROR=ON)
if [[ -d /usr/local/cuda ]]; then cmake_args+=(-DCUDAToolkit_ROOT=/usr/local/cuda); fi
cmake "${cmake_args[@]}"
cmake --build build -j"${PIPEPLAN_JOBS:-2}"
echo "setup: built into ./build"
