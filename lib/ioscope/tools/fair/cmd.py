"""ioscope fair's command line: options -> FairCollector -> build_report -> a view, every interval."""

from __future__ import annotations

import argparse

from ioscope.base.collector import Tick
from ioscope.base.errors import UsageError
from ioscope.base.fairness import MIN_VERDICT_BYTES
from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope fair -d sdb 1            # per-process throughput on sdb and its balance, every second
  ioscope fair -d sdb --by dev 5   # balance of block I/O bytes instead of bytes returned to the readers
  ioscope fair -j 10 6             # JSON lines, six 10 s intervals
  ioscope fair --across-disks 1    # every process against every other, not per disk
  ioscope fair -G -c /system.slice 1   # the services' processes only, each with its cgroup
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fair", help="per-process throughput and its balance (Jain's index), with likely causes",
                       description="Per-process throughput each interval and cumulatively: bytes returned by "
                                   "read/write syscalls and libaio/io_uring requests on files and block devices, and "
                                   "block I/O bytes queued by the process. Then the balance across the processes "
                                   "that did I/O on each disk (never one that did none): min, max, "
                                   "mean, coefficient of variation, max/min and Jain's fairness index, flagged when "
                                   "poor, with the device settings and the likely causes ioscope can see.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_proc_filters(p)
    common.add_process_cgroup(p)
    p.add_argument("--by", choices=("app", "dev"), default="app",
                   help="bytes the balance is computed on: app = returned by the syscalls (default), "
                        "dev = block I/O queued by the process")
    p.add_argument("--across-disks", action="store_true",
                   help="judge every process against every other, whatever disk it uses (default: only "
                        "processes on the same disk, one group per disk)")
    p.add_argument("--min-share", type=float, default=0.01,
                   help="ignore processes below this fraction of the busiest one (default 0.01)")
    p.add_argument("--min-bytes", type=common.size_type("--min-bytes"), default=MIN_VERDICT_BYTES, metavar="SIZE",
                   help="judge the balance of an operation only when the processes compared moved at least "
                        "SIZE bytes of it in the interval (default 1M; k, M, G suffixes)")
    common.add_json(p)
    common.add_interval_count(p)
    p.set_defaults(func=run, tool="fair")


def run(args: argparse.Namespace) -> int:
    from ioscope.base import devices, system
    if not 0 <= args.min_share < 1:
        raise UsageError(f"--min-share must be in [0, 1), not {args.min_share}")
    # imported here, not at the top: `ioscope fair --help` needs neither numpy nor the BPF loader
    from ioscope.base.units import says
    from ioscope.tools.fair.collector import FairCollector, FairOptions
    from ioscope.tools.fair.model import build_report
    from ioscope.tools.fair.view import UNIT, renderables, to_json

    system.require_bpf_privileges("fair")
    opts = FairOptions(disks=[devices.resolve_disk(d) for d in args.disk or []], pid=args.pid, comm=args.comm,
                       btf=system.btf_path(args.btf), per_disk=not args.across_disks,
                       cgroup=common.process_cgroup_arg(args.cgroup), cgroups=args.cgroups)
    collector = FairCollector(opts)
    try:
        attach = collector.bpf.variant_summary()

        def emit(tick: Tick) -> None:
            report = build_report(collector.sample(tick), by=args.by, min_share=args.min_share,
                                  min_bytes=args.min_bytes, attach=attach)
            common.print_result("fair", report, args.json, to_json, renderables, report.losses)

        where = ", ".join(d.name for d in opts.disks) or "all disks"
        where += f", processes in cgroup {opts.cgroup} and below" if opts.cgroup else ""
        return common.run_intervals("fair", f"per-process throughput on {where} ({attach}); {says(UNIT)}",
                                        args.interval, args.count, emit, collector.unavailable)
    finally:
        collector.close()


__all__ = ["add_parser", "run"]
