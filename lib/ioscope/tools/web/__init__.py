"""ioscope web: a local page with the live latency heat map of the last minutes, fed by agg's in-kernel
aggregations (docs/web.md)."""
