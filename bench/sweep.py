#!/usr/bin/env python3
"""Runs ccl_bench for every processes x threads layout of a rank count.

For R ranks every layout p x t with p * t = R (8: 8x1, 4x2, 2x4, 1x8) runs
through infini_run (--nproc_per_node=p, ccl_bench --threads_per_process=t);
the Google Benchmark JSON of each run is kept, and the results become a
markdown table (message size x layout, busbw in GB/s) and a PNG plot of busbw
against size, one line per layout and backend.

  bench/sweep.py --build_dir=build --backends=gloo --ranks=4,8 --max_bytes=16M \
      --out_dir=sweep-out

Only the Python standard library is needed for the tables; the plot needs
matplotlib (Debian: apt-get install -y python3-matplotlib).
"""

import argparse
import json
import os
import subprocess
import sys
import time


def layouts_of(ranks):
    """(processes, threads) pairs with processes * threads == ranks, most processes first."""
    return [(ranks // threads, threads) for threads in range(1, ranks + 1) if ranks % threads == 0]


def human_bytes(count):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return "%d %s" % (count >> shift, unit)
    return "%d B" % count


def parse_arguments():
    parser = argparse.ArgumentParser(
        description="Run ccl_bench for every processes x threads layout and tabulate busbw.")
    parser.add_argument("--build_dir", default="build",
                        help="build tree holding bin/infini_run and bin/ccl_bench (default: build)")
    parser.add_argument("--backends", default="gloo",
                        help="comma list of backends, e.g. gloo or gloo,nccl (default: gloo)")
    parser.add_argument("--ranks", default="8",
                        help="comma list of total rank counts R; every layout p x t = R runs")
    parser.add_argument("--layouts", default="",
                        help="only these layouts, e.g. 2x1,1x2 (default: every layout of R)")
    parser.add_argument("--collectives", default="all_reduce",
                        help="comma list passed to ccl_bench --collectives (default: all_reduce)")
    parser.add_argument("--min_bytes", default="8")
    parser.add_argument("--max_bytes", default="16M")
    parser.add_argument("--iters", default="20")
    parser.add_argument("--warmup", default="5")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--out_dir", default="sweep-out",
                        help="where JSON, logs, sweep.md and the PNG plots go")
    parser.add_argument("--timeout_s", type=float, default=1800,
                        help="limit for one layout's run, in seconds (default 1800)")
    parser.add_argument("bench_flags", nargs="*",
                        help="more ccl_bench flags, after --, e.g. -- --inplace")
    return parser.parse_args()


def parse_layouts(text, ranks):
    if not text:
        return layouts_of(ranks)
    chosen = []
    for word in text.split(","):
        try:
            processes, threads = (int(part) for part in word.lower().split("x"))
        except ValueError:
            sys.exit("sweep: --layouts='%s': expected PxT pairs such as 2x1,1x2" % text)
        if processes * threads == ranks:
            chosen.append((processes, threads))
    return chosen


def run_layout(args, backend, processes, threads, json_path, log_path):
    """Runs one layout; returns (exit code, seconds)."""
    bin_dir = os.path.join(args.build_dir, "bin")
    command = [
        os.path.join(bin_dir, "infini_run"), "--nproc_per_node=%d" % processes,
        "--ccl_backend=%s" % backend, "--",
        os.path.join(bin_dir, "ccl_bench"), "--threads_per_process=%d" % threads,
        "--collectives=%s" % args.collectives, "--min_bytes=%s" % args.min_bytes,
        "--max_bytes=%s" % args.max_bytes, "--iters=%s" % args.iters,
        "--warmup=%s" % args.warmup, "--dtype=%s" % args.dtype,
        "--benchmark_out=%s" % os.path.abspath(json_path), "--benchmark_out_format=json",
    ] + args.bench_flags
    started = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=args.timeout_s).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return code, time.monotonic() - started


def load_results(json_path):
    """{collective: {bytes: (busbw_GBps, time_us)}} from one Google Benchmark JSON."""
    with open(json_path) as handle:
        report = json.load(handle)
    results = {}
    for run in report.get("benchmarks", []):
        if run.get("run_type") != "iteration" or "busbw_GBps" not in run:
            continue
        collective = run["name"].split("/")[0]
        results.setdefault(collective, {})[int(run["bytes"])] = (run["busbw_GBps"],
                                                                   run["time_us"])
    return results


def write_tables(series, path):
    """series: {(backend, ranks, layout): {collective: {bytes: (busbw, time)}}}."""
    collectives = sorted({c for per_series in series.values() for c in per_series})
    lines = []
    for collective in collectives:
        keys = [key for key in series if collective in series[key]]
        for ranks in sorted({key[1] for key in keys}):
            columns = [key for key in keys if key[1] == ranks]
            sizes = sorted({b for key in columns for b in series[key][collective]})
            for title, field, form in (("busbw (GB/s)", 0, "%.3g"), ("time (us)", 1, "%.0f")):
                lines.append("**%s, %d ranks: %s**\n" % (collective, ranks, title))
                lines.append("| size | " + " | ".join("%s %s" % (k[0], k[2]) for k in columns) +
                             " |")
                lines.append("|---:|" + "---:|" * len(columns))
                for size in sizes:
                    cells = []
                    for key in columns:
                        value = series[key][collective].get(size)
                        cells.append(form % value[field] if value else "")
                    lines.append("| %s | %s |" % (human_bytes(size), " | ".join(cells)))
                lines.append("")
    with open(path, "w") as handle:
        handle.write("\n".join(lines))


def write_plots(series, out_dir):
    """One PNG per collective and rank count; returns the paths written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        hint = "apt-get install -y python3-matplotlib"
        if not sys.executable.startswith("/usr/bin/") and os.path.exists(
                "/usr/bin/python3"):
            hint += ", and run the sweep with /usr/bin/python3 (Debian's Python)"
        print("sweep: matplotlib is missing from %s, so no plot was drawn (%s); the tables "
              "were written" % (sys.executable, hint))
        return []
    written = []
    collectives = sorted({c for per_series in series.values() for c in per_series})
    for collective in collectives:
        for ranks in sorted({key[1] for key in series if collective in series[key]}):
            figure, axes = pyplot.subplots(figsize=(6.4, 4.0), dpi=90)
            for key in series:
                if key[1] != ranks or collective not in series[key]:
                    continue
                points = sorted(series[key][collective].items())
                axes.plot([p[0] for p in points], [p[1][0] for p in points], marker="o",
                          markersize=3, label="%s %s" % (key[0], key[2]))
            axes.set_xscale("log", base=2)
            axes.set_yscale("log")  # small messages are latency-bound: busbw spans decades
            axes.set_xlabel("message size (bytes)")
            axes.set_ylabel("busbw (GB/s)")
            axes.set_title("%s, %d ranks (processes x threads)" % (collective, ranks))
            axes.grid(True, which="both", alpha=0.3)
            axes.legend(fontsize="small")
            figure.tight_layout()
            path = os.path.join(out_dir, "%s_%dranks.png" % (collective, ranks))
            figure.savefig(path)
            pyplot.close(figure)
            written.append(path)
    return written


def main():
    args = parse_arguments()
    for program in ("infini_run", "ccl_bench"):
        path = os.path.join(args.build_dir, "bin", program)
        if not os.access(path, os.X_OK):
            sys.exit("sweep: --build_dir='%s': no executable %s (build the targets infini_run "
                     "and ccl_bench first)" % (args.build_dir, path))
    try:
        rank_counts = [int(word) for word in args.ranks.split(",")]
    except ValueError:
        sys.exit("sweep: --ranks='%s': expected a comma list of positive integers" % args.ranks)
    backends = [word for word in args.backends.split(",") if word]
    os.makedirs(args.out_dir, exist_ok=True)

    plan = [(backend, ranks, processes, threads)
            for backend in backends for ranks in rank_counts
            for processes, threads in parse_layouts(args.layouts, ranks)]
    series = {}
    failures = 0
    for index, (backend, ranks, processes, threads) in enumerate(plan, start=1):
        layout = "%dx%d" % (processes, threads)
        stem = os.path.join(args.out_dir, "%s_%dranks_%s" % (backend, ranks, layout))
        code, seconds = run_layout(args, backend, processes, threads, stem + ".json",
                                   stem + ".log")
        if code != 0:
            failures += 1
            print("[%d/%d] %s %s (%d ranks): FAILED with exit code %d after %.1f s; see %s.log"
                  % (index, len(plan), backend, layout, ranks, code, seconds, stem), flush=True)
            continue
        results = load_results(stem + ".json")
        series[(backend, ranks, layout)] = results
        peak = max((v[0] for per_size in results.values() for v in per_size.values()),
                   default=0.0)
        print("[%d/%d] %s %s (%d ranks): %d cases in %.1f s, peak busbw %.3f GB/s"
              % (index, len(plan), backend, layout, ranks,
                 sum(len(v) for v in results.values()), seconds, peak), flush=True)

    table_path = os.path.join(args.out_dir, "sweep.md")
    write_tables(series, table_path)
    print("sweep: table in %s" % table_path)
    for path in write_plots(series, args.out_dir):
        print("sweep: plot in %s" % path)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
