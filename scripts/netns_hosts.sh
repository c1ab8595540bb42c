#!/bin/bash
# Several "hosts" on one machine for tests: network namespaces joined by a
# bridge, each with one veth interface (eth0) and an address of 10.77.0.0/24
# only there (host i has 10.77.0.<i+1>). Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN).
#
#   netns_hosts.sh probe             exit 0 when namespaces and veth pairs can be made here
#   netns_hosts.sh up PREFIX N       make PREFIXsw (the bridge) and hosts PREFIX0..PREFIX<N-1>
#   netns_hosts.sh cut PREFIX I      take host I's link down (its bridge port), as a cable cut
#   netns_hosts.sh name PREFIX I 'ADDRESS NAME'
#                                    host I's /etc/hosts gets that line (ip netns exec
#                                    mounts /etc/netns/<namespace>/hosts over /etc/hosts)
#   netns_hosts.sh reap STEM         "down" for every STEM<pid>* set whose test process
#                                    <pid> is gone (a test killed before its cleanup)
#   netns_hosts.sh down PREFIX       end the processes left in those namespaces, delete
#                                    them and their /etc/netns folders
set -u

prefix_valid() {
  [[ "$1" =~ ^[a-z][a-z0-9]{1,8}$ ]] || { echo "netns_hosts.sh: PREFIX='$1': expected 2-9 lowercase letters/digits" >&2; exit 2; }
}

namespaces_of() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1(sw|[0-9]+)$" || true
}

case "${1:-}" in
  probe)
    name="iccl_probe_$$"
    ip netns add "$name" 2>/dev/null || { echo "ip netns add is not permitted here" >&2; exit 1; }
    ok=0
    ip -n "$name" link add a0 type veth peer name b0 2>/dev/null || ok=1
    ip netns del "$name"
    [ "$ok" = 0 ] || echo "veth pairs cannot be made here" >&2
    exit "$ok"
    ;;
  up)
    prefix_valid "${2:-}"
    prefix="$2"; count="${3:-2}"
    [[ "$count" =~ ^[1-9]$ ]] || { echo "netns_hosts.sh: N='$count': expected 1..9" >&2; exit 2; }
    set -e
    ip netns add "${prefix}sw"
    ip -n "${prefix}sw" link add br0 type bridge
    ip -n "${prefix}sw" link set br0 up
    for ((i = 0; i < count; ++i)); do
      host="${prefix}${i}"
      ip netns add "$host"
      ip -n "${prefix}sw" link add "p$i" type veth peer name eth0 netns "$host"
      ip -n "${prefix}sw" link set "p$i" master br0 up
      ip -n "$host" addr add "10.77.0.$((i + 1))/24" dev eth0
      ip -n "$host" link set lo up
      ip -n "$host" link set eth0 up
    done
    ;;
  cut)
    prefix_valid "${2:-}"
    ip -n "${2}sw" link set "p${3:-1}" down
    ;;
  name)
    prefix_valid "${2:-}"
    [[ "${3:-}" =~ ^[0-9]$ ]] || { echo "netns_hosts.sh: I='${3:-}': expected 0..9" >&2; exit 2; }
    mkdir -p "/etc/netns/$2$3"
    printf '127.0.0.1 localhost\n%s\n' "${4:-}" > "/etc/netns/$2$3/hosts"
    ;;
  reap)
    prefix_valid "${2:-}"
    for prefix in $(ip netns list 2>/dev/null | awk '{print $1}' |
                    sed -nE "s/^($2[0-9]+)([0-9]|sw)$/\1/p" | sort -u); do
      pid=${prefix#"$2"}
      kill -0 "$pid" 2>/dev/null || "$0" down "$prefix"
    done
    ;;
  down)
    prefix_valid "${2:-}"
    for name in $(namespaces_of "$2"); do
      for pid in $(ip netns pids "$name" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
      ip netns del "$name" 2>/dev/null || true
    done
    for folder in /etc/netns/"$2"*; do
      [[ -d "$folder" && "$(basename "$folder")" =~ ^$2(sw|[0-9]+)$ ]] && rm -r "$folder"
    done
    rmdir /etc/netns 2>/dev/null || true
    ;;
  *)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
