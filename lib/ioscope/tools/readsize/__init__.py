"""ioscope readsize: per process, the read sizes the application asked for beside the block I/O it caused.

The shape every tool has (docs/hacking.md; lib/ioscope/tools/lat/ is the worked example):

collector.py  bpf/readsize.bpf.o (also fair's): read() -> ReadsizeSample, one consistent moment
model.py      pure: ReadsizeSample -> ReadsizeReport (per process and direction, per disk); no I/O
view.py       ReadsizeReport -> JSON, rich/plain text (one render path)
cmd.py        the command line: options -> collector -> model -> view, once per interval

cmd's add_parser and run are re-exported for cli.TOOLS ("ioscope.tools.readsize"); cmd imports
neither numpy nor the BPF loader until it runs.
"""

from ioscope.tools.readsize.cmd import add_parser, run

__all__ = ["add_parser", "run"]
