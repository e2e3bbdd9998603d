// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope top: per-process and per-disk block I/O counters and latency
 * histograms, aggregated in the kernel and read (and emptied) once per
 * refresh by user space. Nothing is sent to user space per event.
 *
 *  - procs: key (tgid, dev, op, cgroup) of the process that QUEUED the bio (the
 *    process in context at completion is usually someone else: an interrupt,
 *    a kworker, the loop worker), per-CPU. Value: bios and bytes completed,
 *    and the bio's queue-to-completion latency histogram. A bio queued
 *    before tracing started is counted under tgid 0 without latency. The
 *    cgroup (with the cgroup view, or -c) is the one the bio is charged to,
 *    read from the bio at its completion (cgroup.bpf.h): a kworker that
 *    queues a throttled or written-back bio gets a row per cgroup it served.
 *  - inflight: the queue time and process of each bio in flight, in a
 *    direct-mapped array indexed by a hash of the bio pointer: a plain store
 *    at queue and a load at completion, no hash-map locking per I/O.
 *  - disks: key (dev, op), per-CPU. Latency of each completed request from
 *    the kernel's own request start time (rq->start_time_ns, the time
 *    /proc/diskstats measures await from), so this side needs no per-I/O
 *    map; when the kernel did not stamp the request, the first bio's queue
 *    time is used.
 *
 * Each handler exists as tp_btf and raw_tp (twins.bpf.h); the loader picks one
 * per hook. There is no issue program: a bio that can end only by completing
 * is marked at queue (inflight.bpf.h: slot_queued_d_ns).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "twins.bpf.h"
#include "core_fixes.bpf.h"
#include "block.bpf.h"
#include "hist.bpf.h"
#include "common.bpf.h"
#include "comms.bpf.h"
#include "inflight.bpf.h"
#include "rqpath.bpf.h"
#include "cgroup.bpf.h"
#include "throttle.bpf.h"

/* iowait.bpf.h's hooks: the name of a process that blocks (it may queue no I/O of its own); every
 * thread's waits added up (IO>, kernel/iowait.py) */
struct iowait_start;
static __always_inline bool iowait_began(void *ctx, struct iowait_start *s);
static __always_inline void iowait_ended(const struct iowait_start *s, __u32 tid, __u64 ns);
#include "iowait.bpf.h"

static __always_inline bool iowait_began(void *ctx, struct iowait_start *s)
{
	comms_note(s->tgid);
	return true;
}

static __always_inline void iowait_ended(const struct iowait_start *s, __u32 tid, __u64 ns)
{
	iowait_add_total(s, tid, ns);
}

#define TOP_MAX_CHAIN 64 /* bios of a request walked */

const volatile bool targ_per_cgroup = false; /* the cgroup view: procs keyed by cgroup too */


/* Per-CPU: no cache line is shared between CPUs on the I/O path. User space
 * sizes it from the number of CPUs (entries x CPUs x 2.5 KiB). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 2048);
	__type(key, struct top_proc_key);
	__type(value, struct top_proc_val);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 512);
	__type(key, struct top_disk_key);
	__type(value, struct hist);
} disks SEC(".maps");


static struct top_proc_val zero_proc;
static struct hist zero_hist;

static __always_inline void proc_add(struct bio *bio, __u32 tgid, __u32 dev, __u8 op, __u32 bytes, __u64 lat,
				     bool timed)
{
	struct top_proc_key key = {};
	struct top_proc_val *v;

	if (!bio_cgroup_pass(bio, targ_per_cgroup, &key.cgroup))
		return; /* -c: charged to another cgroup */
	key.tgid = tgid;
	key.dev = dev;
	key.op = op;
	v = lookup_or_init(&procs, &key, &zero_proc);
	if (!v) {
		stat_inc(IOS_LOST_HIST_FULL);
		return;
	}
	/* per-CPU, written by the completion program alone, which the kernel
	 * never runs nested on one CPU: plain adds, no locked instructions */
	v->ios += 1;
	v->bytes += bytes;
	if (timed)
		hist_add_local(&v->lat, lat);
}

static __always_inline void disk_add(__u32 dev, __u8 op, __u64 lat)
{
	struct top_disk_key key = {};
	struct hist *h;

	key.dev = dev;
	key.op = op;
	h = lookup_or_init(&disks, &key, &zero_hist);
	if (!h) {
		stat_inc(IOS_LOST_HIST_FULL);
		return;
	}
	hist_add_local(h, lat); /* per-CPU, one writer (as in proc_add) */
}

/* The hooks of the shared path (rqpath.bpf.h). */

static __always_inline __u32 tgid_filter(void)
{
	return 0; /* every process */
}

static __always_inline bool dev_probed(__u32 dev)
{
	return true; /* every disk: the queue program follows every bio */
}

static __always_inline void note_comm(struct last_q *last, __u32 tgid)
{
	/* the name at queue time, looked at when this CPU sees another process */
	if (last->tgid != tgid)
		comms_note(tgid);
}

static __always_inline void flush_rq_issued(struct request *rq, __u32 dev, __u64 now, const bool btf)
{
	/* no issue program */
}

/* A flush request of the flush machinery: the disk's, no process's. */
static __always_inline void flush_rq_done(struct request *rq, __u32 dev, __u8 op, __u64 now, const bool btf)
{
	/* the flush machinery stamps its flush requests' start and accounts their time in
	 * /proc/diskstats whatever the disk's iostats (RQF_IO_STAT is not set on them) */
	__u64 rq_start = rq_start_ns(rq, btf);

	if (rq_start && rq_start <= now)
		disk_add(dev, op, now - rq_start);
}

static __always_inline void bio_done_rest(struct bio_slot *sl, __u64 bio, __u32 dev, __u8 op, __u32 opf, __u32 size,
					  __u64 now)
{
	if (sl) {
		proc_add((struct bio *)bio, sl->tgid, dev, op, size, now - sl->q_ns, true);
	} else {
		proc_add((struct bio *)bio, 0, dev, op, size, 0, false);
		stat_inc(IOS_INFLIGHT_AT_START);
	}
}

static __always_inline void bio_done(struct request *rq, struct bio_slot *sl, __u32 dev, __u8 op, __u32 size,
				     int i, bool whole, __u64 now, const bool btf)
{
	bio_done_rest(sl, (__u64)IOS_READ(btf, rq, bio), dev, op, 0, size, now);
}

static __always_inline void rq_done(struct request *rq, __u32 dev, __u8 op, __u64 first_q, __u64 now,
				    const bool btf)
{
	__u64 rq_start = rq_start_if_stamped(rq, btf);

	if (rq_start && rq_start <= now)
		disk_add(dev, op, now - rq_start);
	else if (first_q)
		disk_add(dev, op, now - first_q);
}

/* The programs: the shared path (rqpath.bpf.h), without an issue program (issue_prog false). */
IOS_BLOCK_TP(bio_queue, block_bio_queue, rqpath_bio_queue(bio, false, btf), struct bio *bio)
IOS_BLOCK_TP(split, block_split, slot_split(bio, false, btf), struct bio *bio)
IOS_TP(rq_complete, block_rq_complete, rqpath_rq_complete(rq, nr_bytes, TOP_MAX_CHAIN, bpf_ktime_get_ns(), btf),
       struct request *rq, int error, unsigned int nr_bytes)

/* the time each thread is blocked in I/O waits (iowait.bpf.h): IO> */
IOWAIT_PROGRAMS

/* bios blk-throttle held (throttle.bpf.h): attached once a limit is in force on a traced disk */
THROTTLE_HELD_PROGRAMS
THROTTLE_SUBMIT_PROGRAMS
THROTTLE_NOTE_PROGRAM

char LICENSE[] SEC("license") = "Dual BSD/GPL";

COMMS_RENAME_PROGRAMS
