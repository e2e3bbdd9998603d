"""The collector of `ioscope diff`: a capture -> a CaptureSummary (per disk and op: I/Os, bytes,
q2c and d2c percentiles; per disk: the processes' bytes and the queue settings recorded with it).

The numbers come from the aggregation engine over a capture (engines/aggregate/capture.py: every I/O
paired from Q to C, as report pairs them), asked the questions below; nothing is computed twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

QUESTIONS = ("count() by disk,op", "sum(bytes) by disk,op", "llquantize(q2c) by disk,op",
             "llquantize(d2c) by disk,op", "sum(bytes) by disk,comm")
PCTS = ("p50", "p99", "p999")


@dataclass
class OpStats:
    ios: int = 0
    bytes: int = 0
    q2c: dict[str, float] = field(default_factory=dict)   # ns, by PCTS
    d2c: dict[str, float] = field(default_factory=dict)


@dataclass
class DiskStats:
    ops: dict[str, OpStats] = field(default_factory=dict)
    procs: dict[str, int] = field(default_factory=dict)     # comm -> bytes
    settings: dict[str, Any] = field(default_factory=dict)  # the capture's meta["devices"] entry


@dataclass
class CaptureSummary:
    path: str
    host: str | None
    duration_s: float        # first event to the end of the recording
    disks: dict[str, DiskStats]
    host_settings: dict[str, Any] = field(default_factory=dict)  # from a bundle's context: vm.*, cgroup limits, ...
    stacks: dict[str, dict[str, Any]] = field(default_factory=dict)  # meta["stacks"]: btrfs, dm, md and members
    active_s: float | None = None  # its active span (ioscope.base.rate): first I/O queued to last completed, every
    # rate's divisor


def context_settings(ctx: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A bundle's context (engines/context/context.py) -> (host settings by name, queue settings per disk):
    the vm sysctls, multipath's paths and maps (the cgroup limits on the disks: throttle_settings)."""
    host: dict[str, Any] = {}
    for k, v in (ctx.get("vm") or {}).items():
        if not isinstance(v, dict):
            host[f"vm.{k}"] = v
    mp = ctx.get("multipath") or {}
    if "absent" not in mp:
        for what in ("paths", "maps"):
            for line in mp.get(what) or []:
                parts = str(line).split()
                if parts:
                    host[f"multipath {what[:-1]} {parts[0]}"] = " ".join(parts[1:])
    disks = {name: dict(d.get("queue") or {}) for name, d in (ctx.get("block_devices") or {}).items()
             if isinstance(d, dict)}
    return host, disks


def throttle_settings(limits: Any) -> dict[str, dict[str, Any]]:
    """The throttle limits on the traced disks (iolimits.recorded: what report says too) as settings per
    disk: {"loop3": {"throttle /batch (v1 blkio) write_iops": "4"}}; a limit read with two values (set
    between the recording's start and its context) shows both."""
    out: dict[str, dict[str, list[Any]]] = {}
    for e in limits if isinstance(limits, list) else ():
        for kind, v in (e.get("limits") or {}).items():
            vals = out.setdefault(str(e.get("disk")), {}).setdefault(
                f"throttle {e.get('cgroup')} ({e.get('hierarchy')}) {kind}", [])
            if v not in vals:
                vals.append(v)
    return {d: {k: v[0] if len(v) == 1 else ", ".join(map(str, v)) for k, v in s.items()} for d, s in out.items()}


def summarise(path: str) -> CaptureSummary:
    from ioscope.capture.store import open_capture
    from ioscope.engines.aggregate.capture import results_from_capture
    from ioscope.engines.aggregate.expr import parse_all

    with open_capture(path) as cap:
        meta = cap.meta
    (res,) = results_from_capture(path, parse_all(list(QUESTIONS)))
    disks: dict[str, DiskStats] = {}
    settings = {str(d.get("name")): d for d in (meta.get("devices") or {}).values()}
    count, total, q2c, d2c, procs = res.tables
    for t, what in ((count, "ios"), (total, "bytes")):
        for r in t.rows:
            op = disks.setdefault(str(r.keys["disk"]), DiskStats()).ops.setdefault(str(r.keys["op"]), OpStats())
            setattr(op, what, int(r.value or 0))
    for t, phase in ((q2c, "q2c"), (d2c, "d2c")):
        for r in t.rows:
            op = disks.setdefault(str(r.keys["disk"]), DiskStats()).ops.setdefault(str(r.keys["op"]), OpStats())
            setattr(op, phase, {p: float(r.percentiles[p]) for p in PCTS if p in r.percentiles})
    for r in procs.rows:
        disks.setdefault(str(r.keys["disk"]), DiskStats()).procs[str(r.keys["comm"])] = int(r.value or 0)
    host: dict[str, Any] = {}
    queues: dict[str, dict[str, Any]] = {}
    from ioscope.capture.bundle import is_bundle, read_json_members
    from ioscope.engines.context import iolimits
    docs: dict[str, Any] = {}
    if is_bundle(path):  # an `ioscope collect` bundle: the host's context when the recording started
        docs, _members = read_json_members(path)
        host, queues = context_settings(docs.get("context-start.json") or {})
    throttles = throttle_settings(iolimits.recorded(path, meta, docs))
    for name, d in disks.items():
        d.settings = {k: v for k, v in settings.get(name, {}).items() if k not in ("name", "major", "minor")}
        d.settings.update({k: v for k, v in queues.get(name, {}).items() if k != "schedulers_available"})
        d.settings.update(throttles.get(name, {}))
    return CaptureSummary(path, meta.get("host"), res.interval_s, disks, host, dict(meta.get("stacks") or {}),
                          res.active_s)
