// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ioscope lat: in-kernel log-linear histograms of block I/O latency in three
 * phases: q2c (bio queued -> request completed), q2d (queued -> issued to the
 * driver) and d2c (issued -> completed). Nothing is sent to user space per
 * event; user space reads the histogram map once per interval.
 *
 * Per-bio state is keyed by the bio pointer (unique while the bio is in
 * flight, and never ambiguous across disks the way a sector is). At issue and
 * completion the request's bio chain is walked, so every bio merged into a
 * request gets its own q2d and q2c (btt counts the same way), while d2c is
 * counted once per request (what /proc/diskstats counts).
 *
 * Each handler exists twice, as tp_btf and raw_tp; user space autoloads one
 * set, chosen from what the kernel's BTF offers.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "core_fixes.bpf.h"
#include "hist.bpf.h"
#include "common.bpf.h"
#include "comms.bpf.h"

#define MAX_CHAIN 32

const volatile bool targ_per_disk = false;
const volatile bool targ_per_op = false;
const volatile bool targ_per_pid = false;
const volatile __u32 targ_tgid = 0;
const volatile __u8 targ_phases = 0x7; /* bit per enum ios_lat_phase */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* struct bio * */
	__type(value, struct bio_start);
} starts SEC(".maps");

/* Requests without bios (the flush machinery's flush_rq): issue time. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* struct request * */
	__type(value, struct bio_start);
} rq_starts SEC(".maps");

/* User space switches this to a shared BPF_MAP_TYPE_HASH for -P. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct lat_key);
	__type(value, struct hist);
} hists SEC(".maps");

/* The last bio queued on this CPU: a bio split right after being queued
 * inherits its queue time (block_split names only the new bio). */
struct last_q {
	__u64 bio;
	__u64 q_ns;
	__u32 tgid;
	__u32 dev;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct last_q);
} last_queued SEC(".maps");

static struct hist zero_hist;

/*
 * A global (not inlined) function: the verifier checks it once, on its own,
 * instead of once per call site inside the bio-chain loops. That cut the
 * load time of this object from ~0.3 s to a few tens of ms.
 */
__noinline int record(__u32 dev, __u32 tgid, __u32 op, __u32 phase, __u64 delta)
{
	struct lat_key key = {};
	struct hist *h;
	long err;

	if (phase >= IOS_NR_PHASES || !(targ_phases & (1 << phase)))
		return 0;
	key.dev = targ_per_disk ? dev : 0;
	key.pid = targ_per_pid ? tgid : 0;
	key.op = targ_per_op ? op : IOS_OP_ALL;
	key.phase = phase;
	h = bpf_map_lookup_elem(&hists, &key);
	if (!h) {
		err = bpf_map_update_elem(&hists, &key, &zero_hist, BPF_NOEXIST);
		if (err && err != -17 /* EEXIST: another CPU won the race */) {
			stat_inc(IOS_LOST_HIST_FULL);
			return 0;
		}
		h = bpf_map_lookup_elem(&hists, &key);
		if (!h) {
			stat_inc(IOS_LOST_HIST_FULL);
			return 0;
		}
	}
	hist_add(h, delta);
	return 0;
}

static __always_inline int on_bio_queue(struct bio *bio)
{
	struct gendisk *disk = bio_disk(bio);
	struct bio_start s = {};
	struct last_q *last;
	__u32 zero = 0, dev;
	__u64 key = (__u64)bio;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	long err;

	if (!disk || !disk_is_mq(disk))
		return 0;
	if (targ_tgid && tgid != targ_tgid)
		return 0;
	dev = disk_dev(disk);
	if (!dev_wanted(dev))
		return 0;
	s.q_ns = bpf_ktime_get_ns();
	s.tgid = tgid;
	s.dev = dev;
	last = bpf_map_lookup_elem(&last_queued, &zero);
	err = bpf_map_update_elem(&starts, &key, &s, BPF_NOEXIST);
	if (err == -17 /* EEXIST */) {
		struct bio_start *old = bpf_map_lookup_elem(&starts, &key);

		/*
		 * The remainder of a bio split right after it was queued comes back
		 * here at once: it keeps its first queue time. Any other entry is
		 * left over from an earlier bio at the same address whose
		 * completion we did not see: replace it in place.
		 */
		if (old && last && last->bio == key && !old->d_ns) {
			stat_inc(IOS_STAT_REQUEUED);
		} else if (old) {
			/* issued but its completion never reached us: a lost measurement */
			stat_inc(old->d_ns ? IOS_LOST_C_UNSEEN : IOS_STAT_NEVER_ISSUED);
			old->q_ns = s.q_ns;
			old->d_ns = 0;
			old->tgid = tgid;
			old->dev = dev;
		}
	} else if (err == -7 /* E2BIG */) {
		stat_inc(IOS_LOST_START_FULL);
	} else if (err) {
		stat_inc(IOS_LOST_START_FAILED);
	}
	if (last) {
		last->bio = key;
		last->q_ns = s.q_ns;
		last->tgid = tgid;
		last->dev = dev;
	}
	if (targ_per_pid) {
		char comm[16];

		bpf_get_current_comm(comm, sizeof(comm));
		bpf_map_update_elem(&comms, &tgid, comm, BPF_ANY);
	}
	return 0;
}

static __always_inline int on_split(struct bio *bio)
{
	struct bio_start s = {};
	struct last_q *last;
	__u32 zero = 0;
	__u64 key = (__u64)bio;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gendisk *disk = bio_disk(bio);

	last = bpf_map_lookup_elem(&last_queued, &zero);
	if (!last || !last->bio || last->tgid != tgid || last->dev != disk_dev(disk))
		return 0;
	s.q_ns = last->q_ns;
	s.tgid = tgid;
	s.dev = last->dev;
	if (bpf_map_update_elem(&starts, &key, &s, BPF_NOEXIST) == -7)
		stat_inc(IOS_LOST_START_FULL);
	stat_inc(IOS_STAT_SPLIT);
	return 0;
}

static __always_inline int on_rq_issue(struct request *rq)
{
	__u64 now = bpf_ktime_get_ns();
	struct bio *bio = BPF_CORE_READ(rq, bio);
	__u32 dev = disk_dev(rq_disk(rq));
	__u32 opf = BPF_CORE_READ(rq, cmd_flags);
	__u8 op = opf_to_op(opf, BPF_CORE_READ(rq, __data_len));
	struct bio_start *s;
	__u64 key;
	int i;

	if (!dev_wanted(dev))
		return 0;
	if (!bio) {
		struct bio_start rs = {};

		if (targ_tgid)
			return 0; /* no submitter to match the filter against */
		key = (__u64)rq;
		rs.d_ns = now;
		rs.dev = dev;
		if (bpf_map_update_elem(&rq_starts, &key, &rs, BPF_ANY))
			stat_inc(IOS_LOST_RQ_FULL);
		return 0;
	}
	key = (__u64)bio;
	s = bpf_map_lookup_elem(&starts, &key);
	if (!s) {
		struct bio_start ns = {};

		if (targ_tgid)
			return 0; /* queued by another process, or before tracing */
		/* queued before tracing started: d2c only */
		ns.d_ns = now;
		ns.dev = dev;
		if (bpf_map_update_elem(&starts, &key, &ns, BPF_NOEXIST) == -7)
			stat_inc(IOS_LOST_START_FULL);
		stat_inc(IOS_INFLIGHT_AT_START);
		return 0;
	}
	for (i = 0; i < MAX_CHAIN && bio; i++) {
		key = (__u64)bio;
		s = bpf_map_lookup_elem(&starts, &key);
		/* a requeued request is issued again: keep its q2d from the first issue */
		if (s && !s->d_ns) {
			s->d_ns = now;
			if (s->q_ns)
				record(dev, s->tgid, op, IOS_PHASE_Q2D, now - s->q_ns);
		}
		bio = BPF_CORE_READ(bio, bi_next);
	}
	if (bio)
		stat_inc(IOS_LOST_CHAIN_LONG);
	return 0;
}

static __always_inline int on_rq_complete(struct request *rq, unsigned int nr_bytes)
{
	__u64 now = bpf_ktime_get_ns();
	struct bio *bio = BPF_CORE_READ(rq, bio);
	__u32 dev = disk_dev(rq_disk(rq));
	__u32 opf = BPF_CORE_READ(rq, cmd_flags);
	__u32 rq_bytes = BPF_CORE_READ(rq, __data_len);
	__u8 op = opf_to_op(opf, rq_bytes);
	struct bio_start *s;
	__u64 key, done = 0;
	bool whole = nr_bytes >= rq_bytes;
	int i;

	if (!dev_wanted(dev))
		return 0;
	if (!bio) {
		key = (__u64)rq;
		s = bpf_map_lookup_elem(&rq_starts, &key);
		if (s) {
			record(dev, 0, op, IOS_PHASE_D2C, now - s->d_ns);
			bpf_map_delete_elem(&rq_starts, &key);
		}
		return 0;
	}
	for (i = 0; i < MAX_CHAIN && bio; i++) {
		__u32 size = BPF_CORE_READ(bio, bi_iter.bi_size);

		/* a partial completion ends only the bios it fully covers */
		if (!whole && done + size > nr_bytes)
			break;
		done += size;
		key = (__u64)bio;
		s = bpf_map_lookup_elem(&starts, &key);
		if (s) {
			/* d2c once per request, from the first bio's issue time */
			if (i == 0 && whole && s->d_ns)
				record(dev, s->tgid, op, IOS_PHASE_D2C, now - s->d_ns);
			if (s->q_ns)
				record(dev, s->tgid, op, IOS_PHASE_Q2C, now - s->q_ns);
			if (bpf_map_delete_elem(&starts, &key))
				stat_inc(IOS_STAT_DEL_FAILED);
		} else {
			stat_inc(IOS_STAT_C_NOENTRY);
		}
		bio = BPF_CORE_READ(bio, bi_next);
	}
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

SEC("tp_btf/block_rq_issue")
int BPF_PROG(btf_rq_issue, struct request *rq)
{
	return on_rq_issue(rq);
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

SEC("raw_tp/block_rq_issue")
int BPF_PROG(raw_rq_issue, struct request *rq)
{
	return on_rq_issue(rq);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(raw_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, nr_bytes);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
