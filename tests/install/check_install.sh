#!/usr/bin/env bash
# Installs a build into a fresh prefix, builds a consumer project against it
# with find_package(InfiniCCL), and runs it: what a framework does.
# usage: check_install.sh BUILD_DIR CONSUMER_SOURCE_DIR
set -euo pipefail
build=$1
consumer=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
output=$("$work/consumer/consumer")
echo "$output"
# The plugin must come from the installed prefix, found beside libinfini_ccl.so.
[[ "$output" == "loaded $work/prefix/lib/libinfini_ccl_gloo.so;"* ]]
