"""One self-contained page: the pictures of figures.py, their data (csv text inside the page), the Vega
libraries (vl-convert's bundle, inside the page), the drill-down controls and the numbers as a table.
Nothing is fetched when the page is viewed."""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ioscope.base.fmt import fmt_ns
from ioscope.engines.pages import figures
from ioscope.engines.pages.cells import PHASES, Cells
from ioscope.engines.pages.figures import Table

PARSE = {
    "keys": {"k": "number"},
    "bands": {"b": "number", "lo": "number", "hi": "number"},
    **{f"heat_{p}": {x: "number" for x in ("t", "w", "b", "k", "n")} for p in PHASES},
    "overview": {x: "number" for x in ("t", "w", "ios")},
    "access": {x: "number" for x in ("t", "w", "s", "s2", "k", "n", "m")},
    "curves": {x: "number" for x in ("t", "w", "k", "req", "ios", "bytes", "q2c", "seeks")},
    "points": {x: "number" for x in ("t", "q2c", "d2c", "q2d", "k", "sector", "bytes", "pid")},
    "overhead": {x: "number" for x in ("k", "q2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c")},
    "marks": {"t": "number", "t2": "number"},
    "change": {"s": "number"},
}


def vega_bundle() -> str:
    """vega, vega-lite and vega-embed as one script (vl-convert makes it; cached per vl-convert version,
    since making it takes seconds)."""
    from importlib.metadata import PackageNotFoundError, version
    try:   # the cache's key without importing vl_convert (its library is 88 MB)
        ver = version("vl-convert-python")
    except PackageNotFoundError:
        ver = "unknown"
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ioscope")
    path = os.path.join(cache, f"vega-bundle-{ver}.js")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text:
            return text
    except OSError:
        pass
    import vl_convert as vlc
    text = vlc.javascript_bundle(
        "window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;")
    try:
        os.makedirs(cache, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:   # no cache: made again next time
        pass
    return text


def _column_json(v: Any) -> str:
    if isinstance(v, list):
        return json.dumps(v)
    a = np.asarray(v)
    if np.issubdtype(a.dtype, np.integer):
        return json.dumps(a.astype(np.int64).tolist())
    # seconds to the ns
    return json.dumps(np.round(a.astype(np.float64), 9).tolist())


def columns_json(data: dict[str, Table]) -> str:
    """The data sets as JSON columns, {name: {column: [values]}}: the page builds its rows from them
    (JSON.parse is native; vega's csv parsing of 100,000 rows took a second)."""
    return "{" + ",".join(f"{json.dumps(name)}:{{" + ",".join(f"{json.dumps(col)}:{_column_json(v)}"
                                                              for col, v in t.items()) + "}"
                          for name, t in data.items()) + "}"


def csv_text(t: Table) -> str:
    """A data set as csv text (pyarrow's writer), for a static picture's specification."""
    import io

    import pyarrow as pa
    import pyarrow.csv as pacsv
    buf = io.BytesIO()
    pacsv.write_csv(pa.table({k: (v if isinstance(v, list) else np.asarray(v)) for k, v in t.items()}), buf)
    return buf.getvalue().decode()


def inline(spec: Any, data: dict[str, Table]) -> Any:
    """The specification with each named data set put inside it, as csv text (the page's script puts rows)."""
    if isinstance(spec, dict):
        out = {}
        for k, v in spec.items():
            if k == "data" and isinstance(v, dict) and set(v) == {"name"} and v["name"] in data:
                out[k] = {"values": csv_text(data[v["name"]]),
                          "format": {"type": "csv", "parse": PARSE[v["name"]]}}
            else:
                out[k] = inline(v, data)
        return out
    if isinstance(spec, list):
        return [inline(x, data) for x in spec]
    return spec


def lat_range(cells: list[Cells], phases: tuple[str, ...] = PHASES) -> tuple[int, int]:
    """The latency buckets holding I/O of these phases (lowest, highest)."""
    from ioscope.base import hist
    used = [int(b) for c in cells for p in phases for k in c.totals[p].n if c.totals[p].n[k]
            for b in (c.totals[p].counts[k].nonzero()[0][[0, -1]])]
    if not used:
        return hist.bucket_index(10_000), hist.bucket_index(10_000_000)
    return min(used), max(used)


def sampled_text(c: Cells) -> str:
    if not c.points_sampled:
        return f"every I/O ({len(c.points):,})"
    cut = int(c.points["q2c"].min()) if len(c.points) else 0
    return (f"the {len(c.points):,} slowest I/Os by Q2C of {c.points_of:,} (per disk; Q2C >= {fmt_ns(cut)}): "
            "a sample of the outliers, not every I/O")


def pictures(c: Cells, span: tuple[float, float], lo_b: int, hi_b: int) -> dict[str, dict[str, Any]]:
    """Every picture's specification, by file name."""
    out = {"overview": figures.overview_spec(c, span)}
    for p in PHASES:
        out[f"heat-{p}"] = figures.heat_spec(c, *lat_range([c], (p,)), span, p, f"{figures.PHASE_LABEL[p]} heat map")
    out["access"] = figures.access_spec(c, span)
    out["scatter"] = figures.scatter_spec(c, span, "completion time x latency: " + sampled_text(c))
    out["curves"] = figures.curves_spec(c, span)
    out["phases"] = figures.phases_spec(c, span)
    return out


def summary_rows(c: Cells) -> list[dict[str, Any]]:
    """Per disk (op 'all') and per disk and op: I/Os and percentiles of each phase, as report computes them
    (ioscope's log-linear histograms, exact min and max)."""
    rows = []
    for disk in c.keys.dims["disk"]:
        for op in ["all", *c.keys.dims["op"]]:
            want = {"disk": disk} if op == "all" else {"disk": disk, "op": op}
            ks = c.keys_where(**want)
            row: dict[str, Any] = {"disk": disk, "op": op}
            for p in PHASES:
                h = c.totals[p].hist(ks)
                row[p] = {"n": h.count, "p50": h.percentile(50), "p90": h.percentile(90), "p99": h.percentile(99),
                          "p99.9": h.percentile(99.9), "max": h.max, "min": h.min, "total": h.total}
            if row["q2c"]["n"] or row["d2c"]["n"] or row["q2d"]["n"]:
                rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    head = "<tr><th>disk</th><th>op</th>" + "".join(
        f"<th>{p.upper()} N</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th>" for p in PHASES) + "</tr>"
    body = []
    for r in rows:
        cells = "".join(f"<td class=n data-phase={p} data-f=n>{r[p]['n']:,}</td>"
                        + "".join(f"<td data-phase={p} data-f={f} data-ns={r[p][f]:.0f}>"
                                  f"{fmt_ns(r[p][f]) if r[p]['n'] else '-'}</td>"
                                  for f in ("p50", "p99", "p99.9", "max")) for p in PHASES)
        body.append(f"<tr data-disk='{html.escape(r['disk'])}' data-op='{html.escape(r['op'])}'>"
                    f"<td>{html.escape(r['disk'])}</td><td>{html.escape(r['op'])}</td>{cells}</tr>")
    return f"<table id=summary>{head}{''.join(body)}</table>"


def _marks_list(c: Cells) -> str:
    lines = []
    mk = figures.marks_csv(c)
    for kind, t, t2, text in zip(mk["kind"], mk["t"], mk["t2"], mk["text"]):
        lines.append(f"<li class='mark {kind}'>{kind}: {t:.6f} s to {t2:.6f} s: {html.escape(text)}</li>")
    return "<ul id=marks>" + "".join(lines) + "</ul>" if lines else "<p>none: the capture is whole.</p>"


def _capture_line(c: Cells) -> str:
    m = c.meta
    wall = None
    clock = m.get("clock")
    if isinstance(clock, dict) and isinstance(clock.get("wall_ns"), int) and isinstance(clock.get("mono_ns"), int):
        wall = clock["wall_ns"] + (c.t0 - clock["mono_ns"])
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(wall / 1e9)) if wall else "unknown wall time"
    parts = [html.escape(str(m.get("_path", ""))), f"host {html.escape(str(m.get('host', '?')))}",
             f"first block event {when}", f"{c.duration_ns / 1e9:.3f} s of block events",
             f"{c.n_ios:,} I/Os (Q2C N)"]
    lost = m.get("lost")
    if isinstance(lost, dict):
        parts.append(f"lost {lost.get('total', 0)}")
    if m.get("_truncation"):
        parts.append("cut short")
    if c.marks.first_ts is None:
        parts.append("<b>no block events: nothing was queued on the traced disks while it was recorded</b>")
    if isinstance(m.get("flight"), dict):
        parts.append("flight-recorder window")
    return " &middot; ".join(parts)


CSS = """
body{font-family:sans-serif;margin:12px 18px;color:#222;max-width:1100px}
h1{font-size:18px;margin:4px 0} h2{font-size:15px;margin:18px 0 4px;border-bottom:1px solid #ddd}
#controls{position:sticky;top:0;background:#f6f6f6;padding:6px;z-index:5;border:1px solid #ddd;font-size:13px}
#controls label{margin-right:10px;white-space:nowrap} #controls select{font-size:12px}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ddd;padding:2px 5px;text-align:right}
.note{font-size:12px;color:#555} #window{font-family:monospace}
"""

JS = r"""
const views = {};
const TIMES = {};
window.ioscopeTimes = TIMES;
function fill(spec) {
  if (Array.isArray(spec)) return spec.map(fill);
  if (spec && typeof spec === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(spec)) {
      if (k === 'data' && v && typeof v === 'object' && Object.keys(v).length === 1 && v.name in DATA)
        out[k] = {values: rows(v.name)};
      else out[k] = fill(v);
    }
    return out;
  }
  return spec;
}
function rows(name) {
  // the data set's columns as one object per row (each view gets its own: vega annotates them)
  const d = DATA[name], names = Object.keys(d), n = names.length ? d[names[0]].length : 0, out = new Array(n);
  for (let i = 0; i < n; i++) { const o = {}; for (const c of names) o[c] = d[c][i]; out[i] = o; }
  return out;
}
function niceStep(span, res, cols) {
  const raw = Math.max(span / cols, res);
  const e = Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) {
    const s = m * Math.pow(10, e);
    if (s >= raw * 0.999) return Math.max(1, Math.round(s / res)) * res;
  }
  return raw;
}
const state = {t_lo: FULL[0], t_hi: FULL[1]};
async function embed(id, spec) {
  const t = performance.now();
  if (views[id]) views[id].finalize();
  const r = await vegaEmbed('#' + id, fill(spec), {renderer: 'canvas', actions: false});
  views[id] = r.view;
  for (const [k, x] of Object.entries(state)) r.view.signal(k, x);
  TIMES[id] = performance.now() - t;
  return r.view;
}
async function setAll(values) {
  const phase = values.phase !== undefined && values.phase !== state.phase;
  Object.assign(state, values);
  if (phase && HEATS[state.phase]) {
    const v = await embed('heat', HEATS[state.phase]);
    v.addEventListener('click', onClick);
  }
  for (const v of Object.values(views)) {
    for (const [k, x] of Object.entries(values)) v.signal(k, x);
  }
  // resize: a filter or split changes how many rows a picture has; its canvas follows
  await Promise.all(Object.values(views).map(v => v.resize().runAsync()));
  document.getElementById('window').textContent =
    `${state.t_lo.toFixed(6)} s to ${state.t_hi.toFixed(6)} s, ${fmtS(stepOf())} per column`;
  document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
}
function fmtS(s) {
  return s >= 1 ? s.toFixed(3) + ' s' : s >= 1e-3 ? (s * 1e3).toFixed(3) + ' ms' : (s * 1e6).toFixed(1) + ' us';
}
function stepOf() { return niceStep(state.t_hi - state.t_lo, RES, COLUMNS); }
function zoom(lo, hi) {
  lo = Math.max(FULL[0], lo); hi = Math.min(FULL[1], Math.max(hi, lo + RES));
  return setAll({t_lo: lo, t_hi: hi, step: niceStep(hi - lo, RES, COLUMNS),
                 astep: niceStep(hi - lo, RES, COLUMNS / 3)});
}
function onClick(event, item) {
  if (item && item.datum && item.datum.col !== undefined && item.datum.col2 !== undefined)
    zoom(item.datum.col, item.datum.col2);
}
async function main() {
  for (const [id, spec] of Object.entries(SPECS)) await embed(id, spec);
  views['overview'].addSignalListener('brush', (name, value) => {
    const k = value && Object.keys(value)[0];
    if (k) zoom(value[k][0], value[k][1]); else zoom(FULL[0], FULL[1]);
  });
  if (views['heat']) views['heat'].addEventListener('click', onClick);
  for (const el of document.querySelectorAll('#controls select')) {
    el.addEventListener('change', () => {
      const v = el.dataset.num ? Number(el.value) : el.value;
      setAll({[el.name]: v});
    });
  }
  document.getElementById('reset').addEventListener('click', () => zoom(FULL[0], FULL[1]));
  document.getElementById('zoomout').addEventListener('click', () => {
    const c = (state.t_lo + state.t_hi) / 2, h = (state.t_hi - state.t_lo);
    zoom(c - h, c + h);
  });
  await setAll({});
}
window.ioscopeViews = views;
window.ioscopeZoom = zoom;
window.ioscopeSet = setAll;
main().catch(e => { console.error(e); document.body.dataset.error = String(e); });
"""


def _select(name: str, label: str, options: list[tuple[str, str]], num: bool = False) -> str:
    opts = "".join(f"<option value='{html.escape(v)}'>{html.escape(t)}</option>" for v, t in options)
    return (f"<label>{html.escape(label)} <select name={name}{' data-num=1' if num else ''}>{opts}</select></label>")


def controls(c: Cells, lo_b: int, hi_b: int, extra_split: list[tuple[str, str]] | None = None) -> str:
    from ioscope.base import hist
    d = c.keys.dims
    ranges = [("0", "auto")]
    for ns, label in ((100_000, "100us"), (10**6, "1ms"), (10**7, "10ms"), (10**8, "100ms"), (10**9, "1s"),
                      (10**10, "10s")):
        b = hist.bucket_index(ns) - 1
        if lo_b < b < hi_b:
            ranges.append((str(b), f"up to {label}"))
    parts = [
        _select("phase", "latency", [(str(i), p.upper()) for i, p in enumerate(PHASES)], num=True),
        _select("f_disk", "disk", [("*", "all")] + [(x, x) for x in d["disk"]]),
        _select("f_op", "op", [("*", "all")] + [(x, x) for x in d["op"]]),
        _select("f_comm", "process", [("*", "all")] + [(x, x) for x in sorted(d["comm"])]),
    ]
    if any(x != "?" for x in d["cgroup"]):
        parts.append(_select("f_cgroup", "cgroup", [("*", "all")] + [(x, x) for x in sorted(d["cgroup"])]))
    split = [("diskop", "disk and op"), ("disk", "disk"), ("op", "op"), ("comm", "process"), ("none", "nothing")]
    if any(x != "?" for x in d["cgroup"]):
        split.append(("cgroup", "cgroup"))
    parts.append(_select("split", "split by", split + (extra_split or [])))
    parts.append(_select("palette", "palette", [("false", "false colour (single I/Os visible)"), ("linear", "linear")]))
    parts.append(_select("lat_max", "range", ranges, num=True))
    parts.append(_select("colour_by", "access colour", [("latency", "latency"), ("op", "op")]))
    return ("<div id=controls>" + "".join(parts) + " <button id=zoomout>zoom out</button> <button id=reset>"
            "whole capture</button> <span class=note>shown: <span id=window></span>; draw an interval on the top "
            "strip or click a heat-map column to zoom in</span></div>")


def page(title: str, header_html: str, sections: list[tuple[str, str, str]], specs: dict[str, Any],
         data: dict[str, Table], full: tuple[float, float], res_s: float, controls_html: str,
         heats: dict[int, Any] | None = None) -> str:
    """sections: (element id, heading, note) in order; specs: element id -> specification."""
    body = [f"<h1>{html.escape(title)}</h1>", header_html, controls_html]
    for sid, head, note in sections:
        if head:
            body.append(f"<h2>{html.escape(head)}</h2>")
        if note:
            body.append(f"<p class=note>{note}</p>")
        if sid in specs:
            body.append(f"<div id='{sid}' class=picture></div>")
    script_data = ("const DATA = " + columns_json(data) + ";\nconst SPECS = "
                   + json.dumps(specs) + f";\nconst FULL = [{full[0]!r}, {full[1]!r}];\nconst RES = {res_s!r};\n"
                   f"const COLUMNS = {figures.COLUMNS};\nconst HEATS = " + json.dumps(heats or {}) + ";\n")
    safe = script_data.replace("</", "<\\/")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><meta name=viewport content='width=device-width'>"
            f"<title>{html.escape(title)}</title><style>{CSS}</style>"
            f"<script>{vega_bundle()}</script></head><body>" + "\n".join(body)
            + f"<script>{safe}</script><script>{JS}</script></body></html>")


def report_page(c: Cells) -> tuple[str, dict[str, dict[str, Any]], dict[str, Table]]:
    """The page of one capture, its pictures' specifications (for static files) and data."""
    lo_b, hi_b = lat_range([c])
    span = (0.0, max(c.duration_ns / 1e9, 1e-6))
    data = figures.datasets(c)
    data["bands"] = figures.bands_csv(lo_b, hi_b)
    pics = pictures(c, span, lo_b, hi_b)
    specs = {"overview": pics["overview"], "heat": pics["heat-q2c"], "access": pics["access"],
             "scatter": pics["scatter"], "curves": pics["curves"], "phases": pics["phases"]}
    rows = summary_rows(c)
    header = (f"<p class=note id=capture>{_capture_line(c)}</p>{_table(rows)}"
              "<p class=note>N, percentiles and max as report computes them (ioscope's log-linear buckets, within "
              "12.5%; max exact). Times: seconds from the capture's first block event.</p>"
              f"<script type='application/json' id=numbers>{json.dumps({'ios': c.n_ios, 'rows': rows})}</script>")
    sections = [
        ("overview", "I/Os over the whole capture, and where it is not whole", "Grey: before the first and after the "
         "last event, and idle gaps; orange: I/Os in flight at the capture's start or end (not in the latencies); "
         "red: events lost; green: a flight-recorder trigger. " + _marks_list(c)),
        ("heat", "Latency heat map", "Time across (the phase's end: completion, or issue for Q2D), latency up "
         "(ioscope's "
         "log-linear buckets, 8 per power of two), colour: I/Os in the cell. Beside it: the I/Os of the column "
         "under the pointer, per latency band. The false-colour palette gives a single I/O a clear colour; the "
         "linear one is proportional to the count. "
         f"Finest column: {fmt_ns(min(c.heat[p].res for p in PHASES))}."),
        ("access", "Access pattern", "Sector x issue time per disk (colour: the slowest D2C in the cell, or the op), "
         "and the seeks per second (an issue not starting where the previous one of that disk ended)."),
        ("scatter", "Completion time x latency", "Reads and writes apart; one point per I/O: " + sampled_text(c) + "."),
        ("curves", "Throughput over time", "IOPS (requests completed, as iostat counts them), MB/s, average request "
         "size, queue depth (the sum of Q2C of the I/Os completed in a column over its width: report's avgqu-sz), "
         "and the MB/s of the top processes (cgroups when split by cgroup)."),
        ("phases", "Where the time went (btt's phases)", "Each phase's share of Q2C's total time: Q2G (get "
         "request), G2I (insert), Q2M (merge), I2D (in the scheduler), M2D (merged, waiting for issue), D2C (the "
         "device)."),
    ]
    res = min(c.heat[p].res for p in PHASES) / 1e9
    doc = page(f"ioscope report: {os.path.basename(str(c.meta.get('_path', '')))}", header, sections, specs, data,
               span, res, controls(c, lo_b, hi_b), {i: pics[f"heat-{p}"] for i, p in enumerate(PHASES)})
    return doc, pics, data


Writer = Callable[[str, bytes], None]

__all__ = ["inline", "page", "report_page", "summary_rows", "vega_bundle"]
