#!/usr/bin/env python3
"""report --html against report --json on the same capture, and the page in a browser; with --libs, the
plotting libraries compared on the same heat map.

In one run:
1. A synthetic capture of --events events (bench/report_speed.py's generator: random 4-64 KiB reads and
   writes of four processes, ~27 in flight, 10% merged), or --capture FILE.
2. `ioscope report --json CAPTURE` and `ioscope report --html PAGE CAPTURE`, alternating, --repeat times:
   wall time and peak RSS (GNU time) of each, the fastest kept; their ratio (below 1: the page is faster).
3. The page's size, and the time headless Chromium (offline) takes to open it until every picture is drawn
   (--repeat times, the fastest and the slowest).
4. --libs: the Q2C heat map of the same capture (one column per 1/600 of it, ioscope's latency buckets,
   pre-aggregated in numpy) as a self-contained page made with Vega-Lite (vl-convert's bundle), plotly,
   bokeh and matplotlib (a PNG in the page): time to make it, page size, time to open it in Chromium,
   static export, and the size of the same page holding one point per I/O instead of cells.

usage: bench/pages_speed.py [--events N] [--capture FILE] [--repeat N] [--libs] [--dir DIR]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ioscope.base import hist
from ioscope.engines.pages.browser import chromium, open_page
from report_speed import run_child, write_capture

IOSCOPE = [sys.executable, "-m", "ioscope.cli"]


def page_vs_report(cap: str, work: str, repeat: int) -> dict[str, Any]:
    page = os.path.join(work, "page.html")
    runs: dict[str, list[tuple[float, int]]] = {"json": [], "html": []}
    for _ in range(repeat):
        w, rss, _out, rc = run_child([*IOSCOPE, "report", "--json", cap], capture=False)
        assert rc == 0
        runs["json"].append((w, rss))
        w, rss, _out, rc = run_child([*IOSCOPE, "report", "--html", page, cap], capture=False)
        assert rc == 0
        runs["html"].append((w, rss))
    best = {k: (min(x[0] for x in v), min(x[1] for x in v)) for k, v in runs.items()}
    return {"runs": runs, "best": best, "page": page, "bytes": os.path.getsize(page)}


def open_times(page: str, repeat: int, ready: str = "document.body.dataset.ready >= 1") -> list[float]:
    out = []
    with chromium() as ctx:
        for _ in range(repeat):
            o = open_page(ctx, "file://" + os.path.abspath(page), ready + " || document.body.dataset.error")
            assert not o.errors, o.errors
            out.append(o.seconds)
            o.page.close()
    return out


# ----------------------------------------------------------------------------- the libraries compared

def heat_grid(cap: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Q2C counts [band, column] of the capture (600 columns, ioscope's buckets), the columns' start (s),
    the bands' lower bounds (ns), and the I/Os."""
    from ioscope.engines.pages.cells import aggregate
    c = aggregate(cap)
    s = c.heat["q2c"]
    t = s.tb * s.res / 1e9
    b = s.other >> 16
    dur = max(float(t.max()), 1e-6)
    col = np.minimum((t / dur * 600).astype(np.int64), 599)
    lo, hi = int(b.min()), int(b.max())
    grid = np.zeros((hi - lo + 1, 600), np.int64)
    np.add.at(grid, (b - lo, col), s.vals["n"])
    return grid, np.arange(600) * dur / 600, np.array([hist.bucket_low(x) for x in range(lo, hi + 1)]), c.n_ios


def lib_pages(cap: str, work: str) -> list[dict[str, Any]]:
    grid, xs, lows, nios = heat_grid(cap)
    ys = [f"{x / 1e3:.1f}us" for x in lows]
    rows = []

    def done(name: str, path: str, t: float, static: float | None, note: str,
             ready: str = "document.body.dataset.ready >= 1") -> None:
        rows.append({"lib": name, "make_s": t, "bytes": os.path.getsize(path), "path": path, "static_s": static,
                     "note": note, "ready": ready})

    # Vega-Lite: the spec as a dict, the bundle from vl-convert
    import vl_convert as vlc

    from ioscope.engines.pages.html import vega_bundle
    t = time.perf_counter()
    bi, ci = np.nonzero(grid)
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v6.json", "width": 700, "height": 300,
            "data": {"values": [{"t": float(xs[c]), "b": int(b), "n": int(grid[b, c])} for b, c in zip(bi, ci)]},
            "mark": "rect", "encoding": {"x": {"field": "t", "type": "quantitative"},
                                         "y": {"field": "b", "type": "quantitative"},
                                         "color": {"field": "n", "type": "quantitative", "scale": {"type": "log"}},
                                         "tooltip": [{"field": "n"}]}}
    path = os.path.join(work, "vega.html")
    with open(path, "w") as f:
        f.write("<!DOCTYPE html><html><head><meta charset='utf-8'><script>" + vega_bundle() + "</script></head><body>"
                "<div id=v></div><script>vegaEmbed('#v', " + json.dumps(spec) + ", {renderer: 'canvas'})"
                ".then(() => document.body.dataset.ready = 1)</script></body></html>")
    made = time.perf_counter() - t
    t = time.perf_counter()
    vlc.svg_to_png(vlc.vegalite_to_svg(spec))
    done("vega-lite 6 (vl-convert)", path, made, time.perf_counter() - t, "zoom/brush, hover, params bound to inputs; "
         "static export without a browser")

    import plotly
    import plotly.graph_objects as go
    t = time.perf_counter()
    fig = go.Figure(go.Heatmap(z=np.where(grid > 0, grid, np.nan), x=xs, y=ys, colorscale="Viridis"))
    path = os.path.join(work, "plotly.html")
    fig.write_html(path, include_plotlyjs=True, full_html=True,
                   post_script="document.body.dataset.ready = 1;")
    done(f"plotly {plotly.__version__}", path, time.perf_counter() - t, None,
         "zoom, hover built in; static export (kaleido) needs a Chrome")

    import bokeh
    from bokeh.embed import file_html
    from bokeh.plotting import figure
    from bokeh.resources import INLINE
    t = time.perf_counter()
    p = figure(width=700, height=300, x_range=(float(xs[0]), float(xs[-1])), y_range=(0, len(lows)),
               tools="xwheel_zoom,xpan,hover,reset")
    p.image(image=[np.log1p(grid).astype(np.float32)], x=float(xs[0]), y=0, dw=float(xs[-1] - xs[0]), dh=len(lows),
            palette="Viridis256")
    path = os.path.join(work, "bokeh.html")
    with open(path, "w") as f:
        f.write(file_html(p, INLINE, "heat"))
    done(f"bokeh {bokeh.__version__}", path, time.perf_counter() - t, None,
         "zoom, hover, CustomJS; static export needs selenium and a browser",
         "window.Bokeh && Bokeh.documents.length > 0 && Bokeh.documents[0].is_idle")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = time.perf_counter()
    figm, ax = plt.subplots(figsize=(7, 3), dpi=100)
    ax.imshow(np.log1p(grid), aspect="auto", origin="lower", cmap="viridis")
    buf = io.BytesIO()
    figm.savefig(buf, format="png")
    plt.close(figm)
    path = os.path.join(work, "mpl.html")
    with open(path, "w") as f:
        f.write("<!DOCTYPE html><html><body><img src='data:image/png;base64,"
                + base64.b64encode(buf.getvalue()).decode() + "'><script>document.body.dataset.ready = 1</script>"
                "</body></html>")
    done(f"matplotlib {matplotlib.__version__}", path, time.perf_counter() - t, 0.0, "a picture: no interaction")
    for r in rows:
        r["open_s"] = min(open_times(r["path"], 2, r["ready"]))
    # one point per I/O instead of cells: what the data alone would weigh, as each library embeds it
    per_io_json = len(json.dumps([{"t": 0.123456, "q2c": 0.000123456}])) - 2
    rows.append({"lib": f"(one point per I/O, {nios:,} I/Os)", "make_s": None, "bytes": None, "open_s": None,
                 "static_s": None,
                 "note": f"JSON rows (vega-lite, bokeh's plain lists): ~{per_io_json * nios / 1e6:.0f} MB; "
                         f"two float64 arrays in base64 (plotly 6+, bokeh binary): {16 * nios * 4 / 3 / 1e6:.0f} MB"})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--capture", metavar="FILE")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--libs", action="store_true")
    ap.add_argument("--dir")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix="pages-speed-")
    os.makedirs(work, exist_ok=True)
    cap = a.capture
    if cap is None:
        cap = os.path.join(work, "synthetic.ioscope")
        t = time.perf_counter()
        n = write_capture(cap, a.events)
        print(f"capture: {n:,} events, {os.path.getsize(cap) / 1e6:.0f} MB, made in {time.perf_counter() - t:.1f} s")
    subprocess.run([*IOSCOPE, "report", "--html", os.path.join(work, "warm.html"), cap], check=True,
                   stderr=subprocess.DEVNULL)   # vl-convert's bundle cached, the capture's pages read once
    r = page_vs_report(cap, work, a.repeat)
    (jw, jr), (hw, hr) = r["best"]["json"], r["best"]["html"]
    print("all runs (s, MiB): " + "; ".join(f"{k}: " + ", ".join(f"{w:.2f} {rss / 1024:.0f}" for w, rss in v)
                                            for k, v in r["runs"].items()))
    print(f"report --json CAPTURE      : {jw:7.2f} s, peak RSS {jr / 1024:6.0f} MiB")
    print(f"report --html PAGE CAPTURE : {hw:7.2f} s, peak RSS {hr / 1024:6.0f} MiB")
    print(f"ratio page/report          :  time {hw / jw:.2f}, memory {hr / jr:.2f}")
    print(f"page: {r['bytes'] / 1e6:.1f} MB")
    times = open_times(r["page"], a.repeat)
    print("opened in Chromium until every picture is drawn (s): " + ", ".join(f"{x:.2f}" for x in times)
          + f"; fastest {min(times):.2f}, slowest {max(times):.2f}")
    if a.libs:
        print()
        print(f"{'library':32s} {'make s':>7s} {'page MB':>8s} {'open s':>7s} {'static s':>8s}  notes")
        for x in lib_pages(cap, work):
            def f(v: Any, fmt: str) -> str:
                return format(v, fmt) if isinstance(v, (int, float)) else "-"
            print(f"{x['lib']:32s} {f(x['make_s'], '7.2f')} {f(x['bytes'] and x['bytes'] / 1e6, '8.2f')} "
                  f"{f(x['open_s'], '7.2f')} {f(x['static_s'], '8.2f')}  {x['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
