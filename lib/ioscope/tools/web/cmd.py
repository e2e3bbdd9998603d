"""ioscope web: a local page with the live latency heat map (Q2C, D2C, Q2D) of the last minutes, per disk,
op (and process, cgroup with --by), scrolling every second, fed by lat's in-kernel histograms (agg's with --by)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope web                       # every disk, by disk and op: open http://127.0.0.1:8079/
  ioscope web -d loop0 --by comm    # one disk, drill-down by process too (costs more: docs/web.md)
  ioscope web --listen 127.0.0.1:9000 -w 60   # another port; stop after a minute
"""
DEFAULT_LISTEN = "127.0.0.1:8079"
BY = ("comm", "cgroup")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("web", help="a local page with the live latency heat map, per disk/op/process/cgroup",
                       description="Serve a page, on 127.0.0.1 by default, with the latency heat map (Q2C, D2C, "
                                   "Q2D) of the last minutes scrolling every second, per disk and op, with "
                                   "drill-down; fed by in-kernel histograms (lat's; agg's with --by). It serves "
                                   "only the page and its data (docs/web.md says what they reveal).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-d", "--disk", action="append", metavar="DISK", help="trace only this disk; repeatable")
    p.add_argument("--by", metavar="KEYS", default="",
                   help="more keys to drill down by: comm (process), cgroup, or comm,cgroup (every I/O is then "
                        "followed from its queue event: more overhead than disk and op alone)")
    p.add_argument("--listen", metavar="HOST:PORT", default=DEFAULT_LISTEN,
                   help=f"where to serve the page: HOST:PORT, :PORT (every address), [IPV6]:PORT or PORT (default "
                        f"{DEFAULT_LISTEN}: this host only; the page has no authentication)")
    p.add_argument("--minutes", type=common.positive_float, default=5.0, metavar="M",
                   help="how much history the page holds (default 5)")
    p.add_argument("-w", "--wait", type=common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS (default: Ctrl-C, SIGTERM or SIGHUP)")
    p.set_defaults(func=run, tool="web")


Row = tuple[str, tuple[str, str, str, str], Any]   # (phase, (disk, op, comm, cgroup), bucket counts)


class LiveSource:
    """One second's histograms: lat's collector for disk and op (timed from the kernel's request stamps where
    it can: lat's cost), agg's with llquantize by disk, op and the --by keys (each bio followed from its queue
    event, to know the process and cgroup that queued it)."""

    def __init__(self, by: list[str], disks: list[Any], btf: str | None) -> None:
        from ioscope.kernel.inflight import OldestWatch
        self.by = by
        self.watch = OldestWatch(None, issue_known=True)   # its table: the collector's, set at each read
        self.collector: Any
        if not by:
            from ioscope.engines.latency.collector import LatCollector, LatOptions
            self.collector = LatCollector(LatOptions(disks=disks, per_disk=True, per_op=True, btf=btf))
        else:
            from ioscope.engines.aggregate.collector import AggCollector, AggOptions, programs
            from ioscope.engines.aggregate.expr import parse_all
            from ioscope.tools.web.model import PHASES
            exprs = parse_all([f"llquantize({p}) by {','.join(['disk', 'op', *by])}" for p in PHASES])
            self.collector = AggCollector(AggOptions(exprs=exprs, disks=disks, btf=btf, programs=programs(exprs)))

    def oldest(self, diskstats: Any) -> dict[int, Any]:
        """The oldest I/O in flight over 1 s per disk (kernel/inflight.py): from the collector's slot table
        where it follows bios (lat's probes, agg's), else /proc/diskstats alone."""
        c = self.collector
        if self.by:
            self.watch.table, self.watch.issue_known = (c.slots if c.slotted else None), c.issue_stamped
        else:
            self.watch.table = None if c.stamps.stamps_only else c.slots
        return self.watch.read(diskstats)

    def read(self, started: float) -> tuple[list[Row], int]:
        """The histograms since the last read (cleared), and the events lost meanwhile."""
        from ioscope.base.collector import Tick
        from ioscope.tools.web.model import PHASES
        sample = self.collector.sample(Tick(started, reset=True))
        rows: list[Row] = []
        if not self.by:
            for h in sample.hists:
                if h.dev and h.phase in PHASES:
                    rows.append((h.phase, (h.disk, h.op, "?", "?"), h.hist.counts))
            return rows, sample.losses.lost
        for p, prow in zip(PHASES, sample.rows):
            for r in prow:
                counts = getattr(r.stat, "counts", None)
                if counts is not None:
                    k = [str(r.keys.get(d, "?")) for d in ("disk", "op", "comm", "cgroup")]
                    rows.append((p, (k[0], k[1], k[2], k[3]), counts))
        return rows, sample.losses.lost


def run(args: argparse.Namespace) -> int:
    from ioscope.base import devices, psi, system
    from ioscope.base.errors import UsageError
    from ioscope.base.http import parse_listen, serve, url
    from ioscope.base.live import sleep_until, warn_unavailable
    from ioscope.kernel.inflight import in_flight_json, in_flight_lines, in_flight_rows
    from ioscope.kernel.stamps import TICK_S
    from ioscope.tools.web.model import LiveHeat
    from ioscope.tools.web.page import render
    from ioscope.tools.web.server import app

    by = [x for x in args.by.split(",") if x]
    bad = [x for x in by if x not in BY]
    if bad:
        raise UsageError(f"--by {','.join(bad)}: not a key the page drills down by", "use comm, cgroup or comm,cgroup")
    host, port = parse_listen(args.listen, DEFAULT_LISTEN)
    system.require_bpf_privileges("web")
    heat = LiveHeat(columns=max(10, int(args.minutes * 60)))
    disks = [devices.resolve_disk(d) for d in args.disk or []]
    where = ", ".join(d.name for d in disks) or "every disk"
    what = f"{where}; keys {', '.join(['disk', 'op', *by])}; one column per second, the last {args.minutes:g} minutes"
    page = render(heat.columns, what)
    requests = [0]
    server, _thread = serve(host, port, app(lambda: page, heat.to_json, requests), "web")   # a taken port: said first
    source = None
    try:
        source = LiveSource(by, disks, system.btf_path(args.btf))
        warn_unavailable("web", source.collector.unavailable)
        print(f"Serving the live heat map of {what} at {url(host, port)} ; Ctrl-C to end.", file=sys.stderr,
              flush=True)
        start = last = time.time()
        last_tick = start
        names = devices.DevNames()
        pressure = psi.host_io()
        while args.wait is None or time.time() - start < args.wait:
            sleep_until(last + 1.0)
            now = time.time()
            rows, lost = source.read(last)
            # beside the map: the host's I/O pressure over the second, and the disks with an I/O out over 1 s
            oldest = source.oldest(devices.read_diskstats())
            shown = [d.name for d in disks] or [names.name(dev) for dev in oldest]
            hung = in_flight_rows(oldest, shown, names.name, lambda pid: system.proc_comm(pid) or "[exited]")
            now_pr = psi.host_io()
            share = psi.share(pressure, now_pr, now - last)
            pressure = now_pr
            heat.status = {"io_pressure": psi.share_json(share), "in_flight_oldest": in_flight_json(hung),
                           "lines": psi.share_lines(share, "second"),
                           "alerts": in_flight_lines(hung, "web", "" if source.watch.table is not None else
                                                     "timed from the kernel's request stamps, no bio followed")}
            heat.add(now, now - last, rows, lost)
            last = now
            if now - last_tick >= TICK_S:
                source.collector.tick()
                last_tick = now
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
        if source is not None:
            source.collector.close()
    print(f"ioscope web: stopped; served {requests[0]} requests", file=sys.stderr)
    return 0


__all__ = ["add_parser", "run"]
