"""numpy mirrors of bpf/fileslower.h (the structs fileslower's object shares with user space), checked
against the object's BTF by tests/test_abi.py (registry.ABI_MIRRORS)."""

from __future__ import annotations

import numpy as np

from ioscope.engines.aggregate.abi import FILE as FILE
from ioscope.tools.fileslower.calls import CALLS as CALLS

# enum fs_stat_idx (after ioscope.h's enum ios_stat_idx, whose names kernel/abi.py has)
STAT_NAMES = {
    18: "events_lost_ring_full",
    19: "calls_map_full",
    20: "bios_map_full",
    21: "exit_of_another_call",
}
NR_STATS = 22
LOSSES = ("events_lost_ring_full", "calls_map_full", "bios_map_full")

STATE = np.dtype([
    ("start_ns", np.uint64),
    ("inode", np.uint64),
    ("ino", np.uint64),
    ("cgroup", np.uint64),
    ("iowait_ns", np.uint64),
    ("offcpu_ns", np.uint64),
    ("runq_ns", np.uint64),
    ("off_ns", np.uint64),
    ("dev_ns", np.uint64),
    ("rbytes", np.uint64),
    ("wbytes", np.uint64),
    ("dev", np.uint32),
    ("call", np.uint32),
    ("rbios", np.uint32),
    ("wbios", np.uint32),
    ("flushes", np.uint32),
    ("fua", np.uint32),
    ("sync", np.uint32),
    ("bios_done", np.uint32),
    ("iowaits", np.uint32),
    ("preempted", np.uint32),
    ("obios", np.uint32),
    ("pad", np.uint32),
])

EVENT = np.dtype([
    ("s", STATE),
    ("ret", np.int64),
    ("end_ns", np.uint64),
    ("tid", np.uint32),
    ("tgid", np.uint32),
    ("comm", "S16"),
    ("file", FILE),
])

BIO = np.dtype([
    ("call_start", np.uint64),
    ("q_ns", np.uint64),
    ("tid", np.uint32),
    ("pad", np.uint32),
])

HIST_KEY = np.dtype([
    ("cgroup", np.uint64),
    ("ino", np.uint64),
    ("dev", np.uint32),
    ("tgid", np.uint32),
    ("call", np.uint32),
    ("pad", np.uint32),
])

FILE_KEY = np.dtype([
    ("ino", np.uint64),
    ("dev", np.uint32),
    ("pad", np.uint32),
])

STRUCTS = {"fs_state": STATE, "fs_event": EVENT, "fs_bio": BIO, "fs_hist_key": HIST_KEY, "fs_file_key": FILE_KEY}
