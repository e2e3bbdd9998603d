"""diff --html: two captures' pictures side by side on the same scales (time from each capture's first
event, one latency axis, one colour scale), and the change per disk and op."""

from __future__ import annotations

import html as htmlmod
import os
from typing import Any

import numpy as np

from ioscope.base.fmt import fmt_ns
from ioscope.engines.pages import figures
from ioscope.engines.pages.cells import PHASES, Cells
from ioscope.engines.pages.figures import Table
from ioscope.engines.pages.html import controls, lat_range, page, sampled_text, summary_rows

SIDES = ("before", "after")


def set_params(spec: Any, values: dict[str, Any]) -> Any:
    """The specification with the values of its parameters named in values replaced (every level)."""
    if isinstance(spec, dict):
        out = {k: set_params(v, values) for k, v in spec.items()}
        if "value" in out and out.get("name") in values and "select" not in out:
            out["value"] = values[out["name"]]
        return out
    if isinstance(spec, list):
        return [set_params(x, values) for x in spec]
    return spec


def merged_data(a: Cells, b: Cells, lo_b: int, hi_b: int) -> dict[str, Table]:
    da = figures.datasets(a, tag=SIDES[0])
    db = figures.datasets(b, tag=SIDES[1], key_offset=len(a.keys.keys))
    out = {name: figures.concat(t, db[name]) for name, t in da.items()}
    out["bands"] = figures.bands_csv(lo_b, hi_b)
    return out


def change_rows(a: Cells, b: Cells) -> list[dict[str, Any]]:
    ra = {(r["disk"], r["op"]): r for r in summary_rows(a)}
    rb = {(r["disk"], r["op"]): r for r in summary_rows(b)}
    # two captures of one disk each are the same disk whatever their names (as diff matches them)
    da, db = a.keys.dims["disk"], b.keys.dims["disk"]
    rename = {}
    real_a = [d for d in da if d != "?"]
    real_b = [d for d in db if d != "?"]
    if len(real_a) == 1 and len(real_b) == 1 and real_a != real_b:
        rename = {real_b[0]: real_a[0]}
    rb = {(rename.get(d, d), op): r for (d, op), r in rb.items()}
    out = []
    for key in sorted(set(ra) | set(rb)):
        x, y = ra.get(key), rb.get(key)
        row: dict[str, Any] = {"disk": key[0], "op": key[1], "before": x, "after": y}
        out.append(row)
    return out


def _change_table(rows: list[dict[str, Any]]) -> str:
    head = ("<tr><th>disk</th><th>op</th><th>I/Os before</th><th>after</th>"
            + "".join(f"<th>{p} {f} before</th><th>after</th><th>x</th>" for p in ("q2c", "d2c")
                      for f in ("p50", "p99", "p99.9")) + "</tr>")
    body = []
    for r in rows:
        x, y = r["before"], r["after"]
        cells = [f"<td>{htmlmod.escape(r['disk'])}</td><td>{htmlmod.escape(r['op'])}</td>",
                 f"<td>{x['q2c']['n'] if x else 0:,}</td><td>{y['q2c']['n'] if y else 0:,}</td>"]
        for p in ("q2c", "d2c"):
            for f in ("p50", "p99", "p99.9"):
                va = x[p][f] if x and x[p]["n"] else None
                vb = y[p][f] if y and y[p]["n"] else None
                ratio = f"x{vb / va:.2f}" if va and vb else "-"
                cells.append(f"<td>{fmt_ns(va) if va else '-'}</td><td>{fmt_ns(vb) if vb else '-'}</td>"
                             f"<td>{ratio}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table id=changes>{head}{''.join(body)}</table>"


def change_csv(rows: list[dict[str, Any]]) -> Table:
    out: list[tuple[str, str, str, float]] = []
    for r in rows:
        for side in SIDES:
            v = r[side]
            if not v:
                continue
            for f in ("p50", "p99", "p99.9"):
                if v["q2c"]["n"]:
                    out.append((f"{r['disk']} {r['op']}", side, f, v["q2c"][f] / 1e9))
    return {"part": [x[0] for x in out], "side": [x[1] for x in out], "pct": [x[2] for x in out],
            "s": np.array([x[3] for x in out], np.float64)}


def change_spec() -> dict[str, Any]:
    return {"$schema": figures.SCHEMA, "config": figures.CONFIG, "data": {"name": "change"}, "name": "change",
            "transform": [{"filter": "datum.s > 0"}, {"calculate": "datum.s * 1000", "as": "ms"}],
            "mark": {"type": "point", "filled": True, "size": 90, "tooltip": True},
            "encoding": {"y": {"field": "side", "type": "nominal", "title": None, "sort": list(SIDES)},
                         "x": {"field": "ms", "type": "quantitative", "title": "Q2C (ms)", "scale": {"type": "log"}},
                         "color": {"field": "side", "type": "nominal", "sort": list(SIDES)},
                         "row": {"field": "part", "type": "nominal", "title": None, "header": {"labelAngle": 0,
                                                                                                 "labelAlign": "left"}},
                         "column": {"field": "pct", "type": "nominal", "title": None,
                                    "sort": ["p50", "p99", "p99.9"]},
                         "tooltip": [{"field": "part"}, {"field": "side"}, {"field": "pct"},
                                     {"field": "ms", "format": ".4f"}]},
            "width": 200}


def diff_page(a: Cells, b: Cells) -> tuple[str, dict[str, dict[str, Any]], dict[str, Table]]:
    lo_b, hi_b = lat_range([a, b])
    span = (0.0, max(a.duration_ns, b.duration_ns, 1000) / 1e9)
    res = min(c.heat[p].res for c in (a, b) for p in PHASES) / 1e9
    data = merged_data(a, b, lo_b, hi_b)
    rows = change_rows(a, b)
    data["change"] = change_csv(rows)
    from ioscope.engines.pages import html as pagehtml
    pagehtml.PARSE.setdefault("change", {"s": "number"})
    values = {"split": "diskop", "t_lo": span[0], "t_hi": span[1],
              "step": figures.nice_step(span[1], res), "astep": figures.nice_step(span[1], res, figures.COLUMNS // 3)}
    pics: dict[str, dict[str, Any]] = {"overview": figures.overview_spec(a, span, multi=True)}
    for p in PHASES:
        pics[f"heat-{p}"] = figures.heat_spec(a, *lat_range([a, b], (p,)), span, p,
                                              f"{figures.PHASE_LABEL[p]}: before and after", by_capture=True)
    pics["access"] = figures.access_spec(a, span)
    pics["scatter"] = figures.scatter_spec(a, span, f"before: {sampled_text(a)}; after: {sampled_text(b)}")
    pics["curves"] = figures.curves_spec(a, span)
    pics["phases"] = figures.phases_spec(a, span)
    pics = {k: set_params(v, values) for k, v in pics.items()}
    pics["change"] = change_spec()
    pics["change"]["params"] = set_params(figures.base_params(a, span), values)
    specs = {"change": pics["change"], "overview": pics["overview"], "heat": pics["heat-q2c"],
             "curves": pics["curves"], "phases": pics["phases"], "scatter": pics["scatter"], "access": pics["access"]}
    names = [os.path.basename(str(c.meta.get("_path", ""))) for c in (a, b)]
    header = (f"<p class=note>before: {htmlmod.escape(names[0])} ({a.duration_ns / 1e9:.3f} s, {a.n_ios:,} I/Os); "
              f"after: {htmlmod.escape(names[1])} ({b.duration_ns / 1e9:.3f} s, {b.n_ios:,} I/Os). Each capture's "
              "time counts from its own first block event; both are drawn on the same time, latency and colour "
              "scales.</p>" + _change_table(rows))
    sections = [
        ("change", "The change per disk and op", "Q2C p50, p99 and p99.9 before and after (log scale)."),
        ("overview", "I/Os over time, both captures", "Draw an interval to zoom every picture."),
        ("heat", "Latency heat maps, before and after", "One row per capture, disk and op; the same colour scale "
         "(the peak cell of both) and latency axis."),
        ("curves", "Throughput over time", "IOPS, MB/s, average size, queue depth per capture, disk and op."),
        ("phases", "Where the time went (btt's phases)", "Each phase's share of Q2C, per capture, disk and op."),
        ("scatter", "Completion time x latency", ""),
        ("access", "Access pattern", ""),
    ]
    split = [("capdiskop", "capture, disk and op"), ("cap", "capture")]   # offered after disk and op
    doc = page(f"ioscope diff: {names[0]} -> {names[1]}", header, sections, specs, data, span, res,
               controls(a, lo_b, hi_b, split), {i: pics[f"heat-{p}"] for i, p in enumerate(PHASES)})
    return doc, pics, data


__all__ = ["diff_page"]
