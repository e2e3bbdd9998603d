"""ioscope sql: SQL over captures and Parquet exports."""
