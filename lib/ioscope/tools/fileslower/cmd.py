"""ioscope fileslower's command line: options -> FileSlowerCollector -> build_report -> the slow calls as
they return (or the histograms every interval)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ioscope.base.collector import Tick
from ioscope.tools import common
from ioscope.tools.fileslower.calls import CALLS

EXAMPLES = """\
examples:
  ioscope fileslower                 # file I/O calls slower than 10 ms, with what they waited for
  ioscope fileslower -m 0            # every call on a file (a lot of output)
  ioscope fileslower -m 50 -p 1234   # one process's calls over 50 ms
  ioscope fileslower --calls fsync,fdatasync -c /system.slice/postgresql.service
  ioscope fileslower -d loop0 -j     # calls on files of one disk, one JSON object per call
  ioscope fileslower --hist 10 1     # latency per call and file for 10 s, counted in the kernel
  ioscope fileslower --hist -P 5     # per process too, every 5 s
"""
NEVER_NS = 2**64 - 1  # --hist: no call is slow enough to be sent


def calls_type(text: str) -> tuple[str, ...]:
    names = [c.strip().lower() for c in text.split(",") if c.strip()]
    aliases = {"sendfile": "sendfile64", "pread": "pread64", "pwrite": "pwrite64"}
    names = [aliases.get(n, n) for n in names]
    bad = [n for n in names if n not in CALLS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown call '{','.join(bad) or text}' (choose from {', '.join(CALLS)})")
    return tuple(dict.fromkeys(names))


def min_ms_type(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the threshold must be a number of milliseconds, not '{text}'") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"the threshold must be 0 or more milliseconds, not '{text}'")
    return v


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fileslower", help="slow file I/O system calls, with their bios and waits",
                       description="The file I/O system calls (read, write, pread64, fsync, fdatasync, ...) on "
                                   "regular files and block devices that took at least -m milliseconds, with "
                                   "what the thread did meanwhile: on CPU, blocked in I/O waits, blocked "
                                   "otherwise, and the bios it queued (bytes, flushes, device time). "
                                   "With --hist, a latency histogram per call and file, counted in the kernel.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--min-ms", type=min_ms_type, default=10.0, metavar="MS",
                   help="show calls that took at least MS milliseconds (default 10; 0: every call)")
    p.add_argument("--calls", type=calls_type, default=CALLS, metavar="LIST",
                   help=f"the calls to follow, comma separated (default: all: {', '.join(CALLS)})")
    common.add_disk_pid(p)
    common.add_cgroup(p)
    p.add_argument("--hist", action="store_true",
                   help="latency histograms per call and file instead of the slow calls (no event is sent)")
    p.add_argument("-P", "--per-pid", dest="per_pid", action="store_true", help="--hist: one per process too")
    p.add_argument("-G", "--per-cgroup", dest="per_cgroup", action="store_true",
                   help="--hist: one per cgroup too (the calling thread's, io controller)")
    p.add_argument("--ring", type=common.size_type("--ring"), default=4 << 20, metavar="SIZE",
                   help="the ring buffer of slow calls (default 4M; a power of two); a full one is counted as lost")
    common.add_json(p)
    common.add_interval_count(p)
    p.set_defaults(func=run, tool="fileslower")


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: `ioscope fileslower --help` needs neither numpy nor the BPF loader
    from ioscope.base import devices, system
    from ioscope.base.errors import UsageError
    from ioscope.base.live import warn_lost
    from ioscope.tools.fileslower.collector import FileSlowerCollector, FileSlowerOptions
    from ioscope.tools.fileslower.model import build_report
    from ioscope.tools.fileslower.view import HEADER, call_json, call_lines, hist_lines, to_json

    if (args.per_pid or args.per_cgroup) and not args.hist:
        raise UsageError("-P and -G split the histograms", "add --hist")
    if args.ring < 4096 or args.ring & (args.ring - 1):
        raise UsageError(f"--ring must be a power of two of at least 4K, not {args.ring}")
    system.require_bpf_privileges("fileslower")
    min_ns = int(args.min_ms * 1e6)
    opts = FileSlowerOptions(calls=args.calls, min_ns=NEVER_NS if args.hist else min_ns, pid=args.pid,
                             disks=[devices.resolve_disk(d) for d in args.disk or []], cgroup=args.cgroup,
                             per_pid=args.per_pid, per_cgroup=args.per_cgroup, ring_bytes=args.ring,
                             btf=system.btf_path(args.btf))
    collector = FileSlowerCollector(opts)
    shown = 0

    def show(report_calls: list[Any]) -> None:
        nonlocal shown
        for c in report_calls:
            if args.json:
                print(json.dumps(call_json(c)))
            else:
                print("\n".join(call_lines(c)))
        shown += len(report_calls)
        sys.stdout.flush()

    try:
        def poll() -> None:
            from ioscope.tools.fileslower.model import breakdown
            show([breakdown(r, collector.mono_to_wall) for r in collector.poll()])

        def emit(tick: Tick) -> None:
            report = build_report(collector.sample(tick), min_ns)
            warn_lost("fileslower", report.losses)
            if args.hist:
                if args.json:
                    print(json.dumps(to_json(report)), flush=True)
                else:
                    print("\n".join(hist_lines(report)), flush=True)
                return
            show(report.calls)
            if args.json and (tick.final or args.interval is not None):
                print(json.dumps({**to_json(report), "calls_shown": shown}), flush=True)

        what = ", ".join(args.calls) if args.calls != CALLS else "file I/O system calls"
        where = ", ".join(d.name for d in opts.disks) or "every disk"
        if collector.cgroup is not None:
            where += f", cgroup {collector.cgroup.label()}"
        if args.pid:
            where += f", process {args.pid}"
        what += f" on {where}" + ("" if args.hist else f" taking {args.min_ms:g} ms or more")
        if not args.hist and not args.json:
            print(HEADER, flush=True)
        rc = common.run_intervals("fileslower", f"{what} ({collector.bpf.variant_summary()})", args.interval,
                                  args.count, emit, collector.unavailable,
                                  tick=None if args.hist else poll, tick_every=0.1)
        if not args.hist and not args.json:
            print(f"ioscope fileslower: {shown} calls shown", file=sys.stderr)
        return rc
    finally:
        collector.close()


__all__ = ["add_parser", "run"]
