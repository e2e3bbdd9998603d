"""Views of a FairReport: JSON, and rich renderables (plain text is the same renderables on a
console without colour). Formatting only: every number comes from the report."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from ioscope.base import units
from ioscope.base.cgroups import label as cgroup_label
from ioscope.base.fairness import POOR_JAIN, Balance, Verdict
from ioscope.base.fmt import fmt_bytes, fmt_ns, iso_time
from ioscope.engines.context import iolimits
from ioscope.engines.context.throttle import held_json, summary
from ioscope.tools.fair.model import DiskState, FairReport, Group, ProcRow


def disk_json(d: DiskState) -> dict[str, Any]:
    return {"disk": d.name, "util": round(d.util, 4), "read_bytes": d.read_bytes, **d.settings,
            **({"throttle_held": [held_json(h) for h in d.held]} if d.held else {})}


def row_json(row: ProcRow) -> dict[str, Any]:
    r, cum = row.rate, row.cum
    doc: dict[str, Any] = {
        "pid": r.pid, "comm": r.comm, "reads": r.reads, "read_bytes": r.read, "dev_read_bytes": r.dev_read,
        "writes": r.writes,
        "write_bytes": r.write, "dev_write_bytes": r.dev_write, "ra_bytes": r.ra_bytes,
        "read_Bps": round(row.read_Bps, 1), "dev_read_Bps": round(row.dev_read_Bps, 1),
        "write_Bps": round(row.write_Bps, 1), "dev_write_Bps": round(row.dev_write_Bps, 1),
    }
    if r.cgroup:
        doc["cgroup"] = r.cgroup
    if cum is not None:
        doc.update({"cum_read_bytes": cum.read, "cum_dev_read_bytes": cum.dev_read, "cum_write_bytes": cum.write,
                    "cum_dev_write_bytes": cum.dev_write})
    return doc


def group_json(g: Group) -> dict[str, Any]:
    return {
        "disk": g.disk,
        "procs": [row_json(row) for row in g.rows],
        "balance": {op: verdict_json(v) for op, v in g.balance.items()},
        "cumulative_balance": {op: verdict_json(v) for op, v in g.cumulative.items()},
        "poor": {op: {"busy": bool(p.busy), "busy_disks": p.busy, "causes": p.causes} for op, p in g.poor.items()},
        **({"cgroup_balance": {op: {**verdict_json(c.verdict), "cgroups": c.cgroups}
                               for op, c in g.cgroup_balance.items()}} if g.cgroup_balance else {}),
    }


# fair counts bytes: read_/write_ (and reads/writes) those of the read/write system calls and of the libaio
# and io_uring requests, at their return or completion; dev_ those of the bios queued
UNIT = {"read and write bytes": units.SYSCALLS, "dev bytes": units.BIOS}


def to_json(r: FairReport) -> dict[str, Any]:
    return {
        "time": iso_time(r.wall), "interval_s": round(r.seconds, 6), "by": r.by,
        **r.losses.to_json(), "attach": r.attach, **units.to_json(UNIT),
        "devices": [disk_json(d) for d in r.disks],
        "procs": [row_json(row) for row in r.rows],
        "groups": [group_json(g) for g in r.groups],
    }


def balance_line(v: Verdict, by: str, seconds: float, label: str, of: str = "process") -> str:
    """One balance; values per second over the interval, or bytes when seconds is 0 (cumulative). of: what
    is compared ("process", "cgroup")."""
    b, op = v.balance, v.op
    plural = of + ("es" if of.endswith("s") else "s")
    if b.n < 2:
        return f"{label} {op}: one active {of}, no balance to compute"

    def per_s(x: float) -> str:
        return fmt_bytes(x / seconds, unit=True) + "/s" if seconds > 0 else fmt_bytes(x, unit=True)

    mm = "inf" if b.max_min == float("inf") else f"{b.max_min:.2f}"
    if not v.enough:
        flag = (f"  too little {op} I/O to judge ({fmt_bytes(b.total, unit=True)}, under --min-bytes "
                f"{fmt_bytes(v.min_bytes, unit=True)})")
    else:
        flag = f"  POOR (Jain < {POOR_JAIN})" if v.poor else ""
    return (f"{label} {op} balance over {b.n} {plural} ({by} bytes): min {per_s(b.min)} max {per_s(b.max)} "
            f"mean {per_s(b.mean)} cv {b.cv:.2f} max/min {mm} Jain {b.jain:.3f}{flag}")


def text_lines(r: FairReport) -> list[str]:
    out = [f"{iso_time(r.wall)}  interval {r.seconds:.3f}s  lost {r.losses.lost}"]
    for d in r.disks:
        s = d.settings
        out.append(f"{d.name}: busy {d.util:.0%}  read_ahead_kb={s.get('read_ahead_kb')} "
                   f"scheduler={s.get('scheduler')} nr_requests={s.get('nr_requests')} "
                   f"max_sectors_kb={s.get('max_sectors_kb')}")
        limited = iolimits.describe(s.get("io_limits"))
        if limited:   # a cgroup throttle on this disk: its processes' share is set by the limit
            out.append(limited)
        out += summary(d.held, r.held_no_wait, fmt_ns)   # what it held in the interval: the time it cost
    if not r.rows:
        out.append("no file I/O or block I/O in this interval")
        return out
    with_cg = any(row.rate.cgroup for row in r.rows)
    out.append(f"{'PID':>7} {'COMM':<16} {'READ/s':>8} {'DEVRD/s':>8} {'WRITE/s':>8} {'DEVWR/s':>8} "
               f"{'CUM_READ':>9} {'CUM_DEVRD':>9}" + (" CGROUP" if with_cg else ""))
    for row in r.rows:
        p, c = row.rate, row.cum or row.rate
        out.append(f"{p.pid:>7} {p.comm[:16]:<16} {fmt_bytes(row.read_Bps):>8} {fmt_bytes(row.dev_read_Bps):>8} "
                   f"{fmt_bytes(row.write_Bps):>8} {fmt_bytes(row.dev_write_Bps):>8} "
                   f"{fmt_bytes(c.read):>9} {fmt_bytes(c.dev_read):>9}"
                   + (f" {cgroup_label(p.cgroup)}" if with_cg else ""))
    for g in r.groups:
        out += group_lines(g, r.by, r.seconds)
    return out


def group_lines(g: Group, by: str, seconds: float) -> list[str]:
    """One group's balances: the processes on one disk, judged against each other (or every process)."""
    who = ", ".join(f"{row.rate.pid} ({row.rate.comm})" for row in g.rows[:6])
    who += f" and {len(g.rows) - 6} more" if len(g.rows) > 6 else ""
    n = len(g.rows)
    out = [(f"on {g.disk}" if g.disk else "across all disks") + f": {n} process{'es' if n != 1 else ''}"
           + (f" this interval: {who}" if who else " this interval")]
    for op, v in g.balance.items():
        out.append("  " + balance_line(v, by, seconds, "interval"))
        poor = g.poor.get(op)
        if poor is not None:
            if poor.busy:
                out.append(f"    poor balance while {', '.join(poor.busy)} "
                           f"{'was' if len(poor.busy) == 1 else 'were'} busy; likely causes:")
            else:
                out.append("    likely causes:")
            out += [f"    - {c}" for c in poor.causes] or ["    - none ioscope can see"]
    for v in g.cumulative.values():
        out.append("  " + balance_line(v, by, 0, "cumulative"))
    for c in g.cgroup_balance.values():
        out.append("  " + balance_line(c.verdict, by, seconds, "between cgroups,", of="cgroup"))
        if c.verdict.balance.n >= 2:
            out.append("    " + ", ".join(f"{cgroup_label(cg)} {_amount(b, seconds)}" for cg, b in c.cgroups.items()))
    return out


def _amount(b: float, seconds: float) -> str:
    return fmt_bytes(b / seconds, unit=True) + "/s" if seconds > 0 else fmt_bytes(b, unit=True)


def renderables(r: FairReport) -> Iterator[RenderableType]:
    lines = text_lines(r)
    yield Text(lines[0], style="dim")
    for line in lines[1:]:
        yield Text(line, style="bold red" if "POOR" in line else "")
    yield Text("")


__all__ = ["balance_line", "disk_json", "group_json", "group_lines", "renderables", "row_json", "text_lines",
           "to_json"]


def balance_json(b: Balance) -> dict[str, object]:
    return {"n": b.n, "total": b.total, "min": b.min, "max": b.max, "mean": round(b.mean, 3),
            "cv": round(b.cv, 6), "max_min": None if math.isinf(b.max_min) else round(b.max_min, 6),
            "jain": round(b.jain, 6), "poor": b.poor}


def verdict_json(v: Verdict) -> dict[str, object]:
    return {**balance_json(v.balance), "poor": v.poor, "enough_activity": v.enough, "min_bytes": v.min_bytes,
            "pids": v.pids}
