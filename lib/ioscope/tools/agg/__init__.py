"""ioscope agg: DTrace-style ad-hoc aggregations of block I/O, in the kernel or over a capture.

expr (the language) -> collector (the agg BPF object, or a capture) -> model (pure) -> view (JSON, rich).
"""
