"""ioscope fleet: the fleet report over parquet exports, one query definition (queries.py) run by DuckDB
(embedded) or Spark (any master): engines.py; the command: cmd.py; a spark-submit entry: ioscope/fleet_spark.py."""
