"""Per-process I/O: bpf/readsize.bpf.c's counts of what processes asked and what the block layer did
(collector.py, model.py); readsize and fair read it."""
