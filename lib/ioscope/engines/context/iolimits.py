"""cgroup I/O throttling limits in force on given disks (cgroup v1 blkio.throttle.*_device, v2 io.max).

A throttled bio waits in blk-throttle before the block layer's queue event, and is then queued by the
throttle's kworker: its wait is in no Q2C, and the queueing task is not the submitter. record stores
these limits in its capture (capture_meta "io_limits"), report says so, fair prints them per disk.
The cgroups are read by collect's context snapshot (collect.context.cgroups); this keeps the
throttle limits on the given disks, one entry per cgroup and disk: live (in_force), and for a capture
or bundle already written (recorded: what report and diff both show).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def on_disks(cg: Any, names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The throttle limits on the disks named (major:minor -> name) in a context's "cgroups" document
    (context.cgroups(): both hierarchies, every cgroup with a limit file)."""
    out: list[dict[str, Any]] = []
    for key, parse in (("v1_blkio", _v1), ("v2_io", _v2)):
        lims = (cg.get(key) or {}).get("limits") if isinstance(cg, dict) else None
        if not isinstance(lims, dict) or "absent" in lims:
            continue
        for path, files in lims.items():
            if isinstance(files, dict) and path != "...":
                out += parse(path, files, set(names))
    return [{**e, "disk": names[e["dev"]]} for e in out]


def in_force(disks: Iterable[BlockDevice], proc_root: str = "/proc") -> list[dict[str, Any]] | dict[str, str]:
    """The throttle limits on these disks, every cgroup of both hierarchies:
    [{"cgroup", "hierarchy", "dev": "7:1", "disk": "loop1", "limits": {"write_iops": 2000, ...}}],
    or {"absent": why}."""
    from ioscope.engines.context.context import cgroups

    names = {d.majmin: d.name for d in disks}
    try:
        cg = cgroups(Path(proc_root))
    except OSError as exc:
        return {"absent": f"cgroup limits not read: {exc}"}
    return on_disks(cg, names)


# where a recording's limits were read: its header (record, when it started), and in a bundle the host's
# context at its start (the flight recorder's: at the trigger) and at its end
READ_AT = (("meta", "the recording's start"), ("context-start.json", "the bundle's start context"),
           ("context-end.json", "the bundle's end context"))


def recorded(path: str, meta: Mapping[str, Any], docs: Mapping[str, Any] | None = None) -> Any:
    """The limits in force on the traced disks of a capture or bundle written earlier, as in_force()
    gives them with "read_at": where each was seen (READ_AT). One list for report and diff: the
    capture's own io_limits, and in a bundle those of its contexts on the capture's disks (a limit set
    after the flight recorder started is in the context taken at the trigger, not in the header).
    docs: the bundle's JSON members if the caller has read them. None when nothing says (a capture
    made before record stored limits, a blktrace file), {"absent": why} when they could not be read."""
    from ioscope.capture.bundle import is_bundle, read_json_members

    devs = meta.get("devices")
    names = {f"{d['major']}:{d['minor']}": str(d.get("name")) for d in (devs.values() if isinstance(devs, dict) else ())
             if isinstance(d, dict) and "major" in d and "minor" in d}
    if docs is None:
        docs = read_json_members(path)[0] if is_bundle(path) else {}
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    read = False   # some source said which limits there were ([] = none)
    for member, label in READ_AT:
        if member == "meta":
            got = meta.get("io_limits")
        else:
            ctx = docs.get(member)
            cg = ctx.get("cgroups") if isinstance(ctx, dict) else None
            got = on_disks(cg, names) if isinstance(cg, dict) and "absent" not in cg else None
        if not isinstance(got, list):
            continue
        read = True
        for e in got:
            key = (e.get("cgroup"), e.get("hierarchy"), e.get("dev"), tuple(sorted(e.get("limits", {}).items())))
            seen.setdefault(key, {**e, "read_at": []})["read_at"].append(label)
    return list(seen.values()) if read else meta.get("io_limits")


def describe(limits: Any) -> str | None:
    """One line naming the limits (as in_force() returns them), or None when there are none."""
    if not isinstance(limits, list) or not limits:
        return None
    parts = []
    for e in limits:
        disk = f"{e.get('disk')} ({e.get('dev')})"
        what = " ".join(f"{k}={v}" for k, v in sorted(e.get("limits", {}).items()))
        at = f" (in {', '.join(e['read_at'])})" if e.get("read_at") else ""
        parts.append(f"{disk}: cgroup {e.get('cgroup')} ({e.get('hierarchy')}) {what}{at}")
    return ("I/O throttling limit in force: " + "; ".join(parts)
            + " -- throttled bios wait before their queue event (not in Q2C) and may be queued by a kworker")


__all__ = ["READ_AT", "describe", "in_force", "on_disks", "recorded"]
