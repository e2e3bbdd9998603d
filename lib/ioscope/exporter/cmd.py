"""ioscope exporter's command line: agg's in-kernel aggregation + /proc/diskstats, served to Prometheus."""

from __future__ import annotations

import argparse
import ipaddress
import time

DEFAULT_LISTEN = "127.0.0.1:9863"

DESCRIPTION = """\
A Prometheus/OpenMetrics endpoint (/metrics): block I/O latency histograms per disk, op and phase
(aggregated in the kernel), per-disk counters from /proc/diskstats, and optionally the top N
processes or cgroups by bytes. SIGTERM, SIGINT or SIGHUP stop it (exit 0). See docs/exporter.md."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("exporter", help="Prometheus endpoint: I/O latency histograms and disk counters",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="ADDR:PORT",
                   help=f"address and port to serve /metrics on (default {DEFAULT_LISTEN})")
    p.add_argument("-d", "--disk", action="append", metavar="DISK",
                   help="export only this disk (name, /dev/name or major:minor); repeatable")
    p.add_argument("--per-process", type=int, default=0, metavar="N",
                   help="export the N processes that moved most bytes per scrape interval (the rest as other)")
    p.add_argument("--per-cgroup", type=int, default=0, metavar="N",
                   help="the same for cgroups")
    p.set_defaults(func=run, tool="exporter")


def parse_listen(text: str) -> tuple[str, int]:
    from ioscope.errors import UsageError
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        if not sep or not host:
            raise ValueError
        ipaddress.ip_address(host)
        n = int(port)
        if not 0 < n < 65536:
            raise ValueError
    except ValueError:
        raise UsageError(f"--listen {text!r} is not ADDR:PORT", "for example --listen 127.0.0.1:9863") from None
    return host, n


def run(args: argparse.Namespace) -> int:
    from ioscope import devices, system
    from ioscope.agg.collector import AggCollector, AggOptions
    from ioscope.agg.expr import parse_all
    from ioscope.errors import IoscopeError, UsageError
    from ioscope.exporter.collector import ExporterOptions, IoscopeCollector, expressions
    from ioscope.lat.collector import LatCollector, LatOptions
    from ioscope.stamps import TICK_S

    host, port = parse_listen(args.listen)
    if args.per_process < 0 or args.per_cgroup < 0:
        raise UsageError("--per-process and --per-cgroup take N >= 0")
    opts = ExporterOptions([devices.resolve_disk(d) for d in args.disk or []], args.per_process, args.per_cgroup)
    exprs = parse_all(expressions(opts))
    system.require_bpf_privileges("exporter")

    from prometheus_client import start_http_server
    from prometheus_client.core import CollectorRegistry

    btf = system.btf_path(args.btf)
    lat = LatCollector(LatOptions(disks=opts.disks, per_disk=True, per_op=True, btf=btf))
    agg = None
    server = None
    try:
        if exprs:  # per process or cgroup: agg, whose queue program knows who queued each I/O
            agg = AggCollector(AggOptions(exprs=exprs, disks=opts.disks, btf=btf))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(IoscopeCollector(lat, agg, opts))
        try:
            server, _thread = start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            raise IoscopeError(f"cannot listen on {host}:{port}: {e.strerror}",
                               "pick another port with --listen") from None
        where = ", ".join(d.name for d in opts.disks) or "all disks"
        print(f"ioscope exporter: serving http://{host}:{port}/metrics for {where}", flush=True)
        try:
            while True:
                time.sleep(TICK_S)
                lat.tick()  # disks without the kernel's stamps to the probes; stale slots every 10 s
                if agg is not None:
                    agg.tick()
        except KeyboardInterrupt:  # SIGINT, SIGTERM, SIGHUP (cli.py): a normal stop
            return 0
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        if agg is not None:
            agg.close()
        lat.close()


__all__ = ["add_parser", "run"]
