"""ioscope export's command line: its options and help. The implementation (ioscope.trace.export, with
numpy) is imported when the command runs, not for --help."""

from __future__ import annotations

import argparse

from ioscope import outfile

EXAMPLES = """\
examples:
  ioscope export trace.ioscope --format blktrace -o trace.bin
      btt -i trace.bin                      # btt reads the dump as is
      blkparse -i - < trace.bin             # and blkparse reads it from stdin
  ioscope export trace.ioscope --format blktrace --per-cpu -o DIR
      blkparse -D DIR -i loop0              # blktrace's own layout: DIR/loop0.blktrace.<cpu>
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export", help="write a capture as blktrace binaries (for blkparse, btt)",
                       description="Write a capture as a blktrace version 7 binary stream, with process-name "
                                   "notes and the wall-clock timestamp note, that the real blkparse and btt read.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("capture", metavar="CAPTURE", help="an ioscope capture")
    p.add_argument("--format", default="blktrace", choices=("blktrace",), help="output format (blktrace)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output file (a blkparse -d style dump), or directory with --per-cpu")
    p.add_argument("--per-cpu", action="store_true",
                   help="write blktrace's layout instead: OUT/<disk>.blktrace.<cpu>, one file per disk and CPU")
    outfile.add_force(p)
    p.set_defaults(func=run, tool="export")


def run(args: argparse.Namespace) -> int:
    from ioscope.trace.export import run as run_export

    return run_export(args)
