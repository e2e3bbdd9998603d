"""ioscope readahead: readahead decisions and windows, and what became of the pages read ahead.

The shape every tool has (docs/hacking.md; lib/ioscope/tools/lat/ is the worked example):

collector.py  bpf/readahead.bpf.o, the readers' fd tables and mountinfo (paths), sysfs
              (read_ahead_kb): read() -> RaSample, totals since the start
model.py      pure: RaSample -> RaReport (decisions, windows, page fates, efficiency, per device)
view.py       RaReport -> JSON, rich/plain text (one render path)
cmd.py        the command line: options -> collector -> model -> view, once per interval
"""
