#!/usr/bin/env bash
# Installs a build into a fresh prefix, copies the porting template out of
# the tree, builds it there with find_package(InfiniCCL COMPONENTS plugin),
# and loads it with the installed ccl_info: what a vendor does.
# usage: check_plugin_out_of_tree.sh BUILD_DIR TEMPLATE_SOURCE_DIR
set -euo pipefail
build=$1
template=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs a step with its output in a log, shown only when the step fails.
quietly() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 || { cat "$log"; echo "FAILED: $*" >&2; return 1; }
}

# Fails, saying why.
fail() {
  echo "FAILED: $*" >&2
  exit 1
}

quietly "$work/install.log" cmake --install "$build" --prefix "$work/prefix"
cp -r "$template" "$work/plugin"
quietly "$work/configure.log" cmake -S "$work/plugin" -B "$work/plugin/build" \
  -DCMAKE_PREFIX_PATH="$work/prefix"
quietly "$work/build.log" cmake --build "$work/plugin/build"
plugin=$work/plugin/build/libinfini_ccl_template.so
[[ -f "$plugin" ]] || fail "no $plugin"

# The plugin kit looks up no dependency of the libraries: a find_package of
# glog or gflags would leave its <name>_DIR in the cache.
if grep -iE '^(glog|gflags)_DIR' "$work/plugin/build/CMakeCache.txt"; then
  fail "configuring the plugin looked for glog/gflags"
fi
# And the plugin links neither them nor libinfini_ccl: it is loaded by it.
needed=$(readelf -d "$plugin" | grep NEEDED || true)
echo "$needed"
if grep -E 'libglog|libgflags|libinfini_ccl' <<< "$needed"; then
  fail "the plugin links a library of InfiniCCL's or its dependencies"
fi

# The template loads, says what it is and lists what is left, in its own
# words (docs/porting.md, step 1): the text comes from inside the plugin.
output=$("$work/prefix/bin/ccl_info" --ccl_backend="$plugin" 2>&1 || true)
echo "$output"
grep -qF 'template: implement get_device_count' <<< "$output" ||
  fail "ccl_info did not load $plugin"
grep -qF 'left to implement:' <<< "$output" || fail "ccl_info listed nothing left to implement"

# Installed beside libinfini_ccl.so with an RPATH of $ORIGIN (a vendor
# library beside it, or in a linked directory, is found without
# LD_LIBRARY_PATH), and found there by name.
quietly "$work/plugin-install.log" cmake --install "$work/plugin/build" --prefix "$work/prefix"
installed=$work/prefix/lib/libinfini_ccl_template.so
[[ -f "$installed" ]] || fail "no $installed"
runpath=$(readelf -d "$installed" | grep -E 'RUNPATH|RPATH' || true)
echo "$runpath"
grep -qF '[$ORIGIN' <<< "$runpath" || fail "the installed plugin has no \$ORIGIN RPATH"
output=$("$work/prefix/bin/ccl_info" --ccl_backend=template 2>&1 || true)
grep -qF "library:      $installed" <<< "$output" ||
  fail "ccl_info --ccl_backend=template did not find $installed: $output"
