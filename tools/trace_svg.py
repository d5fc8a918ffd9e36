#!/usr/bin/env python3
"""Draws a `kvtier run --trace` file as an SVG timeline (no dependencies).

    tools/trace_svg.py TRACE.json OUT.svg [--steps A:B] [--width PX]

One row per track: the engine loop (acquire waits), the attention (which runs
while the loop acquires the next pages) and one row per link (DRAM->HBM and HBM->DRAM copies, SSD reads and writes), over
the decode steps A..B (default 2:3, past the first step's warm-up). The same
file opens in Perfetto (ui.perfetto.dev, "Open trace file") for zooming; this
picture is for a README or a report where an interactive viewer is not at hand.
"""

import argparse
import json
import sys
from html import escape

ROWS = [  # (track name in the trace, label, colour per category)
    ("engine loop", "acquire waits", {"wait": "#e4572e"}),
    ("attention", "attention", {"compute": "#3066be"}),
    ("dram->hbm copies", "DRAM->HBM copies", {"copy": "#29a36a"}),
    ("hbm->dram copies", "HBM->DRAM copies", {"copy": "#8fd694"}),
    ("ssd->dram reads", "SSD->DRAM reads", {"io": "#7d4e9f"}),
    ("dram->ssd writes", "DRAM->SSD writes", {"io": "#c9a0dc"}),
]


def load(path):
    with open(path) as f:
        d = json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d


def window(events, a, b):
    """The span of the engine loop's events of steps a..b, in microseconds."""
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and e.get("cat") in ("wait", "compute")
             and a <= e.get("args", {}).get("step", -1) <= b]
    if not spans:
        sys.exit(f"trace_svg: no engine-loop events for steps {a}..{b}")
    return min(s for s, _ in spans), max(t for _, t in spans)


def draw(events, t0, t1, width):
    tid = {e["args"]["name"]: e["tid"] for e in events
           if e.get("ph") == "M" and e.get("name") == "thread_name"}
    left, row_h, gap, top = 150, 26, 10, 34
    plot_w = width - left - 20
    height = top + len(ROWS) * (row_h + gap) + 40
    scale = plot_w / (t1 - t0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="20" font-size="13">kvtier run --trace: '
           f'{(t1 - t0) / 1000:.0f} ms of decode</text>']
    for i, (track, label, colours) in enumerate(ROWS):
        y = top + i * (row_h + gap)
        out.append(f'<text x="8" y="{y + row_h * 0.65:.1f}">{escape(label)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{plot_w}" height="{row_h}" fill="#f3f3f3"/>')
        for e in events:
            if e.get("ph") != "X" or e.get("tid") != tid.get(track):
                continue
            s, t = max(e["ts"], t0), min(e["ts"] + e["dur"], t1)
            if t <= s:
                continue
            x, w = left + (s - t0) * scale, max((t - s) * scale, 0.6)
            colour = colours.get(e.get("cat"), "#999999")
            out.append(f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{row_h - 4}" '
                       f'fill="{colour}"><title>{escape(e["name"])} '
                       f'{e["dur"] / 1000:.2f} ms</title></rect>')
    axis_y = top + len(ROWS) * (row_h + gap) + 4
    step = 10 ** len(str(int((t1 - t0) / 1000 / 8))) if t1 - t0 > 8000 else 1
    ms = 0
    while ms * 1000 <= t1 - t0:
        x = left + ms * 1000 * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{axis_y}" '
                   f'stroke="#cccccc" stroke-width="0.5"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle">{ms} ms</text>')
        ms += step
    legend = [("acquire (waiting for pages)", "#e4572e"), ("attention", "#3066be"),
              ("copy", "#29a36a"), ("disk I/O", "#7d4e9f")]
    x = left + 260
    for name, colour in legend:
        out.append(f'<rect x="{x}" y="9" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{x + 16}" y="20">{escape(name)}</text>')
        x += 30 + 7 * len(name)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--steps", default="2:3", help="decode steps A:B to draw (default 2:3)")
    ap.add_argument("--width", type=int, default=1100)
    a = ap.parse_args()
    try:
        lo, hi = (int(v) for v in a.steps.split(":"))
    except ValueError:
        sys.exit(f"trace_svg: --steps {a.steps!r}: expected A:B, two step numbers")
    events = load(a.trace)
    t0, t1 = window(events, lo, hi)
    with open(a.out, "w") as f:
        f.write(draw(events, t0, t1, a.width))


if __name__ == "__main__":
    main()
