// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope top: per-process and per-disk block I/O counters and latency
 * histograms, aggregated in the kernel and read (and emptied) once per
 * refresh by user space. Nothing is sent to user space per event.
 *
 *  - procs: key (tgid, dev, op) of the process that QUEUED the bio (the
 *    process in context at completion is usually someone else: an interrupt,
 *    a kworker, the loop worker), per-CPU. Value: bios and bytes completed,
 *    and the bio's queue-to-completion latency histogram. A bio queued
 *    before tracing started is counted under tgid 0 without latency.
 *  - inflight: the queue time and process of each bio in flight, in a
 *    direct-mapped array indexed by a hash of the bio pointer: a plain store
 *    at queue and a load at completion, no hash-map locking per I/O.
 *  - disks: key (dev, op), per-CPU. Latency of each completed request from
 *    the kernel's own request start time (rq->start_time_ns, the time
 *    /proc/diskstats measures await from), so this side needs no per-I/O
 *    map; when the kernel did not stamp the request, the first bio's queue
 *    time is used.
 *
 * Each handler exists as tp_btf and raw_tp; the loader picks one per hook.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "hist.bpf.h"
#include "common.bpf.h"
#include "comms.bpf.h"
#include "inflight.bpf.h"

#define MAX_CHAIN 64
#define STALE_NS (120ULL * 1000000000ULL)


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

static __always_inline void *lookup_or_init(void *map, void *key, void *zero)
{
	void *v = bpf_map_lookup_elem(map, key);
	long err;

	if (v)
		return v;
	err = bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: another CPU won the race */)
		return NULL;
	return bpf_map_lookup_elem(map, key);
}

static __always_inline void proc_add(__u32 tgid, __u32 dev, __u8 op, __u32 bytes, __u64 lat, bool timed)
{
	struct top_proc_key key = {};
	struct top_proc_val *v;

	key.tgid = tgid;
	key.dev = dev;
	key.op = op;
	v = lookup_or_init(&procs, &key, &zero_proc);
	if (!v) {
		stat_inc(IOS_LOST_HIST_FULL);
		return;
	}
	__sync_fetch_and_add(&v->ios, 1);
	__sync_fetch_and_add(&v->bytes, bytes);
	if (timed)
		hist_add(&v->lat, lat);
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
	hist_add(h, lat);
}






/* btf: the program is tp_btf (direct loads); a constant, so each variant
 * keeps only its own kind of access. */
static __always_inline int on_bio_queue(struct bio *bio, const bool btf)
{
	struct gendisk *disk = btf ? bio_disk_direct(bio) : bio_disk(bio);
	struct last_q *last;
	__u32 zero = 0, dev;
	__u64 key = btf ? ptr_value(bio) : (__u64)bio, now;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!disk || !(btf ? disk_is_mq_direct(disk) : disk_is_mq(disk)))
		return 0;
	now = bpf_ktime_get_ns();
	dev = btf ? disk_dev_direct(disk) : disk_dev(disk);
	slot_put(key, now, tgid, dev);
	last = bpf_map_lookup_elem(&last_queued, &zero);
	if (!last)
		return 0;
	/* the name at queue time, looked at when this CPU sees another process */
	if (last->tgid != tgid)
		comms_note(tgid);
	last->bio = key;
	last->q_ns = now;
	last->tgid = tgid;
	last->dev = dev;
	return 0;
}

static __always_inline int on_rq_complete(struct request *rq, unsigned int nr_bytes, const bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	struct bio *bio = btf ? rq->bio : BPF_CORE_READ(rq, bio);
	__u32 dev = btf ? disk_dev_direct(rq_disk_direct(rq)) : disk_dev(rq_disk(rq));
	__u32 opf = btf ? rq->cmd_flags : BPF_CORE_READ(rq, cmd_flags);
	__u32 rq_bytes = btf ? rq->__data_len : BPF_CORE_READ(rq, __data_len);
	__u64 rq_start = btf ? rq_start_ns_direct(rq) : rq_start_ns(rq);
	__u32 rq_flags = btf ? rq->rq_flags : BPF_CORE_READ(rq, rq_flags);
	__u8 op = opf_to_op(opf, rq_bytes);
	struct bio_slot *sl;
	__u64 key, done = 0, first_q = 0;
	bool whole = nr_bytes >= rq_bytes;
	int i;

	if (rq_flush_seq(rq_flags))
		return 0; /* its data step: counted when the flush sequence ends */
	for (i = 0; i < MAX_CHAIN && bio; i++) {
		__u32 size = btf ? bio->bi_iter.bi_size : BPF_CORE_READ(bio, bi_iter.bi_size);

		/* a partial completion ends only the bios it fully covers */
		if (!whole && done + size > nr_bytes)
			break;
		done += size;
		key = btf ? ptr_value(bio) : (__u64)bio;
		sl = slot_get(key);
		if (sl) {
			__u64 q = sl->q_ns;
			__u32 tgid = sl->tgid;

			sl->bio = 0;
			if (i == 0)
				first_q = q;
			proc_add(tgid, dev, op, size, now - q, true);
		} else {
			proc_add(0, dev, op, size, 0, false);
			stat_inc(IOS_INFLIGHT_AT_START);
		}
		bio = btf ? bio->bi_next : BPF_CORE_READ(bio, bi_next);
	}
	if (bio && whole)
		stat_inc(IOS_LOST_CHAIN_LONG);
	if (!whole)
		return 0; /* the request's latency is counted when it ends */
	if (rq_start && rq_start <= now)
		disk_add(dev, op, now - rq_start);
	else if (first_q)
		disk_add(dev, op, now - first_q);
	return 0;
}

SEC("tp_btf/block_bio_queue")
int BPF_PROG(btf_bio_queue, struct bio *bio)
{
	return on_bio_queue(bio, true);
}

SEC("tp_btf/block_split")
int BPF_PROG(btf_split, struct bio *bio)
{
	return slot_split(bio, true);
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(btf_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, nr_bytes, true);
}

SEC("raw_tp/block_bio_queue")
int BPF_PROG(raw_bio_queue, struct bio *bio)
{
	return on_bio_queue(bio, false);
}

SEC("raw_tp/block_split")
int BPF_PROG(raw_split, struct bio *bio)
{
	return slot_split(bio, false);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(raw_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, nr_bytes, false);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

COMMS_RENAME_PROGRAMS
