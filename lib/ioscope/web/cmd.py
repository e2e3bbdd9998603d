"""ioscope web: a local page with the live latency heat map (Q2C, D2C, Q2D) of the last minutes, per disk,
op (and process, cgroup with --by), scrolling every second, fed by agg's in-kernel histograms."""

from __future__ import annotations

import argparse
import sys
import time

from ioscope import cli_common

EXAMPLES = """\
examples:
  ioscope web                       # every disk, by disk and op: open http://127.0.0.1:8079/
  ioscope web -d loop0 --by comm    # one disk, drill-down by process too (costs more: docs/web.md)
  ioscope web --port 0 -w 60        # any free port (printed), stop after a minute
"""
BY = ("comm", "cgroup")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("web", help="a local page with the live latency heat map, per disk/op/process/cgroup",
                       description="Serve a page, on 127.0.0.1 by default, with the latency heat map (Q2C, D2C, "
                                   "Q2D) of the last minutes scrolling every second, per disk and op, with "
                                   "drill-down; fed by in-kernel histograms (agg). It serves only the page and "
                                   "its data (docs/web.md says what they reveal).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-d", "--disk", action="append", metavar="DISK", help="trace only this disk; repeatable")
    p.add_argument("--by", metavar="KEYS", default="",
                   help="more keys to drill down by: comm (process), cgroup, or comm,cgroup (every I/O is then "
                        "followed from its queue event: more overhead than disk and op alone)")
    p.add_argument("--listen", metavar="ADDR", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this host only)")
    p.add_argument("--port", type=int, default=8079, metavar="PORT", help="TCP port (default 8079; 0: any free one)")
    p.add_argument("--minutes", type=cli_common.positive_float, default=5.0, metavar="M",
                   help="how much history the page holds (default 5)")
    p.add_argument("-w", "--wait", type=cli_common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS (default: Ctrl-C, SIGTERM or SIGHUP)")
    p.set_defaults(func=run, tool="web")


def run(args: argparse.Namespace) -> int:
    from ioscope import devices, system
    from ioscope.agg.collector import AggCollector, AggOptions, programs
    from ioscope.agg.expr import parse_all
    from ioscope.errors import IoscopeError, UsageError
    from ioscope.stamps import TICK_S
    from ioscope.web.model import PHASES, LiveHeat
    from ioscope.web.page import render
    from ioscope.web.server import WebServer

    by = [x for x in args.by.split(",") if x]
    bad = [x for x in by if x not in BY]
    if bad:
        raise UsageError(f"--by {','.join(bad)}: not a key the page drills down by", "use comm, cgroup or comm,cgroup")
    if not 0 <= args.port < 65536:
        raise UsageError(f"--port {args.port}: not a TCP port", "give 1-65535, or 0 for any free port")
    keys = ["disk", "op", *by]
    exprs = parse_all([f"llquantize({p}) by {','.join(keys)}" for p in PHASES])
    system.require_bpf_privileges("web")
    heat = LiveHeat(columns=max(10, int(args.minutes * 60)))
    disks = [devices.resolve_disk(d) for d in args.disk or []]
    where = ", ".join(d.name for d in disks) or "every disk"
    what = f"{where}; keys {', '.join(keys)}; one column per second, the last {args.minutes:g} minutes"
    page = render(heat.columns, what)
    try:
        server = WebServer(args.listen, args.port, lambda: page, heat.to_json)
    except OSError as exc:
        raise IoscopeError(f"cannot listen on {args.listen}:{args.port}: {exc.strerror}",
                           "choose another --port (0: any free one)") from None
    collector = None
    try:
        collector = AggCollector(AggOptions(exprs=exprs, disks=disks, btf=system.btf_path(args.btf),
                                            programs=programs(exprs)))
        server.start()
        host, port = server.address
        cli_common.warn_unavailable("web", collector.unavailable)
        print(f"Serving the live heat map of {what} at http://{host}:{port}/ ; Ctrl-C to end.", file=sys.stderr,
              flush=True)
        start = last = time.time()
        last_tick = start
        while args.wait is None or time.time() - start < args.wait:
            cli_common.sleep_until(last + 1.0)
            now = time.time()
            sample = collector.sample(last, reset=True, final=False)
            rows = []
            for p, prow in zip(PHASES, sample.rows):
                for r in prow:
                    counts = getattr(r.stat, "counts", None)
                    if counts is None:
                        continue
                    k = tuple(str(r.keys.get(d, "?")) for d in ("disk", "op", "comm", "cgroup"))
                    rows.append((p, (k[0], k[1], k[2], k[3]), counts))
            heat.add(now, now - last, rows, sample.losses.lost)
            last = now
            if now - last_tick >= TICK_S:
                collector.tick()
                last_tick = now
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        if collector is not None:
            collector.close()
    print(f"ioscope web: stopped; served {server.requests} requests", file=sys.stderr)
    return 0


__all__ = ["add_parser", "run"]
