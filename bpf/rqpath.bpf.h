/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one path lat and top share for following bios into requests and
 * requests to their end: queue (a slot per bio, the remainder of a split),
 * issue (lat only) and completion (the bio chain walk, partial completions,
 * the flush sequence, flush requests without bios). The objects differ only
 * in what they add up, through hooks they define (after including this):
 *
 *   static __always_inline void note_comm(struct last_q *last, __u32 tgid);
 *       the queue program, before it updates this CPU's last_q: remember
 *       the queueing process's name.
 *   static __always_inline void flush_rq_done(struct request *rq, __u32 dev, __u8 op, __u64 now, const bool btf);
 *       a request without bios ended: the flush machinery's flush request.
 *   static __always_inline void bio_done(struct request *rq, struct bio_slot *sl, __u32 dev, __u8 op,
 *                                        __u32 size, int i, bool whole, __u64 now, const bool btf);
 *       the first bio of the request (i is 0) is ended (sl: its slot, NULL if
 *       its queue was not seen); whole: the request ends with it (once per
 *       request, what /proc/diskstats counts, is i == 0 && whole).
 *   static __always_inline void bio_done_rest(struct bio_slot *sl, __u32 dev, __u8 op, __u32 opf,
 *                                             __u32 size, __u64 now);
 *       a later bio of the chain is ended (called from a global function:
 *       no request, the request's cmd_flags in opf).
 *   static __always_inline void rq_done(struct request *rq, __u32 dev, __u8 op, __u64 first_q, __u64 now,
				    const bool btf);
 *       after the walk of a request that ended whole (first_q: its first
 *       bio's queue time, 0 if unknown).
 * and, with RQPATH_ISSUE defined (lat):
 *   static __always_inline void flush_rq_issued(struct request *rq, __u32 dev, __u64 now, const bool btf);
 *
 * Optional before including: RQPATH_PROBED(dev), whether the queue and issue
 * programs follow this disk's bios (default: every disk; lat leaves the disks
 * whose requests the kernel timestamps to its completion program alone), and
 * RQPATH_COMPLETE, the function the completion programs call (default
 * rqpath_rq_complete; lat's picks between the kernel's stamps and this path).
 *
 * Before including: RQPATH_MAX_CHAIN (bios walked per request),
 * RQPATH_TGID (the -p process filter, 0 for none; an expression) and
 * RQPATH_COMPLETE_NOW (the completion time the hooks get as now: top's
 * bpf_ktime_get_ns(), read once per completion; lat's 0, its record() reads
 * the clock itself).
 *
 * The flush sequence, as the kernel counts it (/proc/diskstats): on a disk
 * with a volatile write cache, a write with PREFLUSH or FUA (when the disk has
 * no FUA) is done as flush request(s) of the block layer's own (no bio,
 * REQ_OP_FLUSH, counted as flushes), the data step of the write (a
 * completion with its bytes while RQF_FLUSH_SEQ is set: not counted) and the
 * end of the write's request (a 0-byte completion, flag cleared: one write).
 * An empty PREFLUSH write (fsync's cache flush) is a flush request and the
 * end of the write, which is never issued itself. Here: a request without
 * bios is a flush request; a completion with RQF_FLUSH_SEQ and bios is a
 * data step and ends nothing; everything else ends its bios.
 *
 * Each body takes btf, a constant: tp_btf programs read kernel memory with
 * direct (BTF-checked) loads, raw_tp programs with bpf_probe_read_kernel().
 * Include after common.bpf.h, comms.bpf.h and inflight.bpf.h.
 */
#ifndef RQPATH_BPF_H
#define RQPATH_BPF_H

#ifndef RQPATH_PROBED
#define RQPATH_PROBED(dev) true
#endif
#ifndef RQPATH_COMPLETE
#define RQPATH_COMPLETE rqpath_rq_complete
#endif

static __always_inline void note_comm(struct last_q *last, __u32 tgid);
static __always_inline void flush_rq_done(struct request *rq, __u32 dev, __u8 op, __u64 now, const bool btf);
static __always_inline void bio_done(struct request *rq, struct bio_slot *sl, __u32 dev, __u8 op, __u32 size,
				     int i, bool whole, __u64 now, const bool btf);
static __always_inline void rq_done(struct request *rq, __u32 dev, __u8 op, __u64 first_q, __u64 now,
				    const bool btf);
static __always_inline void bio_done_rest(struct bio_slot *sl, __u32 dev, __u8 op, __u32 opf, __u32 size, __u64 now);

static __always_inline int rqpath_bio_queue(struct bio *bio, const bool btf)
{
	struct gendisk *disk = btf ? bio_disk_direct(bio) : bio_disk(bio);
	struct last_q *last;
	struct bio_slot *sl;
	__u32 zero = 0, dev;
	__u64 key, now;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!disk || !(btf ? disk_is_mq_direct(disk) : disk_is_mq(disk)))
		return 0;
	if (RQPATH_TGID && tgid != RQPATH_TGID)
		return 0;
	dev = btf ? disk_dev_direct(disk) : disk_dev(disk);
	if (!dev_wanted(dev) || !RQPATH_PROBED(dev))
		return 0;
	key = btf ? ptr_value(bio) : (__u64)bio;
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
			sl->d_ns = SLOT_QUEUED_D_NS(btf ? bio->bi_opf : BPF_CORE_READ(bio, bi_opf));
			sl->tgid = tgid;
			sl->dev = dev;
		}
	} else {
		slot_put(key, now, SLOT_QUEUED_D_NS(btf ? bio->bi_opf : BPF_CORE_READ(bio, bi_opf)), tgid, dev);
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

#ifdef RQPATH_ISSUE
static __always_inline void flush_rq_issued(struct request *rq, __u32 dev, __u64 now, const bool btf);

/* The issue time of every bio of the request (q2d ends, d2c starts). */
static __always_inline int rqpath_rq_issue(struct request *rq, const bool btf)
{
	__u64 now = bpf_ktime_get_ns();
	struct bio *bio = btf ? rq->bio : BPF_CORE_READ(rq, bio);
	__u32 dev = btf ? disk_dev_direct(rq_disk_direct(rq)) : disk_dev(rq_disk(rq));
	struct bio_slot *sl;
	__u64 key;
	int i;

	if (!dev_wanted(dev) || !RQPATH_PROBED(dev))
		return 0;
	if (!bio) {
		flush_rq_issued(rq, dev, now, btf);
		return 0;
	}
	key = btf ? ptr_value(bio) : (__u64)bio;
	if (!slot_get(key)) {
		if (RQPATH_TGID)
			return 0; /* queued by another process, or before tracing */
		/* queued before tracing started: d2c only */
		slot_put(key, 0, now, 0, dev);
		stat_inc(IOS_INFLIGHT_AT_START);
		return 0;
	}
	for (i = 0; i < RQPATH_MAX_CHAIN && bio; i++) {
		key = btf ? ptr_value(bio) : (__u64)bio;
		sl = slot_get(key);
		/* a requeued request is issued again: q2d runs to its first issue */
		if (sl && !sl->d_ns)
			sl->d_ns = now;
		bio = btf ? bio->bi_next : BPF_CORE_READ(bio, bi_next);
	}
	return 0;
}
#endif /* RQPATH_ISSUE */

/*
 * The bios of a request after its first, one call each: a global function,
 * which the verifier checks once on its own, with scalar arguments only (all a
 * 5.10 global function may take). Walked inline, a chain of RQPATH_MAX_CHAIN
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
	bio_done_rest(sl, (__u32)(dev_op >> 8), (__u8)dev_op, (__u32)(opf_size >> 32), (__u32)opf_size, now);
	if (sl)
		sl->bio = 0; /* free the slot */
	return 0;
}

static __always_inline int rqpath_rq_complete(struct request *rq, unsigned int nr_bytes, const bool btf)
{
	__u64 now = RQPATH_COMPLETE_NOW;
	struct bio *bio = btf ? rq->bio : BPF_CORE_READ(rq, bio);
	__u32 dev = btf ? disk_dev_direct(rq_disk_direct(rq)) : disk_dev(rq_disk(rq));
	__u32 opf = btf ? rq->cmd_flags : BPF_CORE_READ(rq, cmd_flags);
	__u32 rq_bytes = btf ? rq->__data_len : BPF_CORE_READ(rq, __data_len);
	__u32 rq_flags = btf ? rq->rq_flags : BPF_CORE_READ(rq, rq_flags);
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
	size = btf ? bio->bi_iter.bi_size : BPF_CORE_READ(bio, bi_iter.bi_size);
	/*
	 * The end of a flush sequence: its bio's iterator was advanced over the data
	 * at the data step, so its size reads 0 now. Such a request is never merged
	 * (REQ_NOMERGE_FLAGS), so its one bio's size is the request's, which the
	 * kernel keeps in rq->stats_sectors when it issues a request on a queue that
	 * keeps I/O statistics (QUEUE_FLAG_STATS: wbt, on by default, bfq, iocost,
	 * iolatency). An empty PREFLUSH write is never issued: 0 stays 0.
	 */
	if (!size && whole && bpf_core_field_exists(rq->stats_sectors))
		size = (__u32)(btf ? rq->stats_sectors : BPF_CORE_READ(rq, stats_sectors)) << 9;
	/* a partial completion ends only the bios it fully covers */
	if (!whole && size > nr_bytes)
		return 0;
	done = size;
	key = btf ? ptr_value(bio) : (__u64)bio;
	sl = slot_get(key);
	if (sl)
		first_q = sl->q_ns;
	bio_done(rq, sl, dev, op, size, 0, whole, now, btf);
	if (sl)
		sl->bio = 0; /* free the slot */
	bio = btf ? bio->bi_next : BPF_CORE_READ(bio, bi_next);
	/* the rest of the chain */
	for (i = 1; i < RQPATH_MAX_CHAIN && bio; i++) {
		size = btf ? bio->bi_iter.bi_size : BPF_CORE_READ(bio, bi_iter.bi_size);
		if (!whole && done + size > nr_bytes)
			break;
		done += size;
		key = btf ? ptr_value(bio) : (__u64)bio;
		rqpath_bio_rest(key, (__u64)dev << 8 | op, (__u64)opf << 32 | size, now);
		bio = btf ? bio->bi_next : BPF_CORE_READ(bio, bi_next);
	}
	if (!whole)
		return 0; /* the rest of the request is counted when it ends */
	if (bio)
		stat_inc(IOS_LOST_CHAIN_LONG);
	rq_done(rq, dev, op, first_q, now, btf);
	return 0;
}

/* The programs of the queue and completion hooks (split: inflight.bpf.h), as tp_btf and raw_tp,
 * for both signatures of the queue and split tracepoints (core_fixes.bpf.h: IOS_BLOCK_TP). */
#define RQPATH_CALL_QUEUE(btf) rqpath_bio_queue(bio, btf)
#define RQPATH_CALL_SPLIT(btf) slot_split(bio, btf)
#define RQPATH_PROGRAMS							\
IOS_BLOCK_TP(bio_queue, block_bio_queue, RQPATH_CALL_QUEUE, struct bio *bio) \
IOS_BLOCK_TP(split, block_split, RQPATH_CALL_SPLIT, struct bio *bio)	\
SEC("tp_btf/block_rq_complete")						\
int BPF_PROG(btf_rq_complete, struct request *rq, int error, unsigned int nr_bytes) \
{									\
	return RQPATH_COMPLETE(rq, nr_bytes, true);			\
}									\
SEC("raw_tp/block_rq_complete")						\
int BPF_PROG(raw_rq_complete, struct request *rq, int error, unsigned int nr_bytes) \
{									\
	return RQPATH_COMPLETE(rq, nr_bytes, false);			\
}

#endif /* RQPATH_BPF_H */
