"""SQL over captures and Parquet exports (DuckDB): the views ios, events, procs, devices."""
