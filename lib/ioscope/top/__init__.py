"""ioscope top: a live view of busy disks, the processes doing their I/O, and how slow it is.

model.py      pure: begin/end snapshots -> device and process rows (iostat math, percentiles)
collector.py  the top BPF object and /proc/diskstats, read once per refresh
view.py       plain-text, JSON and rich renderings, the heat map and the interactive screen
cmd.py        the command line
"""
