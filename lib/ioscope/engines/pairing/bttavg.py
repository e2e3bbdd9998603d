"""btt's default output (its .avg file, or stdout): the tables of btt's view of a trace (engines/pairing/btt.py's
BttView, btt's own pairing) and their text, byte for byte what the real btt prints. Shared by `ioscope report`
(its btt sections, `report --btt`) and `ioscope btt` (`-o NAME` -> NAME.avg). Every number is computed in
build_tables, as btt computes it (its summary rows included); render_btt only formats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ioscope.base import devices
from ioscope.engines.pairing import btt
from ioscope.engines.pairing.btt import Avg, BttDev, BttView, is_remapper, live_summary

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
class AvgTable:
    """One of btt's MIN AVG MAX N tables: its header label and (row label, Avg) rows with N > 0."""

    head: str
    rows: list[tuple[str, Avg]]


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



@dataclass
class BttTables:
    """Every table btt prints by default and with -A, from btt's view."""

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


def empty_view(time_zero: int = 0) -> BttView:
    return BttView([], [], {k: Avg() for k in btt.BTT_AVGS}, (0, 0, 0), time_zero)


def select(v: BttView, devices: list[int] | None, exes: list[str] | None) -> BttView:
    """btt's -D and -e: its output's per-device rows of the devices listed, in their order (as often as
    listed), and its per-process rows of the processes named, in their order (a name btt has no process by
    left out); every total stays the whole trace's. A device listed that btt never set up: KeyError (btt
    crashes on it)."""
    if devices is not None:
        by_dev = {d.dev: d for d in v.devices}
        missing = [d for d in devices if d not in by_dev]
        if missing:
            raise KeyError(missing[0])
        v = dataclasses.replace(v, devices=[by_dev[d] for d in devices])
    if exes is not None:
        at = {name: i for i, (name, _a) in enumerate(v.processes)}
        keep = [at[e] for e in exes if e in at]
        v = dataclasses.replace(v, processes=[v.processes[i] for i in keep],
                                proc_ranges=[v.proc_ranges[i] for i in keep])
    return v


def build_tables(v: BttView) -> BttTables:
    """Every table of btt's output from btt's view, its summary rows computed as btt computes them."""
    plug, unplug = _plugs(v)
    everything, procs, devs = _avg_tables(v)
    return BttTables(everything, procs, devs, _overhead(v), _merge(v),
                     {"q2q": _seeks(v, "q2q_seek"), "d2d": _seeks(v, "d2d_seek")}, plug, unplug, _active(v),
                     _live(v), _q2d(v))


# ----------------------------------------------------------------------------- text

def _hdr(out: list[str], title: str) -> None:
    out.append(f"==================== {title} ====================")
    out.append("")


def _block(out: list[str], head: str, dash: str, rows: Iterable[str], summary: Iterable[str] = ()) -> None:
    """One of btt's tables: its header and dashes, a line per row, its summary lines, a blank line."""
    out += [head, dash, *rows, *summary, ""]


def _avg_head(label: str) -> str:
    return f"{label:>15s} {'MIN':>13s} {'AVG':>13s} {'MAX':>13s} {'N':>11s}"


AVG_DASH = "--------------- ------------- ------------- ------------- -----------"


def _avg_rows(rows: Iterable[tuple[str, Avg]]) -> list[str]:
    return [f"{label:<15s} {btt.bit_time(a.min):13.9f} {a.avg:13.9f} {btt.bit_time(a.max):13.9f} {a.n:11d}"
            for label, a in rows]


def _avg_groups(out: list[str], groups: list[list[AvgTable]]) -> None:
    """btt -A's per-process or per-device tables: one per phase, a blank line after the *dm group."""
    for group in groups:
        for t in group:
            _block(out, _avg_head(t.head), AVG_DASH, _avg_rows(t.rows))
        if group is groups[0]:
            out.append("")


def _summary(dash: str, head: str | None, *lines: str) -> list[str]:
    """A table's summary: a dash, its header again (if given), its lines; nothing when it has no lines."""
    return [dash, *([head] if head else []), *lines] if lines else []


def render_btt(m: BttTables, all_data: bool = True, per_process: bool = True) -> list[str]:
    """btt's text sections (All Devices ... I/O Active Period; with all_data the -A tables too), from btt's
    view of the records: what the real btt prints for the same trace, byte for byte. per_process False: no
    Per Process section (btt's -e with an empty list)."""
    out: list[str] = []
    if all_data:
        if per_process:
            _hdr(out, "Per Process")
            _avg_groups(out, m.per_process)
        _hdr(out, "Per Device")
        _avg_groups(out, m.per_device)
    _hdr(out, "All Devices")
    dm, other = m.all_devices
    _block(out, _avg_head("ALL"), AVG_DASH, [*_avg_rows(dm), "", *_avg_rows(other)])

    _hdr(out, "Device Overhead")
    head = f"{'DEV':>10s} | {'Q2G':>9s} {'G2I':>9s} {'Q2M':>9s} {'I2D':>9s} {'D2C':>9s}"
    dash = "---------- | --------- --------- --------- --------- ---------"
    _by_dev(out, head, dash, [o.dev for o in m.overhead],
            [f"{_label(o.dev, 'Overall')} | " + " ".join(f"{o.pct[k]:8.4f}%" for k in OVERHEAD_PHASES)
             for o in m.overhead], "")

    _hdr(out, "Device Merge Information")
    head = (f"{'DEV':>10s} | {'#Q':>8s} {'#D':>8s} {'Ratio':>7s} | "
            f"{'BLKmin':>8s} {'BLKavg':>8s} {'BLKmax':>8s} {'Total':>8s}")
    dash = "---------- | -------- -------- ------- | -------- -------- -------- --------"
    _by_dev(out, head, dash, [g.dev for g in m.merge],
            [f"{_label(g.dev, 'TOTAL')} | {g.q:8d} {g.d:8d} {g.ratio:7.1f} | {g.blk_min:8d} {g.blk_avg:8d} "
             f"{g.blk_max:8d} {g.blk_total:8d}" for g in m.merge], head)

    more = f"{'':10s}   {'':15s} {'':15s} {'':15s}   ...({{}} more)"
    for title, key in (("Device Q2Q Seek Information", "q2q"), ("Device D2D Seek Information", "d2d")):
        _hdr(out, title)
        head = f"{'DEV':>10s} | {'NSEEKS':>15s} {'MEAN':>15s} {'MEDIAN':>15s} | {'MODE':<15s}"
        dash = "---------- | --------------- --------------- --------------- | ---------------"
        rows: list[str] = []
        for sk in m.seeks[key].rows:
            line = (f"{_label(sk.dev, '')} | {sk.n:15d} {sk.mean:15.1f} {sk.median:15d} | "
                    f"{sk.modes[0] if sk.modes else 0}({sk.mode_count})")
            rows += [line, more.format(sk.more)] if sk.more > 1 else [line + "".join(f" {x}" for x in sk.modes[1:])]
        avg = m.seeks[key].average
        summary: list[str] = []
        if avg is not None:
            summary = _summary(dash, head.replace("       DEV", "   Overall"),
                               f"{'Average':>10s} | {avg.n:15d} {avg.mean:15.1f} {avg.median:15d} | "
                               f"{avg.modes[0]}({avg.mode_count})",
                               *([more.format(avg.more), ""] if avg.more > 0 else []))
        _block(out, head, dash, rows, summary)

    _hdr(out, "Plug Information")
    head = f"{'DEV':>10s} | {'# Plugs':>10s} {'# Timer Us':>10s}  | % Time Q Plugged"
    dash = "---------- | ---------- ----------  | ----------------"
    plugs = [f"{_label(p.dev, 'Average')} | {p.plugs:10d}({p.timer_unplugs:10d}) | {p.pct_time_plugged:13.9f}%"
             for p in m.plug]
    _by_dev(out, head, dash, [p.dev for p in m.plug], plugs)
    head = f"{'DEV':>10s} | {'IOs/Unp':>10s}   {'IOs/Unp(to)':>10s}"
    dash = "---------- | ----------   ----------"
    _by_dev(out, head, dash, [u.dev for u in m.unplug],
            [f"{_label(u.dev, 'Average')} | {u.ios_per_unplug:10.1f}   {u.ios_per_timer_unplug:10.1f}"
             for u in m.unplug])

    _hdr(out, "Active Requests At Q Information")
    _by_dev(out, f"{'DEV':>10s} | {'Avg Reqs @ Q':>13s}", "---------- | -------------", [a.dev for a in m.active],
            [f"{_label(a.dev, 'Average')} | {a.avg_reqs_at_q:13.1f}" for a in m.active],
            f"{'Overall':>10s} | {'Avgs Reqs @ Q':>13s}")

    _hdr(out, "I/O Active Period Information")
    head = f"{'DEV':>10s} | {'# Live':>10s} {'Avg. Act':>13s} {'Avg. !Act':>13s} {'% Live':>6s}"
    dash = "---------- | ---------- ------------- ------------- ------"
    _by_dev(out, head, dash, [lv.dev for lv in m.live],
            [f"{_label(lv.dev, 'Total Sys')} | {lv.n:10d} {lv.avg_active:13.9f} {lv.avg_inactive:13.9f} "
             f"{lv.pct_live:6.2f}" for lv in m.live], "")

    if all_data:
        _hdr(out, "Q2D Histogram")
        bars = "===== " * 10
        rows = [f"{_label(qd.dev, 'AVG')} | " + "".join(f"{x:5.1f} " for x in qd.pct) for qd in m.q2d]
        # btt's header ends its line early: the space of its last column lands on the dashes
        out += [f"{'DEV':>10s} | " + " ".join(f"{h:>5s}" for h in Q2D_HEADS), f" --------- | {bars}", *rows[:-1]]
        if m.q2d:
            out += [f"========== | {bars}", rows[-1], ""]
    return out


def _by_dev(out: list[str], head: str, dash: str, devs: list[int | None], rows: list[str],
            overall: str | None = None) -> None:
    """One of btt's per-device tables (_block): the rows of devices, then the summary row (dev None) after a
    dash and a header: the table's with 'Overall' for 'DEV' (None), the one given, or none ('')."""
    total = [r for d, r in zip(devs, rows) if d is None]
    again = head.replace("       DEV", "   Overall") if overall is None else overall or None
    _block(out, head, dash, [r for d, r in zip(devs, rows) if d is not None], _summary(dash, again, *total))


def _label(dev: int | None, summary: str) -> str:
    """A device's label in btt's tables, or the summary row's name."""
    return f"{summary if dev is None else dev_label(dev):>10s}"

