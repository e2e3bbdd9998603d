"""ioscope snoop's views: one line per completed I/O, as text (biosnoop's columns) or JSON."""

from __future__ import annotations

import json
import sys

from ioscope.base import live, units
from ioscope.base.cgroups import label
from ioscope.base.fmt import iso_time
from ioscope.tools.snoop.snooper import SnoopLine

UNIT = units.REQUESTS   # one line per completed request: a split bio's pieces are a line each
HEADER = f"{'TIME(s)':<12} {'COMM':<16} {'PID':>7} {'DISK':<8} {'T':<4} {'SECTOR':>12} {'BYTES':>8} " \
         f"{'QUE(ms)':>8} {'SVC(ms)':>8}"
CGROUP_HEADER = HEADER + " CGROUP"   # -G: the cgroup the bio is charged to, last (its width varies)


def fmt_line(s: SnoopLine, cgroups: bool = False) -> str:
    que = f"{s.queue_ns / 1e6:8.3f}" if s.queue_ns is not None else f"{'-':>8}"
    svc = f"{s.service_ns / 1e6:8.3f}" if s.service_ns is not None else f"{'-':>8}"
    cg = f" {label(s.cgroup) if s.cgroup else '-'}" if cgroups else ""
    err = f" error {s.error}" if s.error else ""
    return f"{s.t:<12.6f} {s.comm[:16]:<16} {s.pid:>7} {s.disk[:8]:<8} {s.op:<4} {s.sector:>12} {s.bytes:>8} " \
           f"{que} {svc}{cg}{err}"


def line_json(s: SnoopLine) -> dict[str, object]:
    return {"time": iso_time(s.wall_ns / 1e9), "t": round(s.t, 9), "comm": s.comm, "pid": s.pid, "disk": s.disk,
            "dev": s.dev, "op": s.op, "sector": s.sector, "bytes": s.bytes, "queue_ns": s.queue_ns,
            "service_ns": s.service_ns, "error": s.error, "cgroup": s.cgroup or None, **units.to_json(UNIT)}


def emit(lines: list[SnoopLine], as_json: bool, cgroups: bool = False) -> None:
    if not lines:
        return
    if as_json:
        out = "".join(json.dumps(line_json(s)) + "\n" for s in lines)
    else:
        out = "".join(fmt_line(s, cgroups) + "\n" for s in lines)
    with live.signals_deferred():  # Ctrl-C or SIGTERM never cuts a line in half
        sys.stdout.write(out)
        sys.stdout.flush()
