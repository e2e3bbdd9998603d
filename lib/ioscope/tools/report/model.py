"""The pure model of `ioscope report`: the engine's BttResult -> every number a view prints.

btt's tables come from btt's own view of the records (BttResult.btt: btt's pairing, devices, processes
and time base, so that they are what `btt -A` prints for the same trace), built by
engines/pairing/bttavg.py (shared with `ioscope btt`), summary rows (Overall, TOTAL, Average, AVG, Total
Sys) included, as btt computes them, and not while printing.
ioscope's own sections (percentiles, capture edges, heat map, iostat, stacks) come from ioscope's
corrected view (BttResult.stats ...). The text (report.py's render_*) and the JSON (report.py's
to_json) are two renderings of one ReportModel, so they cannot disagree. Nothing here reads files or
formats text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ioscope.base import cgroups as cgnames
from ioscope.base import devices, heat
from ioscope.engines.pairing.btt import BttResult, Stat, is_remapper
from ioscope.engines.pairing.bttavg import (
    Q2D_HEADS,
    BttTables,
    SeekRow,
    build_tables,
    empty_view,
)
from ioscope.engines.pairing.ios import NO_CGROUP, cgroup_path


@dataclass
class IostatRow:
    dev: int
    time: float                      # start of the interval, seconds from the first event
    values: dict[str, float]         # iostat's columns


@dataclass
class HeatMap:
    """Q2C heat map: counts[band, column], band 0 the fastest; ioscope's one heat quantisation (heat.py)."""

    grid: heat.HeatGrid | None       # None: no completed I/O
    bin_s: float                     # seconds per column


@dataclass
class StackMember:
    name: str
    dev: int | None                  # None: a partition (its I/O is counted on its disk, by remap)
    ios: int                         # the member's completed I/Os, or the bios remapped to/from it
    bytes: int
    share_ios: float                 # of the stack's, 0..1
    share_bytes: float
    q2c: Stat | None = None          # the member's own latency (a disk of a dm/md/btrfs stack)
    d2c: Stat | None = None


@dataclass
class StackRow:
    """A device made of others and what each member carried: dm, md or btrfs from the capture's sysfs
    record (meta["stacks"]: the members' completions), or from remap events (A: the bios a dm/md
    device sent to each device below it; a disk's partitions and the bios each sent to the disk)."""

    name: str
    kind: str                        # "dm", "md", "btrfs", "stacked", "partitions"
    label: str
    source: str                      # "members" (each member's completions) or "remaps" (A events)
    members: list[StackMember]


@dataclass
class CgroupRow:
    """One cgroup's I/Os (BttResult.cgroups): path None for the I/Os whose Q carries no cgroup."""

    id: int | None
    path: str | None
    label: str                       # base.cgroups.label: the path, and the container or pod it is
    ios: int                         # completed (each piece of a split bio one, as Q2C counts them)
    bytes: int
    unfinished: int                  # queued, not completed (in flight at the end, or replaced)
    q2c: Stat
    d2c: Stat


@dataclass
class ReportModel(BttTables):
    """btt's tables (bttavg.BttTables, from btt's view) and ioscope's own sections."""

    result: BttResult
    iostat: list[IostatRow]
    heat: HeatMap
    procs: list[str] = field(default_factory=list)
    stacks: list[StackRow] = field(default_factory=list)
    cgroups: list[CgroupRow] = field(default_factory=list)   # empty: the capture holds no cgroups
    cgroup_hierarchy: str | None = None                       # "v1 blkio", "v2"


def _iostat(r: BttResult) -> list[IostatRow]:
    out = []
    sec = r.iostat_interval / 1e9
    for (dev, k) in sorted(r.iostat):
        rio, wio, rs, ws, rm, wm, q2c_sum, q2c_n = (float(x) for x in r.iostat[(dev, k)])
        nios = rio + wio
        out.append(IostatRow(dev, k * r.iostat_interval / 1e9, {
            "rrqm/s": rm / sec, "wrqm/s": wm / sec, "r/s": rio / sec, "w/s": wio / sec,
            "rsec/s": rs / sec, "wsec/s": ws / sec, "rkB/s": rs / 2 / sec, "wkB/s": ws / 2 / sec,
            "avgrq-sz": (rs + ws) / nios if nios else 0.0,
            "avgqu-sz": (q2c_sum / 1e9) / sec,
            "await": (q2c_sum / q2c_n / 1e6) if q2c_n else 0.0,
        }))
    return out


HEAT_COLUMNS = 64
HEAT_ROWS = 24


def _heat(r: BttResult, width: int = HEAT_COLUMNS, max_rows: int = HEAT_ROWS) -> HeatMap:
    g = r.heat.grid                    # (time bins, log-linear buckets)
    if not len(g) or not g.sum():
        return HeatMap(None, r.heat.width / 1e9)
    cols = len(g)
    per = max(1, -(-cols // width))
    pad = (-cols) % per
    if pad:
        g = np.vstack([g, np.zeros((pad, g.shape[1]), dtype=g.dtype)])
    g = g.reshape(-1, per, g.shape[1]).sum(axis=1)
    grid = heat.HeatGrid.from_counts(g.astype(np.uint64), max_rows, len(g))
    return HeatMap(grid, r.heat.width * per / 1e9)


def _completed(r: BttResult) -> dict[int, tuple[int, int]]:
    """dev -> (I/Os completed, bytes), from the iostat counters (every completion, in every interval)."""
    out: dict[int, tuple[int, int]] = {}
    for (dev, _k), c in r.iostat.items():
        n, b = out.get(dev, (0, 0))
        out[dev] = (n + int(c[0] + c[1]), b + int(c[2] + c[3]) * 512)
    return out


def _members(rows: list[tuple[str, int | None, int, int]], r: BttResult, timed: bool) -> list[StackMember]:
    tot_n = sum(x[2] for x in rows) or 1
    tot_b = sum(x[3] for x in rows) or 1
    return [StackMember(name, dev, n, b, n / tot_n, b / tot_b,
                        r.stat("q2c", dev) if timed and dev is not None else None,
                        r.stat("d2c", dev) if timed and dev is not None else None) for name, dev, n, b in rows]


def _stacks(r: BttResult, meta: dict[str, Any]) -> list[StackRow]:
    names = {str(v["name"]): devices.kdev(int(v["major"]), int(v["minor"]))
             for v in (meta.get("devices") or {}).values() if "major" in v and v.get("name")}
    dev_names = {d: n for n, d in names.items()}
    parts = {devices.kdev(int(v["major"]), int(v["minor"])): str(v["name"])
             for v in (meta.get("partitions") or {}).values() if "major" in v and v.get("name")}
    done = _completed(r)
    out: list[StackRow] = []
    stacked: set[int] = set()
    for name, st in sorted((meta.get("stacks") or {}).items()):
        rows = [(m, names.get(m), *done.get(names.get(m, -1), (0, 0))) for m in st.get("members", [])]
        out.append(StackRow(name, str(st.get("kind")), str(st.get("label") or ""), "members",
                            _members(rows, r, timed=True)))
        if name in names:
            stacked.add(names[name])
    by_disk: dict[int, list[tuple[str, int | None, int, int]]] = {}
    by_upper: dict[int, list[tuple[str, int | None, int, int]]] = {}
    for (frm, to), (n, b) in sorted(r.remaps.items()):
        if frm in parts or (frm >> 20 == to >> 20 and frm != to and not is_remapper(frm)):
            by_disk.setdefault(to, []).append((parts.get(frm) or devices.kdev_str(frm), None, n, b))
        elif frm not in stacked:
            by_upper.setdefault(frm, []).append((dev_names.get(to) or devices.kdev_str(to), to, n, b))
    for disk, rows in sorted(by_disk.items()):
        out.append(StackRow(dev_names.get(disk) or devices.kdev_str(disk), "partitions", "", "remaps",
                            _members(rows, r, timed=False)))
    for upper, rows in sorted(by_upper.items()):
        kind = "md" if upper >> 20 == 9 else "dm" if is_remapper(upper) else "stacked"
        out.append(StackRow(dev_names.get(upper) or devices.kdev_str(upper), kind, "", "remaps",
                            _members(rows, r, timed=True)))
    return out


def _cgroups(r: BttResult, paths: dict[int, str]) -> list[CgroupRow]:
    """The cgroups' rows by path (the I/Os of Qs without one last); none when no Q carries a cgroup."""
    if not any(cg != NO_CGROUP for cg in r.cgroups):
        return []
    rows = []
    for cg, acc in r.cgroups.items():
        path = None if cg == NO_CGROUP else cgroup_path(cg, paths)
        label = "(no cgroup)" if path is None else cgnames.label(path)
        rows.append(CgroupRow(None if path is None else cg, path, label, acc.ios, acc.bytes, acc.unfinished,
                              acc.q2c, acc.d2c))
    return sorted(rows, key=lambda x: (x.path is None, x.path or ""))


def build(r: BttResult, meta: dict[str, Any] | None = None, cgroups: dict[int, str] | None = None) -> ReportModel:
    tables = build_tables(r.btt if r.btt is not None else empty_view(r.time_zero))
    return ReportModel(**vars(tables), result=r, iostat=_iostat(r), heat=_heat(r),
                       procs=sorted({p for (_ph, p) in r.proc_stats}), stacks=_stacks(r, meta or {}),
                       cgroups=_cgroups(r, cgroups or {}), cgroup_hierarchy=(meta or {}).get("cgroup_hierarchy"))


def stacks_json(m: ReportModel) -> list[dict[str, Any]]:
    def lat(st: Stat | None) -> dict[str, Any] | None:
        return None if st is None or not st.n else st.to_json()

    return [{"name": s.name, "kind": s.kind, "label": s.label, "source": s.source,
             "members": [{"name": x.name, "ios": x.ios, "bytes": x.bytes, "share_ios": x.share_ios,
                          "share_bytes": x.share_bytes, "q2c": lat(x.q2c), "d2c": lat(x.d2c)} for x in s.members]}
            for s in m.stacks]


def cgroups_json(m: ReportModel, pcts: tuple[float, ...]) -> list[dict[str, Any]] | None:
    """The per-cgroup table as JSON (None: the capture holds no cgroups); path null for the I/Os whose Q
    carries none."""
    if not m.cgroups:
        return None
    return [{"id": c.id, "path": c.path, "label": c.label, "ios": c.ios, "bytes": c.bytes, "unfinished": c.unfinished,
             "q2c": c.q2c.to_json(pcts) if c.q2c.n else None, "d2c": c.d2c.to_json(pcts) if c.d2c.n else None}
            for c in m.cgroups]


def summary_json(m: ReportModel) -> dict[str, Any]:
    """btt's summary rows (Overall, TOTAL, Average, AVG, Total Sys) as JSON: the numbers the text prints
    below each table."""
    def last(rows: list[Any]) -> Any:
        return rows[-1] if rows and rows[-1].dev is None else None

    ov, mg, pl, up, ac, lv, qd = (last(x) for x in (m.overhead, m.merge, m.plug, m.unplug, m.active, m.live, m.q2d))
    seeks = {k: t.average for k, t in m.seeks.items()}
    return {
        "overhead_pct": ov.pct if ov else None,
        "merge": None if mg is None else {"q": mg.q, "d": mg.d, "ratio": mg.ratio, "blk_min": mg.blk_min,
                                          "blk_avg": mg.blk_avg, "blk_max": mg.blk_max, "blk_total": mg.blk_total},
        "seek_q2q": _seek_avg(seeks["q2q"]), "seek_d2d": _seek_avg(seeks["d2d"]),
        "plug": None if pl is None else {"plugs": pl.plugs, "timer_unplugs": pl.timer_unplugs,
                                         "pct_time_plugged": pl.pct_time_plugged},
        "ios_per_unplug": None if up is None else {"ios_per_unplug": up.ios_per_unplug,
                                                   "ios_per_timer_unplug": up.ios_per_timer_unplug},
        "avg_reqs_at_q": ac.avg_reqs_at_q if ac else None,
        "active_periods": {"n": lv.n, "avg_active": lv.avg_active, "avg_inactive": lv.avg_inactive,
                           "pct_live": lv.pct_live},
        "q2d_histogram": dict(zip(Q2D_HEADS, qd.pct)) if qd else None,
    }


def _seek_avg(s: SeekRow | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"n": s.n, "mean": s.mean, "btt_median": s.median, "modes": s.modes, "mode_count": s.mode_count,
            "more_modes": s.more}


def heat_json(h: HeatMap) -> dict[str, Any] | None:
    if h.grid is None:
        return None
    return {"bin_s": h.bin_s, "band_low_ns": h.grid.lows, "band_high_ns": h.grid.highs,
            "counts": h.grid.counts.astype(np.int64).tolist()}
