"""numpy mirrors of the structs in bpf/ioscope.h.

tests/test_abi.py checks every dtype here against the BTF of the compiled
objects, and the constants against the header, so the two sides cannot drift.
"""

from __future__ import annotations

import numpy as np

from ioscope.base import hist
from ioscope.base.fmt import comm_str

# enum ios_lat_phase
from ioscope.base.phases import NR_PHASES as NR_PHASES
from ioscope.base.phases import PHASE_D2C as PHASE_D2C
from ioscope.base.phases import PHASE_NAMES as PHASE_NAMES
from ioscope.base.phases import PHASE_Q2C as PHASE_Q2C
from ioscope.base.phases import PHASE_Q2D as PHASE_Q2D
from ioscope.base.phases import PHASES as PHASES

# enum ios_io_op
OP_READ, OP_WRITE, OP_DISCARD, OP_FLUSH, OP_OTHER, OP_ALL = 0, 1, 2, 3, 4, 255
OP_NAMES = {OP_READ: "read", OP_WRITE: "write", OP_DISCARD: "discard", OP_FLUSH: "flush", OP_OTHER: "other",
            OP_ALL: "all"}

# enum ios_stat_idx
STAT_NAMES = {
    0: "start_map_full",
    1: "hist_map_full",
    2: "bio_chain_too_long",
    3: "rq_map_full",
    4: "completion_unseen",
    5: "inflight_at_start",
    6: "split",
    7: "stale",
    8: "queued_never_issued",
    9: "requeued_after_split",
    10: "completed_without_start",
    14: "one_clock_reading",
    15: "not_stamped",
    16: "iowait_map_full",
    17: "iowait_wake_unseen",
}
NR_STATS = 18
NR_LOST_STATS = 5

HIST = np.dtype([
    ("slots", np.uint64, (hist.NBUCKETS,)),
    ("count", np.uint64),
    ("sum", np.uint64),
    ("max", np.uint64),
    ("min_inv", np.uint64),
])

LAT_KEY = np.dtype([
    ("cgroup", np.uint64),
    ("dev", np.uint32),
    ("pid", np.uint32),
    ("op", np.uint8),
    ("pad", np.uint8, (7,)),
])

LAT_VAL = np.dtype([("ph", HIST, (3,))])

BIO_START = np.dtype([
    ("q_ns", np.uint64),
    ("d_ns", np.uint64),
    ("tgid", np.uint32),
    ("dev", np.uint32),
])

# ioscope top (bpf/top.bpf.c)
TOP_PROC_KEY = np.dtype([
    ("cgroup", np.uint64),
    ("tgid", np.uint32),
    ("dev", np.uint32),
    ("op", np.uint8),
    ("pad", np.uint8, (7,)),
])

TOP_PROC_VAL = np.dtype([
    ("ios", np.uint64),
    ("bytes", np.uint64),
    ("lat", HIST),
])

BIO_SLOT = np.dtype([
    ("bio", np.uint64),
    ("q_ns", np.uint64),
    ("d_ns", np.uint64),
    ("tgid", np.uint32),
    ("dev", np.uint32),
])

TOP_DISK_KEY = np.dtype([
    ("dev", np.uint32),
    ("op", np.uint8),
    ("pad", np.uint8, (3,)),
])

THROTTLE_KEY = np.dtype([
    ("cgroup", np.uint64),
    ("dev", np.uint32),
    ("tgid", np.uint32),
    ("comm", "S16"),
])

THROTTLE_VAL = np.dtype([
    ("held", np.uint64),
    ("wait", HIST),
])

THROTTLE_NOTE = np.dtype([
    ("ts", np.uint64),
    ("pid", np.uint32),
    ("tgid", np.uint32),
    ("comm", "S16"),
])

# C struct name -> dtype, for the ABI test
# bpf/iowait.bpf.h: a thread's I/O wait in progress, and its ended waits (keyed by thread id)
IOWAIT_START = np.dtype([
    ("ns", np.uint64),
    ("nvcsw", np.uint64),
    ("cgroup", np.uint64),
    ("tgid", np.uint32),
    ("kstack", np.int32),
    ("ustack", np.int32),
    ("delayed", np.uint32),
    ("swapin", np.uint32),
    ("_pad", np.uint32),
])

IOWAIT_VAL = np.dtype([
    ("ns", np.uint64),
    ("waits", np.uint64),
    ("cgroup", np.uint64),
    ("delayed_ns", np.uint64),
    ("delayed", np.uint32),
    ("tgid", np.uint32),
    ("swapin_ns", np.uint64),
    ("swapins", np.uint64),
])

STRUCTS = {"hist": HIST, "lat_key": LAT_KEY, "lat_val": LAT_VAL, "bio_start": BIO_START,
           "top_proc_key": TOP_PROC_KEY, "top_proc_val": TOP_PROC_VAL, "top_disk_key": TOP_DISK_KEY,
           "bio_slot": BIO_SLOT, "throttle_key": THROTTLE_KEY, "throttle_val": THROTTLE_VAL,
           "throttle_note": THROTTLE_NOTE, "iowait_start": IOWAIT_START, "iowait_val": IOWAIT_VAL}


def combine_percpu_hists(raw: bytes, n: int, ncpus: int, per_value: int = 1) -> np.ndarray:
    """Per-CPU values of n keys, each per_value HISTs -> shape (n, per_value) of HIST records:
    counters summed over CPUs, max and min_inv maxed."""
    per = np.frombuffer(raw, dtype=HIST, count=n * ncpus * per_value).reshape(n, ncpus, per_value)
    out = np.zeros((n, per_value), dtype=HIST)
    for name in ("slots", "count", "sum"):
        out[name] = per[name].sum(axis=1, dtype=np.uint64)
    for name in ("max", "min_inv"):
        out[name] = per[name].max(axis=1)
    return out


def hists_from_array(arr: np.ndarray) -> list[hist.Hist]:
    """Turn an array of HIST records (summed over CPUs) into Hist objects."""
    out = []
    for rec in arr:
        count = int(rec["count"])
        out.append(hist.Hist(
            counts=rec["slots"].astype(np.uint64),
            count=count,
            total=int(rec["sum"]),
            min=int(~np.uint64(rec["min_inv"])) if count else 0,
            max=int(rec["max"]),
        ))
    return out


def comms_from_dump(keys: bytes, vals: bytes, n: int) -> dict[int, str]:
    """A `comms` map (u32 tgid -> char[16], bpf/comms.bpf.h) as dumped -> {tgid: name}."""
    pids = np.frombuffer(keys, dtype=np.uint32, count=n)
    raw = np.frombuffer(vals, dtype="S16", count=n)
    return {int(p): comm_str(c) for p, c in zip(pids.tolist(), raw.tolist())}
