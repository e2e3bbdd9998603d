"""The fleet report's engines: each takes the inputs (captures, parquet export directories) and the queries,
and returns every query's rows as dicts. DuckDB runs embedded; Spark on any master (`local[*]`, a cluster's
`spark://host:7077`, `yarn`). Captures are exported to Parquet first (the same code as `ioscope export
--format parquet`), so both engines read the same files."""

from __future__ import annotations

import os
from typing import Any

from ioscope.base.errors import IoscopeError

Rows = dict[str, list[dict[str, Any]]]


def run_duckdb(inputs: list[str], tmp: str, queries: dict[str, str]) -> Rows:
    import duckdb

    from ioscope.engines.query.sql import connect, first_line

    con = connect(inputs, tmp, need_events=False)
    out: Rows = {}
    try:
        for name, q in queries.items():
            try:
                cur = con.execute(q)
                cols = [d[0] for d in cur.description]
                out[name] = [dict(zip(cols, r)) for r in cur.fetchall()]
            except duckdb.Error as exc:
                raise IoscopeError(f"fleet query {name} failed in DuckDB: {first_line(exc)}") from None
    finally:
        con.close()
    return out


def run_spark(inputs: list[str], tmp: str, queries: dict[str, str], master: str) -> Rows:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise IoscopeError("--engine spark needs pyspark, which is not installed",
                           "pip install pyspark (and a Java 17 runtime: apt install openjdk-17-jre-headless)") from None
    from ioscope.engines.query.sql import inputs_as_dirs, parquet_files

    dirs = inputs_as_dirs(inputs, tmp, need_events=False)
    builder = SparkSession.builder.appName("ioscope fleet")
    if master:   # "" under spark-submit: the master it was given
        builder = builder.master(master)
    spark = (builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        spark.sparkContext.setLogLevel("ERROR")
        frames = []
        for d in dirs:
            files = parquet_files(d, "ios")
            if files:   # host= partitions discovered under the table's directory
                frames.append(spark.read.option("basePath", os.path.join(d, "ios"))
                              .option("mergeSchema", "true").parquet(*files))
        if not frames:
            raise IoscopeError("no I/O in the inputs: their ios tables are empty")
        df = frames[0]
        for f in frames[1:]:
            df = df.unionByName(f, allowMissingColumns=True)
        df.createOrReplaceTempView("ios")
        out: Rows = {}
        for name, q in queries.items():
            out[name] = [r.asDict() for r in spark.sql(q).collect()]
        return out
    finally:
        spark.stop()
