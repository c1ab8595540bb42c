#!/bin/bash
# gpt2 d12 (GPT-2 124M) throughput on the GPUs, for the performance page:
# 1 GPU, 2 GPUs as 2x1 (two processes) and 1x2 (one process, two threads),
# each with the gradient reducer (overlap, the default), with one all-reduce
# after backward (--overlap=false) and with no gradient communication
# (--no_grad_sync), in bfloat16 and float32. Writes every run's log and a
# summary table (summary.txt) to LOG_DIR.
#
# usage: scripts/gpt2_gpu_bench.sh BUILD_DIR [LOG_DIR]
#   LOG_DIR defaults to $OUT (the device tool's output folder), else
#   BUILD_DIR/gpt2_bench.
# Environment: GPT2_BENCH_INPUT_BIN=FILE trains on a real token file (GPT-2
#   tokens); by default a file of uniformly random tokens is generated, which
#   costs the same per step. GPT2_BENCH_STEPS (default 40),
#   GPT2_BENCH_BATCH (default 8), GPT2_BENCH_SEQUENCE (default 1024: the
#   PyTorch DDP figures of issue 12 used micro-batch 8 and sequence 1024).
#   GPT2_BENCH_DTYPES (default "bfloat16 float32").
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
results=()  # "name|dtype|layout|sync|throughput line"

# run NAME DTYPE LAYOUT SYNC COMMAND...: one run, its log, its throughput line.
run() {
  local name=$1 dtype=$2 layout=$3 sync=$4
  shift 4
  local log="$logs/$name.log"
  echo "== $name: $*" | tee "$log"
  timeout -k 10 540 "$@" >>"$log" 2>&1
  local status=$?
  local line
  line=$(grep -o 'throughput: .*' "$log" | tail -1)
  if [[ $status -ne 0 || -z "$line" ]]; then
    echo "   FAILED (exit $status): see $log"
    tail -3 "$log"
    line="failed"
  else
    echo "   $line"
  fi
  results+=("$name|$dtype|$layout|$sync|$line")
}

for dtype in $dtypes; do
  run "${dtype}_1gpu" "$dtype" 1 local \
    "$gpt2" --ccl_backend=nccl --dtype="$dtype" $common
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

# Summary: scaling = per-GPU tokens/s against 1 GPU of the same dtype;
# exposed = step time against the same layout without communication.
field() { sed -n "s/.*[ :]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
{
  printf '%-28s %-8s %-6s %-15s %12s %12s %10s %8s %8s\n' run dtype layout grad_sync \
    tokens_per_s per_gpu step_ms scaling exposed
  for entry in "${results[@]}"; do
    IFS='|' read -r name dtype layout sync line <<<"$entry"
    if [[ "$line" == failed ]]; then
      printf '%-28s %-8s %-6s %-15s %12s\n' "$name" "$dtype" "$layout" "$sync" failed
      continue
    fi
    tps=$(field tokens_per_s "$line")
    per_gpu=$(field per_gpu "$line")
    step_ms=$(field step_ms "$line")
    single=""
    quiet=""
    for other in "${results[@]}"; do
      IFS='|' read -r oname odtype olayout osync oline <<<"$other"
      [[ "$oline" == failed ]] && continue
      if [[ "$odtype" == "$dtype" && "$olayout" == 1 ]]; then single=$(field per_gpu "$oline"); fi
      if [[ "$odtype" == "$dtype" && "$olayout" == "$layout" && "$osync" == none ]]; then
        quiet=$(field step_ms "$oline")
      fi
    done
    scaling=$(awk -v a="$per_gpu" -v b="$single" 'BEGIN { if (b > 0) printf "%.1f%%", 100 * a / b; else print "-" }')
    exposed="-"
    if [[ "$layout" != 1 && "$sync" != none && -n "$quiet" ]]; then
      exposed=$(awk -v a="$step_ms" -v b="$quiet" 'BEGIN { printf "%+.1f%%", 100 * (a / b - 1) }')
    fi
    printf '%-28s %-8s %-6s %-15s %12s %12s %10s %8s %8s\n' "$name" "$dtype" "$layout" "$sync" \
      "$tps" "$per_gpu" "$step_ms" "$scaling" "$exposed"
  done
} | tee "$logs/summary.txt"
grep -q failed "$logs/summary.txt" && exit 1
exit 0
