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
 *  - the wait, where fentry on throtl_add_bio_tg loads (not under lockdown): the hold's start, noted
 *    per bio (fn_throtl_add) and read back at the queue event (throttle_wait).
 *
 * throttle_at_queue() adds both, per (cgroup, disk), to throttle_stats, read and emptied by user space
 * (lib/ioscope/engines/context/throttle.py). The thr_queue program runs it alone (lat, top attach it,
 * with the workqueue pair, only once a limit is in force on a traced disk: THROTTLE_HELD_PROGRAMS); agg
 * reads throttle_wait from its own queue program (its `throttle` value). THROTTLE_NOTE_PROGRAM is the
 * fentry program, in every object that includes this.
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

static struct throttle_val throttle_zero;

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

/* At a bio's queue event on a traced disk: was it held, and how long (throttle_stats). */
static __always_inline void throttle_at_queue(struct bio *bio, __u32 dev, const bool btf)
{
	__u32 zero = 0, tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *worker = bpf_map_lookup_elem(&throtl_worker, &zero);
	bool held = worker && *worker && *worker == tid;
	__u64 wait = throttle_wait(bio, btf);
	struct throttle_key key = {};
	struct throttle_val *v;
	struct cgroup *cg;

	if (!held && !wait)
		return;
	cg = bio_blkg_cgroup(bio);
	if (!cgroup_wanted(cg))
		return; /* -c: charged to another cgroup */
	key.cgroup = cgroup_kn_id(cg);
	key.dev = dev;
	v = lookup_or_init(&throttle_stats, &key, &throttle_zero);
	if (!v) {
		stat_inc(IOS_LOST_HIST_FULL);
		return;
	}
	__sync_fetch_and_add(&v->held, 1);
	if (wait)
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
		bpf_map_update_elem(&throttled, &key, &t, BPF_NOEXIST);                         \
		return 0;                                                                      \
	}

#endif /* THROTTLE_BPF_H */
