#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) with clang in their own build folder
# (configured with the rendezvous layer only; only the harnesses are built)
# and runs each for SECONDS (default 60) from its seed corpus:
#   scripts/fuzz.sh [seconds]
# New inputs go to a temporary folder (the repository's corpus is only read);
# a crash leaves its input under $FUZZ_BUILD_DIR/artifacts/ and fails the script.
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (default: CPU count;
# also how many harnesses run at once).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
build_dir=${FUZZ_BUILD_DIR:-$here/build-fuzz}
jobs=${JOBS:-$(nproc)}
harnesses=(store_frame_fuzz store_table_fuzz store_server_fuzz command_line_fuzz env_reader_fuzz
  run_record_fuzz)

case "$seconds" in
  '' | *[!0-9]*) echo "fuzz.sh: seconds='$seconds': expected a whole number of seconds" >&2; exit 2 ;;
esac

cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DINFINI_CCL_BUILD_FUZZ=ON \
  -DINFINI_CCL_ONLY=rendezvous -DINFINI_CCL_BUILD_TESTS=OFF -DINFINI_CCL_BUILD_BENCH=OFF \
  -DINFINI_CCL_BUILD_EXAMPLES=OFF -DINFINI_CCL_BUILD_NCCL=OFF >/dev/null
cmake --build "$build_dir" -j "$jobs" --target "${harnesses[@]}"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build_dir/artifacts"
# run HARNESS: fuzzes it for SECONDS; its exit status goes to $scratch/HARNESS.status.
run() {
  local harness=$1 status=0
  mkdir -p "$scratch/$harness"
  "$build_dir/bin/$harness" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$build_dir/artifacts/$harness-" \
    "$scratch/$harness" "$here/fuzz/corpus/$harness" >"$scratch/$harness.log" 2>&1 || status=$?
  echo "$status" >"$scratch/$harness.status"
}

# As many harnesses at once as JOBS (each is one process on one core), then
# each one's figures in order; the first that failed fails the script.
running=0
for harness in "${harnesses[@]}"; do
  echo "fuzz.sh: $harness for ${seconds}s"
  run "$harness" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
for harness in "${harnesses[@]}"; do
  status=$(cat "$scratch/$harness.status")
  echo "fuzz.sh: $harness"
  grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$scratch/$harness.log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$scratch/$harness.log" >&2
    echo "fuzz.sh: $harness failed (exit $status); input under $build_dir/artifacts/" >&2
    exit 1
  fi
done
