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
  ioscope sql -r case.ioscope "select op, count(*) from ios group by op"    # -r CAPTURE, as agg -r
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
    p.add_argument("inputs", metavar="INPUT", nargs="*", help="an ioscope capture, or a parquet export directory")
    p.add_argument("-r", "--read", metavar="CAPTURE", action="append", default=[],
                   help="a capture (or parquet export directory) to query, as agg -r; repeatable, the same as INPUT")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_true", help="print CSV (a header line, then the rows)")
    out.add_argument("-j", "--json", action="store_true", help="one JSON object per row")
    p.set_defaults(func=run, tool="sql")


def run(args: argparse.Namespace) -> int:
    from ioscope.engines.query import system_arrow_pool

    system_arrow_pool()
    import re
    import tempfile

    import duckdb

    from ioscope.base.errors import IoscopeError, UsageError
    from ioscope.engines.query.sql import connect, first_line, view_columns
    from ioscope.tools.sql.view import emit

    inputs = [*args.read, *args.inputs]
    if not inputs:
        raise UsageError("no capture to query", "give it after the query or with -r, as agg takes it: "
                         "ioscope sql QUERY case.ioscope, or ioscope sql -r case.ioscope QUERY")
    fmt = "json" if args.json else "csv" if args.csv else "table"
    need_events = re.search(r"\bevents\b", args.query, re.IGNORECASE) is not None
    with tempfile.TemporaryDirectory(prefix="ioscope-sql-") as tmp:
        con = connect(inputs, tmp, need_events)
        try:
            rel = con.sql(args.query)
            if rel is None:   # a statement with no result (set, create view, ...)
                return 0
            fetch = getattr(rel, "to_arrow_table", None) or rel.arrow   # duckdb >= 1.4, before
            tab = fetch()
        except duckdb.Error as exc:
            raise IoscopeError(f"query failed: {first_line(exc)}", f"views: {view_columns(con)}") from None
        emit(tab, fmt)
        con.close()
    return 0
