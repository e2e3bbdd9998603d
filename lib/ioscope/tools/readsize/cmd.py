"""ioscope readsize's command line: options -> ReadsizeCollector -> build_report -> a view, every interval."""

from __future__ import annotations

import argparse

from ioscope.base.collector import Tick
from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope readsize                    # per process read sizes and block I/O until Ctrl-C
  ioscope readsize -d loop0 5 1       # files and I/O on loop0, one 5 s report
  ioscope readsize --comm dd 1        # only processes named dd, every second
  ioscope readsize --writes -j 10     # reads and writes, JSON lines every 10 s
  ioscope readsize -G -c /docker 5    # the containers' processes, each with its cgroup
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("readsize", help="per process: application read sizes vs the block I/O they caused",
                       description="Per process: the sizes of read syscalls (read, pread64, readv, preadv, "
                                   "preadv2) and of libaio and io_uring reads (counted at completion) on files "
                                   "and block devices, asked for and returned, beside the "
                                   "block I/O the process queued (bio sizes, readahead or not), and the "
                                   "amplification between the two. Aggregated in the kernel.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_proc_filters(p)
    common.add_process_cgroup(p)
    p.add_argument("--writes", action="store_true",
                   help="also writes (write, pwrite64, writev, pwritev, pwritev2, libaio and io_uring writes)")
    common.add_json(p)
    common.add_rows(p, "processes, the busiest first (JSON has all)", default=20)
    common.add_deprecated_flag(p, "--top", dest="rows", instead="-r/--rows", takes_value=True,
                                   type=common.positive_int)
    common.add_interval_count(p)
    p.set_defaults(func=run, tool="readsize")


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: `ioscope readsize --help` needs neither numpy nor the BPF loader
    from ioscope.base import devices, system
    from ioscope.base.units import says
    from ioscope.engines.procio.collector import ReadsizeCollector, ReadsizeOptions
    from ioscope.engines.procio.model import build_report
    from ioscope.tools.readsize.view import UNIT, ReadsizeViewOptions, renderables, to_json

    system.require_bpf_privileges("readsize")
    opts = ReadsizeOptions(disks=[devices.resolve_disk(d) for d in args.disk or []], pid=args.pid,
                           comm=args.comm, writes=args.writes, btf=system.btf_path(args.btf),
                           cgroup=common.process_cgroup_arg(args.cgroup), cgroups=args.cgroups)
    view = ReadsizeViewOptions(rows=args.rows)
    collector = ReadsizeCollector(opts)
    try:
        attach = collector.bpf.variant_summary()

        def emit(tick: Tick) -> None:
            report = build_report(collector.sample(tick), attach=attach)
            common.print_result("readsize", report, args.json, to_json,
                                    lambda rep: renderables(rep, view), report.losses)

        where = ", ".join(d.name for d in opts.disks) or "all disks"
        where += f", processes in cgroup {opts.cgroup} and below" if opts.cgroup else ""
        return common.run_intervals("readsize", f"read sizes and block I/O per process on {where} ({attach}); "
                                    f"{says(UNIT)}",
                                        args.interval, args.count, emit, collector.unavailable)
    finally:
        collector.close()


__all__ = ["add_parser", "run"]
