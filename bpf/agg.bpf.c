// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope agg: DTrace-style aggregations of block I/O, in the kernel.
 *
 * The bio/request path is the one lat and top share (rqpath.bpf.h): queue,
 * split, issue, completion, the flush sequence. This object adds, beside each
 * bio's slot, the details only the queueing task knows (thread, CPU, cgroup,
 * the seek from the previous bio on the disk) and, at issue, the requests in
 * flight on the disk. At completion it builds one record per bio (and per
 * flush request), and for each of up to AGG_MAX_EXPRS expressions: runs the
 * expression's WHERE program (postfix, bounded), then adds the value to the
 * row keyed by the expression's key fields, in a per-CPU hash (aggs: count,
 * sum, min, max, sum of squares; hists: the log-linear struct hist, or linear
 * buckets for lquantize). User space reads and clears both once per interval.
 * Nothing is sent to user space per I/O.
 *
 * What an expression needs is set before load (const volatile globals: the
 * expressions, their programs, targ_need: a bit per field read), so an
 * expression that reads no cgroup, seek or in-flight count costs nothing for
 * them. Each hook exists as tp_btf and raw_tp; user space picks one per hook.
 *
 * When every expression reads only what a request knows at its completion
 * (disk, op, flags, size, bytes, q2c, q2d, d2c) and no -p/-c filter is set,
 * user space sets targ_stamps (stamps.bpf.h): the completion program alone
 * builds one record per request from the kernel's stamps on the disks that
 * have them (agg_stamps_done), and the probes follow the others.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "twins.bpf.h"
#include "core_fixes.bpf.h"
#include "block.bpf.h"
#include "blktrace.bpf.h"
#include "hist.bpf.h"
#include "common.bpf.h"
#include "comms.bpf.h"
#include "inflight.bpf.h"
#include "rqpath.bpf.h"
#include "stamps.bpf.h"
#include "agg.h"
#include "fname.bpf.h"
#include "cgroup.bpf.h"
#include "throttle.bpf.h"

#define AGG_MAX_CHAIN 32 /* bios of a request walked */

const volatile __u32 targ_tgid = 0;
const volatile __u32 targ_need = 0;     /* bit per enum agg_field some expression reads */
const volatile bool targ_issue = false; /* the issue program is attached (q2d, d2c, inflight are read) */
const volatile bool targ_at_queue = false; /* records made at queue, by the queue program alone (agg_at_queue) */
const volatile __u32 targ_nexprs = 0;
const volatile bool targ_waits = false;     /* some expression is answered from I/O waits (reads iowait) */
const volatile __u32 targ_wait_need = 0;    /* bit per enum agg_field those expressions read */
/* iomap_dio_bio_end_io's address (/proc/kallsyms; 0: not known): a direct I/O bio of ext4, XFS and the
 * other iomap file systems carries it in bi_end_io and its struct iomap_dio in bi_private, whose kiocb
 * names the file (the file key of direct I/O, which has no page cache page to name it) */
const volatile __u64 targ_dio_end_io = 0;
const volatile struct agg_expr targ_exprs[AGG_MAX_EXPRS] = {};
const volatile struct agg_insn targ_insns[AGG_MAX_INSNS] = {};

#define NEED(f) (targ_need & (1u << (f)))
/* the queue-time details beside each slot (struct agg_extra): wanted by these fields, -c and in-flight counts */
#define NEED_EXTRAS (NEED(AGG_F_PID) || NEED(AGG_F_CPU) || NEED(AGG_F_CGROUP) || NEED(AGG_F_SEEK) || \
		     NEED(AGG_F_INFLIGHT) || NEED(AGG_F_KSTACK) || NEED(AGG_F_USTACK) || NEED(AGG_F_FILE) || \
		     NEED(AGG_F_THROTTLE) || targ_cgroup)
#define TC_SHOWN (IOS_TC_READ | IOS_TC_WRITE | IOS_TC_FLUSH | IOS_TC_SYNC | IOS_TC_AHEAD | IOS_TC_META | \
		  IOS_TC_DISCARD | IOS_TC_FUA)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 10240);
	__type(key, struct agg_key);
	__type(value, struct agg_val);
} aggs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct agg_key);
	__type(value, struct hist);
} hists SEC(".maps");

/* Kernel and user stacks of the queueing tasks (kstack, ustack); user space sizes it to 1 entry
 * when unused. The key a stack is stored under says which it is: the ids do not overlap. */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 8192);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, AGG_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

/* Names of the files I/O was queued for, by inode address (file); sized to 1 entry when unused. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct agg_file);
} files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct agg_file);
} file_scratch SEC(".maps");


/* Beside inflight.bpf.h's slots: extras[i] belongs to the bio in inflight[i]. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INFLIGHT_SLOTS);
	__type(key, __u32);
	__type(value, struct agg_extra);
} extras SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct agg_disk);
} disk_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* struct request * */
	__type(value, struct agg_rq);
} rq_starts SEC(".maps");

/* The record being built (one per CPU: one completion at a time), and what the
 * walk of a request's bios carries from its first bio to the others. */
struct cur_rq {
	__u64 inflight;
	__u32 have;    /* AGG_F_INFLIGHT */
	__u32 issued;  /* the request's issue was seen (its in-flight count was raised) */
};

/* One record per source (enum agg_source): a wait's program may run in an interrupt on a CPU whose
 * completion program is building an I/O's record. A wait's record has a slot per nesting level
 * (AGG_SRC_WAIT + level, wait_nest): sched_wakeup in an interrupt may end another task's wait while
 * sched_waking, interrupted, evaluates its own; with one slot the interrupted one evaluated the other's
 * record (one wait lost, one counted twice: the swap-in tests beside a disk hog). */
#define AGG_WAIT_LEVELS 4 /* task, softirq, hardirq, NMI */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, AGG_NR_SOURCES + AGG_WAIT_LEVELS - 1);
	__type(key, __u32);
	__type(value, struct agg_rec);
} recs SEC(".maps");

/* This CPU's wait records being built (iowait_ended): the next one's level. Programs nest only by
 * interrupts, and the interrupting one is done before the interrupted one resumes. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} wait_nest SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cur_rq);
} cur_rqs SEC(".maps");

/* The queue-time details of the last bio each CPU queued: a split-off bio whose parent is not in view takes them. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct agg_extra);
} last_extra SEC(".maps");

static struct agg_val zero_val;
static struct hist zero_hist;
static struct agg_disk zero_disk;

/* ---- the in-kernel evaluation (global functions: verified once, on their own) ---- */

static __always_inline bool cmp_u64(__u64 a, __u8 cmp, __u64 b)
{
	switch (cmp) {
	case AGG_C_EQ: return a == b;
	case AGG_C_NE: return a != b;
	case AGG_C_LT: return a < b;
	case AGG_C_LE: return a <= b;
	case AGG_C_GT: return a > b;
	default: return a >= b;
	}
}

/* The WHERE program of insns [start, start + n) on this CPU's record in slot (recs): a stack of booleans
 * in a word. */
__noinline int agg_pred(__u32 start, __u32 n, __u32 slot)
{
	__u32 st = 0, b, i;
	struct agg_rec *r = bpf_map_lookup_elem(&recs, &slot);

	if (!r)
		return 0;
	for (i = 0; i < AGG_MAX_INSNS; i++) {
		__u32 idx = (start + i) & (AGG_MAX_INSNS - 1);
		__u32 f;

		if (i >= n)
			break;
		switch (targ_insns[idx].op) {
		case AGG_I_CMP:
			f = targ_insns[idx].field;
			if (f >= AGG_NR_FIELDS)
				f = 0;
			b = (r->have & (1u << f)) && cmp_u64(r->f[f], targ_insns[idx].cmp, targ_insns[idx].imm);
			st = (st << 1) | b;
			break;
		case AGG_I_NOT:
			st ^= 1;
			break;
		case AGG_I_AND:
			b = st & 1;
			st >>= 1;
			st = (st & ~1u) | (st & b);
			break;
		default: /* AGG_I_OR */
			b = st & 1;
			st >>= 1;
			st |= b;
			break;
		}
	}
	return st & 1;
}

/* x^2 added to a 128-bit sum (x up to 2^64: split in 32-bit halves). */
static __always_inline void add_square(struct agg_val *v, __u64 x)
{
	__u64 a = x >> 32, b = x & 0xffffffffULL;
	__u64 lo = b * b, mid = a * b, hi = a * a;
	__u64 s = lo + (mid << 33);

	hi += (mid >> 31) + (s < lo);
	v->sq_lo += s;
	v->sq_hi += hi + (v->sq_lo < s);
}

static __always_inline void linear_add(struct hist *h, __u64 v, __u64 low, __u64 step, __u32 n)
{
	__u64 idx;

	if (v < low)
		idx = 0;
	else if (step)
		idx = (v - low) / step + 1;
	else
		idx = n + 1;
	if (idx > n + 1)
		idx = n + 1;
	hist_put(h, idx, v);
}

static __always_inline void rec_comm(struct agg_rec *r, __u32 tgid)
{
	char *name;

	if (!((targ_need | targ_wait_need) & (1u << AGG_F_COMM0)) || !tgid)
		return;
	name = bpf_map_lookup_elem(&comms, &tgid);
	if (!name)
		return;
	/*
	 * Up to the NUL only, zero-padded: the WHERE program compares the 16 bytes as two words, as
	 * user space builds them. comms_note() zeroes its buffer before the read, so this copy is a
	 * guard, not a fix: the comparison stays right whoever wrote the name.
	 */
	{
		char *out = (char *)&r->f[AGG_F_COMM0];
		bool end = false;
		int i;

		for (i = 0; i < 16; i++) {
			char c = name[i];

			if (!c)
				end = true;
			out[i] = end ? 0 : c;
		}
	}
	r->have |= (1u << AGG_F_COMM0) | (1u << AGG_F_COMM1);
}

/* Every expression of source (enum agg_source) on this CPU's record in slot (recs: the source's, or a
 * wait's at its nesting level) (have: its fields, never 0). The expressions of the two sources are keyed
 * apart (agg_key.expr). */
__noinline int agg_eval(__u32 have, __u32 source, __u32 slot)
{
	__u32 e, j;
	struct agg_rec *r = bpf_map_lookup_elem(&recs, &slot);

	if (!r || !have)
		return 0;
	/* here, not in the completion's walk of the bio chain: the verifier sees this loop once */
	rec_comm(r, (__u32)r->f[AGG_F_TGID]);
	for (e = 0; e < AGG_MAX_EXPRS; e++) {
		struct agg_key key = {};
		__u32 vf, mask, kind;
		__u64 v = 1;

		if (e >= targ_nexprs)
			break;
		if (targ_exprs[e].source != source)
			continue;
		vf = targ_exprs[e].value;
		if (vf < AGG_NR_FIELDS) {
			if (!(r->have & (1u << vf)))
				continue; /* the I/O has no such value (d2c of a bio after a request's first) */
			v = r->f[vf];
		}
		if (targ_exprs[e].ninsns && !agg_pred(targ_exprs[e].insn_start, targ_exprs[e].ninsns, slot))
			continue;
		mask = targ_exprs[e].key_mask;
		for (j = 0; j < AGG_NR_KEYS; j++)
			key.k[j] = (mask & (1u << j)) ? r->f[j] : 0;
		key.expr = e;
		kind = targ_exprs[e].kind;
		if (kind == AGG_K_SCALAR) {
			struct agg_val *a = lookup_or_init(&aggs, &key, &zero_val);

			if (!a) {
				stat_inc(AGG_LOST_AGG_FULL);
				continue;
			}
			a->count += 1;
			a->sum += v;
			if (v > a->max)
				a->max = v;
			if (~v > a->min_inv)
				a->min_inv = ~v;
			add_square(a, v);
		} else {
			struct hist *h = lookup_or_init(&hists, &key, &zero_hist);

			if (!h) {
				stat_inc(AGG_LOST_AGG_FULL);
				continue;
			}
			if (kind == AGG_K_LINEAR)
				linear_add(h, v, targ_exprs[e].lq_low, targ_exprs[e].lq_step, targ_exprs[e].lq_n);
			else
				hist_add_local(h, v);
		}
	}
	return 0;
}

/* ---- files: the inode a bio's data belongs to, and its name ---- */

/* The inode of the file a direct I/O bio of an iomap file system (ext4, XFS, ...) reads or writes: its
 * bi_private is the struct iomap_dio whose kiocb is the caller's (read, write, io_submit, io_uring alike);
 * 0 for any other bio, or where the kernel has no struct iomap_dio (CO-RE: the branch is then dropped). */
static __always_inline __u64 bio_dio_inode(struct bio *bio)
{
	struct iomap_dio *dio;

	if (!targ_dio_end_io || !bpf_core_field_exists(((struct iomap_dio *)0)->iocb))
		return 0;
	if ((__u64)BPF_CORE_READ(bio, bi_end_io) != targ_dio_end_io)
		return 0;
	dio = BPF_CORE_READ(bio, bi_private);
	if (!dio)
		return 0;
	return (__u64)BPF_CORE_READ(dio, iocb, ki_filp, f_inode);
}

/* The inode a bio's data belongs to: a direct I/O's file (bio_dio_inode: first, as its user buffer may be
 * another file's mapped pages), else the one whose page cache the bio's first page is in (0: anonymous
 * memory, a direct I/O the kernel does not say the file of, or no data). */
static __always_inline __u64 bio_inode(struct bio *bio)
{
	struct bio_vec *bv = BPF_CORE_READ(bio, bi_io_vec);
	struct address_space *mapping;
	struct page *page;
	unsigned long head;
	__u64 dio = bio_dio_inode(bio);

	if (dio)
		return dio;
	if (!bv || !BPF_CORE_READ(bio, bi_vcnt))
		return 0;
	page = BPF_CORE_READ(bv, bv_page);
	if (!page)
		return 0;
	head = BPF_CORE_READ(page, compound_head);
	if (head & 1) /* a tail page of a large folio: its head has the mapping */
		page = (struct page *)(head - 1);
	mapping = BPF_CORE_READ(page, mapping);
	if (!mapping || ((unsigned long)mapping & 1)) /* PAGE_MAPPING_ANON */
		return 0;
	return (__u64)BPF_CORE_READ(mapping, host);
}

/* Name the inode in the files map (once, or again when the address now holds another inode). */
static __always_inline void file_note(__u64 ip)
{
	struct inode *inode = (struct inode *)ip;
	__u64 ino = BPF_CORE_READ(inode, i_ino);
	__u32 dev = BPF_CORE_READ(inode, i_sb, s_dev);
	struct agg_file *f = bpf_map_lookup_elem(&files, &ip);
	__u32 zero = 0;

	if (f && f->ino == ino && f->dev == dev)
		return;
	f = bpf_map_lookup_elem(&file_scratch, &zero);
	if (!f)
		return;
	fname_fill(f, inode);
	map_update(&files, &ip, f, BPF_ANY);
}

/* ---- queue-time details beside the slot table ---- */

/* The index of bio's slot in inflight.bpf.h's table, or -1. */
static __always_inline int slot_index(__u64 bio)
{
	__u32 idx = slot_of(bio), alt = idx ^ 1;
	struct bio_slot *sl = bpf_map_lookup_elem(&inflight, &idx);

	if (sl && sl->bio == bio)
		return idx;
	sl = bpf_map_lookup_elem(&inflight, &alt);
	if (sl && sl->bio == bio)
		return alt;
	return -1;
}

/* The extras of bio (NULL if its slot does not hold it, or they are an earlier bio's). */
static __always_inline struct agg_extra *extra_of(__u64 bio)
{
	int idx = slot_index(bio);
	__u32 i;
	struct agg_extra *x;
	struct bio_slot *sl;

	if (idx < 0)
		return NULL;
	i = idx;
	x = bpf_map_lookup_elem(&extras, &i);
	sl = bpf_map_lookup_elem(&inflight, &i);
	if (!x || !sl || x->bio != bio || x->q_ns != sl->q_ns)
		return NULL;
	return x;
}

static __always_inline struct agg_rec *rec_start(__u32 dev, __u8 op, __u32 flags);


/* The queueing task's details of a bio: thread, CPU, cgroup, stacks, file, seek (what NEED asks). */
static __always_inline void fill_extra(void *ctx, struct bio *bio, struct agg_extra *x, __u32 dev, const bool btf)
{
	struct cgroup *cg = (NEED(AGG_F_CGROUP) || targ_cgroup) ? bio_cgroup(bio) : NULL;

	x->pid = (__u32)bpf_get_current_pid_tgid();
	x->cpu = bpf_get_smp_processor_id();
	x->cgroup = NEED(AGG_F_CGROUP) ? cgroup_kn_id(cg) : 0;
	x->cg_out = !cgroup_wanted(cg);
	x->have = 0;
	x->inflight = 0;
	x->throttle = 0;
	if (NEED(AGG_F_THROTTLE) && targ_throttle) {
		x->throttle = throttle_wait(bio, btf);
		x->have |= 1u << AGG_F_THROTTLE;
	}
	if (NEED(AGG_F_KSTACK)) {
		long id = bpf_get_stackid(ctx, &stacks, 0);

		if (id >= 0) {
			x->kstack = id;
			x->have |= 1u << AGG_F_KSTACK;
		} else {
			stat_inc(AGG_LOST_STACK);
		}
	}
	if (NEED(AGG_F_USTACK)) {
		/* frame-pointer walk of the user stack (perf's): a kernel thread has none (-EFAULT) */
		long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);

		if (id >= 0) {
			x->ustack = id;
			x->have |= 1u << AGG_F_USTACK;
		} else if (id == -EEXIST) { /* a stack map bucket held by another stack */
			stat_inc(AGG_LOST_STACK);
		}
	}
	x->file = 0;
	if (NEED(AGG_F_FILE)) {
		x->file = bio_inode(bio);
		if (x->file)
			file_note(x->file);
	}
	if (NEED(AGG_F_SEEK)) {
		__u64 sector = IOS_READ(btf, bio, bi_iter.bi_sector);
		__u32 size = IOS_READ(btf, bio, bi_iter.bi_size);
		struct agg_disk *d = lookup_or_init(&disk_state, &dev, &zero_disk);

		if (d) {
			if (d->last_end) {
				x->seek = sector > d->last_end ? sector - d->last_end : d->last_end - sector;
				x->have |= 1u << AGG_F_SEEK;
			}
			d->last_end = sector + (size >> 9);
		}
	}
}

/* What the queue program noted of a bio (process, CPU, cgroup, file, seek, stacks), into its record. */
static __always_inline void rec_extras(struct agg_rec *r, const struct agg_extra *x)
{
	r->f[AGG_F_PID] = x->pid;
	r->f[AGG_F_CPU] = x->cpu;
	r->f[AGG_F_CGROUP] = x->cgroup;
	r->f[AGG_F_FILE] = x->file;
	if (x->have & (1u << AGG_F_SEEK)) {
		r->f[AGG_F_SEEK] = x->seek;
		r->have |= 1u << AGG_F_SEEK;
	}
	if (x->have & (1u << AGG_F_THROTTLE)) {
		r->f[AGG_F_THROTTLE] = x->throttle;
		r->have |= 1u << AGG_F_THROTTLE;
	}
	if (x->have & (1u << AGG_F_KSTACK))
		r->f[AGG_F_KSTACK] = (__u64)x->kstack + 1;
	if (x->have & (1u << AGG_F_USTACK))
		r->f[AGG_F_USTACK] = (__u64)x->ustack + 1;
}

/*
 * At queue (targ_at_queue: no expression reads a time, the in-flight count or -c... only what the
 * queueing task knows): one record per bio queued, here, and nothing else attached: no slot, no
 * completion program. Bios, counted when queued; the flush machinery's own requests are not bios.
 */
static __always_inline int agg_at_queue(void *ctx, struct bio *bio, const bool btf)
{
	struct gendisk *disk = bio_disk(bio, btf);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 zero = 0, dev, opf, size;
	struct agg_extra *x;
	struct last_q *last;
	struct agg_rec *r;

	if (!disk || !disk_is_mq(disk, btf))
		return 0;
	if (targ_tgid && tgid != targ_tgid)
		return 0;
	dev = disk_dev(disk, btf);
	if (!dev_wanted(dev))
		return 0;
	x = bpf_map_lookup_elem(&last_extra, &zero);
	if (!x)
		return 0;
	fill_extra(ctx, bio, x, dev, btf);
	if (x->cg_out)
		return 0; /* -c: charged to another cgroup */
	last = bpf_map_lookup_elem(&last_queued, &zero);
	if (last && last->tgid != tgid) {
		note_comm(last, tgid);
		last->tgid = tgid;
	}
	opf = IOS_READ(btf, bio, bi_opf);
	size = IOS_READ(btf, bio, bi_iter.bi_size);
	r = rec_start(dev, opf_to_op(opf, size), opf_to_tc(opf));
	if (!r)
		return 0;
	r->f[AGG_F_TGID] = tgid;
	r->f[AGG_F_SIZE] = size;
	r->f[AGG_F_BYTES] = size;
	rec_extras(r, x);
	agg_eval(r->have, AGG_SRC_IO, AGG_SRC_IO);
	return 0;
}

static __always_inline int agg_bio_queue(void *ctx, struct bio *bio, const bool btf)
{
	__u64 key = ptr_value(bio, btf);
	struct agg_extra *x, *last;
	struct bio_slot *sl;
	__u32 zero = 0, i;
	int idx;

	if (targ_at_queue)
		return agg_at_queue(ctx, bio, btf);
	rqpath_bio_queue(bio, true, btf);
	if (!NEED_EXTRAS)
		return 0; /* no expression reads the thread, CPU, cgroup or seek */
	idx = slot_index(key);
	if (idx < 0)
		return 0; /* filtered out, or not timed */
	i = idx;
	x = bpf_map_lookup_elem(&extras, &i);
	sl = bpf_map_lookup_elem(&inflight, &i);
	if (!x || !sl)
		return 0;
	if (x->bio == key && x->q_ns == sl->q_ns)
		return 0; /* a split's remainder queued again: it keeps its first details */
	x->bio = key;
	x->q_ns = sl->q_ns;
	fill_extra(ctx, bio, x, sl->dev, btf);
	last = bpf_map_lookup_elem(&last_extra, &zero);
	if (last)
		*last = *x;
	return 0;
}

/* A bio split off one in flight takes its parent's details (or those of the last bio this CPU queued). */
static __always_inline int agg_split(struct bio *bio, const bool btf)
{
	__u64 key = ptr_value(bio, btf);
	__u64 priv = ptr_value(IOS_READ(btf, bio, bi_private), btf);
	struct agg_extra *x, *from = NULL;
	struct bio_slot *sl;
	__u32 zero = 0, i;
	int idx;

	slot_split(bio, true, btf);
	if (!NEED_EXTRAS)
		return 0;
	idx = slot_index(key);
	if (idx < 0)
		return 0;
	i = idx;
	x = bpf_map_lookup_elem(&extras, &i);
	sl = bpf_map_lookup_elem(&inflight, &i);
	if (!x || !sl)
		return 0;
	if (priv)
		from = extra_of(priv);
	if (!from)
		from = bpf_map_lookup_elem(&last_extra, &zero);
	x->have = 0;
	x->file = 0;
	x->cg_out = 0;
	if (from) {
		x->cgroup = from->cgroup;
		x->cg_out = from->cg_out;
		x->pid = from->pid;
		x->cpu = from->cpu;
		x->kstack = from->kstack;
		x->ustack = from->ustack;
		x->file = from->file;
		x->have = from->have & ((1u << AGG_F_KSTACK) | (1u << AGG_F_USTACK));
	}
	x->bio = key;
	x->q_ns = sl->q_ns;
	return 0;
}

/* The disk's in-flight count before this request, raised by one. */
static __always_inline __u64 inflight_raise(__u32 dev)
{
	struct agg_disk *d = lookup_or_init(&disk_state, &dev, &zero_disk);
	__s64 before;

	if (!d)
		return 0;
	before = __sync_fetch_and_add(&d->inflight, 1);
	return before > 0 ? before : 0;
}

static __always_inline void inflight_lower(__u32 dev)
{
	struct agg_disk *d = bpf_map_lookup_elem(&disk_state, &dev);

	if (d && d->inflight > 0)
		__sync_fetch_and_add(&d->inflight, -1);
}

static __always_inline int agg_rq_issue(struct request *rq, const bool btf)
{
	struct bio *bio = IOS_READ(btf, rq, bio);
	struct agg_extra *x;
	__u32 dev;

	rqpath_rq_issue(rq, AGG_MAX_CHAIN, btf);
	if (!NEED(AGG_F_INFLIGHT) || !bio)
		return 0; /* bio-less flush requests: flush_rq_issued() */
	dev = rq_dev(rq, btf);
	if (!dev_wanted(dev))
		return 0;
	x = extra_of(ptr_value(bio, btf));
	if (!x || (x->have & (1u << AGG_F_INFLIGHT)))
		return 0; /* not in view, or a requeued request issued again */
	x->inflight = inflight_raise(dev);
	x->have |= 1u << AGG_F_INFLIGHT;
	return 0;
}

/* ---- the hooks of the shared path (rqpath.bpf.h) ---- */

static __always_inline __u32 tgid_filter(void)
{
	return targ_tgid;
}

static __always_inline bool dev_probed(__u32 dev)
{
	return stamps_probed(dev);
}

static __always_inline void note_comm(struct last_q *last, __u32 tgid)
{
	if (NEED(AGG_F_COMM0) && last->tgid != tgid)
		comms_note(tgid);
}

static __always_inline void flush_rq_issued(struct request *rq, __u32 dev, __u64 now, const bool btf)
{
	struct agg_rq rs = {};
	__u64 key;

	if (targ_tgid || targ_cgroup)
		return; /* no submitter to match the filter against */
	key = ptr_value(rq, btf);
	rs.d_ns = now;
	rs.inflight = NEED(AGG_F_INFLIGHT) ? inflight_raise(dev) : 0;
	if (map_update(&rq_starts, &key, &rs, BPF_ANY))
		stat_inc(IOS_LOST_RQ_FULL);
}

static __always_inline struct agg_rec *rec_start(__u32 dev, __u8 op, __u32 flags)
{
	__u32 src = AGG_SRC_IO;
	struct agg_rec *r = bpf_map_lookup_elem(&recs, &src);

	if (!r)
		return NULL;
	__builtin_memset(r, 0, sizeof(*r));
	r->f[AGG_F_DISK] = dev;
	r->f[AGG_F_OP] = op;
	r->f[AGG_F_FLAGS] = flags & TC_SHOWN;
	r->have = (1u << AGG_F_DISK) | (1u << AGG_F_OP) | (1u << AGG_F_FLAGS) | (1u << AGG_F_PID) |
		  (1u << AGG_F_TGID) | (1u << AGG_F_CGROUP) | (1u << AGG_F_CPU) | (1u << AGG_F_SIZE) |
		  (1u << AGG_F_BYTES) | (1u << AGG_F_KSTACK) | (1u << AGG_F_USTACK) | (1u << AGG_F_FILE);
	return r;
}

static __always_inline void flush_rq_done(struct request *rq, __u32 dev, __u8 op, __u64 now, const bool btf)
{
	__u64 key = ptr_value(rq, btf);
	struct agg_rq *rs = bpf_map_lookup_elem(&rq_starts, &key);
	__u32 opf = IOS_READ(btf, rq, cmd_flags);
	struct agg_rec *r;

	/* issued before tracing, or issued with a -p/-c filter set: not counted; without the issue
	 * program (no expression reads a time from issue) every flush request is counted, untimed */
	if (!rs && (targ_issue || targ_tgid || targ_cgroup))
		return;
	r = rec_start(dev, op, opf_to_tc(opf));
	if (r && rs) {
		r->f[AGG_F_D2C] = now - rs->d_ns;
		r->have |= 1u << AGG_F_D2C;
		if (NEED(AGG_F_INFLIGHT)) {
			r->f[AGG_F_INFLIGHT] = rs->inflight;
			r->have |= 1u << AGG_F_INFLIGHT;
		}
	}
	if (r)
		agg_eval(r->have, AGG_SRC_IO, AGG_SRC_IO);
	if (!rs)
		return;
	map_delete(&rq_starts, &key, false);
	if (NEED(AGG_F_INFLIGHT))
		inflight_lower(dev);
}

/* One bio's record; first: the request's first bio (its d2c, and the request's state in cur). */
static __always_inline void bio_rec(struct bio_slot *sl, __u32 dev, __u8 op, __u32 opf, __u32 size, __u64 d_ns,
				    bool first, bool d2c, __u64 now)
{
	__u32 zero = 0;
	struct cur_rq *cur = bpf_map_lookup_elem(&cur_rqs, &zero);
	struct agg_extra *x;
	struct agg_rec *r;
	__u64 q_ns;

	if (!cur)
		return;
	if (!sl) {
		stat_inc(IOS_STAT_C_NOENTRY);
		if (first)
			cur->have = cur->issued = 0;
		return;
	}
	x = NEED_EXTRAS ? extra_of(sl->bio) : NULL;
	if (first) {
		cur->issued = sl->d_ns != 0;
		cur->have = x ? x->have & (1u << AGG_F_INFLIGHT) : 0;
		cur->inflight = x ? x->inflight : 0;
	}
	if (targ_cgroup && (!x || x->cg_out))
		return; /* -c: charged to another cgroup (or its details were lost: not known to be in it) */
	r = rec_start(dev, op, opf_to_tc(opf));
	if (!r)
		return;
	q_ns = sl->q_ns;
	r->f[AGG_F_TGID] = sl->tgid;
	r->f[AGG_F_SIZE] = size;
	r->f[AGG_F_BYTES] = size;
	if (x) {
		rec_extras(r, x);
	} else if (q_ns && NEED_EXTRAS) {
		stat_inc(AGG_STAT_NO_EXTRA);
	}
	if (q_ns) {
		r->f[AGG_F_Q2C] = now - q_ns;
		r->have |= 1u << AGG_F_Q2C;
	}
	if (q_ns && d_ns) {
		r->f[AGG_F_Q2D] = d_ns - q_ns;
		r->have |= 1u << AGG_F_Q2D;
	}
	if (d2c && d_ns) {
		r->f[AGG_F_D2C] = now - d_ns;
		r->have |= 1u << AGG_F_D2C;
	}
	if (cur->have) {
		r->f[AGG_F_INFLIGHT] = cur->inflight;
		r->have |= 1u << AGG_F_INFLIGHT;
	}
	agg_eval(r->have, AGG_SRC_IO, AGG_SRC_IO);
}

static __always_inline void bio_done(struct request *rq, struct bio_slot *sl, __u32 dev, __u8 op, __u32 size,
				     int i, bool whole, __u64 now, const bool btf)
{
	__u32 opf = IOS_READ(btf, rq, cmd_flags);
	__u64 d_ns = sl ? sl->d_ns : 0;

	/* the empty PREFLUSH write, never issued itself: timed from when it became a request (as lat) */
	if (sl && i == 0 && whole && !d_ns && sl->q_ns) {
		__u64 start = rq_start_ns(rq, btf);

		d_ns = start > sl->q_ns ? start : sl->q_ns;
	}
	bio_rec(sl, dev, op, opf, size, d_ns, i == 0, i == 0 && whole, now);
}

static __always_inline void bio_done_rest(struct bio_slot *sl, __u64 bio, __u32 dev, __u8 op, __u32 opf, __u32 size,
					  __u64 now)
{
	bio_rec(sl, dev, op, opf, size, sl ? sl->d_ns : 0, false, false, now);
}

static __always_inline void rq_done(struct request *rq, __u32 dev, __u8 op, __u64 first_q, __u64 now,
				    const bool btf)
{
	__u32 zero = 0;
	struct cur_rq *cur;

	if (!NEED(AGG_F_INFLIGHT))
		return;
	cur = bpf_map_lookup_elem(&cur_rqs, &zero);
	if (cur && cur->have)
		inflight_lower(dev);
}

/* A request ended on a disk the kernel stamps: one record, per request (stamps.bpf.h). */
static __always_inline int agg_stamps_done(struct request *rq, unsigned int nr_bytes, __u32 dev, const bool btf)
{
	struct stamps st;
	struct agg_rec *r;
	__u64 now;
	int kind = stamps_read(rq, nr_bytes, btf, &st);

	if (kind == STAMPS_SKIP)
		return 0;
	if (kind == STAMPS_NONE) {
		not_stamped(dev);
		return 0;
	}
	now = bpf_ktime_get_ns();
	r = rec_start(dev, st.op, opf_to_tc(st.opf));
	if (!r)
		return 0;
	r->f[AGG_F_SIZE] = st.bytes;
	r->f[AGG_F_BYTES] = st.bytes;
	r->f[AGG_F_D2C] = now - st.io;
	r->have |= 1u << AGG_F_D2C;
	if (kind == STAMPS_REQUEST) {
		r->f[AGG_F_Q2C] = now - st.start;
		r->f[AGG_F_Q2D] = st.io - st.start;
		r->have |= (1u << AGG_F_Q2C) | (1u << AGG_F_Q2D);
	}
	agg_eval(r->have, AGG_SRC_IO, AGG_SRC_IO);
	return 0;
}

static __always_inline int agg_rq_complete(struct request *rq, unsigned int nr_bytes, const bool btf)
{
	if (targ_stamps) {
		__u32 dev = rq_dev(rq, btf);

		if (!dev_wanted(dev))
			return 0;
		if (!stamps_probed(dev))
			return agg_stamps_done(rq, nr_bytes, dev, btf);
	}
	return rqpath_rq_complete(rq, nr_bytes, AGG_MAX_CHAIN, bpf_ktime_get_ns(), btf);
}

/* The programs: the shared path (rqpath.bpf.h) and this object's additions, with an issue program. */
/* ---- I/O waits (iowait.bpf.h): one record per wait that ended, for the expressions that read iowait ---- */

/* Where the thread blocked (its stacks, taken now: it is the current task) and its name, as the
 * expressions ask; -p: only its waits. */
static __always_inline bool iowait_began(void *ctx, struct iowait_start *s)
{
	if (!targ_waits || (targ_tgid && s->tgid != targ_tgid))
		return false;
	if (targ_wait_need & (1u << AGG_F_KSTACK)) {
		long id = bpf_get_stackid(ctx, &stacks, 0);

		if (id >= 0)
			s->kstack = id;
		else
			stat_inc(AGG_LOST_STACK);
	}
	if (targ_wait_need & (1u << AGG_F_USTACK)) {
		long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);

		if (id >= 0)
			s->ustack = id;
		else if (id == -EEXIST)
			stat_inc(AGG_LOST_STACK);
	}
	if (targ_wait_need & (1u << AGG_F_COMM0))
		comms_note(s->tgid);
	return true;
}

static __always_inline void iowait_ended(const struct iowait_start *s, __u32 tid, __u64 ns)
{
	__u32 zero = 0, level, slot;
	__u32 *nest = bpf_map_lookup_elem(&wait_nest, &zero);
	struct agg_rec *r;

	if (!nest)
		return;
	level = *nest;
	if (level >= AGG_WAIT_LEVELS) {
		stat_inc(IOS_LOST_IOWAIT_FULL); /* not reached: a wait not counted */
		return;
	}
	slot = AGG_SRC_WAIT + level;
	r = bpf_map_lookup_elem(&recs, &slot);
	if (!r)
		return;
	*nest = level + 1;
	__builtin_memset(r, 0, sizeof(*r));
	r->f[AGG_F_PID] = tid;
	r->f[AGG_F_TGID] = s->tgid;
	r->f[AGG_F_CGROUP] = s->cgroup;
	r->f[AGG_F_KSTACK] = s->kstack >= 0 ? (__u64)s->kstack + 1 : 0;
	r->f[AGG_F_USTACK] = s->ustack >= 0 ? (__u64)s->ustack + 1 : 0;
	r->f[AGG_F_IOWAIT] = ns;
	r->f[AGG_F_SWAPIN] = ns;
	r->have = (1u << AGG_F_PID) | (1u << AGG_F_TGID) | (1u << AGG_F_CGROUP) | (1u << AGG_F_KSTACK) |
		  (1u << AGG_F_USTACK) | (1u << AGG_F_IOWAIT);
	/* swapin: a value of the swap-ins only (sum(swapin) is their time, quantize(swapin) their
	 * distribution); s->swapin is 0 unless an expression reads it (targ_swapin_fns set) */
	if (s->swapin)
		r->have |= 1u << AGG_F_SWAPIN;
	agg_eval(r->have, AGG_SRC_WAIT, slot);
	*nest = level;
}

#include "iowait.bpf.h"

IOS_BLOCK_TP(bio_queue, block_bio_queue, agg_bio_queue(ctx, bio, btf), struct bio *bio)
IOS_BLOCK_TP(split, block_split, agg_split(bio, btf), struct bio *bio)
IOS_BLOCK_TP(rq_issue, block_rq_issue, agg_rq_issue(rq, btf), struct request *rq)
IOS_TP(rq_complete, block_rq_complete, agg_rq_complete(rq, nr_bytes, btf), struct request *rq, int error,
       unsigned int nr_bytes)


COMMS_RENAME_PROGRAMS

THROTTLE_NOTE_PROGRAM

IOWAIT_PROGRAMS

char LICENSE[] SEC("license") = "Dual BSD/GPL";
