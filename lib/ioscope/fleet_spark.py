"""The fleet report as a Spark application, for spark-submit on a real cluster (docs/fleet.md):

    spark-submit --master spark://HOST:7077 \
        "$(python3 -c 'import ioscope.fleet_spark as m; print(m.__file__)')" \
        /shared/exports/incident-42 [--top N] [-j]

Only the driver needs ioscope (the queries are plain SQL: executors run no Python of ioscope's); the export
directory must be readable by every executor (HDFS, S3, NFS: any path Spark reads)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from ioscope.cli import main as cli_main

    args = list(sys.argv[1:] if argv is None else argv)
    # the master is spark-submit's (--master given to it): "" tells fleet to take the session's
    return cli_main(["fleet", "--engine", "spark", "--master", "", *args])


if __name__ == "__main__":
    sys.exit(main())
