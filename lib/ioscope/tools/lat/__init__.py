"""ioscope lat: block I/O latency histograms (q2c, q2d, d2c), aggregated in the kernel.

The shape every tool has (docs/hacking.md); lat's collector and model are the latency engine's, which the
exporter and the demo share:

engines/latency/collector.py  the lat BPF object, /proc/diskstats: read() -> LatSample, one consistent moment
engines/latency/model.py      pure: LatSample -> LatReport (which histograms, what was lost and why); no I/O
view.py                       LatReport -> JSON, rich/plain text (one render path)
cmd.py                        the command line: options -> collector -> model -> view, once per interval

Nothing is imported here, so that `ioscope lat --help` loads neither numpy nor the BPF loader.
"""
