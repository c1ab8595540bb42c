#!/bin/bash
# A GPU trace for the docs (docs/tracing.md, "Device spans"): gpt2 on nccl
# under infini_run --trace_dir, rendered with scripts/trace_png.py into
# OUT/trace.png (the whole run) and OUT/trace_last_steps.png (its last
# quarter, where the steps' compute gaps and device spans are readable).
#
# usage: scripts/gpu_trace.sh BUILD_DIR OUT_DIR [--nproc=N]
#   N ranks on N GPUs (default 1: one rank all-reduces its loss each step;
#   2 also shows the gradient buckets). Needs python3-matplotlib.
#   Prints the span counts per category and the comm summary; exit status
#   non-zero when the run, the merge or the drawing failed.
set -u
if [[ $# -lt 2 || ! -d "$1" ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [--nproc=N]  (BUILD_DIR='${1:-}' is not a directory)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
out=$2
nproc=1
if [[ $# -ge 3 ]]; then
  if [[ "$3" =~ ^--nproc=([1-9][0-9]*)$ ]]; then
    nproc=${BASH_REMATCH[1]}
  else
    echo "$0: '$3': expected --nproc=N with N >= 1" >&2
    exit 2
  fi
fi
source_dir=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
if [[ -d "$build/devlibs" ]]; then
  export LD_LIBRARY_PATH="$build/lib:$build/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export NCCL_NVLS_ENABLE=0  # as scripts/gpu_check.sh: multicast off on shared hosts
# Every call's device span for the picture (the default samples 1 in 16).
export INFINI_CCL_TRACE_DEVICE_EVERY=${INFINI_CCL_TRACE_DEVICE_EVERY:-1}

# Small enough to take seconds, large enough that a step's compute shows
# as white between the collectives.
timeout --kill-after=10 300 "$build/bin/infini_run" --nproc_per_node="$nproc" --ccl_backend=nccl \
  --trace_dir="$out/trace" --comm_summary -- "$build/bin/gpt2" --num_iteration=10 --batch_size=4 \
  --num_layers=4 --num_heads=4 --channels=128 --sequence_length=128 --val_batches=1 \
  2>&1 | tee "$out/gpt2_trace.log"
status=${PIPESTATUS[0]}
if [[ $status -ne 0 || ! -f "$out/trace/trace.json" ]]; then
  echo "$0: the traced gpt2 run failed (exit $status); see $out/gpt2_trace.log" >&2
  exit 1
fi

python3 - "$out/trace/trace.json" <<'PY' || exit 1
import collections, json, sys
trace = json.load(open(sys.argv[1]))
spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
by_category = collections.Counter(e["cat"] for e in spans)
print("spans by category:", dict(sorted(by_category.items())))
if by_category["device"] == 0:
    sys.exit("gpu_trace.sh: no device spans in the trace (expected one per collective)")
PY

title="gpt2 on nccl, $nproc rank(s), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
python3 "$source_dir/scripts/trace_png.py" "$out/trace/trace.json" -o "$out/trace.png" \
  --title "$title" || exit 1
last_quarter=$(python3 -c '
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
end = max(e["ts"] + e["dur"] for e in events) / 1000.0
print(f"--from_ms={0.75 * end:.3f} --to_ms={end:.3f}")' "$out/trace/trace.json")
# shellcheck disable=SC2086  # two flags in one word, on purpose
python3 "$source_dir/scripts/trace_png.py" "$out/trace/trace.json" -o "$out/trace_last_steps.png" \
  --title "$title (last quarter)" $last_quarter || exit 1
echo "gpu_trace.sh: wrote $out/trace.png and $out/trace_last_steps.png"
