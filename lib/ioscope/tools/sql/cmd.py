"""ioscope sql's command line: its options and help. The implementation (ioscope.engines.query.sql: DuckDB, pyarrow)
is imported when the command runs, not for --help."""

from __future__ import annotations

import argparse

EXAMPLES = """\
examples:
  ioscope sql "select comm, count(*) n, quantile_cont(q2c, 0.99)/1e6 p99_ms
               from ios group by comm order by n desc" case.ioscope
  ioscope sql "select host, disk, op, count(*) from ios group by all" DIR    # a parquet export
  ioscope sql --csv "select * from ios where q2c > 100e6" a.ioscope b.ioscope DIR
  ioscope sql -j "select action, count(*) n from events group by action" case.ioscope
  ioscope sql "describe ios" case.ioscope                                   # the views' columns
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sql", help="SQL (DuckDB, embedded) over captures and parquet exports: views ios, events, "
                                   "procs, devices",
                       description="Run one SQL query (DuckDB's dialect, embedded: no server) over captures and "
                                   "parquet export directories (ioscope export --format parquet). Views: ios (one "
                                   "row per I/O, docs/ios-table.md), events (the raw block events), procs and "
                                   "devices (per process and per disk summaries of ios). Captures are turned "
                                   "into the tables on the fly.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("query", metavar="QUERY", help="one SQL statement")
    p.add_argument("inputs", metavar="INPUT", nargs="+", help="an ioscope capture, or a parquet export directory")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="print CSV (a header line, then the rows)")
    out.add_argument("-j", "--json", action="store_true", help="one JSON object per row")
    p.set_defaults(func=run, tool="sql")


def run(args: argparse.Namespace) -> int:
    from ioscope.tools.export.cmd import system_arrow_pool

    system_arrow_pool()
    from ioscope.engines.query.sql import run as run_sql

    return run_sql(args)
