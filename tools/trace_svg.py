#!/usr/bin/env python3
"""Draws one step of a strata trace (`strata train --trace FILE`) as an SVG timeline.

For the docs' picture: the trace viewers (Perfetto, chrome://tracing) are web UIs that
cannot be reached offline, so docs/trace.md shows a drawing made by this script. One row
per track (streams, NVMe slots), spans coloured by category and named where they are wide
enough, prefetch deviations as red marks, a time axis in milliseconds. Standard library
only.

  tools/trace_svg.py TRACE.json OUT.svg [--step N] [--width PX]
"""
import argparse
import html
import json
import sys

COLOURS = {
    "forward": "#4e79a7", "backward": "#2f4b7c", "compute": "#4e79a7",
    "comm": "#f28e2b", "copy": "#59a14f", "adam": "#b07aa1", "nvme": "#76b7b2",
    "stall": "#e15759", "other": "#bab0ac", "step": "#d4d4d4",
}
ROW, LABEL_WIDTH, AXIS = 18, 170, 26


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("out")
    parser.add_argument("--step", type=int, help="the step to draw (default: the first traced)")
    parser.add_argument("--width", type=int, default=1100)
    args = parser.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    names, order = {}, {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "thread_sort_index":
            order[e["tid"]] = e["args"]["sort_index"]
    steps = [e for e in events if e["ph"] == "X" and names.get(e["tid"]) == "steps"]
    if not steps:
        sys.exit(f"{args.trace}: no step spans (was the run traced? see train.trace_steps)")
    if args.step is not None:
        steps = [s for s in steps if s["name"] == f"step {args.step}"]
        if not steps:
            sys.exit(f"{args.trace}: step {args.step} is not in the trace")
    step = steps[0]
    begin, end = step["ts"], step["ts"] + step["dur"]
    spans = [e for e in events if e["ph"] == "X" and e["ts"] < end and e["ts"] + e["dur"] > begin]
    marks = [e for e in events if e["ph"] == "i" and begin <= e["ts"] <= end]

    # Rows: the step, the streams in creation order, then NVMe slots in slot order.
    def row_key(tid):
        name = names[tid]
        if name == "steps":
            return (0, 0, name)
        if " slot " in name:
            base, slot = name.rsplit(" slot ", 1)
            return (2, base, int(slot))
        return (1, order.get(tid, tid), name)
    tids = sorted({e["tid"] for e in spans} | {e["tid"] for e in marks}, key=row_key)
    rows = {tid: i for i, tid in enumerate(tids)}
    plot = args.width - LABEL_WIDTH - 10
    scale = plot / (end - begin)
    height = AXIS + ROW * len(tids) + 30

    def x(ts):
        return LABEL_WIDTH + (min(max(ts, begin), end) - begin) * scale

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{args.width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="4" y="14" font-size="12" font-weight="bold">{html.escape(step["name"])}: '
           f'{(end - begin) / 1000:.1f} ms (rank {events[0].get("pid", 0)})</text>']
    for tid, i in rows.items():
        y = AXIS + i * ROW
        if i % 2:
            out.append(f'<rect x="0" y="{y}" width="{args.width}" height="{ROW}" fill="#f6f6f6"/>')
        out.append(f'<text x="4" y="{y + 12}">{html.escape(names[tid])}</text>')
    for e in spans:
        y = AXIS + rows[e["tid"]] * ROW + 2
        x0, x1 = x(e["ts"]), x(e["ts"] + e["dur"])
        colour = COLOURS.get(e.get("cat", "other"), COLOURS["other"])
        title = html.escape(f'{e["name"]} {e["dur"] / 1000:.2f} ms ' +
                            " ".join(f"{k}={v}" for k, v in e.get("args", {}).items()))
        out.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 0.6):.1f}" '
                   f'height="{ROW - 4}" fill="{colour}"><title>{title}</title></rect>')
        if x1 - x0 > 6 * len(e["name"]):
            out.append(f'<text x="{x0 + 2:.1f}" y="{y + 10}" fill="white">'
                       f'{html.escape(e["name"])}</text>')
    for e in marks:
        y = AXIS + rows[e["tid"]] * ROW
        xm = x(e["ts"])
        out.append(f'<path d="M{xm - 4:.1f},{y + 2} L{xm + 4:.1f},{y + 2} L{xm:.1f},{y + 12} Z" '
                   f'fill="#d00"><title>{html.escape(e["name"])}</title></path>')
    # The axis: ticks at a round step of milliseconds.
    total_ms = (end - begin) / 1000
    tick = next(t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1e9)
                if total_ms / t <= 12)
    y = AXIS + ROW * len(tids) + 4
    t = 0.0
    while t <= total_ms:
        xt = LABEL_WIDTH + t * 1000 * scale
        out.append(f'<line x1="{xt:.1f}" y1="{AXIS}" x2="{xt:.1f}" y2="{y}" stroke="#ccc"/>')
        out.append(f'<text x="{xt:.1f}" y="{y + 12}" text-anchor="middle">{t:g} ms</text>')
        t += tick
    legend_x = 200
    for category in ("forward", "backward", "comm", "copy", "adam", "nvme", "stall", "other"):
        out.append(f'<rect x="{legend_x}" y="5" width="10" height="10" '
                   f'fill="{COLOURS[category]}"/>')
        out.append(f'<text x="{legend_x + 13}" y="14">{category}</text>')
        legend_x += 75
    out.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
