#!/bin/bash
# Host-staged communicators on one GPU, in one go (~3 min): the launcher's
# one-line refusal of nccl with more ranks than GPUs, ccl_conformance
# --quick on gloo staged through nccl with 4 ranks on cuda:0, the same on a
# mixed job (3 ranks on cuda:0, 1 on the host), framework_adapter and
# device_groups_program with a backend per device type, and ccl_bench
# all_reduce busbw from 1 MiB to 1 GiB with 2, 4 and 8 ranks on cuda:0.
#
# usage: scripts/staged_gpu_check.sh BUILD_DIR [LOG_DIR]
#   BUILD_DIR holds bin/ (infini_run, ccl_info, ccl_conformance, ccl_bench)
#   and lib/ (libinfini_ccl*.so), and devlibs/ when carried from another
#   machine. LOG_DIR defaults to $OUT, else BUILD_DIR/staged_check. The
#   busbw table is printed last.
set -u
if [[ $# -lt 1 || ! -d "$1/bin" ]]; then
  echo "usage: $0 BUILD_DIR [LOG_DIR]  ('${1:-}' has no bin/)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
logs=${2:-${OUT:-$build/staged_check}}
mkdir -p "$logs"
export LD_LIBRARY_PATH="$build/lib:$build/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0  # NVLink multicast can take a shared host's GPUs down
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
run=$build/bin/infini_run
failed=0

echo "== nccl with 4 ranks on 1 GPU: one line from the launcher"
timeout 60 "$run" --ccl_backend=nccl --nproc_per_node=4 -- "$build/bin/ccl_info" \
  >"$logs/refusal.log" 2>&1
status=$?
cat "$logs/refusal.log"
lines=$(wc -l <"$logs/refusal.log")
if [[ $status -eq 0 || $lines -ne 1 ]] || ! grep -q -- "--device_backend=nccl" "$logs/refusal.log"; then
  echo "refusal: FAIL (exit $status, $lines lines)"
  failed=1
fi

echo "== ccl_conformance --quick, gloo staged through nccl, 4 ranks on cuda:0"
timeout 300 "$run" --ccl_backend=gloo --device_backend=nccl --nproc_per_node=4 -- \
  "$build/bin/ccl_conformance" --quick >"$logs/conformance.log" 2>&1
status=$?
grep -E "\[rank0\]:.*(FAIL|missing)|summary:" "$logs/conformance.log"
grep -q "summary:.* 0 FAIL" "$logs/conformance.log" && [[ $status -eq 0 ]] || failed=1

echo "== a mixed job: ranks 0-2 staged through nccl on cuda:0, rank 3 on the host"
timeout 300 "$run" --ccl_backend=gloo --device_backend=nccl,3:none --nproc_per_node=4 -- \
  "$build/bin/ccl_conformance" --quick >"$logs/mixed.log" 2>&1
status=$?
grep -E "\[rank0\]:.*(FAIL|missing)|summary:|mixed job" "$logs/mixed.log"
grep -q "summary:.* 0 FAIL" "$logs/mixed.log" && [[ $status -eq 0 ]] || failed=1

echo "== a backend per device type: host tensors on gloo, cuda tensors on nccl (1 rank) or staged (2)"
for spec in "1 cpu:gloo,cuda:nccl" "2 cpu:gloo,cuda:gloo+nccl"; do
  read -r ranks backends <<<"$spec"
  for program in framework_adapter device_groups_program; do
    [[ -x "$build/bin/$program" ]] || continue
    timeout 120 "$run" --ccl_backend="$backends" --nproc_per_node="$ranks" -- \
      "$build/bin/$program" >"$logs/per_type_${program}_$ranks.log" 2>&1 || failed=1
    grep -E "tensors|error|FAIL" "$logs/per_type_${program}_$ranks.log" | head -4
  done
done

for ranks in 2 4 8; do
  echo "== ccl_bench all_reduce, $ranks ranks on cuda:0"
  timeout 240 "$run" --ccl_backend=gloo --device_backend=nccl --nproc_per_node=$ranks -- \
    "$build/bin/ccl_bench" --collectives=all_reduce --min_bytes=1M --max_bytes=1G \
    --iters=5 --warmup=2 >"$logs/bench_$ranks.log" 2>&1 || failed=1
  grep "\[rank0\]" "$logs/bench_$ranks.log" | tail -8
done

echo
echo "all_reduce busbw (GB/s), gloo staged through nccl, every rank on cuda:0"
printf "%12s %8s %8s %8s\n" size 2 4 8
for bytes in 1048576 4194304 16777216 67108864 268435456 1073741824; do
  row=$(printf "%12s" "$bytes")
  for ranks in 2 4 8; do
    busbw=$(awk -v b="$bytes" '/^\[rank0\]:/ { sub(/^\[rank0\]:/, ""); if ($1 == b) v = $8 }
                               END { print (v == "" ? "-" : v) }' "$logs/bench_$ranks.log")
    row+=$(printf " %8s" "$busbw")
  done
  echo "$row"
done
exit $failed
