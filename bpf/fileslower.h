/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ioscope fileslower (bpf/fileslower.bpf.c): the structs and constants its object shares with user
 * space; lib/ioscope/tools/fileslower/abi.py mirrors them (tests/test_abi.py checks them against the
 * object's BTF).
 */
#ifndef FILESLOWER_H
#define FILESLOWER_H

#include "ioscope.h"
#include "agg.h" /* struct agg_file: a file's name as fname.bpf.h reads it */

/* The system calls followed; user space names them in this order (calls.py CALLS) and marks their numbers
 * in targ_nr_call (index + 1, by syscall number: numbers are per architecture, calls.py). */
enum fs_call {
	FS_READ = 0,
	FS_WRITE = 1,
	FS_PREAD64 = 2,
	FS_PWRITE64 = 3,
	FS_READV = 4,
	FS_WRITEV = 5,
	FS_PREADV = 6,
	FS_PWRITEV = 7,
	FS_PREADV2 = 8,
	FS_PWRITEV2 = 9,
	FS_FSYNC = 10,
	FS_FDATASYNC = 11,
	FS_SYNC_FILE_RANGE = 12,
	FS_IO_SUBMIT = 13,
	FS_IO_URING_ENTER = 14,
	FS_SENDFILE64 = 15,
	FS_COPY_FILE_RANGE = 16,
	FS_SPLICE = 17,
	FS_NR_CALLS = 18,
};

#define FS_MAX_NR 512 /* syscall numbers targ_nr_call covers (calls.py MAX_NR) */

/* The object's own counters, after the ones every object has (enum ios_stat_idx). */
enum fs_stat_idx {
	FS_LOST_EVENTS = IOS_NR_STATS,  /* a slow call's record not sent: the ring buffer was full */
	FS_LOST_CALLS_FULL = 19,        /* a call not followed: the map of threads' calls was full */
	FS_LOST_BIOS_FULL = 20,         /* a bio of a call not timed: the map of bios in flight was full */
	FS_STAT_EXIT_OTHER = 21,        /* an exit whose thread's call in progress was another (an exit missed) */
	FS_NR_STATS = 22,
};

/* A thread's call in progress, from its sys_enter to its sys_exit (the map calls, keyed by thread id; the
 * thread's entry stays between its calls, with start_ns 0, until it exits). */
struct fs_state {
	__u64 start_ns;   /* bpf_ktime_get_ns() at the enter; 0: no call in progress */
	__u64 inode;      /* the file's struct inode * (its name is read when a record is sent) */
	__u64 ino;
	__u64 cgroup;     /* the thread's cgroup of the io controller (only with -c or -G) */
	__u64 iowait_ns;  /* blocked in I/O waits (iowait.bpf.h), the waits that ended during the call */
	__u64 offcpu_ns;  /* off its CPU (sched_switch out to sched_switch in), for any reason */
	__u64 runq_ns;    /* the part of offcpu_ns after a preemption: runnable, waiting for a CPU */
	__u64 off_ns;     /* switched out at (0: on its CPU) */
	__u64 dev_ns;     /* the bios it queued that completed during the call: queue to completion, summed */
	__u64 rbytes;     /* bytes of the read bios it queued */
	__u64 wbytes;     /* of the write bios */
	__u32 dev;        /* the file's device: its file system's (s_dev) or, for a block device, i_rdev */
	__u32 call;       /* enum fs_call */
	__u32 rbios;      /* read bios queued in its context */
	__u32 wbios;      /* write bios (with data) */
	__u32 flushes;    /* bios that ask for a cache flush (PREFLUSH, or an empty flush) */
	__u32 fua;        /* bios with FUA */
	__u32 sync;       /* bios with REQ_SYNC */
	__u32 bios_done;  /* its bios that completed during the call (dev_ns is theirs) */
	__u32 iowaits;    /* I/O waits ended */
	__u32 preempted;  /* the last switch out was a preemption (runnable) */
	__u32 obios;      /* other bios: empty flushes, discards, ... */
	__u32 pad;
};

/* One slow call (the ring buffer events): the state at its exit, and what user space shows with it. */
struct fs_event {
	struct fs_state s;
	__s64 ret;         /* what the call returned: bytes, or -errno */
	__u64 end_ns;      /* bpf_ktime_get_ns() at the exit */
	__u32 tid;
	__u32 tgid;
	char comm[16];
	struct agg_file file;
};

/* A bio queued by a thread during a call (the map bios, keyed by the bio's address). */
struct fs_bio {
	__u64 call_start; /* the start of the call it belongs to */
	__u64 q_ns;       /* queued */
	__u32 tid;
	__u32 pad;
};

/* The in-kernel histograms (--hist): per call and file, and per process or cgroup when asked. */
struct fs_hist_key {
	__u64 cgroup; /* 0 unless per cgroup */
	__u64 ino;    /* 0: no file (io_uring_enter) */
	__u32 dev;
	__u32 tgid;   /* 0 unless per process */
	__u32 call;
	__u32 pad;
};

/* The names of the files of the histograms' keys (the map files, filled when a key is made). */
struct fs_file_key {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

#endif /* FILESLOWER_H */
