"""ioscope readsize: per process, the read sizes the application asked for beside the block I/O it caused.

The shape every tool has (docs/hacking.md; lib/ioscope/tools/lat/ is the worked example); the collector
and the model are engines/procio/'s (fair reads the same BPF object):

engines/procio/collector.py  bpf/readsize.bpf.o: read() -> ReadsizeSample, one consistent moment
engines/procio/model.py      pure: ReadsizeSample -> ReadsizeReport (per process and direction, per disk)
view.py                      ReadsizeReport -> JSON, rich/plain text (one render path)
cmd.py                       the command line: options -> collector -> model -> view, once per interval
"""
