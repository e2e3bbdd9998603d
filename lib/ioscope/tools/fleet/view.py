"""The fleet report's views: rich tables and one JSON object, from one FleetResult."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.table import Table
from rich.text import Text

from ioscope.base.fmt import fmt_bytes, fmt_ns
from ioscope.base.rate import BASIS
from ioscope.tools.fleet.model import FleetResult


def _ns(v: Any) -> str:
    return "-" if v is None else fmt_ns(float(v))


def renderables(r: FleetResult) -> Iterator[Any]:
    yield Text(f"fleet report ({r.engine}): {len(r.hosts)} hosts", style="bold")
    t = Table(title="hosts, the slowest q2c p99 first", title_justify="left", box=None, pad_edge=False)
    for c in ("host", "I/Os", "q2c p99"):
        t.add_column(c, justify="left" if c == "host" else "right")
    for h in r.hosts:
        t.add_row(Text(str(h["host"])), f"{h['ios']:,}", _ns(h["q2c_p99"]))
    yield t
    t = Table(title=f"per host, disk and op (IOPS and MB/s: {BASIS})", title_justify="left", box=None,
              pad_edge=False)
    cols = ("host", "disk", "op", "I/Os", "bytes", "IOPS", "MB/s", "q2c p50", "q2c p99", "q2c p99.9",
            "d2c p50", "d2c p99", "d2c p99.9")
    for c in cols:
        t.add_column(c, justify="left" if c in ("host", "disk", "op") else "right")
    for x in r.per_disk_op:
        t.add_row(Text(str(x["host"])), Text(str(x["disk"])), Text(str(x["op"])), f"{x['ios']:,}",
                  fmt_bytes(x["bytes"]), f"{x['iops']:,.1f}", f"{x['mb_s']:,.2f}",
                  *(_ns(x[f"{ph}_{p}"]) for ph in ("q2c", "d2c") for p in ("p50", "p99", "p999")))
    yield t
    t = Table(title="top processes per host, by bytes", title_justify="left", box=None, pad_edge=False)
    for c in ("host", "#", "comm", "I/Os", "bytes"):
        t.add_column(c, justify="left" if c in ("host", "comm") else "right")
    for p in r.top_processes:
        t.add_row(Text(str(p["host"])), str(p["pos"]), Text(str(p["comm"])), f"{p['ios']:,}", fmt_bytes(p["bytes"]))
    yield t


def to_json(r: FleetResult) -> dict[str, Any]:
    return {"engine": r.engine, "units": {"q2c_*": "ns", "d2c_*": "ns", "mb_s": "1e6 bytes/s"}, "rates": BASIS,
            "hosts": r.hosts, "per_disk_op": r.per_disk_op, "top_processes": r.top_processes}
