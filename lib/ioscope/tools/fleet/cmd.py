"""ioscope fleet's command line: the fleet report over parquet exports (and captures), by DuckDB or Spark."""

from __future__ import annotations

import argparse

from ioscope.tools import common

EXAMPLES = """\
examples:
  ioscope fleet /shared/exports/incident-42                   # DuckDB, embedded
  ioscope fleet --engine spark --master 'local[4]' DIR        # the same report by Spark
  ioscope fleet --engine spark --master spark://head:7077 hdfs:///exports/incident-42
  ioscope fleet -j -r 5 a.ioscope b.ioscope DIR               # captures too; one JSON object
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fleet", help="the fleet report over parquet exports: per host, disk and op; hosts by p99",
                       description="The fleet report over parquet exports (ioscope export --format parquet) and "
                                   "captures: per host, disk and op the I/Os, bytes, IOPS, MB/s and p50/p99/p99.9 "
                                   "of q2c and d2c; the top processes per host; the hosts ranked by q2c p99. One "
                                   "query definition, run by DuckDB (embedded, the default) or Spark (any master), "
                                   "with the same results.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", metavar="INPUT", nargs="+", help="a parquet export directory, or a capture")
    p.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb", help="the engine (default duckdb)")
    p.add_argument("--master", default="local[*]", metavar="URL",
                   help="Spark's master with --engine spark (default local[*]; spark://HOST:7077, yarn, ...)")
    common.add_rows(p, what="processes per host", default=5)
    common.add_json(p)
    p.set_defaults(func=run, tool="fleet")


def run(args: argparse.Namespace) -> int:
    import tempfile

    from ioscope.tools.fleet import engines
    from ioscope.tools.fleet.model import build
    from ioscope.tools.fleet.queries import queries
    from ioscope.tools.fleet.view import renderables, to_json

    qs = queries(args.rows)
    with tempfile.TemporaryDirectory(prefix="ioscope-fleet-") as tmp:
        if args.engine == "spark":
            rows = engines.run_spark(args.inputs, tmp, qs, args.master)
        else:
            rows = engines.run_duckdb(args.inputs, tmp, qs)
    common.print_result("fleet", build(args.engine, rows), args.json, to_json, renderables)
    return 0


__all__ = ["add_parser", "run"]
