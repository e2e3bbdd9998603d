"""ioscope export's command line: its options and help. The implementation (ioscope.tools.export.blktrace, with
numpy) is imported when the command runs, not for --help."""

from __future__ import annotations

import argparse

from ioscope.base import outfile

EXAMPLES = """\
examples:
  ioscope export trace.ioscope --format blktrace -o trace.bin
      btt -i trace.bin                      # btt reads the dump as is
      blkparse -i - < trace.bin             # and blkparse reads it from stdin
  ioscope export trace.ioscope --format blktrace --per-cpu -o DIR
      blkparse -D DIR -i loop0              # blktrace's own layout: DIR/loop0.blktrace.<cpu>
  ioscope export --format parquet -o DIR a.ioscope b.ioscope
      DIR/ios/host=H/<capture-id>.parquet   # one row per I/O (docs/ios-table.md), and DIR/events/...
      ioscope sql "select count(*) from ios" DIR
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export", help="write a capture as blktrace binaries (for blkparse, btt) or Parquet tables",
                       description="Write a capture as a blktrace version 7 binary stream, with process-name "
                                   "notes and the wall-clock timestamp note, that the real blkparse and btt read; "
                                   "or captures as Parquet tables (one row per I/O, and the raw events) for "
                                   "DuckDB, pandas, polars, Spark.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("capture", metavar="CAPTURE", nargs="+", help="an ioscope capture (parquet: one or more)")
    p.add_argument("--format", default="blktrace", choices=("blktrace", "parquet"),
                   help="output format: blktrace (default), or parquet (a directory of Hive-partitioned tables, "
                        "appendable)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output file (a blkparse -d style dump), or directory with --per-cpu or --format parquet")
    p.add_argument("--host", metavar="NAME",
                   help="parquet: the host partition to file the captures under (default: each capture's host)")
    p.add_argument("--per-cpu", action="store_true",
                   help="write blktrace's layout instead: OUT/<disk>.blktrace.<cpu>, one file per disk and CPU")
    outfile.add_force(p)
    p.set_defaults(func=run, tool="export")


def run(args: argparse.Namespace) -> int:
    from ioscope.base.errors import UsageError

    if args.format == "parquet":
        if args.per_cpu:
            raise UsageError("--per-cpu is for --format blktrace", "a parquet export is a directory already")
        from ioscope.engines.query import system_arrow_pool

        system_arrow_pool()
        from ioscope.engines.query.parquet import run as run_parquet

        return run_parquet(args.capture, args.output, args.host, args.force)
    if len(args.capture) > 1:
        raise UsageError("--format blktrace takes one capture", "export each to a file of its own")
    if args.host is not None:
        raise UsageError("--host is for --format parquet", "a blktrace stream has no host field")
    args.capture = args.capture[0]
    from ioscope.tools.export.blktrace import run as run_export

    return run_export(args)
