"""ioscope readsize: per process, the read sizes the application asked for beside the block I/O it caused."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ioscope import cli_common, devices, system
from ioscope.cli_common import run_intervals
from ioscope.hist import Hist
from ioscope.ra.collect import DevRequests, ProcIO, ReadsizeCollector, ReadsizeOptions
from ioscope.render import fmt_bytes

DETAILS = 5  # processes shown with their size distributions (the busiest ones)

EXAMPLES = """\
examples:
  ioscope readsize                 # per process read sizes and block I/O until Ctrl-C
  ioscope readsize -d loop0 5 1    # files and I/O on loop0, one 5 s report
  ioscope readsize -c dd 1         # only processes named dd, every second
  ioscope readsize --writes -j 10  # reads and writes, JSON lines every 10 s
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("readsize", help="per process: application read sizes vs the block I/O they caused",
                       description="Per process: the sizes of read syscalls (read, pread64, readv, preadv, "
                                   "preadv2) on files and block devices, asked for and returned, beside the "
                                   "block I/O the process queued (bio sizes, readahead or not), and the "
                                   "amplification between the two. Aggregated in the kernel.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli_common.add_disk_pid(p)
    p.add_argument("-c", "--comm", help="only processes with this command name (as in /proc/PID/comm)")
    p.add_argument("--writes", action="store_true", help="also writes (write, pwrite64, writev, pwritev, pwritev2)")
    p.add_argument("-j", "--json", action="store_true", help="one JSON object per interval")
    p.add_argument("-n", "--top", type=cli_common.positive_int, default=20,
                   help="show the N busiest processes (default 20; JSON shows all)")
    cli_common.add_interval_count(p)
    p.set_defaults(func=run, tool="readsize")


def size_rows(app: Hist, dev: Hist) -> list[tuple[str, int, int]]:
    """Rows (power-of-two size range, application requests, device bios) over the range of both."""
    rows: dict[int, list[int]] = {}
    for col, h in ((0, app), (1, dev)):
        for low, _high, n in h.coarse():
            k = max(low, 1).bit_length() - 1 if low else -1
            rows.setdefault(k, [0, 0])[col] += n
    if not rows:
        return []
    out = []
    for k in range(min(rows), max(rows) + 1):
        a, d = rows.get(k, [0, 0])
        label = "0" if k < 0 else f"{fmt_bytes(1 << k):>6} -> {fmt_bytes(1 << (k + 1)):<6}"
        out.append((label, a, d))
    return out


def proc_lines(p: ProcIO) -> list[str]:
    verb = "reads" if p.op == "read" else "writes"
    head = f"pid {p.pid} ({p.comm}) {p.op}:"
    app = (f"  app: {p.app_req.count} {verb}, asked {fmt_bytes(p.app_req.total)}B, "
           f"got {fmt_bytes(p.app_bytes)}B, avg {fmt_bytes(p.app_req.mean)}B")
    if p.app_errors:
        app += f", {p.app_errors} errors"
    if p.app_short:
        app += f", {p.app_short} short"
    dev = f"  dev: {p.dev.count} bios, {fmt_bytes(p.dev.total)}B, avg {fmt_bytes(p.dev.mean)}B"
    if p.op == "read":
        dev += f"; readahead {p.ra_count} bios, {fmt_bytes(p.ra_bytes)}B"
    amp, ratio = p.amplification, p.size_ratio
    tail = "  amplification: " + (f"{amp:.2f} device bytes per application byte" if amp is not None else "n/a")
    if ratio is not None:
        tail += f"; device requests {ratio:.1f}x the application's size"
    out = [head, app, dev, tail]
    rows = size_rows(p.app_req, p.dev)
    if rows:
        out.append(f"  {'size':^17} {'app ' + verb:>11} {'dev bios':>9}")
        out += [f"  {label:<17} {a:>11} {d:>9}" for label, a, d in rows]
    return out


def render_text(procs: list[ProcIO], top: int) -> list[str]:
    if not procs:
        return ["no file reads or block I/O seen"]
    out = [f"{'PID':>7} {'COMM':<16} {'OP':<5} {'APP#':>8} {'APP_B':>7} {'APP_AVG':>7} {'DEV#':>7} {'DEV_B':>7} "
           f"{'DEV_AVG':>7} {'RA_B':>7} {'AMP':>6}"]
    for p in procs[:top]:
        amp = p.amplification
        out.append(f"{p.pid:>7} {p.comm[:16]:<16} {p.op:<5} {p.app_req.count:>8} {fmt_bytes(p.app_bytes):>7} "
                   f"{fmt_bytes(p.app_req.mean):>7} {p.dev.count:>7} {fmt_bytes(p.dev.total):>7} "
                   f"{fmt_bytes(p.dev.mean):>7} {fmt_bytes(p.ra_bytes):>7} "
                   f"{(f'{amp:.2f}' if amp is not None else '-'):>6}")
    if len(procs) > top:
        out.append(f"... {len(procs) - top} more processes (-n to show more)")
    for p in procs[:min(top, DETAILS)]:
        out.append("")
        out += proc_lines(p)
    return out


def request_lines(reqs: list[DevRequests]) -> list[str]:
    """Per disk: the requests the driver got (after merging and splitting), beside the settings that shape them."""
    out = []
    for r in reqs:
        h = r.sizes
        if not h.count:
            continue
        mx = devices.queue_settings(r.disk).get("max_sectors_kb", "?")
        dist = ", ".join(f"{fmt_bytes(lo)}-{fmt_bytes(hi)}: {n}" for lo, hi, n in h.coarse() if n)
        out.append(f"{r.disk} {r.op}: {h.count} requests issued to the driver, avg {fmt_bytes(h.mean)}B, "
                   f"max {fmt_bytes(h.max)}B (max_sectors_kb={mx}); sizes {dist}")
    return out


def run(args: argparse.Namespace) -> int:
    system.require_bpf_privileges("readsize")
    btf = system.btf_path(args.btf)
    opts = ReadsizeOptions(disks=[devices.resolve_disk(d) for d in args.disk or []], pid=args.pid,
                           comm=args.comm, writes=args.writes, btf=btf)
    collector = ReadsizeCollector(opts)
    attach = collector.bpf.variant_summary()

    def emit(started: float, reset: bool, final: bool) -> None:
        now = time.time()
        procs = collector.read(reset=reset)
        reqs = collector.requests(reset=reset)
        lost, counters = collector.losses(since_last=True)
        if lost:
            print(f"ioscope readsize: lost {lost} values ({counters})", file=sys.stderr)
        if args.json:
            doc = {"time": cli_common.iso_time(now), "interval_s": round(now - started, 6), "lost": lost,
                   "lost_detail": counters, "attach": attach, "procs": [p.to_json() for p in procs],
                   "requests": [r.to_json() for r in reqs]}
            print(json.dumps(doc), flush=True)
            return
        out = cli_common.console()
        out.print(f"{cli_common.iso_time(now)}  interval {now - started:.3f}s  lost {lost}", highlight=False)
        for line in request_lines(reqs):
            out.print(line, highlight=False)
        for line in render_text(procs, args.top):
            out.print(line, highlight=False)
        out.print()

    where = ", ".join(d.name for d in opts.disks) or "all disks"
    try:
        return run_intervals("readsize", f"read sizes and block I/O per process on {where} ({attach})",
                             args.interval, args.count, emit, collector.unavailable)
    finally:
        collector.close()


__all__ = ["add_parser", "render_text", "request_lines", "run", "size_rows"]
