#!/usr/bin/env bash
# ctest for a sanitizer build: BUILD_DIR [ctest args...].
#
# LeakSanitizer's stop-the-world tracer sometimes crashes at a process's exit
# after every assertion passed ("Tracer caught signal 11 ... LeakSanitizer has
# encountered a fatal error"; google/sanitizers#1353, not a leak report). A
# failed test whose whole fault is that crash is run once more; any other
# failure, or the crash twice, fails CI.
set -euo pipefail
build_dir=$1
shift

ctest --test-dir "$build_dir" "$@" && exit 0

temporary=$build_dir/Testing/Temporary
mapfile -t failed < <(cut -d: -f2- "$temporary/LastTestsFailed.log")
tracer_only=()
for name in "${failed[@]}"; do
  # The test's own block of LastTest.log: from its "Testing:" line to its end time.
  block=$(awk -v name="$name" '
    $0 ~ /^[0-9]+\/[0-9]+ Testing: / { inside = (substr($0, index($0, "Testing: ") + 9) == name) }
    inside { print }
    inside && index($0, "\"" name "\" end time") == 1 { inside = 0 }' "$temporary/LastTest.log")
  if grep -q "LeakSanitizer has encountered a fatal error" <<<"$block" &&
    grep -q "Tracer caught signal" <<<"$block" &&
    ! grep -q "\[  FAILED  \]" <<<"$block"; then
    tracer_only+=("$name")
  else
    echo "ctest_sanitized: $name failed for a reason other than LSan's tracer crash" >&2
    exit 1
  fi
done

echo "ctest_sanitized: ${#tracer_only[@]} test(s) passed but LSan's tracer crashed at exit; running them once more: ${tracer_only[*]}"
ctest --test-dir "$build_dir" "$@" --rerun-failed
