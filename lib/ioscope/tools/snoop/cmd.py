"""ioscope snoop's command line: its options and help. The implementation (ioscope.tools.snoop.snooper, with
numpy) is imported when the command runs, not for --help."""

from __future__ import annotations

import argparse

from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope snoop                 # every completed I/O on every disk
  ioscope snoop -d sda -d sdb   # two disks
  ioscope snoop -p 1234         # I/O queued by process 1234
  ioscope snoop -j | jq .       # JSON lines
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("snoop", help="one line per completed block I/O (like biosnoop)",
                       description="One line per completed block I/O: time, process that queued it, disk, "
                                   "operation (RWBS), sector, size, queue time (queued to issued) and service "
                                   "time (issued to completed).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_disk_pid(p)
    p.add_argument("-j", "--json", action="store_true", help="one JSON object per I/O")
    p.add_argument("-w", "--duration", type=common.positive_float, metavar="SECONDS",
                   help="stop after SECONDS")
    p.set_defaults(func=run, tool="snoop")


def run(args: argparse.Namespace) -> int:
    from ioscope.tools.snoop.snooper import run as run_snoop

    return run_snoop(args)
