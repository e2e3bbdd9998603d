"""ioscope diff's command line: two captures side by side (summary -> model -> view)."""

from __future__ import annotations

import argparse

from ioscope.engines.pages import cmd as pages_cmd
from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope diff before.ioscope after.ioscope      # per disk and op, and the settings that changed
  ioscope diff -j before.ioscope after.ioscope   # one JSON object
  ioscope diff --html d.html before.ioscope after.ioscope   # both captures' pictures side by side
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("diff", help="two captures side by side: throughput, latency, balance, settings changed",
                       description="Compare two captures, per disk and op: I/Os, MB/s, IOPS, p50/p99/p99.9 of "
                                   "q2c and d2c, the balance of the processes' bytes (Jain's index), and every "
                                   "queue setting recorded with the captures that changed between them, with "
                                   "its direction and ratio.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", metavar="BEFORE", help="the capture taken before the change")
    p.add_argument("after", metavar="AFTER", help="the capture taken after it")
    common.add_json(p)
    pages_cmd.add_arguments(p)
    p.set_defaults(func=run, tool="diff")


def run(args: argparse.Namespace) -> int:
    from ioscope.tools.diff.model import diff
    from ioscope.tools.diff.summary import summarise
    from ioscope.tools.diff.view import renderables, to_json

    if pages_cmd.wanted(args):   # the pictures; the table too only with -j
        pages_cmd.run_diff(args)
        if not args.json:
            return 0
    result = diff(summarise(args.before), summarise(args.after))
    common.print_result("diff", result, args.json, to_json, renderables)
    return 0


__all__ = ["add_parser", "run"]
