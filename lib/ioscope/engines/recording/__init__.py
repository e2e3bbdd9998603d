"""The live recorder: bpf/record.bpf.c's rings -> event arrays (recorder.py); record, snoop, collect
and the flight recorder use it."""
