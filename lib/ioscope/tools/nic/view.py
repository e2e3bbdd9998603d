"""Views of a NicReport: JSON, and rich renderables (plain text is the same renderables on a console
without colour). Formatting only: every number comes from the report."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ioscope.base.fmt import iso_time
from ioscope.engines.netlink.model import NicReport
from ioscope.engines.netlink.view import row_json

# -x: the extended columns, in order: (model name, heading); Sat is the sum of all but Coll/s
EXTENDED_HEADS = (("ierr", "IErr/s"), ("oerr", "OErr/s"), ("idrop", "IDrop/s"), ("odrop", "ODrop/s"),
                  ("miss", "Miss/s"), ("ovr", "Ovr/s"), ("coll", "Coll/s"))


@dataclass
class NicViewOptions:
    extended: bool = False


def to_json(rep: NicReport) -> dict[str, Any]:
    # nic reads counters, it traces nothing: there is nothing it can lose ("lost" is in every tool's JSON)
    return {"time": iso_time(rep.wall), "interval_s": round(rep.interval_s, 6),
            "lost": 0, "lost_detail": {}, "interfaces": [row_json(r) for r in rep.rows]}


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def renderables(rep: NicReport, o: NicViewOptions) -> Iterator[RenderableType]:
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 1))
    t.add_column("Time")
    t.add_column("Int")
    heads = ["rKB/s", "wKB/s", "rPk/s", "wPk/s"]
    heads += [h for _, h in EXTENDED_HEADS] if o.extended else ["rAvs", "wAvs"]
    heads += ["%Util", "Sat"]
    for h in heads:
        t.add_column(h, justify="right")
    hhmmss = _dt.datetime.fromtimestamp(rep.wall).strftime("%H:%M:%S")
    notes = []
    for r in rep.rows:
        if r.status != "ok":
            t.add_row(hhmmss, r.name, *([r.status] + ["-"] * (len(heads) - 1)))
            notes.append(f"{r.name}: {r.note}")
            continue
        cells = [_f(r.rkb_s), _f(r.wkb_s), _f(r.rpk_s), _f(r.wpk_s)]
        cells += [_f(r.ext_s[k]) for k, _ in EXTENDED_HEADS] if o.extended else [_f(r.ravs), _f(r.wavs)]
        cells += ["n/a" if r.util_pct is None else f"{r.util_pct:.2f}", _f(r.sat_s)]
        t.add_row(hhmmss, r.name, *cells)
    yield Text(f"{iso_time(rep.wall)}  interval {rep.interval_s:.3f}s", style="dim")
    yield t
    if not rep.rows:
        yield Text("no interfaces")
    unknown = rep.unknown_speed()
    if unknown:
        yield Text(f"%Util n/a: the kernel does not know the link speed of {', '.join(unknown)}", style="dim")
    for n in notes:
        yield Text(n, style="yellow")


__all__ = ["EXTENDED_HEADS", "NicViewOptions", "renderables", "row_json", "to_json"]
