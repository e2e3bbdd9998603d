"""ioscope import's command line: its options and help. The implementation (ioscope.capture.importer, with
numpy) is imported when the command runs, not for --help."""

from __future__ import annotations

import argparse

from ioscope.base import outfile

EXAMPLES = """\
examples:
  ioscope import sda.blktrace.0 sda.blktrace.1 -o sda.ioscope   # blktrace's per-CPU files
  ioscope import sda -o sda.ioscope                             # the same: every sda.blktrace.N
  ioscope import trace.bin -o trace.ioscope                     # a blkparse -d dump
  ioscope report sda.ioscope
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("import", help="turn blktrace binaries into an ioscope capture",
                       description="Read blktrace version 7 binaries (blktrace's per-CPU files NAME.blktrace.N, "
                                   "or blkparse -d dumps; either byte order) and write an ioscope capture, so "
                                   "that parse and report work on traces from hosts where blktrace runs.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="FILE", help="blktrace files, NAME for NAME.blktrace.*, or dumps")
    p.add_argument("-o", "--output", required=True, metavar="CAPTURE", help="the capture to write")
    outfile.add_force(p)
    p.set_defaults(func=run, tool="import")


def run(args: argparse.Namespace) -> int:
    from ioscope.capture.importer import run as run_importer

    return run_importer(args)
