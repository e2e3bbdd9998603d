"""The live page: the heat map of the last minutes (Vega-Lite, as the pages of report), its data fetched
from the tool's own /data every second. The Vega libraries are inside the page: nothing else is fetched."""

from __future__ import annotations

import html
import json
from typing import Any

from ioscope.base import hist
from ioscope.engines.pages import figures
from ioscope.engines.pages.html import CSS, vega_bundle

LO, HI = hist.bucket_index(1_000), hist.bucket_index(10_000_000_000)


def live_spec(window_s: int) -> dict[str, Any]:
    colour = {"condition": {"test": "palette == 'linear'", "field": "vlin", "type": "quantitative",
                            "scale": {"range": figures.LINEAR, "domain": [0, 1]}, "legend": None},
              "field": "vfalse", "type": "quantitative", "scale": {"range": figures.FALSE_COLOUR, "domain": [0, 1]},
              "legend": None}
    params = [{"name": n, "value": v} for n, v in (
        ("now", 0), ("window", window_s), ("phase", 0), ("f_disk", "*"), ("f_op", "*"), ("f_comm", "*"),
        ("f_cgroup", "*"), ("split", "diskop"), ("palette", "false"), ("lat_max", 0))]
    return {
        "$schema": figures.SCHEMA, "config": figures.CONFIG, "params": params, "data": {"name": "live"},
        "transform": [
            {"filter": "datum.p == phase"},
            {"lookup": "k", "from": {"data": {"name": "keys"}, "key": "k", "fields": list(figures.DIMS)}},
            {"filter": "(f_disk == '*' || datum.disk == f_disk) && (f_op == '*' || datum.op == f_op) && "
                       "(f_comm == '*' || datum.comm == f_comm) && (f_cgroup == '*' || datum.cgroup == f_cgroup)"},
            {"calculate": "split == 'none' ? 'all' : split == 'diskop' ? datum.disk + ' ' + datum.op : datum[split]",
             "as": "part"},
            {"calculate": "datum.t - now", "as": "x2"}, {"calculate": "datum.x2 - datum.w", "as": "x"},
            {"filter": "datum.x >= -window && datum.x2 <= 1 && (lat_max == 0 || datum.b <= lat_max)"},
            {"aggregate": [{"op": "sum", "field": "n", "as": "n"}], "groupby": ["x", "x2", "b", "part"]},
            {"calculate": "datum.b + 1", "as": "b2"},
            {"joinaggregate": [{"op": "max", "field": "n", "as": "peak"}]},
            {"calculate": "log(1 + datum.n) / log(1 + datum.peak)", "as": "vfalse"},
            {"calculate": "datum.n / datum.peak", "as": "vlin"}],
        "hconcat": [
            {"name": "live", "width": 640, "height": 240,
             "params": [{"name": "hover", "select": {"type": "point", "on": "pointerover", "fields": ["x", "part"],
                                                     "clear": "pointerout"}}],
             "mark": {"type": "rect", "tooltip": True, "clip": True},
             "encoding": {"x": {"field": "x", "type": "quantitative", "title": "seconds ago",
                                "scale": {"domain": {"expr": "[-window, 0]"}, "nice": False, "zero": False}},
                          "x2": {"field": "x2"},
                          "y": {"field": "b", "type": "quantitative", "title": "latency", "scale": {"zero": False},
                                "axis": figures._lat_axis(LO, HI)},
                          "y2": {"field": "b2"}, "color": colour,
                          "row": {"field": "part", "type": "nominal", "title": None},
                          "tooltip": [{"field": "x", "title": "seconds ago"}, {"field": "n", "title": "I/Os"},
                                      {"field": "part", "title": "of"}]}},
            {"name": "column", "width": 140, "height": 240,
             "transform": [{"filter": {"param": "hover", "empty": False}}],
             "mark": {"type": "rect", "tooltip": True, "color": "#b12a90"},
             "encoding": {"y": {"field": "b", "type": "quantitative", "title": None, "scale": {"zero": False},
                                "axis": figures._lat_axis(LO, HI)},
                          "y2": {"field": "b2"},
                          "x": {"field": "n", "type": "quantitative", "title": "I/Os in the column under the pointer",
                                "scale": {"domain": {"unionWith": [0, 1]}}},
                          "x2": {"datum": 0}}},
        ],
    }


JS = r"""
// the rows of the heat map's last minutes, kept here too: a view is embedded again with them when new keys
// (disks, processes, cgroups) appear, since a faceted view lays its rows out when it is made
let view = null, seq = 0, keys = [], rowsAll = [];
const state = {};
window.ioscopeLive = {rows: 0, ios: [0, 0, 0], polls: 0, embeds: 0, error: null};
function options(name, values) {
  const sel = document.querySelector(`select[name=${name}]`);
  if (!sel) return;
  const have = new Set(Array.from(sel.options).map(o => o.value));
  for (const v of values) {
    if (have.has(v)) continue;
    const o = document.createElement('option'); o.value = v; o.text = v; sel.add(o);
  }
}
async function embed(now) {
  const last = now || (view ? Number(view.signal('now')) : 0) || Date.now() / 1000;
  const params = SPEC.params.map(p => p.name === 'now' ? Object.assign({}, p, {value: last})
                                 : p.name in state ? Object.assign({}, p, {value: state[p.name]}) : p);
  const spec = Object.assign({}, SPEC, {params, datasets: {live: rowsAll.map(x => Object.assign({}, x)),
                                                           keys: keys.map(x => Object.assign({}, x))}});
  if (view) view.finalize();
  const r = await vegaEmbed('#live', spec, {renderer: 'canvas', actions: false});
  view = r.view;
  window.ioscopeLive.view = view;
  window.ioscopeLive.embeds += 1;
}
async function poll() {
  try {
    const r = await fetch('data?since=' + seq, {cache: 'no-store'});
    const d = await r.json();
    const rows = [];
    let now = 0, lost = 0;
    for (const c of d.data) {
      for (const [p, k, b, n] of c.cells) { rows.push({p, k, b, n, t: c.t, w: c.w}); window.ioscopeLive.ios[p] += n; }
      now = Math.max(now, c.t); lost += c.lost;
    }
    seq = d.seq;
    const win = Number(view.signal('window'));
    const last = now || Number(view.signal('now'));
    rowsAll = rowsAll.concat(rows).filter(x => x.t >= last - win - 1);
    if (d.keys.length !== keys.length) {
      keys = d.keys;
      for (const dim of ['disk', 'op', 'comm', 'cgroup'])
        options('f_' + dim, [...new Set(keys.map(x => x[dim]))].sort());
      await embed(now);
    } else if (now) {
      view.change('live', view.changeset().insert(rows).remove(x => x.t < now - win - 1));
      view.signal('now', now);
    }
    if (d.status) {
      const al = document.getElementById('alerts');
      al.textContent = (d.status.alerts || []).join('\n');
      al.style.display = al.textContent ? 'block' : 'none';
      document.getElementById('pressure').textContent = (d.status.lines || []).join('\n');
      window.ioscopeLive.status = d.status;
    }
    if (now) {
      window.ioscopeLive.rows += rows.length;
      document.getElementById('status').textContent =
        `${new Date(now * 1000).toLocaleTimeString()}: ${rows.length} cells this poll; events lost: ${lost}`;
    }
    await view.runAsync();
    window.ioscopeLive.polls += 1;
  } catch (e) { window.ioscopeLive.error = String(e); document.getElementById('status').textContent = 'no data: ' + e; }
  setTimeout(poll, 1000);
}
async function main() {
  await embed(0);
  for (const el of document.querySelectorAll('#controls select')) {
    el.addEventListener('change', () => {
      state[el.name] = el.dataset.num ? Number(el.value) : el.value;
      view.signal(el.name, state[el.name]);
      view.resize().runAsync();   // a split or filter changes the rows: the canvas follows
    });
  }
  poll();
}
main().catch(e => { console.error(e); window.ioscopeLive.error = String(e); });
"""


def render(window_s: int, what: str) -> bytes:
    spec = live_spec(window_s)

    def sel(name: str, label: str, opts: list[tuple[str, str]], num: bool = False) -> str:
        o = "".join(f"<option value='{html.escape(v)}'>{html.escape(t)}</option>" for v, t in opts)
        return f"<label>{label} <select name={name}{' data-num=1' if num else ''}>{o}</select></label>"

    ranges = [("0", "auto")] + [(str(hist.bucket_index(ns) - 1), f"up to {lab}") for ns, lab in (
        (10**6, "1ms"), (10**7, "10ms"), (10**8, "100ms"), (10**9, "1s"))]
    controls = ("<div id=controls>" + sel("phase", "latency", [("0", "Q2C"), ("1", "D2C"), ("2", "Q2D")], True)
                + "".join(sel(f"f_{d}", label, [("*", "all")]) for d, label in (
                    ("disk", "disk"), ("op", "op"), ("comm", "process"), ("cgroup", "cgroup")))
                + sel("split", "split by", [("diskop", "disk and op"), ("disk", "disk"), ("op", "op"),
                                            ("comm", "process"), ("cgroup", "cgroup"), ("none", "nothing")])
                + sel("palette", "palette", [("false", "false colour"), ("linear", "linear")])
                + sel("lat_max", "range", ranges, True) + "</div>")
    spec_js = json.dumps(spec).replace("</", "<\\/")
    doc = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>ioscope web</title>"
           f"<style>{CSS}</style><script>{vega_bundle()}</script></head><body>"
           f"<h1>ioscope web: live latency heat map</h1><p class=note>{html.escape(what)}</p>{controls}"
           "<p class=note id=status>waiting for the first second</p>"
           "<p class=note id=pressure></p>"
           "<pre id=alerts style='display:none;color:#b00020;font-weight:bold;margin:0.4em 0'></pre>"
           "<div id=live></div>"
           f"<script>const SPEC = {spec_js};</script><script>{JS}</script>"
           "</body></html>")
    return doc.encode()


__all__ = ["live_spec", "render"]
