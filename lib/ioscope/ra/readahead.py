"""ioscope readahead: readahead decisions and windows, and what became of the pages read ahead."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ioscope import cli_common, devices, system
from ioscope.cli_common import run_intervals
from ioscope.errors import UsageError
from ioscope.hist import Hist
from ioscope.ra import abi
from ioscope.ra.collect import RaFile, RaSnapshot, ReadaheadCollector, ReadaheadOptions
from ioscope.render import HistView, fmt_bytes, fmt_ns

PAGE = 4096

EXAMPLES = """\
examples:
  ioscope readahead                # until Ctrl-C: decisions, windows, used and wasted pages
  ioscope readahead -d sdb 5       # files on sdb, cumulative report every 5 s
  ioscope readahead -p 1234 -j 10  # one process, JSON every 10 s
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("readahead", help="readahead decisions, window sizes, pages used and wasted",
                       description="The kernel's readahead, from its tracepoints: synchronous and asynchronous "
                                   "decisions, window sizes (size, async_size, ra_pages), the pages read ahead "
                                   "and whether a read later asked for them (used), they left the cache unread "
                                   "(wasted) or are still cached; the age of pages at first use; per process and "
                                   "file, beside the device's read_ahead_kb. Totals are since the start.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_common.add_disk_pid(p)
    p.add_argument("-j", "--json", action="store_true", help="one JSON object per interval")
    p.add_argument("-n", "--top", type=cli_common.positive_int, default=20,
                   help="show the N files with the most pages read ahead (default 20; JSON shows all)")
    p.add_argument("--max-pages", type=cli_common.positive_int, default=262144,
                   help="pages tracked at once (default 262144 = 1 GiB of 4 KiB pages); "
                        "pages beyond are counted as untracked")
    p.add_argument("--fine", action="store_true", help="show every log-linear bucket, not powers of two")
    cli_common.add_interval_count(p)
    p.set_defaults(func=run, tool="readahead")


def device_rows(snap: RaSnapshot) -> list[dict[str, object]]:
    """Per filesystem device: read_ahead_kb from sysfs next to the limit and windows the kernel used."""
    by_dev: dict[int, list[RaFile]] = {}
    for f in snap.files:
        by_dev.setdefault(f.dev, []).append(f)
    out = []
    for dev, fs in sorted(by_dev.items()):
        ma, mi = devices.kdev_split(dev)
        row: dict[str, object] = {"dev": f"{ma}:{mi}"}
        try:
            disk = devices.resolve_disk(f"{ma}:{mi}")
            row["disk"] = disk.name
            row["read_ahead_kb"] = devices.queue_settings(disk.name).get("read_ahead_kb")
        except Exception:  # an anonymous device (btrfs, overlay, tmpfs): no queue settings
            row["disk"] = None
            row["read_ahead_kb"] = None
        row["max_ra_pages_seen"] = max(f.max_ra_pages for f in fs)
        row["ra_kb_used"] = row["max_ra_pages_seen"] * PAGE // 1024  # type: ignore[operator]
        row["largest_window_pages"] = max(f.max_window for f in fs)
        row["largest_window_kb"] = max(f.max_window for f in fs) * PAGE // 1024
        out.append(row)
    return out


def _hist_json(h: Hist) -> dict[str, object]:
    return {"count": h.count, "sum": h.total, "min": h.min, "max": h.max,
            "buckets": [list(b) for b in h.nonzero_buckets()]}


def to_json(snap: RaSnapshot, now: float, started: float, attach: str, missing: list[str]) -> dict[str, object]:
    t = snap.totals()
    dec = {k: sum(f.decisions[k] for f in snap.files) for k in abi.RA_KIND_NAMES.values()}
    windows = {}
    for kind, name in abi.RA_KIND_NAMES.items():
        windows[name] = {"size": _hist_json(snap.window_hist(kind, abi.RA_H_SIZE)),
                         "async_size": _hist_json(snap.window_hist(kind, abi.RA_H_ASYNC)),
                         "ra_pages": _hist_json(snap.window_hist(kind, abi.RA_H_RA_PAGES))}
    return {
        "time": cli_common.iso_time(now), "elapsed_s": round(now - started, 6), "attach": attach,
        "unavailable": missing, "lost": snap.lost, "lost_detail": snap.counters,
        "devices": device_rows(snap), "decisions": dec, "windows": windows,
        "req_count": _hist_json(snap.hists[abi.RA_H_REQ]), "age_ns": _hist_json(snap.age),
        "totals": {**t, "efficiency": round(t["used"] / t["pages"], 4) if t["pages"] else None},
        "files": [f.to_json() for f in snap.files],
    }


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "-"


def render_text(snap: RaSnapshot, top: int, fine: bool, missing: list[str]) -> list[object]:
    out: list[object] = []
    for m in missing:
        out.append(f"note: {m} (tracepoint missing on this kernel)")
    for d in device_rows(snap):
        ra = d["read_ahead_kb"]
        out.append(f"{d['disk'] or d['dev']}: read_ahead_kb={ra if ra is not None else '?'}; the kernel used "
                   f"ra_pages up to {d['max_ra_pages_seen']} ({d['ra_kb_used']} KiB), largest window "
                   f"{d['largest_window_pages']} pages ({d['largest_window_kb']} KiB)")
    trunc = snap.counters.get("read_range_truncated", 0)
    if trunc:
        out.append(f"note: {trunc} reads asked for more than 4096 pages; only their first 4096 pages were "
                   "checked for use")
    if not snap.files:
        out.append("no readahead seen")
        return out
    dec = {k: sum(f.decisions[k] for f in snap.files) for k in abi.RA_KIND_NAMES.values()}
    out.append(f"decisions: sync {dec['sync']}, async {dec['async']}, other windows {dec['other']} "
               "(mmap read-around, fadvise, readahead(2))")
    t = snap.totals()
    settled = t["used"] + t["wasted"]
    out.append(f"pages read ahead {t['pages']} ({fmt_bytes(t['pages'] * PAGE)}B): used {t['used']} "
               f"({_pct(t['used'], t['pages'])}), wasted {t['wasted']} ({_pct(t['wasted'], t['pages'])}), "
               f"still cached unused {t['cached']}, untracked {t['untracked']}")
    out.append(f"efficiency: {_pct(t['used'], t['pages'])} of the pages read ahead were read"
               f" ({_pct(t['used'], settled)} of those whose fate is known)")
    for kind, name in abi.RA_KIND_NAMES.items():
        size = snap.window_hist(kind, abi.RA_H_SIZE)
        if not size.count:
            continue
        asz = snap.window_hist(kind, abi.RA_H_ASYNC)
        rap = snap.window_hist(kind, abi.RA_H_RA_PAGES)
        summary = (f"{size.count} windows, avg {size.mean:.1f} max {size.max} pages; async_size avg "
                   f"{asz.mean:.1f} max {asz.max}" + (f"; ra_pages max {rap.max}" if rap.count else ""))
        out.append("")
        out.append(HistView(f"{name} readahead window size (pages)", size, fine=fine, fmt="count",
                            summary=summary))
    age = snap.age
    if age.count:
        p = age.percentiles((50, 90, 99))
        out.append("")
        out.append(HistView("age of read-ahead pages at first use", age, fine=fine,
                            summary=f"count {age.count}  p50 {fmt_ns(p[50])}  p90 {fmt_ns(p[90])}  "
                                    f"p99 {fmt_ns(p[99])}  max {fmt_ns(age.max)}"))
    out.append("")
    out.append(f"{'PID':>7} {'COMM':<14} {'FILE':<32} {'SYNC':>5} {'ASYNC':>6} {'OTHER':>5} {'MAXWIN':>6} "
               f"{'PAGES':>7} {'USED':>7} {'WASTED':>7} {'CACHED':>7} {'EFF':>6}")
    for f in snap.files[:top]:
        ma, mi = devices.kdev_split(f.dev)
        name = f.path or f"{ma}:{mi}:{f.ino}"
        if len(name) > 32:
            name = "..." + name[-29:]
        out.append(f"{f.pid:>7} {f.comm[:14]:<14} {name:<32} {f.decisions['sync']:>5} {f.decisions['async']:>6} "
                   f"{f.decisions['other']:>5} {f.max_window:>6} {f.pages:>7} {f.used:>7} {f.wasted:>7} "
                   f"{f.cached:>7} {_pct(f.used, f.pages):>6}")
    if len(snap.files) > top:
        out.append(f"... {len(snap.files) - top} more (-n to show more)")
    return out


def run(args: argparse.Namespace) -> int:
    system.require_bpf_privileges("readahead")
    btf = system.btf_path(args.btf)
    if args.max_pages > 1 << 26:
        raise UsageError("--max-pages is at most 67108864")
    opts = ReadaheadOptions(disks=[devices.resolve_disk(d) for d in args.disk or []], pid=args.pid,
                            max_pages=args.max_pages, btf=btf)
    collector = ReadaheadCollector(opts)
    attach = collector.bpf.variant_summary()
    t0 = time.time()

    def emit(started: float, reset: bool, final: bool) -> None:
        now = time.time()
        snap = collector.read()
        if snap.lost:
            print(f"ioscope readahead: lost {snap.lost} ({snap.counters})", file=sys.stderr)
        if args.json:
            print(json.dumps(to_json(snap, now, t0, attach, collector.missing)), flush=True)
            return
        out = cli_common.console()
        out.print(f"{cli_common.iso_time(now)}  since start {now - t0:.3f}s  lost {snap.lost}", highlight=False)
        for item in render_text(snap, args.top, args.fine, collector.missing):
            out.print(item, highlight=False)
        out.print()

    where = ", ".join(d.name for d in opts.disks) or "all disks"
    try:
        return run_intervals("readahead", f"readahead on {where} ({attach})", args.interval, args.count, emit,
                             [])
    finally:
        collector.close()


__all__ = ["add_parser", "device_rows", "render_text", "run", "to_json"]
