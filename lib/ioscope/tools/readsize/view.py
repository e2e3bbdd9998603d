"""Views of a ReadsizeReport: JSON, and rich renderables (plain text is the same renderables on a
console without colour). Formatting only: every number comes from the report."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from ioscope.base import units
from ioscope.base.cgroups import label as cgroup_label
from ioscope.base.fmt import fmt_bytes, iso_time
from ioscope.base.hist import Hist
from ioscope.engines.procio.model import DevRequests, ProcIO, ReadsizeReport

DETAILS = 5  # processes shown with their size distributions (the busiest ones)


@dataclass
class ReadsizeViewOptions:
    rows: int = 20  # processes in the table (-r)


def _buckets(h: Hist) -> list[list[int]]:
    return [list(b) for b in h.nonzero_buckets()]


def proc_json(p: ProcIO) -> dict[str, Any]:
    amp, ratio = p.amplification, p.size_ratio
    return {
        "pid": p.pid, "comm": p.comm, "op": p.op,
        "app": {"count": p.app_req.count, "bytes": p.app_bytes, "req_bytes": p.app_req.total,
                "buckets": _buckets(p.app_req), "ret_buckets": _buckets(p.app_ret),
                "errors": p.app_errors, "short": p.app_short},
        "dev": {"count": p.dev.count, "bytes": p.dev.total, "ra_count": p.ra_count,
                "ra_bytes": p.ra_bytes, "buckets": _buckets(p.dev)},
        "amplification": None if amp is None else round(amp, 4),
        "size_ratio": None if ratio is None else round(ratio, 4),
        **({"cgroup": p.cgroup} if p.cgroup else {}),
    }


def request_json(r: DevRequests) -> dict[str, Any]:
    return {"disk": r.disk, "op": r.op, "count": r.sizes.count, "bytes": r.sizes.total,
            "max_sectors_kb": r.max_sectors_kb, "buckets": _buckets(r.sizes)}


# app: the read/write system calls of each process; dev: the bios it queued; requests: the disk's, at issue
UNIT = {"app": units.SYSCALLS, "dev": units.BIOS, "requests": units.REQUESTS}


def to_json(r: ReadsizeReport) -> dict[str, Any]:
    return {"time": iso_time(r.wall), "interval_s": round(r.interval_s, 6), **r.losses.to_json(), **units.to_json(UNIT),
            "attach": r.attach, "procs": [proc_json(p) for p in r.procs],
            "requests": [request_json(q) for q in r.requests]}


def size_rows(app: Hist, dev: Hist) -> list[tuple[str, int, int]]:
    """Rows (power-of-two size range, application requests, device bios) over the range of both."""
    rows: dict[int, list[int]] = {}
    for col, h in ((0, app), (1, dev)):
        for low, _high, n in h.coarse():
            k = max(low, 1).bit_length() - 1 if low else -1
            rows.setdefault(k, [0, 0])[col] += n
    if not rows:
        return []
    out = []
    for k in range(min(rows), max(rows) + 1):
        a, d = rows.get(k, [0, 0])
        label = "0" if k < 0 else f"{fmt_bytes(1 << k):>6} -> {fmt_bytes(1 << (k + 1)):<6}"
        out.append((label, a, d))
    return out


def proc_lines(p: ProcIO) -> list[str]:
    verb = "reads" if p.op == "read" else "writes"
    head = f"pid {p.pid} ({p.comm}) {p.op}" + (f" in {cgroup_label(p.cgroup)}" if p.cgroup else "") + ":"
    app = (f"  app: {p.app_req.count} {verb}, asked {fmt_bytes(p.app_req.total, unit=True)}, "
           f"got {fmt_bytes(p.app_bytes, unit=True)}, avg {fmt_bytes(p.app_req.mean, unit=True)}")
    if p.app_errors:
        app += f", {p.app_errors} errors"
    if p.app_short:
        app += f", {p.app_short} short"
    dev = f"  dev: {p.dev.count} bios, {fmt_bytes(p.dev.total, unit=True)}, avg {fmt_bytes(p.dev.mean, unit=True)}"
    if p.op == "read":
        dev += f"; readahead {p.ra_count} bios, {fmt_bytes(p.ra_bytes, unit=True)}"
    amp, ratio = p.amplification, p.size_ratio
    tail = "  amplification: " + (f"{amp:.2f} device bytes per application byte" if amp is not None else "n/a")
    if ratio is not None:
        tail += f"; device requests {ratio:.1f}x the application's size"
    out = [head, app, dev, tail]
    rows = size_rows(p.app_req, p.dev)
    if rows:
        out.append(f"  {'size':^17} {'app ' + verb:>11} {'dev bios':>9}")
        out += [f"  {label:<17} {a:>11} {d:>9}" for label, a, d in rows]
    return out


def proc_table(procs: list[ProcIO], rows: int) -> list[str]:
    if not procs:
        return ["no file reads or block I/O seen"]
    with_cg = any(p.cgroup for p in procs)
    out = [f"{'PID':>7} {'COMM':<16} {'OP':<5} {'APP#':>8} {'APP_B':>7} {'APP_AVG':>7} {'DEV#':>7} {'DEV_B':>7} "
           f"{'DEV_AVG':>7} {'RA_B':>7} {'AMP':>6}" + (" CGROUP" if with_cg else "")]
    for p in procs[:rows]:
        amp = p.amplification
        out.append(f"{p.pid:>7} {p.comm[:16]:<16} {p.op:<5} {p.app_req.count:>8} {fmt_bytes(p.app_bytes):>7} "
                   f"{fmt_bytes(p.app_req.mean):>7} {p.dev.count:>7} {fmt_bytes(p.dev.total):>7} "
                   f"{fmt_bytes(p.dev.mean):>7} {fmt_bytes(p.ra_bytes):>7} "
                   f"{(f'{amp:.2f}' if amp is not None else '-'):>6}"
                   + (f" {cgroup_label(p.cgroup)}" if with_cg else ""))
    if len(procs) > rows:
        out.append(f"... {len(procs) - rows} more processes (-r to show more)")
    for p in procs[:min(rows, DETAILS)]:
        out.append("")
        out += proc_lines(p)
    return out


def request_lines(reqs: list[DevRequests]) -> list[str]:
    """Per disk: the requests the driver got (after merging and splitting), beside the setting that caps them."""
    out = []
    for r in reqs:
        h = r.sizes
        if not h.count:
            continue
        dist = ", ".join(f"{fmt_bytes(lo)}-{fmt_bytes(hi)}: {n}" for lo, hi, n in h.coarse() if n)
        out.append(f"{r.disk} {r.op}: {h.count} requests issued to the driver, avg {fmt_bytes(h.mean, unit=True)}, "
                   f"max {fmt_bytes(h.max, unit=True)} (max_sectors_kb={r.max_sectors_kb}); sizes {dist}")
    return out


def renderables(r: ReadsizeReport, o: ReadsizeViewOptions) -> Iterator[RenderableType]:
    yield Text(f"{iso_time(r.wall)}  interval {r.interval_s:.3f}s  lost {r.losses.lost}", style="dim")
    for line in request_lines(r.requests):
        yield Text(line)
    for line in proc_table(r.procs, o.rows):
        yield Text(line)
    yield Text("")


__all__ = ["ReadsizeViewOptions", "proc_json", "proc_lines", "proc_table", "renderables", "request_json",
           "request_lines", "size_rows", "to_json"]
