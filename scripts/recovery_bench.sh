#!/bin/bash
# The three recovery modes of infini_run measured side by side on gpt2 (gloo):
# (a) restart: --max_restarts=1, every rank restarted, gpt2 --resume from its
#     checkpoint (written every --checkpoint_every steps, default 1); one
#     rank SIGKILLed.
# (b) elastic: --nnodes=H-1:H, the survivors meet again at the smaller size,
#     gpt2 --resume from its checkpoint (as in a); one node lost: its
#     infini_run and every process under it SIGKILLed together.
# (c) shrink: --on_failure=shrink, the survivors go on in place (no
#     checkpoint); one rank SIGKILLed.
# The killed rank is the last one (on the last host; never node 0, whose loss
# ends a TCP-store run). Each run is SIGKILLed from outside (this script, by
# pid) once rank 0 has printed step KILL_AT. Measured per run: seconds from
# the SIGKILL to the first step line printed after the recovery's own line
# (gpt2's "resume:" for a/b, "lost rank(s)" for c), both timed as they reach
# this script through infini_run's output (to_line_s: to the recovery's line
# alone; the rest is the redone step's compute); steps lost (steps completed
# before the recovery and done again after it); every launcher's exit code;
# the world after. The table gives the median of --repeats runs.
#
#   scripts/recovery_bench.sh [--build DIR] [--out DIR] [--repeats N]
#                             [--configs "4x2 8x4"] [--modes "restart elastic shrink"]
#                             [--checkpoint_every N] [--loopback] [--backend gloo|nccl|staged]
#                             [--model_flags "--model=d12"]
#
# --configs "RANKSxHOSTS ...": RANKS a multiple of HOSTS; "1x1" runs only
# (a), the one mode a single rank (one GPU, --backend nccl) allows.
#
# Hosts are network namespaces (scripts/netns_hosts.sh, needs root); where
# they cannot be made, or with --loopback, every node runs on 127.0.0.1 and
# the table says so. Output: DIR/runs.json, DIR/runs.csv, DIR/summary.csv,
# DIR/logs/<run>/node<i>.log.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
build="$here/../build-dev"
out=""
repeats=3
configs="4x2 8x4"
modes="restart elastic shrink"
loopback=0
checkpoint_every=1
backend=gloo
model_flags="--channels=32"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --checkpoint_every) checkpoint_every="$2"; shift 2 ;;
    --loopback) loopback=1; shift ;;
    --backend) backend="$2"; shift 2 ;;
    --model_flags) model_flags="$2"; shift 2 ;;
    *) sed -n '2,28p' "$0" >&2; exit 2 ;;
  esac
done
[[ "$repeats" =~ ^[1-9][0-9]?$ ]] || { echo "recovery_bench.sh: --repeats='$repeats': expected 1..99" >&2; exit 2; }
[[ "$checkpoint_every" =~ ^[1-9]$ ]] || { echo "recovery_bench.sh: --checkpoint_every='$checkpoint_every': expected 1..9 (below the kill's step)" >&2; exit 2; }
[[ "$model_flags" =~ ^(--[a-z_]+=[A-Za-z0-9_.]+ ?)+$ ]] || { echo "recovery_bench.sh: --model_flags='$model_flags': expected gpt2 flags such as '--model=d12' or '--channels=32 --num_layers=2'" >&2; exit 2; }
[[ "$backend" =~ ^(gloo|nccl|staged)$ ]] || { echo "recovery_bench.sh: --backend='$backend': expected gloo, nccl or staged (gloo staged through nccl: every rank may share one GPU)" >&2; exit 2; }
for config in $configs; do
  [[ "$config" =~ ^(1x1|[2-8]x[2-4])$ ]] && (( ${config%x*} % ${config#*x} == 0 )) ||
    { echo "recovery_bench.sh: --configs entry '$config': expected 1x1 or RANKSxHOSTS (2..8 ranks, a multiple of 2..4 hosts)" >&2; exit 2; }
done
for binary in infini_run gpt2; do
  [ -x "$build/bin/$binary" ] || { echo "recovery_bench.sh: $build/bin/$binary not found (--build DIR: a built tree)" >&2; exit 2; }
done
[ -n "$out" ] || out="$(mktemp -d /tmp/recovery_bench.XXXXXX)"
mkdir -p "$out"
if [ "$loopback" = 0 ] && ! "$here/netns_hosts.sh" probe 2>/dev/null; then
  echo "recovery_bench.sh: network namespaces cannot be made here: every node on loopback" >&2
  loopback=1
fi
exec python3 - "$build" "$out" "$repeats" "$configs" "$modes" "$loopback" "$here/netns_hosts.sh" "$checkpoint_every" "$backend" "$model_flags" <<'PYTHON'
import csv, json, os, re, signal, statistics, subprocess, sys, threading, time

build, out, repeats, configs, modes, loopback, netns_script, checkpoint_every, backend, \
    model_flags = sys.argv[1:11]
repeats, loopback, checkpoint_every = int(repeats), loopback == "1", int(checkpoint_every)
infini_run, gpt2 = build + "/bin/infini_run", build + "/bin/gpt2"
KILL_AT = 10         # rank 0's step line after which the SIGKILL is sent
STEPS = 18           # enough for several steps after the slowest recovery
HEARTBEAT_S = 2      # --rdzv_conf=heartbeat_timeout (every mode)
LAST_CALL_S = 1      # --rdzv_conf=last_call_timeout (elastic)
RUN_BOUND_S = 180    # a run still going after this is a hang
MARK = "INFINI_RECOVERY_BENCH_RUN"
# A global batch every world of the run divides (the full one, one node
# fewer, one rank fewer): 4 ranks -> 4, 2, 3; 8 ranks -> 8, 6, 7.
GLOBAL_SAMPLES = {1: 24, 2: 24, 3: 24, 4: 24, 5: 120, 6: 120, 7: 168, 8: 168}
MICRO_BATCH = {1: 2, 2: 2, 3: 2, 4: 2, 5: 4, 6: 4, 7: 4, 8: 7}
SEQUENCE = 32
STEP_LINE = re.compile(r"step\s+(\d+)/(\d+) \|")

def now():
    return time.monotonic()

LIVE = []  # every Node started; a bench stopped early (Ctrl-C) kills what is left

class Node:
    """One infini_run; its stdout and stderr lines timed as they arrive."""
    def __init__(self, argv, env, log_path, lines, lock):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.lines, self.lock = lines, lock
        LIVE.append(self)
        self.readers = [threading.Thread(target=self.read, args=(s, n), daemon=True)
                        for s, n in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))]
        for reader in self.readers:
            reader.start()

    def read(self, stream, name):
        for raw in stream:
            t = now()
            line = raw.decode(errors="replace").rstrip("\n")
            with self.lock:
                self.lines.append((t, self, name, line))
                self.log.write("%.3f %s %s\n" % (t, name, line))
                self.log.flush()

def children():
    parent_of = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open("/proc/%s/stat" % entry).read()
                parent_of[int(entry)] = int(stat[stat.rfind(")") + 2:].split()[1])
            except OSError:
                pass
    return parent_of

def descendants(root):
    parent_of, found, frontier = children(), [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, q in parent_of.items() if q == pid]
        found += kids
        frontier += kids
    return found

def rank_pid(run_mark, rank):
    wanted = ("\0RANK=%d\0" % rank).encode()
    mark = ("\0%s=%s\0" % (MARK, run_mark)).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environment = b"\0" + open("/proc/%s/environ" % entry, "rb").read()
            comm = open("/proc/%s/comm" % entry).read().strip()
        except OSError:
            continue
        if comm == "gpt2" and wanted in environment and mark in environment:
            return int(entry)
    return None

def run_once(mode, ranks, hosts, index, prefix, port):
    name = "%s_%dr%dh_%d" % (mode, ranks, hosts, index)
    folder = os.path.join(out, "logs", name)
    checkpoints = os.path.join(folder, "checkpoints")
    os.makedirs(checkpoints, exist_ok=True)
    per_node = ranks // hosts
    master = "127.0.0.1" if loopback else "10.77.0.1"
    token = os.path.join(folder, "token")
    with open(token, "w") as f:
        f.write("b" * 64 + "\n")
    os.chmod(token, 0o600)
    conf = "token_file=%s,heartbeat_timeout=%d" % (token, HEARTBEAT_S)
    launcher = ["--nproc_per_node=%d" % per_node, "--master_addr=" + master,
                "--master_port=%d" % port, "--term_timeout=2"]
    launcher += (["--ccl_backend=gloo", "--device_backend=nccl"] if backend == "staged"
                 else ["--ccl_backend=" + backend])
    program = [gpt2, "--steps=%d" % STEPS, "--micro_batch_size=%d" % MICRO_BATCH[ranks],
               "--total_batch_size=%d" % (GLOBAL_SAMPLES[ranks] * SEQUENCE),
               "--sequence_length=%d" % SEQUENCE, "--val_batches=1"] + model_flags.split()
    if mode == "restart":
        launcher += ["--max_restarts=1", "--rdzv_conf=" + conf]
    elif mode == "elastic":
        launcher += ["--rdzv_conf=%s,last_call_timeout=%d" % (conf, LAST_CALL_S)]
    else:
        launcher += ["--on_failure=shrink", "--rdzv_conf=" + conf]
    if mode != "shrink":
        program += ["--checkpoint_every=%d" % checkpoint_every, "--resume", "--checkpoint_dir=" + checkpoints]
    env = dict(os.environ)
    env[MARK] = name
    env.pop("GLOO_SOCKET_IFNAME", None)
    if loopback:
        env["GLOO_SOCKET_IFNAME"] = "lo"
    lines, lock, nodes = [], threading.Lock(), []
    for node in range(hosts):
        argv = ([] if loopback else ["ip", "netns", "exec", "%s%d" % (prefix, node)])
        argv += [infini_run]
        argv += ["--nnodes=%d:%d" % (hosts - 1, hosts)] if mode == "elastic" else \
                ["--nnodes=%d" % hosts, "--node_rank=%d" % node]
        argv += launcher + ["--"] + program
        nodes.append(Node(argv, env, os.path.join(folder, "node%d.log" % node), lines, lock))
        if node == 0:
            time.sleep(0.3)  # node 0 binds the endpoint (and is the store's host) first
    result = {"mode": mode, "ranks": ranks, "hosts": hosts, "run": index,
              "hosts_kind": "loopback" if loopback else "netns", "log_dir": folder}
    start = now()
    def step_lines(after=0.0):
        with lock:
            return [(t, int(m.group(1))) for t, _, s, l in lines
                    if s == "out" and t > after for m in [STEP_LINE.search(l)] if m]
    while not [s for _, s in step_lines() if s >= KILL_AT]:
        if now() - start > RUN_BOUND_S or all(n.proc.poll() is not None for n in nodes):
            result["finding"] = "step %d never printed before the kill" % KILL_AT
            break
        time.sleep(0.002)
    victim_node = nodes[-1]
    if "finding" not in result:
        if mode == "elastic":
            pids = [victim_node.proc.pid] + descendants(victim_node.proc.pid)
            result["killed"] = "host %d's node: its infini_run and %d processes under it" % (
                hosts - 1, len(pids) - 1)
        else:
            pid = None
            while pid is None and now() - start < RUN_BOUND_S:
                pid = rank_pid(name, ranks - 1)
            pids = [pid] if pid else []
            result["killed"] = "rank %d (pid %s)" % (ranks - 1, pid)
        t_kill = now()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        result["kill_s"] = round(t_kill - start, 3)
    survivors = nodes[:-1] if mode == "elastic" else nodes
    for node in nodes:
        try:
            node.proc.wait(timeout=max(1, RUN_BOUND_S - (now() - start)))
        except subprocess.TimeoutExpired:
            result["finding"] = result.get("finding", "") + " hang: still running after %d s" % RUN_BOUND_S
            for n in nodes:
                for pid in [n.proc.pid] + descendants(n.proc.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            break
    for node in nodes:
        node.proc.wait()
        for reader in node.readers:
            reader.join(timeout=5)
        node.log.close()
    result["exit_codes"] = [n.proc.returncode for n in nodes]
    result["exit_code"] = nodes[0].proc.returncode
    result["survivors_exit"] = max(abs(n.proc.returncode) for n in survivors)
    if "kill_s" in result:
        marker = "lost rank(s)" if mode == "shrink" else "resume:"
        with lock:
            marks = [t for t, _, s, l in lines if s == "out" and t > t_kill and marker in l]
            worlds = [l for t, _, s, l in lines if s == "out" and t > t_kill]
        if not marks:
            result["finding"] = result.get("finding", "") + " no '%s' line after the kill" % marker
        else:
            before = [s for t, s in step_lines() if t <= marks[0]]
            after = step_lines(marks[0])
            if after:
                result["recovery_s"] = round(after[0][0] - t_kill, 3)
                result["steps_lost"] = max(before) - (after[0][1] - 1)
                result["resumed_at_step"] = after[0][1]
                # Where the time went: to the recovery's line, and the redone
                # step's own compute (gpt2's "N ms" on that line).
                result["recovery_line_s"] = round(marks[0] - t_kill, 3)
                with lock:
                    first = [l for t, _, s, l in lines if s == "out" and t == after[0][0]
                             and STEP_LINE.search(l)]
                m = re.search(r"\| +([0-9.]+) ms \|", first[0]) if first else None
                result["next_step_ms"] = float(m.group(1)) if m else None
            else:
                result["finding"] = result.get("finding", "") + " no step line after the recovery"
        with lock:
            step_ms = [float(m.group(1)) for t, _, s, l in lines if s == "out" and t <= t_kill
                       for m in [re.search(r"\| +([0-9.]+) ms \|", l)] if m]
        result["step_ms"] = round(statistics.median(step_ms), 1) if step_ms else None
        world = None
        for line in worlds:
            m = re.search(r"world now (\d+) ranks", line) or re.search(r"gpt2: (\d+) ranks?,", line)
            if m:
                world = int(m.group(1))
        result["world_after"] = world
    result["wall_s"] = round(now() - start, 3)
    return result

runs = []
port = 29500 + os.getpid() % 1000 * 10
for config in configs.split():
    ranks, hosts = (int(x) for x in config.split("x"))
    prefix = "rb%d" % (os.getpid() % 1000000)
    if not loopback:
        subprocess.run([netns_script, "down", prefix], check=False)
        subprocess.run([netns_script, "up", prefix, str(hosts)], check=True)
    try:
        for mode in modes.split():
            if mode != "restart" and (ranks == 1 or hosts == 1):
                print("recovery_bench: %s not run at %d rank(s) on %d host(s): it needs a rank "
                      "or node to lose and others to go on" % (mode, ranks, hosts), flush=True)
                continue
            for index in range(repeats):
                port += 1
                result = run_once(mode, ranks, hosts, index, prefix, port)
                runs.append(result)
                print("recovery_bench: %s" % json.dumps(result), flush=True)
    finally:
        for node in LIVE:
            if node.proc.poll() is None:
                for pid in [node.proc.pid] + descendants(node.proc.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        if not loopback:
            subprocess.run([netns_script, "down", prefix], check=False)

with open(os.path.join(out, "runs.json"), "w") as f:
    json.dump({"kill_at_step": KILL_AT, "steps": STEPS, "checkpoint_every": checkpoint_every, "heartbeat_timeout_s": HEARTBEAT_S,
               "last_call_timeout_s": LAST_CALL_S, "backend": backend, "runs": runs}, f, indent=1)
fields = ["mode", "ranks", "hosts", "hosts_kind", "run", "killed", "kill_s", "step_ms", "recovery_s", "recovery_line_s", "next_step_ms",
          "steps_lost", "resumed_at_step", "exit_codes", "world_after", "wall_s", "finding"]
with open(os.path.join(out, "runs.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(runs)

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None

summary = []
for config in configs.split():
    ranks, hosts = (int(x) for x in config.split("x"))
    for mode in modes.split():
        group = [r for r in runs if r["mode"] == mode and r["ranks"] == ranks]
        if not group:
            continue
        summary.append({
            "mode": mode, "ranks": ranks, "hosts": hosts,
            "hosts_kind": group[0]["hosts_kind"] if group else "",
            "step_ms": median([r.get("step_ms") for r in group]),
            "recovery_s": median([r.get("recovery_s") for r in group]),
            "recovery_line_s": median([r.get("recovery_line_s") for r in group]),
            "steps_lost": median([r.get("steps_lost") for r in group]),
            "measured": sum(1 for r in group if r.get("recovery_s") is not None),
            "runs": len(group),
            "exit_codes": " ".join(",".join(str(c) for c in r["exit_codes"]) for r in group),
            "world_after": " ".join(str(r.get("world_after")) for r in group),
            "findings": "; ".join(r["finding"].strip() for r in group if r.get("finding")),
        })
with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(summary[0].keys()) if summary else ["mode"])
    writer.writeheader()
    writer.writerows(summary)

print("\n%-8s %5s %5s %-8s %8s %11s %10s %10s %9s %-26s %s" % (
    "mode", "ranks", "hosts", "hosts", "step_ms", "to_line_s", "recovery_s", "steps_lost", "measured", "exit codes (per run)", "world after"))
for s in summary:
    print("%-8s %5d %5d %-8s %8s %11s %10s %10s %6d/%-2d %-26s %s" % (
        s["mode"], s["ranks"], s["hosts"], s["hosts_kind"],
        "-" if s["step_ms"] is None else "%.1f" % s["step_ms"],
        "-" if s["recovery_line_s"] is None else "%.3f" % s["recovery_line_s"],
        "-" if s["recovery_s"] is None else "%.3f" % s["recovery_s"],
        "-" if s["steps_lost"] is None else "%g" % s["steps_lost"],
        s["measured"], s["runs"], s["exit_codes"], s["world_after"]))
    if s["findings"]:
        print("         findings: " + s["findings"])
for ranks in sorted({s["ranks"] for s in summary}):
    by_mode = {s["mode"]: s["recovery_s"] for s in summary if s["ranks"] == ranks}
    if by_mode.get("shrink") and by_mode.get("restart"):
        print("%d ranks: shrink %.3f s, restart %.3f s: %.1fx faster" % (
            ranks, by_mode["shrink"], by_mode["restart"], by_mode["restart"] / by_mode["shrink"]))
print("output: " + out)
PYTHON
