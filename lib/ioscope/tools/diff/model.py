"""The model of `ioscope diff`: two CaptureSummary -> a DiffResult. Pure: no I/O, no kernel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ioscope.base.fairness import jain_index
from ioscope.base.rate import per_second
from ioscope.tools.diff.summary import PCTS, CaptureSummary, DiskStats, OpStats


@dataclass
class Metric:
    name: str        # "I/Os", "MB/s", "IOPS", "q2c p99", ...
    unit: str        # "count", "rate", "ns", "ratio"
    before: float | None
    after: float | None

    @property
    def ratio(self) -> float | None:
        if self.before is None or self.after is None or self.before == 0:
            return None
        return self.after / self.before


@dataclass
class OpDiff:
    disk: str        # "loop0", or "loop0 -> loop1" when the two captures' disks were paired by position
    op: str
    metrics: list[Metric]


@dataclass
class Change:
    disk: str
    setting: str
    before: Any
    after: Any

    @property
    def direction(self) -> str:
        if isinstance(self.before, (int, float)) and isinstance(self.after, (int, float)):
            return "up" if self.after > self.before else "down"
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        return "changed"

    @property
    def ratio(self) -> float | None:
        if isinstance(self.before, (int, float)) and isinstance(self.after, (int, float)) and self.before:
            return self.after / self.before
        return None


@dataclass
class MemberShare:
    stack: str       # "btrfs data", "dm mpatha", ...
    member: str
    before: float | None   # the member's share of the stack's bytes, 0..1 (None: not in that capture)
    after: float | None


@dataclass
class DiffResult:
    before: CaptureSummary
    after: CaptureSummary
    ops: list[OpDiff] = field(default_factory=list)
    balance: list[Metric] = field(default_factory=list)   # per disk: Jain's index of the processes' bytes
    changes: list[Change] = field(default_factory=list)
    members: list[MemberShare] = field(default_factory=list)  # stacked devices: each member's share
    only_before: list[str] = field(default_factory=list)  # disks in one capture only
    only_after: list[str] = field(default_factory=list)


def pair_disks(a: dict[str, DiskStats], b: dict[str, DiskStats]) -> list[tuple[str, str | None, str | None]]:
    """(label, disk before, disk after): by name; two captures of one disk each are paired whatever the
    names (a loop device or a disk renamed between the runs)."""
    if len(a) == 1 and len(b) == 1 and set(a) != set(b):
        (x,), (y,) = a, b
        return [(f"{x} -> {y}", x, y)]
    return [(n, n if n in a else None, n if n in b else None) for n in sorted(set(a) | set(b))]


def _op_metrics(x: OpStats | None, y: OpStats | None, dx: float | None, dy: float | None) -> list[Metric]:
    """dx, dy: each capture's active span, the one divisor of every rate (ioscope.base.rate)."""
    def rate(o: OpStats | None, span_s: float | None, what: str) -> float | None:
        if o is None:
            return None
        return per_second(o.bytes / 1e6 if what == "MB/s" else o.ios, span_s)

    out = [Metric("I/Os", "count", x.ios if x else None, y.ios if y else None),
           Metric("MB/s", "rate", rate(x, dx, "MB/s"), rate(y, dy, "MB/s")),
           Metric("IOPS", "rate", rate(x, dx, "IOPS"), rate(y, dy, "IOPS"))]
    for phase in ("q2c", "d2c"):
        for p in PCTS:
            label = "p99.9" if p == "p999" else p
            out.append(Metric(f"{phase} {label}", "ns", getattr(x, phase).get(p) if x else None,
                              getattr(y, phase).get(p) if y else None))
    return out


def _shares(s: CaptureSummary) -> dict[tuple[str, str], float]:
    """(stack label, member) -> the member's share of the stack's bytes in this capture."""
    out: dict[tuple[str, str], float] = {}
    for name, st in s.stacks.items():
        label = f"{st.get('kind')} {st.get('label') or name}"
        members = list(st.get("members", []))
        nbytes = {m: sum(o.bytes for o in s.disks[m].ops.values()) if m in s.disks else 0 for m in members}
        total = sum(nbytes.values())
        for m in members:
            out[(label, m)] = nbytes[m] / total if total else 0.0
    return out


def member_shares(before: CaptureSummary, after: CaptureSummary) -> list[MemberShare]:
    a, b = _shares(before), _shares(after)
    return [MemberShare(st, m, a.get((st, m)), b.get((st, m))) for st, m in sorted(set(a) | set(b))]


def diff(before: CaptureSummary, after: CaptureSummary) -> DiffResult:
    res = DiffResult(before, after)
    for label, a, b in pair_disks(before.disks, after.disks):
        if a is None:
            res.only_after.append(label)
            continue
        if b is None:
            res.only_before.append(label)
            continue
        da, db = before.disks[a], after.disks[b]
        for op in sorted(set(da.ops) | set(db.ops)):
            res.ops.append(OpDiff(label, op, _op_metrics(da.ops.get(op), db.ops.get(op), before.active_s,
                                                           after.active_s)))
        ja = jain_index([float(v) for v in da.procs.values()]) if da.procs else None
        jb = jain_index([float(v) for v in db.procs.values()]) if db.procs else None
        res.balance.append(Metric(label, "ratio", ja, jb))
        for key in sorted(set(da.settings) | set(db.settings)):
            va, vb = da.settings.get(key), db.settings.get(key)
            if va != vb:
                res.changes.append(Change(label, key, va, vb))
    res.members = member_shares(before, after)
    for key in sorted(set(before.host_settings) | set(after.host_settings)):  # bundles only
        va, vb = before.host_settings.get(key), after.host_settings.get(key)
        if va != vb:
            res.changes.append(Change("host", key, va, vb))
    return res


__all__ = ["Change", "DiffResult", "MemberShare", "Metric", "OpDiff", "diff", "member_shares", "pair_disks"]
