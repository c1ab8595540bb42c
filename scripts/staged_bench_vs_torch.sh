#!/bin/bash
# all_reduce busbw of staged InfiniCCL beside PyTorch's gloo on CUDA tensors,
# every rank on cuda:0, in one go: for 2, 4 and 8 ranks, ccl_bench (gloo
# staged through nccl; INFINI_CCL_STAGED_DEFER as the environment says) and
# `torchrun --standalone` of scripts/torch_gloo_cuda_bench.py, 1 MiB to
# 1 GiB, then gpt2 d12 with 8 ranks (tokens/s). Prints a table last.
#
# usage: scripts/staged_bench_vs_torch.sh BUILD_DIR [TORCHRUN]
#   TORCHRUN defaults to torchrun on PATH, else /opt/torch/.venv/bin/torchrun.
set -u
build=$(cd "$1" && pwd)
torchrun=${2:-$(command -v torchrun || echo /opt/torch/.venv/bin/torchrun)}
logs=${OUT:-$build/staged_bench}
mkdir -p "$logs"
export LD_LIBRARY_PATH="$build/lib:$build/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
run=$build/bin/infini_run
here=$(cd "$(dirname "$0")" && pwd)
. "$here/busbw_of.sh"
for ranks in 2 4 8; do
  timeout 200 "$run" --ccl_backend=gloo --device_backend=nccl --nproc_per_node=$ranks -- \
    "$build/bin/ccl_bench" --collectives=all_reduce --min_bytes=1M --max_bytes=1G \
    --iters=5 --warmup=2 >"$logs/ours_$ranks.log" 2>&1
  if [[ -x "$torchrun" ]]; then
    timeout 150 "$torchrun" --standalone --nproc_per_node=$ranks "$here/torch_gloo_cuda_bench.py" \
      >"$logs/torch_$ranks.log" 2>&1
  fi
done
if [[ -x "$build/bin/gpt2" && -x "$build/bin/make_token_bin" ]]; then
  awk 'BEGIN { srand(12); for (i = 0; i < 400000; i++) print int(rand() * 50257) }' \
    >"$logs/tokens.txt"
  "$build/bin/make_token_bin" --input="$logs/tokens.txt" --output="$logs/tokens.bin" \
    --input_format=ids >/dev/null
  rm -f "$logs/tokens.txt"
  timeout 200 "$run" --ccl_backend=gloo --device_backend=nccl --nproc_per_node=8 -- \
    "$build/bin/gpt2" --model=d12 --dtype=bfloat16 --input_bin="$logs/tokens.bin" \
    --sequence_length=1024 --num_iteration=10 --val_batches=0 --throughput_skip_steps=3 \
    --batch_size=1 >"$logs/gpt2_8.log" 2>&1
  grep -h "throughput:" "$logs/gpt2_8.log" | tail -1
fi
echo "all_reduce busbw (GB/s), every rank on cuda:0: ours (staged) / torch (gloo, CUDA tensors)"
printf "%12s %14s %14s %14s\n" size 2 4 8
for bytes in 1048576 4194304 16777216 67108864 268435456 1073741824; do
  row=$(printf "%12s" "$bytes")
  for ranks in 2 4 8; do
    ours=$(ccl_busbw "$logs/ours_$ranks.log" "$bytes")
    torch=$(torch_busbw "$logs/torch_$ranks.log" "$bytes")
    row+=$(printf " %14s" "$ours / $torch")
  done
  echo "$row"
done
