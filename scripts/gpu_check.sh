#!/bin/bash
# Everything that needs GPUs, from an existing build, in one go (~10 min):
# the GPU tests, the conformance suite on nccl (1x1, and 2x1 and 1x2 on two GPUs), the direct-NCCL
# vs plugin benchmark (thread and process layouts), the collective benchmark,
# and launch-to-first-all-reduce.
#
# usage: scripts/gpu_check.sh [--quick] BUILD_DIR [LOG_DIR]
#   --quick: only what checks correctness (~4 min): the GPU tests, the
#   conformance suite and one launch-to-first-all-reduce; no benchmarks.
#   LOG_DIR defaults to $OUT (the device tool's output folder), else
#   BUILD_DIR/gpu_check. Every step's log lands there; a summary table is
#   printed last. A failed step is recorded and the script goes on; the exit
#   status is non-zero when any step failed.
#
# The build may have been made on another machine and carried here: the
# paths recorded in its CTest files are rewritten to where it is now.
set -u

quick=0
if [[ "${1:-}" == --quick ]]; then
  quick=1
  shift
fi
if [[ $# -lt 1 || ! -d "$1" ]]; then
  echo "usage: $0 [--quick] BUILD_DIR [LOG_DIR]  (BUILD_DIR='${1:-}' is not a directory)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
source_dir=$(cd "$(dirname "$0")/.." && pwd)
logs=${2:-${OUT:-$build/gpu_check}}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)

if [[ -d "$build/devlibs" ]]; then
  export LD_LIBRARY_PATH="$build/lib:$build/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# NVLink multicast can take a shared host's GPUs down: keep it off. Every
# other NCCL_* variable passes through untouched.
export NCCL_NVLS_ENABLE=0

# A carried build still names the machine it was configured on.
old_build=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null)
old_source=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null)
if [[ -n "$old_build" && "$old_build" != "$build" ]]; then
  find "$build" \( -name CTestTestfile.cmake -o -name '*_tests.cmake' -o -name '*_include.cmake' \) \
    -print0 | xargs -0 -r sed -i -e "s#$old_build#$build#g" -e "s#$old_source#$source_dir#g"
  echo "rewrote CTest paths: $old_build -> $build, $old_source -> $source_dir"
fi

steps=()     # "name|status|seconds|log"

now_ns() { date +%s%N; }
# Seconds since a now_ns value, two decimals (awk: bc may be missing).
seconds_since() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }
failed=0

# run_step NAME TIMEOUT_S COMMAND...: runs with a time limit, logs to
# $logs/NAME.log (and the terminal), records the outcome.
run_step() {
  local name=$1 limit=$2
  shift 2
  local log="$logs/$name.log"
  echo "=== $name: $*" | tee "$log"
  local started=$(now_ns)
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
  local status=${PIPESTATUS[0]}
  local seconds=$(seconds_since "$started")
  local outcome=ok
  if [[ $status -eq 124 || $status -eq 137 ]]; then
    outcome="TIMEOUT(${limit}s)"
    failed=1
  elif [[ $status -ne 0 ]]; then
    outcome="FAILED($status)"
    failed=1
  fi
  steps+=("$name|$outcome|$seconds|$log")
  echo "=== $name: $outcome in $seconds s" | tee -a "$log"
}

skip_step() {
  steps+=("$1|skipped|-|$2")
  echo "=== $1: skipped ($2)"
}

run_step gpus 30 nvidia-smi -L
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

run_step ccl_info 30 "$build/bin/ccl_info" --ccl_backend=nccl --capabilities
run_step ctest_gpu 420 ctest --test-dir "$build" -L gpu --output-on-failure --timeout 120

# The porting kit's verdict on nccl: one rank on one GPU, then both 2-rank
# layouts where there are two GPUs.
infini_run="$build/bin/infini_run"
if [[ -x "$infini_run" && -x "$build/bin/ccl_conformance" && $gpus -ge 1 ]]; then
  run_step conformance_nccl_1x1 240 "$infini_run" --ccl_backend=nccl --nproc_per_node=1 -- \
    "$build/bin/ccl_conformance" --json="$logs/conformance_nccl_1x1.json"
else
  skip_step conformance_nccl_1x1 "needs bin/infini_run, bin/ccl_conformance and a GPU"
fi
if [[ -x "$infini_run" && -x "$build/bin/ccl_conformance" && $gpus -ge 2 ]]; then
  run_step conformance_nccl_2x1 240 "$infini_run" --ccl_backend=nccl --nproc_per_node=2 -- \
    "$build/bin/ccl_conformance" --json="$logs/conformance_nccl_2x1.json"
  run_step conformance_nccl_1x2 240 "$infini_run" --ccl_backend=nccl --nproc_per_node=1 -- \
    "$build/bin/ccl_conformance" --nthread_per_process=2 --json="$logs/conformance_nccl_1x2.json"
else
  skip_step conformance_nccl "needs bin/infini_run, bin/ccl_conformance and 2 GPUs"
fi

if [[ $quick -eq 1 ]]; then
  skip_step benchmarks "--quick"
elif [[ -x "$build/bin/nccl_overhead_bench" ]]; then
  run_step nccl_overhead_threads 180 "$build/bin/nccl_overhead_bench"
else
  skip_step nccl_overhead_threads "no $build/bin/nccl_overhead_bench"
fi

if [[ $quick -eq 1 ]]; then
  :
elif [[ -x "$infini_run" && -x "$build/bin/nccl_overhead_bench" && $gpus -ge 2 ]]; then
  run_step nccl_overhead_processes 150 "$infini_run" --nproc_per_node="$gpus" -- \
    "$build/bin/nccl_overhead_bench" --collectives=all_reduce --max_bytes=$((256 << 20)) \
    --host_calls=2000
else
  skip_step nccl_overhead_processes "needs bin/infini_run and 2 GPUs"
fi

# ccl_bench in both 2-rank layouts (processes x threads), timed, then checked.
if [[ $quick -eq 1 ]]; then
  :
elif [[ -x "$infini_run" && -x "$build/bin/ccl_bench" && $gpus -ge 2 ]]; then
  for layout in "2 1" "1 2"; do
    read -r processes threads <<<"$layout"
    name="ccl_bench_${processes}x${threads}"
    run_step "$name" 150 "$infini_run" --ccl_backend=nccl --nproc_per_node="$processes" -- \
      "$build/bin/ccl_bench" --threads_per_process="$threads" --collectives=all \
      --min_bytes=8 --max_bytes=256M --iters=20 --warmup=5 --benchmark_out="$logs/$name.json"
    run_step "${name}_check" 90 "$infini_run" --ccl_backend=nccl --nproc_per_node="$processes" -- \
      "$build/bin/ccl_bench" --threads_per_process="$threads" --collectives=all \
      --max_bytes=16M --iters=2 --warmup=1 --check
  done
else
  skip_step ccl_bench "needs bin/infini_run, bin/ccl_bench and 2 GPUs"
fi

# Launch to first all-reduce: the wall time of the whole infini_run. The
# first run pays for cold caches; the others are what a user sees.
first_times=()
if [[ -x "$infini_run" && -x "$build/bin/first_allreduce" && $gpus -ge 2 ]]; then
  attempts=3
  [[ $quick -eq 1 ]] && attempts=1
  for ((attempt = 1; attempt <= attempts; ++attempt)); do
    started=$(now_ns)
    run_step "first_allreduce_$attempt" 90 "$infini_run" --ccl_backend=nccl --nproc_per_node=2 \
      -- "$build/bin/first_allreduce" --launched_at_ns="$started" --phases
    first_times+=("$(seconds_since "$started")")
  done
else
  skip_step first_allreduce "needs bin/infini_run, bin/first_allreduce and 2 GPUs"
fi

echo
echo "================ gpu_check summary ($gpus GPUs, logs in $logs) ================"
printf '%-26s %-22s %8s  %s\n' step status seconds log
for entry in "${steps[@]}"; do
  IFS='|' read -r name outcome seconds log <<<"$entry"
  printf '%-26s %-22s %8s  %s\n' "$name" "$outcome" "$seconds" "$log"
done
if [[ ${#first_times[@]} -gt 0 ]]; then
  echo "launch to first all_reduce (infini_run --ccl_backend=nccl --nproc_per_node=2), s: ${first_times[*]}"
fi
if [[ -f "$logs/nccl_overhead_threads.log" ]]; then
  grep -A5 '^## Host time' "$logs/nccl_overhead_threads.log"
fi
[[ -f "$logs/ctest_gpu.log" ]] && grep -E 'tests passed|tests failed' "$logs/ctest_gpu.log"
exit $failed
