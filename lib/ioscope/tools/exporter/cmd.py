"""ioscope exporter's command line: lat's in-kernel histograms, agg's per-process and per-cgroup sums and
/proc/diskstats, served to Prometheus."""

from __future__ import annotations

import argparse

from ioscope.tools import common
from ioscope.tools.exporter.server import DEFAULT_LISTEN

DEFAULT_SERIES_IDLE_S = 600  # model.DEFAULT_SERIES_IDLE_S (not imported here: --help stays light)

DESCRIPTION = """\
A Prometheus endpoint (/metrics): block I/O latency histograms per disk, op and phase (aggregated
in the kernel), the per-disk counters of /proc/diskstats, the completions no program counted, and
optionally per-process or per-cgroup I/O. Every counter is cumulative and every series stays until
it has been idle for --series-idle seconds. SIGTERM, SIGINT or SIGHUP stop it (exit 0). See
docs/exporter.md."""

EXAMPLES = """\
examples:
  ioscope exporter                                    # http://127.0.0.1:9863/metrics, every disk
  ioscope exporter --listen :9863 -d nvme0n1          # every address of the host, one disk
  ioscope exporter --per-process 50 --per-cgroup 20   # and up to 50 processes, 20 cgroups
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("exporter", help="Prometheus endpoint: I/O latency histograms and disk counters",
                       description=DESCRIPTION, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where to serve /metrics: HOST:PORT, :PORT (every address), [IPV6]:PORT, or PORT "
                        f"(default {DEFAULT_LISTEN})")
    p.add_argument("-d", "--disk", action="append", metavar="DISK",
                   help="export only this disk (name, /dev/name or major:minor); repeatable")
    p.add_argument("--per-process", type=int, default=0, metavar="N",
                   help="a series per process that queues I/O, at most N at once (first come); the I/O of "
                        "processes beyond N is summed as other")
    p.add_argument("--per-cgroup", type=int, default=0, metavar="N",
                   help="the same per cgroup")
    p.add_argument("--series-idle", type=common.positive_float, default=DEFAULT_SERIES_IDLE_S,
                   metavar="SECONDS",
                   help=f"drop a process or cgroup series after SECONDS without I/O (default {DEFAULT_SERIES_IDLE_S}: "
                        "10 minutes), freeing its place")
    p.add_argument("--timing", choices=("auto", "stamps", "probes"), default="auto",
                   help="as in lat: auto (default) times each request from the kernel's own stamps, one "
                        "program per I/O, where its requests carry them, probes elsewhere; stamps: only the "
                        "stamps; probes: follow each bio from its queue event everywhere")
    p.set_defaults(func=run, tool="exporter")


def run(args: argparse.Namespace) -> int:
    import time

    from ioscope._version import __version__
    from ioscope.base import devices, system
    from ioscope.base.errors import UsageError
    from ioscope.engines.aggregate.collector import AggCollector, AggOptions
    from ioscope.engines.aggregate.expr import parse_all
    from ioscope.engines.latency.collector import LatCollector, LatOptions
    from ioscope.kernel.stamps import TICK_S
    from ioscope.tools.exporter import server as srv
    from ioscope.tools.exporter.collector import ExporterCollector, ExporterOptions, expressions
    from ioscope.tools.exporter.view import RegistryCollector

    host, port = srv.parse_listen(args.listen)
    if args.per_process < 0 or args.per_cgroup < 0:
        raise UsageError("--per-process and --per-cgroup take N >= 0")
    opts = ExporterOptions([devices.resolve_disk(d) for d in args.disk or []], args.per_process, args.per_cgroup,
                           args.series_idle)
    exprs = parse_all(expressions(opts))
    system.require_bpf_privileges("exporter")

    from prometheus_client import make_wsgi_app
    from prometheus_client.core import CollectorRegistry

    btf = system.btf_path(args.btf)
    lat = LatCollector(LatOptions(disks=opts.disks, per_disk=True, per_op=True, btf=btf, timing=args.timing))
    try:
        collector = ExporterCollector(lat, opts)  # at once: the kernel's counts right after the attach
    except BaseException:
        lat.close()
        raise
    server = None
    try:
        if exprs:  # per process or cgroup: agg, whose queue program knows who queued each I/O
            collector.set_agg(AggCollector(AggOptions(exprs=exprs, disks=opts.disks, btf=btf)))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(RegistryCollector(collector.scrape))
        server, _thread = srv.serve(host, port, srv.app(make_wsgi_app(registry), __version__))
        where = ", ".join(d.name for d in opts.disks) or "all disks"
        print(f"ioscope exporter: serving {srv.url(host, port)} for {where}", flush=True)
        try:
            while True:
                time.sleep(TICK_S)
                collector.tick()
        except KeyboardInterrupt:  # SIGINT, SIGTERM, SIGHUP (cli.py): a normal stop
            return 0
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        collector.close()


__all__ = ["add_parser", "run"]
