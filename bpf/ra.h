/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Structs shared by readsize.bpf.c / readahead.bpf.c and lib/ioscope/engines/procio/abi.py
 * (ioscope readsize, readahead and fair). Fixed width, largest first, no
 * hidden padding; tests/test_abi.py compares them with the numpy dtypes (their BTF) and
 * tests/test_ra_unit.py the constants.
 */
#ifndef IOSCOPE_RA_H
#define IOSCOPE_RA_H

#include "ioscope.h"

/* --- readsize / fair: per process, per direction ---------------------- */

enum rs_op {
	RS_OP_READ = 0,
	RS_OP_WRITE = 1,
};

struct rs_key {
	__u32 tgid;
	__u32 op; /* enum rs_op */
};

struct rs_val {
	struct hist app_req; /* sizes the application asked for (syscall argument) */
	struct hist app_ret; /* sizes returned (>= 0) */
	struct hist dev;     /* block I/O queued by this process: bio sizes */
	__u64 app_errors;    /* syscalls that returned an error */
	__u64 app_short;     /* returned less than asked (EOF, partial) */
	__u64 ra_count;      /* bios flagged REQ_RAHEAD */
	__u64 ra_bytes;
	char comm[16];
	__u64 cgroup;        /* its cgroup (io controller's hierarchy), read at its first I/O of the interval in
			      * its own context, with targ_proc_cgroup; 0: not read */
};

/* fair's groups: bytes per process, direction and device (filled only when targ_per_disk is set). dev is
 * the file's filesystem (s_dev, a partition or a disk) for syscalls, the disk for bios. */
struct rs_disk_key {
	__u32 tgid;
	__u32 op; /* enum rs_op */
	__u32 dev;
};

struct rs_disk_val {
	__u64 app_bytes; /* returned by read/write syscalls and async requests on files of dev */
	__u64 dev_bytes; /* bios queued on dev */
	__u64 ra_bytes;  /* of which readahead (REQ_RAHEAD) */
	__u64 app_count; /* the reads/writes (syscalls, async requests) that returned app_bytes */
};

/* Requests as issued to the driver, per disk and direction (after merges and splits). */
struct rs_rq_key {
	__u32 dev;
	__u32 op; /* enum rs_op */
};

/* A read/write syscall between entry and exit, keyed by thread id. */
struct rs_inflight {
	__u64 req;
	__u32 op;
	__u32 dev; /* the file's device (s_dev or i_rdev) */
};

/* Async I/O between submission and completion (libaio's iocbs, io_uring's requests), keyed by
 * kind and two words: libaio {iocb user address, tgid}; io_uring {struct io_kiocb *, 0} where the
 * completion tracepoint passes the request, else {ring ctx, user_data} (5.10). */
enum rs_async_kind {
	RS_ASYNC_AIO = 1,
	RS_ASYNC_URING = 2,
};

struct rs_async_key {
	__u64 a;
	__u64 b;
	__u32 kind; /* enum rs_async_kind */
	__u32 pad;
};

struct rs_async {
	char comm[16]; /* the submitter's: a completion may run in another context */
	__u64 req;     /* bytes asked for */
	__u32 tgid;    /* the submitter's */
	__u32 op;      /* enum rs_op */
	__u32 dev;     /* the file's device; 0: not known at submission (io_uring 6.1+: at completion) */
	__u32 pad;
};

/* The process whose readahead last touched a file (for bios a kernel thread queues). */
struct rs_owner {
	char comm[16];
	__u32 tgid;
	__u32 pad;
};

enum rs_stat_idx {
	RS_LOST_PROC_FULL = 0,     /* per-process map full: value dropped */
	RS_LOST_INFLIGHT_FULL = 1, /* syscall entry not remembered: syscall not counted */
	RS_LOST_AIO = 2,           /* libaio iocbs/events not read (past the batch, or not resident): not counted */
	RS_STAT_IOV_TRUNC = 3,     /* readv with more iovecs than summed: request size is a lower bound */
	RS_STAT_KTHREAD_OWNER = 4, /* read bios queued by a kernel thread, given to the file's reader */
	RS_STAT_ASYNC_UNSEEN = 5,  /* an io_uring read/write completed whose submission was not seen (before the start; 6.1+) */
	RS_NR_STATS = 6,
};
#define RS_NR_LOST_STATS 3

/* --- readahead ----------------------------------------------------------- */

enum ra_kind {
	RA_KIND_SYNC = 0,  /* page_cache_sync_ra: a read missed the cache */
	RA_KIND_ASYNC = 1, /* page_cache_async_ra: a read hit the PG_readahead mark */
	RA_KIND_OTHER = 2, /* a window with no sync/async decision: mmap read-around, fadvise, readahead(2) */
	RA_NR_KINDS = 3,
};

/* The hists array: per kind, window size / async_size / ra_pages (pages). */
enum ra_hist_idx {
	RA_H_SIZE = 0,      /* + kind * RA_H_PER_KIND */
	RA_H_ASYNC = 1,
	RA_H_RA_PAGES = 2,
	RA_H_PER_KIND = 3,
	RA_H_AGE = 9,       /* ns from page added by readahead to first read of it */
	RA_H_REQ = 10,      /* req_count (pages the triggering read asked for) of sync decisions */
	RA_NR_HISTS = 11,
};

struct ra_key {
	__u64 ino;
	__u32 dev;  /* the filesystem's s_dev, kernel encoding */
	__u32 tgid; /* the process that read ahead */
};

struct ra_stats {
	__u64 decisions[RA_NR_KINDS];
	__u64 window_pages[RA_NR_KINDS]; /* sum of window sizes */
	__u64 max_ra_pages;              /* largest ra->ra_pages seen (the per-file limit) */
	__u64 max_window;                /* largest window size seen */
	__u64 pages;                     /* pages added to the cache inside a readahead window */
	__u64 used;                      /* of those: asked for by a later read */
	__u64 wasted;                    /* of those: removed from the cache never asked for */
	__u64 untracked;                 /* of those: not tracked (page map full) */
};

struct ra_file {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

struct ra_page_key {
	__u64 ino;
	__u64 index;
	__u32 dev;
	__u32 pad;
};

struct ra_page {
	__u64 added_ns;
	__u32 tgid;
	__u32 pad;
};

/* What one thread is doing in the readahead code right now. */
struct ra_task {
	__u64 ino;
	__u64 win_start; /* page index range of the current window */
	__u64 win_end;
	__u32 dev;
	__u8 pending;    /* a sync/async decision waits for its window */
	__u8 kind;       /* enum ra_kind of the pending decision */
	__u8 has_win;
	__u8 pad;
};

enum ra_stat_idx {
	RA_LOST_PAGE_FULL = 0,  /* page map full: page counted in 'untracked' */
	RA_LOST_FILE_FULL = 1,  /* per-file map full: counters dropped */
	RA_LOST_TASK_FULL = 2,  /* per-thread map full: window not seen */
	RA_LOST_RANGE = 3,      /* read range longer than walked: use may be missed */
	RA_NR_STATS = 4,
};

#endif /* IOSCOPE_RA_H */
