/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * throttle.bpf.h: bios blk-throttle held back, for every object that shows latency (agg, lat, top).
 *
 * A bio that a cgroup's I/O limit (v1 blkio.throttle.*, v2 io.max) holds waits in blk-throttle before
 * the block layer's queue event, and is then queued by the throttle's kworker: its wait is in no q2c,
 * and the queueing task is not the submitter (docs/design/containers.md, section 1).
 *
 *  - held, exactly, with tracepoints only (allowed under lockdown): the queue event runs inside
 *    blk-throttle's dispatch work. workqueue_execute_start/_end mark this CPU's thread while the work
 *    function is blk_throtl_dispatch_work_fn (its address from /proc/kallsyms: targ_throtl_work_fn);
 *    a queue event on the marked thread is a bio the throttle held.
 *  - the wait and the submitter, where fentry on throtl_add_bio_tg loads (not under lockdown): the
 *    hold's start, noted per bio (fn_throtl_add) and read back at the queue event (throttle_wait).
 *  - the wait and the submitter where fentry is refused (THROTTLE_SUBMIT_PROGRAMS, tracepoints only):
 *    a note taken in the submitter's context when the bio is made or sent, found again at the queue
 *    event by an address the bio gives: its allocation from a bio slab (kmem_cache_alloc: libaio,
 *    io_uring, file system direct I/O, writeback; key: the bio minus its bio_set's front_pad), its
 *    partition remap (block_bio_remap, before the throttle: key the bio), or, for a bio on its
 *    submitter's stack (synchronous O_DIRECT on a block device), the syscall that made it (sys_enter
 *    of a task in a limited cgroup: key the task's stack base, the bio's address rounded down to the
 *    stack size). A held bio's wait is its queue time minus its note's; the note is a few µs before
 *    the hold begins (docs/design/containers.md, section 1.2 d). A bio with none of these (an io_uring
 *    bio recycled from the per-CPU cache, one built long before it is sent) is counted held with its
 *    wait not measured.
 *
 * throttle_at_queue() adds both, per (cgroup, disk, submitter), to throttle_stats, read and emptied by
 * user space (lib/ioscope/engines/context/throttle.py). The thr_queue program runs it alone (lat, top
 * attach it, with the workqueue pair and the note programs, only once a limit is in force on a traced
 * disk: THROTTLE_HELD_PROGRAMS, THROTTLE_SUBMIT_PROGRAMS); agg reads throttle_wait from its own queue
 * program (its `throttle` value, fentry only). THROTTLE_NOTE_PROGRAM is the fentry program, in every
 * object that includes this.
 */
#ifndef THROTTLE_BPF_H
#define THROTTLE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "ioscope.h"
#include "common.bpf.h"
#include "hist.bpf.h"
#include "cgroup.bpf.h"

const volatile bool targ_throttle = false;        /* fn_throtl_add is attached: each hold's start is noted */
const volatile __u64 targ_throtl_work_fn = 0;     /* blk_throtl_dispatch_work_fn's address; 0: not known */
const volatile bool targ_submit_notes = false;    /* the submit-note programs stand in for fn_throtl_add */
const volatile __u64 targ_stack_size = 16384;     /* THREAD_SIZE: an on-stack bio is in its task's stack */
const volatile __u64 targ_mempool_lo = 0;         /* 5.10: mempool_alloc's text [lo, hi), the call site */
const volatile __u64 targ_mempool_hi = 0;         /* of a bio_set's allocations (sn_alloc_site) */
const volatile __u64 targ_sys_nrs[8] = {};        /* the syscalls that may make an on-stack bio (bit set) */

/* The holds fn_throtl_add noted, until their queue event: LRU, so that a bio that never reaches it (an
 * error, a device going away) ages out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct bio * */
	__type(value, struct throttle_note);
} throttled SEC(".maps");

/* This CPU's thread while it runs blk-throttle's dispatch work (0: none). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} throtl_worker SEC(".maps");

/* Held bios per (cgroup, disk), shared (few keys, few updates: only held bios come here). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct throttle_key);
	__type(value, struct throttle_val);
} throttle_stats SEC(".maps");

/* The slab caches (struct kmem_cache *) the allocation program has met: 1 for a bio slab (its name
 * begins "bio-": a bio_set's, bioset_init), 0 for another; its name is read once per cache. Preallocated
 * (a hash map's default): an update allocates nothing, so never re-enters kmem_cache_alloc. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} bio_slabs SEC(".maps");

/* The cgroups (ids of the io controller's hierarchy) in or under one with a limit on a traced disk,
 * written by user space: the syscall program notes only their tasks. Key 0: every task. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} limited_cgroups SEC(".maps");

static struct throttle_val throttle_zero;

static __always_inline void submit_note(__u64 key)
{
	struct throttle_note n = {.ts = bpf_ktime_get_ns()};
	__u64 id = bpf_get_current_pid_tgid();

	n.pid = (__u32)id;
	n.tgid = id >> 32;
	bpf_get_current_comm(n.comm, sizeof(n.comm));
	bpf_map_update_elem(&throttled, &key, &n, BPF_ANY);
}

/* kmem_cache_alloc (6.1 on: the cache is an argument): an object of a bio slab. */
static __always_inline int note_alloc(__u64 ptr, __u64 cache)
{
	__u8 *is_bio = bpf_map_lookup_elem(&bio_slabs, &cache), bio;
	char name[4] = {};

	if (!ptr || !cache)
		return 0;
	if (!is_bio) {
		bpf_probe_read_kernel(name, sizeof(name), BPF_CORE_READ((struct kmem_cache *)cache, name));
		bio = name[0] == 'b' && name[1] == 'i' && name[2] == 'o' && name[3] == '-';
		bpf_map_update_elem(&bio_slabs, &cache, &bio, BPF_NOEXIST);
		is_bio = &bio;
	}
	if (*is_bio)
		submit_note(ptr);
	return 0;
}

/* kmem_cache_alloc (5.10: no cache argument): an allocation from mempool_alloc, which a bio_set's is
 * (mempool_alloc_slab tail-calls kmem_cache_alloc, so the call site is in mempool_alloc). */
static __always_inline int note_alloc_site(__u64 site, __u64 ptr)
{
	if (ptr && site >= targ_mempool_lo && site < targ_mempool_hi)
		submit_note(ptr);
	return 0;
}

/* A syscall that may put a bio on its task's stack, by a task in a limited cgroup. */
static __always_inline int note_syscall(long nr)
{
	__u64 cg, any = 0, stack;
	struct task_struct *task;

	if (nr < 0 || nr >= 512 || !(targ_sys_nrs[(nr >> 6) & 7] >> (nr & 63) & 1))
		return 0;
	cg = cgroup_kn_id(task_io_cgroup());
	if (!bpf_map_lookup_elem(&limited_cgroups, &cg) && !bpf_map_lookup_elem(&limited_cgroups, &any))
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	stack = (__u64)BPF_CORE_READ(task, stack);
	if (stack)
		submit_note(stack);
	return 0;
}

/* At a queue event (submit notes): the bio's note into *n, found by its remap, its allocation or its
 * stack (false: none); the bio's own notes are taken out of the map, held or not, so that it keeps only
 * bios on their way to the queue. */
static __always_inline bool submit_note_of(struct bio *bio, const bool btf, bool held, struct throttle_note *n)
{
	__u64 key = ptr_value(bio, btf), obj = 0;
	struct bio_set *bs = IOS_READ(btf, bio, bi_pool);
	struct throttle_note *found;
	bool got = false;

	if (bs)
		obj = key - IOS_READ(btf, bs, front_pad);
	found = bpf_map_lookup_elem(&throttled, &key);
	if (found) {
		*n = *found;
		got = true;
		bpf_map_delete_elem(&throttled, &key);
	}
	if (obj) {
		found = bpf_map_lookup_elem(&throttled, &obj);
		if (found) {
			if (!got)
				*n = *found;
			got = true;
			bpf_map_delete_elem(&throttled, &obj);
		}
	}
	if (!got && !bs && held) {
		__u64 stack = key & ~(targ_stack_size - 1);

		found = bpf_map_lookup_elem(&throttled, &stack);
		if (found) {
			*n = *found;
			got = true;
		}
	}
	return got;
}

/* How long blk-throttle held the bio before this, its queue event (0: no hold noted). */
static __always_inline __u64 throttle_wait(struct bio *bio, const bool btf)
{
	__u64 key = ptr_value(bio, btf);
	struct throttle_note *t;
	__u64 wait;

	if (!targ_throttle)
		return 0;
	t = bpf_map_lookup_elem(&throttled, &key);
	if (!t)
		return 0;
	wait = bpf_ktime_get_ns() - t->ts;
	bpf_map_delete_elem(&throttled, &key);
	return wait;
}

/* At a bio's queue event on a traced disk: was it held, how long, and by whose submission (throttle_stats). */
static __always_inline void throttle_at_queue(struct bio *bio, __u32 dev, const bool btf)
{
	__u32 zero = 0, tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *worker = bpf_map_lookup_elem(&throtl_worker, &zero);
	bool held = worker && *worker && *worker == tid, noted = false;
	struct throttle_note n = {};
	struct throttle_key key = {};
	struct throttle_val *v;
	struct cgroup *cg;
	__u64 wait = 0;

	if (targ_throttle) {
		__u64 k = ptr_value(bio, btf);
		struct throttle_note *t = bpf_map_lookup_elem(&throttled, &k);

		if (t) {
			n = *t;
			noted = true;
			held = true; /* fentry notes only held bios */
			bpf_map_delete_elem(&throttled, &k);
		}
	} else if (targ_submit_notes) {
		noted = submit_note_of(bio, btf, held, &n);
	}
	if (!held)
		return;
	if (noted)
		wait = bpf_ktime_get_ns() - n.ts;
	cg = bio_blkg_cgroup(bio);
	if (!cgroup_wanted(cg))
		return; /* -c: charged to another cgroup */
	key.cgroup = cgroup_kn_id(cg);
	key.dev = dev;
	if (noted) {
		key.tgid = n.tgid;
		__builtin_memcpy(key.comm, n.comm, sizeof(key.comm));
	}
	v = lookup_or_init(&throttle_stats, &key, &throttle_zero);
	if (!v) {
		stat_inc(IOS_LOST_HIST_FULL);
		return;
	}
	__sync_fetch_and_add(&v->held, 1);
	if (noted)
		hist_add(&v->wait, wait);
}

static __always_inline int throttle_queue_prog(struct bio *bio, const bool btf)
{
	struct gendisk *disk = bio_disk(bio, btf);
	__u32 dev;

	if (!disk)
		return 0;
	dev = disk_dev(disk, btf);
	if (dev_wanted(dev))
		throttle_at_queue(bio, dev, btf);
	return 0;
}

#define THROTTLE_HELD_PROGRAMS                                                                      \
	IOS_BLOCK_TP(thr_queue, block_bio_queue, throttle_queue_prog(bio, btf), struct bio *bio) \
                                                                                               \
	SEC("tracepoint/workqueue/workqueue_execute_start")                                    \
	int tp_wq_start(struct trace_event_raw_workqueue_execute_start *ctx)                    \
	{                                                                                      \
		__u32 zero = 0, *w = bpf_map_lookup_elem(&throtl_worker, &zero);                \
                                                                                               \
		if (w && targ_throtl_work_fn && (__u64)ctx->function == targ_throtl_work_fn)        \
			*w = (__u32)bpf_get_current_pid_tgid();                                 \
		return 0;                                                                      \
	}                                                                                      \
                                                                                               \
	SEC("tracepoint/workqueue/workqueue_execute_end")                                      \
	int tp_wq_end(struct trace_event_raw_workqueue_execute_end *ctx)                        \
	{                                                                                      \
		__u32 zero = 0, *w = bpf_map_lookup_elem(&throtl_worker, &zero);                \
                                                                                               \
		if (w && *w == (__u32)bpf_get_current_pid_tgid())                               \
			*w = 0;                                                                \
		return 0;                                                                      \
	}

#define THROTTLE_NOTE_PROGRAM                                                                  \
	/* blk-throttle holding a bio back (block/blk-throttle.c: throtl_add_bio_tg, the same three \
	 * arguments in 5.10 to 6.18): its first hold is noted (a bio moved up a hierarchy is added \
	 * again, BPF_NOEXIST keeps the first), with the submitting task. A static function: fentry \
	 * only, where the kernel allows it (not under lockdown). */                            \
	SEC("fentry/throtl_add_bio_tg")                                                        \
	int BPF_PROG(fn_throtl_add, struct bio *bio)                                           \
	{                                                                                      \
		__u64 key = ptr_value(bio, true), id = bpf_get_current_pid_tgid();               \
		struct throttle_note t = {.ts = bpf_ktime_get_ns(), .pid = (__u32)id, .tgid = id >> 32}; \
                                                                                               \
		bpf_get_current_comm(t.comm, sizeof(t.comm));                                  \
		bpf_map_update_elem(&throttled, &key, &t, BPF_NOEXIST);                         \
		return 0;                                                                      \
	}

/* The submit notes, where fn_throtl_add cannot attach (the top of this file): attached with the held
 * programs, once a limit is in force. sn_alloc has the kmem_cache_alloc arguments of 6.1 on (the cache
 * third), sn_alloc_site those of 5.10 (bytes_req third): user space keeps the one the kernel's BTF
 * says (lib/ioscope/engines/context/throttle.py). Both raw_tp only: a tp_btf program may not read their
 * `const void *ptr` argument on 6.1 and 6.12 (the verifier: "arg1 type UNKNOWN is not a struct"; 6.18
 * allows it), and nothing here needs a typed pointer. */
#define THROTTLE_SUBMIT_PROGRAMS                                                                       \
	IOS_BLOCK_TP(sn_remap, block_bio_remap, (submit_note(ptr_value(bio, btf)), 0), struct bio *bio) \
	SEC("raw_tp/kmem_cache_alloc")                                                                 \
	int BPF_PROG(raw_sn_alloc, unsigned long call_site, const void *ptr, struct kmem_cache *s)    \
	{                                                                                             \
		return note_alloc((__u64)ptr, (__u64)s);                                              \
	}                                                                                             \
	SEC("raw_tp/kmem_cache_alloc")                                                                 \
	int BPF_PROG(raw_sn_alloc_site, unsigned long call_site, const void *ptr)                     \
	{                                                                                             \
		return note_alloc_site(call_site, (__u64)ptr);                                        \
	}                                                                                             \
	IOS_TP(sn_sys, sys_enter, note_syscall(nr), struct pt_regs *regs, long nr)

#endif /* THROTTLE_BPF_H */
