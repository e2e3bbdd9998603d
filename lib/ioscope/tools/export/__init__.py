"""ioscope export: a capture as blktrace files (blktrace.py) or Parquet tables (parquet.py)."""
