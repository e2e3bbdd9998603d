"""ioscope report: btt's latency breakdown of a capture, plus percentiles and a heat map."""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
from collections.abc import Callable
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ioscope.base import heat, outfile, units
from ioscope.base.devices import kdev_str
from ioscope.base.errors import IoscopeError, UsageError
from ioscope.base.fmt import fmt_bytes, fmt_ns
from ioscope.capture.events import action_mask_note
from ioscope.engines.context import iolimits
from ioscope.engines.context.throttle import held_line
from ioscope.engines.pairing import btt, bttinput, ios, outliers
from ioscope.engines.pairing.btt import Avg, BttResult, DevState, Stat, live_summary
from ioscope.engines.pairing.bttavg import LABELS, Q2D_HEADS, avg_reqs_at_q, merge_info, render_btt
from ioscope.tools.report import model as report_model
from ioscope.tools.report.model import (
    ReportModel,
    cgroups_json,
    heat_json,
    stacks_json,
    summary_json,
)

PCTS = (50.0, 90.0, 99.0, 99.9)


def dev_key(dev: int) -> str:
    return kdev_str(dev)


# ----------------------------------------------------------------------------- ioscope's additions

def render_percentiles(r: BttResult, name: Callable[[int], str]) -> list[str]:
    out = ["==================== Latency percentiles (ioscope) ====================", "", f"N {units.says(UNIT)}", ""]
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


def render_cgroups(m: ReportModel) -> list[str]:
    """Per cgroup (ioscope): each cgroup's completed I/Os, bytes, Q2C and D2C percentiles; only for a capture
    whose queue events carry cgroups."""
    if not m.cgroups:
        return []
    out = ["==================== Per cgroup (ioscope) ====================", "",
           f"the cgroup ({m.cgroup_hierarchy or 'io controller'}) each bio was charged to when queued; "
           "I/Os: completed bio pieces (as Q2C counts them), seconds", ""]
    head = (f"{'I/Os':>10s} {'BYTES':>14s} {'Q2C p50':>12s} {'Q2C p99':>12s} {'Q2C MAX':>12s} {'D2C p99':>12s} "
            f"{'UNFINISHED':>10s}  CGROUP")
    out += [head, "-" * len(head)]

    def pct(st: Stat, p: float | None) -> str:
        if not st.n:
            return f"{'-':>12s}"
        return f"{(st.max if p is None else st.hist().percentile(p)) / 1e9:12.9f}"

    for c in m.cgroups:
        out.append(f"{c.ios:10d} {c.bytes:14d} {pct(c.q2c, 50)} {pct(c.q2c, 99)} {pct(c.q2c, None)} "
                   f"{pct(c.d2c, 99)} {c.unfinished:10d}  {c.label}")
    out.append("")
    return out


def avg_json(a: Avg) -> dict[str, Any]:
    """One of btt's averages as JSON (seconds, as btt prints them)."""
    return {"min": btt.bit_time(a.min), "avg": a.avg, "max": btt.bit_time(a.max), "n": a.n,
            "total": btt.bit_time(a.total)}


def btt_phases_json(avgs: dict[str, Avg]) -> dict[str, Any]:
    return {ph: avg_json(a) for ph, a in avgs.items() if ph != "blks" and a.n}


def btt_json(d: DevState | None, b: btt.BttDev | None) -> dict[str, Any]:
    """btt's view of this disk (its phases, what btt prints) and where it differs from this report's: the
    Q2C and D2C N btt prints, the I/Os report completes that btt does not complete with the same C and
    the G events btt gives to another I/O (each by reason), the split pieces btt ignores, the remaps it
    counts on this (the record's) device that went to another, and the Qs whose place a later Q took."""
    q2c = (b.avgs["q2c"].n + b.avgs["q2c_dm"].n) if b is not None else 0
    out: dict[str, Any] = {
        "phases": btt_phases_json(b.avgs) if b is not None else {},
        "q2c_n": q2c, "d2c_n": b.avgs["d2c"].n if b is not None else 0,
        "in_flight_at_end": b.in_flight if b is not None else 0,
        "split_pieces_ignored": b.split_events if b is not None else 0,
        "split_bios_never_completed": b.split_never_completed if b is not None else 0,
        "q_replaced": b.q_replaced if b is not None else 0,
        "remaps_counted_here_went_elsewhere": b.remaps_elsewhere if b is not None else 0,
    }
    if d is not None:
        out["ios_paired_differently"] = {
            "split_bio": d.btt_diff_split, "inside_split_range": d.btt_diff_range, "other": d.btt_diff_other,
            "total": d.btt_diff_split + d.btt_diff_range + d.btt_diff_other}
        out["g_given_to_another_io"] = {
            "split_bio": d.btt_g_split, "inside_split_range": d.btt_g_range, "other": d.btt_g_other,
            "total": d.btt_g_split + d.btt_g_range + d.btt_g_other}
    return out


def _devices(r: BttResult) -> list[int]:
    """Every device of either view: btt's order, then those only ioscope's view has."""
    out = [d.dev for d in r.btt.devices] if r.btt is not None else []
    return out + [dev for dev in r.devices if dev not in out]


def btt_differences(r: BttResult, dev: int, name: Callable[[int], str]) -> str | None:
    """The line saying what btt counted otherwise on this device than this report, and why (None: nothing)."""
    b = r.btt.device(dev) if r.btt is not None else None
    d = r.devices.get(dev)
    bn = (b.avgs["q2c"].n + b.avgs["q2c_dm"].n) if b is not None else 0
    rn = r.stat("q2c", dev).n + r.stat("q2c_dm", dev).n
    why: list[str] = []
    if b is not None and b.split_events:
        pieces = b.split_events + b.split_bios
        held = f"; {b.split_never_completed:,} of those Qs still held at the end" if b.split_never_completed else ""
        why.append(f"{b.split_bios:,} bio{'s' if b.split_bios != 1 else ''} split (X) into {pieces:,} pieces: btt "
                   "ignores X, so each piece's G and I go to the bio's Q (a second G overwriting the first's "
                   f"time) and no piece's D or C covers it: btt issues and completes none of the {pieces:,} "
                   f"pieces, which this report times one by one{held}")
    if d is not None and d.btt_diff_range:
        why.append(f"{d.btt_diff_range:,} I/Os inside a split bio's range that btt pairs with that bio instead")
    if d is not None and d.btt_diff_other:
        why.append(f"{d.btt_diff_other:,} I/Os btt completes with another I/O's C, or never (overlapping ranges)")
    if b is not None and b.remaps_elsewhere:
        why.append(f"{b.remaps_elsewhere:,} remaps (A) btt counts here, on the device the record was traced on; this "
                   "report counts them on the device the bio went to")
    if d is None and b is not None:
        why.append("this report has no I/O on it (only remaps recorded on it, for I/O of another device)")
    if not why and bn == rn:
        return None
    return (f"{name(dev)}: btt completes {bn:,} I/Os (Q2C N), this report {rn:,}" + (": " if why else "")
            + "; ".join(why) + ".")


def render_btt_differences(r: BttResult, name: Callable[[int], str]) -> list[str]:
    """The section saying, per disk, what btt's tables (above) count otherwise than this report's own view
    (below), and why: btt's rules (X ignored, remaps on the record's device) and the I/Os btt pairs
    differently (its tree of Qs, compared with this report's pairing at every G and C)."""
    lines = [x for x in (btt_differences(r, dev, name) for dev in _devices(r)) if x]
    devs = [(dev, d) for dev, d in r.devices.items()
            if d.btt_diff_split + d.btt_diff_range + d.btt_diff_other + d.btt_g_split + d.btt_g_range
            + d.btt_g_other]
    if not lines and not devs:
        return []
    out = ["==================== Where btt differs (ioscope) ====================", ""]
    out += lines
    out.append("")
    if devs:
        out.append(f"{'DEV':>12s} | {'btt Q2C N':>10s} {'btt D2C N':>10s} | {'I/Os paired differently':>23s}: "
                   f"{'split':>7s} {'in split':>8s} {'other':>6s} | {'Gs given elsewhere':>18s}")
        out.append("------------ | ---------- ---------- | ----------------------------------------------- | "
                   "------------------")
        for dev, d in devs:
            b = r.btt.device(dev) if r.btt is not None else None
            bq = (b.avgs["q2c"].n + b.avgs["q2c_dm"].n) if b is not None else 0
            bd = b.avgs["d2c"].n if b is not None else 0
            diff = d.btt_diff_split + d.btt_diff_range + d.btt_diff_other
            g = d.btt_g_split + d.btt_g_range + d.btt_g_other
            out.append(f"{name(dev):>12s} | {bq:10d} {bd:10d} | {diff:23d}: {d.btt_diff_split:7d} "
                       f"{d.btt_diff_range:8d} {d.btt_diff_other:6d} | {g:18d}")
        out.append("")
        out.append("I/Os paired differently: I/Os this report completes that btt does not complete with the same C "
                   "(it completes them later, with another I/O's C, or never); Gs given elsewhere: G events btt "
                   "pairs with another I/O (its Q2G then runs from that I/O's Q).")
    out.append("btt's tables above follow btt's own rules (its pairing rebuilt as btt does it, to the byte); the "
               "sections after them are this report's: each split piece its own I/O, remaps on the device the bio "
               "went to (docs/report.md, 'Where report and btt differ').")
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
    for dev in _devices(r):
        d = r.devices.get(dev)
        b = r.btt.device(dev) if r.btt is not None else None
        mi = merge_info(b) if b is not None else None
        live = live_summary(b.live) if b is not None else (0, 0.0, 0.0, 0.0)
        plugs = next((p for p in m.plug if p.dev == dev), None)
        unplug = next((u for u in m.unplug if u.dev == dev), None)
        devices[dev_key(dev)] = {
            "name": name(dev),
            "phases": phases(lambda ph, dev=dev: r.stats.get((ph, dev))),  # type: ignore[misc]
            # btt's tables, from btt's view of the records
            "merge": None if mi is None or b is None else {
                "q": mi[0], "d": mi[1], "ratio": mi[2], "blk_min": b.avgs["blks"].min, "blk_avg": mi[3],
                "blk_max": b.avgs["blks"].max, "blk_total": b.avgs["blks"].total},
            "seek_q2q": seek_json(b.q2q_seek) if b is not None else None,
            "seek_d2d": seek_json(b.d2d_seek) if b is not None else None,
            "plug": {"plugs": plugs.plugs if plugs else 0, "timer_unplugs": plugs.timer_unplugs if plugs else 0,
                     "pct_time_plugged": plugs.pct_time_plugged if plugs else 0.0,
                     "ios_per_unplug": unplug.ios_per_unplug if unplug else 0.0,
                     "ios_per_timer_unplug": unplug.ios_per_timer_unplug if unplug else 0.0},
            "avg_reqs_at_q": avg_reqs_at_q(b) if b is not None else 0.0,
            "active_periods": dict(zip(("n", "avg_active", "avg_inactive", "pct_live"), live)),
            "q2d_histogram": dict(zip(Q2D_HEADS, b.q2d_hist)) if b is not None else None,
            "q2d_histogram_pct": next((dict(zip(Q2D_HEADS, q.pct)) for q in m.q2d if q.dev == dev), None),
            "overhead_pct": next((o.pct for o in m.overhead if o.dev == dev), None),
            # this report's own view
            "ignored_at_start": d.culled if d else 0, "duplicate_q": d.dup_q if d else 0,
            "overlapping_q": d.overlap_q if d else 0, "split_bios": d.split_bios if d else 0,
            "split_pieces": d.split_pieces if d else 0, "btt": btt_json(d, b),
            "in_flight_at_end": r.inflight_end.get(dev, 0),
            "in_flight_at_end_issued": r.inflight_end_issued.get(dev, 0),
        }
    procs: dict[str, Any] = {}
    for p in sorted({p for (_ph, p) in r.proc_stats}):
        procs[p] = {"phases": phases(lambda ph, p=p: r.proc_stats.get((ph, p)))}  # type: ignore[misc]
    live = live_summary(r.btt.live) if r.btt is not None else (0, 0.0, 0.0, 0.0)
    return {
        "units": "seconds",
        "events": r.n_events,
        "duration": (r.last_ts - r.first_ts) / 1e9 if r.n_events else 0.0,
        "phases": phases(lambda ph: r.stats.get((ph, -1))),
        "devices": devices,
        "processes": procs,
        "active_periods": dict(zip(("n", "avg_active", "avg_inactive", "pct_live"), live)),
        "in_flight_at_end": sum(r.inflight_end.values()),
        "ignored_at_start": sum(d.culled for d in r.devices.values()),
        "iostat": [{"device": dev_key(x.dev), "time": x.time, **x.values} for x in m.iostat],
        "summary": summary_json(m),
        "btt": None if r.btt is None else {
            "phases": btt_phases_json(r.btt.all), "time_zero_ns": r.btt.time_zero,
            "processes": {p: {"phases": btt_phases_json(a)} for p, a in r.btt.processes}},
        "heat_map": heat_json(m.heat),
        "stacks": stacks_json(m),
        "cgroups": cgroups_json(m, PCTS),
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


def analyse_source(path: str, interval_ns: int = 1_000_000_000, csv_paths: dict[str, str] | None = None,
                   warn: Callable[[str], object] | None = None) -> tuple[BttResult, Any]:
    from ioscope.capture.offline import open_source
    src = open_source(path)
    with src:
        # the capture's cgroups (record's EV_CGROUP): the per-I/O records, for the per-cgroup table
        by_cgroup = ios.CgroupSink() if src.kind == "capture" and (src.cgroups or src.meta.get(
            "cgroup_hierarchy")) else None
        dumps: list[CsvDumps] = []

        def setup(engine: btt.Btt) -> None:
            if csv_paths:   # times from the trace's time zero, like btt's files
                dumps.append(CsvDumps(csv_paths, lambda d: dev_key(d), engine.proc_names,
                                      lambda: engine.time_zero or 0))
                engine.on_latency = dumps[0]

        try:
            res = bttinput.analyse(src, path, warn, setup, iostat_interval_ns=interval_ns, on_io=by_cgroup)
        finally:
            for d in dumps:
                d.close()
        if by_cgroup is not None:
            res.cgroups = by_cgroup.totals
        return res, src


# btt's phases from the queue event count each bio piece (a split piece inherits its bio's Q; a bio merged
# into another's request is its own I/O); d2c and the iostat table count the requests issued to the driver
UNIT = {"q2c q2d q2a q2g g2i q2m m2d": units.PIECES, "d2c iostat": units.REQUESTS}


def capture_notes(path: str, src: Any) -> tuple[str | None, Any, str | None, list[dict[str, Any]]]:
    """The capture's notes, one line each on stderr whatever the output: cut short, recorded with -a, the
    I/O limits in force and what blk-throttle held. Returns (the -a note, the limits, their note, the held
    bios' records) for the JSON document."""
    if src.truncation:
        sys.stderr.write(f"ioscope report: note: {src.truncation}\n")
    masked = action_mask_note(path, src.meta.get("action_mask"))
    if masked:   # recorded with -a: the phases it cannot have are empty, not zero (and in the JSON)
        sys.stderr.write(f"ioscope report: note: {masked}\n")
    # a cgroup throttle limit on a traced disk (record's capture_meta, a bundle's contexts): its wait is
    # before Q, in no Q2C
    limits = iolimits.recorded(path, src.meta)
    limited = iolimits.describe(limits)
    if limited:
        sys.stderr.write(f"ioscope report: note: {limited}\n")
    # what blk-throttle held while it was recorded (record's end record): how many, whose, how long
    held = [d for d in src.meta.get("throttle_held") or [] if isinstance(d, dict)]
    no_wait = str(src.meta.get("throttle_wait_not_measured", ""))
    for d in held:
        sys.stderr.write(f"ioscope report: note: {held_line(d, no_wait, fmt_ns)}, nor in any figure below\n")
    return masked, limits, limited, held


def run(args: argparse.Namespace) -> int:
    if not args.interval > 0:
        raise UsageError(f"interval must be a positive number of seconds, not {args.interval}")
    csv_paths = {k: v for k, v in (("d2c", args.d2c_csv), ("q2c", args.q2c_csv), ("q2d", args.q2d_csv)) if v}
    r, src = analyse_source(args.capture, int(args.interval * 1e9), csv_paths,
                            lambda line: print(f"ioscope report: note: {line}", file=sys.stderr))

    def name(dev: int) -> str:
        n = src.dev_name(dev)
        return f"{n} {dev_key(dev)}" if n else dev_key(dev)

    masked, limits, limited, held = capture_notes(args.capture, src)
    empty = (f"{args.capture} holds no block events: nothing was queued on the traced disks while it was "
             "recorded" + (" (up to the point where it was cut short)" if src.truncation else ""))
    model = report_model.build(r, src.meta, src.cgroups)
    if args.json:
        doc = {**to_json(model, src.meta, name), **units.to_json(UNIT)}
        if src.truncation:
            doc["capture"]["truncation"] = src.truncation
        if masked:
            doc["capture"]["action_mask_note"] = masked
        # the limits as recorded ([] none, absent from a capture made before record read them)
        doc["capture"]["io_limits"] = limits
        if limited:
            doc["capture"]["io_limits_note"] = limited
        if "throttle_held" in src.meta:
            doc["capture"]["throttle_held"] = held
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
        lines += render_cgroups(model)
        lines += render_unclean(r, name)
        lines += render_btt_differences(r, name)
        lines += render_heatmap(model)
        lines += render_stacks(model)
        lines += render_iostat(model, name)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


# ----------------------------------------------------------------------------- --explain: each outlier explained

def _pow2(b: int) -> str:
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{suffix}"
    return str(b)


def _size(cls: int) -> str:
    """A size class of outliers.py (bytes in (2^(cls-1), 2^cls]) as the sizes it holds: '2K-4K'."""
    if cls <= 0:
        return "no-data"
    return f"{_pow2(1 << (cls - 1))}-{_pow2(1 << cls)}"


def _ratio(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _whose(owners: list[dict[str, Any]]) -> str:
    return ", ".join(f"{o['comm']} {o['ios']:,} ({fmt_bytes(o['bytes'], unit=True)})" for o in owners)


def reason_line(r: outliers.Reason) -> str:
    """One reason as a sentence (its cost first, where it has one)."""
    d = r.detail
    cost = f"{fmt_ns(r.cost_ns):>8s}  " if r.cost_ns is not None else f"{'':8s}  "
    if r.kind == "tag":
        nr = d["nr_requests"]
        text = (f"getting a request (Q2G): {d['in_flight_at_queue']:,} I/Os "
                f"({fmt_bytes(d['in_flight_bytes'], unit=True)}) were in flight when it was queued"
                + (f", nr_requests {nr}" + (" (all in use: it waited for a tag)" if d["in_flight_at_queue"] >= nr
                                            else "") if nr else ""))
    elif r.kind == "queue":
        where = f"the {d['scheduler']} scheduler" if d["scheduler"] and d["scheduler"] != "none" else "the queue"
        text = (f"in {where} until issued (G2D): {d['issued_ahead']:,} I/Os "
                f"({fmt_bytes(d['bytes_ahead'], unit=True)}) were issued ahead of it"
                + (f": {_whose(d['owners'])}" if d["owners"] else ""))
    elif r.kind == "device_slow":
        text = (f"the device was slower than usual: D2C {_ratio(d['ratio'])}x its median {fmt_ns(d['usual_ns'])} "
                f"for the disk's {d['like_n']:,} {_size(d['size_class'])} {d['op']}s; {d['at_device']:,} other "
                f"I/Os ({fmt_bytes(d['at_device_bytes'], unit=True)}) were at the device when it was issued")
    elif r.kind == "device":
        if d["ratio"] is not None and d["ratio"] >= outliers.SLOW_RATIO:   # the part below the median
            text = "the device's usual time for such an I/O (the median above)"
        else:
            text = ("the device's time (D2C)" + (f", {_ratio(d['ratio'])}x its median {fmt_ns(d['usual_ns'])} for "
                    f"the disk's {d['like_n']:,} {_size(d['size_class'])} {d['op']}s" if d["usual_ns"] else "")
                    + f"; {d['at_device']:,} other I/Os ({fmt_bytes(d['at_device_bytes'], unit=True)}) were at "
                    "the device when it was issued")
    elif r.kind == "flush":
        text = (f"a cache flush or FUA write was in flight for this long while it was out: {d['flushes']:,} of "
                f"them, {_whose(d['owners'])}")
    elif r.kind == "requeue":
        text = f"requeued {d['requeues']} time(s) by the driver (its phases are timed from its first issue)"
    elif r.kind == "merged":
        text = "merged into another request: its issue and completion are that request's"
    elif r.kind == "limit":
        text = (f"an I/O limit was in force on its cgroup {d['cgroup']}: blk-throttle's hold is before its "
                "queue event, in none of these times")
    else:   # in_flight
        text = "not completed when the capture ended: its age then, a lower bound"
    return cost + text


def render_explained(e: outliers.Explained, wall_offset: int | None) -> list[str]:
    head = f"==================== The slowest {len(e.outliers)} of {e.ios:,} I/Os, explained (ioscope) " \
           "===================="
    out = [head, "", "Each I/O's reasons in the order they cost (a cost is time of its Q2C; a flush in flight "
           "overlaps the others)."]
    for k, o in enumerate(e.outliers, 1):
        when = (datetime.datetime.fromtimestamp((o.q_ns + wall_offset) / 1e9, datetime.timezone.utc)
                .strftime("%H:%M:%S.%f") + " UTC") if wall_offset is not None else f"at {o.q_ns / 1e9:.6f} s"
        took = f"out {fmt_ns(o.q2c_ns)} at the end" if o.in_flight else f"Q2C {fmt_ns(o.q2c_ns)}"
        out.append("")
        out.append(f"{k}. {took}  {o.disk} {o.op} {fmt_bytes(o.bytes, unit=True)} ({o.rwbs}) at sector {o.sector}  "
                   f"{o.comm} pid {o.pid}" + (f"  cgroup {o.cgroup}" if o.cgroup else "") + f"  queued {when}")
        ph = "  ".join(f"{n.upper()} {fmt_ns(v)}" for n, v in o.phases.items() if v is not None)
        if ph:
            out.append(f"   phases: {ph}")
        out += [f"   {reason_line(r)}" for r in o.reasons]
        if o.others:
            out.append(f"   others queuing on {o.disk} meanwhile: {_whose(o.others)}")
    return out


def run_explain(args: argparse.Namespace) -> int:
    """report --explain N: the N slowest I/Os of the capture, each explained (engines/pairing/outliers.py)."""
    from ioscope.capture.offline import open_source

    if args.explain < 1:
        raise UsageError(f"--explain takes how many of the slowest I/Os to explain (1 or more), not {args.explain}")
    src = open_source(args.capture)
    with src:
        e = outliers.explain(ios.ios_batches(src, ios.capture_id(src)), args.explain,
                             iolimits.recorded(args.capture, src.meta), src.meta.get("devices"))
        wall = ios.wall_offset(src)
        capture_notes(args.capture, src)   # (after the read: a capture cut short says so once it is read)
    if args.json:
        json.dump(outliers.to_json(e), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if not e.outliers:
        sys.stdout.write(f"{args.capture} holds no completed or unfinished I/O with a queue event: nothing to "
                         "explain\n")
        return 0
    sys.stdout.write("\n".join(render_explained(e, wall)) + "\n")
    return 0
