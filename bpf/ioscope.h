/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Structs and constants shared by the BPF programs and the Python side.
 *
 * This is the single definition of the histogram bucket scheme and of every
 * record/key struct that crosses the kernel/user boundary. lib/ioscope/kernel/abi.py
 * mirrors these as numpy dtypes; tests/test_abi.py reads the compiled
 * objects' BTF and fails if a size or an offset differs.
 *
 * Fields are fixed width and ordered largest first so that there is no
 * hidden padding.
 */
#ifndef IOSCOPE_H
#define IOSCOPE_H

/*
 * Log-linear histogram (HDR style). Values below IOS_HIST_SUB are counted
 * exactly (one bucket each). Above that, every power of two [2^k, 2^(k+1))
 * is split into IOS_HIST_SUB equal sub-buckets, so a bucket's width is at most
 * 1/IOS_HIST_SUB of its lower bound: any value read back from a bucket (its
 * lower bound, upper bound or midpoint) is within 12.5% of the true value.
 * Values >= 2^IOS_HIST_MAX_LOG2 land in the last bucket; max is kept exactly.
 */
#define IOS_HIST_SUB_BITS 3
#define IOS_HIST_SUB (1 << IOS_HIST_SUB_BITS)
#define IOS_HIST_MAX_LOG2 40
#define IOS_HIST_NBUCKETS ((IOS_HIST_MAX_LOG2 - IOS_HIST_SUB_BITS + 1) * IOS_HIST_SUB)

struct hist {
	__u64 slots[IOS_HIST_NBUCKETS];
	__u64 count;
	__u64 sum;
	__u64 max;
	__u64 min_inv; /* ~min: zero-initialised entries need no special case */
};

/* Latency phases of ioscope lat. */
enum ios_lat_phase {
	IOS_PHASE_Q2C = 0,
	IOS_PHASE_Q2D = 1,
	IOS_PHASE_D2C = 2,
	IOS_NR_PHASES = 3,
};

/* Operations (the -F split). */
enum ios_io_op {
	IOS_OP_READ = 0,
	IOS_OP_WRITE = 1,
	IOS_OP_DISCARD = 2,
	IOS_OP_FLUSH = 3,
	IOS_OP_OTHER = 4,
	IOS_OP_ALL = 255, /* the key when -F is not given */
};

struct lat_key {
	__u64 cgroup; /* cgroup id the I/O is charged to (cgroup.bpf.h); 0 when --per-cgroup is not given */
	__u32 dev;   /* kernel dev_t of the whole disk (major << 20 | minor); 0 = all */
	__u32 pid;   /* submitting process (tgid); 0 when -P is not given */
	__u8 op;     /* enum ios_io_op */
	__u8 pad[7];
};

/* The three phases of one key together: one map lookup per I/O. */
struct lat_val {
	struct hist ph[IOS_NR_PHASES]; /* indexed by enum ios_lat_phase */
};

/* Per-bio state kept between queue, issue and completion. */
struct bio_start {
	__u64 q_ns;  /* bio queued (0: queued before tracing started) */
	__u64 d_ns;  /* request issued to the driver (0: not yet) */
	__u32 tgid;  /* the process that queued the bio */
	__u32 dev;
};

/*
 * Counters of everything that did not make it into a histogram, in a
 * per-CPU array indexed by these values. LOST_* are real losses; the
 * INFLIGHT_* and STALE counters explain why some I/O has fewer phases.
 */
enum ios_stat_idx {
	IOS_LOST_START_FULL = 0,   /* both slots of a bio's pair held by other bios in flight: not timed */
	IOS_LOST_HIST_FULL = 1,    /* histogram map full: value dropped */
	IOS_LOST_CHAIN_LONG = 2,   /* request with more bios than we walk */
	IOS_LOST_RQ_FULL = 3,      /* bio-less request map full */
	IOS_LOST_C_UNSEEN = 4,     /* a bio was issued but no completion reached us (seen when its address is reused) */
	IOS_INFLIGHT_AT_START = 5, /* issued/completed I/O queued before tracing */
	IOS_STAT_SPLIT = 6,        /* bios split; the new bio inherits the queue time */
	IOS_STAT_STALE = 7,        /* slots of bios never seen completing, older than 120 s, reused or swept */
	IOS_STAT_NEVER_ISSUED = 8, /* a bio queued earlier at the same address was never issued */
	IOS_STAT_REQUEUED = 9,     /* a split bio's remainder queued again: first queue time kept */
	IOS_STAT_C_NOENTRY = 10,   /* a completed bio with no slot (queued before tracing) */
	IOS_STAT_ONE_CLOCK = 14,   /* lat, kernel stamps: a request's start and issue stamps are one clock reading (q2d 0) */
	IOS_LOST_UNSTAMPED = 15,   /* lat, kernel-stamp timing: a request ended without the kernel's start or issue time (11-13: agg.h) */
	IOS_LOST_IOWAIT_FULL = 16, /* iowait.bpf.h: a wait not counted, its task's entry could not be made (map full) */
	IOS_STAT_IOWAIT_STALE = 17, /* iowait.bpf.h: a wait's start dropped, its task ran again and no wakeup was seen */
	IOS_NR_STATS = 18,
};
#define IOS_NR_LOST_STATS 5 /* indexes below this are losses */

/* ioscope top (bpf/top.bpf.c): per-process counters, keyed by the process
 * that queued the bio, and per-disk request latency histograms. */
struct top_proc_key {
	__u64 cgroup; /* cgroup id the I/O is charged to (cgroup.bpf.h); 0 without the cgroup view */
	__u32 tgid;  /* 0: queued before tracing started (no latency) */
	__u32 dev;   /* kernel dev_t of the whole disk */
	__u8 op;     /* enum io_op */
	__u8 pad[7];
};

struct top_proc_val {
	__u64 ios;   /* bios completed */
	__u64 bytes; /* bytes completed */
	struct hist lat; /* queue-to-completion latency of the timed ones (ns) */
};

/* iowait.bpf.h: a thread blocked in an I/O wait (io_schedule and its kin: the task's in_iowait), from
 * the moment the scheduler took it off its CPU (sched_switch) */
struct iowait_start {
	__u64 ns;     /* bpf_ktime_get_ns() at the switch */
	__u64 nvcsw;  /* the task's voluntary switches then: a wakeup for a later block is not this wait's */
	__u64 cgroup; /* its cgroup of the io controller (cgroup.bpf.h) */
	__u32 tgid;
	__s32 kstack; /* where it blocked, an id in the object's stacks map (-1: not taken; agg's kstack key) */
	__s32 ustack; /* the same of its user stack (agg's ustack key) */
	__u32 delayed; /* 1: the scheduler delayed its dequeue (EEVDF's DELAY_DEQUEUE, 6.12+; see iowait.bpf.h) */
	__u32 swapin;  /* 1: a swap-in (a swap-in function on its kernel stack: iowait_in_swapin) */
	__u32 _pad;
};

/* iowait.bpf.h: the I/O waits of one thread that have ended (woken: sched_wakeup), since tracing began */
struct iowait_val {
	__u64 ns;         /* time blocked, summed */
	__u64 waits;      /* waits ended */
	__u64 cgroup;     /* its cgroup of the io controller at its last wait */
	__u64 delayed_ns; /* the part of ns in waits whose dequeue the scheduler delayed */
	__u32 delayed;    /* those waits */
	__u32 tgid;
	__u64 swapin_ns;  /* the part of ns in swap-ins (iotop's SWAPIN) */
	__u64 swapins;    /* those waits */
};

/* A slot of top's direct-mapped table of bios in flight (index: hash of the
 * bio pointer). Cheaper than a hash map per I/O; a slot taken by another bio
 * in flight is a collision, counted (IOS_LOST_START_FULL) and not timed. */
/* A bio in flight (bpf/inflight.bpf.h), used by lat and top. */
struct bio_slot {
	__u64 bio;   /* struct bio *, 0 = free */
	__u64 q_ns;  /* queued (0: queued before tracing started) */
	__u64 d_ns;  /* its request issued to the driver (0: not yet); SLOT_ENDS_IN_RQ in a tool without an issue program */
	__u32 tgid;  /* the process that queued it */
	__u32 dev;
};

struct top_disk_key {
	__u32 dev;
	__u8 op;
	__u8 pad[3];
};

/* throttle.bpf.h: when and by whom a bio was submitted, noted in the submitter's context: the start of
 * its hold in blk-throttle (fentry on throtl_add_bio_tg), or, where fentry is refused, a submit note
 * (the bio's allocation, its partition remap or its submitter's syscall entry) */
struct throttle_note {
	__u64 ts;      /* bpf_ktime_get_ns() at the note */
	__u32 pid;     /* the submitting thread */
	__u32 tgid;
	char comm[16]; /* its command */
};

/* throttle.bpf.h: bios blk-throttle held, per cgroup and disk */
struct throttle_key {
	__u64 cgroup;  /* the cgroup the bio is charged to (cgroup.bpf.h) */
	__u32 dev;     /* kernel dev_t of the whole disk */
	__u32 tgid;    /* the submitting process, from the bio's note (0: no note, not known) */
	char comm[16]; /* its command ("" when not known) */
};

struct throttle_val {
	__u64 held;        /* queued from blk-throttle's dispatch work: held, exactly */
	struct hist wait;  /* how long, for the bios with a note (wait.count of them) */
};

/* maperr.bpf.h: failed map operations, per op and error class (lib/ioscope/kernel/loader.py: MAPERR_*) */
enum ios_maperr {
	IOS_MAPERR_UPDATE = 0,
	IOS_MAPERR_DELETE = 1,
	IOS_MAPERR_NR_OPS = 2,
	IOS_MAPERR_E2BIG = 0,
	IOS_MAPERR_ENOMEM = 1,
	IOS_MAPERR_EBUSY = 2,
	IOS_MAPERR_ENOENT = 3,
	IOS_MAPERR_EEXIST = 4,
	IOS_MAPERR_OTHER = 5,
	IOS_MAPERR_NR_CLASSES = 6,
	IOS_MAPERR_LAST_OTHER = 12, /* the last error of class OTHER, as a positive errno (per CPU) */
	IOS_MAPERR_SLOTS = 13,
};

#endif /* IOSCOPE_H */
