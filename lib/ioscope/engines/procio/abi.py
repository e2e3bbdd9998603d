"""numpy mirrors of bpf/ra.h (tests/test_abi.py checks them against the objects' BTF)."""

from __future__ import annotations

import numpy as np

from ioscope.kernel.abi import HIST

# enum rs_op
RS_OP_READ, RS_OP_WRITE = 0, 1
RS_OP_NAMES = {RS_OP_READ: "read", RS_OP_WRITE: "write"}

# enum rs_stat_idx
RS_STAT_NAMES = {0: "proc_map_full", 1: "inflight_map_full", 2: "aio_not_read", 3: "iov_truncated",
                 4: "kthread_bios_to_reader", 5: "async_submission_unseen"}
RS_NR_STATS = 6
RS_NR_LOST_STATS = 3

RS_KEY = np.dtype([("tgid", np.uint32), ("op", np.uint32)])

RS_VAL = np.dtype([
    ("app_req", HIST),
    ("app_ret", HIST),
    ("dev", HIST),
    ("app_errors", np.uint64),
    ("app_short", np.uint64),
    ("ra_count", np.uint64),
    ("ra_bytes", np.uint64),
    ("comm", "S16"),
    ("cgroup", np.uint64),
])

RS_DISK_KEY = np.dtype([("tgid", np.uint32), ("op", np.uint32), ("dev", np.uint32)])
RS_DISK_VAL = np.dtype([("app_bytes", np.uint64), ("dev_bytes", np.uint64), ("ra_bytes", np.uint64),
                        ("app_count", np.uint64)])

# enum rs_async_kind
RS_ASYNC_AIO, RS_ASYNC_URING = 1, 2
RS_ASYNC_KEY = np.dtype([("a", np.uint64), ("b", np.uint64), ("kind", np.uint32), ("pad", np.uint32)])
RS_ASYNC = np.dtype([("comm", "S16"), ("req", np.uint64), ("tgid", np.uint32), ("op", np.uint32), ("dev", np.uint32),
                     ("pad", np.uint32)])

RS_INFLIGHT = np.dtype([("req", np.uint64), ("op", np.uint32), ("dev", np.uint32)])
RS_RQ_KEY = np.dtype([("dev", np.uint32), ("op", np.uint32)])
RS_OWNER = np.dtype([("comm", "S16"), ("tgid", np.uint32), ("pad", np.uint32)])

# enum ra_kind
RA_KIND_NAMES = {0: "sync", 1: "async", 2: "other"}
RA_NR_KINDS = 3
# enum ra_hist_idx
RA_H_SIZE, RA_H_ASYNC, RA_H_RA_PAGES, RA_H_PER_KIND = 0, 1, 2, 3
RA_H_AGE, RA_H_REQ, RA_NR_HISTS = 9, 10, 11

RA_STAT_NAMES = {0: "page_map_full", 1: "file_map_full", 2: "task_map_full", 3: "read_range_truncated"}
RA_NR_STATS = 4

RA_KEY = np.dtype([("ino", np.uint64), ("dev", np.uint32), ("tgid", np.uint32)])

RA_STATS = np.dtype([
    ("decisions", np.uint64, (RA_NR_KINDS,)),
    ("window_pages", np.uint64, (RA_NR_KINDS,)),
    ("max_ra_pages", np.uint64),
    ("max_window", np.uint64),
    ("pages", np.uint64),
    ("used", np.uint64),
    ("wasted", np.uint64),
    ("untracked", np.uint64),
])

RA_FILE = np.dtype([("ino", np.uint64), ("dev", np.uint32), ("pad", np.uint32)])
RA_PAGE_KEY = np.dtype([("ino", np.uint64), ("index", np.uint64), ("dev", np.uint32), ("pad", np.uint32)])
RA_PAGE = np.dtype([("added_ns", np.uint64), ("tgid", np.uint32), ("pad", np.uint32)])
RA_TASK = np.dtype([
    ("ino", np.uint64), ("win_start", np.uint64), ("win_end", np.uint64), ("dev", np.uint32),
    ("pending", np.uint8), ("kind", np.uint8), ("has_win", np.uint8), ("pad", np.uint8),
])

# C struct name -> (object, dtype), for the ABI test
STRUCTS = {
    "rs_key": RS_KEY, "rs_val": RS_VAL, "rs_inflight": RS_INFLIGHT, "rs_owner": RS_OWNER, "rs_rq_key": RS_RQ_KEY,
    "rs_async_key": RS_ASYNC_KEY, "rs_async": RS_ASYNC, "rs_disk_key": RS_DISK_KEY, "rs_disk_val": RS_DISK_VAL,
    "ra_key": RA_KEY, "ra_stats": RA_STATS, "ra_file": RA_FILE, "ra_page_key": RA_PAGE_KEY, "ra_page": RA_PAGE,
    "ra_task": RA_TASK,
}   # readahead's names map holds agg's struct agg_file (bpf/fname.bpf.h): mirrored once, in aggregate/abi.py

# The syscalls readsize's programs filter on by number (nr_<name> in bpf/readsize.bpf.c; their numbers per
# architecture: base/syscalls.py)
RS_SYSCALLS = ("read", "pread64", "readv", "preadv", "preadv2", "write", "pwrite64", "writev", "pwritev",
               "pwritev2", "io_submit", "io_getevents", "io_pgetevents")
