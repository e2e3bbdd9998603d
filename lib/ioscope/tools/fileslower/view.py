"""fileslower's views, from the model's report: the slow calls as lines (bcc fileslower's columns, then
the breakdown), one JSON object per call, and the histograms per call and file."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from ioscope.base.fmt import fmt_bytes, fmt_ns, iso_time
from ioscope.tools.fileslower.model import FileSlowerReport, HistSummary, SlowCall

HEADER = f"{'TIME':<8} {'COMM':<16} {'PID':>7} {'CALL':<15} {'BYTES':>9} {'LAT(ms)':>9} FILE"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f}"


def breakdown_text(c: SlowCall) -> str:
    """'= I/O wait 96.0 + other blocked 1.2 + on CPU 0.9; 2 bios 16 KiB, device 0.2 ms, 1 flush'"""
    parts = [f"I/O wait {_ms(c.iowait_ns)}" + (f" ({c.rec.iowaits} waits)" if c.rec.iowaits > 1 else ""),
             f"other blocked {_ms(c.other_ns)}"]
    if c.runq_ns:
        parts.append(f"waiting for a CPU {_ms(c.runq_ns)}")
    parts.append(f"on CPU {_ms(c.oncpu_ns)}")
    text = "= " + " + ".join(parts) + " ms"
    if c.bios:
        io = [f"{c.bios} bio{'s' if c.bios > 1 else ''} {fmt_bytes(c.bio_bytes, prose=True)}"]
        if c.rec.rbios and c.rec.wbios:
            io.append(f"{c.rec.rbios} read {c.rec.wbios} write")
        io.append(f"device {_ms(c.rec.dev_ns)} ms" + (f" ({c.rec.bios_done} done)" if c.rec.bios_done < c.bios
                                                     else ""))
        for n, what in ((c.rec.flushes, "flush"), (c.rec.fua, "FUA")):
            if n:
                io.append(f"{n} {what}{'es' if what == 'flush' and n > 1 else ''}")
        text += "; " + ", ".join(io)
    else:
        text += "; no bios"
    return text


def call_lines(c: SlowCall) -> list[str]:
    when = time.strftime("%H:%M:%S", time.localtime(c.end_time))
    size = str(c.bytes) if c.rec.ret >= 0 else f"err{-c.rec.ret}"
    return [f"{when:<8} {c.rec.comm:<16.16} {c.rec.pid:>7} {c.rec.call:<15} {size:>9} {_ms(c.lat_ns):>9} {c.rec.file}",
            f"{'':8} {breakdown_text(c)}"]


def call_json(c: SlowCall) -> dict[str, Any]:
    r = c.rec
    return {
        "time": iso_time(c.end_time), "comm": r.comm, "pid": r.pid, "tid": r.tid, "call": r.call,
        "bytes": c.bytes, "error": -r.ret if r.ret < 0 else 0, "lat_ms": c.lat_ns / 1e6, "file": r.file,
        "dev": r.dev, "cgroup": r.cgroup,
        "oncpu_ms": c.oncpu_ns / 1e6, "iowait_ms": c.iowait_ns / 1e6, "iowaits": r.iowaits,
        "runq_ms": c.runq_ns / 1e6, "other_blocked_ms": c.other_ns / 1e6,
        "bios": c.bios, "read_bios": r.rbios, "write_bios": r.wbios, "other_bios": r.obios,
        "read_bytes": r.rbytes, "write_bytes": r.wbytes, "flushes": r.flushes, "fua": r.fua, "sync_bios": r.sync,
        "bios_done": r.bios_done, "device_ms": r.dev_ns / 1e6,
    }


def hist_json(h: HistSummary) -> dict[str, Any]:
    row = h.row
    out: dict[str, Any] = {"call": row.call, "file": row.file, "count": row.hist.count,
                           "mean_ms": row.hist.mean / 1e6, "p50_ms": h.p50_ns / 1e6, "p99_ms": h.p99_ns / 1e6,
                           "max_ms": row.hist.max / 1e6}
    if row.pid is not None:
        out.update(pid=row.pid, comm=row.comm)
    if row.cgroup is not None:
        out["cgroup"] = row.cgroup
    out["buckets"] = [[lo, hi, n] for lo, hi, n in row.hist.coarse()]
    return out


def to_json(report: FileSlowerReport) -> dict[str, Any]:
    """One interval (or the run's end): the histograms, how many slow calls were shown, and the losses."""
    return {"time": iso_time(report.time), "interval_s": round(report.interval_s, 3),
            "min_ms": report.min_ns / 1e6, "hists": [hist_json(h) for h in report.hists],
            **report.losses.to_json()}


def hist_lines(report: FileSlowerReport) -> Iterator[str]:
    """One row per call and file (and process or cgroup): count and latency percentiles."""
    yield f"{iso_time(report.time)}  {report.interval_s:.1f}s  file I/O calls, latency per call and file:"
    if not report.hists:
        yield "no calls on files"
        return
    per_pid = report.hists[0].row.pid is not None
    per_cg = report.hists[0].row.cgroup is not None
    head = f"{'CALL':<15} {'COUNT':>8} {'MEAN':>9} {'P50':>9} {'P99':>9} {'MAX':>9}"
    head += f" {'PID':>7} {'COMM':<16}" if per_pid else ""
    head += " CGROUP" if per_cg else ""
    yield head + " FILE"
    for h in report.hists:
        r = h.row
        line = (f"{r.call:<15} {r.hist.count:>8} {fmt_ns(r.hist.mean):>9} {fmt_ns(h.p50_ns):>9} "
                f"{fmt_ns(h.p99_ns):>9} {fmt_ns(r.hist.max):>9}")
        if per_pid:
            line += f" {r.pid:>7} {r.comm or '':<16.16}"
        if per_cg:
            line += f" {r.cgroup}"
        yield line + f" {r.file}"


def renderables(report: FileSlowerReport, hist: bool) -> Iterator[Any]:
    """The slow calls' lines, or with hist the table; plain rich Text (file names may hold brackets)."""
    from rich.text import Text

    if hist:
        for line in hist_lines(report):
            yield Text(line)
        return
    for c in report.calls:
        for line in call_lines(c):
            yield Text(line)
