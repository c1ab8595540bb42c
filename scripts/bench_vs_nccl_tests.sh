#!/bin/bash
# On the GPU machine: ccl_bench beside nccl-tests' all_reduce_perf, the same
# command line, both tables printed and both JSONs kept (issue 22).
#
# usage: scripts/bench_vs_nccl_tests.sh BUILD OUT [ALL_REDUCE_PERF]
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
set -u

if [[ $# -lt 2 || ! -d "$1" ]]; then
  echo "usage: $0 BUILD OUT [ALL_REDUCE_PERF]  (BUILD='${1:-}' is not a directory)" >&2
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

ccl ccl_N1_RG "$ngpus" -g 1 -R 1 -G 1
ccl ccl_N1 "$ngpus" -g 1
ccl ccl_N1_R "$ngpus" -g 1 -R 1
ccl ccl_N1_G "$ngpus" -g 1 -G 1
ccl ccl_1N_RG 1 -g "$ngpus" -R 1 -G 1

if [[ -x "$perf" ]]; then
  for variant in "nccl_RG:-R 1 -G 1" "nccl:"; do
    name=${variant%%:*}
    flags=${variant#*:}
    echo "== $name: all_reduce_perf $sizes -g $ngpus $flags"
    rm -f "$out/$name.json"
    # shellcheck disable=SC2086
    "$perf" $sizes -g "$ngpus" $flags -J "$out/$name.json" 2>&1 | tee "$out/$name.txt"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || failed=1
  done
else
  echo "== nccl-tests: '$perf' is not an executable; only ccl_bench ran"
fi

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
