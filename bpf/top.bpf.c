// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope top: per-process and per-disk block I/O counters and latency
 * histograms, aggregated in the kernel and read (and emptied) once per
 * refresh by user space. Nothing is sent to user space per event.
 *
 *  - procs: key (tgid, dev, op) of the process that QUEUED the bio (the
 *    process in context at completion is usually someone else: an interrupt,
 *    a kworker, the loop worker). Value: bios and bytes completed, and the
 *    bio's queue-to-completion latency histogram. A bio queued before
 *    tracing started is counted under tgid 0 without latency.
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

#define MAX_CHAIN 128

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* struct bio * */
	__type(value, struct bio_start);
} starts SEC(".maps");

/* Shared (not per-CPU): per-CPU copies of thousands of histograms would cost
 * ncpus x 2.5 KiB per key. hist_add() uses atomic adds. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct top_proc_key);
	__type(value, struct top_proc_val);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 512);
	__type(key, struct top_disk_key);
	__type(value, struct hist);
} disks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, char[16]);
} comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, IOS_NR_STATS);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* The last bio queued on this CPU: a split bio inherits its queue time. */
struct top_last_q {
	__u64 bio;
	__u64 q_ns;
	__u32 tgid;
	__u32 dev;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct top_last_q);
} last_queued SEC(".maps");

static struct top_proc_val zero_proc;
static struct hist zero_hist;

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);

	if (v)
		__sync_fetch_and_add(v, 1);
}

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

static __always_inline int on_bio_queue(struct bio *bio)
{
	struct gendisk *disk = bio_disk(bio);
	struct bio_start s = {};
	struct top_last_q *last;
	__u32 zero = 0;
	__u64 key = (__u64)bio;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!disk || !disk_is_mq(disk))
		return 0;
	s.q_ns = bpf_ktime_get_ns();
	s.tgid = tgid;
	s.dev = disk_dev(disk);
	/* NOEXIST: a bio resubmitted after a split keeps its first queue time */
	if (bpf_map_update_elem(&starts, &key, &s, BPF_NOEXIST) == -7 /* E2BIG */)
		stat_inc(IOS_LOST_START_FULL);
	last = bpf_map_lookup_elem(&last_queued, &zero);
	if (last) {
		last->bio = key;
		last->q_ns = s.q_ns;
		last->tgid = tgid;
		last->dev = s.dev;
	}
	/* the name at queue time; updated when it changes (exec) */
	{
		__u64 comm[2] = {};
		__u64 *old;

		bpf_get_current_comm(comm, sizeof(comm));
		old = bpf_map_lookup_elem(&comms, &tgid);
		if (!old || old[0] != comm[0] || old[1] != comm[1])
			bpf_map_update_elem(&comms, &tgid, comm, BPF_ANY);
	}
	return 0;
}

static __always_inline int on_split(struct bio *bio)
{
	struct bio_start s = {};
	struct top_last_q *last;
	__u32 zero = 0;
	__u64 key = (__u64)bio;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	last = bpf_map_lookup_elem(&last_queued, &zero);
	if (!last || !last->bio || last->tgid != tgid || last->dev != disk_dev(bio_disk(bio)))
		return 0;
	s.q_ns = last->q_ns;
	s.tgid = tgid;
	s.dev = last->dev;
	if (bpf_map_update_elem(&starts, &key, &s, BPF_NOEXIST) == -7)
		stat_inc(IOS_LOST_START_FULL);
	stat_inc(IOS_STAT_SPLIT);
	return 0;
}

static __always_inline int on_rq_complete(struct request *rq, unsigned int nr_bytes)
{
	__u64 now = bpf_ktime_get_ns();
	struct bio *bio = BPF_CORE_READ(rq, bio);
	__u32 dev = disk_dev(rq_disk(rq));
	__u32 opf = BPF_CORE_READ(rq, cmd_flags);
	__u32 rq_bytes = BPF_CORE_READ(rq, __data_len);
	__u64 rq_start = rq_start_ns(rq);
	__u8 op = opf_to_op(opf, rq_bytes);
	struct bio_start *s;
	__u64 key, done = 0, first_q = 0;
	bool whole = nr_bytes >= rq_bytes;
	int i;

	for (i = 0; i < MAX_CHAIN && bio; i++) {
		__u32 size = BPF_CORE_READ(bio, bi_iter.bi_size);

		/* a partial completion ends only the bios it fully covers */
		if (!whole && done + size > nr_bytes)
			break;
		done += size;
		key = (__u64)bio;
		s = bpf_map_lookup_elem(&starts, &key);
		if (s) {
			if (i == 0)
				first_q = s->q_ns;
			proc_add(s->tgid, dev, op, size, now - s->q_ns, true);
			bpf_map_delete_elem(&starts, &key);
		} else {
			proc_add(0, dev, op, size, 0, false);
			stat_inc(IOS_INFLIGHT_AT_START);
		}
		bio = BPF_CORE_READ(bio, bi_next);
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
	return on_bio_queue(bio);
}

SEC("tp_btf/block_split")
int BPF_PROG(btf_split, struct bio *bio)
{
	return on_split(bio);
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(btf_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, nr_bytes);
}

SEC("raw_tp/block_bio_queue")
int BPF_PROG(raw_bio_queue, struct bio *bio)
{
	return on_bio_queue(bio);
}

SEC("raw_tp/block_split")
int BPF_PROG(raw_split, struct bio *bio)
{
	return on_split(bio);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(raw_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, nr_bytes);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
