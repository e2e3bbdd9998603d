"""ioscope report's command line: its options and help. The implementation (ioscope.tools.report.view, with
numpy) is imported when the command runs, not for --help."""

from __future__ import annotations

import argparse

from ioscope.engines.pages import cmd as pages_cmd

EXAMPLES = """\
examples:
  ioscope report trace.ioscope                 # btt's tables, percentiles, heat map
  ioscope report --json trace.ioscope          # the same numbers as one JSON document
  ioscope report --btt trace.ioscope           # only btt's default sections, in btt's layout
  ioscope report --d2c-csv d2c.csv trace.ioscope   # per-I/O D2C latencies as CSV
  ioscope report --explain 5 trace.ioscope     # the 5 slowest I/Os, each with why it was slow
  ioscope report sda.blktrace.0                # blktrace files work too
  ioscope report --html trace.html trace.ioscope   # heat maps and the other pictures as one page
  ioscope report --svg pics/ trace.ioscope     # each picture as pics/NAME.svg (--png: .png)
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="btt-style latency breakdown of a capture (Q2C, D2C, ...), percentiles",
                       description="Break a capture's block I/O latency down like btt does (Q2Q, Q2G, G2I, Q2M, "
                                   "I2D, M2D, D2C, Q2C; merges, seeks, plugs, active periods, per process and "
                                   "per device), with percentiles, a latency heat map and an iostat-like table. "
                                   "Streams the capture: memory does not grow with its size.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("capture", metavar="CAPTURE", help="an ioscope capture, or blktrace binaries")
    p.add_argument("-j", "--json", action="store_true", help="print one JSON document (seconds)")
    p.add_argument("--btt", action="store_true", help="print only btt's default sections, in btt's layout")
    p.add_argument("-i", "--interval", type=float, default=1.0, metavar="SECONDS",
                   help="iostat table interval (default 1 s)")
    p.add_argument("--d2c-csv", metavar="FILE",
                   help="write every I/O's D2C latency as CSV, from ioscope's corrected pairing (each "
                        "piece of a split bio its own I/O); btt's own rows: ioscope btt -l")
    p.add_argument("--q2c-csv", metavar="FILE",
                   help="write every I/O's Q2C latency as CSV, from ioscope's corrected pairing (each "
                        "piece of a split bio its own I/O); btt's own rows: ioscope btt -q")
    p.add_argument("--q2d-csv", metavar="FILE",
                   help="write every I/O's Q2D latency as CSV, from ioscope's corrected pairing (each "
                        "piece of a split bio its own I/O); btt's own rows: ioscope btt -z")
    p.add_argument("--explain", type=int, metavar="N",
                   help="print only the N slowest I/Os (by Q2C), each with the reasons it took that long in "
                        "the order they cost: tag wait, queue and scheduler, the device against its usual "
                        "time, flushes in flight, requeues, limits; with -j as JSON")
    pages_cmd.add_arguments(p)
    p.set_defaults(func=run, tool="report")


def run(args: argparse.Namespace) -> int:
    from ioscope.tools.report.view import run as run_report

    if args.explain is not None:
        from ioscope.tools.report.view import run_explain
        return run_explain(args)

    if pages_cmd.wanted(args):   # the pictures; the text or JSON too only when asked for as well
        pages_cmd.run_report(args)
        if not (args.json or args.btt or args.d2c_csv or args.q2c_csv or args.q2d_csv):
            return 0

    return run_report(args)
