#!/usr/bin/env bash
# infini_run's start-up cost: wall time from starting `infini_run
# --nproc_per_node=N -- /bin/true` to its exit, for N no-op ranks, repeated,
# beside the same N no-op processes started and reaped by the shell alone.
#
#   bench/launcher_overhead.sh [--build_dir=build] [--repeats=10] [--ranks="1 8 64"]
set -euo pipefail

build_dir=build
repeats=10
rank_counts="1 8 64"
for argument in "$@"; do
  case "$argument" in
    --build_dir=*) build_dir="${argument#*=}" ;;
    --repeats=*) repeats="${argument#*=}" ;;
    --ranks=*) rank_counts="${argument#*=}" ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "launcher_overhead: unknown argument '$argument' (expected --build_dir=, --repeats=, --ranks=)" >&2; exit 2 ;;
  esac
done
launcher="$build_dir/bin/infini_run"
if [[ ! -x "$launcher" ]]; then
  echo "launcher_overhead: --build_dir='$build_dir': no executable $launcher (build infini_run first)" >&2
  exit 2
fi
if ! [[ "$repeats" =~ ^[1-9][0-9]*$ ]]; then
  echo "launcher_overhead: --repeats='$repeats': expected a positive integer" >&2
  exit 2
fi

now_ns() { date +%s%N; }

# Prints "mean min max" in milliseconds of `repeats` runs of the command.
time_runs() {
  local total=0 min=0 max=0 elapsed start
  for ((run = 0; run < repeats; ++run)); do
    start=$(now_ns)
    "$@" > /dev/null 2>&1 || { echo "launcher_overhead: '$*' failed" >&2; exit 1; }
    elapsed=$(( $(now_ns) - start ))
    total=$(( total + elapsed ))
    if (( run == 0 || elapsed < min )); then min=$elapsed; fi
    if (( elapsed > max )); then max=$elapsed; fi
  done
  awk -v t="$total" -v n="$repeats" -v lo="$min" -v hi="$max" \
    'BEGIN { printf "%9.2f %9.2f %9.2f", t / n / 1e6, lo / 1e6, hi / 1e6 }'
}

shell_baseline() {
  local count=$1
  for ((rank = 0; rank < count; ++rank)); do /bin/true & done
  wait
}

printf "%-6s | %-30s | %-30s\n" "ranks" "infini_run ms (mean min max)" "shell only ms (mean min max)"
for count in $rank_counts; do
  launcher_times=$(time_runs "$launcher" --nproc_per_node="$count" --ccl_backend=gloo -- /bin/true)
  baseline_times=$(time_runs shell_baseline "$count")
  printf "%-6s | %-30s | %-30s\n" "$count" "$launcher_times" "$baseline_times"
done
echo "($repeats runs each; $(nproc) CPU cores; launcher: $launcher)"
