/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one path lat, top and agg share for following bios into requests and requests to their
 * end: queue (a slot per bio, the remainder of a split), issue (lat, agg) and completion (the bio
 * chain walk, partial completions, the flush sequence, flush requests without bios). The objects
 * differ only in what they add up, through the hooks below, which each object that includes
 * this header defines, and in the arguments of its calls:
 *
 *   rqpath_bio_queue(bio, issue_prog, btf)                  block_bio_queue
 *   rqpath_rq_issue(rq, max_chain, btf)                     block_rq_issue (lat, agg)
 *   rqpath_rq_complete(rq, nr_bytes, max_chain, now, btf)   block_rq_complete
 *   slot_split(bio, issue_prog, btf) (inflight.bpf.h)       block_split
 *
 * issue_prog: the object has an issue program (inflight.bpf.h: slot_queued_d_ns); max_chain: the
 * bios of a request walked, a constant; now: the completion time the hooks get (top's
 * bpf_ktime_get_ns(), read once per completion; lat's 0: its record() reads the clock itself);
 * btf: the program's constant (twins.bpf.h).
 *
 * The flush sequence, as the kernel counts it (/proc/diskstats): on a disk with a volatile write
 * cache, a write with PREFLUSH or FUA (when the disk has no FUA) is done as flush request(s) of
 * the block layer's own (no bio, REQ_OP_FLUSH, counted as flushes), the data step of the write (a
 * completion with its bytes while RQF_FLUSH_SEQ is set: not counted) and the end of the write's
 * request (a 0-byte completion, flag cleared: one write). An empty PREFLUSH write (fsync's cache
 * flush) is a flush request and the end of the write, which is never issued itself. Here: a
 * request without bios is a flush request; a completion with RQF_FLUSH_SEQ and bios is a data
 * step and ends nothing; everything else ends its bios.
 */
#ifndef RQPATH_BPF_H
#define RQPATH_BPF_H

#include "common.bpf.h"
#include "block.bpf.h"
#include "inflight.bpf.h"

/*
 * The hooks, defined by the object:
 *   tgid_filter(): the process -p follows (its const volatile global), 0 for every process.
 *   dev_probed(dev): whether the queue and issue programs follow this disk's bios (lat and agg
 *       leave the disks whose requests the kernel stamps to their completion program:
 *       stamps.bpf.h; top follows every disk).
 *   note_comm(last, tgid): the queue program, before it updates this CPU's last_q: remember the
 *       queueing process's name.
 *   flush_rq_issued(rq, dev, now, btf): a request without bios (the flush machinery's flush
 *       request) was issued (empty in an object without an issue program).
 *   flush_rq_done(rq, dev, op, now, btf): such a request ended.
 *   bio_done(rq, sl, dev, op, size, i, whole, now, btf): the first bio of the request (i is 0) is
 *       ended (sl: its slot, NULL if its queue was not seen); whole: the request ends with it
 *       (once per request, what /proc/diskstats counts, is i == 0 && whole).
 *   bio_done_rest(sl, bio, dev, op, opf, size, now): a later bio of the chain is ended (called from
 *       a global function: no request, the request's cmd_flags in opf; bio: the bio's address, to
 *       read it while it lives, e.g. its cgroup).
 *   rq_done(rq, dev, op, first_q, now, btf): after the walk of a request that ended whole
 *       (first_q: its first bio's queue time, 0 if unknown).
 */
static __always_inline __u32 tgid_filter(void);
static __always_inline bool dev_probed(__u32 dev);
static __always_inline void note_comm(struct last_q *last, __u32 tgid);
static __always_inline void flush_rq_issued(struct request *rq, __u32 dev, __u64 now, const bool btf);
static __always_inline void flush_rq_done(struct request *rq, __u32 dev, __u8 op, __u64 now, const bool btf);
static __always_inline void bio_done(struct request *rq, struct bio_slot *sl, __u32 dev, __u8 op, __u32 size,
				     int i, bool whole, __u64 now, const bool btf);
static __always_inline void bio_done_rest(struct bio_slot *sl, __u64 bio, __u32 dev, __u8 op, __u32 opf, __u32 size,
					  __u64 now);
static __always_inline void rq_done(struct request *rq, __u32 dev, __u8 op, __u64 first_q, __u64 now,
				    const bool btf);

static __always_inline int rqpath_bio_queue(struct bio *bio, bool issue_prog, const bool btf)
{
	struct gendisk *disk = bio_disk(bio, btf);
	struct last_q *last;
	struct bio_slot *sl;
	__u32 zero = 0, dev;
	__u64 key, now;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!disk || !disk_is_mq(disk, btf))
		return 0;
	if (tgid_filter() && tgid != tgid_filter())
		return 0;
	dev = disk_dev(disk, btf);
	if (!dev_wanted(dev) || !dev_probed(dev))
		return 0;
	key = ptr_value(bio, btf);
	now = bpf_ktime_get_ns();
	last = bpf_map_lookup_elem(&last_queued, &zero);
	sl = slot_get(key);
	if (sl) {
		/*
		 * The remainder of a bio split right after it was queued comes back
		 * here at once: it keeps its first queue time. Any other slot still
		 * holding this address is left over from an earlier bio whose
		 * completion never reached us: a lost measurement if it was issued
		 * (or, in a tool without an issue program, could end only by
		 * completing: SLOT_ENDS_IN_RQ).
		 */
		if (last && last->bio == key && sl->d_ns <= SLOT_ENDS_IN_RQ) {
			stat_inc(IOS_STAT_REQUEUED);
		} else {
			stat_inc(sl->d_ns ? IOS_LOST_C_UNSEEN : IOS_STAT_NEVER_ISSUED);
			sl->q_ns = now;
			sl->d_ns = slot_queued_d_ns(bio, issue_prog, btf);
			sl->tgid = tgid;
			sl->dev = dev;
		}
	} else {
		slot_put(key, now, slot_queued_d_ns(bio, issue_prog, btf), tgid, dev);
	}
	if (last) {
		note_comm(last, tgid);
		last->bio = key;
		last->q_ns = now;
		last->tgid = tgid;
		last->dev = dev;
	}
	return 0;
}

/* The issue time of every bio of the request (q2d ends, d2c starts). */
static __always_inline int rqpath_rq_issue(struct request *rq, int max_chain, const bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	struct bio *bio = IOS_READ(btf, rq, bio);
	__u32 dev = rq_dev(rq, btf);
	struct bio_slot *sl;
	__u64 key;
	int i;

	if (!dev_wanted(dev) || !dev_probed(dev))
		return 0;
	if (!bio) {
		flush_rq_issued(rq, dev, now, btf);
		return 0;
	}
	key = ptr_value(bio, btf);
	if (!slot_get(key)) {
		if (tgid_filter())
			return 0; /* queued by another process, or before tracing */
		/* queued before tracing started: d2c only */
		slot_put(key, 0, now, 0, dev);
		stat_inc(IOS_INFLIGHT_AT_START);
		return 0;
	}
	for (i = 0; i < max_chain && bio; i++) {
		key = ptr_value(bio, btf);
		sl = slot_get(key);
		/* a requeued request is issued again: q2d runs to its first issue */
		if (sl && !sl->d_ns)
			sl->d_ns = now;
		bio = IOS_READ(btf, bio, bi_next);
	}
	return 0;
}

/*
 * The bios of a request after its first, one call each: a global function,
 * which the verifier checks once on its own, with scalar arguments only (all a
 * 5.10 global function may take). Walked inline, a chain of max_chain
 * bios made the verifier of 6.1 explore every path of every bio (over a
 * million instructions at 32 bios, 254,000 at 8; 6.18's prunes them to 28,000).
 * dev_op: dev << 8 | op; opf_size: the request's cmd_flags << 32 | the bio's size.
 */
__noinline int rqpath_bio_rest(__u64 key, __u64 dev_op, __u64 opf_size, __u64 now)
{
	struct bio_slot *sl;

	/* every argument used: one the hooks ignore (lat's now) would be left unset by the
	 * compiler, which the verifier refuses ("R4 is not a scalar") */
	barrier_var(now);
	sl = slot_get(key);
	bio_done_rest(sl, key, (__u32)(dev_op >> 8), (__u8)dev_op, (__u32)(opf_size >> 32), (__u32)opf_size, now);
	if (sl)
		sl->bio = 0; /* free the slot */
	return 0;
}

static __always_inline int rqpath_rq_complete(struct request *rq, unsigned int nr_bytes, int max_chain, __u64 now,
					      const bool btf)
{
	struct bio *bio = IOS_READ(btf, rq, bio);
	__u32 dev = rq_dev(rq, btf);
	__u32 opf = IOS_READ(btf, rq, cmd_flags);
	__u32 rq_bytes = IOS_READ(btf, rq, __data_len);
	__u32 rq_flags = IOS_READ(btf, rq, rq_flags);
	__u8 op = opf_to_op(opf, rq_bytes);
	struct bio_slot *sl;
	__u64 key, done, first_q = 0;
	bool whole = nr_bytes >= rq_bytes;
	__u32 size;
	int i;

	if (!dev_wanted(dev))
		return 0;
	/* no bio: a flush request (it too has RQF_FLUSH_SEQ set) */
	if (!bio) {
		flush_rq_done(rq, dev, op, now, btf);
		return 0;
	}
	/* the data step of a flush sequence: its bios end, and the write is
	 * counted, when the sequence ends the request */
	if (rq_flush_seq(rq_flags))
		return 0;
	/* the first bio, with the request's own measurements (d2c once per request) */
	size = IOS_READ(btf, bio, bi_iter.bi_size);
	/*
	 * The end of a flush sequence: its bio's iterator was advanced over the data
	 * at the data step, so its size reads 0 now. Such a request is never merged
	 * (REQ_NOMERGE_FLAGS), so its one bio's size is the request's, which the
	 * kernel keeps in rq->stats_sectors when it issues a request on a queue that
	 * keeps I/O statistics (QUEUE_FLAG_STATS: wbt, on by default, bfq, iocost,
	 * iolatency). An empty PREFLUSH write is never issued: 0 stays 0.
	 */
	if (!size && whole)
		size = rq_stats_bytes(rq, btf);
	/* a partial completion ends only the bios it fully covers */
	if (!whole && size > nr_bytes)
		return 0;
	done = size;
	key = ptr_value(bio, btf);
	sl = slot_get(key);
	if (sl)
		first_q = sl->q_ns;
	bio_done(rq, sl, dev, op, size, 0, whole, now, btf);
	if (sl)
		sl->bio = 0; /* free the slot */
	bio = IOS_READ(btf, bio, bi_next);
	/* the rest of the chain */
	for (i = 1; i < max_chain && bio; i++) {
		size = IOS_READ(btf, bio, bi_iter.bi_size);
		if (!whole && done + size > nr_bytes)
			break;
		done += size;
		key = ptr_value(bio, btf);
		rqpath_bio_rest(key, (__u64)dev << 8 | op, (__u64)opf << 32 | size, now);
		bio = IOS_READ(btf, bio, bi_next);
	}
	if (!whole)
		return 0; /* the rest of the request is counted when it ends */
	if (bio)
		stat_inc(IOS_LOST_CHAIN_LONG);
	rq_done(rq, dev, op, first_q, now, btf);
	return 0;
}

#endif /* RQPATH_BPF_H */
