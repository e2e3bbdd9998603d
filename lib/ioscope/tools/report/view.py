"""ioscope report: btt's latency breakdown of a capture, plus percentiles and a heat map."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ioscope.base import heat, outfile
from ioscope.base.devices import kdev_split, kdev_str
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.base.fmt import fmt_ns
from ioscope.capture.blktrace import EXPORT_BASE_OFFSET
from ioscope.capture.events import action_mask_note, join_events
from ioscope.engines.context import iolimits
from ioscope.engines.pairing import btt
from ioscope.engines.pairing.btt import ALL_ROWS, BttResult, DevState, Stat
from ioscope.tools.report import model as report_model
from ioscope.tools.report.model import (
    OVERHEAD_PHASES,
    Q2D_HEADS,
    ReportModel,
    heat_json,
    merge_info,
    plug_pct,
    stacks_json,
    summary_json,
)

LABELS = {"q2q_dm": "Q2Qdm", "q2a_dm": "Q2Adm", "q2c_dm": "Q2Cdm", "q2q": "Q2Q", "q2a": "Q2A", "q2g": "Q2G",
          "s2g": "S2G", "g2i": "G2I", "q2m": "Q2M", "i2d": "I2D", "m2d": "M2D", "d2c": "D2C", "q2c": "Q2C",
          "q2d": "Q2D"}
PCTS = (50.0, 90.0, 99.0, 99.9)


def dev_label(dev: int) -> str:
    ma, mi = kdev_split(dev)
    return f"({ma:3d},{mi:3d})"


def dev_key(dev: int) -> str:
    return kdev_str(dev)


def _hdr(out: list[str], title: str) -> None:
    out.append(f"==================== {title} ====================")
    out.append("")


def _avg_header(out: list[str], name: str) -> None:
    out.append(f"{name:>15s} {'MIN':>13s} {'AVG':>13s} {'MAX':>13s} {'N':>11s}")
    out.append("--------------- ------------- ------------- ------------- -----------")


def _avg_row(out: list[str], label: str, s: Stat) -> None:
    if s.n > 0:
        out.append(f"{label:<15s} {s.min / 1e9:13.9f} {s.avg:13.9f} {s.max / 1e9:13.9f} {s.n:11d}")


def render_btt(m: ReportModel, all_data: bool = True) -> list[str]:
    """btt's text sections (All Devices ... I/O Active Period; with all_data the -A tables too)."""
    r = m.result
    out: list[str] = []
    devs = list(r.devices.values())
    if all_data:
        _hdr(out, "Per Process")
        procs = sorted({p for (_ph, p) in r.proc_stats})
        for group in (("q2q_dm", "q2a_dm", "q2c_dm"), ("q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "d2c", "q2c")):
            for ph in group:
                _avg_header(out, LABELS[ph])
                for p in procs:
                    s = r.proc_stats.get((ph, p))
                    if s is not None:
                        _avg_row(out, p[:14], s)
                out.append("")
            if group[0] == "q2q_dm":
                out.append("")
        _hdr(out, "Per Device")
        for group in (("q2q_dm", "q2a_dm", "q2c_dm"), ("q2q", "q2a", "q2g", "s2g", "g2i", "q2m", "i2d", "d2c", "q2c")):
            for ph in group:
                _avg_header(out, LABELS[ph])
                for d in devs:
                    s = r.stats.get((ph, d.dev))
                    if s is not None:
                        _avg_row(out, dev_label(d.dev), s)
                out.append("")
            if group[0] == "q2q_dm":
                out.append("")
    _hdr(out, "All Devices")
    _avg_header(out, "ALL")
    for ph in ALL_ROWS:
        _avg_row(out, LABELS[ph], r.stat(ph))
        if ph == "q2c_dm":
            out.append("")
    out.append("")

    _hdr(out, "Device Overhead")
    out.append(f"{'DEV':>10s} | {'Q2G':>9s} {'G2I':>9s} {'Q2M':>9s} {'I2D':>9s} {'D2C':>9s}")
    out.append("---------- | --------- --------- --------- --------- ---------")
    for o in m.overhead:
        if o.dev is None:
            out.append("---------- | --------- --------- --------- --------- ---------")
        cells = " ".join(f"{o.pct[k]:8.4f}%" for k in OVERHEAD_PHASES)
        out.append(f"{_label(o.dev, 'Overall'):>10s} | {cells}")
    out.append("")

    _hdr(out, "Device Merge Information")
    head = (f"{'DEV':>10s} | {'#Q':>8s} {'#D':>8s} {'Ratio':>7s} | "
            f"{'BLKmin':>8s} {'BLKavg':>8s} {'BLKmax':>8s} {'Total':>8s}")
    dash = "---------- | -------- -------- ------- | -------- -------- -------- --------"
    out.append(head)
    out.append(dash)
    for mg in m.merge:
        if mg.dev is None:
            out.append(dash)
            out.append(head)
        out.append(f"{_label(mg.dev, 'TOTAL'):>10s} | {mg.q:8d} {mg.d:8d} {mg.ratio:7.1f} | {mg.blk_min:8d} "
                   f"{mg.blk_avg:8d} {mg.blk_max:8d} {mg.blk_total:8d}")
    out.append("")

    for title, key in (("Device Q2Q Seek Information", "q2q"), ("Device D2D Seek Information", "d2d")):
        _hdr(out, title)
        out.append(f"{'DEV':>10s} | {'NSEEKS':>15s} {'MEAN':>15s} {'MEDIAN':>15s} | {'MODE':<15s}")
        dash = "---------- | --------------- --------------- --------------- | ---------------"
        out.append(dash)
        table = m.seeks[key]
        for sk in table.rows:
            line = (f"{_label(sk.dev, ''):>10s} | {sk.n:15d} {sk.mean:15.1f} {sk.median:15d} | "
                    f"{sk.modes[0] if sk.modes else 0}({sk.mode_count})")
            if sk.more > 1:
                out.append(line)
                out.append(f"{'':10s}   {'':15s} {'':15s} {'':15s}   ...({sk.more} more)")
            else:
                out.append(line + "".join(f" {x}" for x in sk.modes[1:]))
        avg = table.average
        if avg is not None:
            out.append(dash)
            out.append(f"{'Overall':>10s} | {'NSEEKS':>15s} {'MEAN':>15s} {'MEDIAN':>15s} | {'MODE':<15s}")
            out.append(f"{'Average':>10s} | {avg.n:15d} {avg.mean:15.1f} {avg.median:15d} | "
                       f"{avg.modes[0]}({avg.mode_count})")
            if avg.more > 0:
                out.append(f"{'':10s}   {'':15s} {'':15s} {'':15s}   ...({avg.more} more)")
                out.append("")
        out.append("")

    _hdr(out, "Plug Information")
    out.append(f"{'DEV':>10s} | {'# Plugs':>10s} {'# Timer Us':>10s}  | % Time Q Plugged")
    out.append("---------- | ---------- ----------  | ----------------")
    for pl in m.plug:
        if pl.dev is None:
            out.append("---------- | ---------- ----------  | ----------------")
            out.append(f"{'Overall':>10s} | {'# Plugs':>10s} {'# Timer Us':>10s}  | % Time Q Plugged")
        out.append(f"{_label(pl.dev, 'Average'):>10s} | {pl.plugs:10d}({pl.timer_unplugs:10d}) | "
                   f"{pl.pct_time_plugged:13.9f}%")
    out.append("")
    out.append(f"{'DEV':>10s} | {'IOs/Unp':>10s}   {'IOs/Unp(to)':>10s}")
    out.append("---------- | ----------   ----------")
    for up in m.unplug:
        if up.dev is None:
            out.append("---------- | ----------   ----------")
            out.append(f"{'Overall':>10s} | {'IOs/Unp':>10s}   {'IOs/Unp(to)':>10s}")
        out.append(f"{_label(up.dev, 'Average'):>10s} | {up.ios_per_unplug:10.1f}   {up.ios_per_timer_unplug:10.1f}")
    out.append("")

    _hdr(out, "Active Requests At Q Information")
    out.append(f"{'DEV':>10s} | {'Avg Reqs @ Q':>13s}")
    out.append("---------- | -------------")
    for ac in m.active:
        if ac.dev is None:
            out.append("---------- | -------------")
            out.append(f"{'Overall':>10s} | {'Avgs Reqs @ Q':>13s}")
        out.append(f"{_label(ac.dev, 'Average'):>10s} | {ac.avg_reqs_at_q:13.1f}")
    out.append("")

    _hdr(out, "I/O Active Period Information")
    out.append(f"{'DEV':>10s} | {'# Live':>10s} {'Avg. Act':>13s} {'Avg. !Act':>13s} {'% Live':>6s}")
    out.append("---------- | ---------- ------------- ------------- ------")
    for lv in m.live:
        if lv.dev is None:
            out.append("---------- | ---------- ------------- ------------- ------")
        out.append(f"{_label(lv.dev, 'Total Sys'):>10s} | {lv.n:10d} {lv.avg_active:13.9f} {lv.avg_inactive:13.9f} "
                   f"{lv.pct_live:6.2f}")
    out.append("")

    if all_data:
        _hdr(out, "Q2D Histogram")
        out.append(f"{'DEV':>10s} | " + " ".join(f"{h:>5s}" for h in Q2D_HEADS))
        out.append(" --------- | " + "===== " * 10)  # btt's header ends its line early; the space lands here
        for qd in m.q2d:
            if qd.dev is None:
                out.append("========== | " + "===== " * 10)
            out.append(f"{_label(qd.dev, 'AVG'):>10s} | " + "".join(f"{x:5.1f} " for x in qd.pct))
        if m.q2d:
            out.append("")
    return out


def _label(dev: int | None, summary: str) -> str:
    """A device's label in btt's tables, or the summary row's name."""
    return summary if dev is None else dev_label(dev)


# ----------------------------------------------------------------------------- ioscope's additions

def render_percentiles(r: BttResult, name: Callable[[int], str]) -> list[str]:
    out = ["==================== Latency percentiles (ioscope) ====================", ""]
    head = f"{'':22s} {'PHASE':>5s} {'N':>10s} {'p50':>12s} {'p90':>12s} {'p99':>12s} {'p99.9':>12s} {'MAX':>12s}"
    out.append(head)
    out.append("-" * len(head))

    def row(label: str, ph: str, s: Stat) -> None:
        if s.n:
            h = s.hist()
            vals = " ".join(f"{h.percentile(p) / 1e9:12.9f}" for p in PCTS)
            out.append(f"{label[:22]:22s} {LABELS[ph]:>5s} {s.n:10d} {vals} {s.max / 1e9:12.9f}")

    for ph in ("q2c", "q2d", "d2c", "i2d", "q2g", "g2i"):
        row("all devices", ph, r.stat(ph))
    for d in r.devices:
        for ph in ("q2c", "q2d", "d2c"):
            row(name(d), ph, r.stat(ph, d))
    for p in sorted({p for (_ph, p) in r.proc_stats}):
        for ph in ("q2c", "d2c"):
            s = r.proc_stats.get((ph, p))
            if s is not None:
                row(p, ph, s)
    out.append("")
    return out


def btt_json(d: DevState) -> dict[str, Any]:
    """How btt pairs this disk's events, where that differs from report (its tree of Qs rebuilt as btt
    builds it): the Q2C and D2C N btt prints, the I/Os report completes that btt does not complete with
    the same C, and the G events btt gives to another I/O, each by reason."""
    return {
        "q2c_n": d.btt_q2c_n, "d2c_n": d.btt_d2c_n, "in_flight_at_end": d.btt_in_flight,
        "ios_paired_differently": {"split_bio": d.btt_diff_split, "inside_split_range": d.btt_diff_range,
                                   "other": d.btt_diff_other,
                                   "total": d.btt_diff_split + d.btt_diff_range + d.btt_diff_other},
        "g_given_to_another_io": {"split_bio": d.btt_g_split, "inside_split_range": d.btt_g_range,
                                  "other": d.btt_g_other,
                                  "total": d.btt_g_split + d.btt_g_range + d.btt_g_other},
    }


def render_btt_differences(r: BttResult, name: Callable[[int], str]) -> list[str]:
    """The section saying, per disk, how many I/Os btt pairs differently from report, and why."""
    devs = [(dev, d) for dev, d in r.devices.items()
            if d.btt_diff_split + d.btt_diff_range + d.btt_diff_other + d.btt_g_split + d.btt_g_range
            + d.btt_g_other]
    if not devs:
        return []
    out = ["==================== Where btt differs (ioscope) ====================", ""]
    out.append(f"{'DEV':>12s} | {'btt Q2C N':>10s} {'btt D2C N':>10s} | {'I/Os paired differently':>23s}: "
               f"{'split':>7s} {'in split':>8s} {'other':>6s} | {'Gs given elsewhere':>18s}")
    out.append("------------ | ---------- ---------- | ----------------------------------------------- | "
               "------------------")
    for dev, d in devs:
        diff = d.btt_diff_split + d.btt_diff_range + d.btt_diff_other
        g = d.btt_g_split + d.btt_g_range + d.btt_g_other
        out.append(f"{name(dev):>12s} | {d.btt_q2c_n:10d} {d.btt_d2c_n:10d} | {diff:23d}: {d.btt_diff_split:7d} "
                   f"{d.btt_diff_range:8d} {d.btt_diff_other:6d} | {g:18d}")
    out.append("")
    out.append("btt pairs the same events with its own rules (its tree of Qs is rebuilt here as btt builds it). "
               "btt Q2C N / D2C N: what btt prints; I/Os paired differently: I/Os this report completes that btt "
               "does not complete with the same C (it completes them later, with another I/O's C, or never); "
               "Gs given elsewhere: G events btt pairs with another I/O (its Q2G then runs from that I/O's Q).")
    out.append("split: a bio split (X) or one of its pieces: btt ignores X and never completes the bio, whose "
               "pieces each have their own G, D and C. in split: an I/O inside the range of such a bio, which "
               "btt keeps in flight for ever; its tree search may meet the stale bio first, which then takes "
               "the I/O's G, or blocks the walk that finds the I/O for its D and C. The tables above are "
               "report's: each I/O with its own events (docs/report.md, 'Where report and btt differ').")
    out.append("")
    return out


def render_unclean(r: BttResult, name: Callable[[int], str]) -> list[str]:
    out = ["==================== Capture edges (ioscope) ====================", ""]
    out.append(f"{'DEV':>12s} | {'ignored@start':>13s} {'dup Q':>6s} {'overlap Q':>9s} {'in flight@end':>13s} "
               f"{'(issued)':>8s} {'split pieces':>12s}")
    out.append("------------ | ------------- ------ --------- ------------- -------- ------------")
    for dev, d in r.devices.items():
        out.append(f"{name(dev):>12s} | {d.culled:13d} {d.dup_q:6d} {d.overlap_q:9d} {d.inflight:13d} "
                   f"{d.inflight_issued:8d} {d.split_pieces:12d}")
    out.append("")
    out.append("ignored@start: events of I/Os already in flight when the capture began (before the device's "
               "first Q or A);")
    out.append("dup Q: I/Os replaced by a later Q at the same start sector while in flight (btt keeps the later "
               "one); overlap Q: Qs overlapping one in flight (btt may lose one of them, ioscope does not);")
    out.append("in flight@end: Qs never completed (issued: of which D was seen). None of these is mixed into "
               "the tables above.")
    if any(d.split_pieces for d in r.devices.values()):
        out.append("split pieces: ioscope pairs each piece of a split bio (X) on its own, with the bio's Q time, "
                   "so the tables count requests as /proc/diskstats does (btt does not: 'Where btt differs').")
    out.append("")
    return out


def render_heatmap(m: ReportModel) -> list[str]:
    out = ["==================== Q2C heat map (ioscope) ====================", ""]
    grid = m.heat.grid
    if grid is None:
        out.append("(no completed I/O)")
        out.append("")
        return out
    counts = grid.counts
    peak = int(counts.max())
    for b in range(len(grid.lows) - 1, -1, -1):
        cells = "".join(heat.char(int(c), peak) for c in counts[b])
        out.append(f"{fmt_ns(grid.lows[b]):>9s} |{cells}|")
    out.append(f"{'':9s}  {'^ ' + f'{m.heat.bin_s:.6g} s per column, time from the first Q':<{counts.shape[1]}s}")
    out.append("a row holds latencies from its value to the next row's; darker = more I/Os (log scale, as top's)")
    out.append("")
    return out


def render_iostat(m: ReportModel, name: Callable[[int], str]) -> list[str]:
    out = [f"==================== iostat per {m.result.iostat_interval / 1e9:g} s (ioscope) ====================",
           ""]
    cols = ("rrqm/s", "wrqm/s", "r/s", "w/s", "rkB/s", "wkB/s", "avgrq-sz", "avgqu-sz", "await")
    out.append(f"{'Device':<12s} {'time':>10s} " + " ".join(f"{c:>9s}" for c in cols))
    for row in m.iostat:
        out.append(f"{name(row.dev):<12s} {row.time:10.3f} " + " ".join(f"{row.values[c]:9.2f}" for c in cols))
    out.append("")
    out.append("time: start of the interval, seconds from the first event; r/s, w/s: completions; rrqm/s, "
               "wrqm/s: merges; avgrq-sz in 512-byte sectors;")
    out.append("avgqu-sz: I/Os in the block layer on average (sum of Q2C of the I/Os completed / interval); await: "
               "their mean Q2C in ms.")
    out.append("")
    return out


def seek_json(sk: btt.Seeks) -> dict[str, Any]:
    return {"n": sk.n, "mean": sk.mean, "median": sk.median, "btt_median": sk.btt_median, "modes": sk.modes,
            "nmodes": sk.nmodes, "mode_count": sk.most, "distinct": sk.distinct}


def to_json(m: ReportModel, src_meta: dict[str, Any], name: Callable[[int], str]) -> dict[str, Any]:
    r = m.result

    def phases(getter: Callable[[str], Stat | None]) -> dict[str, Any]:
        res = {}
        for ph in btt.PHASES:
            s = getter(ph)
            if s is not None and s.n:
                res[ph] = s.to_json(PCTS)
        return res

    devices: dict[str, Any] = {}
    for dev, d in r.devices.items():
        mi = merge_info(d)
        n, act, nact, pl = d.live.summary(r.time_zero)
        devices[dev_key(dev)] = {
            "name": name(dev),
            "phases": phases(lambda ph, dev=dev: r.stats.get((ph, dev))),  # type: ignore[misc]
            "merge": None if mi is None else {"q": mi[0], "d": mi[1], "ratio": mi[2], "blk_min": d.blk_min,
                                              "blk_avg": mi[3], "blk_max": d.blk_max, "blk_total": d.blk_total},
            "seek_q2q": seek_json(d.q2q_seek),
            "seek_d2d": seek_json(d.d2d_seek),
            "plug": {"plugs": d.nplugs, "timer_unplugs": d.nplugs_t, "pct_time_plugged": plug_pct(d, r.time_zero),
                     "ios_per_unplug": d.nios_up / d.nplugs if d.nplugs and d.nios_up else 0.0,
                     "ios_per_timer_unplug": d.nios_upt / d.nplugs_t if d.nplugs_t and d.nios_upt else 0.0},
            "avg_reqs_at_q": d.t_act_q / d.n_qs if d.n_qs else 0.0,
            "active_periods": {"n": n, "avg_active": act, "avg_inactive": nact, "pct_live": pl},
            "q2d_histogram": dict(zip(Q2D_HEADS, d.q2d_hist)),
            "q2d_histogram_pct": next((dict(zip(Q2D_HEADS, q.pct)) for q in m.q2d if q.dev == dev), None),
            "overhead_pct": next((o.pct for o in m.overhead if o.dev == dev), None),
            "ignored_at_start": d.culled, "duplicate_q": d.dup_q, "overlapping_q": d.overlap_q,
            "split_bios": d.split_bios, "split_pieces": d.split_pieces, "btt": btt_json(d),
            "in_flight_at_end": r.inflight_end.get(dev, 0),
            "in_flight_at_end_issued": r.inflight_end_issued.get(dev, 0),
        }
    procs: dict[str, Any] = {}
    for p in sorted({p for (_ph, p) in r.proc_stats}):
        procs[p] = {"phases": phases(lambda ph, p=p: r.proc_stats.get((ph, p)))}  # type: ignore[misc]
    n, act, nact, pl = r.live_all.summary(r.time_zero)
    return {
        "units": "seconds",
        "events": r.n_events,
        "duration": (r.last_ts - r.first_ts) / 1e9 if r.n_events else 0.0,
        "phases": phases(lambda ph: r.stats.get((ph, -1))),
        "devices": devices,
        "processes": procs,
        "active_periods": {"n": n, "avg_active": act, "avg_inactive": nact, "pct_live": pl},
        "in_flight_at_end": sum(r.inflight_end.values()),
        "ignored_at_start": sum(d.culled for d in r.devices.values()),
        "iostat": [{"device": dev_key(x.dev), "time": x.time, **x.values} for x in m.iostat],
        "summary": summary_json(m),
        "heat_map": heat_json(m.heat),
        "stacks": stacks_json(m),
        "capture": {k: src_meta.get(k) for k in ("host", "kernel", "truncated", "lost", "action_mask")
                    if k in src_meta},
    }


def render_stacks(m: ReportModel) -> list[str]:
    """Each stacked device with what its members carried: a path or mirror taking all the load while
    its twin idles shows here (issue 13)."""
    if not m.stacks:
        return []
    out = ["", "==================== Stacked devices and their members ====================", ""]
    for s in m.stacks:
        what = {"partitions": f"disk {s.name}: the bios each partition sent to it (remap events)",
                "btrfs": f"btrfs {s.label or s.name.split(':', 1)[-1]}: each member's completed I/Os"}.get(
            s.kind, f"{s.kind} {s.name}{' (' + s.label + ')' if s.label else ''}: "
                    + ("each member's completed I/Os" if s.source == "members" else "the bios sent to each member"))
        out.append(what)
        out.append(f"{'member':<16}{'I/Os':>10}{'share':>8}{'MiB':>10}{'share':>8}{'Q2C avg':>13}{'D2C avg':>13}"
                   f"{'D2C p99':>13}")
        for x in s.members:
            def lat(st: Stat | None, p: float | None = None) -> str:
                if st is None or not st.n:
                    return "-"
                return f"{(st.hist().percentile(p) / 1e9 if p else st.avg):.9f}"
            out.append(f"{x.name:<16}{x.ios:>10}{100 * x.share_ios:>7.1f}%{x.bytes / 2**20:>10.1f}"
                       f"{100 * x.share_bytes:>7.1f}%{lat(x.q2c):>13}{lat(x.d2c):>13}{lat(x.d2c, 99):>13}")
        out.append("")
    return out


# ----------------------------------------------------------------------------- command

class CsvDumps:
    """Per-I/O latency files (btt's -l/-q/-z, as CSV): time_s,device,process,sector,latency_s.

    time_s is the Q time for q2c and the D time for q2d, the C time for d2c (as btt's files), in
    seconds from the trace's time zero (the blktrace export's 0).
    """

    def __init__(self, paths: dict[str, str], names: Callable[[int], str], procs: list[str],
                 t0: Callable[[], int]) -> None:
        self.t0 = t0   # times are written from the trace's time zero, like btt's files
        self.files: dict[str, IO[str]] = {}
        self.writers: dict[str, Any] = {}
        self.names = names
        self.procs = procs
        for ph, path in paths.items():
            try:
                f = outfile.open_private(path, "w", newline="", force=True)
            except IoscopeError:
                self.close()
                raise
            self.files[ph] = f
            w = csv.writer(f)
            w.writerow(["time_s", "device", "process", "sector", f"{ph}_s"])
            self.writers[ph] = w

    def __call__(self, ph: str, dev: npt.NDArray[Any], proc: npt.NDArray[Any], t: npt.NDArray[Any],
                 v: npt.NDArray[Any], sec: npt.NDArray[Any]) -> None:
        w = self.writers.get(ph)
        if w is None:
            return
        labels = {int(d): dev_key(int(d)) for d in np.unique(dev)}
        rel = (t.astype(np.int64) - self.t0()) / 1e9
        w.writerows((f"{ti:.9f}", labels[di], self.procs[pi] if pi >= 0 else "", si, f"{vi:.9f}")
                    for ti, di, pi, si, vi in zip(rel.tolist(), dev.tolist(), proc.tolist(), sec.tolist(),
                                                  (v / 1e9).tolist()))

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def batched(chunks: Iterable[npt.NDArray[np.void]], rows: int = 1 << 15) -> Iterator[npt.NDArray[np.void]]:
    """Join small chunks into batches of about rows events (fewer numpy calls; memory stays bounded)."""
    held: list[npt.NDArray[np.void]] = []
    n = 0
    for c in chunks:
        held.append(c)
        n += len(c)
        if n >= rows:
            yield join_events(held)
            held, n = [], 0
    if held:
        yield join_events(held)


def analyse_source(path: str, interval_ns: int = 1_000_000_000,
                   csv_paths: dict[str, str] | None = None) -> tuple[BttResult, Any]:
    from ioscope.capture.offline import open_source
    src = open_source(path)
    with src:
        # btt's times count from the trace's time zero: 0 in a blktrace file; for a capture, the time
        # export writes as 0 (just before the first event; the engine takes it from that event)
        engine = btt.Btt(src.comms, iostat_interval_ns=interval_ns, time_zero=0 if src.kind == "blktrace" else None)
        dumps = None
        if csv_paths:
            zero = 0 if src.kind == "blktrace" else EXPORT_BASE_OFFSET
            dumps = CsvDumps(csv_paths, lambda d: dev_key(d), engine.proc_names,
                             lambda: 0 if src.kind == "blktrace" else (engine.first_ts or 0) - zero)
            engine.on_latency = dumps
        try:
            for chunk in batched(src.chunks()):
                for pid, comm in src.comms.items():   # pids not seen yet; renames come from the notes
                    engine.comms.setdefault(pid, comm)
                engine.feed(chunk)
        finally:
            if dumps is not None:
                dumps.close()
        res = engine.result()
        return res, src


def run(args: argparse.Namespace) -> int:
    if not args.interval > 0:
        raise UsageError(f"interval must be a positive number of seconds, not {args.interval}")
    csv_paths = {k: v for k, v in (("d2c", args.d2c_csv), ("q2c", args.q2c_csv), ("q2d", args.q2d_csv)) if v}
    r, src = analyse_source(args.capture, int(args.interval * 1e9), csv_paths)

    def name(dev: int) -> str:
        n = src.dev_name(dev)
        return f"{n} {dev_key(dev)}" if n else dev_key(dev)

    if src.truncation:   # one line on stderr, whatever the output (and in the JSON document)
        sys.stderr.write(f"ioscope report: note: {src.truncation}\n")
    masked = action_mask_note(args.capture, src.meta.get("action_mask"))
    if masked:   # recorded with -a: the phases it cannot have are empty, not zero (and in the JSON)
        sys.stderr.write(f"ioscope report: note: {masked}\n")
    # a cgroup throttle limit on a traced disk (record's capture_meta): its wait is before Q, in no Q2C
    limited = iolimits.describe(src.meta.get("io_limits"))
    if limited:
        sys.stderr.write(f"ioscope report: note: {limited}\n")
    empty = (f"{args.capture} holds no block events: nothing was queued on the traced disks while it was "
             "recorded" + (" (up to the point where it was cut short)" if src.truncation else ""))
    model = report_model.build(r, src.meta)
    if args.json:
        doc = to_json(model, src.meta, name)
        if src.truncation:
            doc["capture"]["truncation"] = src.truncation
        if masked:
            doc["capture"]["action_mask_note"] = masked
        # the limits as recorded ([] none, absent from a capture made before record read them)
        doc["capture"]["io_limits"] = src.meta.get("io_limits")
        if limited:
            doc["capture"]["io_limits_note"] = limited
        if r.n_events == 0:
            doc["capture"]["note"] = empty
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if r.n_events == 0:
        sys.stdout.write(empty + "\n")
        return 0
    lines = render_btt(model, all_data=not args.btt)
    if not args.btt:
        lines += render_percentiles(r, name)
        lines += render_unclean(r, name)
        lines += render_btt_differences(r, name)
        lines += render_heatmap(model)
        lines += render_stacks(model)
        lines += render_iostat(model, name)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
