#!/bin/bash
# Issue 32's shaped-link load on a real 2-node infini_run: two network-namespace
# hosts (scripts/netns_hosts.sh) whose eth0 sends at most 1 Gbit/s (tc tbf;
# netem is not needed), node 0 in host 0, node 1 in host 1, --rdzv_backend=c10d.
# Node 1's first RANKS local ranks each SET a VALUE_MIB MiB value through the
# store their launcher lent them while one more rank of node 1 GETs a small key
# every 100 ms; node 0's local rank 0 reads node 1's heartbeat counter every
# 50 ms (bin/store_load_cases --as_rank plays every rank). Once with the relay
# (the default) and once with --rdzv_conf=relay=0, one row each:
#   peak RSS (VmHWM) of node 0's and node 1's launcher, the worst small GET,
#   the longest time node 1's heartbeat stood still as node 0 saw it (its
#   launcher adds one every heartbeat_timeout / 4 = 3.75 s, at most 5 s; node
#   0 declares it lost after 15 s) and how much later than that interval it
#   came, the packets host 1's tbf dropped (its queue past 50 ms),
#   and whether the run lived (both launchers exit 0, no "lost" line).
# Needs root (namespaces; exit 77 where they cannot be made); the namespaces
# go on every exit. --assert (the hosts test): exit 1 unless every run lived,
# node 1's relaying launcher peaked within the relay's budget (256 MiB,
# max_buffered_bytes) + 2 values + 128 MiB, and node 1's heartbeat never
# came 1 s or more later than its interval.
#
#   scripts/store_shaped_link.sh [--ranks=30] [--value_mib=60] [--relay=1,0]
#                                [--bin=build/bin] [--rate=1gbit] [--logs=DIR]
#                                [--heartbeat_timeout=15] [--assert]
set -u
here="$(cd "$(dirname "$0")" && pwd)"
ranks=30
value_mib=60
relays="1,0"
bin="$here/../build/bin"
rate=1gbit
logs=""
assert=0
heartbeat_timeout=15
for arg in "$@"; do
  case "$arg" in
    --ranks=*) ranks="${arg#*=}" ;;
    --value_mib=*) value_mib="${arg#*=}" ;;
    --relay=*) relays="${arg#*=}" ;;
    --bin=*) bin="${arg#*=}" ;;
    --rate=*) rate="${arg#*=}" ;;
    --logs=*) logs="${arg#*=}" ;;
    --assert) assert=1 ;;
    --heartbeat_timeout=*) heartbeat_timeout="${arg#*=}" ;;
    *) echo "store_shaped_link.sh: unknown argument '$arg' (expected --ranks=N, --value_mib=M, --relay=1,0, --bin=DIR, --rate=R, --logs=DIR, --heartbeat_timeout=S or --assert; see the script's header)" >&2; exit 2 ;;
  esac
done
[[ "$ranks" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "store_shaped_link.sh: --ranks=$ranks: expected 1..999" >&2; exit 2; }
[[ "$value_mib" =~ ^[1-9][0-9]?$ && "$value_mib" -le 63 ]] ||
  { echo "store_shaped_link.sh: --value_mib=$value_mib: expected 1..63 (the store's 64 MiB max_message_bytes)" >&2; exit 2; }
[[ "$heartbeat_timeout" =~ ^[1-9][0-9]{0,3}$ ]] || { echo "store_shaped_link.sh: --heartbeat_timeout=$heartbeat_timeout: expected 1..9999 (seconds)" >&2; exit 2; }
[[ "$relays" =~ ^[01](,[01])*$ ]] || { echo "store_shaped_link.sh: --relay=$relays: expected 1, 0 or 1,0" >&2; exit 2; }
for program in infini_run store_load_cases; do
  [ -x "$bin/$program" ] || { echo "store_shaped_link.sh: --bin=$bin: no $program there (ninja -C build infini_run store_load_cases)" >&2; exit 2; }
done
bin="$(cd "$bin" && pwd)"
"$here/netns_hosts.sh" probe || { echo "store_shaped_link.sh: network namespaces cannot be made here (run as root)" >&2; exit 77; }

prefix="sl$(($$ % 10000000))"
scratch="$(mktemp -d)"
cleanup() {
  "$here/netns_hosts.sh" down "$prefix"
  if [ -n "$logs" ]; then mkdir -p "$logs" && cp "$scratch"/*.log "$logs"/ 2>/dev/null; fi
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$here/netns_hosts.sh" up "$prefix" 2 || exit 1
for host in 0 1; do
  ip netns exec "$prefix$host" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms ||
    { echo "store_shaped_link.sh: tc tbf on host $host failed" >&2; exit 1; }
done
printf '%064d\n' 7 > "$scratch/token"

# VmHWM of `pid` in MiB while it lives (the last value read is its peak).
peak_mib() { awk '/^VmHWM:/ {printf "%d", $2 / 1024}' "/proc/$1/status" 2>/dev/null; }
# Packets host `1`'s tbf dropped so far (its queue over 50 ms: TCP then resends).
tbf_drops() {
  ip netns exec "$prefix$1" tc -s qdisc show dev eth0 | sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -1
}

printf '%-6s %6s %6s %15s %15s %13s %18s %18s %11s  %s\n' relay ranks MiB node0_peak_MiB \
  node1_peak_MiB worst_get_ms heartbeat_gap_ms heartbeat_late_ms tbf_drops_1 lived
# The launcher's heartbeat interval (launch/src/tcp_rendezvous.cc): a quarter
# of the timeout, at most 5 s.
heartbeat_interval_ms=$((heartbeat_timeout * 250 < 5000 ? heartbeat_timeout * 250 : 5000))
lived_all=0
for relay in ${relays//,/ }; do
  port=$((29500 + relay))
  drops_before="$(tbf_drops 1)"
  for node in 0 1; do
    ip netns exec "$prefix$node" "$bin/infini_run" --nnodes=2 --node_rank="$node" \
      --nproc_per_node=$((ranks + 1)) --rdzv_backend=c10d --rdzv_endpoint="10.77.0.1:$port" \
      --rdzv_id=shaped --rdzv_conf="token_file=$scratch/token,relay=$relay,heartbeat_timeout=$heartbeat_timeout" -- \
      "$bin/store_load_cases" --as_rank --ranks="$ranks" --value_mib="$value_mib" \
      > "$scratch/relay$relay.node$node.log" 2>&1 &
    pids[$node]=$!
  done
  peak=(0 0)
  deadline=$((SECONDS + 300))
  while kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null; do
    for node in 0 1; do
      now="$(peak_mib "${pids[$node]}")"
      [ -n "$now" ] && peak[$node]=$now
    done
    if [ "$SECONDS" -gt "$deadline" ]; then
      kill -KILL "${pids[0]}" "${pids[1]}" 2>/dev/null
      echo "store_shaped_link.sh: relay=$relay: still running after 300 s, killed" >&2
    fi
    sleep 0.1
  done
  wait "${pids[0]}"; exit0=$?
  wait "${pids[1]}"; exit1=$?
  logs_of="$scratch/relay$relay.node0.log $scratch/relay$relay.node1.log"
  worst_get="$(cat $logs_of | sed -n 's/.*shaped: worst_small_get_ms=\([0-9]*\).*/\1/p' | head -1)"
  gap="$(cat $logs_of | sed -n 's/.*shaped: longest_heartbeat_gap_ms=\([0-9]*\).*/\1/p' | head -1)"
  lost="$(grep -h -m1 -i 'lost' $logs_of)"
  if [ "$exit0" = 0 ] && [ "$exit1" = 0 ] && [ -z "$lost" ]; then
    lived=yes
  else
    lived="no (exits $exit0/$exit1${lost:+; $lost})"
    lived_all=1
  fi
  relay_bound=$((256 + 2 * value_mib + 128))
  if [ "$assert" = 1 ] && [ "$relay" = 1 ] && [ "${peak[1]}" -gt "$relay_bound" ]; then
    echo "store_shaped_link.sh: node 1's relaying launcher peaked at ${peak[1]} MiB, above the relay's budget + 2 values + 128 MiB ($relay_bound MiB)" >&2
    lived_all=1
  fi
  late=$(( ${gap:-0} > heartbeat_interval_ms ? ${gap:-0} - heartbeat_interval_ms : 0 ))
  if [ "$assert" = 1 ] && [ "$late" -ge 1000 ]; then
    echo "store_shaped_link.sh: node 1's heartbeat stood still for $gap ms, $late ms past its ${heartbeat_interval_ms} ms interval (expected under 1000 ms late)" >&2
    lived_all=1
  fi
  drops=$(($(tbf_drops 1) - drops_before))
  printf '%-6s %6s %6s %15s %15s %13s %18s %18s %11s  %s\n' "$relay" "$ranks" "$value_mib" \
    "${peak[0]}" "${peak[1]}" "${worst_get:--}" "${gap:--}" "$late" "$drops" "$lived"
done
[ "$assert" = 1 ] || exit 0
exit "$lived_all"
