"""ioscope nic's command line: options -> NicCollector -> build_report -> a view, every interval."""

from __future__ import annotations

import argparse

from ioscope.base import live
from ioscope.base.collector import Tick
from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope nic                  # every interface, from now until Ctrl-C, printed once
  ioscope nic 1 5              # every second, 5 times
  ioscope nic -i eth0 -x 2     # one interface, with the error and drop columns, every 2 seconds
  ioscope nic -i eth0,eth1 -j 1   # two interfaces, JSON lines every second
"""


def iface_list(text: str) -> list[str]:
    """-i eth0 or -i eth0,eth1 (as nicstat takes it)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"interface name expected, not '{text}'")
    return names


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("nic", help="network interfaces as nicstat shows them: KB/s, packets/s, %%Util, Sat",
                       description="Per network interface: KB/s and packets/s read and written, average "
                                   "packet sizes, utilisation of the link speed and saturation (errors, "
                                   "drops and overruns per second), from the kernel's netlink counters "
                                   "(IFLA_STATS64) and the link speed in sysfs.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-i", "--iface", action="append", type=iface_list, metavar="IFACE",
                   help="only this interface (or a comma-separated list); repeatable")
    p.add_argument("-x", "--extended", action="store_true",
                   help="the error, drop, overrun and collision columns instead of the average packet sizes")
    common.add_json(p)
    common.add_interval_count(p)
    p.set_defaults(func=run, tool="nic")


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: `ioscope nic --help` needs neither pyroute2 nor rich
    from ioscope.engines.netlink.collector import NicCollector
    from ioscope.engines.netlink.model import NicSample, build_report
    from ioscope.tools.nic.view import NicViewOptions, renderables, to_json

    names = [n for group in args.iface or [] for n in group]
    view = NicViewOptions(extended=args.extended)
    collector = NicCollector(names)
    try:
        prev: list[NicSample] = [collector.sample()]

        def emit(tick: Tick) -> None:
            cur = collector.sample(tick)
            report = build_report(prev[0], cur, names)
            prev[0] = cur
            with live.signals_deferred():
                common.print_result("nic", report, args.json, to_json, lambda rep: renderables(rep, view))

        where = ", ".join(names) or "every interface"
        return common.run_intervals("nic", f"network interface counters of {where} (netlink)",
                                        args.interval, args.count, emit, [])
    finally:
        collector.close()


__all__ = ["add_parser", "run"]
