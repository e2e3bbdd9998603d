"""Views of a RaReport: JSON, and rich renderables (plain text is the same renderables on a console
without colour). Formatting only: every number comes from the report."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from ioscope.base import devices
from ioscope.base.fmt import fmt_bytes, fmt_ns, iso_time
from ioscope.base.hist import Hist
from ioscope.base.render import HistView
from ioscope.tools.readahead.model import PAGE, DeviceRow, RaFile, RaReport


@dataclass
class RaViewOptions:
    rows: int = 20      # files in the table (-r)
    fine: bool = False  # every log-linear bucket


def _majmin(dev: int) -> str:
    ma, mi = devices.kdev_split(dev)
    return f"{ma}:{mi}"


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def hist_json(h: Hist) -> dict[str, Any]:
    return {"count": h.count, "sum": h.total, "min": h.min, "max": h.max,
            "buckets": [list(b) for b in h.nonzero_buckets()]}


def device_json(d: DeviceRow) -> dict[str, Any]:
    return {"dev": _majmin(d.dev), "disk": d.disk, "read_ahead_kb": d.read_ahead_kb,
            "max_ra_pages_seen": d.max_ra_pages_seen, "ra_kb_used": d.ra_kb_used,
            "largest_window_pages": d.largest_window_pages, "largest_window_kb": d.largest_window_kb}


def file_json(f: RaFile) -> dict[str, Any]:
    return {"pid": f.pid, "comm": f.comm, "dev": _majmin(f.dev), "ino": f.ino, "path": f.path,
            "decisions": f.decisions, "window_pages": f.window_pages, "max_ra_pages": f.max_ra_pages,
            "max_window": f.max_window, "pages": f.pages, "used": f.used, "wasted": f.wasted,
            "cached": f.cached, "untracked": f.untracked, "efficiency": _round(f.efficiency)}


def to_json(r: RaReport) -> dict[str, Any]:
    age = hist_json(r.age) | {f"p{int(p)}": round(v, 1) for p, v in r.age_pcts.items()}
    return {
        # the numbers are totals since the start: interval_s and elapsed_s are both that time
        "time": iso_time(r.wall), "interval_s": round(r.elapsed_s, 6),
        "elapsed_s": round(r.elapsed_s, 6), "attach": r.attach, "unavailable": r.missing,
        "fentry": r.functions,
        **r.losses.to_json(),
        "devices": [device_json(d) for d in r.devices], "decisions": r.decisions,
        "windows": {k: {"size": hist_json(w.size), "async_size": hist_json(w.async_size),
                        "ra_pages": hist_json(w.ra_pages)} for k, w in r.windows.items()},
        "req_count": hist_json(r.req_count), "age_ns": age,
        "totals": {**r.totals, "efficiency": _round(r.efficiency),
                   "settled_efficiency": _round(r.settled_efficiency)},
        "files": [file_json(f) for f in r.files],
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.1f}%"


def _share(a: int, b: int) -> str:
    return _pct(a / b if b else None)


def renderables(r: RaReport, o: RaViewOptions) -> Iterator[RenderableType]:
    yield Text(f"{iso_time(r.wall)}  since start {r.elapsed_s:.3f}s  lost {r.losses.lost}", style="dim")
    for m in r.missing:
        yield Text(f"note: {m} (tracepoint missing on this kernel)", style="yellow")
    if r.functions:
        yield Text("note: traced at kernel functions (fentry/fexit), this kernel has no tracepoint there: "
                   + ", ".join(f"{h} at {fn}" for h, fn in r.functions.items()), style="dim")
    for d in r.devices:
        ra = d.read_ahead_kb
        yield Text(f"{d.disk or _majmin(d.dev)}: read_ahead_kb={ra if ra is not None else '?'}; the kernel used "
                   f"ra_pages up to {d.max_ra_pages_seen} ({d.ra_kb_used} KiB), largest window "
                   f"{d.largest_window_pages} pages ({d.largest_window_kb} KiB)")
    if r.truncated_reads:
        yield Text(f"note: {r.truncated_reads} reads asked for more than {r.range_max} pages; only their first "
                   f"{r.range_max} pages were checked for use", style="yellow")
    if not r.files:
        yield Text("no readahead seen")
        yield Text("")
        return
    dec = r.decisions
    yield Text(f"decisions: sync {dec['sync']}, async {dec['async']}, other windows {dec['other']} "
               "(mmap read-around, fadvise, readahead(2))")
    t = r.totals
    yield Text(f"pages read ahead {t['pages']} ({fmt_bytes(t['pages'] * PAGE)}B): used {t['used']} "
               f"({_share(t['used'], t['pages'])}), wasted {t['wasted']} ({_share(t['wasted'], t['pages'])}), "
               f"still cached unused {t['cached']}, untracked {t['untracked']}")
    yield Text(f"efficiency: {_pct(r.efficiency)} of the pages read ahead were read"
               f" ({_pct(r.settled_efficiency)} of those whose fate is known)", style="bold")
    for name, w in r.windows.items():
        if not w.size.count:
            continue
        summary = (f"{w.size.count} windows, avg {w.size.mean:.1f} max {w.size.max} pages; async_size avg "
                   f"{w.async_size.mean:.1f} max {w.async_size.max}" +
                   (f"; ra_pages max {w.ra_pages.max}" if w.ra_pages.count else ""))
        yield Text("")
        yield HistView(f"{name} readahead window size (pages)", w.size, fine=o.fine, fmt="count", summary=summary)
    if r.age.count:
        p = r.age_pcts
        yield Text("")
        yield HistView("age of read-ahead pages at first use", r.age, fine=o.fine,
                       summary=f"count {r.age.count}  p50 {fmt_ns(p[50])}  p90 {fmt_ns(p[90])}  "
                               f"p99 {fmt_ns(p[99])}  max {fmt_ns(r.age.max)}")
    yield Text("")
    yield Text(f"{'PID':>7} {'COMM':<14} {'FILE':<32} {'SYNC':>5} {'ASYNC':>6} {'OTHER':>5} {'MAXWIN':>6} "
               f"{'PAGES':>7} {'USED':>7} {'WASTED':>7} {'CACHED':>7} {'EFF':>6}", style="bold")
    for f in r.files[:o.rows]:
        name = f.path or f"{_majmin(f.dev)}:{f.ino}"
        if len(name) > 32:
            name = "..." + name[-29:]
        yield Text(f"{f.pid:>7} {f.comm[:14]:<14} {name:<32} {f.decisions['sync']:>5} {f.decisions['async']:>6} "
                   f"{f.decisions['other']:>5} {f.max_window:>6} {f.pages:>7} {f.used:>7} {f.wasted:>7} "
                   f"{f.cached:>7} {_pct(f.efficiency):>6}")
    if len(r.files) > o.rows:
        yield Text(f"... {len(r.files) - o.rows} more (-r to show more)")
    yield Text("")


__all__ = ["RaViewOptions", "device_json", "file_json", "hist_json", "renderables", "to_json"]
