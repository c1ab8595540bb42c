#!/bin/bash
# gpt2 d12 (GPT-2 124M) throughput on the GPUs, for the performance page:
# 1 GPU, 2 GPUs as 2x1 (two processes) and 1x2 (one process, two threads),
# each with the gradient reducer (overlap, the default), with one all-reduce
# after backward (--overlap=false) and with no gradient communication
# (--no_grad_sync), in bfloat16 and float32; and, in the same call, PyTorch
# eager (scripts/torch_ddp_gpt2.py: 1 GPU, and DDP on 2 GPUs) on the same
# configuration when python3 can import torch. Every run's peak device
# memory is sampled with nvidia-smi (the most any one GPU held above its
# idle use, CUDA context included, the same way for both). Writes every
# run's log and a summary table (summary.txt) to LOG_DIR; `vs_torch` is the
# per-GPU tokens/s against PyTorch's of the same dtype and GPU count.
#
# usage: scripts/gpt2_gpu_bench.sh BUILD_DIR [LOG_DIR]
#   LOG_DIR defaults to $OUT (the device tool's output folder), else
#   BUILD_DIR/gpt2_bench.
# Environment: GPT2_BENCH_INPUT_BIN=FILE trains on a real token file (GPT-2
#   tokens); by default a file of uniformly random tokens is generated, which
#   costs the same per step. GPT2_BENCH_STEPS (default 40),
#   GPT2_BENCH_BATCH (default 8), GPT2_BENCH_SEQUENCE (default 1024: the
#   PyTorch DDP figures of issue 12 used micro-batch 8 and sequence 1024).
#   GPT2_BENCH_DTYPES (default "bfloat16 float32"). GPT2_BENCH_TORCH=0
#   leaves PyTorch out; GPT2_BENCH_PYTHON (default python3) runs it.
set -u

if [[ $# -lt 1 || ! -d "$1" ]]; then
  echo "usage: $0 BUILD_DIR [LOG_DIR]  (BUILD_DIR='${1:-}' is not a directory)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
logs=${2:-${OUT:-$build/gpt2_bench}}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
if [[ -d "$build/devlibs" ]]; then
  export LD_LIBRARY_PATH="$build/lib:$build/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# NVLink multicast can take a shared host's GPUs down: keep it off.
export NCCL_NVLS_ENABLE=0

gpt2="$build/bin/gpt2"
infini_run="$build/bin/infini_run"
steps=${GPT2_BENCH_STEPS:-40}
batch=${GPT2_BENCH_BATCH:-8}
sequence=${GPT2_BENCH_SEQUENCE:-1024}
dtypes=${GPT2_BENCH_DTYPES:-"bfloat16 float32"}
for program in "$gpt2" "$infini_run" "$build/bin/make_token_bin"; do
  if [[ ! -x "$program" ]]; then
    echo "$program is missing: build the gpt2, infini_run and make_token_bin targets" >&2
    exit 2
  fi
done

input=${GPT2_BENCH_INPUT_BIN:-}
if [[ -z "$input" ]]; then
  # 4M random GPT-2 token ids: ~4000 samples of 1024 tokens.
  input="$logs/random_tokens.bin"
  if [[ ! -f "$input" ]]; then
    awk 'BEGIN { srand(12); for (i = 0; i < 4000000; i++) print int(rand() * 50257) }' \
      >"$logs/random_tokens.txt"
    "$build/bin/make_token_bin" --input="$logs/random_tokens.txt" --output="$input" \
      --input_format=ids || exit 1
    rm -f "$logs/random_tokens.txt"
  fi
fi

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "gpt2 bench: $gpus GPU(s), d12, batch $batch x sequence $sequence, $steps steps, $input"

common="--model=d12 --input_bin=$input --batch_size=$batch --sequence_length=$sequence \
--num_iteration=$steps --val_batches=0 --throughput_skip_steps=5 --log_every=10"
results=()  # "name|dtype|layout|sync|peak MiB|throughput line"

# The most memory.used (MiB) of any GPU in a file of "index, MiB" samples.
max_used() { awk -F', *' '$2 + 0 > m { m = $2 + 0 } END { print m + 0 }' "$1"; }

# run NAME DTYPE LAYOUT SYNC COMMAND...: one run, its log, its throughput
# line and its peak device memory above the GPUs' idle use.
run() {
  local name=$1 dtype=$2 layout=$3 sync=$4
  shift 4
  local log="$logs/$name.log" samples="$logs/$name.memory.csv"
  echo "== $name: $*" | tee "$log"
  local idle
  idle=$(nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits 2>/dev/null |
    awk -F', *' '$2 + 0 > m { m = $2 + 0 } END { print m + 0 }')
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 100 \
    >"$samples" 2>/dev/null &
  local sampler=$!
  timeout -k 10 540 "$@" >>"$log" 2>&1
  local status=$?
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  local peak=$(($(max_used "$samples") - idle))
  local line
  line=$(grep -o 'throughput: .*' "$log" | tail -1)
  if [[ $status -ne 0 || -z "$line" ]]; then
    echo "   FAILED (exit $status): see $log"
    tail -3 "$log"
    line="failed"
  else
    echo "   $line peak_mib=$peak"
  fi
  results+=("$name|$dtype|$layout|$sync|$peak|$line")
}

python=${GPT2_BENCH_PYTHON:-python3}
torch_script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/torch_ddp_gpt2.py"
with_torch=0
if [[ "${GPT2_BENCH_TORCH:-1}" != 0 ]]; then
  if torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
    with_torch=1
    echo "PyTorch $torch_version ($python): measured beside ours"
  else
    echo "PyTorch: not measured ($python cannot import torch; GPT2_BENCH_PYTHON names another)"
  fi
fi
torch_flags="--batch_size=$batch --sequence_length=$sequence --steps=$steps --skip_steps=5"

for dtype in $dtypes; do
  run "${dtype}_1gpu" "$dtype" 1 local \
    "$gpt2" --ccl_backend=nccl --dtype="$dtype" $common
  if [[ $with_torch == 1 ]]; then
    run "torch_${dtype}_1gpu" "$dtype" 1 torch "$python" "$torch_script" --dtype="$dtype" \
      $torch_flags
    if [[ $gpus -ge 2 ]]; then
      run "torch_${dtype}_2x1_ddp" "$dtype" 2x1 torch "$python" -m torch.distributed.run \
        --standalone --nproc_per_node=2 "$torch_script" --dtype="$dtype" $torch_flags
    fi
  fi
  if [[ $gpus -ge 2 ]]; then
    for sync in overlap after_backward none; do
      case $sync in
        overlap) flag="" ;;
        after_backward) flag="--overlap=false" ;;
        none) flag="--no_grad_sync" ;;
      esac
      run "${dtype}_2x1_$sync" "$dtype" 2x1 "$sync" \
        "$infini_run" --ccl_backend=nccl --nproc_per_node=2 "$gpt2" --dtype="$dtype" $common $flag
      run "${dtype}_1x2_$sync" "$dtype" 1x2 "$sync" \
        "$infini_run" --ccl_backend=nccl --nproc_per_node=1 "$gpt2" --nthread_per_process=2 \
        --dtype="$dtype" $common $flag
    done
  fi
done

# Summary: scaling = per-GPU tokens/s against 1 GPU of the same dtype and
# implementation; exposed = step time against the same layout without
# communication; vs_torch = per-GPU tokens/s against PyTorch's of the same
# dtype and GPU count (1 GPU, or DDP on 2x1 for our 2x1 and 1x2).
field() { sed -n "s/.*[ :]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
implementation() { if [[ $1 == torch ]]; then echo torch; else echo ours; fi; }
gpu_count() { if [[ $1 == 1 ]]; then echo 1; else echo 2; fi; }
{
  printf '%-28s %-8s %-6s %-15s %12s %12s %10s %9s %8s %8s %9s\n' run dtype layout grad_sync \
    tokens_per_s per_gpu step_ms peak_mib scaling exposed vs_torch
  for entry in "${results[@]}"; do
    IFS='|' read -r name dtype layout sync peak line <<<"$entry"
    if [[ "$line" == failed ]]; then
      printf '%-28s %-8s %-6s %-15s %12s\n' "$name" "$dtype" "$layout" "$sync" failed
      continue
    fi
    tps=$(field tokens_per_s "$line")
    per_gpu=$(field per_gpu "$line")
    step_ms=$(field step_ms "$line")
    single=""
    quiet=""
    torch=""
    for other in "${results[@]}"; do
      IFS='|' read -r oname odtype olayout osync opeak oline <<<"$other"
      [[ "$oline" == failed || "$odtype" != "$dtype" ]] && continue
      # Ours against ours, PyTorch against PyTorch.
      if [[ "$olayout" == 1 && $(implementation "$osync") == $(implementation "$sync") ]]; then
        single=$(field per_gpu "$oline")
      fi
      if [[ "$olayout" == "$layout" && "$osync" == none ]]; then quiet=$(field step_ms "$oline"); fi
      if [[ "$osync" == torch && $(gpu_count "$olayout") == $(gpu_count "$layout") ]]; then
        torch=$(field per_gpu "$oline")
      fi
    done
    scaling=$(awk -v a="$per_gpu" -v b="$single" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * a / b; else print "-" }')
    exposed="-"
    if [[ "$layout" != 1 && "$sync" != none && "$sync" != torch && -n "$quiet" ]]; then
      exposed=$(awk -v a="$step_ms" -v b="$quiet" 'BEGIN { printf "%+.1f%%", 100 * (a / b - 1) }')
    fi
    vs_torch="-"
    if [[ "$sync" != torch && -n "$torch" ]]; then
      vs_torch=$(awk -v a="$per_gpu" -v b="$torch" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
    fi
    printf '%-28s %-8s %-6s %-15s %12s %12s %10s %9s %8s %8s %9s\n' "$name" "$dtype" "$layout" \
      "$sync" "$tps" "$per_gpu" "$step_ms" "$peak" "$scaling" "$exposed" "$vs_torch"
  done
} | tee "$logs/summary.txt"
grep -q failed "$logs/summary.txt" && exit 1
exit 0
