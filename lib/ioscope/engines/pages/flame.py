"""A flame graph of folded stacks (engines/aggregate/folded.py) as a Vega-Lite picture: one rectangle per
node of the stacks' tree, across from its offset for its value, up by its depth (the root, everything, at
the bottom), with a tooltip of its frame, value and share. Written as a self-contained page (.html: the
Vega libraries inside, nothing fetched) or, by vl-convert as the pages' pictures are, as .svg or .png."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from typing import Any

from ioscope.base import outfile
from ioscope.base.errors import UsageError
from ioscope.base.fmt import fmt_bytes, fmt_ns
from ioscope.engines.aggregate.folded import KERNEL, KEY, ROOT, USER, FlameNode, FoldedStack, flame_tree
from ioscope.engines.pages.figures import CONFIG, SCHEMA

FORMATS = ("html", "svg", "png")
WIDTH = 1100
ROW_PX = 17           # one frame's height
CHAR_PX = 6.2         # about one character of the 11 px labels
KIND_COLOURS = {ROOT: "#c8c8c8", KEY: "#8fb3d9", USER: "#e3c35a", KERNEL: "#ea7f45"}


def picture_format(path: str) -> str:
    """The picture's format from its file name, or a one-line usage error."""
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise UsageError(f"--flamegraph {path}: the file name says what to write: .html (an interactive page), "
                         ".svg or .png", f"for example --flamegraph {os.path.splitext(path)[0] or 'flame'}.html")
    return ext


def fmt_amount(v: int, func: str, unit: str) -> str:
    """A node's value for people: a count as it is, a sum in its unit (exact beside it)."""
    if func == "count":
        return f"{v:,}"
    if unit == "ns":
        return f"{fmt_ns(v)} ({v:,} ns)"
    if unit == "bytes":
        return f"{fmt_bytes(v)} ({v:,} bytes)"
    return f"{v:,} {unit}"


def node_rows(nodes: Sequence[FlameNode], func: str, unit: str) -> list[dict[str, Any]]:
    total = nodes[0].value if nodes else 0
    return [{"frame": n.frame, "kind": n.kind, "depth": n.depth, "top": n.depth + 1, "mid": n.depth + 0.5,
             "x0": n.start, "x1": n.start + n.value, "value": n.value, "self": n.self_value,
             "amount": fmt_amount(n.value, func, unit), "pct": round(100.0 * n.value / total, 3) if total else 0.0}
            for n in nodes]


# the part of a frame inside the shown range [zx0, zx1], in pixels, and its name cut to fit ('..' where cut;
# nothing under 3 characters); the page's click on a frame sets the range to it (zoom), the root's resets
_PX = f"(min(datum.x1, zx1) - max(datum.x0, zx0)) / max(zx1 - zx0, 1e-9) * {WIDTH}"
_LABEL = ("datum.n < 3 ? '' : length(datum.frame) <= datum.n ? datum.frame : "
          "substring(datum.frame, 0, datum.n - 2) + '..'")


def flame_spec(stacks: Sequence[FoldedStack], title: str, func: str, unit: str) -> dict[str, Any]:
    """The flame graph's Vega-Lite specification, its data inside; the parameters zx0 and zx1 are the range
    of the root's value shown across (all of it unless the page zooms)."""
    nodes = flame_tree(stacks)
    rows = node_rows(nodes, func, unit)
    total = max(nodes[0].value, 1)
    depth = max(n.depth for n in nodes) + 1
    x = {"field": "x0", "type": "quantitative", "axis": None,
         "scale": {"domain": {"expr": "[zx0, zx1]"}, "nice": False, "zero": False}}
    y = {"field": "depth", "type": "quantitative", "axis": None,
         "scale": {"domain": [0, depth], "nice": False, "zero": True}}
    tooltip = [{"field": "frame", "type": "nominal", "title": "frame"},
               {"field": "amount", "type": "nominal", "title": func if func == "count" else "sum"},
               {"field": "pct", "type": "quantitative", "title": "% of all", "format": ".2f"},
               {"field": "self", "type": "quantitative", "title": "ends here", "format": ","}]
    return {
        "$schema": SCHEMA, "config": CONFIG,
        "title": {"text": title, "fontSize": 12, "anchor": "start"},
        "width": WIDTH, "height": depth * ROW_PX,
        "params": [{"name": "zx0", "value": 0}, {"name": "zx1", "value": total}],
        "data": {"values": rows},
        "transform": [{"filter": "datum.x1 > zx0 && datum.x0 < zx1"},
                      {"calculate": _PX, "as": "px"},
                      {"calculate": f"floor((datum.px - 6) / {CHAR_PX})", "as": "n"},
                      {"calculate": _LABEL, "as": "label"}],
        "layer": [
            {"name": "frames",
             "params": [{"name": "hover", "select": {"type": "point", "on": "pointerover", "clear": "pointerout"}}],
             "mark": {"type": "rect", "tooltip": True, "strokeWidth": 0.6, "clip": True, "cursor": "pointer"},
             "encoding": {
                 "x": x, "x2": {"field": "x1"}, "y": y, "y2": {"field": "top"},
                 "color": {"field": "kind", "type": "nominal", "title": "kind",
                           "scale": {"domain": list(KIND_COLOURS), "range": list(KIND_COLOURS.values())},
                           "legend": {"orient": "top", "labelExpr": "datum.label == 'key' ? 'key (comm, ...)' : "
                                                                    "datum.label"}},
                 "stroke": {"condition": {"param": "hover", "empty": False, "value": "#000000"},
                            "value": "#ffffff"},
                 "tooltip": tooltip}},
            {"name": "labels",
             "transform": [{"calculate": "max(datum.x0, zx0)", "as": "lx"}],
             "mark": {"type": "text", "align": "left", "baseline": "middle", "dx": 3, "fontSize": 11,
                      "tooltip": True, "clip": True, "cursor": "pointer"},
             "encoding": {"x": {**x, "field": "lx"}, "y": {**y, "field": "mid"}, "text": {"field": "label"},
                          "tooltip": tooltip}},
        ],
    }


JS = """
function zoom(view, x0, x1) {
  return view.signal('zx0', x0).signal('zx1', x1).runAsync().then(() => {
    document.body.dataset.zoomed = String(Number(document.body.dataset.zoomed || 0) + 1);
  });
}
vegaEmbed('#flame', SPEC, {renderer: 'svg', actions: false}).then(r => {
  window.ioscopeViews = {flame: r.view};
  window.ioscopeFlameZoom = (x0, x1) => zoom(r.view, x0, x1);
  r.view.addEventListener('click', (event, item) => {
    if (item && item.datum && item.datum.x1 !== undefined) zoom(r.view, item.datum.x0, item.datum.x1);
  });
  document.body.dataset.ready = '1';
}).catch(e => { console.error(e); document.body.dataset.error = String(e); });
"""


def flame_page(spec: dict[str, Any], title: str, note: str, numbers: dict[str, Any]) -> str:
    """One self-contained page: the picture, a line about it, and its numbers as JSON (id=numbers)."""
    from ioscope.engines.pages.html import CSS, vega_bundle
    data = ("const SPEC = " + json.dumps(spec) + ";").replace("</", "<\\/")
    nums = json.dumps(numbers).replace("</", "<\\/")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><meta name=viewport content='width=device-width'>"
            f"<title>{html.escape(title)}</title><style>{CSS} body{{max-width:none}}</style>"
            f"<script>{vega_bundle()}</script></head><body><h1>{html.escape(title)}</h1>"
            f"<p class=note>{html.escape(note)} Click a frame to zoom into it, the root ('all') to see everything "
            "again.</p><div id=flame></div>"
            f"<script type='application/json' id=numbers>{nums}</script>"
            f"<script>{data}</script><script>{JS}</script></body></html>")


def write_flamegraph(path: str, stacks: Sequence[FoldedStack], expr: str, func: str, unit: str,
                     counts: str) -> int:
    """Write the flame graph of these stacks to path (.html, .svg or .png; created 0600: stacks and
    process names describe the host, as captures do); the bytes written."""
    fmt = picture_format(path)
    total = sum(s.value for s in stacks)
    what = "I/Os" if func == "count" else f"sum of {unit}"
    title = f"ioscope agg: {expr}"
    note = (f"{len(stacks):,} stacks, {fmt_amount(total, func, unit)} {what} in all ({counts}); width: the "
            "share of the whole, bottom to top: " + ("the process and the other keys, then the stacks, root first"))
    spec = flame_spec(stacks, f"{title}  ({fmt_amount(total, func, unit)} {what})", func, unit)
    if fmt == "html":
        numbers = {"expr": expr, "func": func, "unit": unit, "total": total, "stacks": len(stacks)}
        body = flame_page(spec, title, note, numbers).encode()
    else:
        from ioscope.engines.pages.static import render
        body = render(spec, fmt)
    with outfile.open_private(path, "wb", force=True) as f:
        f.write(body)
    return len(body)


__all__ = ["FORMATS", "flame_page", "flame_spec", "fmt_amount", "node_rows", "picture_format", "write_flamegraph"]
