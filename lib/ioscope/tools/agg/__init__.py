"""ioscope agg: DTrace-style ad-hoc aggregations of block I/O, in the kernel or over a capture.

The engine is engines/aggregate/ (the language, the agg BPF object's collector, the evaluation over a
capture, the result); here: cmd.py (the command line), view.py (JSON, rich), bpftrace.py (--bpftrace).
"""
