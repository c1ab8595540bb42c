#!/usr/bin/env bash
# Installs a build into a fresh prefix, builds a consumer project against it
# with find_package(InfiniCCL), and runs it: what a framework does. The
# consumer asks for no C++ standard (the exported targets carry C++20) and
# finds no dlpack package of its own (the install ships dlpack.h). Then
# examples/framework_adapter and examples/distributed_basics, built the same
# way from the installed package, run on gloo: two thread ranks, and four
# processes under the installed infini_run.
# usage: check_install.sh BUILD_DIR CONSUMER_SOURCE_DIR [EXAMPLES_SOURCE_DIR]
set -euo pipefail
build=$1
consumer=$2
examples=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs a step with its output in a log, shown only when the step fails.
quietly() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 || { cat "$log"; echo "FAILED: $*" >&2; return 1; }
}

quietly "$work/install.log" cmake --install "$build" --prefix "$work/prefix"
# The porting template is built in the tree but never installed beside the
# real backends.
if [[ -e "$work/prefix/lib/libinfini_ccl_template.so" ]]; then
  echo "FAILED: the install put the porting template into lib/" >&2
  exit 1
fi
# A machine without dlpack's package: CMAKE_DISABLE_FIND_PACKAGE_dlpack.
quietly "$work/configure.log" cmake -S "$consumer" -B "$work/consumer" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_dlpack=ON
quietly "$work/build.log" cmake --build "$work/consumer"
output=$("$work/consumer/consumer")
echo "$output"
# The plugin must come from the installed prefix, found beside libinfini_ccl.so.
[[ "$output" == "loaded $work/prefix/lib/libinfini_ccl_gloo.so;"* ]]

if [[ -n "$examples" ]]; then
  for example in framework_adapter distributed_basics; do
    quietly "$work/$example-configure.log" cmake -S "$examples/$example" -B "$work/$example" \
      -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_dlpack=ON
    quietly "$work/$example-build.log" cmake --build "$work/$example"
  done
  output=$(cd "$work" && INFINI_CCL_BACKEND=gloo "$work/framework_adapter/framework_adapter" \
    --nthread_per_process=2 --init=group)
  echo "$output"
  [[ "$output" == *"2 ranks (1 processes x 2 threads), backend gloo"*"all collectives correct"* ]]
  output=$(cd "$work" && INFINI_CCL_DEBUG=info "$work/prefix/bin/infini_run" --ccl_backend=gloo \
    --nproc_per_node=4 "$work/distributed_basics/distributed_basics" 2>&1)
  echo "$output"
  [[ $(grep -c 'barrier and new_group correct' <<< "$output") == 4 ]]
  if grep -F 'Logging before InitGoogleLogging' <<< "$output"; then
    echo "FAILED: glog's warning printed" >&2
    exit 1
  fi
fi
