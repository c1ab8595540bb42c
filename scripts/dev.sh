#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine (run as root, or with sudo):
#   scripts/dev.sh demo   install what is missing, build, run the main job on gloo
#   scripts/dev.sh test   install what is missing (the test tools too: mpirun,
#                         Slurm, etcd, clang), build, run every test that needs
#                         no GPU, the ones CI runs (GPU tests: scripts/gpu_check.sh)
#   scripts/dev.sh build  install and build only
# Environment: BUILD_DIR (default build), BUILD_TYPE (default RelWithDebInfo),
# JOBS (default: CPU count), CMAKE_ARGS (extra configure arguments).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$here/build}
build_type=${BUILD_TYPE:-RelWithDebInfo}
jobs=${JOBS:-$(nproc)}

# Debian packages the build needs. CUDA and NCCL are not among them: the NCCL
# backend is built when /usr/local/cuda has them, and skipped otherwise.
# libcurl: the launcher's etcd client (rendezvous/etcd/).
packages=(build-essential cmake ninja-build pkg-config git
          libdlpack-dev libgflags-dev libgoogle-glog-dev libgtest-dev libgmock-dev
          libbenchmark-dev libgloo-dev libuv1-dev libssl-dev libcurl4-openssl-dev python3
          nlohmann-json3-dev  # JSON: etcd replies, traces, ccl_bench -J, conformance --json
          gdb)  # infini_run reads the stuck rank's stacks with it (docs/launcher.md)
# Not installed here (no build, demo or test needs it): python3-matplotlib,
# for scripts/trace_png.py's pictures of a trace.
# The tools of the tests (installed by `test`, so that the README's test
# command runs every test CI runs): schedulers and namespaces (tests/hosts), a
# real etcd (tests/etcd), clang for fuzzing and formatting (.ci/run). Where
# they are missing anyway the tests skip, naming what is missing.
ci_packages=(openmpi-bin slurm-wlm iproute2 etcd-server clang clang-format)

# install_missing PACKAGE...: apt-get installs those not installed yet.
install_missing() {
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dev.sh: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {
  # shellcheck disable=SC2086
  cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" ${CMAKE_ARGS:-}
  cmake --build "$build_dir" -j "$jobs"
}

run_tests() {
  # GPU tests are labelled "gpu" and need the device machine.
  ctest --test-dir "$build_dir" -LE gpu --output-on-failure --timeout 300 -j "$jobs"
}

run_demo() {
  local bin=$build_dir/bin
  "$bin/ccl_info" --ccl_backend=gloo
  if [ -x "$bin/infini_run" ] && [ -x "$bin/gpt2" ]; then
    "$bin/infini_run" --ccl_backend=gloo --nproc_per_node=2 "$bin/gpt2" --steps=10
  elif [ -x "$bin/infini_run" ] && [ -x "$bin/allreduce_demo" ]; then
    "$bin/infini_run" --ccl_backend=gloo --nproc_per_node=4 "$bin/allreduce_demo"
  fi
}

case "${1:-}" in
  demo) install_missing "${packages[@]}"; build; run_demo ;;
  test) install_missing "${packages[@]}" "${ci_packages[@]}"; build; run_tests ;;
  build) install_missing "${packages[@]}"; build ;;
  *) echo "usage: scripts/dev.sh demo|test|build" >&2; exit 2 ;;
esac
