#!/usr/bin/env bash
# Issue 34's side by side: the same torch program (a gloo all_reduce and a
# step line every 0.2 s) under two loopback launchers, --nnodes=1:2, once with
# infini_run and once with torchrun; node 1 dies (its launcher and every
# process under it SIGKILLed at once: a SIGKILLed torchrun alone leaves its
# worker running in a session of its own, which keeps the world at 2); prints
# the seconds from the kill to node 0's first step at WORLD_SIZE=1, with the
# default rendezvous settings and with last_call_timeout=5.
#   scripts/elastic_recovery_vs_torchrun.sh [INFINI_RUN] [TORCHRUN] [PYTHON]
#   e.g. LAUNCHERS=torchrun CONFS=default scripts/elastic_recovery_vs_torchrun.sh build/bin/infini_run \
#          /opt/torch/.venv/bin/torchrun /opt/torch/.venv/bin/python
set -euo pipefail
infini_run=${1:-build/bin/infini_run}
torchrun=${2:-torchrun}
python=${3:-python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/steps.py" <<'PROGRAM'
import time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
world = dist.get_world_size()
value = torch.ones(1)
while True:
    dist.all_reduce(value)
    print(f"step world={world} {time.time():.3f}", flush=True)
    time.sleep(0.2)
PROGRAM

# start LAUNCHER NODE PORT CONF: one launcher in the background, leading a
# process group of its own (setsid); its pid in $!.
start() {
  local conf=${4:+--rdzv_conf=$4}
  if [ "$1" = infini_run ]; then
    # $conf is empty or one word.
    # shellcheck disable=SC2086
    setsid "$infini_run" --nnodes=1:2 --nproc_per_node=1 --rdzv_endpoint=127.0.0.1:"$3" \
      --rdzv_id=recovery"$3" $conf --max_restarts=3 --term_timeout=2 -- \
      "$python" "$dir/steps.py" >"$dir/$2.out" 2>"$dir/$2.err" &
  else
    # shellcheck disable=SC2086
    setsid "$torchrun" --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=c10d \
      --rdzv_endpoint=127.0.0.1:"$3" --rdzv_id=recovery"$3" $conf --max_restarts=3 \
      "$dir/steps.py" >"$dir/$2.out" 2>"$dir/$2.err" &
  fi
}

# descendants PID: every process under PID.
descendants() {
  local child
  for child in $(pgrep -P "$1" || true); do
    echo "$child"
    descendants "$child"
  done
}

# measure LAUNCHER CONF: prints one line of figures.
measure() {
  local port=$((20000 + RANDOM % 20000))
  rm -f "$dir"/*.out "$dir"/*.err
  start "$1" 0 "$port" "$2"
  local node0=$!
  sleep 2  # node 0 binds the endpoint first: it hosts the store
  start "$1" 1 "$port" "$2"
  local node1=$!
  for _ in $(seq 1200); do
    grep -q "world=2" "$dir/0.out" 2>/dev/null && grep -q "world=2" "$dir/1.out" 2>/dev/null && break
    sleep 0.1
  done
  sleep 1
  local killed victims
  victims=$(descendants "$node1")
  killed=$(date +%s.%N)
  # shellcheck disable=SC2086
  kill -9 -- "-$node1" $victims 2>/dev/null || true
  wait "$node1" 2>/dev/null || true
  for _ in $(seq 2400); do
    grep -q "world=1" "$dir/0.out" && break
    sleep 0.05
  done
  local first
  first=$(grep -m1 "world=1" "$dir/0.out" | awk '{print $3}' || true)
  kill -INT "$node0" 2>/dev/null || true
  wait "$node0" 2>/dev/null || true
  pkill -9 -f "$dir/steps.py" 2>/dev/null || true  # node 1's orphaned worker, if any
  if [ -z "$first" ]; then
    echo "launcher=$1 rdzv_conf=${2:-default} no step at world 1 within 120 s; node 0 said:"
    tail -n 20 "$dir/0.err" || true
    tail -n 5 "$dir/0.out" || true
    return 0
  fi
  echo "launcher=$1 rdzv_conf=${2:-default} recovery_s=$(awk -v a="$first" -v b="$killed" 'BEGIN { printf "%.2f", a - b }')"
}

# LAUNCHERS and CONFS (space-separated; "default" for no --rdzv_conf) pick
# the runs.
for conf in ${CONFS:-last_call_timeout=5 default}; do
  [ "$conf" = default ] && conf=""
  for launcher in ${LAUNCHERS:-infini_run torchrun}; do
    measure "$launcher" "$conf"
  done
done
