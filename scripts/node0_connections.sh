#!/bin/bash
# Node 0's store connections at their most during a multi-node run on this
# host (loopback): NODES launchers of PROCESSES ranks each run
# parallel_check --tensor_parallel=PROCESSES --pipeline_parallel=1 (gloo),
# once direct (--rdzv_conf=relay=0) and once through each node's relay;
# /proc/net/tcp is read every 5 ms and the established server ends of the
# endpoint's port counted (docs/scale.md, "Node 0's connections").
#
# usage: scripts/node0_connections.sh [BUILD] [NODESxPROCESSES ...]
#   BUILD defaults to ./build; the layouts to 2x2 2x4 4x2 4x4.
set -euo pipefail
build=${1:-build}
shift || true
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=(2x2 2x4 4x2 4x4)
bin=$build/bin
[ -x "$bin/infini_run" ] && [ -x "$bin/parallel_check" ] || {
  echo "node0_connections.sh: $bin has no infini_run and parallel_check (build first)" >&2
  exit 2
}

# The established connections whose local port is $1 (hex in /proc/net/tcp).
established_to() {
  awk -v port="$(printf '%04X' "$1")" \
    'NR > 1 { split($2, local, ":"); if (local[2] == port && $4 == "01") n++ } END { print n + 0 }' \
    /proc/net/tcp
}

# One run: prints the most connections seen.
most_connections() {
  local nodes=$1 processes=$2 relay=$3 port pids=() most=0 now
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  for ((node = 0; node < nodes; node++)); do
    "$bin/infini_run" --nnodes="$nodes" --node_rank="$node" --nproc_per_node="$processes" \
      --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="connections_$port" \
      --rdzv_conf="relay=$relay" --ccl_backend=gloo -- "$bin/parallel_check" \
      --tensor_parallel="$processes" --pipeline_parallel=1 >/dev/null 2>&1 &
    pids+=($!)
  done
  while kill -0 "${pids[@]}" 2>/dev/null; do
    now=$(established_to "$port")
    [ "$now" -gt "$most" ] && most=$now
    sleep 0.005
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "a launcher failed (port $port)" >&2; exit 1; }; done
  echo "$most"
}

echo "| nodes x processes | direct | relay |"
echo "|---|---:|---:|"
for layout in "${layouts[@]}"; do
  nodes=${layout%x*} processes=${layout#*x}
  echo "| $nodes x $processes | $(most_connections "$nodes" "$processes" 0) | $(most_connections "$nodes" "$processes" 1) |"
done
