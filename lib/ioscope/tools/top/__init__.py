"""ioscope top: a live view of busy disks, the processes doing their I/O, and how slow it is.

model.py      pure: begin/end snapshots -> device and process rows (iostat math, percentiles)
collector.py  the top BPF object and /proc/diskstats, read once per refresh
view.py       plain-text, JSON and rich renderings, the heat map and the interactive screen
cmd.py        the command line
"""

# The process table's sort columns: here, not in model.py, so that `ioscope top --help` needs no numpy.
PROC_SORT_KEYS = ("pid", "comm", "disk", "cgroup", "r_s", "w_s", "rkB_s", "wkB_s", "avg_kB", "avg_ms", "p99_ms",
                  "swapin_pct", "io_pct")
