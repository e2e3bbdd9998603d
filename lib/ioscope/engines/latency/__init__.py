"""The latency engine: bpf/lat.bpf.c's histograms (collector.py) and their report (model.py)."""
