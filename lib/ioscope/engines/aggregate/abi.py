"""numpy mirrors of bpf/agg.h (tests/test_abi.py compares them with the compiled object's BTF)."""

from __future__ import annotations

import numpy as np

MAX_EXPRS = 8
MAX_INSNS = 64
NR_KEYS = 11
STACK_DEPTH = 127
FILE_DEPTH = 8
FILE_NAME = 32

# enum agg_field: the first NR_KEYS are the kernel's keys (comm is keyed by tgid, named in user space)
FIELDS = {
    "disk": 0, "op": 1, "flags": 2, "pid": 3, "tgid": 4, "cgroup": 5, "cpu": 6, "size": 7, "kstack": 8,
    "file": 9, "ustack": 10, "bytes": 11, "q2c": 12, "q2d": 13, "d2c": 14, "seek": 15, "inflight": 16,
    "throttle": 17, "comm0": 18, "comm1": 19, "iowait": 20, "swapin": 21,
}
NR_FIELDS = 22
VALUE_COUNT = NR_FIELDS  # agg_expr.value of count()
KEY_FIELD = {"disk": "disk", "op": "op", "flags": "flags", "comm": "tgid", "pid": "pid", "tgid": "tgid",
             "cgroup": "cgroup", "cpu": "cpu", "size": "size", "kstack": "kstack", "file": "file",
             "ustack": "ustack"}

# enum agg_kind
K_SCALAR, K_LOGLIN, K_LINEAR = 0, 1, 2

# enum agg_source: what an expression is answered from
SRC_IO, SRC_WAIT = 0, 1

# enum agg_stat_idx (after ioscope.h's enum ios_stat_idx)
STAT_NAMES = {11: "agg_map_full", 12: "queue_details_lost", 13: "stack_lost"}
LOSS_STATS = ("agg_map_full", "stack_lost")

INSN = np.dtype([
    ("imm", np.uint64),
    ("op", np.uint8),
    ("field", np.uint8),
    ("cmp", np.uint8),
    ("pad", np.uint8, (5,)),
])

EXPR = np.dtype([
    ("lq_low", np.uint64),
    ("lq_step", np.uint64),
    ("lq_n", np.uint32),
    ("key_mask", np.uint32),
    ("kind", np.uint8),
    ("value", np.uint8),
    ("insn_start", np.uint8),
    ("ninsns", np.uint8),
    ("source", np.uint8),
    ("pad", np.uint8, (3,)),
])

KEY = np.dtype([
    ("k", np.uint64, (NR_KEYS,)),
    ("expr", np.uint32),
    ("pad", np.uint32),
])

VAL = np.dtype([
    ("count", np.uint64),
    ("sum", np.uint64),
    ("max", np.uint64),
    ("min_inv", np.uint64),
    ("sq_lo", np.uint64),
    ("sq_hi", np.uint64),
])

REC = np.dtype([
    ("f", np.uint64, (NR_FIELDS,)),
    ("have", np.uint32),
    ("pad", np.uint32),
])

EXTRA = np.dtype([
    ("bio", np.uint64),
    ("q_ns", np.uint64),
    ("cgroup", np.uint64),
    ("seek", np.uint64),
    ("inflight", np.uint64),
    ("file", np.uint64),
    ("throttle", np.uint64),
    ("pid", np.uint32),
    ("cpu", np.uint32),
    ("have", np.uint32),
    ("kstack", np.int32),
    ("ustack", np.int32),
    ("cg_out", np.uint32),
])

FILE = np.dtype([
    ("ino", np.uint64),
    ("dev", np.uint32),
    ("depth", np.uint32),
    ("comp", "S32", (FILE_DEPTH,)),
])

DISK = np.dtype([
    ("inflight", np.int64),
    ("last_end", np.uint64),
])

RQ = np.dtype([
    ("d_ns", np.uint64),
    ("inflight", np.uint64),
])

STRUCTS = {"agg_insn": INSN, "agg_expr": EXPR, "agg_key": KEY, "agg_val": VAL, "agg_rec": REC,
           "agg_extra": EXTRA, "agg_disk": DISK, "agg_rq": RQ, "agg_file": FILE}
