"""ioscope exporter: block I/O latency and per-disk/process counters for Prometheus."""
