/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ioscope agg (bpf/agg.bpf.c): the structs and constants shared with user space
 * (lib/ioscope/engines/aggregate/abi.py mirrors them; tests/test_abi.py compares the two).
 *
 * At each completion the object builds one record (struct agg_rec: every key
 * and value of the I/O, a bit per field it has), runs each expression's WHERE
 * program (struct agg_insn, postfix, compiled by lib/ioscope/engines/aggregate/expr.py) and
 * adds the record's value to the expression's row, keyed by the fields the
 * expression selects (struct agg_key; the others are zero).
 */
#ifndef AGG_H
#define AGG_H

#define AGG_MAX_EXPRS 8
#define AGG_MAX_INSNS 64 /* a power of two: indexes are masked */
#define AGG_NR_KEYS 11
#define AGG_STACK_DEPTH 127 /* frames of a stack in the stacks map (PERF_MAX_STACK_DEPTH) */
#define AGG_FILE_DEPTH 8    /* path components kept of a file's name (from the file up) */
#define AGG_FILE_NAME 32    /* bytes kept of each component */

/* Fields of a record. The first AGG_NR_KEYS are the keys, in struct agg_key's order. */
enum agg_field {
	AGG_F_DISK = 0,     /* kernel dev_t of the whole disk */
	AGG_F_OP = 1,       /* enum ios_io_op */
	AGG_F_FLAGS = 2,    /* blktrace category bits of the request (IOS_TC_*) */
	AGG_F_PID = 3,      /* thread that queued the bio */
	AGG_F_TGID = 4,     /* process that queued the bio (the comm key too) */
	AGG_F_CGROUP = 5,   /* cgroup v2 id of the queueing task */
	AGG_F_CPU = 6,      /* CPU the bio was queued on */
	AGG_F_SIZE = 7,     /* bytes of the bio */
	AGG_F_KSTACK = 8,   /* kernel stack of the queueing task: its id in the stacks map + 1 (0: none) */
	AGG_F_FILE = 9,     /* the inode the bio's first page belongs to (its key in the files map; 0: none) */
	AGG_F_USTACK = 10,  /* user stack of the queueing task: its id in the stacks map + 1 (0: none, e.g. a kernel thread) */
	AGG_F_BYTES = 11,   /* the bio's size, as a value */
	AGG_F_Q2C = 12,     /* ns */
	AGG_F_Q2D = 13,
	AGG_F_D2C = 14,     /* once per request: its first bio */
	AGG_F_SEEK = 15,    /* sectors between the bio's start and the previous bio's end on the disk */
	AGG_F_INFLIGHT = 16, /* requests in flight on the disk when its request was issued */
	AGG_F_THROTTLE = 17, /* ns the bio waited in blk-throttle before its queue event (0: not held) */
	AGG_F_COMM0 = 18,   /* the process name, bytes 0-7 (WHERE comm == "...") */
	AGG_F_COMM1 = 19,   /* bytes 8-15 */
	AGG_F_IOWAIT = 20,  /* ns a thread was blocked in an I/O wait: a record of a wait (iowait.bpf.h), not of an I/O */
	AGG_F_SWAPIN = 21,  /* the same ns, present only when the wait was a swap-in (iowait.bpf.h; iotop's SWAPIN) */
	AGG_NR_FIELDS = 22, /* as an expression's value: count() */
};

/* What a record is of, and which expressions it is for (struct agg_expr.source): agg_eval's second argument. */
enum agg_source {
	AGG_SRC_IO = 0,     /* a bio or a request (queued or completed) */
	AGG_SRC_WAIT = 1,   /* a thread's I/O wait that ended: pid, tgid, cgroup, kstack, ustack, iowait, swapin */
	AGG_NR_SOURCES = 2,
};

enum agg_kind {
	AGG_K_SCALAR = 0,   /* count, sum, avg, min, max, stddev: struct agg_val */
	AGG_K_LOGLIN = 1,   /* quantize, llquantize: struct hist, the log-linear buckets */
	AGG_K_LINEAR = 2,   /* lquantize: struct hist, slot 0 below low, 1..n linear, n+1 at or above high */
};

enum agg_insn_op {
	AGG_I_CMP = 0,      /* push field <cmp> imm (false when the record lacks the field) */
	AGG_I_AND = 1,
	AGG_I_OR = 2,
	AGG_I_NOT = 3,
};

enum agg_cmp {
	AGG_C_EQ = 0, AGG_C_NE = 1, AGG_C_LT = 2, AGG_C_LE = 3, AGG_C_GT = 4, AGG_C_GE = 5,
};

/* Extra loss counters of the agg object's stats array (after enum ios_stat_idx's). */
enum agg_stat_idx {
	AGG_LOST_AGG_FULL = 11,  /* an aggregation map was full: a row not updated */
	AGG_STAT_NO_EXTRA = 12,  /* a bio's queue-time details (pid, cpu, cgroup, seek) were overwritten */
	AGG_LOST_STACK = 13,     /* a stack not stored: another stack held its bucket of the stacks map */
};

struct agg_insn {
	__u64 imm;
	__u8 op;    /* enum agg_insn_op */
	__u8 field; /* enum agg_field */
	__u8 cmp;   /* enum agg_cmp */
	__u8 pad[5];
};

struct agg_expr {
	__u64 lq_low;
	__u64 lq_step;
	__u32 lq_n;       /* linear buckets between low and high */
	__u32 key_mask;   /* bit per key field (enum agg_field < AGG_NR_KEYS) */
	__u8 kind;        /* enum agg_kind */
	__u8 value;       /* enum agg_field; AGG_NR_FIELDS for count() */
	__u8 insn_start;  /* its WHERE program: targ_insns[insn_start .. insn_start + ninsns) */
	__u8 ninsns;      /* 0: no WHERE */
	__u8 source;      /* enum agg_source: the records it is answered from */
	__u8 pad[3];
};

struct agg_key {
	__u64 k[AGG_NR_KEYS]; /* indexed by enum agg_field; unselected keys are 0 */
	__u32 expr;
	__u32 pad;
};

struct agg_val {
	__u64 count;
	__u64 sum;
	__u64 max;
	__u64 min_inv;  /* ~min */
	__u64 sq_lo;    /* sum of squares, 128 bits */
	__u64 sq_hi;
};

struct agg_rec {
	__u64 f[AGG_NR_FIELDS];
	__u32 have;     /* bit per field present */
	__u32 pad;
};

/* Queue-time details of a bio in flight, beside its slot in bpf/inflight.bpf.h's table. */
struct agg_extra {
	__u64 bio;      /* the slot's bio: the details are valid only while they match */
	__u64 q_ns;     /* the slot's queue time when they were taken */
	__u64 cgroup;
	__u64 seek;
	__u64 inflight;
	__u64 file;     /* the inode of the bio's first page (0: none, e.g. direct I/O) */
	__u64 throttle; /* ns it waited in blk-throttle before it was queued */
	__u32 pid;
	__u32 cpu;
	__u32 have;     /* bits of enum agg_field: AGG_F_SEEK, AGG_F_INFLIGHT, AGG_F_KSTACK, AGG_F_USTACK, AGG_F_THROTTLE */
	__s32 kstack;   /* the queueing task's kernel stack (stacks map id) */
	__s32 ustack;   /* and its user stack */
	__u32 cg_out;   /* -c: charged to a cgroup outside the filter (cgroup.bpf.h), not counted */
};

/* A file's name as the files map holds it: its path components from the file up to its file
 * system's root (or AGG_FILE_DEPTH of them), read from the dentry chain when first seen. */
struct agg_file {
	__u64 ino;
	__u32 dev;      /* the file system's dev_t (kernel encoding) */
	__u32 depth;    /* components read */
	char comp[AGG_FILE_DEPTH][AGG_FILE_NAME];
};

/* Per-disk state: requests in flight (as seen by this object) and where the last bio ended. */
struct agg_disk {
	__s64 inflight;
	__u64 last_end;  /* sector after the last bio queued */
};

/* A bio blk-throttle held back: when it was first held, and by whom (the task that submitted it). */

/* A bio-less flush request between issue and completion. */
struct agg_rq {
	__u64 d_ns;
	__u64 inflight;
};

#endif /* AGG_H */
