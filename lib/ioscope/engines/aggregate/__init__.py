"""The aggregation engine: DTrace-style expressions (expr.py) compiled for bpf/agg.bpf.c
(collector.py) or evaluated over a capture (capture.py), into one result (model.py)."""
