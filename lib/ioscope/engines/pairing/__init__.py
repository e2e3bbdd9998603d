"""The pairing engine: block events -> I/Os (btt's analysis and the per-I/O table)."""
