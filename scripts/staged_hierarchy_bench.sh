#!/bin/bash
# Flat against hierarchical all_reduce on CPUs (docs/ccl.md, "Hierarchical
# all_reduce"): a mixed job of two islands and a host rank,
# --device_backend=0:arena,1:arena,2:arenab,3:arenab,4:none, ccl_bench
# float32 sum from 1 KiB to 64 MiB, INFINI_CCL_STAGED_HIERARCHY_BYTES=never
# (flat) and =0 (hierarchical), with shared memory among the ranks (the
# default) and through gloo's sockets (INFINI_CCL_STAGED_SHM=0), REPEATS
# alternating runs each. Prints a table of the median time per call (us).
#
# usage: scripts/staged_hierarchy_bench.sh BUILD_DIR [REPEATS]
set -u
if [[ $# -lt 1 || ! -d "$1/bin" ]]; then
  echo "usage: $0 BUILD_DIR [REPEATS]  ('${1:-}' has no bin/)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
repeats=${2:-3}
arena=$build/tests/device_plugins/libinfini_ccl_arena.so
arenab=$build/tests/device_plugins/libinfini_ccl_arenab.so
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((rep = 1; rep <= repeats; ++rep)); do
  for shm in shared sockets; do
    for hierarchy in never 0; do
      shm_value=""
      [[ $shm == sockets ]] && shm_value=0
      env INFINI_CCL_STAGED_SHM=$shm_value INFINI_CCL_STAGED_HIERARCHY_BYTES=$hierarchy \
        timeout 300 "$build/bin/infini_run" --ccl_backend=gloo \
        --device_backend="0:$arena,1:$arena,2:$arenab,3:$arenab,4:none" --nproc_per_node=5 -- \
        "$build/bin/ccl_bench" -b 1K -e 64M -f 4 -n 10 -w 3 --link=none 2>&1 |
        awk -v column="$shm/$hierarchy" '/^\[rank0\]:? +[0-9]/ {print column, $2, $7}' >>"$results"
    done
  done
done
python3 - "$results" <<'PYTHON'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    column, size, time = line.split()
    times.setdefault((int(size), column), []).append(float(time))
columns = ["shared/never", "shared/0", "sockets/never", "sockets/0"]
print("| bytes | flat, shared memory | hierarchical | flat, sockets (SHM=0) | hierarchical, SHM=0 |")
print("|---:|---:|---:|---:|---:|")
for size in sorted({size for size, _ in times}):
    cells = ["%.0f" % statistics.median(times[(size, c)]) if (size, c) in times else "-"
             for c in columns]
    print("| %d | %s |" % (size, " | ".join(cells)))
PYTHON
