"""ioscope lat's command line: options -> LatCollector -> build_report -> a view, every interval."""

from __future__ import annotations

import argparse

from ioscope.base.collector import Tick
from ioscope.base.errors import UsageError
from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope lat                  # q2c/q2d/d2c histograms for all disks until Ctrl-C
  ioscope lat 1 10             # print every second, 10 times
  ioscope lat -d loop0 -O      # one disk, one histogram per operation
  ioscope lat -D -m            # per disk, values in milliseconds
  ioscope lat -P -p 1234       # only I/O queued by process 1234, per process
  ioscope lat -G               # one histogram per cgroup (the one each I/O is charged to)
  ioscope lat -c /system.slice/postgresql.service -O   # a service's I/O (and its children's)
  ioscope lat --phase d2c -j 5 # device time only, JSON lines every 5 s
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lat", help="block I/O latency histograms: q2c, q2d, d2c",
                       description="Block I/O latency histograms aggregated in the kernel: q2c (bio queued to "
                                   "completion), q2d (queued to issue: scheduler and queueing) and d2c "
                                   "(issue to completion: the device).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_disk_pid(p)
    common.add_cgroup(p)
    p.add_argument("-D", "--per-disk", "--disks", dest="per_disk", action="store_true",
                   help="one histogram per disk")
    p.add_argument("-O", "--per-op", dest="per_op", action="store_true",
                   help="one histogram per operation (read, write, ...)")
    common.add_deprecated_flag(p, "-F", "--flags", dest="per_op", instead="-O/--per-op")
    p.add_argument("-P", "--per-pid", "--pids", dest="per_pid", action="store_true",
                   help="one histogram per submitting process")
    p.add_argument("-G", "--per-cgroup", dest="per_cgroup", action="store_true",
                   help="one histogram per cgroup the I/O is charged to (a throttled or written-back bio "
                        "under its submitter's cgroup, not the kworker's)")
    p.add_argument("-m", "--milliseconds", action="store_true", help="print values in milliseconds")
    common.add_json(p)
    p.add_argument("--phase", default="q2c,q2d,d2c", type=common.phases_type,
                   help="phases to measure, comma separated (default: q2c,q2d,d2c)")
    p.add_argument("--fine", action="store_true", help="show every log-linear bucket, not powers of two")
    p.add_argument("--timing", choices=("auto", "stamps", "probes"), default="auto",
                   help="auto (default): time each request from the kernel's own start and issue stamps, one "
                        "program per I/O, on every disk whose requests carry them, probes elsewhere; stamps: "
                        "only the stamps; probes: follow each bio from its queue event (btt's per-bio phases; "
                        "what -P and -p use)")
    common.add_interval_count(p)
    p.set_defaults(func=run, tool="lat")


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: `ioscope lat --help` needs neither numpy nor the BPF loader
    from ioscope.base import devices, system
    from ioscope.engines.latency.collector import LatCollector, LatOptions
    from ioscope.engines.latency.model import build_report
    from ioscope.kernel.stamps import TICK_S, timing_summary
    from ioscope.tools.lat.view import LatViewOptions, renderables, to_json

    system.require_bpf_privileges("lat")
    opts = LatOptions(
        disks=[devices.resolve_disk(d) for d in args.disk or []],
        pid=args.pid, per_disk=args.per_disk, per_op=args.per_op, per_pid=args.per_pid,
        per_cgroup=args.per_cgroup, cgroup=args.cgroup, throttle=True,
        phases=tuple(args.phase), btf=system.btf_path(args.btf), timing=args.timing,
    )
    if args.timing == "stamps" and (args.per_pid or args.pid is not None):
        raise UsageError("--timing stamps cannot tell which process queued an I/O (-P, -p)",
                         "leave --timing out, or use --timing probes")
    view = LatViewOptions(per_disk=args.per_disk, per_op=args.per_op, per_pid=args.per_pid, per_cgroup=args.per_cgroup,
                          unit="ms" if args.milliseconds else None, fine=args.fine)
    collector = LatCollector(opts)
    try:
        where = ", ".join(d.name for d in opts.disks) or "all disks"
        if collector.cgroup is not None:
            where += f", I/O charged to {collector.cgroup.label()}"
        attach = collector.bpf.variant_summary()
        timed = timing_summary(collector.timing)

        def emit(tick: Tick) -> None:
            report = build_report(collector.sample(tick),
                                  attach=attach, phases=opts.phases)
            common.print_result("lat", report, args.json, to_json,
                                    lambda rep: renderables(rep, view), report.losses)

        return common.run_intervals("lat", f"block I/O latency on {where} ({attach}; timing {timed})",
                                        args.interval, args.count, emit, collector.unavailable,
                                        tick=collector.tick, tick_every=TICK_S)
    finally:
        collector.close()


__all__ = ["add_parser", "run"]
