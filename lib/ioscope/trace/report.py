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

from ioscope import outfile
from ioscope.devices import kdev_split, kdev_str
from ioscope.errors import IoscopeError, UsageError
from ioscope.render import fmt_ns
from ioscope.trace import btt
from ioscope.trace.blktrace import EXPORT_BASE_OFFSET
from ioscope.trace.btt import ALL_ROWS, BttResult, DevState, Stat, is_remapper
from ioscope.trace.events import join_events

EXAMPLES = """\
examples:
  ioscope report trace.ioscope                 # btt's tables, percentiles, heat map
  ioscope report --json trace.ioscope          # the same numbers as one JSON document
  ioscope report --btt trace.ioscope           # only btt's default sections, in btt's layout
  ioscope report --d2c-csv d2c.csv trace.ioscope   # per-I/O D2C latencies as CSV
  ioscope report sda.blktrace.0                # blktrace files work too
"""

LABELS = {"q2q_dm": "Q2Qdm", "q2a_dm": "Q2Adm", "q2c_dm": "Q2Cdm", "q2q": "Q2Q", "q2a": "Q2A", "q2g": "Q2G",
          "s2g": "S2G", "g2i": "G2I", "q2m": "Q2M", "i2d": "I2D", "m2d": "M2D", "d2c": "D2C", "q2c": "Q2C",
          "q2d": "Q2D"}
PCTS = (50.0, 90.0, 99.0, 99.9)
Q2D_HEADS = ("<.005", "<.010", "<.025", "<.050", "<.075", "<.100", "<.250", "<.500", "< 1.0", ">=1.0")


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


def render_btt(r: BttResult, all_data: bool = True) -> list[str]:
    """btt's text sections (All Devices ... I/O Active Period; with all_data the -A tables too)."""
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
    tot = {k: [0, 0] for k in ("q2g", "g2i", "q2m", "i2d", "d2c", "q2c")}
    for d in devs:
        q2c = r.stat("q2c", d.dev)
        if q2c.n > 0 and q2c.total > 0:
            cells = " ".join(f"{100.0 * r.stat(k, d.dev).total / q2c.total:8.4f}%"
                             for k in ("q2g", "g2i", "q2m", "i2d", "d2c"))
            out.append(f"{dev_label(d.dev):>10s} | {cells}")
            for k in tot:
                s = r.stat(k, d.dev)
                tot[k][0] += s.total
                tot[k][1] += s.n
    if any(tot[k][1] for k in ("q2g", "g2i", "q2m", "i2d", "d2c")):
        q2c_total = tot["q2c"][0]
        out.append("---------- | --------- --------- --------- --------- ---------")
        cells = " ".join(f"{(100.0 * tot[k][0] / q2c_total) if tot[k][1] else 0.0:8.4f}%"
                         for k in ("q2g", "g2i", "q2m", "i2d", "d2c"))
        out.append(f"{'Overall':>10s} | {cells}")
    out.append("")

    _hdr(out, "Device Merge Information")
    head = (f"{'DEV':>10s} | {'#Q':>8s} {'#D':>8s} {'Ratio':>7s} | "
            f"{'BLKmin':>8s} {'BLKavg':>8s} {'BLKmax':>8s} {'Total':>8s}")
    dash = "---------- | -------- -------- ------- | -------- -------- -------- --------"
    out.append(head)
    out.append(dash)
    nm = 0
    mnq = mnd = mtot = 0
    mmin = mmax = 0
    for d in devs:
        m = merge_info(d)
        if m is None:
            continue
        nq, nd, ratio, bavg = m
        out.append(f"{dev_label(d.dev):>10s} | {nq:8d} {nd:8d} {ratio:7.1f} | {d.blk_min:8d} {bavg:8d} "
                   f"{d.blk_max:8d} {d.blk_total:8d}")
        if nm == 0:
            mmin, mmax = d.blk_min, d.blk_max
        nm += 1
        mnq += nq
        mnd += nd
        mtot += d.blk_total
        mmin = min(mmin, d.blk_min)
        mmax = max(mmax, d.blk_max)
    if nm > 1:
        out.append(dash)
        out.append(head)
        ratio_all = float(np.float32(mnq) / np.float32(mnd))
        out.append(f"{'TOTAL':>10s} | {mnq:8d} {mnd:8d} {ratio_all:7.1f} | "
                   f"{mmin:8d} {mtot // mnd:8d} {mmax:8d} {mtot:8d}")
    out.append("")

    for title, attr in (("Device Q2Q Seek Information", "q2q_seek"), ("Device D2D Seek Information", "d2d_seek")):
        _hdr(out, title)
        head = f"{'DEV':>10s} | {'NSEEKS':>15s} {'MEAN':>15s} {'MEDIAN':>15s} | {'MODE':<15s}"
        dash = "---------- | --------------- --------------- --------------- | ---------------"
        out.append(head)
        out.append(dash)
        tn = 0
        tmean = 0.0
        tmed = 0
        entries: list[list[int]] = []      # [mode, seeks], the most recent first (btt's list)
        with_seeks: list[btt.Seeks] = []
        any_dev = False
        for d in devs:
            sk = getattr(d, attr)
            if sk.n <= 0:
                continue
            any_dev = True
            modes = sk.modes
            line = (f"{dev_label(d.dev):>10s} | {sk.n:15d} {sk.mean:15.1f} {sk.btt_median:15d} | "
                    f"{modes[0] if modes else 0}({sk.most})")
            if sk.nmodes > 2:
                out.append(line)
                out.append(f"{'':10s}   {'':15s} {'':15s} {'':15s}   ...({sk.nmodes - 1} more)")
            else:
                out.append(line + "".join(f" {m}" for m in modes[1:]))
            with_seeks.append(sk)
            tn += sk.n
            tmean += sk.n * sk.mean
            tmed += sk.n * sk.btt_median
            for m in modes:
                hit = next((e for e in entries if e[0] == m), None)
                if hit is not None:
                    hit[1] += sk.most
                else:
                    entries.insert(0, [m, sk.most])
        if any_dev:
            out.append(dash)
            out.append(f"{'Overall':>10s} | {'NSEEKS':>15s} {'MEAN':>15s} {'MEDIAN':>15s} | {'MODE':<15s}")
            best: list[list[int]] = []
            for e in entries:                   # btt keeps the most frequent, the last seen first
                if not best or e[1] > best[0][1]:
                    best = [e]
                elif e[1] == best[0][1]:
                    best.insert(0, e)
            more = len(best) - 1
            if len(with_seeks) == 1:            # one disk: its modes, however many (only 16 are kept)
                more = with_seeks[0].nmodes - 1
            out.append(f"{'Average':>10s} | {tn:15d} {tmean / tn:15.1f} {tmed // tn:15d} | {best[0][0]}({best[0][1]})")
            if more > 0:
                out.append(f"{'':10s}   {'':15s} {'':15s} {'':15s}   ...({more} more)")
                out.append("")
        out.append("")

    _hdr(out, "Plug Information")
    out.append(f"{'DEV':>10s} | {'# Plugs':>10s} {'# Timer Us':>10s}  | % Time Q Plugged")
    out.append("---------- | ---------- ----------  | ----------------")
    npl = 0
    pn = pt = 0
    ppct = 0.0
    for d in devs:
        if d.nplugs + d.nplugs_t > 0:
            pct = plug_pct(d, r.time_zero)
            out.append(f"{dev_label(d.dev):>10s} | {d.nplugs:10d}({d.nplugs_t:10d}) | {pct:13.9f}%")
            npl += 1
            pn += d.nplugs
            pt += d.nplugs_t
            ppct += pct
    if npl > 1:
        out.append("---------- | ---------- ----------  | ----------------")
        out.append(f"{'Overall':>10s} | {'# Plugs':>10s} {'# Timer Us':>10s}  | % Time Q Plugged")
        out.append(f"{'Average':>10s} | {pn // npl:10d}({pt // npl:10d}) | {ppct / npl:13.9f}%")
    out.append("")
    out.append(f"{'DEV':>10s} | {'IOs/Unp':>10s}   {'IOs/Unp(to)':>10s}")
    out.append("---------- | ----------   ----------")
    nu = nut = tu = tut = 0
    for d in devs:
        a = a_t = 0.0
        if d.nios_up and d.nplugs:
            a = d.nios_up / d.nplugs
            nu += d.nplugs
            tu += d.nios_up
        if d.nios_upt and d.nplugs_t:
            a_t = d.nios_upt / d.nplugs_t
            nut += d.nplugs_t
            tut += d.nios_upt
        out.append(f"{dev_label(d.dev):>10s} | {a:10.1f}   {a_t:10.1f}")
    if nu or nut:
        out.append("---------- | ----------   ----------")
        out.append(f"{'Overall':>10s} | {'IOs/Unp':>10s}   {'IOs/Unp(to)':>10s}")
        out.append(f"{'Average':>10s} | {(tu / nu) if nu else 0.0:10.1f}   {(tut / nut) if nut else 0.0:10.1f}")
    out.append("")

    _hdr(out, "Active Requests At Q Information")
    out.append(f"{'DEV':>10s} | {'Avg Reqs @ Q':>13s}")
    out.append("---------- | -------------")
    na = tq = ta = 0
    for d in devs:
        if d.n_qs > 0 and not is_remapper(d.dev):
            out.append(f"{dev_label(d.dev):>10s} | {d.t_act_q / d.n_qs:13.1f}")
            na += 1
            tq += d.n_qs
            ta += d.t_act_q
    if na > 1:
        out.append("---------- | -------------")
        out.append(f"{'Overall':>10s} | {'Avgs Reqs @ Q':>13s}")
        out.append(f"{'Average':>10s} | {ta / tq:13.1f}")
    out.append("")

    _hdr(out, "I/O Active Period Information")
    out.append(f"{'DEV':>10s} | {'# Live':>10s} {'Avg. Act':>13s} {'Avg. !Act':>13s} {'% Live':>6s}")
    out.append("---------- | ---------- ------------- ------------- ------")
    for d in devs:
        n, act, nact, pl = d.live.summary(r.time_zero)
        out.append(f"{dev_label(d.dev):>10s} | {n:10d} {act:13.9f} {nact:13.9f} {pl:6.2f}")
    out.append("---------- | ---------- ------------- ------------- ------")
    n, act, nact, pl = r.live_all.summary(r.time_zero)
    out.append(f"{'Total Sys':>10s} | {n:10d} {act:13.9f} {nact:13.9f} {pl:6.2f}")
    out.append("")

    if all_data:
        _hdr(out, "Q2D Histogram")
        out.append(f"{'DEV':>10s} | " + " ".join(f"{h:>5s}" for h in Q2D_HEADS))
        out.append(" --------- | " + "===== " * 10)  # btt's header ends its line early; the space lands here
        acc = [0] * 10
        nd = 0
        for d in devs:
            n_h = sum(d.q2d_hist)
            if n_h:
                out.append(f"{dev_label(d.dev):>10s} | " + "".join(f"{100.0 * c / n_h:5.1f} " for c in d.q2d_hist))
                acc = [a + c for a, c in zip(acc, d.q2d_hist)]
                nd += 1
        if nd:
            out.append("========== | " + "===== " * 10)
            n_h = sum(acc)
            out.append(f"{'AVG':>10s} | " + "".join(f"{100.0 * c / n_h:5.1f} " for c in acc))
            out.append("")
    return out


def merge_info(d: DevState) -> tuple[int, int, float, int] | None:
    """(#Q, #D, ratio, BLKavg) as btt computes them, or None when btt leaves the device out."""
    if d.n_qs == 0 or d.n_ds == 0:
        return None
    nq = max(d.n_qs, d.n_ds)
    ratio = nq / d.n_ds
    return nq, d.n_ds, ratio, int(d.blk_total / d.n_ds)


def plug_pct(d: DevState, time_zero: int) -> float:
    """% of the device's time with its queue plugged, computed as btt does, to the last bit: its
    times are doubles in seconds from the trace's time zero (BIT_TIME), the plugged time a sum of
    their differences (DevState.plugged_s, kept so by the core)."""
    delta = btt.bit_time(d.end_time - time_zero) - btt.bit_time(d.start_time - time_zero)
    return 100.0 * (d.plugged_s / delta) if delta > 0 else 0.0


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


def render_heatmap(r: BttResult, width: int = 64) -> list[str]:
    g = r.heat.grid
    out = ["==================== Q2C heat map (ioscope) ====================", ""]
    if not len(g) or not g.sum():
        out.append("(no completed I/O)")
        out.append("")
        return out
    cols = len(g)
    per = max(1, -(-cols // width))
    pad = (-cols) % per
    if pad:
        g = np.vstack([g, np.zeros((pad, g.shape[1]), dtype=g.dtype)])
    g = g.reshape(-1, per, g.shape[1]).sum(axis=1)
    rows = np.flatnonzero(g.sum(axis=0))
    lo, hi = int(rows.min()), int(rows.max())
    shades = " .:-=+*#%@"
    peak = float(g.max())
    bin_s = r.heat.width * per / 1e9
    for b in range(hi, lo - 1, -1):
        cells = "".join(shades[0 if c == 0 else 1 + min(8, int(8 * np.log1p(c) / np.log1p(peak)))] for c in g[:, b])
        out.append(f"{fmt_ns(1 << b):>9s} |{cells}|")
    out.append(f"{'':9s}  {'^ ' + f'{bin_s:.6g} s per column, time from the first Q':<{len(g)}s}")
    out.append("latency rows are powers of two (row = [value, 2*value)); darker = more I/Os (log scale)")
    out.append("")
    return out


def iostat_rows(r: BttResult) -> list[dict[str, Any]]:
    out = []
    sec = r.iostat_interval / 1e9
    for (dev, k) in sorted(r.iostat):
        rio, wio, rs, ws, rm, wm, q2c_sum, q2c_n = (float(x) for x in r.iostat[(dev, k)])
        nios = rio + wio
        out.append({
            "device": dev_key(dev), "time": k * r.iostat_interval / 1e9,
            "rrqm/s": rm / sec, "wrqm/s": wm / sec, "r/s": rio / sec, "w/s": wio / sec,
            "rsec/s": rs / sec, "wsec/s": ws / sec, "rkB/s": rs / 2 / sec, "wkB/s": ws / 2 / sec,
            "avgrq-sz": (rs + ws) / nios if nios else 0.0,
            "avgqu-sz": (q2c_sum / 1e9) / sec,
            "await": (q2c_sum / q2c_n / 1e6) if q2c_n else 0.0,
        })
    return out


def render_iostat(r: BttResult, name: Callable[[int], str]) -> list[str]:
    out = [f"==================== iostat per {r.iostat_interval / 1e9:g} s (ioscope) ====================", ""]
    cols = ("rrqm/s", "wrqm/s", "r/s", "w/s", "rkB/s", "wkB/s", "avgrq-sz", "avgqu-sz", "await")
    out.append(f"{'Device':<12s} {'time':>10s} " + " ".join(f"{c:>9s}" for c in cols))
    for row in iostat_rows(r):
        ma, mi = row["device"].split(",")
        dev = int(ma) << 20 | int(mi)
        out.append(f"{name(dev):<12s} {row['time']:10.3f} " + " ".join(f"{row[c]:9.2f}" for c in cols))
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


def to_json(r: BttResult, src_meta: dict[str, Any], name: Callable[[int], str]) -> dict[str, Any]:
    def phases(getter: Callable[[str], Stat | None]) -> dict[str, Any]:
        res = {}
        for ph in btt.PHASES:
            s = getter(ph)
            if s is not None and s.n:
                res[ph] = s.to_json(PCTS)
        return res

    devices: dict[str, Any] = {}
    for dev, d in r.devices.items():
        m = merge_info(d)
        n, act, nact, pl = d.live.summary(r.time_zero)
        devices[dev_key(dev)] = {
            "name": name(dev),
            "phases": phases(lambda ph, dev=dev: r.stats.get((ph, dev))),  # type: ignore[misc]
            "merge": None if m is None else {"q": m[0], "d": m[1], "ratio": m[2], "blk_min": d.blk_min,
                                             "blk_avg": m[3], "blk_max": d.blk_max, "blk_total": d.blk_total},
            "seek_q2q": seek_json(d.q2q_seek),
            "seek_d2d": seek_json(d.d2d_seek),
            "plug": {"plugs": d.nplugs, "timer_unplugs": d.nplugs_t, "pct_time_plugged": plug_pct(d, r.time_zero),
                     "ios_per_unplug": d.nios_up / d.nplugs if d.nplugs and d.nios_up else 0.0,
                     "ios_per_timer_unplug": d.nios_upt / d.nplugs_t if d.nplugs_t and d.nios_upt else 0.0},
            "avg_reqs_at_q": d.t_act_q / d.n_qs if d.n_qs else 0.0,
            "active_periods": {"n": n, "avg_active": act, "avg_inactive": nact, "pct_live": pl},
            "q2d_histogram": dict(zip(Q2D_HEADS, d.q2d_hist)),
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
        "iostat": iostat_rows(r),
        "capture": {k: src_meta.get(k) for k in ("host", "kernel", "truncated", "lost") if k in src_meta},
    }


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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="btt-style latency breakdown of a capture (Q2C, D2C, ...), percentiles",
                       description="Break a capture's block I/O latency down like btt does (Q2Q, Q2G, G2I, Q2M, "
                                   "I2D, M2D, D2C, Q2C; merges, seeks, plugs, active periods, per process and "
                                   "per device), with percentiles, a latency heat map and an iostat-like table. "
                                   "Streams the capture: memory does not grow with its size.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("capture", metavar="CAPTURE", help="an ioscope capture, or blktrace binaries")
    p.add_argument("-j", "--json", action="store_true", help="print one JSON document (seconds)")
    p.add_argument("--btt", action="store_true", help="print only btt's default sections, in btt's layout")
    p.add_argument("-i", "--interval", type=float, default=1.0, metavar="SECONDS",
                   help="iostat table interval (default 1 s)")
    p.add_argument("--d2c-csv", metavar="FILE", help="write every I/O's D2C latency as CSV (btt -l)")
    p.add_argument("--q2c-csv", metavar="FILE", help="write every I/O's Q2C latency as CSV (btt -q)")
    p.add_argument("--q2d-csv", metavar="FILE", help="write every I/O's Q2D latency as CSV (btt -z)")
    p.set_defaults(func=run, tool="report")


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
    from ioscope.trace.offline import open_source
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
    empty = (f"{args.capture} holds no block events: nothing was queued on the traced disks while it was "
             "recorded" + (" (up to the point where it was cut short)" if src.truncation else ""))
    if args.json:
        doc = to_json(r, src.meta, name)
        if src.truncation:
            doc["capture"]["truncation"] = src.truncation
        if r.n_events == 0:
            doc["capture"]["note"] = empty
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if r.n_events == 0:
        sys.stdout.write(empty + "\n")
        return 0
    lines = render_btt(r, all_data=not args.btt)
    if not args.btt:
        lines += render_percentiles(r, name)
        lines += render_unclean(r, name)
        lines += render_btt_differences(r, name)
        lines += render_heatmap(r)
        lines += render_iostat(r, name)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
