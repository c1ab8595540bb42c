#!/bin/bash
# Launch to first all-reduce on this machine's GPUs, under launch variants:
# each variant REPEATS times (default 3), the infini_run wall time and rank
# 0's phases (first_allreduce --phases). NCCL_NVLS_ENABLE stays 0.
#   scripts/launch_latency.sh BUILD_DIR [REPEATS]
set -u
build=$(cd "${1:?usage: $0 BUILD_DIR [REPEATS]}" && pwd)
repeats=${2:-3}
export NCCL_NVLS_ENABLE=0
[[ -d "$build/devlibs" ]] && export LD_LIBRARY_PATH="$build/lib:$build/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
processes=${PROCESSES:-$gpus}

run_variant() {
  local name=$1
  shift
  for ((i = 1; i <= repeats; ++i)); do
    local started=$(date +%s%N)
    local output
    output=$(env "$@" "$build/bin/infini_run" --ccl_backend=nccl --nproc_per_node="$processes" \
      $LAUNCH_FLAGS -- "$build/bin/first_allreduce" --launched_at_ns="$started" --phases 2>&1)
    local status=$?
    local wall=$(awk -v a="$started" -v b="$(date +%s%N)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    local done_line=$(grep -o 'after the launch' <<<"$output" >/dev/null && grep -o '[0-9.]* s after the launch' <<<"$output" | head -1)
    local phases=$(grep '^\[rank0\]:rank 0 phases' <<<"$output" | sed 's/^\[rank0\]:rank 0 phases: //')
    printf '%-34s run %d  status %d  infini_run %ss  first all_reduce %s  | %s\n' \
      "$name" "$i" "$status" "$wall" "${done_line:-?}" "$phases"
    [[ $status -ne 0 ]] && echo "$output" | tail -5
  done
}

LAUNCH_FLAGS="" run_variant "default" X=1
LAUNCH_FLAGS="--isolate_devices" run_variant "--isolate_devices" X=1
LAUNCH_FLAGS="" run_variant "NCCL_CUMEM_ENABLE=0" NCCL_CUMEM_ENABLE=0
LAUNCH_FLAGS="--isolate_devices" run_variant "--isolate_devices NCCL_CUMEM_ENABLE=0" NCCL_CUMEM_ENABLE=0
