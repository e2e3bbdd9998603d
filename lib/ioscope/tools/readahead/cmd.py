"""ioscope readahead's command line: options -> ReadaheadCollector -> build_report -> a view, every interval."""

from __future__ import annotations

import argparse

from ioscope.base.collector import Tick
from ioscope.base.errors import UsageError
from ioscope.tools import common

MAX_PAGES_LIMIT = 1 << 26

EXAMPLES = """\
examples:
  ioscope readahead                # until Ctrl-C: decisions, windows, used and wasted pages
  ioscope readahead -d sdb 5       # files on sdb, cumulative report every 5 s
  ioscope readahead -p 1234 -j 10  # one process, JSON every 10 s
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("readahead", help="readahead decisions, window sizes, pages used and wasted",
                       description="The kernel's readahead, from its tracepoints (or fentry on the functions they sit "
                                   "in, on kernels without them): synchronous and asynchronous "
                                   "decisions, window sizes (size, async_size, ra_pages), the pages read ahead "
                                   "and whether a read later asked for them (used), they left the cache unread "
                                   "(wasted) or are still cached; the age of pages at first use; per process and "
                                   "file, beside the device's read_ahead_kb. Totals are since the start.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_disk_pid(p)
    common.add_json(p)
    common.add_rows(p, "files, the most pages read ahead first (JSON has all)", default=20)
    common.add_deprecated_flag(p, "--top", dest="rows", instead="-r/--rows", takes_value=True,
                                   type=common.positive_int)
    p.add_argument("--max-pages", type=common.positive_int, default=262144,
                   help="pages tracked at once (default 262144 = 1 GiB of 4 KiB pages); "
                        "pages beyond are counted as untracked")
    p.add_argument("--fine", action="store_true", help="show every log-linear bucket, not powers of two")
    common.add_interval_count(p)
    p.set_defaults(func=run, tool="readahead")


def run(args: argparse.Namespace) -> int:
    from ioscope.base import devices, system
    if args.max_pages > MAX_PAGES_LIMIT:
        raise UsageError(f"--max-pages is at most {MAX_PAGES_LIMIT}")
    # imported here, not at the top: `ioscope readahead --help` needs neither numpy nor the BPF loader
    from ioscope.tools.readahead.collector import ReadaheadCollector, ReadaheadOptions
    from ioscope.tools.readahead.model import build_report
    from ioscope.tools.readahead.view import RaViewOptions, renderables, to_json

    system.require_bpf_privileges("readahead")
    opts = ReadaheadOptions(disks=[devices.resolve_disk(d) for d in args.disk or []], pid=args.pid,
                            max_pages=args.max_pages, btf=system.btf_path(args.btf))
    view = RaViewOptions(rows=args.rows, fine=args.fine)
    collector = ReadaheadCollector(opts)
    try:
        attach = collector.bpf.variant_summary()

        def emit(tick: Tick) -> None:
            # readahead's numbers are totals since the start (a page's fate is known later than its read)
            report = build_report(collector.sample(tick), attach=attach)
            common.print_result("readahead", report, args.json, to_json,
                                    lambda rep: renderables(rep, view), report.losses)

        where = ", ".join(d.name for d in opts.disks) or "all disks"
        return common.run_intervals("readahead", f"readahead on {where} ({attach})", args.interval, args.count,
                                        emit, collector.unavailable)
    finally:
        collector.close()


__all__ = ["add_parser", "run"]
