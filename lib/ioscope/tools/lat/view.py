"""Views of a LatReport: JSON, and rich renderables (plain text is the same renderables on a
console without colour). Formatting only: every number comes from the report."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from ioscope.base import cgroups, devices, units
from ioscope.base.fmt import fmt_ns, iso_time
from ioscope.base.render import HistView
from ioscope.engines.context.throttle import held_json, summary
from ioscope.engines.latency.model import PHASE_TITLES, LatHist, LatReport
from ioscope.kernel.stamps import io_unit, timing_summary


@dataclass
class LatViewOptions:
    per_disk: bool = False
    per_op: bool = False
    per_pid: bool = False
    per_cgroup: bool = False
    unit: str | None = None  # "ms" forces milliseconds
    fine: bool = False


def hist_json(h: LatHist) -> dict[str, Any]:
    hi = h.hist
    p = hi.percentiles((50, 90, 99, 99.9))
    ma, mi = devices.kdev_split(h.dev)
    return {
        "disk": h.disk, "dev": f"{ma}:{mi}" if h.dev else "all", "op": h.op,
        "pid": h.pid, "comm": h.comm, "cgroup": h.cgroup, "phase": h.phase, "unit": "ns",
        "count": hi.count, "sum": hi.total, "min": hi.min, "max": hi.max,
        "p50": round(p[50], 1), "p90": round(p[90], 1), "p99": round(p[99], 1), "p999": round(p[99.9], 1),
        "buckets": [list(b) for b in hi.nonzero_buckets()],
    }


def unit_of(r: LatReport) -> str | dict[str, str]:
    """What a histogram's count counts: d2c one per request; q2c and q2d one per request where the
    kernel's stamps time the disk, one per bio where the probes follow it (btt's per-bio phases)."""
    qu = io_unit(r.timing) if r.timing else units.BIOS
    if qu == units.REQUESTS:
        return qu
    if isinstance(qu, str):
        return {"d2c": units.REQUESTS, "q2c q2d": qu}
    return {"d2c": units.REQUESTS, **{f"q2c q2d on {disk}": u for disk, u in qu.items()}}


def to_json(r: LatReport) -> dict[str, Any]:
    return {
        "time": iso_time(r.wall), "interval_s": round(r.interval_s, 6),
        **r.losses.to_json(),
        **units.to_json(unit_of(r)),
        "attach": r.attach,
        "timing": r.timing,
        "programs": r.programs,
        "kernel_completed": r.kernel_completed,
        "completions_unreported": r.completions_unreported,
        "hists": [hist_json(h) for h in r.hists],
        "throttle": {"held": [held_json(h) for h in r.throttled], "limits": r.throttle_limits,
                     **({"wait_not_measured": r.throttle_no_wait} if r.throttle_no_wait else {}),
                     **({"held_not_seen": r.throttle_no_held} if r.throttle_no_held else {})},
        "stacks": [{"name": st.name, "kind": st.kind, "label": st.label,
                    "members": [{"disk": m, "d2c_count": n, "share": share, "d2c_p99": p99}
                                for m, n, share, p99 in st.members]} for st in r.stacks],
    }


def hist_title(h: LatHist, o: LatViewOptions) -> str:
    title = f"{h.phase}: {PHASE_TITLES[h.phase]}"
    tags = []
    if o.per_disk:
        tags.append(f"disk {h.disk}")
    if o.per_op:
        tags.append(f"op {h.op}")
    if o.per_cgroup:
        tags.append(f"cgroup {cgroups.label(h.cgroup or '[unknown]')}")
    if o.per_pid:
        tags.append(f"pid {h.pid} ({h.comm})")
    return title + ("  [" + ", ".join(tags) + "]" if tags else "")


def throttle_lines(r: LatReport) -> Iterator[Text]:
    """What blk-throttle held in the interval, or, with a limit in force and nothing held, that it would
    not be in these histograms."""
    for line in summary(r.throttled, r.throttle_no_wait, fmt_ns):
        yield Text(line, style="bold yellow")
    if r.throttle_limits and not r.throttled:
        where = ", ".join(sorted({f"{e.get('cgroup')} on {e.get('disk')}" for e in r.throttle_limits}))
        if r.throttle_no_held:
            yield Text(f"blk-throttle limits in force ({where}): bios they hold wait before their queue event, "
                       f"not in q2c, and cannot be counted here: {r.throttle_no_held}", style="yellow")
        else:
            yield Text(f"blk-throttle limits in force ({where}): none held a bio in this interval", style="dim")


def renderables(r: LatReport, o: LatViewOptions) -> Iterator[RenderableType]:
    yield Text(f"{iso_time(r.wall)}  interval {r.interval_s:.3f}s  lost {r.losses.lost}  {units.says(unit_of(r))}",
               style="dim")
    if r.losses.lost:
        yield Text(f"lost: {r.losses.describe()}", style="yellow")
    if not r.hists:
        yield Text("no block I/O completed on the traced disks")
    for h in r.hists:
        yield Group(HistView(hist_title(h, o), h.hist, fine=o.fine, unit=o.unit), Text(""))
    for st in r.stacks:  # -D: a member carrying the load while its twin idles shows here
        label = st.label or st.name
        parts = [f"{m} {n} ({100 * share:.1f}%" + (f", d2c p99 {fmt_ns(p99)})" if p99 is not None else ")")
                 for m, n, share, p99 in st.members]
        yield Text(f"{st.kind} {label}: requests completed per member: " + ", ".join(parts))
    if "d2c" in r.phases and not r.pid_filtered and r.kernel_completed:
        yield Text(f"cross-check: the kernel completed {sum(r.kernel_completed.values())} requests on "
                   f"{', '.join(r.kernel_completed)}; ioscope timed {r.timed_d2c} (d2c)", style="dim")
    if r.timing:
        yield Text(f"timing: {timing_summary(r.timing)}", style="dim")
    yield from throttle_lines(r)
    if r.completions_unreported:
        yield Text(f"{r.completions_unreported} issued requests completed without their completion running a "
                   "BPF program: not timed, counted as lost (docs/lat.md, 'Completions no BPF program saw')",
                   style="yellow")
    if r.one_clock and "q2d" in r.phases:
        yield Text(f"{r.one_clock} requests were started and issued in one plug, where the kernel reads its clock "
                   "once: their stamps are equal, their q2d is 0 and their d2c includes the time before the issue; "
                   "--timing probes times q2d from each bio's queue event", style="dim")
    if r.inflight_at_start:
        yield Text(f"{r.inflight_at_start} requests were queued before tracing started: counted in d2c only",
                   style="dim")


__all__ = ["LatViewOptions", "hist_json", "renderables", "to_json"]
