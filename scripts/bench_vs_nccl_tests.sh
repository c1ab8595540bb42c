#!/bin/bash
# On the GPU machine: ccl_bench beside nccl-tests' all_reduce_perf, the same
# command line, both tables printed and both JSONs kept (issue 22).
#
# usage: scripts/bench_vs_nccl_tests.sh [--registration] BUILD OUT [ALL_REDUCE_PERF]
#   BUILD: a build with the nccl backend (INFINI_CCL_BUILD_NCCL=ON).
#   OUT: where the JSONs and logs go (made if missing).
#   ALL_REDUCE_PERF: nccl-tests' binary (MPI=0 build); default
#     BUILD/nccl-tests/out/all_reduce_perf, skipped with a line when absent.
#   NGPUS (environment): ranks, one per GPU (default: the GPUs nvidia-smi
#     lists).
#
# The runs, all `-b 8 -e 1G -f 2` on NGPUS GPUs:
#   ccl_N1_RG   ccl_bench, N processes x 1 thread, -g 1 -R 1 -G 1  (issue 22's command)
#   ccl_N1      the same without -R and -G
#   ccl_N1_R    -R 1 only (registration's effect per size, against ccl_N1)
#   ccl_N1_G    -G 1 only (graph replay's effect per size, against ccl_N1)
#   ccl_1N_RG   1 process x N threads, -g N -R 1 -G 1 (nccl-tests' own layout
#               without MPI: one process, a GPU per thread)
#   nccl_RG     all_reduce_perf -g N -R 1 -G 1
#   nccl        all_reduce_perf -g N
# then a table of busbw per size of each JSON beside nccl-tests'.
#
# --registration: instead, registration's and graph replay's effect, all
# `-b 8 -e 1G -f 2 -g 1` (nccl-tests: -g NGPUS, its one-process layout):
# -R 0, 1, 2 (none, comm_register, symmetric window) x -G 0, 1 for
# ccl_bench and all_reduce_perf alike (ccl_R<r>G<g>, nccl_R<r>G<g>), then a
# block per size: time and busbw of each variant and its speed-up over
# -R 0 -G 0 (time of R0G0 / its time), and the link the plugin reports
# (ccl_info's "link:" line; the verdict's source is in each ccl log's title).
#   GPT2_STEPS (environment, with --registration on 2 GPUs or more): also
#   gpt2 d12 bf16 on 2 processes for that many steps with its reducer's
#   buckets registered and not (--register_buckets), and both throughput
#   lines.
set -u

registration=0
if [[ "${1:-}" == "--registration" ]]; then
  registration=1
  shift
fi
if [[ $# -lt 2 || ! -d "$1" ]]; then
  echo "usage: $0 [--registration] BUILD OUT [ALL_REDUCE_PERF]  (BUILD='${1:-}' is not a" \
    "directory)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
out=$(cd "$out" && pwd)
perf=${3:-$build/nccl-tests/out/all_reduce_perf}
ngpus=${NGPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
if [[ ! "$ngpus" =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: NGPUS='$ngpus': expected a GPU count of 1 or more (nvidia-smi found none)" >&2
  exit 2
fi
if [[ -d "$build/devlibs" ]]; then
  export LD_LIBRARY_PATH="$build/lib:$build/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# NVLink multicast can take a shared host's GPUs down: keep it off (the
# verdict then judges all_reduce without NVLink SHARP).
export NCCL_NVLS_ENABLE=0
sizes="-b 8 -e 1G -f 2"
failed=0

ccl() {  # NAME NPROC BENCH_FLAGS...
  local name=$1 nproc=$2
  shift 2
  echo "== $name: infini_run --nproc_per_node=$nproc -- ccl_bench $sizes $*"
  rm -f "$out/$name.json"
  "$build/bin/infini_run" --nproc_per_node="$nproc" --ccl_backend=nccl -- \
    "$build/bin/ccl_bench" $sizes "$@" -J "$out/$name.json" 2>&1 | tee "$out/$name.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || failed=1
}

nccl() {  # NAME FLAGS...
  local name=$1
  shift
  if [[ ! -x "$perf" ]]; then
    echo "== $name: '$perf' is not an executable; skipped"
    return
  fi
  echo "== $name: all_reduce_perf $sizes -g $ngpus $*"
  rm -f "$out/$name.json"
  "$perf" $sizes -g "$ngpus" "$@" -J "$out/$name.json" 2>&1 | tee "$out/$name.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || failed=1
}

if [[ $registration -eq 1 ]]; then
  "$build/bin/ccl_info" --ccl_backend=nccl | tee "$out/ccl_info.txt"
  # A first run on an idle GPU is slower (clocks, first-touch costs): one
  # short sweep of each tool first, not reported, so -R 0 -G 0 is not it.
  echo "== warm-up (not reported)"
  "$build/bin/infini_run" --nproc_per_node="$ngpus" --ccl_backend=nccl -- \
    "$build/bin/ccl_bench" -b 8 -e 1M -f 4 -g 1 >"$out/warmup_ccl.txt" 2>&1 || failed=1
  if [[ -x "$perf" ]]; then
    "$perf" -b 8 -e 1M -f 4 -g "$ngpus" >"$out/warmup_nccl.txt" 2>&1 || failed=1
  fi
  for r in 0 1 2; do
    for g in 0 1; do
      ccl "ccl_R${r}G${g}" "$ngpus" -g 1 -R "$r" -G "$g"
      nccl "nccl_R${r}G${g}" -R "$r" -G "$g"
    done
  done
  python3 - "$out" <<'EOF' || failed=1
import json, os, sys
out = sys.argv[1]
variants = ["R%dG%d" % (r, g) for r in (0, 1, 2) for g in (0, 1)]
def load(name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        results = json.load(f)["results"]
    table = {}
    for r in results:
        place = r.get("out_of_place") or r.get("in_place") or {}
        time, busbw = place.get("time"), place.get("bus_bw")
        if time not in (None, "nan") and busbw not in (None, "nan"):
            table[int(r["size"])] = (float(time), float(busbw))
    return table
tables = {(tool, v): load("%s_%s" % (tool, v)) for tool in ("ccl", "nccl") for v in variants}
with open(os.path.join(out, "ccl_info.txt")) as f:
    link = [line.strip() for line in f if line.startswith("link:")]
print("# " + (link[0] if link else "link: not reported (no get_link_bandwidth or no device)"))
print("# out of place; NCCL_NVLS_ENABLE=0; x = time of R0G0 / time (above 1: faster)")
sizes = sorted({s for t in tables.values() for s in t})
for size in sizes:
    print("%d bytes %14s %10s %6s | %14s %10s %6s" % (size, "ccl time(us)", "busbw", "x",
                                                     "nccl time(us)", "busbw", "x"))
    for v in variants:
        cells = []
        for tool in ("ccl", "nccl"):
            here, base = tables[(tool, v)].get(size), tables[(tool, "R0G0")].get(size)
            if here is None:
                cells.append("%14s %10s %6s" % ("-", "-", "-"))
                continue
            ratio = "%.2f" % (base[0] / here[0]) if base and here[0] > 0 else "-"
            cells.append("%14.2f %10.2f %6s" % (here[0], here[1], ratio))
        print("  -R %s -G %s %s | %s" % (v[1], v[3], cells[0], cells[1]))
EOF
  if [[ ${GPT2_STEPS:-0} -gt 0 && $ngpus -ge 2 && -x "$build/bin/gpt2" ]]; then
    for registered in true false; do
      name=gpt2_register_$registered
      echo "== $name: infini_run --nproc_per_node=2 -- gpt2 --model=d12 --dtype=bfloat16" \
        "--num_iteration=$GPT2_STEPS --val_batches=0 --register_buckets=$registered"
      "$build/bin/infini_run" --nproc_per_node=2 --ccl_backend=nccl -- "$build/bin/gpt2" \
        --model=d12 --dtype=bfloat16 --num_iteration="$GPT2_STEPS" --val_batches=0 \
        --register_buckets=$registered >"$out/$name.txt" 2>&1 || failed=1
    done
    for registered in true false; do
      echo "# gpt2 --register_buckets=$registered: $(grep -h 'throughput:' \
        "$out/gpt2_register_$registered.txt" | tail -1)"
    done
  fi
  exit $failed
fi

ccl ccl_N1_RG "$ngpus" -g 1 -R 1 -G 1
ccl ccl_N1 "$ngpus" -g 1
ccl ccl_N1_R "$ngpus" -g 1 -R 1
ccl ccl_N1_G "$ngpus" -g 1 -G 1
ccl ccl_1N_RG 1 -g "$ngpus" -R 1 -G 1

nccl nccl_RG -R 1 -G 1
nccl nccl

# busbw (GB/s) per size of every JSON, side by side (both are nccl-tests'
# schema: results[].size and out_of_place.bus_bw).
python3 - "$out" <<'EOF' || failed=1
import json, os, sys
out = sys.argv[1]
names = ["ccl_N1_RG", "ccl_N1", "ccl_N1_R", "ccl_N1_G", "ccl_1N_RG", "nccl_RG", "nccl"]
tables = {}
for name in names:
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        continue
    with open(path) as f:
        results = json.load(f)["results"]
    tables[name] = {r["size"]: (r.get("out_of_place") or r.get("in_place") or {}).get("bus_bw")
                    for r in results}
sizes = sorted({size for table in tables.values() for size in table})
print("# busbw (GB/s), out of place; NCCL_NVLS_ENABLE=0")
print("%12s" % "size" + "".join("%11s" % name for name in tables))
for size in sizes:
    cells = []
    for table in tables.values():
        value = table.get(size)
        cells.append("%11s" % ("-" if value in (None, "nan") else "%.2f" % float(value)))
    print("%12d" % size + "".join(cells))
EOF
exit $failed
