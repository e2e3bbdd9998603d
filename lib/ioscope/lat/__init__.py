"""ioscope lat: block I/O latency histograms (q2c, q2d, d2c), aggregated in the kernel.

The shape every tool has (docs/hacking.md):

collector.py  the lat BPF object, /proc/diskstats: read() -> LatSample, one consistent moment
model.py      pure: LatSample -> LatReport (which histograms, what was lost and why); no I/O
view.py       LatReport -> JSON, rich/plain text (one render path)
cmd.py        the command line: options -> collector -> model -> view, once per interval
"""

from ioscope.lat.collector import LatCollector, LatOptions, LatSample
from ioscope.lat.model import LatHist, LatReport, build_report

__all__ = ["LatCollector", "LatHist", "LatOptions", "LatReport", "LatSample", "build_report"]
