"""The views of `ioscope diff`: rich tables and JSON, both from one DiffResult."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.table import Table
from rich.text import Text

from ioscope.base.fmt import fmt_ns
from ioscope.base.rate import BASIS
from ioscope.tools.diff.model import Change, DiffResult, Metric


def fmt_metric(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ns":
        return fmt_ns(v)
    if unit == "count":
        return f"{int(v):,}"
    if unit == "ratio":
        return f"{v:.3f}"
    return f"{v:,.1f}"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"x{r:.2f}"


def fmt_change(c: Change) -> str:
    r = c.ratio
    return c.direction + (f" {fmt_ratio(r)}" if r is not None else "")


def _side(s: Any) -> str:
    return f"{s.path} ({s.host or 'host not recorded'}, {s.duration_s:.2f} s)"


def _active(s: Any) -> str:
    return "-" if s.active_s is None else f"{s.active_s:.2f} s"


def renderables(r: DiffResult) -> Iterator[Any]:
    yield Text(f"before: {_side(r.before)}\nafter:  {_side(r.after)}\n"
               f"MB/s and IOPS: {BASIS} ({_active(r.before)} before, {_active(r.after)} after)")
    if r.changes:
        t = Table(title="settings that changed", title_justify="left", box=None, pad_edge=False)
        for col in ("disk", "setting", "before", "after", "change"):
            t.add_column(col, justify="left" if col in ("disk", "setting") else "right")
        for c in r.changes:
            t.add_row(c.disk, c.setting, *(Text("-" if v is None else str(v)) for v in (c.before, c.after)),
                      fmt_change(c))
        yield t
    else:
        yield Text("settings: none of the recorded queue settings changed")
    for o in r.ops:
        t = Table(title=f"{o.disk} {o.op}", title_justify="left", box=None, pad_edge=False)
        for col in ("", "before", "after", "ratio"):
            t.add_column(col, justify="left" if not col else "right")
        for m in o.metrics:
            t.add_row(m.name, fmt_metric(m.before, m.unit), fmt_metric(m.after, m.unit), fmt_ratio(m.ratio))
        yield t
    if r.members:
        t = Table(title="stacked devices: each member's share of the bytes", title_justify="left", box=None,
                  pad_edge=False)
        for col in ("stack", "member", "before", "after"):
            t.add_column(col, justify="left" if col in ("stack", "member") else "right")
        for x in r.members:
            t.add_row(Text(x.stack), Text(x.member),
                      *("-" if v is None else f"{100 * v:.1f}%" for v in (x.before, x.after)))
        yield t
    if r.balance:
        t = Table(title="balance of the processes' bytes per disk (Jain's index: 1 = even)", title_justify="left",
                  box=None, pad_edge=False)
        for col in ("disk", "before", "after"):
            t.add_column(col, justify="left" if col == "disk" else "right")
        for m in r.balance:
            t.add_row(m.name, fmt_metric(m.before, "ratio"), fmt_metric(m.after, "ratio"))
        yield t
    for label, disks in (("only in before", r.only_before), ("only in after", r.only_after)):
        if disks:
            yield Text(f"{label}: {', '.join(disks)}")


def _metric_json(m: Metric) -> dict[str, Any]:
    return {"before": m.before, "after": m.after, "ratio": m.ratio}


def to_json(r: DiffResult) -> dict[str, Any]:
    return {
        "before": {"path": r.before.path, "host": r.before.host, "duration_s": r.before.duration_s,
                   "active_s": r.before.active_s},
        "after": {"path": r.after.path, "host": r.after.host, "duration_s": r.after.duration_s,
                  "active_s": r.after.active_s},
        "rates": BASIS,
        "changes": [{"disk": c.disk, "setting": c.setting, "before": c.before, "after": c.after,
                     "direction": c.direction, "ratio": c.ratio} for c in r.changes],
        "ops": [{"disk": o.disk, "op": o.op, "metrics": {m.name: _metric_json(m) for m in o.metrics}} for o in r.ops],
        "balance": [{"disk": m.name, "before": m.before, "after": m.after} for m in r.balance],
        "members": [{"stack": x.stack, "member": x.member, "before": x.before, "after": x.after} for x in r.members],
        "only_before": r.only_before, "only_after": r.only_after,
    }
