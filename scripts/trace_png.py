#!/usr/bin/env python3
"""Draws infini_run's merged trace (TRACE_DIR/trace.json) as a PNG: a lane per
rank, communication calls as bars coloured by op, waits below them; the
white between bars is the rank's compute (docs/tracing.md). A rank with
device spans gets a second lane under it, "rank R device": the same colours,
hatched and outlined, so the device's time reads apart from the host's
enqueue. A plugin's events (its algorithm) are thin black ticks; the
watchdog's and the recovery's spans (a shrink, an admission) thin red bars,
their points (a timeout, a loss heard) red triangles on the lane.

  python3 scripts/trace_png.py TRACE_DIR/trace.json -o trace.png [--from_ms A --to_ms B]

Needs matplotlib (Debian: apt-get install python3-matplotlib; scripts/dev.sh leaves it out,
since no build or test needs it).
"""
import argparse
import json
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
except ImportError:
    sys.exit("trace_png.py: matplotlib is missing: expected python3-matplotlib "
             "(apt-get install python3-matplotlib)")

# What each category's bar is: full height for the calls, thin for the rest.
CALL_CATEGORIES = {"ccl"}
# Thin bars: colour and offset from the lane's centre (plugin events above the call).
THIN_CATEGORIES = {"wait": ("#9e9e9e", 0.2), "bucket": ("#6a3d9a", 0.2),
                   "plugin": ("#000000", -0.42), "recovery": ("#e31a1c", 0.32),
                   "watchdog": ("#e31a1c", 0.32)}
# Points ("ph":"i"): the watchdog's and the recovery's (docs/tracing.md).
POINT_COLOUR = "#e31a1c"
DEVICE_CATEGORY = "device"
DEVICE_LANE_BASE = 1 << 20  # trace_format.h's kDeviceLaneBase
OP_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#8c564b", "#e377c2", "#17becf",
              "#bcbd22"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="trace.json written by infini_run --trace_dir")
    parser.add_argument("-o", "--out", default="trace.png", help="PNG to write")
    parser.add_argument("--from_ms", type=float, default=None, help="window start (ms)")
    parser.add_argument("--to_ms", type=float, default=None, help="window end (ms)")
    parser.add_argument("--title", default=None, help="title (default: the file's name)")
    args = parser.parse_args()

    try:
        with open(args.trace) as file:
            trace = json.load(file)
    except (OSError, ValueError) as error:
        sys.exit(f"trace_png.py: {args.trace}: cannot read a trace ({error})")

    lanes = {}  # (pid, tid) -> name
    spans = []
    points = []  # (key, name, at_ms)
    for event in trace.get("traceEvents", []):
        key = (event.get("pid", 0), event.get("tid", 0))
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            lanes[key] = event["args"]["name"]
        elif event.get("ph") == "X":
            start, length = event["ts"] / 1000.0, event["dur"] / 1000.0
            if args.from_ms is not None and start + length < args.from_ms:
                continue
            if args.to_ms is not None and start > args.to_ms:
                continue
            spans.append((key, event.get("cat", ""), event.get("name", ""), start, length))
            lanes.setdefault(key, f"rank {key[1]}")
        elif event.get("ph") == "i":
            at = event["ts"] / 1000.0
            if (args.from_ms is None or at >= args.from_ms) and (args.to_ms is None
                                                                 or at <= args.to_ms):
                points.append((key, event.get("name", ""), at))
                lanes.setdefault(key, f"rank {key[1]}")
    if not spans:
        sys.exit(f"trace_png.py: {args.trace}: no spans to draw (in the window asked)")

    # A device lane (tid DEVICE_LANE_BASE + R) sorts right under rank R's.
    def lane_order(key):
        device = key[1] >= DEVICE_LANE_BASE
        return (key[1] - DEVICE_LANE_BASE if device else key[1], key[0], device)

    order = sorted(lanes, key=lane_order)
    row_of = {key: row for row, key in enumerate(order)}
    op_names = sorted({name for _, cat, name, _, _ in spans
                       if cat in CALL_CATEGORIES or cat == DEVICE_CATEGORY})
    colour_of = {name: OP_COLOURS[i % len(OP_COLOURS)] for i, name in enumerate(op_names)}

    figure, axes = plt.subplots(figsize=(12, 0.9 + 0.7 * len(order)), dpi=110)
    for key, cat, name, start, length in spans:
        row = row_of[key]
        if cat in CALL_CATEGORIES:
            axes.broken_barh([(start, max(length, 1e-3))], (row - 0.3, 0.45),
                             facecolors=colour_of[name], linewidth=0)
        elif cat == DEVICE_CATEGORY:
            axes.broken_barh([(start, max(length, 1e-3))], (row - 0.3, 0.45),
                             facecolors=colour_of[name], edgecolors="black", hatch="////",
                             linewidth=0.4, alpha=0.8)
        elif cat in THIN_CATEGORIES:
            colour, offset = THIN_CATEGORIES[cat]
            axes.broken_barh([(start, max(length, 1e-3))], (row + offset, 0.1),
                             facecolors=colour, linewidth=0)
    for key, name, at in points:
        axes.plot([at], [row_of[key] - 0.38], marker="v", color=POINT_COLOUR, markersize=5)
    axes.set_yticks(range(len(order)))
    axes.set_yticklabels([f"{lanes[key]} (node {key[0]})" for key in order])
    axes.invert_yaxis()
    axes.set_xlabel("ms (clocks aligned to the store's host)")
    if args.from_ms is not None or args.to_ms is not None:
        axes.set_xlim(left=args.from_ms, right=args.to_ms)
    axes.grid(axis="x", linestyle=":", linewidth=0.5)
    axes.set_title(args.title or args.trace, loc="left")
    legend = [Patch(color=colour_of[name], label=name) for name in op_names]
    if any(span[1] == DEVICE_CATEGORY for span in spans):
        legend.append(Patch(facecolor="white", edgecolor="black", hatch="////",
                            label="device (hatched)"))
    legend += [Patch(color=colour, label=cat) for cat, (colour, _) in THIN_CATEGORIES.items()
               if any(span[1] == cat for span in spans)]
    if points:
        legend.append(Patch(color=POINT_COLOUR, label="watchdog/recovery points"))
    axes.legend(handles=legend, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize="small",
                ncol=len(legend), frameon=False)
    figure.tight_layout()
    figure.savefig(args.out)
    print(f"trace_png.py: {len(spans)} spans and {len(points)} points of {len(order)} ranks "
          f"drawn into {args.out}")


if __name__ == "__main__":
    main()
