"""ioscope exporter's command line: lat's in-kernel histograms, agg's per-process and per-cgroup sums and
/proc/diskstats, served to Prometheus."""

from __future__ import annotations

import argparse
import signal
from types import FrameType
from typing import Any

from ioscope.tools import common

DEFAULT_LISTEN = "127.0.0.1:9863"  # the port Prometheus' list of exporters gives ioscope
# model's and server's defaults (not imported here: --help stays light)
DEFAULT_SERIES_IDLE_S = 600
DEFAULT_SERIES_WINDOW_S = 60
DEFAULT_MAX_REQUESTS = 40
DEFAULT_MAX_CONNECTIONS = 512
DEFAULT_READ_TIMEOUT_S = 10
DEFAULT_IDLE_TIMEOUT_S = 90
EXIT_SIGHUP = 128 + signal.SIGHUP  # what a shell reports for a process SIGHUP ended: not 0, so systemd restarts it

DESCRIPTION = """\
A Prometheus endpoint: block I/O latency histograms per disk, operation and phase (aggregated in the
kernel), the per-disk counters of /proc/diskstats (also under node_exporter's names), the completions
no program counted, and optionally per-process-name and per-cgroup I/O and latency (the heaviest, the
rest summed as other). Every counter is cumulative and every series stable. SIGTERM and SIGINT stop it
(exit 0); SIGHUP stops it with status 129, so that a service manager starts it again. See
docs/exporter.md."""

EXAMPLES = """\
examples:
  ioscope exporter                                    # http://127.0.0.1:9863/metrics, disks as node_exporter
  ioscope exporter --listen :9863 -d nvme0n1          # every address of the host, one disk
  ioscope exporter --per-process 50 --per-cgroup 20   # and the 50 heaviest process names, 20 cgroups
  ioscope exporter --web.config.file /etc/ioscope/web.yml --listen :9863   # TLS, basic auth
  ioscope exporter --disk-names node --device-include '^(sd|nvme|vd)'     # node_exporter's disk names
"""


def _non_negative_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not '{s}'") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not '{s}'")
    return v


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("exporter", help="Prometheus endpoint: I/O latency histograms and disk counters",
                       description=DESCRIPTION, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    w = p.add_argument_group("serving (the flags of Prometheus' exporters)")
    w.add_argument("--listen", "--web.listen-address", dest="listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where to serve: HOST:PORT, :PORT (every address), [IPV6]:PORT, or PORT "
                        f"(default {DEFAULT_LISTEN})")
    w.add_argument("--web.config.file", dest="web_config", metavar="FILE",
                   help="TLS and basic authentication, in the exporter toolkit's web configuration format "
                        "(read again when it changes)")
    w.add_argument("--web.telemetry-path", dest="telemetry_path", default="/metrics", metavar="PATH",
                   help="the path of the metrics (default /metrics)")
    w.add_argument("--web.max-requests", dest="max_requests", type=_non_negative_int, default=DEFAULT_MAX_REQUESTS,
                   metavar="N", help=f"scrape requests answered at once; one more gets 503 at once; 0: no limit "
                                     f"(default {DEFAULT_MAX_REQUESTS})")
    w.add_argument("--web.max-connections", dest="max_connections", type=common.positive_int,
                   default=DEFAULT_MAX_CONNECTIONS, metavar="N",
                   help=f"open connections; one more closes the one idle the longest (default "
                        f"{DEFAULT_MAX_CONNECTIONS})")
    w.add_argument("--web.read-timeout", dest="read_timeout", type=common.positive_float,
                   default=DEFAULT_READ_TIMEOUT_S, metavar="SECONDS",
                   help=f"time a client has to send a request's head, and TLS handshake (default "
                        f"{DEFAULT_READ_TIMEOUT_S})")
    w.add_argument("--web.idle-timeout", dest="idle_timeout", type=common.positive_float,
                   default=DEFAULT_IDLE_TIMEOUT_S, metavar="SECONDS",
                   help=f"an idle keep-alive connection is closed after this (default {DEFAULT_IDLE_TIMEOUT_S})")
    w.add_argument("--web.disable-exporter-metrics", dest="no_self_metrics", action="store_true",
                   help="leave out the exporter's own metrics (process_*, python_gc_*, promhttp_*, ioscope_http_*)")
    d = p.add_argument_group("disks")
    d.add_argument("-d", "--disk", action="append", metavar="DISK",
                   help="trace and export only this disk (name, /dev/name or major:minor); repeatable")
    d.add_argument("--device-include", "--collector.diskstats.device-include", dest="device_include",
                   metavar="REGEX", help="export only the disks whose name matches (as node_exporter)")
    d.add_argument("--device-exclude", "--collector.diskstats.device-exclude", dest="device_exclude",
                   metavar="REGEX", help="do not export the disks whose name matches (default: node_exporter's, "
                                         "ram, zram, loop, floppy devices and partitions)")
    d.add_argument("--disk-names", choices=("ioscope", "node", "both"), default="ioscope",
                   help="the /proc/diskstats counters as ioscope_disk_* (default), under node_exporter's "
                        "node_disk_* names, or both")
    d.add_argument("--timing", choices=("auto", "stamps", "probes"), default="auto",
                   help="as in lat: auto (default) times each request from the kernel's own stamps, one "
                        "program per I/O, where its requests carry them, probes elsewhere; stamps: only the "
                        "stamps; probes: follow each bio from its queue event everywhere")
    s = p.add_argument_group("processes and cgroups (off by default; docs/exporter.md, 'What is exported')")
    s.add_argument("--per-process", type=_non_negative_int, default=0, metavar="N",
                   help="a series per process name (comm) for the N that queue the most bytes; the rest "
                        "summed as comm=\"(other processes)\"")
    s.add_argument("--process-pid", action="store_true",
                   help="a series per process (pid and comm) rather than per name: more series on a host "
                        "where processes come and go")
    s.add_argument("--per-cgroup", type=_non_negative_int, default=0, metavar="N",
                   help="the same per cgroup (its path, and the container, pod or unit it names), with q2c "
                        "and d2c histograms")
    s.add_argument("--path.rootfs", dest="rootfs", metavar="DIR",
                   help="where the host's / is mounted (node_exporter's flag; default /, or $IOSCOPE_HOST_ROOT): "
                        "Kubernetes pods' and containers' names are read from its var/log/pods, "
                        "var/log/containers and the runtimes' state under run/")
    s.add_argument("--no-cgroup-latency", dest="cgroup_latency", action="store_false",
                   help="per cgroup: counters only, no histograms (agg's queue program alone, cheaper)")
    s.add_argument("--no-io-wait", dest="io_wait", action="store_false",
                   help="no series of the time blocked in I/O waits per process and cgroup (they need the "
                        "scheduler's switch and wakeup tracepoints, a cost on every context switch)")
    s.add_argument("--series-window", type=common.positive_float, default=DEFAULT_SERIES_WINDOW_S,
                   metavar="SECONDS",
                   help=f"the heaviest are chosen by bytes over this window; a series keeps its place at least "
                        f"this long, and one that loses it stays this long (default {DEFAULT_SERIES_WINDOW_S})")
    s.add_argument("--series-idle", type=common.positive_float, default=DEFAULT_SERIES_IDLE_S,
                   metavar="SECONDS",
                   help=f"drop a process or cgroup series after SECONDS without I/O (default {DEFAULT_SERIES_IDLE_S}:"
                        " 10 minutes)")
    p.set_defaults(func=run, tool="exporter")


class _HangUp(KeyboardInterrupt):
    """SIGHUP: stop as on SIGTERM, then exit EXIT_SIGHUP."""


_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """A stop signal after the first: it is stopping already."""


def _stopping() -> None:
    """The first stop signal stops the exporter; those after it, while it closes, change nothing (a second
    SIGTERM had ended it by that signal in the middle of closing: -15 where the first gave 0). A handler
    that does nothing, not SIG_IGN: two signals that arrive together (kill -TERM then -HUP) are both
    pending before Python runs the first's handler, and Python reports a pending signal whose handler
    became SIG_IGN on stderr ("OSError: Signal 15 ignored due to race condition")."""
    for sig in _STOPS:
        if signal.getsignal(sig) not in (signal.SIG_IGN, None):
            signal.signal(sig, _ignore)


def _stopped() -> None:
    """Closed: the stop signals ignored by the kernel until the process is gone (Python's finalization puts
    back the default action, death by the signal, where it had a handler). signal.signal() runs what is
    pending (through _ignore) before it changes a handler."""
    for sig in _STOPS:
        if signal.getsignal(sig) is _ignore:
            signal.signal(sig, signal.SIG_IGN)


def _stop(signum: int, frame: FrameType | None) -> None:
    _stopping()
    raise KeyboardInterrupt


def _hang_up(signum: int, frame: FrameType | None) -> None:
    _stopping()
    raise _HangUp


def options(args: argparse.Namespace) -> Any:
    """The command line checked: (ExporterOptions, web Limits, telemetry path); one-line errors."""
    import re

    from ioscope.base import devices
    from ioscope.base.errors import UsageError
    from ioscope.tools.exporter.collector import DEFAULT_DEVICE_EXCLUDE, ExporterOptions
    from ioscope.tools.exporter.server import Limits

    if args.device_include and args.device_exclude:
        raise UsageError("--device-include and --device-exclude cannot be given together",
                         "as in node_exporter: one or the other")
    for flag, rx in (("--device-include", args.device_include), ("--device-exclude", args.device_exclude)):
        if rx:
            try:
                re.compile(rx)
            except re.error as e:
                raise UsageError(f"{flag} {rx!r} is not a regular expression: {e}") from None
    if not args.telemetry_path.startswith("/") or any(c in args.telemetry_path for c in "?# "):
        raise UsageError(f"--web.telemetry-path {args.telemetry_path!r} is not a path", "for example /metrics")
    exclude = args.device_exclude if args.device_exclude else None if args.device_include else DEFAULT_DEVICE_EXCLUDE
    opts = ExporterOptions(
        disks=[devices.resolve_disk(d) for d in args.disk or []], per_process=args.per_process,
        per_cgroup=args.per_cgroup, series_idle_s=args.series_idle, series_window_s=args.series_window,
        process_pid=args.process_pid, cgroup_latency=args.cgroup_latency, io_wait=args.io_wait, device_exclude=exclude,
        device_include=args.device_include)
    limits = Limits(max_requests=args.max_requests, max_connections=args.max_connections,
                    read_timeout_s=args.read_timeout, idle_timeout_s=args.idle_timeout)
    return opts, limits


def _raise_descriptor_limit() -> None:
    """The soft limit on open descriptors raised to the hard one, as Go's runtime does for node_exporter:
    systemd gives services 1,024 soft (524,288 hard), and a flood of connects is accepted whole before the
    connection limit closes the oldest idle ones (1,000 idle connects: 962 descriptors at the peak with 512
    connections kept), which at 1,024 would leave no room for a scrape or a BPF object."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(args: argparse.Namespace) -> int:
    import time

    from ioscope._version import __version__
    from ioscope.base import system
    from ioscope.base.cgroups import io_cgroup_root
    from ioscope.base.http import parse_listen, url
    from ioscope.engines.aggregate.collector import AggCollector, AggOptions
    from ioscope.engines.aggregate.expr import parse_all
    from ioscope.engines.latency.collector import LatCollector, LatOptions
    from ioscope.kernel.stamps import TICK_S
    from ioscope.tools.exporter import server as srv
    from ioscope.tools.exporter import view
    from ioscope.tools.exporter.collector import ExporterCollector, expressions
    from ioscope.tools.exporter.selfmetrics import SelfMetrics
    from ioscope.tools.exporter.webconfig import WebConfigFile

    host, port = parse_listen(args.listen, DEFAULT_LISTEN)
    if args.rootfs:
        from ioscope.base import kubenames
        kubenames.set_host_root(args.rootfs, "--path.rootfs")
    opts, limits = options(args)
    web = WebConfigFile(args.web_config) if args.web_config else None
    exprs = parse_all(expressions(opts))
    system.require_bpf_privileges("exporter")
    _raise_descriptor_limit()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
    if signal.getsignal(signal.SIGHUP) not in (signal.SIG_IGN, None):  # not under nohup
        signal.signal(signal.SIGHUP, _hang_up)

    io = io_cgroup_root() if opts.per_cgroup else None
    vopts = view.ViewOptions(disk_names=args.disk_names, process_pid=opts.process_pid,
                             cgroup_hierarchy=(io[1], str(io[0])) if io else None)
    btf = system.btf_path(args.btf)
    # throttle: the bios blk-throttle holds, per disk and cgroup (its programs attach once a limit is in force)
    lat = LatCollector(LatOptions(disks=opts.disks, per_disk=True, per_op=True, btf=btf, timing=args.timing,
                                  throttle=True, in_flight_oldest=True))
    try:
        collector = ExporterCollector(lat, opts)  # at once: the kernel's counts right after the attach
    except BaseException:
        lat.close()
        raise
    server = None
    status = 0
    try:
        if exprs:  # per process or cgroup: agg, whose queue program knows who queued each I/O
            collector.set_agg(AggCollector(AggOptions(exprs=exprs, disks=opts.disks, btf=btf)))
        own = None if args.no_self_metrics else SelfMetrics()

        def collect() -> list[Any]:
            fams = list(view.families(collector.scrape(), vopts))
            if own is not None and server is not None:
                fams += own.families(server.stats)
            return fams

        app = srv.App(collect, __version__, args.telemetry_path, limits, web)
        server = srv.serve(host, port, app, __version__)
        where = ", ".join(d.name for d in opts.disks) or "all disks"
        try:  # serving: from here a stop signal is a normal stop (one right after the first line gave 130)
            print(f"ioscope exporter: serving {url(host, port, args.telemetry_path, server.tls)} for {where}",
                  flush=True)
            if io is not None:
                print(f"ioscope exporter: cgroup labels are paths of the {io[1]} hierarchy ({io[0]}), where this "
                      "kernel charges block I/O" + ("; a process in a cgroup v2 group alone (no blkio group) is in "
                                                    "its root, /" if io[1].startswith("v1") else ""), flush=True)
            while True:
                time.sleep(TICK_S)
                collector.tick()
        except _HangUp:  # SIGHUP: a clean stop that a service manager restarts (Restart=on-failure)
            status = EXIT_SIGHUP
        except KeyboardInterrupt:  # SIGINT, SIGTERM (cli.py): a normal stop
            status = 0
    finally:
        _stopping()
        if server is not None:
            server.shutdown()
        collector.close()
        _stopped()
    return status


__all__ = ["EXIT_SIGHUP", "add_parser", "options", "run"]
