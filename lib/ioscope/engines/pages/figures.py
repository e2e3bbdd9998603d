"""Cells -> Vega-Lite specifications (docs/pages.md says why Vega-Lite).

Every picture reads the same named data sets (csv text, made once by `datasets`) and the same
parameters: the time window shown (t_lo, t_hi, seconds from the first event) and its column width
(step), the phase, the drill-down (f_disk, f_op, f_comm, f_cgroup: '*' for all; split: a dimension or
'none'), the palette and the latency range. The page's script sets them in every view at once; a static
picture is the same specification rendered with their defaults (the whole capture, every I/O).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from ioscope.base import hist
from ioscope.base.fmt import fmt_ns
from ioscope.engines.pages.cells import CURVE_COLS, KEY_BITS, MAX_KEYS, OVERHEAD, PHASES, Cells

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"
DIMS = ("disk", "op", "comm", "cgroup")
DIM_LABEL = {"disk": "disk", "op": "op", "comm": "process", "cgroup": "cgroup"}
PHASE_LABEL = {"q2c": "Q2C (queued to completed)", "d2c": "D2C (issued to completed: the device)",
               "q2d": "Q2D (queued to issued: the block layer)"}
WIDTH = 760
COLUMNS = 300          # columns of a heat map across the window shown
RANGES = ("auto", "100us", "1ms", "10ms", "100ms", "1s", "10s")
# the false-colour palette: the faintest cell is already a clear colour (Analytics' trick, which made a
# 0.17% stall visible); the linear one is proportional to the count
FALSE_COLOUR = ["#fde725", "#f89540", "#e16462", "#b12a90", "#6a00a8", "#0d0887"]
LINEAR = ["#f7fbff", "#08306b"]


def nice_step(span_s: float, res_s: float, cols: int = COLUMNS) -> float:
    """A column width of 1, 2 or 5 x 10^k seconds giving about cols columns over span, and a whole number of
    the cells' resolution res."""
    raw = max(span_s / cols, res_s)
    e = math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        s = m * 10.0 ** e
        if s >= raw * 0.999:
            k = max(1, round(s / res_s))
            return k * res_s
    return raw


Table = dict[str, Any]   # a data set: column name -> numpy array (numbers) or list (strings)


def _csv(header: list[str], cols: list[Any]) -> Table:
    return {h: np.asarray(c) for h, c in zip(header, cols)}


def rows_of(t: Table) -> int:
    return len(next(iter(t.values()))) if t else 0


def concat(a: Table, b: Table) -> Table:
    """Two data sets of the same columns, one after the other."""
    out: Table = {}
    for k, v in a.items():
        w = b[k]
        out[k] = v + w if isinstance(v, list) else np.concatenate([v, w])
    return out


def _with_zeros(tb: npt.NDArray[np.int64], key: npt.NDArray[np.int64], vals: dict[str, npt.NDArray[np.int64]]
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], dict[str, npt.NDArray[np.int64]]]:
    """The cells of a curve and a zero cell just before and after each run of them (per key), so that a line
    drops to zero where a stretch had no I/O instead of joining its neighbours across it."""
    if not len(tb):
        return tb, key, vals
    o = np.lexsort((tb, key))
    tb, key = tb[o], key[o]
    vals = {x: v[o] for x, v in vals.items()}
    same_next = np.r_[(key[1:] == key[:-1]) & (tb[1:] == tb[:-1] + 1), False]
    same_prev = np.r_[False, (key[1:] == key[:-1]) & (tb[1:] == tb[:-1] + 1)]
    after = ~same_next
    before = ~same_prev & (tb > 0)
    ztb = np.concatenate([tb[after] + 1, tb[before] - 1])
    zkey = np.concatenate([key[after], key[before]])
    # a zero cell where a cell of the same key already is (two runs one cell apart) is left out
    have = set(zip(tb.tolist(), key.tolist()))
    keep = np.array([(t, k) not in have for t, k in zip(ztb.tolist(), zkey.tolist())], bool)
    ztb, zkey = ztb[keep], zkey[keep]
    zero = np.zeros(len(ztb), np.int64)
    return (np.concatenate([tb, ztb]), np.concatenate([key, zkey]),
            {x: np.concatenate([v, zero]) for x, v in vals.items()})


def datasets(c: Cells, offset_s: float = 0.0, tag: str = "", key_offset: int = 0) -> dict[str, Table]:
    """The page's data sets (column tables): keys, heat per phase, access, overview, curves, points, overhead,
    marks. offset_s moves times (a second capture of a diff starts at its own 0); tag names the capture."""
    ks = c.keys
    keys: Table = {"k": np.arange(len(ks.keys), dtype=np.int64) + key_offset}
    for j, d in enumerate(DIMS):
        keys[d] = [ks.dims[d][k[j]] for k in ks.keys]
    keys["cap"] = [tag] * len(ks.keys)
    out: dict[str, Table] = {"keys": keys}
    # heat, per phase: column start (s), column width (s), bucket, key, I/Os
    for p in PHASES:
        s = c.heat[p]
        out[f"heat_{p}"] = _csv(["t", "w", "b", "k", "n"],
                                [s.tb * s.res / 1e9 + offset_s, np.full(len(s.tb), s.res / 1e9),
                                 s.other >> KEY_BITS, (s.other & (MAX_KEYS - 1)) + key_offset,
                                                            s.vals["n"]])
    a = c.access
    shift = np.array([c.sector_shift.get(ks.dims["disk"][k[0]], 0) for k in ks.keys] or [0], np.int64)
    kk = a.other & (MAX_KEYS - 1)
    sb = a.other >> KEY_BITS
    out["access"] = _csv(["t", "w", "s", "s2", "k", "n", "m"],
                         [a.tb * a.res / 1e9 + offset_s, np.full(len(a.tb), a.res / 1e9),
                          sb << shift[kk], (sb + 1) << shift[kk], kk + key_offset, a.vals["n"], a.vals["maxb"]])
    cv = c.curves
    span = max(c.duration_ns / 1e9, 1e-6)
    ostep = nice_step(span, cv.res / 1e9, 600)
    ocol = np.floor(cv.tb * cv.res / 1e9 / ostep).astype(np.int64)
    oios = np.bincount(ocol, weights=cv.vals["ios"]) if len(ocol) else np.zeros(0)
    out["overview"] = _csv(["t", "w", "ios"], [np.arange(len(oios)) * ostep + offset_s, np.full(len(oios), ostep),
                                                oios.astype(np.int64)])
    out["overview"]["cap"] = [tag] * len(oios)
    tb, kk, vals = _with_zeros(cv.tb, cv.other, {x: cv.vals[x] for x in CURVE_COLS})
    out["curves"] = _csv(["t", "w", "k", "req", "ios", "bytes", "q2c", "seeks"],
                         [tb * cv.res / 1e9 + offset_s, np.full(len(tb), cv.res / 1e9), kk + key_offset,
                          *(vals[x] for x in ("req", "ios", "bytes")), vals["q2c_sum"] / 1e9, vals["seeks"]])
    pt = c.points
    out["points"] = _csv(["t", "q2c", "d2c", "q2d", "k", "sector", "bytes", "pid"],
                         [pt["t"] / 1e9 + offset_s, pt["q2c"] / 1e9, np.where(pt["d2c"] >= 0, pt["d2c"] / 1e9, -1),
                          np.where(pt["q2d"] >= 0, pt["q2d"] / 1e9, -1), pt["key"] + key_offset, pt["sector"],
                          pt["bytes"],
                          pt["pid"]])
    ov = sorted(c.overhead.items())
    out["overhead"] = _csv(["k", *OVERHEAD, "q2c"],
                           [np.array([k + key_offset for k, _ in ov], np.int64)]
                           + [np.array([v[x] / 1e9 for _, v in ov], np.float64) for x in (*OVERHEAD, "q2c")])
    out["marks"] = marks_csv(c, offset_s, tag)
    return out


def bands_csv(lo_b: int, hi_b: int) -> Table:
    bs = list(range(lo_b, hi_b + 1))
    lo = [hist.bucket_low(b) for b in bs]
    hi = [hist.bucket_high(b) for b in bs]
    return {"b": np.array(bs, np.int64), "lo": np.array(lo) / 1e9, "hi": np.array(hi) / 1e9,
            "label": [fmt_ns(x) + "-" + fmt_ns(y) for x, y in zip(lo, hi)]}


def marks_csv(c: Cells, offset_s: float = 0.0, tag: str = "") -> Table:
    """Where the capture is not whole, as time spans: kind, start, end (s), text."""
    m = c.marks
    t0 = c.t0
    rows: list[tuple[str, float, float, str, str]] = []

    def add(kind: str, a: int, b: int, text: str) -> None:
        rows.append((kind, (a - t0) / 1e9 + offset_s, (b - t0) / 1e9 + offset_s, text, tag))

    meta = c.meta
    att, det = meta.get("attached_mono_ns"), (meta.get("end") or {}) if isinstance(meta.get("end"), dict) else {}
    if isinstance(att, int) and m.first_ts is not None and att < m.first_ts:
        add("edge", att, m.first_ts, "recording started (programs attached); no block event before the first one")
    end_mono = det.get("mono_ns") if isinstance(det, dict) else None
    if isinstance(end_mono, int) and end_mono > m.last_ts:
        add("edge", m.last_ts, end_mono, "after the last block event, until the recording stopped")
    for a, b in m.gaps:
        add("gap", a, b, f"no block event for {(b - a) / 1e9:.3f} s")
    if m.in_flight_start:
        t = max(m.in_flight_start)
        add("inflight", min(m.in_flight_start), t, f"{m.n_in_flight_start} I/Os in flight when the capture began "
            "(completed here, queued before it: not in the latencies)")
    if m.in_flight_end:
        add("inflight", min(m.in_flight_end), max(m.in_flight_end), f"{m.n_in_flight_end} I/Os queued here never "
            "completed before the capture ended (not in the latencies)")
    prev_total = 0
    for a, b, lost in c.losses:
        tot = int(lost.get("total", 0) or 0)
        if tot > prev_total:
            add("loss", a, b, f"{tot - prev_total} events lost in this stretch ({tot} in all so far)")
        prev_total = max(prev_total, tot)
    fl = meta.get("flight")
    if isinstance(fl, dict):
        trig = fl.get("trigger") or {}
        if isinstance(trig.get("mono_ns"), int):
            t = int(trig["mono_ns"])
            add("trigger", t, t, f"flight recorder trigger: {trig.get('why', '')}")
    if meta.get("_truncation"):
        add("cut", m.last_ts, m.last_ts, str(meta["_truncation"]))
    return {"kind": [r[0] for r in rows], "t": np.array([r[1] for r in rows], np.float64),
            "t2": np.array([r[2] for r in rows], np.float64), "text": [r[3] for r in rows], "cap": [r[4] for r in rows]}


# ----------------------------------------------------------------------------- parameters and transforms

def base_params(c: Cells, span: tuple[float, float], phase: str = "q2c", split: str = "diskop") -> list[dict[str, Any]]:
    res = min(c.heat[p].res for p in PHASES) / 1e9
    step = nice_step(span[1] - span[0], res)
    return [
        {"name": "t_lo", "value": span[0]}, {"name": "t_hi", "value": span[1]}, {"name": "step", "value": step},
        {"name": "astep", "value": nice_step(span[1] - span[0], res, COLUMNS // 3)},
        {"name": "phase", "value": PHASES.index(phase)},
        {"name": "f_disk", "value": "*"}, {"name": "f_op", "value": "*"}, {"name": "f_comm", "value": "*"},
        {"name": "f_cgroup", "value": "*"}, {"name": "split", "value": split},
        {"name": "palette", "value": "false"}, {"name": "lat_max", "value": 0},
        {"name": "colour_by", "value": "latency"},
    ]


def _lookup() -> list[dict[str, Any]]:
    return [{"lookup": "k", "from": {"data": {"name": "keys"}, "key": "k", "fields": [*DIMS, "cap"]}},
            {"filter": "(f_disk == '*' || datum.disk == f_disk) && (f_op == '*' || datum.op == f_op) && "
                       "(f_comm == '*' || datum.comm == f_comm) && (f_cgroup == '*' || datum.cgroup == f_cgroup)"},
            {"calculate": "split == 'none' ? 'all' : split == 'diskop' ? datum.disk + ' ' + datum.op : "
                          "split == 'capdiskop' ? datum.cap + ': ' + datum.disk + ' ' + datum.op : "
                          "split == 'cap' ? datum.cap : datum[split]", "as": "part"}]


def _window(field: str = "t", step: str = "step") -> list[dict[str, Any]]:
    """Cells inside the window shown, in columns of `step` seconds, or of whole cells where the cells are wider
    (columns aligned on the cells' own grid, so a cell is never split or drawn with gaps)."""
    return [{"filter": f"datum.{field} + datum.w > t_lo && datum.{field} < t_hi"},
            {"calculate": f"max(1, ceil({step} / datum.w - 1e-6)) * datum.w", "as": "colw"},
            {"calculate": f"floor(datum.{field} / datum.colw + 1e-6) * datum.colw", "as": "col"},
            {"calculate": "datum.col + datum.colw", "as": "col2"}]


def _time_x(title: str = "seconds from the first event") -> dict[str, Any]:
    return {"field": "col", "type": "quantitative", "title": title,
            "scale": {"domain": {"expr": "[t_lo, t_hi]"}, "nice": False, "zero": False}}


def _lat_axis(lo_b: int, hi_b: int) -> dict[str, Any]:
    """The latency axis on bucket numbers (log-linear: about log latency), labelled at 1, 2, 5, 10 ... us (at
    1, 10, 100 ... when the range spans more than three powers of ten)."""
    steps = (1, 2, 5) if hi_b - lo_b <= 3 * 27 else (1,)
    values = [m * 10**k for k in range(3, 12) for m in steps]
    ticks = [b for b in (hist.bucket_index(v) for v in values) if lo_b <= b <= hi_b + 1]
    labels = {hist.bucket_index(v): fmt_ns(v) for v in values}
    expr = " : ".join(f"datum.value == {b} ? '{lab}'" for b, lab in labels.items()) + " : ''"
    return {"values": ticks or [lo_b], "labelExpr": expr, "grid": True}


def heat_spec(c: Cells, lo_b: int, hi_b: int, span: tuple[float, float], phase: str = "q2c",
              title: str = "", by_capture: bool = False) -> dict[str, Any]:
    """Latency heat map (time x latency bucket, colour = I/Os) and, beside it, the counts per latency band of
    the column under the pointer. by_capture: the captures of a diff side by side (a column each)."""
    tr = [*_lookup(), *_window(),
          {"filter": "lat_max == 0 || datum.b <= lat_max"},
          {"aggregate": [{"op": "sum", "field": "n", "as": "n"}], "groupby": ["col", "col2", "b", "part", "cap"]},
          {"lookup": "b", "from": {"data": {"name": "bands"}, "key": "b", "fields": ["lo", "hi", "label"]}},
          {"joinaggregate": [{"op": "max", "field": "n", "as": "peak"}]},
          {"calculate": "log(1 + datum.n) / log(1 + datum.peak)", "as": "vfalse"},
          {"calculate": "datum.n / datum.peak", "as": "vlin"}]
    y_hi = {"expr": f"lat_max == 0 ? {hi_b + 1} : lat_max + 1"}
    colour = {"condition": {"test": "palette == 'linear'", "field": "vlin", "type": "quantitative",
                            "scale": {"range": LINEAR, "domain": [0, 1]}, "legend": None},
              "field": "vfalse", "type": "quantitative",
              "scale": {"range": FALSE_COLOUR, "domain": [0, 1]}, "legend": None}
    tooltip = [{"field": "col", "type": "quantitative", "title": "from (s)", "format": ".6f"},
               {"field": "label", "type": "nominal", "title": "latency"},
               {"field": "n", "type": "quantitative", "title": "I/Os"},
               {"field": "part", "type": "nominal", "title": "of"}]
    heat: dict[str, Any] = {
        "name": "heat", "width": WIDTH - 180, "height": 260,
        "params": [{"name": "hover", "select": {"type": "point", "on": "mouseover", "fields": ["col", "part"],
                                                "nearest": False, "clear": "mouseout"}}],
        "mark": {"type": "rect", "tooltip": True},
        "encoding": {
            "x": _time_x(), "x2": {"field": "col2"},
            "y": {"field": "b", "type": "quantitative", "title": "latency",
                  "scale": {"domain": {"expr": f"[{lo_b}, {y_hi['expr']}]"}, "nice": False, "zero": False},
                  "axis": _lat_axis(lo_b, hi_b)},
            "y2": {"field": "b2"},
            "color": colour,
            "row": {"field": "part", "type": "nominal", "title": None, "header": {"labelAngle": 0,
                                                                                   "labelAlign": "left"}},
            "tooltip": tooltip,
        },
    }
    tr.append({"calculate": "datum.b + 1", "as": "b2"})
    if by_capture:
        heat["encoding"]["column"] = {"field": "cap", "type": "nominal", "title": None, "sort": ["before", "after"]}
        heat["width"] = (WIDTH - 200) // 2
        heat["params"][0]["select"]["fields"] = ["col", "part", "cap"]
    side = {
        "name": "column", "width": 140, "height": 260,
        "transform": [{"filter": {"param": "hover", "empty": False}}],
        "mark": {"type": "rect", "tooltip": True, "color": "#b12a90"},
        "encoding": {
            "y": {"field": "b", "type": "quantitative", "title": None, "axis": _lat_axis(lo_b, hi_b),
                  "scale": {"domain": {"expr": f"[{lo_b}, {y_hi['expr']}]"}, "nice": False, "zero": False}},
            "y2": {"field": "b2"},
            "x": {"field": "n", "type": "quantitative", "title": "I/Os in the column under the pointer",
                  "scale": {"domain": {"unionWith": [0, 1]}}},
            "x2": {"datum": 0},
            "tooltip": [{"field": "label", "title": "latency"}, {"field": "n", "title": "I/Os"}],
        },
    }
    return {"$schema": SCHEMA, "title": title or None, "params": base_params(c, span, phase), "transform": tr,
            "data": {"name": f"heat_{phase}"}, "hconcat": [heat, side], "resolve": {"scale": {"color": "independent"}},
            "config": CONFIG}


CONFIG: dict[str, Any] = {"view": {"stroke": None}, "axis": {"labelFontSize": 10, "titleFontSize": 11},
                          "font": "sans-serif", "background": "white"}


def overview_spec(c: Cells, span: tuple[float, float], multi: bool = False) -> dict[str, Any]:
    """The whole capture: I/Os completed over time, with the marks; an interval drawn here zooms every picture."""
    full = (0.0, max(span[1], 1e-6))
    return {
        "$schema": SCHEMA, "config": CONFIG,
        "params": base_params(c, span),
        "layer": [
            {"name": "overview", "data": {"name": "overview"},
             "params": [{"name": "brush", "select": {"type": "interval", "encodings": ["x"]}}],
             "transform": [{"calculate": "datum.ios / datum.w", "as": "rate"}],
             "mark": {"type": "area", "interpolate": "step-after", "opacity": 0.6},
             "encoding": {"x": {"field": "t", "type": "quantitative", "title": "seconds from the first event",
                                "scale": {"domain": list(full), "nice": False, "zero": False}},
                          "y": {"field": "rate", "type": "quantitative", "title": "I/Os/s", "stack": None},
                          "color": {"field": "cap", "type": "nominal", "title": None,
                                    "legend": {"orient": "top-left"} if multi else None}},
             "width": WIDTH, "height": 70},
            {"data": {"name": "marks"},
             "mark": {"type": "rect", "opacity": 0.35, "tooltip": True, "clip": True},
             "encoding": {"x": {"field": "t", "type": "quantitative"}, "x2": {"field": "t2"},
                          "color": {"field": "kind", "type": "nominal", "title": "marks",
                                    "scale": {"domain": ["edge", "gap", "inflight", "loss", "trigger", "cut"],
                                              "range": ["#999999", "#bbbbbb", "#f58518", "#e45756", "#54a24b",
                                                        "#000000"]}},
                          "tooltip": [{"field": "kind"}, {"field": "text"}]}},
            {"data": {"name": "marks"}, "transform": [{"filter": "datum.t2 - datum.t < 1e-4"}],
             "mark": {"type": "rule", "strokeWidth": 2, "tooltip": True, "clip": True},
             "encoding": {"x": {"field": "t", "type": "quantitative"}, "color": {"field": "kind", "type": "nominal"},
                          "tooltip": [{"field": "kind"}, {"field": "text"}]}},
        ],
        "resolve": {"scale": {"color": "independent"}},
    }


def access_spec(c: Cells, span: tuple[float, float]) -> dict[str, Any]:
    """Where on each disk I/O went: sector x issue time, coloured by the slowest D2C of the cell or by op;
    and the seeks per second under it (seekwatcher's pictures, from the cells)."""
    tr = [*_lookup(), *_window(step="astep"),
          {"aggregate": [{"op": "sum", "field": "n", "as": "n"}, {"op": "max", "field": "m", "as": "m"}],
           "groupby": ["col", "col2", "s", "s2", "disk", "op", "part"]},
          {"lookup": "m", "from": {"data": {"name": "bands"}, "key": "b", "fields": ["lo", "label"]}},
          {"calculate": "datum.lo * 1000", "as": "slowest_ms"}]
    colour = {"condition": {"test": "colour_by == 'op'", "field": "op", "type": "nominal", "legend": {"title": "op"}},
              "field": "slowest_ms", "type": "quantitative", "title": "slowest D2C (ms)",
              "scale": {"type": "log", "scheme": "turbo"}}
    pattern = {
        "name": "access", "width": WIDTH, "height": 180, "transform": tr, "data": {"name": "access"},
        "mark": {"type": "rect", "tooltip": True},
        "encoding": {"x": _time_x("seconds from the first event (issue time)"), "x2": {"field": "col2"},
                     "y": {"field": "s", "type": "quantitative", "title": "sector", "scale": {"zero": False}},
                     "y2": {"field": "s2"}, "color": colour,
                     "row": {"field": "disk", "type": "nominal", "title": None},
                     "tooltip": [{"field": "disk"}, {"field": "col", "title": "from (s)", "format": ".6f"},
                                 {"field": "s", "title": "sector from"}, {"field": "n", "title": "I/Os"},
                                 {"field": "label", "title": "slowest D2C"}]},
    }
    seeks = {
        "name": "seeks", "width": WIDTH, "height": 90, "data": {"name": "curves"},
        "transform": [*_lookup(), *_window(),
                      {"aggregate": [{"op": "sum", "field": "seeks", "as": "seeks"}],
                       "groupby": ["col", "col2", "disk"]},
                      {"calculate": "datum.seeks / (datum.col2 - datum.col)", "as": "rate"}],
        "mark": {"type": "rule", "strokeWidth": 2, "tooltip": True},
        "encoding": {"x": _time_x(), "x2": {"field": "col2"},
                     "y": {"field": "rate", "type": "quantitative", "title": "seeks/s"},
                     "color": {"field": "disk", "type": "nominal"}},
    }
    return {"$schema": SCHEMA, "config": CONFIG, "params": base_params(c, span),
            "vconcat": [pattern, seeks], "resolve": {"scale": {"color": "independent"}}}


def scatter_spec(c: Cells, span: tuple[float, float], what: str) -> dict[str, Any]:
    """Completion time x latency, one point per I/O (every I/O, or the slowest per disk: `what` says)."""
    return {
        "$schema": SCHEMA, "config": CONFIG, "params": base_params(c, span),
        "data": {"name": "points"}, "title": {"text": what, "fontSize": 11, "fontWeight": "normal"},
        "transform": [*_lookup(), {"filter": "datum.t >= t_lo && datum.t <= t_hi"},
                      {"calculate": "phase == 0 ? datum.q2c : phase == 1 ? datum.d2c : datum.q2d", "as": "lat"},
                      {"filter": "datum.lat > 0"}, {"calculate": "datum.lat * 1000", "as": "ms"}],
        "name": "scatter", "width": WIDTH, "height": 200,
        "mark": {"type": "point", "filled": True, "size": 14, "opacity": 0.7, "tooltip": True},
        "encoding": {
            "x": {"field": "t", "type": "quantitative", "title": "completion (s from the first event)",
                  "scale": {"domain": {"expr": "[t_lo, t_hi]"}, "nice": False, "zero": False}},
            "y": {"field": "ms", "type": "quantitative", "title": "latency (ms)", "scale": {"type": "log"}},
            "color": {"field": "part", "type": "nominal", "title": None},
            "row": {"field": "op", "type": "nominal", "title": None},
            "tooltip": [{"field": "t", "format": ".6f", "title": "completed (s)"}, {"field": "ms", "title": "ms"},
                        {"field": "disk"}, {"field": "op"}, {"field": "comm", "title": "process"},
                        {"field": "pid"}, {"field": "cgroup"}, {"field": "sector"}, {"field": "bytes"}],
        },
    }


def curves_spec(c: Cells, span: tuple[float, float]) -> dict[str, Any]:
    """IOPS, MB/s, average size and queue depth over time (per disk, or per the split chosen), and the
    throughput of the top processes (and cgroups)."""
    def line(name: str, expr: str, title: str, colour: str = "cpart", height: int = 90) -> dict[str, Any]:
        return {"name": name, "width": WIDTH, "height": height,
                "transform": [{"calculate": expr, "as": "v"}, {"filter": "isValid(datum.v)"}],
                "mark": {"type": "rule", "strokeWidth": 2, "tooltip": True},
                "encoding": {"x": _time_x(), "x2": {"field": "col2"},
                             "y": {"field": "v", "type": "quantitative", "title": title},
                             "color": {"field": colour, "type": "nominal", "title": None},
                             "tooltip": [{"field": "col", "title": "from (s)", "format": ".6f"},
                                         {"field": colour, "title": "of"}, {"field": "v", "title": title,
                                                                            "format": ".4~f"}]}}

    tr = [*_lookup(), *_window(),
          {"calculate": "split == 'none' ? datum.disk : datum.part", "as": "cpart"},
          {"aggregate": [{"op": "sum", "field": x, "as": x} for x in ("req", "ios", "bytes", "q2c")],
           "groupby": ["col", "col2", "cpart"]}]
    top = {"name": "top", "width": WIDTH, "height": 110, "data": {"name": "curves"},
           "transform": [*_lookup(), *_window(),
                         {"calculate": "split == 'cgroup' ? datum.cgroup : datum.comm", "as": "who"},
                         {"joinaggregate": [{"op": "sum", "field": "bytes", "as": "who_bytes"}], "groupby": ["who"]},
                         {"aggregate": [{"op": "sum", "field": "bytes", "as": "bytes"},
                                        {"op": "max", "field": "who_bytes", "as": "wb"}],
                          "groupby": ["col", "col2", "who"]},
                         {"window": [{"op": "dense_rank", "as": "rank"}],
                          "sort": [{"field": "wb", "order": "descending"}]},
                         {"filter": "datum.rank <= 8"},
                         {"calculate": "datum.bytes / (datum.col2 - datum.col) / 1e6", "as": "v"}],
           "mark": {"type": "rule", "strokeWidth": 2, "tooltip": True},
           "encoding": {"x": _time_x(), "x2": {"field": "col2"},
                        "y": {"field": "v", "type": "quantitative", "title": "MB/s, top processes"},
                        "color": {"field": "who", "type": "nominal", "title": None},
                        "tooltip": [{"field": "who", "title": "process"}, {"field": "v", "title": "MB/s",
                                                                            "format": ".3f"}]}}
    return {"$schema": SCHEMA, "config": CONFIG, "params": base_params(c, span),
            "vconcat": [{"data": {"name": "curves"}, "transform": tr,
                         "vconcat": [line("iops", "datum.req / (datum.col2 - datum.col)", "IOPS"),
                                     line("mbs", "datum.bytes / (datum.col2 - datum.col) / 1e6", "MB/s"),
                                     line("size", "datum.req ? datum.bytes / datum.req / 1024 : null",
                                          "avg size (KiB)"),
                                     line("qd", "datum.q2c / (datum.col2 - datum.col)", "queue depth")]},
                        top],
            "resolve": {"scale": {"color": "independent"}}}


def phases_spec(c: Cells, span: tuple[float, float]) -> dict[str, Any]:
    """btt's Device Overhead as a picture: each phase's share of Q2C's total time, per disk (or split)."""
    return {
        "$schema": SCHEMA, "config": CONFIG, "params": base_params(c, span), "data": {"name": "overhead"},
        "name": "phases", "width": WIDTH - 160,
        "transform": [*_lookup(), {"calculate": "split == 'none' ? datum.disk : datum.part", "as": "cpart"},
                      {"aggregate": [{"op": "sum", "field": x, "as": x} for x in (*OVERHEAD, "q2c")],
                       "groupby": ["cpart"]},
                      {"fold": list(OVERHEAD), "as": ["phase", "s"]},
                      {"calculate": "datum.q2c > 0 ? 100 * datum.s / datum.q2c : 0", "as": "pct"}],
        "mark": {"type": "bar", "tooltip": True},
        "encoding": {"y": {"field": "cpart", "type": "nominal", "title": None},
                     "x": {"field": "pct", "type": "quantitative", "title": "% of Q2C time (btt's Device Overhead)",
                           "stack": "zero"},
                     "color": {"field": "phase", "type": "nominal", "sort": list(OVERHEAD),
                               "scale": {"domain": list(OVERHEAD)}},
                     "order": {"field": "phase", "sort": "ascending"},
                     "tooltip": [{"field": "cpart", "title": "of"}, {"field": "phase"},
                                 {"field": "pct", "format": ".2f", "title": "%"}]},
    }


__all__ = ["access_spec", "bands_csv", "curves_spec", "datasets", "heat_spec", "nice_step", "overview_spec",
           "phases_spec", "scatter_spec"]
