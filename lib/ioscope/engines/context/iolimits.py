"""cgroup I/O throttling limits in force on given disks (cgroup v1 blkio.throttle.*_device, v2 io.max).

A throttled bio waits in blk-throttle before the block layer's queue event, and is then queued by the
throttle's kworker: its wait is in no Q2C, and the queueing task is not the submitter. record stores
these limits in its capture (capture_meta "io_limits"), report says so, fair prints them per disk.
The cgroups are read by collect's context snapshot (collect.context.cgroups); this keeps the
throttle limits on the given disks, one entry per cgroup and disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ioscope.base.devices import BlockDevice

V2_KEYS = {"rbps": "read_bps", "wbps": "write_bps", "riops": "read_iops", "wiops": "write_iops"}


def _v1(path: str, files: dict[str, str], want: set[str]) -> list[dict[str, Any]]:
    got: dict[str, dict[str, int]] = {}
    for f, content in files.items():
        if not f.startswith("blkio.throttle."):
            continue
        kind = f.removeprefix("blkio.throttle.").removesuffix("_device")
        for ln in content.splitlines():
            w = ln.split()
            if len(w) == 2 and w[0] in want and w[1].isdigit():
                got.setdefault(w[0], {})[kind] = int(w[1])
    return [{"cgroup": path, "hierarchy": "v1 blkio", "dev": d, "limits": lim} for d, lim in sorted(got.items())]


def _v2(path: str, files: dict[str, str], want: set[str]) -> list[dict[str, Any]]:
    out = []
    for ln in files.get("io.max", "").splitlines():
        w = ln.split()
        if not w or w[0] not in want:
            continue
        lim = {V2_KEYS[k]: int(v) for k, _, v in (x.partition("=") for x in w[1:]) if k in V2_KEYS and v.isdigit()}
        if lim:
            out.append({"cgroup": path, "hierarchy": "v2 io", "dev": w[0], "limits": lim})
    return out


def in_force(disks: Iterable[BlockDevice], proc_root: str = "/proc") -> list[dict[str, Any]] | dict[str, str]:
    """The throttle limits on these disks, every cgroup of both hierarchies:
    [{"cgroup", "hierarchy", "dev": "7:1", "disk": "loop1", "limits": {"write_iops": 2000, ...}}],
    or {"absent": why}."""
    from ioscope.engines.context.context import cgroups

    names = {d.majmin: d.name for d in disks}
    want = set(names)
    try:
        cg = cgroups(Path(proc_root))
    except OSError as exc:
        return {"absent": f"cgroup limits not read: {exc}"}
    out: list[dict[str, Any]] = []
    for key, parse in (("v1_blkio", _v1), ("v2_io", _v2)):
        lims = cg.get(key, {}).get("limits")
        if not isinstance(lims, dict) or "absent" in lims:
            continue
        for path, files in lims.items():
            if isinstance(files, dict) and path != "...":
                out += parse(path, files, want)
    return [{**e, "disk": names[e["dev"]]} for e in out]


def describe(limits: Any) -> str | None:
    """One line naming the limits (as in_force() returns them), or None when there are none."""
    if not isinstance(limits, list) or not limits:
        return None
    parts = []
    for e in limits:
        disk = f"{e.get('disk')} ({e.get('dev')})"
        what = " ".join(f"{k}={v}" for k, v in sorted(e.get("limits", {}).items()))
        parts.append(f"{disk}: cgroup {e.get('cgroup')} ({e.get('hierarchy')}) {what}")
    return ("I/O throttling limit in force: " + "; ".join(parts)
            + " -- throttled bios wait before their queue event (not in Q2C) and may be queued by a kworker")


__all__ = ["describe", "in_force"]
