"""The pure model of `ioscope report`: the engine's BttResult -> every number a view prints.

btt's tables come from btt's own view of the records (BttResult.btt: btt's pairing, devices, processes
and time base, so that they are what `btt -A` prints for the same trace); its summary rows (Overall,
TOTAL, Average, AVG, Total Sys) are computed here, as btt computes them, and not while printing.
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
from ioscope.engines.pairing import btt
from ioscope.engines.pairing.btt import Avg, BttDev, BttResult, BttView, Stat, is_remapper, live_summary
from ioscope.engines.pairing.ios import NO_CGROUP, cgroup_path

OVERHEAD_PHASES = ("q2g", "g2i", "q2m", "i2d", "d2c")
Q2D_HEADS = ("<.005", "<.010", "<.025", "<.050", "<.075", "<.100", "<.250", "<.500", "< 1.0", ">=1.0")


@dataclass
class OverheadRow:
    """Device Overhead: each phase's share of Q2C time, in percent."""

    dev: int | None                  # None: btt's Overall row
    pct: dict[str, float]


@dataclass
class MergeRow:
    dev: int | None                  # None: btt's TOTAL row (only with more than one device)
    q: int
    d: int
    ratio: float
    blk_min: int
    blk_avg: int
    blk_max: int
    blk_total: int


@dataclass
class SeekRow:
    dev: int | None                  # None: btt's Overall/Average row
    n: int
    mean: float
    median: int                      # btt's median
    modes: list[int]                 # the most frequent distances (btt prints the first, and how many more)
    mode_count: int
    more: int                        # modes not printed


@dataclass
class SeekTable:
    rows: list[SeekRow]
    average: SeekRow | None          # with at least one device


@dataclass
class PlugRow:
    dev: int | None                  # None: btt's Average row (only with more than one plugged device)
    plugs: int
    timer_unplugs: int
    pct_time_plugged: float


@dataclass
class UnplugRow:
    dev: int | None                  # None: btt's Average row
    ios_per_unplug: float
    ios_per_timer_unplug: float


@dataclass
class ActiveRow:
    dev: int | None                  # None: btt's Average row (only with more than one device)
    avg_reqs_at_q: float


@dataclass
class LiveRow:
    dev: int | None                  # None: btt's "Total Sys" row
    n: int
    avg_active: float
    avg_inactive: float
    pct_live: float


@dataclass
class Q2dRow:
    dev: int | None                  # None: btt's AVG row
    pct: list[float]                 # per Q2D_HEADS bucket


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
class AvgTable:
    """One of btt's MIN AVG MAX N tables: its header label and (row label, Avg) rows with N > 0."""

    head: str
    rows: list[tuple[str, Avg]]


@dataclass
class ReportModel:
    result: BttResult
    all_devices: list[list[tuple[str, Avg]]]   # btt's "All Devices": the *dm rows, then the others
    per_process: list[list[AvgTable]]  # btt -A: the *dm group and the other, per process
    per_device: list[list[AvgTable]]   # btt -A: the same per device
    overhead: list[OverheadRow]
    merge: list[MergeRow]
    seeks: dict[str, SeekTable]      # "q2q", "d2d"
    plug: list[PlugRow]
    unplug: list[UnplugRow]
    active: list[ActiveRow]
    live: list[LiveRow]
    q2d: list[Q2dRow]
    iostat: list[IostatRow]
    heat: HeatMap
    procs: list[str] = field(default_factory=list)
    stacks: list[StackRow] = field(default_factory=list)
    cgroups: list[CgroupRow] = field(default_factory=list)   # empty: the capture holds no cgroups
    cgroup_hierarchy: str | None = None                       # "v1 blkio", "v2"


def btt_n_qs(d: BttDev) -> int:
    """The Q count btt prints, and divides by, from its merge table on: printing that table raises a device's
    Q count to its D count where fewer Qs than Ds were seen (split bios: one Q, several Ds), and the later
    "Avg Reqs @ Q" divides by the raised count (btt's output.c, __output_dip_merge_ratio)."""
    return max(d.n_qs, d.n_ds) if d.n_qs and d.n_ds else d.n_qs


def avg_reqs_at_q(d: BttDev) -> float:
    """btt's "Avg Reqs @ Q": the requests active (queued, neither merged nor issued) when a Q came, averaged
    over btt's Q count."""
    return d.t_act_q / btt_n_qs(d) if d.n_qs else 0.0


def merge_info(d: BttDev) -> tuple[int, int, float, int] | None:
    """(#Q, #D, ratio, BLKavg) as btt computes them, or None when btt leaves the device out."""
    if d.n_qs == 0 or d.n_ds == 0:
        return None
    nq = btt_n_qs(d)
    return nq, d.n_ds, nq / d.n_ds, int(d.avgs["blks"].total / d.n_ds)


def plug_pct(d: BttDev) -> float:
    """% of the device's time with its queue plugged, computed as btt does, to the last bit: its times are
    doubles in seconds from the trace's time zero (BIT_TIME), the plugged time a sum of their differences
    (a plug still open at the end closed at the device's last event)."""
    delta = btt.bit_time(d.end_time) - btt.bit_time(d.start_time)
    return 100.0 * (_plugged_s(d) / delta) if delta > 0 else 0.0


def _plugged_s(d: BttDev) -> float:
    return d.plugged_s + (btt.bit_time(d.end_time) - d.last_plug if d.plugged else 0.0)


def _nplugs(d: BttDev) -> int:
    return d.nplugs + (1 if d.plugged else 0)


DM_ROWS = ("q2q_dm", "q2a_dm", "q2c_dm")
PHASE_ROWS = ("q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "d2c", "q2c")   # per process and per device (no M2D)
LABELS = {"q2q_dm": "Q2Qdm", "q2a_dm": "Q2Adm", "q2c_dm": "Q2Cdm", "q2q": "Q2Q", "q2a": "Q2A", "q2g": "Q2G",
          "s2g": "S2G", "g2i": "G2I", "q2m": "Q2M", "i2d": "I2D", "m2d": "M2D", "d2c": "D2C", "q2c": "Q2C",
          "q2d": "Q2D"}


def dev_label(dev: int) -> str:
    """A device as btt labels it: (maj,min), each 3 wide."""
    ma, mi = devices.kdev_split(dev)
    return f"({ma:3d},{mi:3d})"


def _avg_tables(v: BttView) -> tuple[list[list[tuple[str, Avg]]], list[list[AvgTable]], list[list[AvgTable]]]:
    everything = [[(LABELS[ph], v.all[ph]) for ph in group if v.all[ph].n] for group in (DM_ROWS, btt.ALL_ROWS[3:])]
    procs = [[AvgTable(LABELS[ph], [(name[:14], a[ph]) for name, a in v.processes if a[ph].n]) for ph in group]
             for group in (DM_ROWS, PHASE_ROWS)]
    devs = [[AvgTable(LABELS[ph], [(dev_label(d.dev), d.avgs[ph]) for d in v.devices if d.avgs[ph].n])
             for ph in group] for group in (DM_ROWS, PHASE_ROWS)]
    return everything, procs, devs


def _overhead(v: BttView) -> list[OverheadRow]:
    rows = []
    tot = {k: [0, 0] for k in (*OVERHEAD_PHASES, "q2c")}
    for d in v.devices:
        q2c = d.avgs["q2c"]
        if q2c.n > 0 and q2c.total > 0:
            rows.append(OverheadRow(d.dev, {k: 100.0 * d.avgs[k].total / q2c.total for k in OVERHEAD_PHASES}))
            for k in tot:
                tot[k][0] += d.avgs[k].total
                tot[k][1] += d.avgs[k].n
    if any(tot[k][1] for k in OVERHEAD_PHASES):
        q2c_total = float(tot["q2c"][0])
        rows.append(OverheadRow(None, {k: (100.0 * (tot[k][0] / q2c_total)) if tot[k][1] else 0.0
                                       for k in OVERHEAD_PHASES}))
    return rows


def _merge(v: BttView) -> list[MergeRow]:
    rows = []
    for d in v.devices:
        m = merge_info(d)
        if m is not None:
            b = d.avgs["blks"]
            rows.append(MergeRow(d.dev, m[0], m[1], m[2], b.min, m[3], b.max, b.total))
    if len(rows) > 1:
        q, nd, total = sum(x.q for x in rows), sum(x.d for x in rows), sum(x.blk_total for x in rows)
        ratio = float(np.float32(q) / np.float32(nd))  # btt divides in single precision
        rows.append(MergeRow(None, q, nd, ratio, min(x.blk_min for x in rows), total // nd,
                             max(x.blk_max for x in rows), total))
    return rows


def _seeks(v: BttView, attr: str) -> SeekTable:
    rows: list[SeekRow] = []
    entries: list[list[int]] = []      # [mode, count], the most recent first (btt's list)
    tn, tmean, tmed = 0, 0.0, 0
    for d in v.devices:
        sk: btt.Seeks = getattr(d, attr)
        if sk.n <= 0:
            continue
        rows.append(SeekRow(d.dev, sk.n, sk.mean, sk.btt_median, list(sk.modes), sk.most, sk.nmodes - 1))
        tn += sk.n
        tmean += sk.n * sk.mean
        tmed += sk.n * sk.btt_median
        for m in sk.modes:
            hit = next((e for e in entries if e[0] == m), None)
            if hit is not None:
                hit[1] += sk.most
            else:
                entries.insert(0, [m, sk.most])
    if not rows:
        return SeekTable(rows, None)
    best: list[list[int]] = []
    for e in entries:                   # btt keeps the most frequent, the last seen first
        if not best or e[1] > best[0][1]:
            best = [e]
        elif e[1] == best[0][1]:
            best.insert(0, e)
    more = rows[0].more if len(rows) == 1 else len(best) - 1   # one disk: its modes, however many
    return SeekTable(rows, SeekRow(None, tn, tmean / tn, tmed // tn, [e[0] for e in best], best[0][1], more))


def _plugs(v: BttView) -> tuple[list[PlugRow], list[UnplugRow]]:
    plug: list[PlugRow] = []
    for d in v.devices:
        if _nplugs(d) + d.nplugs_t > 0:
            plug.append(PlugRow(d.dev, _nplugs(d), d.nplugs_t, plug_pct(d)))
    if len(plug) > 1:
        n = len(plug)
        plug.append(PlugRow(None, sum(p.plugs for p in plug) // n, sum(p.timer_unplugs for p in plug) // n,
                            sum(p.pct_time_plugged for p in plug) / n))
    unplug: list[UnplugRow] = []
    nu = nut = tu = tut = 0
    for d in v.devices:
        a = a_t = 0.0
        nplugs = _nplugs(d)
        if d.nios_up and nplugs:
            a = d.nios_up / nplugs
            nu += nplugs
            tu += d.nios_up
        if d.nios_upt and d.nplugs_t:
            a_t = d.nios_upt / d.nplugs_t
            nut += d.nplugs_t
            tut += d.nios_upt
        unplug.append(UnplugRow(d.dev, a, a_t))
    if nu or nut:
        unplug.append(UnplugRow(None, (tu / nu) if nu else 0.0, (tut / nut) if nut else 0.0))
    return plug, unplug


def _active(v: BttView) -> list[ActiveRow]:
    rows = []
    tq = ta = 0
    for d in v.devices:
        if d.n_qs > 0 and not is_remapper(d.dev):
            rows.append(ActiveRow(d.dev, avg_reqs_at_q(d)))
            tq += btt_n_qs(d)
            ta += d.t_act_q
    if len(rows) > 1:
        rows.append(ActiveRow(None, ta / tq))
    return rows


def _live(v: BttView) -> list[LiveRow]:
    rows = [LiveRow(d.dev, *live_summary(d.live)) for d in v.devices]
    rows.append(LiveRow(None, *live_summary(v.live)))
    return rows


def _q2d(v: BttView) -> list[Q2dRow]:
    rows = []
    acc = [0] * len(Q2D_HEADS)
    for d in v.devices:
        n = sum(d.q2d_hist)
        if n:
            rows.append(Q2dRow(d.dev, [100.0 * c / n for c in d.q2d_hist]))
            acc = [a + c for a, c in zip(acc, d.q2d_hist)]
    if rows:
        n = sum(acc)
        rows.append(Q2dRow(None, [100.0 * c / n for c in acc]))
    return rows


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
    v = r.btt if r.btt is not None else BttView([], [], {k: Avg() for k in btt.BTT_AVGS}, (0, 0, 0), r.time_zero)
    seeks = {"q2q": _seeks(v, "q2q_seek"), "d2d": _seeks(v, "d2d_seek")}
    plug, unplug = _plugs(v)
    everything, procs, devs = _avg_tables(v)
    return ReportModel(r, everything, procs, devs, _overhead(v), _merge(v), seeks, plug, unplug, _active(v), _live(v),
                       _q2d(v), _iostat(r), _heat(r), sorted({p for (_ph, p) in r.proc_stats}), _stacks(r, meta or {}),
                       _cgroups(r, cgroups or {}), (meta or {}).get("cgroup_hierarchy"))


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


__all__ = ["Q2D_HEADS", "CgroupRow", "ReportModel", "build", "cgroups_json", "heat_json", "merge_info", "plug_pct",
           "summary_json"]
