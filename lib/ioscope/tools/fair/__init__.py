"""ioscope fair: per-process throughput and how evenly it is shared (Jain's index), with likely causes.

The shape every tool has (docs/hacking.md; lib/ioscope/tools/lat/ is the worked example):

collector.py  engines/procio's collector (readsize's BPF object: reads and writes), /proc/diskstats, sysfs
              queue settings and the processes' cgroup I/O limits: sample() -> FairSample
model.py      pure: FairSample -> FairReport (per-process rates, balances, verdicts, likely causes)
view.py       FairReport -> JSON, rich/plain text (one render path)
cmd.py        the command line: options -> collector -> model -> view, once per interval
(the balance math itself is ioscope.base.fairness)
"""
