#!/usr/bin/env bash
# Elastic recovery on one machine (issue 34's measure): two loopback
# launchers, --nnodes=1:2, each running a program that prints a step line
# every 0.2 s; node 1's infini_run is SIGKILLed; prints the seconds from the
# kill to node 0's first step line at WORLD_SIZE=1.
#   scripts/elastic_recovery.sh [INFINI_RUN] [RDZV_CONF]
#   e.g. scripts/elastic_recovery.sh build/bin/infini_run last_call_timeout=5
set -euo pipefail
run=${1:-build/bin/infini_run}
conf=${2:+--rdzv_conf=$2}
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
program='while true; do echo "step world=$WORLD_SIZE $(date +%s.%N)"; sleep 0.2; done'
node() {
  # $conf is empty or one word.
  # shellcheck disable=SC2086
  "$run" --nnodes=1:2 --nproc_per_node=1 --rdzv_endpoint=127.0.0.1:$port \
    --rdzv_id=recovery$port $conf --term_timeout=2 -- sh -c "$program" >"$dir/$1.out" 2>"$dir/$1.err" &
}
node 0
node0=$!
sleep 0.5  # node 0 binds the endpoint first: it hosts the store
node 1
node1=$!
for _ in $(seq 600); do
  grep -q "world=2" "$dir/0.out" && grep -q "world=2" "$dir/1.out" && break
  sleep 0.1
done
sleep 1
killed=$(date +%s.%N)
kill -9 "$node1"
wait "$node1" 2>/dev/null || true  # reaped here, without bash's "Killed" line
for _ in $(seq 1800); do
  grep -q "world=1" "$dir/0.out" && break
  sleep 0.05
done
first=$(grep -m1 "world=1" "$dir/0.out" | awk '{print $3}')
kill -INT "$node0"
wait "$node0" 2>/dev/null || true
if [ -z "$first" ]; then
  echo "no step at world 1 within 90 s; node 0 said:" && cat "$dir/0.err"
  exit 1
fi
echo "recovery_s=$(echo "$first - $killed" | bc) rdzv_conf=${2:-default}"
grep -m1 " lost" "$dir/0.err" || true
