#!/bin/bash
# Host-staged communicators on one GPU, in one go (~3 min): the launcher's
# one-line refusal of nccl with more ranks than GPUs, ccl_conformance
# --quick on gloo staged through nccl with 4 ranks on cuda:0, the same on a
# mixed job (3 ranks on cuda:0, 1 on the host), proxied calls (a rank's
# calls return while its peer is late; also with a cudaFree while they are
# in flight), framework_adapter and
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
. "$(dirname "$0")/busbw_of.sh"
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

# Proxied calls (INFINI_CCL_STAGED_DEFER=1: ranks sharing one GPU are
# inline by default): rank 0 issues at once and its stream is done after
# its peer woke; then the same with a device buffer freed while the calls
# are in flight (cudaFree synchronizes the device), in 4 KiB chunks through
# the shared segment.
echo "== proxied calls: 2 ranks on cuda:0, rank 1 starts its 20 all_reduces 3 s late"
if [[ -x "$build/bin/deferred_call_program" ]]; then
  for variant in "plain" "free INFINI_CCL_STAGED_CHUNK_BYTES=4096 --free_after_issue=1"; do
    read -r name chunk flag <<<"$variant"
    env INFINI_CCL_STAGED_DEFER=1 ${chunk:-} timeout 120 "$run" --ccl_backend=gloo --device_backend=nccl \
      --nproc_per_node=2 -- "$build/bin/deferred_call_program" --calls=20 --late_rank=1 \
      --late_ms=3000 ${flag:-} >"$logs/deferred_$name.log" 2>&1 || failed=1
    grep "deferred_call:" "$logs/deferred_$name.log"
    issued=$(sed -n 's/.*rank 0 issued 20 calls in \([0-9]*\) ms, done after \([0-9]*\) ms, sums right.*/\1 \2/p' \
      "$logs/deferred_$name.log")
    read -r issued_ms done_ms <<<"${issued:-x x}"
    if [[ "$issued_ms" == x || "$issued_ms" -ge 1500 || "$done_ms" -lt 2000 ]]; then
      echo "proxied ($name): FAIL (rank 0 should issue at once and finish after its peer)"
      failed=1
    else
      echo "proxied ($name): pass (rank 0 issued 20 calls in $issued_ms ms, its stream done after $done_ms ms)"
    fi
  done
fi

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

# gpt2 d12 with 8 ranks on cuda:0 against 1 rank with the same global batch
# (8 x 1 against 1 x 8 samples of 1024 tokens, random tokens): tokens/s of
# each, and the first steps' losses side by side.
if [[ -x "$build/bin/gpt2" && -x "$build/bin/make_token_bin" ]]; then
  tokens="$logs/random_tokens.bin"
  awk 'BEGIN { srand(12); for (i = 0; i < 400000; i++) print int(rand() * 50257) }' \
    >"$logs/random_tokens.txt"
  "$build/bin/make_token_bin" --input="$logs/random_tokens.txt" --output="$tokens" \
    --input_format=ids >/dev/null || failed=1
  rm -f "$logs/random_tokens.txt"
  d12="--model=d12 --dtype=bfloat16 --input_bin=$tokens --sequence_length=1024 --num_iteration=12 \
--val_batches=0 --throughput_skip_steps=3 --log_every=1"
  echo "== gpt2 d12 bf16, 1 rank x 8 samples on cuda:0"
  timeout 300 "$build/bin/gpt2" --ccl_backend=nccl $d12 --batch_size=8 >"$logs/gpt2_1.log" 2>&1 ||
    failed=1
  echo "== gpt2 d12 bf16, 8 ranks x 1 sample on cuda:0 (staged)"
  timeout 400 "$run" --ccl_backend=gloo --device_backend=nccl --nproc_per_node=8 -- \
    "$build/bin/gpt2" $d12 --batch_size=1 >"$logs/gpt2_8.log" 2>&1 || failed=1
  for n in 1 8; do
    grep -h "throughput:" "$logs/gpt2_$n.log" | tail -1
  done
  paste <(grep -o "step *[0-9]*/12 | loss [0-9.]*" "$logs/gpt2_1.log" | head -6) \
    <(grep -o "loss [0-9.]*" "$logs/gpt2_8.log" | head -6)
fi

# gpt2's CUDA path admits a replacement (--on_failure=shrink): 3 loopback
# nodes of one rank each on cuda:0, node 2's launcher SIGKILLed at step 3
# and started again; the survivors shrink, then admit it at a step boundary.
if [[ -x "$build/bin/gpt2" ]]; then
  echo "== gpt2 on cuda:0, 3 nodes x 1 rank (staged), node 2 killed and replaced"
  port=$((29000 + RANDOM % 1000))
  node() {
    INFINI_TEST_GPT2_STEP_DELAY_MS=150 exec "$run" --nnodes=3 --node_rank="$1" --nproc_per_node=1 \
      --ccl_backend=gloo --device_backend="${STAGED_DEVICE_BACKEND:-nccl}" \
      --rdzv_endpoint=127.0.0.1:$port \
      --rdzv_id=staged-replace --rdzv_timeout=60 --rdzv_conf=heartbeat_timeout=1 \
      --on_failure=shrink --term_timeout=2 -- "$build/bin/gpt2" --steps=40 --batch_size=2 \
      --channels=32 --sequence_length=32 --val_batches=1 >"$logs/replace_$2.log" 2>&1
  }
  node 0 node0 & n0=$!
  node 1 node1 & n1=$!
  node 2 node2 & n2=$!
  for _ in $(seq 600); do grep -q "step    3/" "$logs/replace_node0.log" && break; sleep 0.1; done
  kill -9 "$n2"
  for _ in $(seq 300); do grep -q "published as lost" "$logs/replace_node0.log" && break; sleep 0.1; done
  node 2 replacement & n3=$!
  status=0
  for pid in $n0 $n1 $n3; do wait "$pid" || status=1; done
  grep -hE "lost rank|admitted rank|throughput:" "$logs/replace_node0.log"
  if [[ $status -ne 0 ]] || ! grep -q "admitted rank(s) 3" "$logs/replace_node0.log"; then
    echo "replacement: FAIL"
    failed=1
  else
    echo "replacement: pass (the replacement's ranks admitted on the CUDA path, every launcher exit 0)"
  fi
fi

echo
echo "all_reduce busbw (GB/s), gloo staged through nccl, every rank on cuda:0"
printf "%12s %8s %8s %8s\n" size 2 4 8
for bytes in 1048576 4194304 16777216 67108864 268435456 1073741824; do
  row=$(printf "%12s" "$bytes")
  for ranks in 2 4 8; do
    row+=$(printf " %8s" "$(ccl_busbw "$logs/bench_$ranks.log" "$bytes")")
  done
  echo "$row"
done
exit $failed
